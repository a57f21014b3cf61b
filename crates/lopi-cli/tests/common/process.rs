//! Running processes: stdin closed, no core dumps, both pipes read, a watchdog that kills a
//! hung process; and a command line rendered for "repro" messages.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Output {
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub timed_out: bool,
}

impl Output {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    pub fn describe_status(&self) -> String {
        let mut s = describe_status(&self.status);
        if self.timed_out {
            s.push_str(" (killed by the test's watchdog: timeout)");
        }
        s
    }
}

pub fn describe_status(st: &ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!(
            "killed by signal {s}{}",
            if st.core_dumped() {
                " (core dumped)"
            } else {
                ""
            }
        ),
        _ => format!("{st:?}"),
    }
}

unsafe extern "C" {
    fn setrlimit(resource: i32, rlim: *const [u64; 2]) -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
}
const RLIMIT_CORE: i32 = 4;
const SIGKILL: i32 = 9;

/// Default per-process time limit (seconds); LOPI_TEST_TIMEOUT overrides.
pub fn default_timeout() -> Duration {
    let secs = std::env::var("LOPI_TEST_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

/// Run `cmd` with stdin closed, core dumps disabled, stdout/stderr
/// captured, and a watchdog that SIGKILLs it after `timeout`.
pub fn run(cmd: &mut Command, timeout: Duration) -> std::io::Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = [0u64, 0u64];
            setrlimit(RLIMIT_CORE, &lim);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let child_pid = child.id();
    let pid = child_pid as i32;
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(timeout) {
            // SAFETY: plain syscall; the child is not reaped before we are done.
            unsafe { kill(pid, SIGKILL) };
            return true;
        }
        false
    });
    // Read both pipes concurrently so neither can fill up and block the child.
    let mut err_pipe = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let mut stdout = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut stdout);
    let status = child.wait()?;
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        pid: child_pid,
        status,
        stdout,
        stderr,
        timed_out,
    })
}

/// Render a command line for "repro" messages.
pub fn render_cmd(cmd: &Command) -> String {
    let mut s = String::new();
    if let Some(dir) = cmd.get_current_dir() {
        let _ = write!(s, "cd {} && ", shell_quote(dir.as_os_str()));
    }
    // `env -u NAME` must come before the NAME=value assignments.
    let mut unset = String::new();
    let mut set = String::new();
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => {
                let _ = write!(set, "{}={} ", k.to_string_lossy(), shell_quote(v));
            }
            None => {
                let _ = write!(unset, "-u {} ", k.to_string_lossy());
            }
        }
    }
    if !unset.is_empty() {
        s.push_str("env ");
        s.push_str(&unset);
    }
    s.push_str(&set);
    s.push_str(&shell_quote(cmd.get_program()));
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&shell_quote(a));
    }
    s
}

fn shell_quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
