//! The harness of the timing tests (`timing_e2e.rs`, `timing_threads_e2e.rs`, `budget_e2e.rs`):
//! a fixture of `fixtures/timing/` built in a compiler configuration, rewritten (or run under
//! `lopi run`) with entry and exit probes, run beside the original, and its report read.
//!
//! Environment knobs (all optional):
//!   LOPI_BIN=path             lopi binary to test (default: the one cargo built)
//!   LOPI_TIMING_FILTER=str    only configurations whose name contains `str` ("O2-pie")
//!   LOPI_KEEP_TMP=1           keep temp dirs of passing cases too
//!   LOPI_TEST_TIMEOUT=secs    watchdog for each process (default 120)

// Each test binary uses part of the harness.
#![allow(dead_code)]

use crate::common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A test on the rewritten file (`$name`) and the same test under `lopi run` (`$live`), both
/// running `$body(live)`.
macro_rules! static_and_live {
    ($(#[$doc:meta])* $name:ident, $live:ident, $body:ident) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            $body(false);
        }

        /// The same, with the probes spliced in by `lopi run`.
        #[test]
        fn $live() {
            $body(true);
        }
    };
}


// ---------------------------------------------------------------------------
// Configurations
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub opt: &'static str,
    pub pie: bool,
    pub cet: bool,
}

impl Config {
    pub fn name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.opt.trim_start_matches('-'),
            if self.pie { "pie" } else { "nopie" },
            if self.cet { "cet" } else { "nocet" }
        )
    }

    pub fn flags(&self) -> Vec<&'static str> {
        let mut v = vec![self.opt];
        if self.pie {
            v.extend(["-fPIE", "-pie"]);
        } else {
            v.extend(["-fno-pie", "-no-pie"]);
        }
        v.push(if self.cet { "-fcf-protection=full" } else { "-fcf-protection=none" });
        v
    }

    pub fn optimized(&self) -> bool {
        self.opt != "-O0"
    }
}

pub const fn cfg(opt: &'static str, pie: bool, cet: bool) -> Config {
    Config { opt, pie, cet }
}

/// -O0, -O2 PIE, -O2 non-PIE, -O3 PIE with CET (endbr64 at every entry).
pub const CONFIGS: [Config; 4] = [
    cfg("-O0", true, false),
    cfg("-O2", true, false),
    cfg("-O2", false, false),
    cfg("-O3", true, true),
];

pub const O2_PIE: Config = cfg("-O2", true, false);

pub fn configs() -> Vec<Config> {
    let filter = std::env::var("LOPI_TIMING_FILTER").unwrap_or_default();
    CONFIGS.into_iter().filter(|c| c.name().contains(&filter)).collect()
}

// ---------------------------------------------------------------------------
// One fixture in one configuration
// ---------------------------------------------------------------------------

/// A fixture built and rewritten in one configuration, with the commands run so far (for
/// repro lines) and the problems found (reported together at the end).
pub struct Built {
    pub label: String,
    pub dir: PathBuf,
    pub repro: Vec<String>,
    pub problems: Vec<String>,
    pub fx: Fixture,
    pub orig: PathBuf,
    pub rw: PathBuf,
    /// `lopi info ORIG --probe entry,exit --format json`: name -> "timed" | "counted only, ...".
    pub timing: BTreeMap<String, String>,
    pub runs: usize,
    /// Run the original under `lopi run --probe entry,exit EXTRA` instead of the rewritten file.
    pub live: bool,
    pub extra: Vec<String>,
    /// This test's share of the machine, held while it runs (see [`build_alone`]).
    pub _share: Share,
}

/// Tests that compare times between runs run alone: the others of this binary (cargo runs
/// them side by side) would load the 2-CPU machines CI has, which moves those times.
pub static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub enum Share {
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
}

/// Builds `fixtures/timing/FILE` with `cfg`, rewrites it with `--probe entry,exit` plus
/// `extra`, and asks `lopi info` which functions are timed.
pub fn build(file: &str, cfg: Config, extra: &[&str]) -> Built {
    build_mode(file, cfg, extra, false)
}

/// [`build`], for a test that compares times between runs: no other test runs meanwhile.
pub fn build_alone(file: &str, cfg: Config, extra: &[&str]) -> Built {
    let share = Share::Alone(MACHINE.write().unwrap_or_else(|e| e.into_inner()));
    build_sharing(file, cfg, extra, false, share)
}

/// [`build`], for runs under `lopi run` when `live`.
pub fn build_mode(file: &str, cfg: Config, extra: &[&str], live: bool) -> Built {
    let share = Share::Shared(MACHINE.read().unwrap_or_else(|e| e.into_inner()));
    build_sharing(file, cfg, extra, live, share)
}

pub fn build_sharing(file: &str, cfg: Config, extra: &[&str], live: bool, share: Share) -> Built {
    let fx = Fixture::load(&format!("timing/{file}"));
    let label = format!(
        "timing/{file}{} {}{}{}",
        if live { " live" } else { "" },
        cfg.name(),
        if extra.is_empty() { "" } else { " " },
        extra.join(" ")
    );
    let dir = fresh_dir(&format!("timing-{file}-{}", cfg.name()));
    let orig = dir.join("orig").join("prog");
    let rw = dir.join("rw").join("prog");
    std::fs::create_dir_all(orig.parent().unwrap()).unwrap();
    std::fs::create_dir_all(rw.parent().unwrap()).unwrap();
    let mut b = Built {
        label,
        dir,
        repro: Vec::new(),
        problems: Vec::new(),
        fx,
        orig,
        rw,
        timing: BTreeMap::new(),
        runs: 0,
        live,
        extra: extra.iter().map(|s| s.to_string()).collect(),
        _share: share,
    };
    let mut cmd = Command::new(b.fx.compiler());
    cmd.args(cfg.flags())
        .args(&b.fx.cflags)
        .arg(&b.fx.path)
        .arg("-o")
        .arg(&b.orig)
        .args(&b.fx.ldflags);
    b.repro.push(render_cmd(&cmd));
    if let Err(e) = compile(&mut cmd) {
        panic!("{}", b.fail_msg(e));
    }
    let (orig, rw) = (b.orig.clone(), b.rw.clone());
    let mut args: Vec<&OsStr> = vec![
        "rewrite".as_ref(),
        orig.as_os_str(),
        "-o".as_ref(),
        rw.as_os_str(),
        "--probe".as_ref(),
        "entry,exit".as_ref(),
    ];
    args.extend(extra.iter().map(|s| OsStr::new(*s)));
    b.lopi(&args);
    let info = b.lopi(&[
        "info".as_ref(),
        orig.as_os_str(),
        "--probe".as_ref(),
        "entry,exit".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    let j: Json = serde_json::from_slice(&info.stdout).unwrap_or_else(|e| panic!("{}", b.fail_msg(format!("bad info JSON: {e}"))));
    for f in j["functions"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = f["name"].as_str().unwrap_or("?").to_string();
        let timing = f["timing"].as_str().unwrap_or("(no timing field)").to_string();
        b.timing.insert(name, timing);
    }
    if b.timing.is_empty() {
        panic!("{}", b.fail_msg("lopi info --format json listed no functions"));
    }
    b
}

impl Built {
    pub fn fail_msg(&self, what: impl std::fmt::Display) -> String {
        let mut s = format!("=== [{}] {}\n", self.label, what.to_string().trim_end());
        let _ = writeln!(s, "  temp dir kept: {}", self.dir.display());
        let _ = writeln!(s, "  repro:");
        for r in &self.repro {
            let _ = writeln!(s, "    {r}");
        }
        s
    }

    pub fn problem(&mut self, p: impl Into<String>) {
        self.problems.push(p.into());
    }

    pub fn check(&mut self, ok: bool, p: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(p());
        }
    }

    /// Panics with every problem found, else removes the temp dir.
    pub fn finish(self) {
        if !self.problems.is_empty() {
            panic!(
                "{}",
                self.fail_msg(format!("{} problem(s):\n  {}", self.problems.len(), self.problems.join("\n  ")))
            );
        }
        cleanup(&self.dir);
    }

    pub fn run(&mut self, cmd: &mut Command) -> Output {
        self.repro.push(render_cmd(cmd));
        run(cmd, default_timeout()).unwrap_or_else(|e| panic!("{}", self.fail_msg(format!("cannot run: {e}"))))
    }

    /// Runs lopi with `args`; it must succeed.
    pub fn lopi(&mut self, args: &[&OsStr]) -> Output {
        let mut cmd = Command::new(lopi_bin());
        cmd.args(args);
        let out = self.run(&mut cmd);
        if !out.status.success() || out.stderr_str().contains("panicked") {
            panic!(
                "{}",
                self.fail_msg(format!("lopi failed ({}):\n{}", out.describe_status(), out.stderr_str()))
            );
        }
        out
    }

    pub fn run_original(&mut self) -> Output {
        let mut cmd = Command::new(&self.orig);
        cmd.current_dir(&self.dir).env_remove("LOPI_OUTPUT");
        self.run(&mut cmd)
    }

    /// Runs the rewritten program with a fresh data file; (output, wall time, data file).
    pub fn run_rewritten(&mut self, env: &[(&str, &str)]) -> (Output, Duration, PathBuf) {
        self.runs += 1;
        let data = self.dir.join(format!("data-{}.lopi", self.runs));
        let mut cmd = if self.live {
            let mut c = Command::new(lopi_bin());
            c.args(["run", "--probe", "entry,exit"]).args(&self.extra).arg("--").arg(&self.orig);
            c
        } else {
            Command::new(&self.rw)
        };
        cmd.current_dir(&self.dir).env("LOPI_OUTPUT", &data);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let start = Instant::now();
        let mut out = self.run(&mut cmd);
        if self.live {
            // The program is lopi's child; lopi names it.
            let stderr = out.stderr_str();
            let pid = stderr.lines().find_map(|l| l.strip_prefix("lopi: recording pid ")?.split_whitespace().next()?.parse().ok());
            out.pid = pid.unwrap_or_else(|| panic!("{}", self.fail_msg(format!("lopi run did not name its child:\n{stderr}"))));
            out.stderr = stderr.lines().filter(|l| !l.starts_with("lopi: ")).flat_map(|l| format!("{l}\n").into_bytes()).collect();
        }
        (out, start.elapsed(), data)
    }

    /// Runs the original and the rewritten program (with `env`); both must end the same way
    /// and print the same stdout. Returns both outputs, the rewritten run's wall time and
    /// its report.
    pub fn run_pair(&mut self, env: &[(&str, &str)]) -> Pair {
        let want = self.run_original();
        let (got, wall, data) = self.run_rewritten(env);
        self.same_behaviour(&want, &got);
        let report = self.report(&data);
        Pair {
            want,
            got,
            wall,
            report,
            data,
        }
    }

    /// Exit status and stdout of a rewritten run must equal the original's (stderr may hold
    /// measurements, so it is not compared). Panics at once otherwise: nothing else is
    /// meaningful then.
    pub fn same_behaviour(&self, want: &Output, got: &Output) {
        let mut p = Vec::new();
        if want.status != got.status || got.timed_out {
            p.push(format!(
                "status differs: original {}, rewritten {}",
                want.describe_status(),
                got.describe_status()
            ));
        }
        if !want.status.success() {
            p.push(format!("fixture bug: the ORIGINAL program ended with {}", want.describe_status()));
        }
        if want.stdout != got.stdout {
            p.push(format!(
                "stdout differs:\n{}",
                diff("original", &want.stdout_str(), "rewritten", &got.stdout_str())
            ));
        }
        if !p.is_empty() {
            panic!(
                "{}",
                self.fail_msg(format!(
                    "{}\noriginal stderr:\n{}\nrewritten stderr:\n{}",
                    p.join("\n"),
                    want.stderr_str(),
                    got.stderr_str()
                ))
            );
        }
    }

    pub fn report(&mut self, data: &Path) -> Report {
        if !data.is_file() {
            panic!(
                "{}",
                self.fail_msg(format!("the rewritten program wrote no data file {}", data.display()))
            );
        }
        let out = self.lopi(&["report".as_ref(), data.as_os_str(), "--format".as_ref(), "json".as_ref()]);
        let json: Json = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{}", self.fail_msg(format!("bad report JSON: {e}\n{}", out.stdout_str()))));
        if json["timing"].is_null() {
            panic!("{}", self.fail_msg("the report has no \"timing\" object"));
        }
        Report { json }
    }

    pub fn is_timed(&self, name: &str) -> bool {
        self.timing.get(name).is_some_and(|t| t == "timed")
    }

    /// The fixture's `lopi-expect` names.
    pub fn names(&self) -> Vec<String> {
        self.fx.expect.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Exact calls of every function in `expect`; for each, `timed` in the report agrees
    /// with `lopi info`, and the time fields are numbers >= 0 with avg_ns = total_ns over the
    /// timed calls (the calls in the calling-context trees), or null when the function is
    /// counted only or none of its calls was timed. `must_time` functions must be timed in
    /// this configuration.
    pub fn check_functions(&mut self, r: &Report, expect: &[(String, u64)], must_time: &[&str]) {
        for name in must_time {
            let t = self
                .timing
                .get(*name)
                .cloned()
                .unwrap_or_else(|| "(not listed by lopi info)".into());
            self.check(t == "timed", || format!("{name} must be timed, lopi info says: {t}"));
        }
        for (name, want) in expect {
            let got = r.calls(name);
            self.check(got == Some(*want), || format!("{name}: expected {want} calls, report says {got:?}"));
            let Some(f) = r.func(name) else { continue };
            let timed = self.is_timed(name);
            let info = self.timing.get(name.as_str()).cloned();
            self.check(f["timed"].as_bool() == Some(timed), || {
                format!("{name}: report says timed={}, lopi info says {info:?}", f["timed"])
            });
            let fields = ["total_ns", "self_ns", "max_ns", "avg_ns"];
            let timed_calls = r.tree_calls(name);
            if !timed || timed_calls == 0 {
                for k in fields {
                    self.check(f[k].is_null(), || {
                        format!("{name}: no call timed ({info:?}, {timed_calls} in the trees), yet {k} = {}", f[k])
                    });
                }
                continue;
            }
            for k in fields {
                // Sampled time does not time single calls: no longest call.
                if k == "max_ns" && r.sampled() {
                    self.check(f[k].is_null(), || format!("{name}: sampled time, yet max_ns = {}", f[k]));
                    continue;
                }
                let v = f[k].as_f64();
                self.check(v.is_some_and(|v| v.is_finite() && v >= 0.0), || {
                    format!("{name}: {k} = {} (want a number >= 0)", f[k])
                });
            }
            let (total, avg) = (r.num(name, "total_ns"), r.num(name, "avg_ns"));
            let n = timed_calls as f64;
            self.check(close(avg, total / n, 1e-6, 1e-3), || {
                format!("{name}: avg_ns {avg} != total_ns {total} / {n} timed calls")
            });
        }
    }

    /// A function's self time is part of its total time.
    pub fn check_self_within_total(&mut self, r: &Report) {
        for f in r.functions() {
            let (Some(total), Some(self_ns)) = (f["total_ns"].as_f64(), f["self_ns"].as_f64()) else {
                continue;
            };
            self.check(self_ns <= total * (1.0 + 1e-9) + 1.0, || {
                format!("{}: self_ns {self_ns} > total_ns {total}", f["name"])
            });
        }
    }

    /// Every call of a timed function is in the calling-context trees: the edges into it add
    /// up to its entry count (true when no call was too deep or skipped in a signal handler).
    pub fn check_tree_has_every_call(&mut self, r: &Report, names: &[String]) {
        for name in names {
            if !self.is_timed(name) {
                continue;
            }
            let (tree, calls) = (r.tree_calls(name), r.calls(name).unwrap_or(0));
            self.check(tree == calls, || {
                format!("{name}: edges into it add up to {tree} calls, its entry count is {calls}")
            });
        }
    }

    /// The edges whose callee is one of `names` must be exactly `want`.
    pub fn check_edges(&mut self, r: &Report, names: &[String], want: &[(Option<&str>, &str, u64)]) {
        let got: BTreeMap<(Option<String>, String), u64> = r
            .edges()
            .into_iter()
            .filter(|((_, callee), _)| names.contains(callee))
            .map(|(k, (calls, _))| (k, calls))
            .collect();
        let want: BTreeMap<(Option<String>, String), u64> = want
            .iter()
            .map(|&(caller, callee, n)| ((caller.map(String::from), callee.to_string()), n))
            .collect();
        if got != want {
            let show = |m: &BTreeMap<(Option<String>, String), u64>| {
                m.iter()
                    .map(|((a, b), n)| format!("{} -> {b}: {n}", a.as_deref().unwrap_or("(none)")))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let missing: Vec<String> = want
                .iter()
                .filter(|(k, n)| got.get(*k) != Some(n))
                .map(|((a, b), n)| {
                    format!(
                        "{} -> {b}: want {n}, got {:?}",
                        a.as_deref().unwrap_or("(none)"),
                        got.get(&(a.clone(), b.clone()))
                    )
                })
                .collect();
            let extra: Vec<String> = got
                .iter()
                .filter(|(k, _)| !want.contains_key(*k))
                .map(|((a, b), n)| format!("{} -> {b}: {n}", a.as_deref().unwrap_or("(none)")))
                .collect();
            self.problem(format!(
                "edges differ\n    wrong or missing: {missing:?}\n    unexpected: {extra:?}\n    got: {}\n    want: {}",
                show(&got),
                show(&want)
            ));
        }
    }

    /// No absurd times: each thread's total within [0, wall time of the rewritten run], and
    /// (single-threaded programs) no function's total beyond that wall time either.
    pub fn check_sane(&mut self, r: &Report, wall: Duration, single_threaded: bool) {
        let wall_ns = wall.as_nanos() as f64;
        if single_threaded {
            for f in r.functions() {
                if let Some(t) = f["total_ns"].as_f64() {
                    self.check(t <= wall_ns, || {
                        format!("{}: total_ns {t} exceeds the run's wall time {wall_ns} ns", f["name"])
                    });
                }
            }
        }
        for t in r.threads() {
            let total = t["total_ns"].as_f64().unwrap_or(f64::NAN);
            self.check(total.is_finite() && total >= 0.0 && total <= wall_ns, || {
                format!("thread {}: total_ns {total} outside [0, wall time {wall_ns}]", t["tid"])
            });
        }
    }

    /// Sum of a per-thread counter over all threads.
    pub fn check_thread_counter(&mut self, r: &Report, field: &str, want: u64) {
        let got = r.thread_sum(field);
        self.check(got == want, || format!("timing.threads[].{field}: sum {got}, expected {want}"));
    }
}

pub struct Pair {
    pub want: Output,
    pub got: Output,
    pub wall: Duration,
    pub report: Report,
    pub data: PathBuf,
}

/// `a` is within `rel` (relative) or `abs` (absolute) of `b`.
pub fn close(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    (a - b).abs() <= (b.abs() * rel).max(abs)
}

/// Parses `measured key=value ...` from a fixture's stderr.
pub fn measured(out: &Output) -> BTreeMap<String, i64> {
    let text = out.stderr_str();
    let line = text
        .lines()
        .find(|l| l.starts_with("measured "))
        .unwrap_or_else(|| panic!("no `measured` line in stderr:\n{text}"));
    line.split_whitespace()
        .skip(1)
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k.to_string(), v.parse().expect("number"))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------

pub struct Report {
    pub json: Json,
}

impl Report {
    pub fn functions(&self) -> &[Json] {
        self.json["functions"].as_array().map(Vec::as_slice).unwrap_or_default()
    }

    pub fn func(&self, name: &str) -> Option<&Json> {
        self.functions().iter().find(|f| f["name"] == name)
    }

    pub fn calls(&self, name: &str) -> Option<u64> {
        let hits: Vec<&Json> = self.functions().iter().filter(|f| f["name"] == name).collect();
        (!hits.is_empty()).then(|| hits.iter().map(|f| f["calls"].as_u64().unwrap_or(u64::MAX)).sum())
    }

    /// A time field of a timed function (NaN when absent or null).
    pub fn num(&self, name: &str, field: &str) -> f64 {
        self.func(name).and_then(|f| f[field].as_f64()).unwrap_or(f64::NAN)
    }

    /// (caller, callee) -> (calls, total_ns).
    pub fn edges(&self) -> BTreeMap<(Option<String>, String), (u64, f64)> {
        let mut m = BTreeMap::new();
        for e in self.json["edges"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let key = (
                e["caller"].as_str().map(String::from),
                e["callee"].as_str().unwrap_or("?").to_string(),
            );
            let v: &mut (u64, f64) = m.entry(key).or_default();
            v.0 += e["calls"].as_u64().unwrap_or(0);
            v.1 += e["total_ns"].as_f64().unwrap_or(f64::NAN);
        }
        m
    }

    pub fn edge(&self, caller: Option<&str>, callee: &str) -> (u64, f64) {
        self.edges()
            .get(&(caller.map(String::from), callee.to_string()))
            .copied()
            .unwrap_or((0, 0.0))
    }

    /// Calls of `callee` in the calling-context trees (all its edges).
    pub fn tree_calls(&self, callee: &str) -> u64 {
        self.edges().iter().filter(|((_, c), _)| c == callee).map(|(_, (n, _))| n).sum()
    }

    pub fn threads(&self) -> Vec<&Json> {
        self.json["timing"]["threads"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default()
    }

    /// Functions the budget switched to counting, one entry per switch (each thread's).
    pub fn switched(&self) -> Vec<&str> {
        self.threads().into_iter().flat_map(|t| t["switches"].as_array().into_iter().flatten()).filter_map(|s| s["function"].as_str()).collect()
    }

    /// True when the threads' time was sampled (`--time sampled`).
    pub fn sampled(&self) -> bool {
        self.threads().iter().any(|t| !t["sampling"].is_null())
    }

    pub fn thread_sum(&self, field: &str) -> u64 {
        self.threads().iter().map(|t| t[field].as_u64().unwrap_or(u64::MAX / 1024)).sum()
    }
}

pub fn expect(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|&(n, c)| (n.to_string(), c)).collect()
}
