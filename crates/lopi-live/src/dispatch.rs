//! Syscall User Dispatch at a detach (`lopi_rt_abi::dispatch`): the runtime's `SIGSYS` handler
//! and the wrapper it put in place of the program's signal handlers are in code a detach
//! unmaps. Every thread's selector is set to let its calls through first (from then on no
//! call raises `SIGSYS`, whatever code makes it), then each action the runtime changed is
//! put back as the program set it.
use crate::error::LiveError;
use crate::install::Installation;
use crate::target::{sys, Gadget, Target};
use lopi_rt_abi::{dispatch, RuntimeVars};
use std::mem::offset_of;

const SIGSYS: u64 = 31;
/// Signals whose action cannot be changed: `SIGKILL`, `SIGSTOP`.
const FIXED: [u64; 2] = [9, 19];

impl Target {
    /// Every thread's selector set to let calls through, and its `SIGSYS` state cleared (a
    /// new thread starts without dispatch; ended ones make no calls).
    pub(crate) fn allow_calls(&mut self) -> Result<(), LiveError> {
        for tid in self.threads.tids() {
            let fs = self.threads.regs(tid)?.fs_base;
            if fs != 0 {
                let _ = self.mem.write(fs + u64::from(dispatch::SELECTOR), &[dispatch::ALLOW, 0, 0]);
            }
        }
        Ok(())
    }

    /// With dispatch on in `installation`: the actions of the program's signals back as it
    /// set them (its handlers instead of the runtime's wrapper, its own `SIGSYS` action),
    /// through `gadget`. Call after [`Target::allow_calls`], with the threads out of lopi's code.
    pub(crate) fn restore_signal_actions(&mut self, installation: &Installation, gadget: Gadget) -> Result<(), LiveError> {
        let read = |t: &Self, at: u64| t.mem.read_u64(at).unwrap_or(0);
        let Some(owner) = installation.modules.iter().filter(|m| m.timed).map(|m| read(self, m.vars + offset_of!(RuntimeVars, dispatch_owner) as u64)).find(|&o| o != 0) else {
            return Ok(());
        };
        let runtime = read(self, owner + offset_of!(RuntimeVars, dispatch_start) as u64);
        let wrapper = runtime + lopi_rt_blob::SIGNAL_WRAPPER_OFFSET as u64;
        let handlers = owner + offset_of!(RuntimeVars, program_handlers) as u64;
        // The actions are read and written below the leader's stack pointer, past its red
        // zone: no code runs on that thread meanwhile.
        let leader = self.threads.leader();
        let scratch = (self.threads.regs(leader)?.rsp - 1024) & !15;
        for signal in (1..=64).filter(|s| !FIXED.contains(s) && *s != SIGSYS) {
            self.syscall(gadget, sys::RT_SIGACTION, [signal, 0, scratch, 8, 0, 0])?;
            if read(self, scratch) == wrapper {
                let handler = read(self, handlers + 8 * (signal - 1));
                self.mem.write(scratch, &handler.to_le_bytes()).map_err(LiveError::io("writing a signal action into the process"))?;
                self.syscall(gadget, sys::RT_SIGACTION, [signal, scratch, 0, 8, 0, 0])?;
            }
        }
        self.syscall(gadget, sys::RT_SIGACTION, [SIGSYS, owner + offset_of!(RuntimeVars, sigsys_program_action) as u64, 0, 8, 0, 0])?;
        Ok(())
    }
}
