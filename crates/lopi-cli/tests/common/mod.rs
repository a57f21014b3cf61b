//! Shared helpers for the lopi CLI end-to-end tests: locating the `lopi`
//! binary and the C/C++ fixtures, fixture directives, compiling, running
//! processes with a watchdog, a tiny JSON parser (the crate has no
//! dev-dependencies) and a small line diff for failure messages.
#![allow(dead_code)]

pub mod tools;

// Each test binary uses what it needs of the helpers.
#[allow(unused_imports)]
pub use tools::{require, require_file, require_package};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

// ---------------------------------------------------------------------------
// Locations
// ---------------------------------------------------------------------------

/// Path of the `lopi` binary under test. `LOPI_BIN` (run time) overrides;
/// otherwise the binary cargo built for this test (`CARGO_BIN_EXE_lopi`);
/// otherwise target/{release,debug}/lopi of the workspace.
pub fn lopi_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOPI_BIN") {
        return PathBuf::from(p);
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_lopi") {
        return PathBuf::from(p);
    }
    let ws = workspace_root();
    for profile in ["release", "debug"] {
        let p = ws.join("target").join(profile).join("lopi");
        if p.is_file() {
            return p;
        }
    }
    panic!("lopi binary not found (set LOPI_BIN or build the `lopi` bin target)");
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

pub fn fixtures_dir() -> PathBuf {
    workspace_root().join("fixtures")
}

/// A fresh, unique directory under cargo's per-test temp dir.
pub fn fresh_dir(label: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let safe: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fixtures_e2e")
        .join(format!("{}-{}-{}", std::process::id(), n, safe));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Remove a temp dir unless the user asked to keep them (LOPI_KEEP_TMP).
pub fn cleanup(dir: &Path) {
    if std::env::var_os("LOPI_KEEP_TMP").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// ---------------------------------------------------------------------------
// Fixture directives
// ---------------------------------------------------------------------------

/// Directives read from `// lopi-...:` comment lines of a fixture source.
#[derive(Debug, Clone, Default)]
pub struct Fixture {
    pub file: String,
    pub path: PathBuf,
    pub cxx: bool,
    /// `lopi-expect`: entry counts of the program's own functions.
    pub expect: Vec<(String, u64)>,
    /// `lopi-expect-live`: entry counts under `lopi run`, where they differ (probes spliced
    /// into one process image are gone after `exec`).
    pub expect_live: Option<Vec<(String, u64)>>,
    /// `lopi-expect-lib`: entry counts of the shared library's functions.
    pub expect_lib: Vec<(String, u64)>,
    /// `lopi-exit` / `lopi-signal`: how the original program terminates.
    pub exit: Option<i32>,
    pub signal: Option<i32>,
    /// `lopi-cflags` (compile and link) / `lopi-ldflags` (link only).
    pub cflags: Vec<String>,
    pub ldflags: Vec<String>,
    /// `lopi-lib: x.c` (linked against libfix.so built from x.c) or
    /// `lopi-dlopen: x.c` (only placed on LD_LIBRARY_PATH).
    pub lib: Option<String>,
    pub dlopen: bool,
    /// `lopi-kind: shared` — a library source, not a program.
    pub shared: bool,
    /// `lopi-may-skip: name ...` — functions lopi may leave unprobed, as long as
    /// `lopi info` says why (e.g. 1-byte functions packed with no padding).
    pub may_skip: Vec<String>,
}

fn parse_pairs(file: &str, s: &str) -> Vec<(String, u64)> {
    s.split_whitespace()
        .map(|tok| {
            let (k, v) = tok
                .rsplit_once('=')
                .unwrap_or_else(|| panic!("{file}: bad expectation {tok:?}"));
            (
                k.to_string(),
                v.parse()
                    .unwrap_or_else(|_| panic!("{file}: bad count in {tok:?}")),
            )
        })
        .collect()
}

impl Fixture {
    pub fn load(file: &str) -> Fixture {
        let path = fixtures_dir().join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut fx = Fixture {
            file: file.to_string(),
            cxx: file.ends_with(".cpp") || file.ends_with(".cc"),
            path,
            ..Default::default()
        };
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("//") else {
                continue;
            };
            let Some((key, val)) = rest.trim().split_once(':') else {
                continue;
            };
            let val = val.trim();
            match key.trim() {
                "lopi-expect" => fx.expect = parse_pairs(file, val),
                "lopi-expect-lib" => fx.expect_lib = parse_pairs(file, val),
                "lopi-expect-live" => fx.expect_live = Some(parse_pairs(file, val)),
                "lopi-exit" => fx.exit = Some(val.parse().expect("lopi-exit")),
                "lopi-signal" => fx.signal = Some(val.parse().expect("lopi-signal")),
                "lopi-cflags" => fx.cflags = val.split_whitespace().map(String::from).collect(),
                "lopi-ldflags" => fx.ldflags = val.split_whitespace().map(String::from).collect(),
                "lopi-lib" => fx.lib = Some(val.to_string()),
                "lopi-dlopen" => {
                    fx.lib = Some(val.to_string());
                    fx.dlopen = true;
                }
                "lopi-kind" => fx.shared = val == "shared",
                "lopi-may-skip" => fx.may_skip = val.split_whitespace().map(String::from).collect(),
                k if k.starts_with("lopi-") => panic!("{file}: unknown directive {k}"),
                _ => {}
            }
        }
        fx
    }

    pub fn compiler(&self) -> &'static str {
        if self.cxx {
            "c++"
        } else {
            "cc"
        }
    }
}

/// All fixture sources (top level of fixtures/, *.c / *.cpp / *.cc).
pub fn all_fixture_files() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("read fixtures dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".c") || n.ends_with(".cpp") || n.ends_with(".cc"))
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

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

/// Run a compiler command; Err carries the command line and diagnostics.
/// The C program `source`, written to `dir/NAME.c` and built with `cc FLAGS` into `dir/NAME`.
pub fn build_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("writing a fixture's source");
    let prog = dir.join(name);
    compile(Command::new("cc").args(flags).arg("-o").arg(&prog).arg(&src)).unwrap_or_else(|e| panic!("building {name}: {e}"));
    prog
}

pub fn compile(cmd: &mut Command) -> Result<(), String> {
    let line = render_cmd(cmd);
    let out =
        run(cmd, Duration::from_secs(300)).map_err(|e| format!("cannot run `{line}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "compile failed ({}): {line}\n{}",
            out.describe_status(),
            out.stderr_str()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Diff
// ---------------------------------------------------------------------------

/// A unified-ish line diff (LCS based; falls back to a plain dump for
/// large inputs).
pub fn diff(a_label: &str, a: &str, b_label: &str, b: &str) -> String {
    let al: Vec<&str> = a.lines().collect();
    let bl: Vec<&str> = b.lines().collect();
    let mut out = format!("--- {a_label}\n+++ {b_label}\n");
    if al.len() * bl.len() > 4_000_000 {
        let first = al
            .iter()
            .zip(&bl)
            .position(|(x, y)| x != y)
            .unwrap_or(al.len().min(bl.len()));
        let _ = writeln!(
            out,
            "(large outputs: {} vs {} lines; first difference at line {})",
            al.len(),
            bl.len(),
            first + 1
        );
        for l in al.iter().skip(first).take(10) {
            let _ = writeln!(out, "-{l}");
        }
        for l in bl.iter().skip(first).take(10) {
            let _ = writeln!(out, "+{l}");
        }
        return out;
    }
    let (n, m) = (al.len(), bl.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if al[i] == bl[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut shown = 0;
    while (i < n || j < m) && shown < 200 {
        if i < n && j < m && al[i] == bl[j] {
            let _ = writeln!(out, " {}", al[i]);
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            let _ = writeln!(out, "+{}", bl[j]);
            j += 1;
        } else {
            let _ = writeln!(out, "-{}", al[i]);
            i += 1;
        }
        shown += 1;
    }
    if a.ends_with('\n') != b.ends_with('\n') {
        out.push_str("(trailing newline differs)\n");
    }
    out
}

// ---------------------------------------------------------------------------
// lopi report / info
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct ReportEntry {
    pub name: String,
    pub module: String,
    pub addr: String,
    pub calls: u64,
}

/// Parse the output of `lopi report DATA --format json`.
pub fn parse_report(text: &str) -> Result<Vec<ReportEntry>, String> {
    let j = serde_json::from_str::<Json>(text).map_err(|e| e.to_string())?;
    if j.get("program").and_then(Json::as_str).is_none() {
        return Err("report: missing string field \"program\"".into());
    }
    let funcs = j
        .get("functions")
        .and_then(Json::as_array)
        .ok_or("report: missing array \"functions\"")?;
    let mut v = Vec::new();
    for f in funcs {
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .ok_or("report: function without \"name\"")?;
        let calls = f
            .get("calls")
            .and_then(Json::as_u64)
            .ok_or_else(|| format!("report: {name}: missing/invalid \"calls\""))?;
        v.push(ReportEntry {
            name: name.to_string(),
            module: f
                .get("module")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
            addr: f
                .get("addr")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
            calls,
        });
    }
    Ok(v)
}

/// name -> (status, reason/tactic) from `lopi info --format json`, plus the summary.
pub struct Info {
    pub functions: BTreeMap<String, (String, String)>,
    pub summary: Json,
}

pub fn parse_info(text: &str) -> Result<Info, String> {
    let j = serde_json::from_str::<Json>(text).map_err(|e| e.to_string())?;
    let funcs = j
        .get("functions")
        .and_then(Json::as_array)
        .ok_or("info: missing array \"functions\"")?;
    let mut functions = BTreeMap::new();
    for f in funcs {
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .unwrap_or("?")
            .to_string();
        let status = f
            .get("status")
            .and_then(Json::as_str)
            .unwrap_or("?")
            .to_string();
        let detail = f
            .get("reason")
            .or_else(|| f.get("tactic"))
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string();
        functions.insert(name, (status, detail));
    }
    let summary = j
        .get("summary")
        .cloned()
        .ok_or("info: missing object \"summary\"")?;
    Ok(Info { functions, summary })
}

/// Check a parsed `lopi info` summary: coverage_percent present and in
/// [0, 100], found = probed + skipped.
pub fn check_info_summary(info: &Info) -> Result<f64, String> {
    let s = &info.summary;
    let cov = s
        .get("coverage_percent")
        .and_then(Json::as_f64)
        .ok_or("info: summary.coverage_percent missing or not a number")?;
    if !(0.0..=100.0).contains(&cov) {
        return Err(format!("info: coverage_percent {cov} outside [0, 100]"));
    }
    let num = |k: &str| s.get(k).and_then(Json::as_u64);
    match (num("found"), num("probed"), num("skipped")) {
        (Some(f), Some(p), Some(k)) if f == p + k => {}
        (f, p, k) => {
            return Err(format!(
                "info: summary found/probed/skipped inconsistent: {f:?}/{p:?}/{k:?}"
            ))
        }
    }
    Ok(cov)
}

// ---------------------------------------------------------------------------
// Live processes
// ---------------------------------------------------------------------------

/// Every executable mapping of `prog` in process `pid` equals the file's bytes.
pub fn code_matches_file(pid: i32, prog: &Path) -> Result<(), String> {
    match code_differences(pid, prog, prog)?.first() {
        Some(at) => Err(format!("code differs from the file at {at:#x}")),
        None => Ok(()),
    }
}

/// The run-time addresses where the executable mappings of `mapped` in process `pid` differ
/// from the bytes of `original` at the same file offsets (a rewritten file keeps its input's
/// offsets).
pub fn code_differences(pid: i32, mapped: &Path, original: &Path) -> Result<Vec<u64>, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
    let file = std::fs::read(original).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| e.to_string())?;
    let path = mapped.canonicalize().unwrap().display().to_string();
    let mut checked = 0;
    let mut differences = Vec::new();
    for line in maps.lines().filter(|l| l.ends_with(&path)) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !f[1].contains('x') {
            continue;
        }
        let (start, end) = f[0].split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
        let offset = u64::from_str_radix(f[2], 16).unwrap() as usize;
        let len = ((end - start) as usize).min(file.len().saturating_sub(offset));
        let mut now = vec![0; len];
        std::os::unix::fs::FileExt::read_exact_at(&mem, &mut now, start).map_err(|e| e.to_string())?;
        differences.extend((0..len).filter(|&i| now[i] != file[offset + i]).map(|i| start + i as u64));
        checked += len;
    }
    if checked == 0 {
        return Err(format!("no executable mapping of {path} in process {pid}"));
    }
    Ok(differences)
}

// ---------------------------------------------------------------------------
// System-call reports
// ---------------------------------------------------------------------------

/// `lopi report --syscalls --format json DATA`, parsed.
pub fn syscall_report(data: &Path) -> Json {
    let out = run(Command::new(lopi_bin()).args(["report", "--syscalls", "--format", "json"]).arg(data), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report --syscalls failed: {}", out.stderr_str());
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// A `syscalls` list of that report as name -> `field` (`calls`, `errors`), zeros left out.
pub fn by_syscall(list: &Json, field: &str) -> BTreeMap<String, u64> {
    list.as_array().into_iter().flatten().map(|s| (s["name"].as_str().unwrap_or("").to_string(), s[field].as_u64().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}

// ---------------------------------------------------------------------------
// The multiprocessor analysis
// ---------------------------------------------------------------------------

/// lopi's built-in thesis benchmark (`crates/lopi-cli/src/mpbench.c`), built into `dir`.
pub fn build_mpbench(dir: &Path) -> PathBuf {
    let prog = dir.join("mpbench");
    let src = workspace_root().join("crates/lopi-cli/src/mpbench.c");
    compile(Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&prog).arg(&src)).expect("building mpbench");
    prog
}

/// A thread of `lopi report --breakdown --format json`: its parts add up to its wall time
/// within 2%.
pub fn assert_parts_add_up(thread: &Json) {
    let ns = |key: &str| thread[key].as_u64().unwrap_or_else(|| panic!("{key} in {thread}")) as f64;
    let parts: f64 = ["user_ns", "kernel_ns", "syscall_blocked_ns", "lock_wait_ns", "kernel_lock_spin_ns", "other_ns"].iter().map(|k| ns(k)).sum();
    let wall = ns("wall_ns");
    assert!((parts - wall).abs() <= 0.02 * wall, "parts {parts} vs wall {wall}: {thread}");
}

// ---------------------------------------------------------------------------
// Oracles of block counts
// ---------------------------------------------------------------------------

/// Executions of each instruction address of the program's own code, from callgrind
/// (`--dump-instr=yes`: an instruction's Ir is its executions).
pub fn callgrind_counts(prog: &Path, args: &[&str], dir: &Path) -> HashMap<u64, u64> {
    let out = dir.join("callgrind.out");
    let status = Command::new(require("valgrind", "valgrind"))
        .args(["-q", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no", "--compress-strings=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(prog)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("valgrind (Debian's valgrind package) is the oracle of block counts");
    assert!(status.success());
    let mut counts = HashMap::new();
    let mut after_call = false;
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        if line.starts_with("calls=") {
            after_call = true;
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let (Some(addr), Some(ir)) = (fields.first().and_then(|a| a.strip_prefix("0x")), fields.last()) {
            // The line after `calls=` is the call's inclusive cost, not the instruction's.
            if !after_call && fields.len() >= 2 {
                *counts.entry(u64::from_str_radix(addr, 16).unwrap()).or_default() += ir.parse::<u64>().unwrap_or(0);
            }
        }
        after_call = false;
    }
    counts
}

/// What `lopi report --blocks FUNC` says of each block of FUNC in the record `data`.
pub fn block_counts(data: &Path, func: &str) -> Vec<Json> {
    let out = run(Command::new(lopi_bin()).args(["report", "--format", "json", "--blocks", func]).arg(data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    json[0]["blocks"].as_array().unwrap().clone()
}

// ---------------------------------------------------------------------------
// Real programs
// ---------------------------------------------------------------------------

/// `tests/real/prepare.sh`'s list of built and downloaded programs (it runs once per work
/// directory and is quick when done).
pub fn real_paths() -> &'static BTreeMap<String, PathBuf> {
    static PATHS: std::sync::OnceLock<BTreeMap<String, PathBuf>> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| {
        let root = workspace_root();
        let work = root.join("work-real");
        let out = run(Command::new("bash").arg(root.join("tests/real/prepare.sh")).arg(&work), Duration::from_secs(3600)).expect("prepare.sh");
        assert!(out.status.success(), "tests/real/prepare.sh failed:\n{}\n{}", out.stdout_str(), out.stderr_str());
        std::fs::read_to_string(work.join("paths.env"))
            .expect("paths.env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
            .collect()
    })
}

/// The path `prepare.sh` gave `key`.
pub fn real_program(key: &str) -> PathBuf {
    real_paths().get(key).unwrap_or_else(|| panic!("prepare.sh did not name {key}")).clone()
}

#[cfg(test)]
mod helper_tests {
    use super::*;

    #[test]
    fn diff_marks_changes() {
        let d = diff("a", "x\ny\nz\n", "b", "x\nY\nz\n");
        assert!(
            d.contains("-y\n") && d.contains("+Y\n") && d.contains(" x\n"),
            "{d}"
        );
    }
}
