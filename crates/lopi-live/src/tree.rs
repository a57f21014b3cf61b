//! Following a process tree, as `strace -f` does: every thread, fork, vfork and clone of a
//! program `lopi run` launched stays traced, and every `exec` stops for lopi, which puts the
//! probes into the new program before its first instruction of its own (see
//! [`Target::at_exec`]). Between those events the tree runs free; ptrace costs only a stop per
//! event and per signal delivered.
//!
//! Tracees are attached by the kernel (`PTRACE_O_TRACEFORK` and friends) from a root started
//! with `PTRACE_TRACEME`, so they are not seized: a new one's first stop is a `SIGSTOP`, and a
//! group stop (`SIGTSTP` from a terminal) cannot be kept (`PTRACE_LISTEN` needs a seized
//! tracee): the tracee is let run on, as strace does without `--seize`.
use crate::error::LiveError;
use crate::loads::LoadWatch;
use crate::Target;
use nix::errno::Errno;
use nix::sys::ptrace::{self, Event};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::{BTreeMap, HashMap, HashSet};

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
    /// Its program has probes (see [`Tree::probed`]): they count its next `execve`.
    probed: bool,
    /// The code files mapped when its probes last went in: a later load maps others.
    pub modules: Vec<String>,
    /// The trap that tells lopi of the libraries it loads later.
    watch: Option<LoadWatch>,
}

impl Process {
    fn new(pid: i32, parent: i32, command: Vec<String>) -> Process {
        Process { pid, parent, command, started: crate::tsc(), execs: 0, startup: BTreeMap::new(), probed: false, modules: Vec::new(), watch: None }
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
    /// A process executed a program and is held at that program's entry point, every library
    /// loaded: install probes, then [`Target::release`] it (it stays traced).
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
    root_status: i32,
}

impl Tree {
    /// The tree of `target`, a process launched followed (see [`crate::launch`]), which lopi
    /// holds at its entry point: its threads are let go, still traced.
    pub fn new(mut target: Target, command: Vec<String>) -> Tree {
        let root = target.pid();
        let threads = target.threads.tids().into_iter().map(|t| (t, root)).collect();
        let mut process = Process { execs: 1, startup: target.take_startup_calls(), ..Process::new(root, 0, command) };
        // The root's execve, made by lopi's child before the program existed: strace counts it.
        *process.startup.entry(EXECVE).or_default() += 1;
        let mut tree = Tree { root, threads, newborn: HashSet::new(), early: HashSet::new(), processes: BTreeMap::from([(root, process)]), root_status: 0 };
        tree.probed(&target);
        target.release();
        tree
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
    /// [`TreeEvent::Loaded`]): they count the system calls it makes, its next `execve`
    /// included, and the libraries it loads later are watched for.
    pub fn probed(&mut self, target: &Target) {
        let Some(p) = self.processes.get_mut(&target.pid()) else { return };
        p.probed = true;
        p.modules = crate::procfs::code_files(p.pid);
        if p.watch.is_none() {
            p.watch = target.watch_loads().ok();
        }
    }

    /// A thread died: the end of its process when it was the process's leader.
    fn died(&mut self, tid: i32, status: i32) -> Option<Ended> {
        self.threads.remove(&tid);
        self.newborn.remove(&tid);
        self.early.remove(&tid);
        let process = self.processes.remove(&tid)?;
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
        }
        resume(tid, None);
        None
    }

    /// `child` was made by thread `by`: a thread of its process, or a new process.
    fn born(&mut self, child: i32, by: i32) {
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
        }
        if self.early.remove(&child) {
            resume(child, None);
        } else {
            self.newborn.insert(child);
        }
    }

    /// Process `pid` executed a program (by any of its threads: the kernel gave that thread
    /// the process's id, and the others are gone).
    fn executed(&mut self, pid: i32) -> TreeEvent {
        if let Ok(former) = ptrace::getevent(Pid::from_raw(pid)) {
            self.threads.remove(&(former as i32));
        }
        self.threads.retain(|tid, group| *group != pid || *tid == pid);
        self.threads.insert(pid, pid);
        let process = self.processes.entry(pid).or_insert_with(|| Process::new(pid, 0, Vec::new()));
        process.execs += 1;
        process.modules.clear();
        process.watch = None;
        process.command = crate::procfs::command_line(pid).unwrap_or_default();
        if !std::mem::take(&mut process.probed) {
            // No probe saw the call that got here.
            *process.startup.entry(EXECVE).or_default() += 1;
        }
        match Target::at_exec(pid, true) {
            Ok(mut target) => {
                for (nr, calls) in target.take_startup_calls() {
                    *process.startup.entry(nr).or_default() += calls;
                }
                TreeEvent::Exec(target, process.clone())
            }
            Err(e) => {
                // Not taken over: it runs on, unprobed, if it still can.
                resume(pid, None);
                TreeEvent::ExecUnprobed(process.clone(), e)
            }
        }
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
