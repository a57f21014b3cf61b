//! Following a process tree, as `strace -f` does: every thread, fork, vfork and clone of a
//! program `lopi run` launched stays traced, and every `exec` stops for lopi, which puts the
//! probes into the new program before its first instruction of its own (see
//! [`Target::at_exec`]). Between those events the tree runs free; ptrace costs only a stop per
//! event and per signal delivered.
//!
//! `lopi attach -f` follows the tree of a running process the same way, from the time it
//! attached ([`Tree::attached`]), and lets the whole tree go at the end, probes taken out
//! ([`Tree::detach`]).
//!
//! Tracees are attached by the kernel (`PTRACE_O_TRACEFORK` and friends). Under `lopi run` the
//! root started with `PTRACE_TRACEME`, so they are not seized: a new one's first stop is a
//! `SIGSTOP`. Under `lopi attach -f` the root's threads were seized (`PTRACE_SEIZE`, as every
//! attach is: no `SIGSTOP` is sent that the process could see, and if lopi dies the kernel
//! detaches it), so its descendants are seized too: a new one's first stop is a
//! `PTRACE_EVENT_STOP`, and `PTRACE_INTERRUPT` stops any of them at detach. Either way a group
//! stop (`SIGTSTP` from a terminal) is not kept: the tracee is let run on, as strace does
//! without `--seize`.
use crate::error::LiveError;
use crate::loads::LoadWatch;
use crate::{Installation, Removal, Target};
use nix::errno::Errno;
use nix::sys::ptrace::{self, Event};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXECVE: u64 = 59;

/// A process of the tree, as lopi saw it.
#[derive(Clone, Debug)]
pub struct Process {
    pub pid: i32,
    /// The process it was forked from (0 for the root).
    pub parent: i32,
    /// Its command line at its last `exec` (its parent's, until it executes one).
    pub command: Vec<String>,
    /// The TSC when it was forked (or launched).
    pub started: u64,
    /// The programs it executed (the root's first is the one lopi launched).
    pub execs: u32,
    /// System calls its programs made before their probes went live, by number.
    pub startup: BTreeMap<u64, u64>,
    /// `lopi run --log`: those calls logged, each program's `execve` that no probe saw first,
    /// encoded as a trace's ([`lopi_rt_abi::syscall_log`]).
    pub startup_log: Vec<u8>,
    /// Its program has probes (see [`Tree::probed`]): they count its next `execve`.
    probed: bool,
    /// The code files mapped when its probes last went in: a later load maps others.
    pub modules: Vec<String>,
    /// The trap that tells lopi of the libraries it loads later.
    watch: Option<LoadWatch>,
}

impl Process {
    fn new(pid: i32, parent: i32, command: Vec<String>) -> Process {
        Process { pid, parent, command, started: crate::tsc(), execs: 0, startup: BTreeMap::new(), startup_log: Vec::new(), probed: false, modules: Vec::new(), watch: None }
    }
}

/// How a process ended: a wait status (`WIFEXITED`/`WIFSIGNALED` of `status`).
#[derive(Clone, Debug)]
pub struct Ended {
    pub process: Process,
    pub status: i32,
    /// The TSC when lopi saw it end.
    pub at: u64,
}

/// What happened in the tree that lopi must act on.
pub enum TreeEvent {
    /// A process executed a program and is held where every library is loaded and none of
    /// their constructors has run (see [`Target::at_exec`]): install probes, then [`Target::release`] it (it stays traced).
    Exec(Target, Process),
    /// A process executed a program lopi could not take over (a static or 32-bit one, or it
    /// died on the way): it runs on without probes.
    ExecUnprobed(Process, LiveError),
    /// A process loaded libraries (`dlopen`) after its probes went in: it is held, every
    /// thread, before it uses them; probe those not in [`Process::modules`], then
    /// [`Tree::probed`] and [`Target::release`].
    Loaded(Target, Process),
    /// A process ended.
    Ended(Ended),
    /// A signal reached lopi while it waited (see [`Tree::let_go`]).
    Interrupted,
    /// Every process has ended; the root's wait status.
    Done(i32),
}

/// A launched program and everything it started, under ptrace.
pub struct Tree {
    root: i32,
    /// Traced threads: the process (thread group) of each.
    threads: HashMap<i32, i32>,
    /// Threads attached by a fork or clone event whose first stop (`SIGSTOP`) is to come.
    newborn: HashSet<i32>,
    /// Threads whose first stop came before the event that made them: held until it comes.
    early: HashSet<i32>,
    processes: BTreeMap<i32, Process>,
    /// The probes in each process (a fork's are its parent's), for [`Tree::detach`].
    installed: HashMap<i32, Vec<Arc<Installation>>>,
    root_status: i32,
    /// The start-up of each program executed is logged (`lopi run --log`).
    log_startups: bool,
}

/// A process [`Tree::detach`] let go while it ran.
pub struct Detached {
    pub process: Process,
    /// The removal of each of its installations, or why it failed (those probes stay in).
    pub removals: Vec<Result<Removal, LiveError>>,
}

impl Tree {
    /// The tree of `target`, a process launched followed (see [`crate::launch`]), which lopi
    /// holds where its probes go in (see [`Target::at_exec`]): its threads are let go, still traced.
    pub fn new(mut target: Target, command: Vec<String>) -> Tree {
        let root = target.pid();
        let threads = target.threads.tids().into_iter().map(|t| (t, root)).collect();
        let mut process = Process { execs: 1, startup: target.take_startup_calls(), startup_log: target.take_startup_log(), ..Process::new(root, 0, command) };
        // The root's execve, made by lopi's child before the program existed: strace counts it.
        *process.startup.entry(EXECVE).or_default() += 1;
        let mut tree = Tree { root, threads, newborn: HashSet::new(), early: HashSet::new(), processes: BTreeMap::from([(root, process)]), installed: HashMap::new(), root_status: 0, log_startups: target.logs_startup };
        tree.probed(&target, None);
        target.release();
        tree
    }

    /// The tree of `target`, a running process lopi seized to follow it (see
    /// [`Target::attach_followed`]) and put `installation` into: its threads are let go, still
    /// traced, and its children from now on are followed.
    pub fn attached(mut target: Target, installation: Arc<Installation>) -> Tree {
        let root = target.pid();
        let threads = target.threads.tids().into_iter().map(|t| (t, root)).collect();
        let command = crate::procfs::command_line(root).unwrap_or_default();
        let mut tree = Tree { root, threads, newborn: HashSet::new(), early: HashSet::new(), processes: BTreeMap::from([(root, Process::new(root, 0, command))]), installed: HashMap::new(), root_status: 0, log_startups: false };
        tree.installed.insert(root, vec![installation]);
        tree.probed(&target, None);
        // Forks its threads made as they were stopped: traced from birth, their first stop to come.
        for (by, child) in std::mem::take(&mut target.threads.forks) {
            tree.born(child, by);
        }
        target.release();
        tree
    }

    /// Logs the start-up of every program the tree executes from now on (`lopi attach -f
    /// --log`; `lopi run --log` launched its program so, see [`crate::launch`]).
    pub fn log_startups(&mut self) {
        self.log_startups = true;
    }

    /// The process the tree started from.
    pub fn root(&self) -> i32 {
        self.root
    }

    /// Runs the tree until something happens that lopi must act on.
    pub fn next_event(&mut self) -> Result<TreeEvent, LiveError> {
        loop {
            if self.processes.is_empty() {
                return Ok(TreeEvent::Done(self.root_status));
            }
            let status = match waitpid(None::<Pid>, Some(WaitPidFlag::__WALL)) {
                Ok(status) => status,
                Err(Errno::EINTR) => return Ok(TreeEvent::Interrupted),
                Err(Errno::ECHILD) => {
                    self.processes.clear();
                    continue;
                }
                Err(e) => return Err(LiveError::ptrace("waiting for", self.root, e)),
            };
            match status {
                WaitStatus::Exited(tid, code) => {
                    if let Some(ended) = self.died(tid.as_raw(), (code & 0xff) << 8) {
                        return Ok(TreeEvent::Ended(ended));
                    }
                }
                WaitStatus::Signaled(tid, signal, core) => {
                    if let Some(ended) = self.died(tid.as_raw(), signal as i32 | if core { 0x80 } else { 0 }) {
                        return Ok(TreeEvent::Ended(ended));
                    }
                }
                WaitStatus::PtraceEvent(tid, _, event) => {
                    if let Some(event) = self.event(tid.as_raw(), event) {
                        return Ok(event);
                    }
                }
                WaitStatus::Stopped(tid, signal) => {
                    if let Some(event) = self.stopped(tid.as_raw(), signal) {
                        return Ok(event);
                    }
                }
                WaitStatus::PtraceSyscall(tid) => resume(tid.as_raw(), None),
                _ => {}
            }
        }
    }

    /// Takes the traps on ld.so's rendezvous out of every process (before lopi ends early: a
    /// trap left in a process it no longer traces would kill it at its next `dlopen`). The
    /// kernel lets the processes go when lopi exits.
    pub fn let_go(&mut self) {
        for p in self.processes.values_mut() {
            if let Some(watch) = p.watch.take() {
                if let Ok(mem) = crate::procfs::Memory::open(p.pid) {
                    let _ = watch.remove(&mem);
                }
            }
        }
    }

    /// The process `target` holds got its probes (after an [`TreeEvent::Exec`] or a
    /// [`TreeEvent::Loaded`]), `installation` if they went in: they count the system calls it
    /// makes, its next `execve` included, and the libraries it loads later are watched for.
    pub fn probed(&mut self, target: &Target, installation: Option<Installation>) {
        let Some(p) = self.processes.get_mut(&target.pid()) else { return };
        if let Some(installation) = installation {
            self.installed.entry(p.pid).or_default().push(Arc::new(installation));
        }
        p.probed = true;
        p.modules = crate::procfs::code_files(p.pid);
        if p.watch.is_none() {
            p.watch = target.watch_loads().ok();
        }
    }

    /// Lets the tree go (`lopi attach -f` detaching): every thread is stopped
    /// (`PTRACE_INTERRUPT`: the tree is seized), each process's probes and load trap are taken
    /// out, and every thread is detached with the signal it was stopped for, to run on as if
    /// lopi had never been there. Returns the processes that ended meanwhile, then those let go.
    pub fn detach(&mut self) -> (Vec<Ended>, Vec<Detached>) {
        let (ended, mut stopped) = self.stop_everything();
        let mut detached = Vec::new();
        for (pid, mut process) in std::mem::take(&mut self.processes) {
            let mut tids: BTreeMap<i32, Vec<Signal>> = BTreeMap::new();
            for (&tid, _) in self.threads.iter().filter(|&(_, &group)| group == pid) {
                if let Some(signals) = stopped.remove(&tid) {
                    tids.insert(tid, signals);
                }
            }
            if let (Some(watch), Ok(mem)) = (process.watch.take(), crate::procfs::Memory::open(pid)) {
                let _ = watch.remove(&mem);
            }
            let installed = self.installed.remove(&pid).unwrap_or_default();
            let mut removals = Vec::new();
            if !installed.is_empty() && tids.is_empty() {
                removals.push(Err(LiveError::Module("none of its threads stopped for lopi".into())));
            } else if !installed.is_empty() {
                match Target::held(crate::tracee::Threads::stopped(pid, tids)) {
                    Ok(mut target) => {
                        // The last in first out: a later library's probes may sit in an earlier image's reach.
                        removals = installed.iter().rev().map(|i| target.remove(i)).collect();
                        tids = target.into_threads().into_held();
                    }
                    Err(e) => {
                        removals.push(Err(e));
                        tids = BTreeMap::new();
                    }
                }
            }
            stopped.extend(tids);
            detached.push(Detached { process, removals });
        }
        for (tid, signals) in stopped {
            let mut signals = signals.into_iter();
            let received = crate::tracee::Threads::let_go(Pid::from_raw(tid), signals.next());
            for signal in signals.chain(received) {
                let _ = nix::sys::signal::kill(Pid::from_raw(self.threads.get(&tid).copied().unwrap_or(tid)), signal);
            }
        }
        self.threads.clear();
        self.newborn.clear();
        (ended, detached)
    }

    /// Stops every thread of the (seized) tree and waits until each has, taking in the events
    /// on the way: forks are known (their first stop holds them), a program executed now gets
    /// no probes, an end is an end. Returns the ends, and each stopped thread with the signals
    /// to deliver to it.
    fn stop_everything(&mut self) -> (Vec<Ended>, HashMap<i32, Vec<Signal>>) {
        let mut ended = Vec::new();
        // Threads waiting for their parent's event are in a stop already.
        let mut stopped: HashMap<i32, Vec<Signal>> = self.early.drain().map(|t| (t, Vec::new())).collect();
        for &tid in self.threads.keys() {
            let _ = ptrace::interrupt(Pid::from_raw(tid));
        }
        // A thread that never reports (gone without a trace) must not keep the others stopped.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.threads.keys().any(|t| !stopped.contains_key(t)) && Instant::now() < deadline {
            let status = match waitpid(None::<Pid>, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {
                    std::thread::sleep(Duration::from_micros(100));
                    continue;
                }
                Ok(status) => status,
                Err(_) => break,
            };
            match status {
                WaitStatus::Exited(tid, code) => {
                    stopped.remove(&tid.as_raw());
                    ended.extend(self.died(tid.as_raw(), (code & 0xff) << 8));
                }
                WaitStatus::Signaled(tid, signal, core) => {
                    stopped.remove(&tid.as_raw());
                    ended.extend(self.died(tid.as_raw(), signal as i32 | if core { 0x80 } else { 0 }));
                }
                WaitStatus::PtraceEvent(tid, _, event) => {
                    let tid = tid.as_raw();
                    if [Event::PTRACE_EVENT_FORK, Event::PTRACE_EVENT_VFORK, Event::PTRACE_EVENT_CLONE].map(|e| e as i32).contains(&event) {
                        if let Ok(child) = ptrace::getevent(Pid::from_raw(tid)) {
                            self.register(child as i32, tid);
                        }
                    } else if event == Event::PTRACE_EVENT_EXEC as i32 {
                        self.new_program(tid);
                    }
                    stopped.entry(tid).or_default();
                }
                WaitStatus::Stopped(tid, signal) => {
                    let tid = tid.as_raw();
                    // At the load trap: returned from for the thread, which gets no SIGTRAP.
                    let trapped = signal == Signal::SIGTRAP && self.returned_from_watch(tid);
                    stopped.entry(tid).or_default().extend((!trapped).then_some(signal));
                }
                WaitStatus::PtraceSyscall(tid) => {
                    stopped.entry(tid.as_raw()).or_default();
                }
                _ => {}
            }
        }
        (ended, stopped)
    }

    /// Whether `tid` (stopped by a `SIGTRAP`) was at its process's load trap, now returned from.
    fn returned_from_watch(&self, tid: i32) -> bool {
        let Some(&pid) = self.threads.get(&tid) else { return false };
        let Some(watch) = self.processes.get(&pid).and_then(|p| p.watch) else { return false };
        ptrace::getregs(Pid::from_raw(tid)).is_ok_and(|regs| matches!(watch.returned(pid, tid, regs), Ok(Some(_))))
    }

    /// A thread died: the end of its process when it was the process's leader.
    fn died(&mut self, tid: i32, status: i32) -> Option<Ended> {
        self.threads.remove(&tid);
        self.newborn.remove(&tid);
        self.early.remove(&tid);
        let process = self.processes.remove(&tid)?;
        self.installed.remove(&tid);
        self.threads.retain(|_, pid| *pid != tid);
        if tid == self.root {
            self.root_status = status;
        }
        Some(Ended { process, status, at: crate::tsc() })
    }

    fn event(&mut self, tid: i32, event: i32) -> Option<TreeEvent> {
        let forked = [Event::PTRACE_EVENT_FORK, Event::PTRACE_EVENT_VFORK, Event::PTRACE_EVENT_CLONE].map(|e| e as i32);
        if forked.contains(&event) {
            if let Ok(child) = ptrace::getevent(Pid::from_raw(tid)) {
                self.born(child as i32, tid);
            }
        } else if event == Event::PTRACE_EVENT_EXEC as i32 {
            return Some(self.executed(tid));
        } else if event == Event::PTRACE_EVENT_STOP as i32 {
            // A seized tracee's first stop (its parent's event may be still to come), or a
            // stop lopi's PTRACE_INTERRUPT left pending, or a group stop.
            self.newborn.remove(&tid);
            if !self.threads.contains_key(&tid) {
                self.early.insert(tid);
                return None;
            }
        }
        resume(tid, None);
        None
    }

    /// `child` was made by thread `by`: a thread of its process, or a new process.
    fn born(&mut self, child: i32, by: i32) {
        self.register(child, by);
        if self.early.remove(&child) {
            resume(child, None);
        } else {
            self.newborn.insert(child);
        }
    }

    /// Knows `child`, made by thread `by`, as a thread of its process or a new process.
    fn register(&mut self, child: i32, by: i32) {
        let parent = self.threads.get(&by).copied().unwrap_or(by);
        let group = crate::procfs::thread_group(child).unwrap_or(child);
        self.threads.insert(child, group);
        if group == child {
            // A fork runs its parent's code, probes and traps included.
            let process = match self.processes.get(&parent) {
                Some(p) => Process { probed: p.probed, modules: p.modules.clone(), watch: p.watch, ..Process::new(child, parent, p.command.clone()) },
                None => Process::new(child, parent, Vec::new()),
            };
            self.processes.insert(child, process);
            if let Some(installed) = self.installed.get(&parent).cloned() {
                self.installed.insert(child, installed);
            }
        }
    }

    /// Process `pid` executed a program (by any of its threads: the kernel gave that thread
    /// the process's id, and the others are gone).
    fn executed(&mut self, pid: i32) -> TreeEvent {
        // Probes logged the execve that got here (its caller's, a vfork child's included).
        let log = match self.processes.get(&pid) {
            _ if !self.log_startups => crate::LogStartup::No,
            Some(p) if p.probed => crate::LogStartup::Calls,
            _ => crate::LogStartup::WithExec,
        };
        let process = self.new_program(pid);
        match Target::at_exec(pid, true, log) {
            Ok(mut target) => {
                for (nr, calls) in target.take_startup_calls() {
                    *process.startup.entry(nr).or_default() += calls;
                }
                process.startup_log.extend(target.take_startup_log());
                TreeEvent::Exec(target, process.clone())
            }
            Err(e) => {
                // Not taken over: it runs on, unprobed, if it still can.
                resume(pid, None);
                TreeEvent::ExecUnprobed(process.clone(), e)
            }
        }
    }

    /// Process `pid` is at the exec event of a new program: its other threads are gone, and
    /// no probe or trap of lopi's is in it.
    fn new_program(&mut self, pid: i32) -> &mut Process {
        if let Ok(former) = ptrace::getevent(Pid::from_raw(pid)) {
            self.threads.remove(&(former as i32));
        }
        self.threads.retain(|tid, group| *group != pid || *tid == pid);
        self.threads.insert(pid, pid);
        self.installed.remove(&pid);
        let process = self.processes.entry(pid).or_insert_with(|| Process::new(pid, 0, Vec::new()));
        process.execs += 1;
        process.modules.clear();
        process.watch = None;
        process.command = crate::procfs::command_line(pid).unwrap_or_default();
        if !std::mem::take(&mut process.probed) {
            // No probe saw the call that got here.
            *process.startup.entry(EXECVE).or_default() += 1;
        }
        process
    }

    /// A signal stopped `tid`: a new thread's first stop, ld.so's rendezvous, a signal to
    /// deliver, or a group stop.
    fn stopped(&mut self, tid: i32, signal: Signal) -> Option<TreeEvent> {
        if signal == Signal::SIGSTOP {
            if self.newborn.remove(&tid) {
                resume(tid, None);
                return None;
            }
            if !self.threads.contains_key(&tid) {
                // Its parent's fork or clone event is still to come: it waits for it, so that
                // lopi knows its parent before it can exec.
                self.early.insert(tid);
                return None;
            }
        }
        if signal == Signal::SIGTRAP {
            if let Some(event) = self.rendezvous(tid) {
                return event;
            }
        }
        let stopping = matches!(signal, Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU);
        if stopping && ptrace::getsiginfo(Pid::from_raw(tid)) == Err(Errno::EINVAL) {
            // A group stop: it cannot be kept without a seized tracee; run on.
            resume(tid, None);
            return None;
        }
        resume(tid, Some(signal));
        None
    }

    /// `tid` trapped: when at its process's trap on ld.so's rendezvous, returns from it for
    /// the thread, and when a load is done holds the process for lopi (`Some(Some(Loaded))`;
    /// `Some(None)`: nothing more to do). `None`: some other `SIGTRAP`, to deliver.
    fn rendezvous(&mut self, tid: i32) -> Option<Option<TreeEvent>> {
        let pid = *self.threads.get(&tid)?;
        let watch = self.processes.get(&pid)?.watch?;
        let regs = ptrace::getregs(Pid::from_raw(tid)).ok()?;
        match watch.returned(pid, tid, regs) {
            Ok(None) => None,
            Ok(Some(false)) | Err(_) => {
                resume(tid, None);
                Some(None)
            }
            Ok(Some(true)) => Some(self.hold_loaded(pid, tid)),
        }
    }

    /// Holds process `pid` (thread `tid` stopped at the rendezvous) when it maps code files
    /// lopi has not seen in it.
    fn hold_loaded(&mut self, pid: i32, tid: i32) -> Option<TreeEvent> {
        let process = self.processes.get(&pid)?;
        if crate::procfs::code_files(pid).iter().all(|f| process.modules.contains(f)) {
            resume(tid, None);
            return None;
        }
        let others: Vec<i32> = self.threads.iter().filter(|&(&t, &group)| group == pid && t != tid).map(|(&t, _)| t).collect();
        let held = crate::tracee::Threads::hold_followed(pid, tid, &others).and_then(|(threads, born)| {
            for (by, child) in born {
                self.born(child, by);
            }
            Target::held(threads)
        });
        match held {
            Ok(target) => Some(TreeEvent::Loaded(target, self.processes.get(&pid)?.clone())),
            Err(_) => {
                resume(tid, None);
                None
            }
        }
    }
}

/// Lets `tid` run on from its stop, delivering `signal` (a tracee gone meanwhile is no error:
/// its death is reported next).
fn resume(tid: i32, signal: Option<Signal>) {
    let _ = ptrace::cont(Pid::from_raw(tid), signal);
}
