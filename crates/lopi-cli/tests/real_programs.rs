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
//! Run: cargo test --release -p lopi-cli --test real_programs -- --nocapture

mod common;

use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const MIN_COVERAGE: f64 = 99.0;

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

fn lopi_json(args: &[&str]) -> Value {
    let out = Command::new(lopi()).args(args).output().expect("run lopi");
    assert!(
        out.status.success(),
        "lopi {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "lopi {args:?}: bad JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
                .chars()
                .take(400)
                .collect::<String>()
        )
    })
}

/// `lopi info BIN --format json`: print the summary, assert the coverage.
fn info(tag: &str, bin: &Path) -> Value {
    let t = Instant::now();
    let v = lopi_json(&["info", bin.to_str().unwrap(), "--format", "json"]);
    let s = &v["summary"];
    let cov = s["coverage_percent"]
        .as_f64()
        .expect("summary.coverage_percent");
    println!(
        "[{tag}] lopi info {}: found={} probed={} skipped={} coverage={:.2}% skipped_by_reason={} ({})",
        bin.display(),
        s["found"],
        s["probed"],
        s["skipped"],
        cov,
        s["skipped_by_reason"],
        secs(t.elapsed())
    );
    if let Some(funcs) = v["functions"].as_array() {
        let skipped: Vec<String> = funcs
            .iter()
            .filter(|f| f["status"].as_str().is_some_and(|st| st != "probed"))
            .take(12)
            .map(|f| {
                let reason = f
                    .get("reason")
                    .or_else(|| f.get("skip_reason"))
                    .cloned()
                    .unwrap_or(Value::Null);
                format!(
                    "{}@{} {} {}",
                    f["name"].as_str().unwrap_or("?"),
                    f["addr"].as_str().unwrap_or("?"),
                    f["status"],
                    reason
                )
            })
            .collect();
        if !skipped.is_empty() {
            println!("[{tag}]   not probed: {}", skipped.join("; "));
        }
    }
    let found = s["found"].as_u64().unwrap_or(0);
    assert!(
        found > 100,
        "[{tag}] only {found} functions discovered in {}",
        bin.display()
    );
    assert!(
        cov >= MIN_COVERAGE,
        "[{tag}] coverage {cov}% < {MIN_COVERAGE}% for {} (summary {s})",
        bin.display()
    );
    v
}

/// `lopi rewrite BIN -o OUT` in MODE (every function counted, and with exit probes timed
/// where all its exits can be probed).
fn rewrite(tag: &str, bin: &Path, out: &Path, mode: Mode) {
    if mode == Mode::Live {
        use std::os::unix::fs::PermissionsExt;
        let script = format!("#!/bin/sh\nexec '{}' run -q {} --arg0 \"$0\" -- '{}' \"$@\"\n", lopi(), mode.rewrite_args().join(" "), bin.display());
        fs::write(out, script).unwrap();
        fs::set_permissions(out, fs::Permissions::from_mode(0o755)).unwrap();
        println!("[{tag}] {} runs {} under lopi run", out.display(), bin.display());
        return;
    }
    let t = Instant::now();
    let o = Command::new(lopi())
        .args([
            "rewrite",
            bin.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .args(mode.rewrite_args())
        .output()
        .expect("run lopi rewrite");
    assert!(
        o.status.success(),
        "[{tag}] lopi rewrite {} failed ({}):\n{}{}",
        bin.display(),
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    println!(
        "[{tag}] rewrite {} in {}: {}",
        bin.display(),
        secs(t.elapsed()),
        msg.trim()
    );
}

struct RunResult {
    stdout: String,
    code: i32,
    took: Duration,
}

/// Upper bound for one battery/suite run; a hang fails instead of blocking
/// the whole test run.  LOPI_REAL_TIMEOUT (seconds) overrides it.
fn suite_timeout() -> Duration {
    let s = std::env::var("LOPI_REAL_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1200);
    Duration::from_secs(s)
}

/// Run a command with stdin from /dev/null, in its own process group, with
/// a timeout (the whole group is killed then); stdout is the result (the
/// scripts fold stderr in themselves); stderr is kept for diagnostics.
fn run(cmd: &mut Command) -> RunResult {
    use std::os::unix::process::CommandExt;
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let base = std::env::temp_dir().join(format!("lopi-real-{}-{n}", std::process::id()));
    let out_path = base.with_extension("out");
    let err_path = base.with_extension("err");
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let limit = suite_timeout();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = String::from_utf8_lossy(&fs::read(&out_path).unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned();
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    if !stderr.trim().is_empty() {
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        println!(
            "    (stderr of {:?}: {})",
            cmd.get_program(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let code = match status {
        Some(st) => st.code().unwrap_or(128 + 99),
        None => {
            println!(
                "    TIMEOUT after {} : {cmd:?} (process group killed)",
                secs(limit)
            );
            -1
        }
    };
    RunResult {
        stdout,
        code,
        took: t.elapsed(),
    }
}

/// The ORIGINAL program's run of a battery, once per test process: the tests that rewrite
/// one binary in several modes compare against the same run.  KEY names the battery and the
/// binaries; the batteries' outputs do not depend on their scratch directory.
fn original(key: &str, cmd: impl FnOnce() -> Command) -> Arc<RunResult> {
    type Cell = Arc<OnceLock<Arc<RunResult>>>;
    static RUNS: OnceLock<Mutex<HashMap<String, Cell>>> = OnceLock::new();
    let cell = RUNS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(key.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| Arc::new(run(&mut cmd()))).clone()
}

/// Same stdout and exit code, else fail with a diff.  The original must pass.
fn assert_same(tag: &str, what: &str, dir: &Path, orig: &RunResult, rewritten: &RunResult) {
    let safe: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let a = dir.join(format!("{safe}.orig.txt"));
    let b = dir.join(format!("{safe}.rewritten.txt"));
    fs::write(&a, &orig.stdout).unwrap();
    fs::write(&b, &rewritten.stdout).unwrap();
    println!(
        "[{tag}] {what}: original {} (exit {}, {} lines), rewritten {} (exit {}) -> {}",
        secs(orig.took),
        orig.code,
        orig.stdout.lines().count(),
        secs(rewritten.took),
        rewritten.code,
        if orig.stdout == rewritten.stdout && orig.code == rewritten.code {
            "same"
        } else {
            "DIFFERENT"
        }
    );
    assert_eq!(
        orig.code, 0,
        "[{tag}] {what}: the ORIGINAL program fails (exit {}), so the environment is not as prepared; output in {}",
        orig.code,
        a.display()
    );
    if orig.stdout != rewritten.stdout || orig.code != rewritten.code {
        let diff = Command::new("diff")
            .args(["-u", a.to_str().unwrap(), b.to_str().unwrap()])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .take(80)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        panic!(
            "[{tag}] {what}: rewritten output differs from the original (exit {} vs {}).\n{}\n(full outputs: {} {})",
            orig.code,
            rewritten.code,
            diff,
            a.display(),
            b.display()
        );
    }
}

struct Report {
    json: Value,
}

impl Report {
    /// `lopi report DATA --format json`; what MODE records must be there (timing, trace
    /// events), and for a trace `lopi export --format chrome` and `lopi flamegraph` must work.
    fn load(tag: &str, data: &Path, mode: Mode) -> Report {
        assert!(
            data.exists(),
            "[{tag}] no data file {} was written (LOPI_OUTPUT)",
            data.display()
        );
        let size = fs::metadata(data).map(|m| m.len()).unwrap_or(0);
        let t = Instant::now();
        let json = lopi_json(&["report", data.to_str().unwrap(), "--format", "json"]);
        println!(
            "[{tag}] report {} ({} bytes) in {}",
            data.display(),
            size,
            secs(t.elapsed())
        );
        let timing = &json["timing"];
        if !mode.timed() {
            assert!(
                timing.is_null(),
                "[{tag}] the entry-only rewrite recorded timing data"
            );
            return Report { json };
        }
        let threads = timing["threads"].as_array().map_or(&[][..], Vec::as_slice);
        assert!(
            !threads.is_empty(),
            "[{tag}] the {mode:?} rewrite recorded no timed thread"
        );
        let events: u64 = threads
            .iter()
            .map(|t| t["trace_events"].as_u64().unwrap_or(0))
            .sum();
        let dropped: u64 = threads
            .iter()
            .map(|t| t["trace_dropped"].as_u64().unwrap_or(0))
            .sum();
        println!(
            "[{tag}] timed threads {}, probe cost {:.1} ns inside / {:.1} ns from caller, trace events {events} (dropped {dropped})",
            threads.len(),
            timing["probe_cost"]["inner_ns"].as_f64().unwrap_or(0.0),
            timing["probe_cost"]["pair_ns"].as_f64().unwrap_or(0.0)
        );
        if mode == Mode::Budget {
            let switched: usize = threads.iter().map(|t| t["switches"].as_array().map_or(0, Vec::len)).sum();
            println!("[{tag}] budget: {switched} switches in {} threads", threads.len());
            assert!(threads.iter().any(|t| t["budget"]["checks"].as_u64() > Some(0)), "[{tag}] no thread made a budget check");
        }
        if mode == Mode::Trace {
            assert!(events > 0, "[{tag}] --trace recorded no trace event");
            exports(tag, data);
        } else {
            assert_eq!(events, 0, "[{tag}] trace events without --trace");
        }
        Report { json }
    }

    /// Timed functions by inclusive time, most first.
    fn top_by_time(&self, n: usize) -> Vec<(String, f64)> {
        let mut f: Vec<(String, f64)> = self.json["functions"]
            .as_array()
            .expect("report.functions")
            .iter()
            .filter_map(|f| Some((f["name"].as_str()?.to_string(), f["total_ns"].as_f64()?)))
            .collect();
        f.sort_by(|a, b| b.1.total_cmp(&a.1));
        f.truncate(n);
        f
    }

    /// NAME is timed and among the N functions with the most inclusive time.
    fn expect_hot(&self, tag: &str, name: &str, n: usize) {
        let top = self.top_by_time(n);
        println!("[{tag}] top {n} by inclusive time: {top:?}");
        assert!(
            top.iter().any(|(f, t)| f == name && *t > 0.0),
            "[{tag}] {name} is not among the {n} functions with the most time: {top:?}"
        );
    }

    fn functions(&self) -> Vec<(String, String, u64)> {
        self.json["functions"]
            .as_array()
            .expect("report.functions")
            .iter()
            .map(|f| {
                (
                    f["name"].as_str().unwrap_or("").to_string(),
                    f["module"].as_str().unwrap_or("").to_string(),
                    f["calls"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Calls of the functions named exactly NAME (in modules whose path
    /// contains MODULE, when given).
    fn calls(&self, name: &str, module: Option<&str>) -> u64 {
        self.functions()
            .iter()
            .filter(|(n, m, _)| n == name && in_module(m, module))
            .map(|(_, _, c)| *c)
            .sum()
    }

    fn calls_prefix(&self, prefix: &str) -> u64 {
        self.functions()
            .iter()
            .filter(|(n, _, _)| n.starts_with(prefix))
            .map(|(_, _, c)| *c)
            .sum()
    }

    fn module_totals(&self, module: &str) -> (usize, u64) {
        let f: Vec<_> = self
            .functions()
            .into_iter()
            .filter(|(_, m, c)| m.contains(module) && *c > 0)
            .collect();
        (f.len(), f.iter().map(|(_, _, c)| c).sum())
    }

    fn expect(&self, tag: &str, name: &str, module: Option<&str>) -> u64 {
        let c = self.calls(name, module);
        println!(
            "[{tag}]   {name}{}: {c} calls",
            module.map(|m| format!(" in {m}")).unwrap_or_default()
        );
        assert!(
            c > 0,
            "[{tag}] {name} has no recorded calls (module filter {module:?})"
        );
        c
    }

    fn top(&self, module: Option<&str>, n: usize) -> Vec<(String, String, u64)> {
        let mut f: Vec<_> = self
            .functions()
            .into_iter()
            .filter(|(_, m, _)| in_module(m, module))
            .collect();
        f.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        f.truncate(n);
        f
    }

    fn print_top(&self, tag: &str, title: &str, module: Option<&str>) {
        println!("[{tag}] top 10 functions, {title}:");
        for (i, (name, m, c)) in self.top(module, 10).iter().enumerate() {
            let base = Path::new(m)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            println!("[{tag}]   {:>2}. {:>12}  {}  ({})", i + 1, c, name, base);
        }
    }
}

/// `lopi export DATA --format chrome` and `lopi flamegraph DATA` succeed on a trace.
fn exports(tag: &str, data: &Path) {
    let dir = data.parent().unwrap();
    let chrome = dir.join("trace.chrome.json");
    let svg = dir.join("flamegraph.svg");
    for (args, out) in [
        (vec!["export", "--format", "chrome", "-o"], &chrome),
        (vec!["flamegraph", "-o"], &svg),
    ] {
        let t = Instant::now();
        let o = Command::new(lopi())
            .args(&args[..1])
            .arg(data)
            .args(&args[1..])
            .arg(out)
            .output()
            .expect("run lopi");
        let msg = String::from_utf8_lossy(&o.stderr).trim().to_string();
        assert!(
            o.status.success() && out.exists(),
            "[{tag}] lopi {args:?} {} failed ({}): {msg}",
            data.display(),
            o.status
        );
        let len = fs::metadata(out).map(|m| m.len()).unwrap_or(0);
        println!("[{tag}] {msg} ({len} bytes, {})", secs(t.elapsed()));
        let _ = fs::remove_file(out);
    }
}

fn in_module(module_path: &str, want: Option<&str>) -> bool {
    match want {
        None => true,
        Some(w) => module_path.contains(w),
    }
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

// ------------------------------------------------------------------ sqlite

/// Source-built sqlite3 shell (engine compiled in, full symbols).
fn sqlite3_source_built(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("sqlite3-src");
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let orig = p.path("SQLITE3_SRC_BIN");
    info(tag, &orig);
    let rw = dir.join("sqlite3");
    rewrite(tag, &orig, &rw, mode);

    let scratch = dir.join("scratch");
    let a = original(&format!("sqlite-battery.sh {}", orig.display()), || {
        let mut c = bash("sqlite-battery.sh");
        c.arg(&orig).arg(&scratch);
        c
    });
    let data = fresh_data(&dir, "battery.lopi");
    let b = run(mode.record(bash("sqlite-battery.sh").arg(&rw).arg(&scratch), &data));
    assert_same(tag, "sqlite-battery.sh", &dir, &a, &b);

    let r = Report::load(tag, &data, mode);
    r.expect(tag, "sqlite3_prepare_v2", None);
    r.expect(tag, "sqlite3_step", None);
    r.expect(tag, "sqlite3VdbeExec", None);
    r.expect(tag, "sqlite3_open_v2", None);
    r.expect(tag, "do_meta_command", None);
    r.print_top(tag, "source-built sqlite3 shell (battery)", None);
    if mode.timed() {
        r.expect_hot(tag, "sqlite3VdbeExec", 15);
        r.expect_hot(tag, "sqlite3_step", 15);
    }
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_sqlite3_source_built() {
    sqlite3_source_built(Mode::Timing);
}

#[test]
fn real_sqlite3_source_built_entry() {
    sqlite3_source_built(Mode::Entry);
}

#[test]
fn real_sqlite3_source_built_trace() {
    sqlite3_source_built(Mode::Trace);
}

#[test]
fn real_sqlite3_source_built_live() {
    sqlite3_source_built(Mode::Live);
}

#[test]
fn real_sqlite3_source_built_budget() {
    sqlite3_source_built(Mode::Budget);
}

/// `lopi attach` to the source-built sqlite3 shell in the middle of real work (the same
/// query over a 50k-row table, many times): the shell's output is unchanged, its code equals
/// the file again after detach, and the attached second has the call proportions of the same
/// workload recorded from start to end by the statically rewritten shell.
#[test]
fn real_sqlite3_attach() {
    let p = prepared();
    let tag = "sqlite3-attach";
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let orig = p.path("SQLITE3_SRC_BIN");
    let db = dir.join("t.db");
    let setup = "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);\n\
        WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<50000) \
        INSERT INTO t SELECT x, printf('%08d-%d', x*7919 % 1000003, x % 97) FROM c;\n";
    // SQL as the shell's argument: run() gives commands no stdin.
    let shell = |sql: String| -> Command {
        let mut c = Command::new(&orig);
        c.arg(&db).arg(sql);
        c
    };
    let setup_run = run(&mut shell(setup.to_string()));
    assert_eq!(setup_run.code, 0, "[{tag}] setup failed");
    let query = "SELECT count(*), sum(length(b)), max(a) FROM t WHERE b LIKE '%12%' AND a % 3 <> 1;\n";
    let rounds = |n: usize| query.repeat(n);

    // The whole workload (fewer rounds) through the statically rewritten shell: the
    // proportions to expect.
    let whole = fresh_data(&dir, "whole.lopi");
    let rewritten = dir.join("sqlite3.rewritten");
    rewrite(tag, &orig, &rewritten, Mode::Timing);
    let w = run(Command::new(&rewritten).arg(&db).arg(rounds(40)).env("LOPI_OUTPUT", &whole));
    assert_eq!(w.code, 0, "[{tag}] the rewritten shell failed");

    // The original, many rounds (1500: 3-5 s, so that it cannot end while attached on a fast
    // machine), attached for one second in the middle.
    let want = run(&mut shell(rounds(1500)));
    let data = fresh_data(&dir, "attached.lopi");
    let child = shell(rounds(1500)).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let o = Command::new(lopi())
        .args(["attach", &pid.to_string(), "--probe", "entry,exit", "--duration", "1s"])
        .env("LOPI_OUTPUT", &data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    println!("[{tag}] lopi attach in {}:\n{err}", secs(t.elapsed()));
    assert!(o.status.success(), "[{tag}] lopi attach failed: {err}");
    // The shell is still running: its code must be the file's again.
    if let Err(e) = common::code_matches_file(pid as i32, &orig) {
        panic!("[{tag}] after detach: {e}");
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "[{tag}] the attached shell failed: {}", out.status);
    assert!(out.stdout == want.stdout.as_bytes(), "[{tag}] the attached shell's output differs from the original's");

    let whole = Report::load(tag, &whole, Mode::Timing);
    let attached = Report::load(tag, &data, Mode::Live);
    attached.expect_hot(tag, "sqlite3VdbeExec", 10);
    // Shares of the 8 most-called functions of the whole run, in both.
    let calls = |r: &Report| -> HashMap<String, u64> { r.functions().into_iter().map(|(name, _, n)| (name, n)).collect() };
    let (w, a) = (calls(&whole), calls(&attached));
    let mut top: Vec<(&String, &u64)> = w.iter().collect();
    top.sort_by(|x, y| y.1.cmp(x.1));
    top.truncate(8);
    let share = |m: &HashMap<String, u64>, name: &str| {
        let sum: u64 = top.iter().map(|(n, _)| m.get(*n).copied().unwrap_or(0)).sum();
        m.get(name).copied().unwrap_or(0) as f64 / sum.max(1) as f64
    };
    for (name, _) in &top {
        let (sw, sa) = (share(&w, name), share(&a, name));
        println!("[{tag}] {name}: share {sa:.4} attached, {sw:.4} whole run (rewritten file)");
        assert!((sa - sw).abs() <= 0.03 * sw + 0.002, "[{tag}] {name}: share {sa:.4} while attached, {sw:.4} over the whole run");
    }
}

/// testfixture (sqlite's TCL test harness) running sqlite's own test files.
#[test]
fn real_sqlite3_testfixture() {
    let p = prepared();
    let tag = "testfixture";
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let orig = p.path("TESTFIXTURE");
    let src = p.path("SQLITE_SRC");
    info(tag, &orig);
    // The original and the rewritten testfixture run from paths of the same length and with
    // the same environment (LOPI_OUTPUT too: the original ignores it): how many cases sqlite's
    // test/withM.test counts (1095, 1096 or 1097) depends on the size of argv + environment.
    let copy = dir.join("o/testfixture");
    let rw = dir.join("r/testfixture");
    fs::create_dir_all(copy.parent().unwrap()).unwrap();
    fs::create_dir_all(rw.parent().unwrap()).unwrap();
    fs::copy(&orig, &copy).unwrap();
    rewrite(tag, &orig, &rw, Mode::Timing);

    let data = fresh_data(&dir, "suite.lopi");
    let a = run(Mode::Timing.record(bash("sqlite-testfixture.sh").arg(&copy).arg(&src), &data));
    assert!(
        !data.exists(),
        "[{tag}] the original testfixture wrote {}",
        data.display()
    );
    let b = run(Mode::Timing.record(bash("sqlite-testfixture.sh").arg(&rw).arg(&src), &data));
    if let Some(last) = a.stdout.lines().last() {
        println!("[{tag}] original: {last}");
    }
    if let Some(last) = b.stdout.lines().last() {
        println!("[{tag}] rewritten: {last}");
    }
    assert_same(tag, "sqlite test/*.test via testfixture", &dir, &a, &b);

    let r = Report::load(tag, &data, Mode::Timing);
    r.expect(tag, "sqlite3_prepare_v2", None);
    r.expect(tag, "sqlite3VdbeExec", None);
    r.expect(tag, "sqlite3BtreeInsert", None);
    r.expect(tag, "DbObjCmd", None);
    r.print_top(tag, "testfixture (sqlite's own tests)", None);
    println!("[{tag}] total {}", secs(t.elapsed()));
}

/// Debian's stripped sqlite3 + libsqlite3.so.0, and the source-built
/// libsqlite3.so.0 under Debian's shell; top-10 of both libraries.
fn sqlite3_debian_and_libraries(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("sqlite3-deb");
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let deb_shell = p.path("DEB_SQLITE3");
    let deb_lib = p.path("DEB_LIBSQLITE3");
    let src_lib = p.path("LIBSQLITE3_SRC");
    info(tag, &deb_shell);
    info(tag, &deb_lib);
    info(tag, &src_lib);

    let deb_lib_dir = deb_lib.parent().unwrap().to_path_buf();
    let rw_deb_dir = dir.join("deb-lib");
    let rw_src_dir = dir.join("src-lib");
    fs::create_dir_all(&rw_deb_dir).unwrap();
    fs::create_dir_all(&rw_src_dir).unwrap();
    let rw_shell = dir.join("sqlite3");
    rewrite(tag, &deb_shell, &rw_shell, mode);
    rewrite(tag, &deb_lib, &rw_deb_dir.join("libsqlite3.so.0"), mode);
    rewrite(tag, &src_lib, &rw_src_dir.join("libsqlite3.so.0"), mode);

    let scratch = dir.join("scratch");
    // baseline: Debian's shell and library, untouched
    let base = original(
        &format!(
            "sqlite-battery.sh {} {}",
            deb_shell.display(),
            deb_lib.display()
        ),
        || {
            let mut c = bash("sqlite-battery.sh");
            c.arg(&deb_shell)
                .arg(&scratch)
                .env("LD_LIBRARY_PATH", &deb_lib_dir);
            c
        },
    );

    // Debian's shell and library, both rewritten
    let data_deb = fresh_data(&dir, "debian.lopi");
    let b = run(mode.record(
        bash("sqlite-battery.sh")
            .arg(&rw_shell)
            .arg(&scratch)
            .env("LD_LIBRARY_PATH", &rw_deb_dir),
        &data_deb,
    ));
    assert_same(
        tag,
        "sqlite-battery.sh, rewritten Debian sqlite3 + libsqlite3.so.0",
        &dir,
        &base,
        &b,
    );

    // Debian's shell (original) over the rewritten source-built library
    let data_src = fresh_data(&dir, "srclib.lopi");
    let c = run(mode.record(
        bash("sqlite-battery.sh")
            .arg(&deb_shell)
            .arg(&scratch)
            .env("LD_LIBRARY_PATH", &rw_src_dir),
        &data_src,
    ));
    assert_same(
        tag,
        "sqlite-battery.sh, Debian sqlite3 + rewritten source-built libsqlite3.so.0",
        &dir,
        &base,
        &c,
    );

    let rd = Report::load(tag, &data_deb, mode);
    rd.expect(tag, "sqlite3_prepare_v2", Some("libsqlite3"));
    rd.expect(tag, "sqlite3_step", Some("libsqlite3"));
    let (n, calls) = rd.module_totals(rw_shell.to_str().unwrap());
    println!("[{tag}]   stripped shell: {n} functions called, {calls} calls");
    assert!(
        n > 10 && calls > 0,
        "[{tag}] the rewritten stripped shell recorded too little ({n} functions)"
    );
    let (n, calls) = rd.module_totals("libsqlite3");
    println!("[{tag}]   stripped libsqlite3.so.0: {n} functions called, {calls} calls");

    let rs = Report::load(tag, &data_src, mode);
    rs.expect(tag, "sqlite3_prepare_v2", Some("libsqlite3"));
    rs.expect(tag, "sqlite3VdbeExec", Some("libsqlite3"));
    let (n, calls) = rs.module_totals("libsqlite3");
    println!("[{tag}]   source-built libsqlite3.so.0: {n} functions called, {calls} calls");

    rs.print_top(
        tag,
        "source-built libsqlite3.so.0 (symbols)",
        Some("libsqlite3"),
    );
    rd.print_top(tag, "Debian's stripped libsqlite3.so.0", Some("libsqlite3"));
    rd.print_top(
        tag,
        "Debian's stripped sqlite3 shell",
        Some(rw_shell.to_str().unwrap()),
    );
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_sqlite3_debian_and_libraries() {
    sqlite3_debian_and_libraries(Mode::Timing);
}

#[test]
fn real_sqlite3_debian_and_libraries_entry() {
    sqlite3_debian_and_libraries(Mode::Entry);
}

#[test]
fn real_sqlite3_debian_and_libraries_trace() {
    sqlite3_debian_and_libraries(Mode::Trace);
}

// ------------------------------------------------------------------ zstd

fn playtests_wanted(which: &str) -> bool {
    match std::env::var("LOPI_REAL_PLAYTESTS").as_deref() {
        Ok("none") => false,
        Ok("source") => which == "source",
        _ => true,
    }
}

/// zstd-battery.sh with the original and the rewritten ORIG, then (in timing mode only)
/// zstd's own cli-tests and playTests.sh.
fn zstd_common(tag: &str, orig: &Path, which: &str, mode: Mode) -> (Cleanup, Report) {
    let p = prepared();
    let datagen = p.path("DATAGEN");
    let src = p.path("ZSTD_SRC");
    let dir = run_dir(tag);
    let cleanup = Cleanup(dir.clone());
    info(tag, orig);
    let rw = dir.join("zstd");
    rewrite(tag, orig, &rw, mode);
    let data = fresh_data(&dir, "zstd.lopi");

    let scratch = dir.join("scratch");
    let a = original(&format!("zstd-battery.sh {}", orig.display()), || {
        let mut c = bash("zstd-battery.sh");
        c.arg(orig).arg(&datagen).arg(&scratch);
        c
    });
    let b = run(mode.record(
        bash("zstd-battery.sh").arg(&rw).arg(&datagen).arg(&scratch),
        &data,
    ));
    assert_same(tag, "zstd-battery.sh", &dir, &a, &b);
    if mode != Mode::Timing {
        return (cleanup, Report::load(tag, &data, mode));
    }

    let what = if playtests_wanted(which) {
        "all"
    } else {
        "cli"
    };
    let a = run(bash("zstd-playtests.sh")
        .arg(orig)
        .arg(&datagen)
        .arg(&src)
        .arg(what));
    let b = run(mode.record(
        bash("zstd-playtests.sh")
            .arg(&rw)
            .arg(&datagen)
            .arg(&src)
            .arg(what),
        &data,
    ));
    for l in a
        .stdout
        .lines()
        .filter(|l| l.starts_with("PASSED") || l.starts_with("FAILED") || l.contains(" rc="))
    {
        println!("[{tag}] original suite: {l}");
    }
    for l in b
        .stdout
        .lines()
        .filter(|l| l.starts_with("PASSED") || l.starts_with("FAILED") || l.contains(" rc="))
    {
        println!("[{tag}] rewritten suite: {l}");
    }
    let label = if what == "all" {
        "zstd tests/cli-tests + tests/playTests.sh"
    } else {
        "zstd tests/cli-tests"
    };
    assert_same(tag, label, &dir, &a, &b);

    let r = Report::load(tag, &data, mode);
    (cleanup, r)
}

/// Source-built zstd (libzstd compiled in, full symbols).
fn zstd_source_built(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("zstd-src");
    let t = Instant::now();
    let orig = p.path("ZSTD_SRC_BIN");
    let (_cleanup, r) = zstd_common(tag, &orig, "source", mode);
    let c = r.calls_prefix("ZSTD_compress");
    println!("[{tag}]   ZSTD_compress*: {c} calls");
    assert!(c > 0, "[{tag}] no ZSTD_compress* calls recorded");
    r.expect(tag, "ZSTD_compressStream2", None);
    r.expect(tag, "ZSTD_decompressStream", None);
    r.expect(tag, "FIO_compressFilename", None);
    r.expect(tag, "main", None);
    r.print_top(tag, "source-built zstd", None);
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_zstd_source_built() {
    zstd_source_built(Mode::Timing);
}

#[test]
fn real_zstd_source_built_budget() {
    zstd_source_built(Mode::Budget);
}

#[test]
fn real_zstd_source_built_entry() {
    zstd_source_built(Mode::Entry);
}

#[test]
fn real_zstd_source_built_trace() {
    zstd_source_built(Mode::Trace);
}

#[test]
fn real_zstd_source_built_live() {
    zstd_source_built(Mode::Live);
}

/// Debian's stripped zstd (it links libzstd statically: its ldd shows no
/// libzstd.so.1, so the shared library is tested on its own below).
fn zstd_debian_stripped(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("zstd-deb");
    let t = Instant::now();
    let orig = p.path("DEB_ZSTD");
    let (_cleanup, r) = zstd_common(tag, &orig, "debian", mode);
    let (n, calls) = r.module_totals("zstd");
    println!("[{tag}]   stripped zstd: {n} functions called, {calls} calls");
    assert!(
        n > 100,
        "[{tag}] only {n} functions of the stripped zstd were called"
    );
    r.print_top(tag, "Debian's stripped zstd", None);

    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_zstd_debian_stripped() {
    zstd_debian_stripped(Mode::Timing);
}

#[test]
fn real_zstd_debian_stripped_entry() {
    zstd_debian_stripped(Mode::Entry);
}

#[test]
fn real_zstd_debian_stripped_trace() {
    zstd_debian_stripped(Mode::Trace);
}

#[test]
fn real_zstd_debian_stripped_live() {
    zstd_debian_stripped(Mode::Live);
}

/// libzstd.so.1, source-built (symbols) and Debian's (stripped), driven
/// through its C API by tests/real/libzstd-battery.py; top-10 of both.
fn libzstd_source_vs_debian(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("libzstd");
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let script = real_dir().join("libzstd-battery.py");
    let mut reports = Vec::new();
    for (which, key) in [("source-built", "LIBZSTD_SRC"), ("Debian", "DEB_LIBZSTD")] {
        let lib = p.path(key);
        info(tag, &lib);
        let rw_dir = dir.join(key);
        fs::create_dir_all(&rw_dir).unwrap();
        let rw_lib = rw_dir.join("libzstd.so.1");
        rewrite(tag, &lib, &rw_lib, mode);
        let a = original(&format!("libzstd-battery.py {}", lib.display()), || {
            let mut c = Command::new("python3");
            c.arg(&script)
                .arg(&lib)
                .env_remove("LOPI_OUTPUT")
                .env_remove("LOPI_TRACE_EVENTS");
            c
        });
        let data = fresh_data(&dir, &format!("{key}.lopi"));
        let b = run(mode.record(Command::new("python3").arg(&script).arg(&rw_lib), &data));
        assert_same(
            tag,
            &format!("libzstd-battery.py on the {which} libzstd.so.1"),
            &dir,
            &a,
            &b,
        );
        let r = Report::load(tag, &data, mode);
        r.expect(tag, "ZSTD_compress", Some("libzstd"));
        r.expect(tag, "ZSTD_decompress", Some("libzstd"));
        r.expect(tag, "ZSTD_compressStream2", Some("libzstd"));
        r.expect(tag, "ZDICT_trainFromBuffer", Some("libzstd"));
        let (n, calls) = r.module_totals("libzstd");
        println!("[{tag}]   {which} libzstd.so.1: {n} functions called, {calls} calls");
        reports.push((which, r, a.stdout.clone()));
    }
    assert_eq!(
        reports[0].2, reports[1].2,
        "[{tag}] the source-built and Debian's libzstd.so.1 disagree on the battery (before any rewriting)"
    );
    for (which, r, _) in &reports {
        r.print_top(tag, &format!("{which} libzstd.so.1"), Some("libzstd"));
    }
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_libzstd_source_vs_debian() {
    libzstd_source_vs_debian(Mode::Timing);
}

#[test]
fn real_libzstd_source_vs_debian_entry() {
    libzstd_source_vs_debian(Mode::Entry);
}

#[test]
fn real_libzstd_source_vs_debian_trace() {
    libzstd_source_vs_debian(Mode::Trace);
}

// ------------------------------------------------------------------ large programs

/// Large programs from Debian, profiled as a new user would (`lopi run --probe entry,exit`,
/// default settings): python3.11 (stripped, computed-goto interpreter), perl and gcc's cc1
/// compiling sqlite's shell. Output identical to the original's; the profile right by
/// default: every exit matched its entry (or began before timing), no call path merged, no
/// call untimed, every thread's calls timed in its tree.
#[test]
fn real_large_programs_profile_right() {
    let p = prepared();
    let dir = run_dir("large");
    let _cleanup = Cleanup(dir.clone());
    let build = p.path("SQLITE3_SRC_BIN").parent().expect("sqlite's build directory").to_path_buf();
    let (shell_c, sqlite_h) = (build.join("shell.c"), build);
    let cc1 = Command::new("gcc").arg("-print-prog-name=cc1").output().expect("gcc -print-prog-name");
    let cc1 = PathBuf::from(String::from_utf8_lossy(&cc1.stdout).trim());
    let shell_i = dir.join("shell.i");
    let pre = Command::new("gcc")
        .args(["-E", "-I"])
        .arg(&sqlite_h)
        .arg(&shell_c)
        .arg("-o")
        .arg(&shell_i)
        .status()
        .expect("gcc -E");
    assert!(pre.success(), "preprocessing {} failed", shell_c.display());
    let python = "import json, re\nd = {str(i): [i, i * 2] for i in range(50000)}\ns = json.dumps(d)\nprint(len(s), len(re.findall(r'\\d+', s)))";
    let perl = "my %h; for my $i (1..100000) { $h{$i} = sqrt($i) } my @k = sort { $a <=> $b } keys %h; print scalar(@k), \" $k[-1]\\n\"";
    let (python3_11, perl_bin) = (common::require_file("/usr/bin/python3.11", "python3.11"), common::require_file("/usr/bin/perl", "perl"));
    let programs: Vec<(&str, Vec<String>)> = vec![
        ("python3.11", vec![python3_11.display().to_string(), "-c".into(), python.into()]),
        ("perl", vec![perl_bin.display().to_string(), "-e".into(), perl.into()]),
        ("cc1", vec![cc1.display().to_string(), "-quiet".into(), "-O1".into(), shell_i.display().to_string(), "-o".into(), "-".into()]),
    ];
    for (tag, argv) in programs {
        let orig = run(Command::new(&argv[0]).args(&argv[1..]).current_dir(&dir));
        assert_eq!(orig.code, 0, "[{tag}] the original failed");
        let data = fresh_data(&dir, tag);
        let live = run(Command::new(lopi())
            .args(["run", "-q", "--probe", "entry,exit", "--"])
            .args(&argv)
            .current_dir(&dir)
            .env("LOPI_OUTPUT", &data));
        assert_same(tag, "lopi run", &dir, &orig, &live);
        let report = lopi_json(&["report", data.to_str().unwrap(), "--format", "json"]);
        let threads = report["timing"]["threads"].as_array().cloned().unwrap_or_default();
        assert!(!threads.is_empty(), "[{tag}] no timed thread");
        let sum = |field: &str| threads.iter().map(|t| t[field].as_u64().unwrap_or(u64::MAX)).sum::<u64>();
        let calls = sum("calls");
        println!(
            "[{tag}] {} timed calls in {} threads ({}); unmatched {} early {} merged {} untimed {} too deep {}",
            calls,
            threads.len(),
            secs(live.took),
            sum("unmatched_exits"),
            sum("early_exits"),
            sum("merged_calls"),
            sum("untimed_calls"),
            sum("too_deep")
        );
        for field in ["unmatched_exits", "merged_calls", "untimed_calls", "too_deep", "nested_skipped"] {
            assert_eq!(sum(field), 0, "[{tag}] {field} in a default run: {:?}", threads.iter().map(|t| &t["unmatched_by_function"]).collect::<Vec<_>>());
        }
        assert!(calls > 100_000, "[{tag}] only {calls} timed calls");
    }
}
