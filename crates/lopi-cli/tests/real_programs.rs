//! Real programs nobody here wrote: sqlite3 and zstd, built from Debian's
//! source packages (with symbols) and taken stripped from Debian's binary
//! packages (sqlite3's engine is libsqlite3.so.0, rewritten as well).
//!
//! For each binary: `lopi info` must find >= 99% of the discovered functions
//! probed; `lopi rewrite` instruments every function; the program's own test
//! suite (or a battery of real commands, see tests/real/*.sh) must give the
//! same output and exit code with the rewritten binary as with the original;
//! `lopi report` must show well-known functions called.
//!
//! Modes (`Mode`): every binary is rewritten with `--probe entry,exit` (the
//! tests without a suffix: batteries, sqlite's testfixture, zstd's
//! playTests); the batteries also run with plain entry counting (`_entry`)
//! and with `--trace` (`_trace`, small LOPI_TRACE_EVENTS, plus `lopi export
//! --format chrome` and `lopi flamegraph`).  The full matrix, with the long
//! suites in every mode, is bench/suites/run.sh.
//!
//! Everything is fetched and built by tests/real/prepare.sh (idempotent,
//! cached in <repo>/work-real, or $LOPI_REAL_WORK).  It needs Debian's apt
//! repositories and root for apt-get.  When it cannot run, these tests FAIL:
//! they never pass silently.
//!
//! Knobs (environment):
//!   LOPI_REAL_WORK=DIR        where to cache sources/builds (default <repo>/work-real)
//!   LOPI_REAL_TIMEOUT=SECS    bound on one battery/suite run (default 1200)
//!   LOPI_REAL_PLAYTESTS=all|source|none
//!                             where zstd's playTests.sh runs (default all: both
//!                             the source-built and the Debian zstd)
//!
//! The shared setup (modes, prepare.sh, scratch directories) is here; the rest is in
//! real_programs/: running.rs (runs with a timeout, the original's run, comparing outputs),
//! steps.rs (lopi info, rewrite and report over a binary), and the tests by program:
//! sqlite.rs, attach.rs (`lopi attach` to sqlite3), zstd.rs and large.rs (python, perl, cc1).
//!
//! Run: cargo test --release -p lopi-cli --test real_programs -- --nocapture

mod common;

#[path = "real_programs/attach.rs"]
mod attach;
#[path = "real_programs/large.rs"]
mod large;
#[path = "real_programs/running.rs"]
mod running;
#[path = "real_programs/sqlite.rs"]
mod sqlite;
#[path = "real_programs/steps.rs"]
mod steps;
#[path = "real_programs/zstd.rs"]
mod zstd;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How a test rewrites its binaries: the modes of `lopi rewrite`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// `--probe entry` (the default): call counts only.
    Entry,
    /// `--probe entry,exit`: counts, times and calling contexts.
    Timing,
    /// `--trace`: timing plus a per-thread event trace.
    Trace,
    /// No rewritten file: the original binary under `lopi run --probe entry,exit` (probes
    /// spliced in at its entry point), through a wrapper script in place of the rewrite.
    Live,
    /// `--probe entry,exit --budget 5%`: timing, with short frequent functions switched to
    /// counting (and their code changed) as the program runs.
    Budget,
}

/// Per-thread trace capacity in `Mode::Trace`: the zstd battery starts ~800
/// threads, so lopi's default (1M events, 16 MiB a thread) would write GBs.
const CI_TRACE_EVENTS: &str = "2048";

impl Mode {
    fn rewrite_args(self) -> &'static [&'static str] {
        match self {
            Mode::Entry => &["--probe", "entry"],
            Mode::Timing => &["--probe", "entry,exit"],
            Mode::Trace => &["--trace"],
            Mode::Live => &["--probe", "entry,exit"],
            Mode::Budget => &["--probe", "entry,exit", "--budget", "5%"],
        }
    }

    fn timed(self) -> bool {
        self != Mode::Entry
    }

    /// The tag of a test in this mode: `base` for timing (the original tests), else suffixed.
    fn tag(self, base: &str) -> String {
        match self {
            Mode::Entry => format!("{base}-entry"),
            Mode::Timing => base.to_string(),
            Mode::Trace => format!("{base}-trace"),
            Mode::Live => format!("{base}-live"),
            Mode::Budget => format!("{base}-budget"),
        }
    }

    /// A rewritten binary's run: records into DATA (and traces into a small buffer).
    fn record<'a>(self, cmd: &'a mut Command, data: &Path) -> &'a mut Command {
        cmd.env("LOPI_OUTPUT", data);
        if self == Mode::Trace {
            cmd.env("LOPI_TRACE_EVENTS", CI_TRACE_EVENTS);
        }
        cmd
    }
}

fn lopi() -> &'static str {
    env!("CARGO_BIN_EXE_lopi")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

fn real_dir() -> PathBuf {
    repo_root().join("tests/real")
}

fn work_dir() -> PathBuf {
    match std::env::var_os("LOPI_REAL_WORK") {
        Some(d) => PathBuf::from(d),
        None => repo_root().join("work-real"),
    }
}

/// The paths prepare.sh wrote to WORK/paths.env.
struct Prepared {
    vars: HashMap<String, String>,
}

impl Prepared {
    fn path(&self, key: &str) -> PathBuf {
        let v = self
            .vars
            .get(key)
            .unwrap_or_else(|| panic!("paths.env has no {key}"));
        let p = PathBuf::from(v);
        assert!(
            p.exists(),
            "{key}={} does not exist (rerun tests/real/prepare.sh)",
            p.display()
        );
        p
    }
}

static PREPARED: OnceLock<Result<Prepared, String>> = OnceLock::new();

fn run_prepare() -> Result<Prepared, String> {
    let work = work_dir();
    let script = real_dir().join("prepare.sh");
    println!("[real] running {} {}", script.display(), work.display());
    let t = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    println!("[real] prepare.sh took {:.1}s", t.elapsed().as_secs_f64());
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        return Err(format!(
            "tests/real/prepare.sh FAILED ({}): the real-program tests need network access to \
             Debian's apt repositories (apt-get update/source/download) and root for apt-get. \
             They do not skip; fix the environment or run prepare.sh by hand.\n--- stderr tail:\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    let env_file = work.join("paths.env");
    let text = fs::read_to_string(&env_file).map_err(|e| {
        format!(
            "prepare.sh succeeded but {} is unreadable: {e}",
            env_file.display()
        )
    })?;
    let vars = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Prepared { vars })
}

fn prepared() -> &'static Prepared {
    match PREPARED.get_or_init(run_prepare) {
        Ok(p) => p,
        Err(msg) => panic!("{msg}"),
    }
}

/// A scratch directory for one test: WORK/runs/NAME.PID (a second cargo
/// process running these tests at the same time must not clobber our
/// binaries).  Directories of processes that are gone are removed first;
/// ours is removed when the test passes (see `Cleanup`) and kept otherwise.
fn run_dir(name: &str) -> PathBuf {
    let runs = work_dir().join("runs");
    fs::create_dir_all(&runs).unwrap();
    if let Ok(entries) = fs::read_dir(&runs) {
        for e in entries.flatten() {
            let fname = e.file_name().to_string_lossy().into_owned();
            if let Some((tag, pid)) = fname.rsplit_once('.') {
                let alive = Path::new("/proc").join(pid).exists();
                if tag == name && pid.chars().all(|c| c.is_ascii_digit()) && !alive {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let d = runs.join(format!("{name}.{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Removes a run directory when dropped, unless the thread is panicking
/// (a failing test keeps its outputs and binaries for inspection).
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if std::thread::panicking() {
            println!("[real] keeping {} for inspection", self.0.display());
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn fresh_data(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let _ = fs::remove_file(&p);
    p
}

fn bash(script: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg(real_dir().join(script));
    c.env_remove("LOPI_OUTPUT");
    c.env_remove("LOPI_TRACE_EVENTS");
    c
}
