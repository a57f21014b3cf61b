//! `lopi run --log FILE`: every system call the probes logged, one line each as `strace -f -o
//! FILE` writes it (`PID  openat(AT_FDCWD, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 3`), in the
//! order the calls ended over every thread and process of the record. Paths, argv and the
//! first 32 bytes of data read or written are as the call saw them (copied by the probe);
//! flags of the common calls and errno names are decoded as strace does. The calls a program
//! made before its probes went live (its `execve`, the dynamic loader's) are those lopi
//! logged through ptrace into the process records.
use anyhow::{Context, Result};
use lopi_rt_abi::syscall_log::{self as log, Bytes};
use lopi_trace::LoggedCall;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

/// `--log FILE`, of `lopi run` and `lopi attach`.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct LogArg {
    /// Write every system call to FILE as `strace -f -o FILE` does, one line each with its
    /// arguments (paths, flags, the first 32 bytes of data) and result, from the probes'
    /// per-thread logs (with --probe syscall; LOPI_TRACE_EVENTS sizes a thread's log).
    #[arg(long, value_name = "FILE")]
    pub log: Option<std::path::PathBuf>,
}

impl LogArg {
    /// Has the system-call probes log each call, when asked.
    pub(crate) fn ask(&self, probes: &mut crate::live::Probes) -> Result<()> {
        if self.log.is_some() {
            if !probes.probes.probes_system_calls() {
                anyhow::bail!("--log writes the system calls the probes see: use it with --probe syscall");
            }
            probes.recording.syscall_log = true;
        }
        Ok(())
    }

    /// Writes the log of the record `data`, when asked, and says what it holds.
    pub(crate) fn write(&self, data: &str, quiet: bool) -> Result<()> {
        let Some(log) = &self.log else { return Ok(()) };
        let written = write(Path::new(data), log)?;
        if written.dropped > 0 {
            eprintln!("lopi: {} system calls are not in {}: a thread's log was full (LOPI_TRACE_EVENTS=N raises its 1M slots)", written.dropped, log.display());
        }
        if !quiet {
            eprintln!("lopi: wrote {} system calls to {}", written.calls, log.display());
        }
        Ok(())
    }
}

/// What a log held.
pub(crate) struct Written {
    pub calls: usize,
    /// Calls not logged: their thread's trace was full.
    pub dropped: u64,
}

/// Writes the log of the record `data` to `to`.
pub(crate) fn write(data: &Path, to: &Path) -> Result<Written> {
    let file = crate::files::read_data_quietly(data)?;
    let mut calls: Vec<(u64, u32, &LoggedCall)> = Vec::new();
    let mut dropped = 0;
    for thread in &file.threads {
        dropped += thread.header.trace_dropped;
        let logged = &thread.syscalls;
        for (i, call) in logged.iter().enumerate() {
            // An execve logged as made, then again as it returned: it failed.
            let failed_later = call.record.flags == log::PENDING && logged.get(i + 1).is_some_and(|next| next.record.nr == call.record.nr && next.record.flags == log::RETURNED);
            if !failed_later {
                let tid = if call.record.tid != 0 { call.record.tid } else { thread.header.tid };
                calls.push((call.tsc, tid, call));
            }
        }
    }
    // The calls made before the probes went live, which lopi logged through ptrace (each
    // process's loader's, and the execve that no probe saw).
    for process in &file.processes {
        calls.extend(process.startup_log.iter().map(|call| (call.tsc, process.pid, call)));
    }
    calls.sort_by_key(|&(tsc, tid, ..)| (tsc, tid));
    let mut out = std::io::BufWriter::new(std::fs::File::create(to).with_context(|| format!("creating {}", to.display()))?);
    for (_, tid, call) in &calls {
        let (text, result) = line(call);
        let call_text = format!("{tid:<5} {text}");
        // strace's column for results (`-a 40`).
        writeln!(out, "{call_text:<39} = {result}").with_context(|| format!("writing {}", to.display()))?;
    }
    out.flush().with_context(|| format!("writing {}", to.display()))?;
    Ok(Written { calls: calls.len(), dropped })
}

/// `name(args)` and the result.
pub(crate) fn line(call: &LoggedCall) -> (String, String) {
    let r = &call.record;
    let nr = u64::from(r.nr);
    let name = lopi_trace::syscall_name(nr);
    let names = lopi_script::syscall_args(&name).unwrap_or(&[]);
    let flags = names.iter().position(|&n| n == "flags").map(|i| r.args[i]);
    let args: Vec<String> = names
        .iter()
        .enumerate()
        // openat's mode means something only when it creates.
        .filter(|&(i, &n)| !(n == "mode" && matches!(name.as_str(), "open" | "openat") && flags.is_some_and(|f| f & O_CREAT == 0 && f & O_TMPFILE != O_TMPFILE) && i + 1 == names.len()))
        .map(|(i, &n)| argument(&name, n, i, call))
        .collect();
    (format!("{name}({})", args.join(", ")), result(&name, call))
}

fn result(name: &str, call: &LoggedCall) -> String {
    let r = &call.record;
    match r.flags {
        log::NO_RETURN | log::MADE => return "?".into(),
        log::PENDING => return "0".into(),
        _ => {}
    }
    if lopi_rt_abi::syscall_name::is_error(r.ret) {
        let number = -(r.ret as i64) as i32;
        // The kernel's name; the C library's text (strace's): the kernel's comments differ
        // ("Bad file number" for EBADF).
        return match ::syscalls::Errno::new(number).name_and_description() {
            Some((n, _)) => format!("-1 {n} ({})", strerror(number)),
            None => format!("-1 errno {number}"),
        };
    }
    match name {
        "mmap" | "brk" | "mremap" | "shmat" => format!("{:#x}", r.ret),
        _ => (r.ret as i64).to_string(),
    }
}

/// The C library's text for `errno`, as strace prints it: the standard library's message for
/// an OS error is `strerror`'s, followed by " (os error N)".
fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    text.strip_suffix(&format!(" (os error {errno})")).unwrap_or(&text).to_string()
}

/// Argument `i`, named `arg` by the kernel's tracepoint, of call `name`.
fn argument(name: &str, arg: &str, i: usize, call: &LoggedCall) -> String {
    let value = call.record.args[i];
    for (k, (part, bytes)) in log::bytes_of(u64::from(call.record.nr)).iter().zip(&call.bytes).enumerate() {
        let more = call.record.cut[k] != 0;
        match *part {
            Bytes::Path(a) if a as usize == i && value != 0 => return quoted(bytes, more),
            Bytes::Data { buf, .. } if buf as usize == i && value != 0 => return quoted(bytes, more),
            Bytes::Argv(a) if a as usize == i && value != 0 => {
                let strings: Vec<String> = bytes.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| quoted(s, false)).collect();
                return format!("[{}{}]", strings.join(", "), if more { ", ..." } else { "" });
            }
            _ => {}
        }
    }
    if log::envp_arg(u64::from(call.record.nr)) == Some(i) && value != 0 && call.record.envc != 0 {
        return format!("{value:#x} /* {} vars */", call.record.envc - 1);
    }
    if let Some(&(.., constant)) = CONSTANTS.iter().find(|&&(c, a, v, _)| c == name && a == arg && v == value) {
        return constant.into();
    }
    match (name, arg) {
        (_, "dfd" | "olddfd" | "newdfd" | "dirfd") if value as i32 == AT_FDCWD => "AT_FDCWD".into(),
        ("open" | "openat", "flags") => open_flags(value),
        ("open" | "openat" | "creat" | "mkdir" | "mkdirat" | "chmod" | "fchmod" | "fchmodat" | "mknodat", "mode") => format!("0{value:o}"),
        ("access" | "faccessat" | "faccessat2", "mode") => access_mode(value),
        (_, "prot") => bits(value, &[(1, "PROT_READ"), (2, "PROT_WRITE"), (4, "PROT_EXEC")], "PROT_NONE"),
        ("mmap", "flags") => mmap_flags(value),
        (_, "sig") if (1..32).contains(&value) => SIGNALS[value as usize - 1].into(),
        ("futex", "op") => futex_op(value),
        ("arch_prctl", "arg2") => format!("{value:#x}"),
        ("wait4" | "waitid", "options") => bits(value, &[(1, "WNOHANG"), (2, "WUNTRACED"), (8, "WCONTINUED"), (0x4000_0000, "__WALL"), (0x8000_0000, "__WCLONE")], "0"),
        ("dup3" | "pipe2" | "eventfd2" | "epoll_create1" | "inotify_init1" | "signalfd4", "flags") => bits(value, &[(0o2000000, "O_CLOEXEC"), (0o4000, "O_NONBLOCK")], "0"),
        _ if is_pointer(arg) => if value == 0 { "NULL".into() } else { format!("{value:#x}") },
        _ if arg == "fd" || arg.ends_with("fd") => (value as i32).to_string(),
        // An `int` holding -1 (`wait4`'s pid), or a negative `long`.
        _ if value < 1 << 32 && (value as u32 as i32) < 0 && (value as u32 as i32) > -4096 => (value as u32 as i32).to_string(),
        _ if (value as i64) < 0 && (value as i64) > -4096 => (value as i64).to_string(),
        _ => value.to_string(),
    }
}

const AT_FDCWD: i32 = -100;
/// Arguments that take one of a few named values: (call, argument, value, name).
const CONSTANTS: &[(&str, &str, u64, &str)] = &[
    ("lseek", "whence", 0, "SEEK_SET"),
    ("lseek", "whence", 1, "SEEK_CUR"),
    ("lseek", "whence", 2, "SEEK_END"),
    ("lseek", "whence", 3, "SEEK_DATA"),
    ("lseek", "whence", 4, "SEEK_HOLE"),
    ("rt_sigprocmask", "how", 0, "SIG_BLOCK"),
    ("rt_sigprocmask", "how", 1, "SIG_UNBLOCK"),
    ("rt_sigprocmask", "how", 2, "SIG_SETMASK"),
    ("fcntl", "cmd", 0, "F_DUPFD"),
    ("fcntl", "cmd", 1, "F_GETFD"),
    ("fcntl", "cmd", 2, "F_SETFD"),
    ("fcntl", "cmd", 3, "F_GETFL"),
    ("fcntl", "cmd", 4, "F_SETFL"),
    ("fcntl", "cmd", 5, "F_GETLK"),
    ("fcntl", "cmd", 6, "F_SETLK"),
    ("fcntl", "cmd", 7, "F_SETLKW"),
    ("fcntl", "cmd", 1030, "F_DUPFD_CLOEXEC"),
    ("arch_prctl", "option", 0x1001, "ARCH_SET_GS"),
    ("arch_prctl", "option", 0x1002, "ARCH_SET_FS"),
    ("arch_prctl", "option", 0x1003, "ARCH_GET_FS"),
    ("arch_prctl", "option", 0x1004, "ARCH_GET_GS"),
    ("arch_prctl", "option", 0x3001, "ARCH_CET_STATUS"),
    ("clock_gettime", "which_clock", 0, "CLOCK_REALTIME"),
    ("clock_gettime", "which_clock", 1, "CLOCK_MONOTONIC"),
    ("clock_gettime", "which_clock", 2, "CLOCK_PROCESS_CPUTIME_ID"),
    ("clock_gettime", "which_clock", 3, "CLOCK_THREAD_CPUTIME_ID"),
    ("clock_gettime", "which_clock", 4, "CLOCK_MONOTONIC_RAW"),
    ("clock_gettime", "which_clock", 7, "CLOCK_BOOTTIME"),
    ("clock_nanosleep", "which_clock", 0, "CLOCK_REALTIME"),
    ("clock_nanosleep", "which_clock", 1, "CLOCK_MONOTONIC"),
    ("prlimit64", "resource", 3, "RLIMIT_STACK"),
    ("prlimit64", "resource", 4, "RLIMIT_CORE"),
    ("prlimit64", "resource", 7, "RLIMIT_NOFILE"),
    ("prlimit64", "resource", 9, "RLIMIT_AS"),
    ("socket", "family", 1, "AF_UNIX"),
    ("socket", "family", 2, "AF_INET"),
    ("socket", "family", 10, "AF_INET6"),
    ("socket", "family", 16, "AF_NETLINK"),
    ("futex", "val3", 0xffff_ffff, "FUTEX_BITSET_MATCH_ANY"),
];
const SIGNALS: [&str; 31] = [
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP",
    "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS",
];
const O_CREAT: u64 = 0o100;
const O_TMPFILE: u64 = 0o20200000;

/// Arguments that hold an address.
fn is_pointer(arg: &str) -> bool {
    matches!(arg, "addr" | "uaddr" | "uaddr2" | "utime" | "brk" | "start" | "envp" | "argv" | "filename" | "pathname" | "oldname" | "newname" | "tp" | "rqtp" | "rmtp" | "uts" | "act" | "oact" | "nset" | "oset" | "set" | "ufds" | "vec" | "uargs" | "tls" | "newsp" | "head" | "dirent" | "usockvec" | "optval" | "uservaddr" | "umyaddr" | "upeer_sockaddr" | "addr_len" | "upeer_addrlen" | "tloc" | "info" | "uinfo" | "usig" | "ru" | "rlim" | "new_rlim" | "old_rlim" | "utimes" | "times")
        || arg.contains("buf")
        || arg.contains("ptr")
        || arg.ends_with("addr")
}

/// `value`'s bits by name, `|`-joined, what is left in hex; `zero` for none. A name of several
/// bits (`O_SYNC` holds `O_DSYNC`'s) comes before the names of its parts, which it takes.
fn bits(value: u64, names: &[(u64, &str)], zero: &str) -> String {
    let mut parts = Vec::new();
    let mut left = value;
    for &(bit, name) in names {
        if left & bit == bit && bit != 0 {
            parts.push(name.to_string());
            left &= !bit;
        }
    }
    if left != 0 {
        parts.push(format!("{left:#x}"));
    }
    if parts.is_empty() {
        zero.to_string()
    } else {
        parts.join("|")
    }
}

fn open_flags(value: u64) -> String {
    let access = match value & 3 {
        0 => "O_RDONLY",
        1 => "O_WRONLY",
        2 => "O_RDWR",
        _ => "O_ACCMODE",
    };
    kind_and_bits(
        access,
        value & !3,
        &[
            (0o100, "O_CREAT"),
            (0o200, "O_EXCL"),
            (0o400, "O_NOCTTY"),
            (0o1000, "O_TRUNC"),
            (0o2000, "O_APPEND"),
            (0o4000, "O_NONBLOCK"),
            (0o4010000, "O_SYNC"),
            (0o10000, "O_DSYNC"),
            (0o20000, "O_ASYNC"),
            (0o40000, "O_DIRECT"),
            (0o20200000, "O_TMPFILE"),
            (0o200000, "O_DIRECTORY"),
            (0o400000, "O_NOFOLLOW"),
            (0o1000000, "O_NOATIME"),
            (0o2000000, "O_CLOEXEC"),
            (0o10000000, "O_PATH"),
        ],
    )
}

/// `FUTEX_WAIT_PRIVATE`, `FUTEX_WAKE`...: the command, then its flags.
fn futex_op(value: u64) -> String {
    const COMMANDS: [&str; 14] = [
        "FUTEX_WAIT", "FUTEX_WAKE", "FUTEX_FD", "FUTEX_REQUEUE", "FUTEX_CMP_REQUEUE", "FUTEX_WAKE_OP", "FUTEX_LOCK_PI", "FUTEX_UNLOCK_PI", "FUTEX_TRYLOCK_PI", "FUTEX_WAIT_BITSET", "FUTEX_WAKE_BITSET", "FUTEX_WAIT_REQUEUE_PI",
        "FUTEX_CMP_REQUEUE_PI", "FUTEX_LOCK_PI2",
    ];
    let Some(command) = COMMANDS.get((value & 127) as usize) else { return value.to_string() };
    let private = if value & 128 != 0 { "_PRIVATE" } else { "" };
    let realtime = if value & 256 != 0 { "|FUTEX_CLOCK_REALTIME" } else { "" };
    match value & !(127 | 128 | 256) {
        0 => format!("{command}{private}{realtime}"),
        rest => format!("{command}{private}{realtime}|{rest:#x}"),
    }
}

fn access_mode(value: u64) -> String {
    bits(value, &[(4, "R_OK"), (2, "W_OK"), (1, "X_OK")], "F_OK")
}

fn mmap_flags(value: u64) -> String {
    let kind = match value & 3 {
        1 => "MAP_SHARED",
        2 => "MAP_PRIVATE",
        3 => "MAP_SHARED_VALIDATE",
        _ => "0",
    };
    kind_and_bits(
        kind,
        value & !3,
        &[
            (0x10, "MAP_FIXED"),
            (0x20, "MAP_ANONYMOUS"),
            (0x100, "MAP_GROWSDOWN"),
            (0x800, "MAP_DENYWRITE"),
            (0x1000, "MAP_EXECUTABLE"),
            (0x2000, "MAP_LOCKED"),
            (0x4000, "MAP_NORESERVE"),
            (0x8000, "MAP_POPULATE"),
            (0x10000, "MAP_NONBLOCK"),
            (0x20000, "MAP_STACK"),
            (0x40000, "MAP_HUGETLB"),
            (0x100000, "MAP_FIXED_NOREPLACE"),
        ],
    )
}

/// `kind` (what the low bits say), then the other bits of `value` by name.
fn kind_and_bits(kind: &str, value: u64, names: &[(u64, &str)]) -> String {
    match bits(value, names, "") {
        rest if rest.is_empty() => kind.to_string(),
        rest => format!("{kind}|{rest}"),
    }
}

/// `bytes` as strace quotes them: C escapes, other unprintable bytes in octal (three digits
/// before a digit), `...` after when the call named more.
fn quoted(bytes: &[u8], more: bool) -> String {
    let mut s = String::from("\"");
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\r' => s.push_str("\\r"),
            0x0b => s.push_str("\\v"),
            0x0c => s.push_str("\\f"),
            0x20..=0x7e => s.push(b as char),
            _ if bytes.get(i + 1).is_some_and(|n| (b'0'..=b'7').contains(n)) => {
                let _ = write!(s, "\\{b:03o}");
            }
            _ => {
                let _ = write!(s, "\\{b:o}");
            }
        }
    }
    s.push('"');
    if more {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use lopi_rt_abi::syscall_log::SyscallRecord;

    fn call(nr: u32, args: [u64; 6], ret: u64, bytes: [&[u8]; 2]) -> LoggedCall {
        let record = SyscallRecord { nr, flags: log::RETURNED, ret, args, lens: [bytes[0].len() as u16, bytes[1].len() as u16], ..Default::default() };
        LoggedCall { tsc: 0, record, bytes: [bytes[0].to_vec(), bytes[1].to_vec()] }
    }

    fn joined(call: &LoggedCall) -> String {
        let (text, result) = line(call);
        format!("{text} = {result}")
    }

    #[test]
    fn lines_read_as_strace_writes_them() {
        let openat = call(257, [-100i64 as u64, 0x7000, 0o2000000, 0, 0, 0], 3, [b"/etc/ld.so.cache", b""]);
        assert_eq!(joined(&openat), r#"openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3"#);
        let missing = call(257, [-100i64 as u64, 0x7000, 0o101, 0o644, 0, 0], -2i64 as u64, [b"out.txt", b""]);
        assert_eq!(joined(&missing), r#"openat(AT_FDCWD, "out.txt", O_WRONLY|O_CREAT, 0644) = -1 ENOENT (No such file or directory)"#);
        let read = call(0, [3, 0x7ffd0000, 832, 0, 0, 0], 832, [b"\x7fELF\x02\x01\x01\x03\0\0", b""]);
        let mut read = read;
        read.record.cut = [800, 0];
        assert_eq!(joined(&read), r#"read(3, "\177ELF\2\1\1\3\0\0"..., 832) = 832"#);
        let mmap = call(9, [0, 8192, 3, 0x22, -1i64 as u64, 0], 0x7f0000001000, [b"", b""]);
        assert_eq!(joined(&mmap), "mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000001000");
        let access = call(21, [0x7000, 4, 0, 0, 0, 0], -2i64 as u64, [b"/etc/ld.so.preload", b""]);
        assert_eq!(joined(&access), r#"access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory)"#);
        let execve = call(59, [0x7000, 0x7100, 0x7200, 0, 0, 0], 0, [b"/bin/echo", b"echo\0hi\0"]);
        assert_eq!(joined(&execve), r#"execve("/bin/echo", ["echo", "hi"], 0x7200) = 0"#);
        let mut execve = execve;
        execve.record.envc = 24;
        assert_eq!(joined(&execve), r#"execve("/bin/echo", ["echo", "hi"], 0x7200 /* 23 vars */) = 0"#);
        // Flags of several bits are named once, as strace names them.
        assert_eq!(open_flags(0o4010001), "O_WRONLY|O_SYNC");
        assert_eq!(open_flags(0o20200002), "O_RDWR|O_TMPFILE");
        assert_eq!(open_flags(0o200000), "O_RDONLY|O_DIRECTORY");
        let futex = call(202, [0x7000, 137, 0, 0, 0, u32::MAX as u64], 0, [b"", b""]);
        assert_eq!(joined(&futex), "futex(0x7000, FUTEX_WAIT_BITSET_PRIVATE, 0, NULL, NULL, FUTEX_BITSET_MATCH_ANY) = 0");
        let lseek = call(8, [3, 0, 2, 0, 0, 0], 11, [b"", b""]);
        assert_eq!(joined(&lseek), "lseek(3, 0, SEEK_END) = 11");
        let mask = call(14, [2, 0x7000, 0, 8, 0, 0], 0, [b"", b""]);
        assert_eq!(joined(&mask), "rt_sigprocmask(SIG_SETMASK, 0x7000, NULL, 8) = 0");
        let wait = call(61, [-1i64 as u32 as u64, 0x7000, 1, 0, 0, 0], -10i64 as u64, [b"", b""]);
        assert_eq!(joined(&wait), "wait4(-1, 0x7000, WNOHANG, NULL) = -1 ECHILD (No child processes)");
        let write = call(1, [1, 0x7000, 3, 0, 0, 0], 3, [b"hi\n", b""]);
        assert_eq!(joined(&write), r#"write(1, "hi\n", 3) = 3"#);
    }
}
