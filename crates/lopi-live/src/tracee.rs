//! Stopping every thread of a process with ptrace, running injected code in one of them,
//! and letting them all go again.
//!
//! Threads are taken with `PTRACE_SEIZE` and stopped with `PTRACE_INTERRUPT`, never with
//! `SIGSTOP`: if lopi dies, the kernel detaches them and they simply run on. New threads are
//! followed with `PTRACE_O_TRACECLONE` while we hold the process. Signals that arrive while a
//! thread is held are kept and delivered when it is let go.
use crate::error::LiveError;
use crate::startup_log::StartupLog;
use nix::errno::Errno;
use nix::libc::user_regs_struct;
use nix::sys::ptrace::{self, Event, Options};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long injected code may run before lopi gives up on it.
const INJECTED_TIMEOUT: Duration = Duration::from_secs(20);

pub type Regs = user_regs_struct;

/// The ptrace options of a followed process tree: its threads, forks, vforks and execs stop
/// for lopi (`strace -f`'s), and system-call stops are told apart from `SIGTRAP`s.
pub const FOLLOWED: Options = Options::PTRACE_O_TRACECLONE
    .union(Options::PTRACE_O_TRACEFORK)
    .union(Options::PTRACE_O_TRACEVFORK)
    .union(Options::PTRACE_O_TRACEEXEC)
    .union(Options::PTRACE_O_TRACESYSGOOD);

/// Every thread of a process, each in a ptrace stop.
pub struct Threads {
    pub pid: i32,
    /// Stopped threads and the signals they received while held.
    held: BTreeMap<i32, Vec<Signal>>,
    /// Threads the kernel attached for us (clone events) that have not reported yet.
    arriving: Vec<i32>,
    /// Its threads stay traced when let go (`lopi run` following a process tree): dropped,
    /// they are continued, not detached.
    followed: bool,
    /// While set, code run to a trap stops at each system call, counted here by number: what
    /// a followed program does between its `exec` and where its probes go in, before any probe.
    pub counted_calls: Option<BTreeMap<u64, u64>>,
    /// `lopi run --log`: those calls logged too, each with its arguments, result and bytes.
    pub(crate) startup_log: Option<StartupLog>,
    /// Fork and vfork events a followed process's threads reported while being stopped
    /// (thread, new process): the tree must know those children, traced from birth.
    pub(crate) forks: Vec<(i32, i32)>,
}

impl Threads {
    /// The threads of `pid`, those in `held` held, neither counting nor logging system calls.
    fn new(pid: i32, held: BTreeMap<i32, Vec<Signal>>, followed: bool) -> Threads {
        Threads { pid, held, arriving: Vec::new(), followed, counted_calls: None, startup_log: None, forks: Vec::new() }
    }

    /// Seizes and stops every thread of `pid`, including threads created meanwhile; `followed`
    /// (`lopi attach -f`): with the options of a followed tree, to stay traced when let go.
    pub fn stop_all(pid: i32, followed: bool) -> Result<Self, LiveError> {
        let mut threads = Threads::new(pid, BTreeMap::new(), followed);
        threads.stop_new_threads()?;
        Ok(threads)
    }

    /// Takes over a process whose only thread is already in a ptrace stop at its `exec`
    /// (`PTRACE_TRACEME`, or an exec event of a followed tree), then stops any thread its
    /// libraries' constructors started. A `followed` process's forks and execs are reported
    /// to lopi too, and its threads stay traced when let go.
    pub fn adopt(pid: i32, followed: bool) -> Result<Self, LiveError> {
        let options = if followed { FOLLOWED } else { Options::PTRACE_O_TRACECLONE };
        ptrace::setoptions(Pid::from_raw(pid), options).map_err(|e| LiveError::ptrace("setting options on", pid, e))?;
        let mut threads = Threads::new(pid, BTreeMap::from([(pid, Vec::new())]), followed);
        threads.stop_new_threads()?;
        Ok(threads)
    }

    /// Holds every thread of followed process `pid`: `stopped` is in a ptrace stop already,
    /// the `others` (traced by lopi from birth, not seized: `PTRACE_INTERRUPT` cannot stop
    /// them) are sent a `SIGSTOP` each, which lopi takes instead of delivering. Returns the
    /// fork and clone events they reported on the way (thread, new task), for the tree.
    pub fn hold_followed(pid: i32, stopped: i32, others: &[i32]) -> Result<(Self, Vec<(i32, i32)>), LiveError> {
        let mut threads = Threads::new(pid, BTreeMap::from([(stopped, Vec::new())]), true);
        let mut born = Vec::new();
        for &tid in others {
            // SAFETY: tgkill takes integers only; a thread gone meanwhile makes it fail (ESRCH).
            #[allow(unsafe_code)]
            let sent = unsafe { nix::libc::syscall(nix::libc::SYS_tgkill, pid, tid, nix::libc::SIGSTOP) } == 0;
            if !sent {
                continue;
            }
            let mut signals = Vec::new();
            loop {
                match waitpid(Pid::from_raw(tid), Some(WaitPidFlag::__WALL)) {
                    Ok(WaitStatus::Stopped(_, Signal::SIGSTOP)) => {
                        threads.held.insert(tid, signals);
                        break;
                    }
                    Ok(WaitStatus::Stopped(_, signal)) => {
                        signals.push(signal);
                        let _ = ptrace::cont(Pid::from_raw(tid), None);
                    }
                    Ok(WaitStatus::PtraceEvent(_, _, _)) => {
                        if let Ok(child) = ptrace::getevent(Pid::from_raw(tid)) {
                            born.push((tid, child as i32));
                        }
                        let _ = ptrace::cont(Pid::from_raw(tid), None);
                    }
                    Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::ECHILD) => break,
                    Ok(_) | Err(Errno::EINTR) => {
                        let _ = ptrace::cont(Pid::from_raw(tid), None);
                    }
                    Err(e) => return Err(LiveError::ptrace("waiting for", tid, e)),
                }
            }
        }
        Ok((threads, born))
    }

    /// Repeats until `/proc/PID/task` names no thread we do not hold.
    pub fn stop_new_threads(&mut self) -> Result<(), LiveError> {
        loop {
            let tids = crate::procfs::threads(self.pid).map_err(|_| LiveError::NoSuchProcess(self.pid))?;
            let new: Vec<i32> = tids.into_iter().filter(|t| !self.held.contains_key(t)).collect();
            if new.is_empty() && self.arriving.is_empty() {
                return Ok(());
            }
            let mut seized = Vec::new();
            for tid in new {
                if self.arriving.contains(&tid) {
                    continue;
                }
                let options = if self.followed { FOLLOWED } else { Options::PTRACE_O_TRACECLONE };
                match ptrace::seize(Pid::from_raw(tid), options) {
                    Ok(()) => seized.push(tid),
                    // Exited meanwhile (a thread that has exited but is not reaped yet is
                    // refused with EPERM).
                    Err(Errno::ESRCH) => {}
                    Err(Errno::EPERM) if crate::procfs::thread_ended(self.pid, tid) => {}
                    // Attached for us by a clone event we have not read yet.
                    Err(Errno::EPERM) if !self.held.is_empty() => self.arriving.push(tid),
                    Err(e) => return Err(LiveError::ptrace("attaching to", tid, e)),
                }
            }
            for &tid in &seized {
                match ptrace::interrupt(Pid::from_raw(tid)) {
                    Ok(()) | Err(Errno::ESRCH) => {}
                    Err(e) => return Err(LiveError::ptrace("stopping", tid, e)),
                }
            }
            for tid in seized.into_iter().chain(std::mem::take(&mut self.arriving)) {
                self.wait_stop(tid)?;
            }
        }
    }

    /// Waits for `tid` to stop and records it as held (or forgets it if it exited).
    fn wait_stop(&mut self, tid: i32) -> Result<(), LiveError> {
        let mut signals = Vec::new();
        loop {
            match waitpid(Pid::from_raw(tid), Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::PtraceEvent(_, _, event)) => {
                    if event == Event::PTRACE_EVENT_CLONE as i32 {
                        self.note_clone(tid);
                    } else if [Event::PTRACE_EVENT_FORK, Event::PTRACE_EVENT_VFORK].map(|e| e as i32).contains(&event) {
                        if let Ok(child) = ptrace::getevent(Pid::from_raw(tid)) {
                            self.forks.push((tid, child as i32));
                        }
                    }
                    break;
                }
                Ok(WaitStatus::Stopped(_, signal)) => {
                    // A signal-delivery stop: the thread is stopped; the signal is delivered
                    // when we let it go. Our interrupt stays pending and reports later.
                    signals.extend(self.held_or_retried(tid, signal));
                    break;
                }
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::ECHILD) => return self.gone(tid),
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(LiveError::ptrace("waiting for", tid, e)),
            }
        }
        self.held.entry(tid).or_default().extend(signals);
        Ok(())
    }

    /// A signal to hold; `None` for Syscall User Dispatch's `SIGSYS` (`lopi_rt_abi::dispatch`):
    /// its call, from code no probe covers, was not made, and delivered later the signal could
    /// find the runtime's handler gone (a detach). The thread is put back on its `syscall`
    /// instead, to make the call when it runs again; a detach lets every call through first.
    fn held_or_retried(&self, tid: i32, signal: Signal) -> Option<Signal> {
        const SYS_USER_DISPATCH: i32 = 2;
        let pid = Pid::from_raw(tid);
        if signal != Signal::SIGSYS || ptrace::getsiginfo(pid).map(|i| i.si_code) != Ok(SYS_USER_DISPATCH) {
            return Some(signal);
        }
        match self.regs(tid) {
            Ok(mut regs) => {
                regs.rip -= 2;
                self.set_regs(tid, regs).err().map(|_| signal)
            }
            Err(_) => Some(signal),
        }
    }

    fn note_clone(&mut self, parent: i32) {
        if let Ok(child) = ptrace::getevent(Pid::from_raw(parent)) {
            let child = child as i32;
            if !self.held.contains_key(&child) && !self.arriving.contains(&child) {
                self.arriving.push(child);
            }
        }
    }

    fn gone(&mut self, tid: i32) -> Result<(), LiveError> {
        self.held.remove(&tid);
        if tid == self.pid || !std::path::Path::new(&format!("/proc/{}", self.pid)).exists() {
            return Err(LiveError::TargetExited(self.pid));
        }
        Ok(())
    }

    pub fn tids(&self) -> Vec<i32> {
        self.held.keys().copied().collect()
    }

    /// The thread to run injected code in: the main thread if held, else any.
    pub fn leader(&self) -> i32 {
        if self.held.contains_key(&self.pid) {
            self.pid
        } else {
            *self.held.keys().next().expect("a held process has a thread")
        }
    }

    pub fn regs(&self, tid: i32) -> Result<Regs, LiveError> {
        ptrace::getregs(Pid::from_raw(tid)).map_err(|e| LiveError::ptrace("reading registers of", tid, e))
    }

    pub fn set_regs(&self, tid: i32, regs: Regs) -> Result<(), LiveError> {
        ptrace::setregs(Pid::from_raw(tid), regs).map_err(|e| LiveError::ptrace("writing registers of", tid, e))
    }

    /// Runs `tid` from `regs` until it executes the `int3` at `trap`; returns its registers
    /// there. Other threads stay stopped. The thread's own registers are restored after, its
    /// x87 and SSE registers too (the runtime uses none, but the vDSO code it calls is the
    /// kernel's).
    pub fn run_injected(&mut self, tid: i32, mut regs: Regs, trap: u64) -> Result<Regs, LiveError> {
        let saved = self.regs(tid)?;
        let pid = Pid::from_raw(tid);
        let fp = ptrace::getregset::<ptrace::regset::NT_PRFPREG>(pid).map_err(|e| LiveError::ptrace("reading the vector registers of", tid, e))?;
        // Not in a system call: the kernel must not restart an interrupted one into our code.
        regs.orig_rax = u64::MAX;
        self.set_regs(tid, regs)?;
        let result = self.run_to_trap(tid, trap);
        if let Err(LiveError::TargetExited(_)) = result {
            return result;
        }
        self.set_regs(tid, saved)?;
        ptrace::setregset::<ptrace::regset::NT_PRFPREG>(pid, fp).map_err(|e| LiveError::ptrace("writing the vector registers of", tid, e))?;
        result
    }

    fn run_to_trap(&mut self, tid: i32, trap: u64) -> Result<Regs, LiveError> {
        let pid = Pid::from_raw(tid);
        let started = Instant::now();
        let counting = self.counted_calls.is_some();
        let run = |pid| if counting { ptrace::syscall(pid, None) } else { ptrace::cont(pid, None) };
        run(pid).map_err(|e| LiveError::ptrace("running", tid, e))?;
        loop {
            let status = match waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {
                    if started.elapsed() > INJECTED_TIMEOUT {
                        let _ = ptrace::interrupt(pid);
                        self.wait_stop(tid)?;
                        return Err(LiveError::InjectedTimeout(tid));
                    }
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                Ok(status) => status,
                Err(Errno::ECHILD) => return Err(self.gone(tid).err().unwrap_or(LiveError::TargetExited(self.pid))),
                Err(e) => return Err(LiveError::ptrace("waiting for", tid, e)),
            };
            match status {
                WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                    let regs = self.regs(tid)?;
                    if regs.rip == trap + 1 {
                        return Ok(regs);
                    }
                    return Err(LiveError::InjectedFault { tid, signal: Signal::SIGTRAP, rip: regs.rip });
                }
                WaitStatus::Stopped(_, signal @ (Signal::SIGSEGV | Signal::SIGBUS | Signal::SIGILL | Signal::SIGFPE)) => {
                    let rip = self.regs(tid).map(|r| r.rip).unwrap_or(0);
                    return Err(LiveError::InjectedFault { tid, signal, rip });
                }
                WaitStatus::Stopped(_, signal) => {
                    if let Some(signal) = self.held_or_retried(tid, signal) {
                        self.held.entry(tid).or_default().push(signal);
                    }
                }
                WaitStatus::PtraceEvent(_, _, event) if event == Event::PTRACE_EVENT_CLONE as i32 => self.note_clone(tid),
                WaitStatus::PtraceSyscall(_) => {
                    // At a call's entry the kernel has set rax to -ENOSYS; at its exit rax
                    // holds the result (the first stop after an exec is execve's exit).
                    let regs = self.regs(tid)?;
                    let entering = regs.rax == -(Errno::ENOSYS as i64) as u64;
                    if entering {
                        *self.counted_calls.get_or_insert_with(BTreeMap::new).entry(regs.orig_rax).or_default() += 1;
                    }
                    if let Some(log) = &mut self.startup_log {
                        log.stop(&regs, entering);
                    }
                }
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                    return Err(self.gone(tid).err().unwrap_or(LiveError::TargetExited(self.pid)))
                }
                _ => {}
            }
            run(pid).map_err(|e| LiveError::ptrace("running", tid, e))?;
        }
    }

    /// Executes one instruction of `tid`.
    pub fn step(&mut self, tid: i32) -> Result<(), LiveError> {
        let pid = Pid::from_raw(tid);
        ptrace::step(pid, None).map_err(|e| LiveError::ptrace("stepping", tid, e))?;
        loop {
            match waitpid(pid, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => return Ok(()),
                Ok(WaitStatus::Stopped(_, signal)) => {
                    // Delivered later; the step did not happen yet.
                    if let Some(signal) = self.held_or_retried(tid, signal) {
                        self.held.entry(tid).or_default().push(signal);
                    }
                    ptrace::step(pid, None).map_err(|e| LiveError::ptrace("stepping", tid, e))?;
                }
                Ok(WaitStatus::PtraceEvent(_, _, event)) => {
                    if event == Event::PTRACE_EVENT_CLONE as i32 {
                        self.note_clone(tid);
                    }
                    ptrace::step(pid, None).map_err(|e| LiveError::ptrace("stepping", tid, e))?;
                }
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::ECHILD) => return self.gone(tid),
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(LiveError::ptrace("waiting for", tid, e)),
            }
        }
    }

    /// Lets `tids` run for `time` while the others stay stopped, then stops them again.
    pub fn run_for(&mut self, tids: &[i32], time: Duration) -> Result<(), LiveError> {
        for &tid in tids {
            let signals = self.held.get_mut(&tid).map(std::mem::take).unwrap_or_default();
            let pid = Pid::from_raw(tid);
            ptrace::cont(pid, signals.first().copied()).map_err(|e| LiveError::ptrace("running", tid, e))?;
            if let Some(rest) = signals.get(1..) {
                self.held.entry(tid).or_default().extend_from_slice(rest);
            }
        }
        std::thread::sleep(time);
        for &tid in tids {
            match ptrace::interrupt(Pid::from_raw(tid)) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => return Err(LiveError::ptrace("stopping", tid, e)),
            }
            self.held.remove(&tid);
            self.wait_stop(tid)?;
        }
        self.stop_new_threads()
    }

    /// Forgets the `signal`s the threads received while held: lopi's own (a `profile:` timer's,
    /// deleted since), which the program must not get once the handler is gone.
    pub(crate) fn forget_held(&mut self, signal: Signal) {
        for signals in self.held.values_mut() {
            signals.retain(|&s| s != signal);
        }
    }

    /// Lets every thread go, delivering the signals they received while held.
    pub fn release(mut self) {
        self.release_all();
    }

    fn release_all(&mut self) {
        if self.followed {
            return self.continue_all();
        }
        let mut undelivered = Vec::new();
        for (tid, signals) in std::mem::take(&mut self.held) {
            undelivered.extend(Self::let_go(Pid::from_raw(tid), signals.first().copied()));
            undelivered.extend(signals.into_iter().skip(1).filter(|s| !matches!(s, Signal::SIGSTOP | Signal::SIGTRAP)));
        }
        // Threads made while some thread ran (out of lopi's code): traced from birth by this
        // thread, never held. Let go too.
        let me = nix::unistd::gettid().as_raw();
        for tid in crate::procfs::threads(self.pid).unwrap_or_default() {
            if crate::procfs::task_tracer(self.pid, tid) == Some(me) {
                undelivered.extend(Self::let_go(Pid::from_raw(tid), None));
            }
        }
        for signal in undelivered {
            let _ = nix::sys::signal::kill(Pid::from_raw(self.pid), signal);
        }
    }
}

impl Threads {
    /// Lets every held thread of a followed process run on, still traced, with the signals it
    /// received while held: the tree's supervisor sees its next stops.
    fn continue_all(&mut self) {
        for (tid, signals) in std::mem::take(&mut self.held) {
            let mut signals = signals.into_iter().filter(|s| !matches!(s, Signal::SIGSTOP | Signal::SIGTRAP));
            let _ = ptrace::cont(Pid::from_raw(tid), signals.next());
            for signal in signals {
                let _ = nix::sys::signal::kill(Pid::from_raw(self.pid), signal);
            }
        }
    }

    /// Detaches `thread`, delivering `signal`. One not in a stop (left running, by a wait for it
    /// to leave lopi's code) is stopped first: a thread not detached stays traced by lopi until
    /// lopi exits, and the next attach finds it taken. Returns a signal it stopped to receive
    /// meanwhile.
    pub(crate) fn let_go(thread: Pid, signal: Option<Signal>) -> Option<Signal> {
        if ptrace::detach(thread, signal) != Err(Errno::ESRCH) || ptrace::interrupt(thread).is_err() {
            return None;
        }
        let received = loop {
            match waitpid(thread, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Stopped(_, s)) if !matches!(s, Signal::SIGSTOP | Signal::SIGTRAP) => break Some(s),
                Err(Errno::EINTR) => continue,
                _ => break None,
            }
        };
        let _ = ptrace::detach(thread, signal);
        received
    }
}

impl Threads {
    /// Threads of followed process `pid` that lopi has stopped itself, each with the signals
    /// it received meanwhile (see [`crate::Tree::detach`]).
    pub(crate) fn stopped(pid: i32, held: BTreeMap<i32, Vec<Signal>>) -> Threads {
        Threads::new(pid, held, true)
    }

    /// The threads still held and their signals, which the caller now lets go.
    pub(crate) fn into_held(mut self) -> BTreeMap<i32, Vec<Signal>> {
        std::mem::take(&mut self.held)
    }
}

impl Drop for Threads {
    /// An error path never leaves the target stopped.
    fn drop(&mut self) {
        self.release_all();
    }
}
