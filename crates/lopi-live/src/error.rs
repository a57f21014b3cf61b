//! What can go wrong taking a process, planning or installing probes, and the messages
//! that say what to do about it.
use nix::errno::Errno;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    #[error("not allowed to trace pid {pid}: {hint}")]
    PermissionDenied { pid: i32, hint: String },
    #[error("pid {pid} is already traced by pid {tracer} ({name}); detach that tool first")]
    AlreadyTraced { pid: i32, tracer: i32, name: String },
    #[error("pid {pid} runs {exe}, which is not an x86-64 program ({what})")]
    WrongArchitecture { pid: i32, exe: String, what: &'static str },
    #[error("{what} thread {tid}: {errno}")]
    Ptrace { what: &'static str, tid: i32, errno: Errno },
    #[error("process {0} exited")]
    TargetExited(i32),
    #[error("lopi's code injected into thread {tid} stopped with {signal} at {rip:#x}")]
    InjectedFault { tid: i32, signal: nix::sys::signal::Signal, rip: u64 },
    #[error("lopi's code injected into thread {0} did not finish within 20 s")]
    InjectedTimeout(i32),
    #[error("{0}")]
    Module(String),
    #[error("cannot start {program}: {why}")]
    Start { program: String, why: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

impl LiveError {
    pub(crate) fn ptrace(what: &'static str, tid: i32, errno: Errno) -> Self {
        LiveError::Ptrace { what, tid, errno }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| LiveError::Io { what, source }
    }
}

/// Why `program` could not be started (`spawn`'s error `e`), and what to do.
pub fn start_failure(program: &str, e: &std::io::Error) -> String {
    let given = std::path::Path::new(program);
    match e.kind() {
        std::io::ErrorKind::NotFound if !program.contains('/') => "no such program in PATH (give its path)".into(),
        std::io::ErrorKind::NotFound if given.exists() => "its interpreter (the ELF loader, or a script's #! line) does not exist".into(),
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied (a directory, or a file without execute permission: chmod +x)".into(),
        _ => e.to_string(),
    }
}

pub(crate) fn already_traced(pid: i32, tracer: i32) -> LiveError {
    let name = std::fs::read_to_string(format!("/proc/{tracer}/comm")).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into());
    LiveError::AlreadyTraced { pid, tracer, name }
}

pub(crate) fn permission_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|s| s.trim().parse::<u32>().ok());
    match scope {
        Some(1) => "kernel.yama.ptrace_scope is 1 (only a parent may trace its children): run lopi as root or with CAP_SYS_PTRACE, or `sysctl kernel.yama.ptrace_scope=0`, or start the program with `lopi run`".into(),
        Some(2) => "kernel.yama.ptrace_scope is 2 (admin-only attach): run lopi as root or with CAP_SYS_PTRACE".into(),
        Some(3) => "kernel.yama.ptrace_scope is 3 (no attaching at all, until reboot): use `lopi run` or `lopi rewrite` instead".into(),
        _ => "the process belongs to another user or is not dumpable: run lopi as that user, as root, or with CAP_SYS_PTRACE".into(),
    }
}
