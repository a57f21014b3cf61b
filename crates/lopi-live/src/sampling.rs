//! Sampled time and `profile:` points at a detach: the threads' CPU-time timers (the
//! process's, for `profile:`) deleted and the action of their signal (`SAMPLE_SIGNAL`,
//! `SIGURG`; `SIGPROF`) put back before the runtime's handler is unmapped, so that no signal
//! reaches code that is gone; `SIGPROF`s that came while lopi held the threads are dropped.
use crate::error::LiveError;
use crate::glibc::LOPI_TCB_WORDS;
use crate::install::Installation;
use crate::target::{sys, Gadget, Target};
use lopi_rt_abi::{RuntimeVars, ThreadHeader, PAGE_SIZE, SAMPLE_SIGNAL, THREAD_MAGIC};
use std::mem::offset_of;

const SIG_IGN: u64 = 1;
const SIGPROF: u64 = 27;

impl Target {
    /// With sampled time in any timed module of `installation`: the signal ignored first
    /// (which also drops signals already pending), every live thread's timer deleted, then the
    /// action the runtime replaced put back (the default when none of these modules installed
    /// it), through a system-call gadget of its own. Timers of threads that have ended stay:
    /// their clocks are gone with them, so they never fire. A detach does it first, before it
    /// waits for threads to leave lopi's code: a thread whose timer still fired would be
    /// stopped again by each signal (the tracer holds signals back) and could stay inside for
    /// good.
    pub(crate) fn stop_sampling_of(&mut self, installation: &Installation) -> Result<(), LiveError> {
        let read = |at: u64| self.mem.read_u64(at).unwrap_or(0);
        let vars: Vec<u64> = installation.modules.iter().filter(|m| m.timed).map(|m| m.vars).collect();
        if !vars.iter().any(|&v| read(v + offset_of!(RuntimeVars, sample_hz) as u64) != 0) {
            return Ok(());
        }
        self.with_gadget(|target, _, gadget| target.stop_sampling(&vars, gadget))
    }

    fn stop_sampling(&mut self, vars: &[u64], gadget: Gadget) -> Result<(), LiveError> {
        let read = |at: u64| self.mem.read_u64(at).unwrap_or(0);
        let installer = vars.iter().copied().find(|&v| read(v + offset_of!(RuntimeVars, sample_handler_installed) as u64) != 0);
        let timers: Vec<u64> = self.threads.tids().into_iter().filter_map(|tid| self.sample_timer(tid)).collect();
        let old = installer.map(|v| v + offset_of!(RuntimeVars, sample_old_action) as u64);
        self.stop_timers(gadget, u64::from(SAMPLE_SIGNAL), &timers, old)
    }

    /// With `profile:` points in a module of `installation` whose runtime made the process's
    /// timer: `SIGPROF` ignored (dropping a sample already pending), the timer deleted, and the
    /// action the runtime replaced put back.
    pub(crate) fn stop_profile_of(&mut self, installation: &Installation) -> Result<(), LiveError> {
        let read = |at: u64| self.mem.read_u64(at).unwrap_or(0);
        let Some(vars) = installation.modules.iter().map(|m| m.vars).find(|&v| read(v + offset_of!(RuntimeVars, profile_timer) as u64) != 0) else {
            return Ok(());
        };
        let timer = read(vars + offset_of!(RuntimeVars, profile_timer) as u64) - 1;
        self.with_gadget(|target, _, gadget| {
            target.stop_timers(gadget, SIGPROF, &[timer], Some(vars + offset_of!(RuntimeVars, profile_old_action) as u64))?;
            // Samples that came while the threads were held would be delivered at the detach,
            // to the default action: the process would die of them.
            target.threads.forget_held(nix::sys::signal::Signal::SIGPROF);
            Ok(())
        })
    }

    /// `signal` ignored (which drops it where pending), `timers` deleted, then the action at
    /// `old` in the process put back (the default when `None`), through `gadget`.
    fn stop_timers(&mut self, gadget: Gadget, signal: u64, timers: &[u64], old: Option<u64>) -> Result<(), LiveError> {
        // The actions are written below the leader's stack pointer, past its red zone: no code
        // runs on that thread meanwhile, and the injected calls do not touch its stack.
        let leader = self.threads.leader();
        let scratch = (self.threads.regs(leader)?.rsp - 1024) & !15;
        let ignore: Vec<u8> = [SIG_IGN, 0, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
        self.mem.write(scratch, &ignore).map_err(LiveError::io("writing a signal action into the process"))?;
        self.syscall(gadget, sys::RT_SIGACTION, [signal, scratch, 0, 8, 0, 0])?;
        for &id in timers {
            self.syscall(gadget, sys::TIMER_DELETE, [id, 0, 0, 0, 0, 0])?;
        }
        let old = match old {
            Some(at) => at,
            None => {
                self.mem.write(scratch, &[0; 32]).map_err(LiveError::io("writing a signal action into the process"))?;
                scratch
            }
        };
        self.syscall(gadget, sys::RT_SIGACTION, [signal, old, 0, 8, 0, 0])?;
        Ok(())
    }

    /// The sampling timer of thread `tid`, from the chunk its TCB word points at.
    fn sample_timer(&self, tid: i32) -> Option<u64> {
        let fs = self.threads.regs(tid).ok()?.fs_base;
        let chunk = self.mem.read_u64(fs.checked_add(LOPI_TCB_WORDS)?).ok()?;
        if chunk < PAGE_SIZE || self.mem.read(chunk, 8).ok()? != THREAD_MAGIC {
            return None;
        }
        let timer = self.mem.read(chunk + offset_of!(ThreadHeader, sample_timer) as u64, 4).ok()?;
        u64::try_from(i32::from_le_bytes(timer.try_into().ok()?)).ok()
    }
}
