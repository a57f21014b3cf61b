//! A process lopi holds: every thread stopped (`lopi attach`), or a program started under
//! ptrace and stopped at its entry point (`lopi run`); system calls run in it through a
//! gadget lopi writes into its code.
use crate::clock::tsc;
use crate::error::{already_traced, permission_hint, start_failure, LiveError};
use crate::procfs::{self, Mapping, Memory};
use crate::startup_log::StartupLog;
use crate::tracee::{Regs, Threads};
use lopi_rt_abi::own_calls;
use nix::errno::Errno;
use std::collections::BTreeMap;

/// A process with every thread held.
pub struct Target {
    pub(crate) threads: Threads,
    pub(crate) mem: Memory,
    /// Set by `lopi run`: the program's entry point, where it was stopped.
    entry: Option<u64>,
    /// The system calls lopi made in the process since they were last accounted for: calls
    /// and TSC ticks (the time the thread was held for them) by number. They are lopi's own,
    /// as its runtime's are (`lopi_rt_abi::own_calls`).
    pub(crate) injected: BTreeMap<u64, (u64, u64)>,
    /// The system calls a followed program made between its `exec` and its entry point (the
    /// dynamic loader's, its libraries' constructors'): calls by number.
    startup: BTreeMap<u64, u64>,
    /// `lopi run --log`: those calls logged, encoded as a trace's (see [`crate::startup_log`]).
    startup_log: Vec<u8>,
    /// Its start-up was logged: so is that of the programs its tree executes next.
    pub(crate) logs_startup: bool,
}

/// What `lopi run --log` logs of a program's start-up, through ptrace (see [`Target::at_exec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStartup {
    No,
    /// The system calls it made before its entry point.
    Calls,
    /// Those, after the `execve` that started it, which no probe saw.
    WithExec,
}

/// `syscall; int3`, written where injected system calls run.
const SYSCALL_GADGET: [u8; 3] = [0x0f, 0x05, 0xcc];

pub(crate) mod sys {
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const RT_SIGACTION: u64 = 13;
    pub const TIMER_DELETE: u64 = 226;
    pub const PROT_READ: u64 = 1;
    pub const PROT_WRITE: u64 = 2;
    pub const PROT_EXEC: u64 = 4;
    pub const MAP_PRIVATE_ANONYMOUS: u64 = 0x02 | 0x20;
    pub const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;
    /// Kernel return values that restart the interrupted system call (include/linux/errno.h).
    pub const RESTARTS: [i64; 4] = [-512, -513, -514, -516];
}

/// What can be checked about `pid` without touching it: it exists, is not lopi, runs
/// x86-64 code, and no other tracer holds it.
pub fn preflight(pid: i32) -> Result<(), LiveError> {
    if pid <= 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(LiveError::NoSuchProcess(pid));
    }
    if pid as u32 == std::process::id() {
        return Err(LiveError::Module("lopi cannot attach to itself".into()));
    }
    check_architecture(pid)?;
    match procfs::tracer(pid) {
        Some(tracer) => Err(already_traced(pid, tracer)),
        None => Ok(()),
    }
}

/// Starts `command` under ptrace and takes it over at its entry point (see
/// [`Target::adopt_launched`]); `followed`: its forks and execs are followed too (see
/// [`crate::Tree`]), and with `log` every system call of their start-ups is logged. The child
/// is killed if that fails.
pub fn launch(mut command: std::process::Command, followed: bool, log: bool) -> Result<(Target, std::process::Child), LiveError> {
    use std::os::unix::process::CommandExt;
    let program = command.get_program().to_string_lossy().into_owned();
    // SAFETY: the closure runs in the forked child before exec and makes only the
    // ptrace(PTRACE_TRACEME) system call, which is async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| nix::sys::ptrace::traceme().map_err(std::io::Error::from));
    }
    let mut child = command.spawn().map_err(|e| LiveError::Start { why: start_failure(&program, &e), program })?;
    match Target::adopt_launched(child.id() as i32, followed, log) {
        Ok(target) => Ok((target, child)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

impl Target {
    /// Seizes every thread of `pid`. Checks first what a user can fix ([`preflight`]).
    pub fn attach(pid: i32) -> Result<Self, LiveError> {
        Self::seize(pid, false)
    }

    /// Seizes every thread of `pid` to follow its process tree (`lopi attach -f`, see
    /// [`crate::Tree::attached`]): its forks, clones and execs stop for lopi, and its threads
    /// stay traced when released.
    pub fn attach_followed(pid: i32) -> Result<Self, LiveError> {
        Self::seize(pid, true)
    }

    fn seize(pid: i32, followed: bool) -> Result<Self, LiveError> {
        preflight(pid)?;
        let threads = Threads::stop_all(pid, followed).map_err(|e| match e {
            LiveError::Ptrace { errno: Errno::EPERM, .. } => match procfs::tracer(pid) {
                Some(tracer) => already_traced(pid, tracer),
                None => LiveError::PermissionDenied { pid, hint: permission_hint() },
            },
            LiveError::Ptrace { errno: Errno::ESRCH, .. } => LiveError::NoSuchProcess(pid),
            e => e,
        })?;
        let mem = Memory::open(pid).map_err(LiveError::io(format!("opening /proc/{pid}/mem")))?;
        Ok(Target { threads, mem, entry: None, injected: BTreeMap::new(), startup: BTreeMap::new(), startup_log: Vec::new(), logs_startup: false })
    }

    /// Takes over a child launched with `PTRACE_TRACEME`, once stopped at its `exec` (see
    /// [`Target::at_exec`]); `log`: its start-up is logged, its `execve` included (lopi's
    /// child made it, before any probe).
    pub fn adopt_launched(pid: i32, followed: bool, log: bool) -> Result<Self, LiveError> {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let child = nix::unistd::Pid::from_raw(pid);
        match waitpid(child, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Stopped(_, nix::sys::signal::Signal::SIGTRAP)) => {}
            Ok(other) => return Err(LiveError::Module(format!("the launched program did not stop at exec ({other:?})"))),
            Err(e) => return Err(LiveError::ptrace("waiting for", pid, e)),
        }
        Self::at_exec(pid, followed, if followed && log { LogStartup::WithExec } else { LogStartup::No })
    }

    /// Takes over process `pid`, stopped at its `exec` with its one thread: runs it to where
    /// every library is loaded and relocated and the thread's TLS (and rseq registration) set
    /// up, and neither a library's constructor nor the program's own code has run: ld.so's
    /// `RT_CONSISTENT` rendezvous (`loads::rendezvous`), or the entry point of a
    /// program without ld.so. Probes installed there see the libraries' constructors. A
    /// `followed` program's system calls on the way are counted, and logged as `log` says.
    pub fn at_exec(pid: i32, followed: bool, log: LogStartup) -> Result<Self, LiveError> {
        check_architecture(pid)?;
        let mem = Memory::open(pid).map_err(LiveError::io(format!("opening /proc/{pid}/mem")))?;
        let entry = procfs::auxv(pid, 9).ok_or_else(|| LiveError::Module("no AT_ENTRY in the program's auxiliary vector".into()))?;
        let rendezvous = crate::loads::rendezvous(pid, &mem);
        let trap = rendezvous.map_or(entry, |(at, _)| at);
        let original = mem.read(trap, 1).map_err(LiveError::io("reading where the probes go in"))?;
        mem.write(trap, &[0xcc]).map_err(LiveError::io("writing a breakpoint where the probes go in"))?;
        let mut threads = Threads::adopt(pid, followed)?;
        if followed {
            threads.counted_calls = Some(BTreeMap::new());
        }
        let regs = threads.regs(pid)?;
        if log != LogStartup::No {
            let mut startup_log = StartupLog::new(pid);
            if log == LogStartup::WithExec {
                startup_log.exec(pid, &regs);
            }
            threads.startup_log = Some(startup_log);
        }
        let reached = run_to_stop(&mut threads, &mem, pid, regs, trap, rendezvous.map(|(_, r_debug)| r_debug));
        let startup = threads.counted_calls.take().unwrap_or_default();
        let startup_log = threads.startup_log.take().map(|l| l.bytes).unwrap_or_default();
        mem.write(trap, &original).map_err(LiveError::io("restoring the code where the probes went in"))?;
        let mut at_stop = reached?;
        if rendezvous.is_none() {
            // run_injected put the exec-stop registers back; the program continues from its entry.
            at_stop.rip = entry;
        }
        threads.set_regs(pid, at_stop)?;
        // Library constructors may have started threads.
        threads.stop_new_threads()?;
        Ok(Target { threads, mem, entry: Some(entry), injected: BTreeMap::new(), startup, startup_log, logs_startup: log != LogStartup::No })
    }

    /// A followed process whose threads lopi holds (see [`Threads::hold_followed`]).
    pub(crate) fn held(threads: Threads) -> Result<Self, LiveError> {
        let pid = threads.pid;
        let mem = Memory::open(pid).map_err(LiveError::io(format!("opening /proc/{pid}/mem")))?;
        Ok(Target { threads, mem, entry: None, injected: BTreeMap::new(), startup: BTreeMap::new(), startup_log: Vec::new(), logs_startup: false })
    }

    /// Puts the trap on ld.so's rendezvous that tells lopi of libraries the process loads
    /// later (see [`crate::loads`]).
    pub(crate) fn watch_loads(&self) -> Result<crate::loads::LoadWatch, String> {
        crate::loads::watch(self.pid(), &self.mem)
    }

    pub fn pid(&self) -> i32 {
        self.threads.pid
    }

    /// The system calls a followed program made before its entry point, by number; taken once.
    pub fn take_startup_calls(&mut self) -> BTreeMap<u64, u64> {
        std::mem::take(&mut self.startup)
    }

    /// Those calls logged (`lopi run --log`), encoded as a trace's; taken once.
    pub fn take_startup_log(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.startup_log)
    }

    /// Where `lopi run` stopped the program (its entry point), for [`plan`](crate::plan()).
    pub fn entry(&self) -> Option<u64> {
        self.entry
    }

    pub fn thread_count(&self) -> usize {
        self.threads.tids().len()
    }

    /// The threads, held still (see [`crate::Tree::detach`]).
    pub(crate) fn into_threads(self) -> Threads {
        self.threads
    }

    /// Lets every thread go (still traced when the process is followed).
    pub fn release(self) {
        self.threads.release();
    }

    /// Runs one system call in the leader thread through the gadget (counted in `injected`),
    /// with the thread's Syscall User Dispatch selector letting it through (the gadget is no
    /// code the runtime knows), as it was after.
    pub(crate) fn syscall(&mut self, gadget: Gadget, nr: u64, args: [u64; 6]) -> Result<u64, LiveError> {
        let tid = self.threads.leader();
        let mut regs: Regs = self.threads.regs(tid)?;
        let selector = (regs.fs_base != 0).then(|| regs.fs_base + u64::from(lopi_rt_abi::dispatch::SELECTOR));
        let was = selector.and_then(|at| self.mem.read(at, 1).ok()).and_then(|b| b.first().copied());
        if let (Some(at), Some(_)) = (selector, was) {
            let _ = self.mem.write(at, &[lopi_rt_abi::dispatch::ALLOW]);
        }
        regs.rip = gadget.at;
        regs.rax = nr;
        (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
        let start = tsc();
        let done = self.threads.run_injected(tid, regs, gadget.at + 2);
        if let (Some(at), Some(was)) = (selector, was) {
            let _ = self.mem.write(at, &[was]);
        }
        let e = self.injected.entry(nr).or_default();
        *e = (e.0 + 1, e.1 + tsc().saturating_sub(start));
        Ok(done?.rax)
    }

    /// Adds the calls injected so far into a module's table of the runtime's own calls,
    /// before its init (which carries the table over into the data file; it is zero and
    /// private until then, and no thread runs).
    pub(crate) fn account_injected(&mut self, table: u64) -> Result<(), LiveError> {
        for (nr, (calls, ticks)) in std::mem::take(&mut self.injected) {
            let mut entry = calls.to_le_bytes().to_vec();
            entry.extend_from_slice(&ticks.to_le_bytes());
            self.mem.write(table + own_calls::entry(nr), &entry).map_err(LiveError::io("writing lopi's call counts into the process"))?;
        }
        Ok(())
    }

    /// Writes `syscall; int3` into the alignment padding after the main executable's code
    /// segment: bytes of an executable page that no code reaches.
    pub(crate) fn place_gadget(&self, maps: &[Mapping], exe: &str) -> Result<Gadget, LiveError> {
        let executable = maps.iter().filter(|m| m.executable && m.path == exe);
        for m in executable {
            // The padding ends the mapping; the segment's last code byte is before it.
            let bytes = self.mem.read(m.end - 64, 64).map_err(LiveError::io("reading the executable's code"))?;
            let zeros = bytes.iter().rev().take_while(|&&b| b == 0).count();
            if zeros >= 8 {
                let at = m.end - 4;
                let saved = self.mem.read(at, 3).map_err(LiveError::io("reading the executable's code"))?;
                self.mem.write(at, &SYSCALL_GADGET).map_err(LiveError::io("writing into the executable's code"))?;
                return Ok(Gadget { at, saved: saved.try_into().unwrap_or_default() });
            }
        }
        Err(LiveError::Module(format!("{exe}: no padding after its code for lopi's system-call stub")))
    }

    pub(crate) fn restore_gadget(&self, gadget: Gadget) -> Result<(), LiveError> {
        self.mem.write(gadget.at, &gadget.saved).map_err(LiveError::io("restoring the executable's code"))
    }

    /// Runs `work` with a system-call gadget placed (see [`Target::place_gadget`]) and the
    /// process's mappings it was placed by; the gadget's bytes are put back whatever `work` gives.
    pub(crate) fn with_gadget<T>(&mut self, work: impl FnOnce(&mut Self, &[Mapping], Gadget) -> Result<T, LiveError>) -> Result<T, LiveError> {
        let maps = procfs::maps(self.pid()).map_err(LiveError::io("reading the process's mappings"))?;
        let exe = procfs::exe(self.pid()).map(|p| p.display().to_string()).unwrap_or_default();
        let gadget = self.place_gadget(&maps, &exe)?;
        let result = work(self, &maps, gadget);
        self.restore_gadget(gadget)?;
        result
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Gadget {
    at: u64,
    saved: [u8; 3],
}


/// ld.so's calls of `_dl_debug_state` a thread is run through at most before the one that says
/// every module is in (`RT_ADD`, then `RT_CONSISTENT`, at start-up; more with audit modules).
const RENDEZVOUS_CALLS: usize = 16;

/// Runs the thread of `pid` from its exec stop (`regs`) to the `int3` at `trap`: the entry
/// point, or (`r_debug` given) ld.so's rendezvous, through its calls until the one whose list of
/// modules is consistent, returning from each for the thread (as its `ret` would).
fn run_to_stop(threads: &mut Threads, mem: &Memory, pid: i32, regs: Regs, trap: u64, r_debug: Option<u64>) -> Result<Regs, LiveError> {
    let mut at = threads.run_injected(pid, regs, trap)?;
    let Some(r_debug) = r_debug else { return Ok(at) };
    for _ in 0..RENDEZVOUS_CALLS {
        at.rip = mem.read_u64(at.rsp).map_err(LiveError::io("reading a return address"))?;
        at.rsp += 8;
        if crate::loads::consistent(mem, r_debug) {
            return Ok(at);
        }
        at = threads.run_injected(pid, at, trap)?;
    }
    Err(LiveError::Module("ld.so never said its list of modules was consistent".into()))
}
fn check_architecture(pid: i32) -> Result<(), LiveError> {
    let exe = procfs::exe(pid).map(|p| p.display().to_string()).unwrap_or_else(|_| "?".into());
    let Ok(header) = std::fs::File::open(format!("/proc/{pid}/exe")).and_then(|f| {
        use std::io::Read;
        let mut h = [0u8; 20];
        f.take(20).read_exact(&mut h).map(|()| h)
    }) else {
        // Unreadable: ptrace will say why.
        return Ok(());
    };
    match architecture_problem(&header) {
        None => Ok(()),
        Some(what) => Err(LiveError::WrongArchitecture { pid, exe, what }),
    }
}

/// What is wrong with an executable's first 20 bytes for lopi, if anything.
fn architecture_problem(header: &[u8; 20]) -> Option<&'static str> {
    if &header[..4] != b"\x7fELF" {
        Some("not an ELF file")
    } else if header[4] != 2 {
        Some("32-bit")
    } else if u16::from_le_bytes([header[18], header[19]]) != 62 {
        Some("another machine type")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures() {
        let mut header = [0u8; 20];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 2;
        header[18] = 62;
        assert_eq!(architecture_problem(&header), None);
        header[18] = 183; // EM_AARCH64
        assert_eq!(architecture_problem(&header), Some("another machine type"));
        header[4] = 1;
        assert_eq!(architecture_problem(&header), Some("32-bit"));
        assert_eq!(architecture_problem(&[b'#'; 20]), Some("not an ELF file"));
    }
}
