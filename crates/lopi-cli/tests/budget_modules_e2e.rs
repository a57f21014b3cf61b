//! End-to-end tests of the perturbation budget over a program and its library
//! (`--budget 5% --functions '*' --functions 'LIB:*'`): each module's checks switch that
//! module's own short functions, so the library's are switched too, timing costs about the
//! budget, every call is still counted, and `lopi report --budget` names each switched
//! function with its module and a call rate that was measured (issue 26, item 3: the
//! modules' checks shared one table, which the library's hot functions had no entries in,
//! and timing cost 16-24% of a compressor's run, with rates of 10^15 calls a second).
//!
//! A library function switched while calls of it are open is found by the program's probe
//! (its runtime has no access to the library's): those calls are counted, not timed on.
//!
//! `fixtures/timing/budget_lib_main.c` and its library `budget_lib.c` (libbudget.so), built
//! -O2 PIE and -O3 PIE with CET, run under `lopi run` (both modules spliced) and rewritten
//! (both files rewritten, the library found through LD_LIBRARY_PATH).
//!
//! Environment knobs: those of `timing_harness/` (LOPI_BIN, LOPI_KEEP_TMP, LOPI_TEST_TIMEOUT).

mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "libbudget.so";

/// Compiler flags of the configurations: (name, flags for the program and the library).
const CONFIGS: [(&str, &[&str]); 2] = [("O2-pie", &["-O2", "-fcf-protection=none"]), ("O3-pie-cet", &["-O3", "-fcf-protection=full"])];

/// The budget's part of a run: timing may cost this much more than the budget (the report's
/// timing cost is whole calls x one call's probes over the thread's run).
const SLACK: f64 = 0.03;

/// Most calls a second a switched function can have run at while timed (a call and its
/// probes take tens of ns).
const MAX_RATE: f64 = 500e6;

#[test]
fn budget_switches_a_library_s_functions_live() {
    for (name, flags) in CONFIGS {
        let mut case = Case::build(name, flags, true);
        case.check_run();
        case.finish();
    }
}

#[test]
fn budget_switches_a_library_s_functions_rewritten() {
    for (name, flags) in CONFIGS {
        let mut case = Case::build(name, flags, false);
        case.check_run();
        case.finish();
    }
}

/// The program and its library built in one configuration, and the commands run so far.
struct Case {
    label: String,
    dir: PathBuf,
    fx: Fixture,
    orig: PathBuf,
    /// Where the original library is, and the rewritten program and library.
    lib_dir: PathBuf,
    rw: PathBuf,
    rw_dir: PathBuf,
    live: bool,
    repro: Vec<String>,
    problems: Vec<String>,
}

impl Case {
    fn build(config: &str, flags: &[&str], live: bool) -> Case {
        let fx = Fixture::load("timing/budget_lib_main.c");
        let label = format!("budget_lib_main.c {config} {}", if live { "live" } else { "rewritten" });
        let dir = fresh_dir(&format!("budget-modules-{config}-{live}"));
        let (lib_dir, rw_dir) = (dir.join("orig"), dir.join("rw"));
        for d in [&lib_dir, &rw_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        let mut case = Case { label, orig: lib_dir.join("prog"), rw: rw_dir.join("prog"), lib_dir, rw_dir, dir, fx, live, repro: Vec::new(), problems: Vec::new() };
        let lib_src = Fixture::load(&case.fx.lib.clone().expect("lopi-lib directive")).path;
        let lib = case.lib_dir.join(LIB);
        case.compile(Command::new("cc").args(flags).args(["-fPIC", "-shared", "-o"]).arg(&lib).arg(&lib_src));
        let (src, orig) = (case.fx.path.clone(), case.orig.clone());
        case.compile(Command::new("cc").args(flags).args(["-fPIE", "-pie", "-o"]).arg(&orig).arg(&src).arg(format!("-L{}", case.lib_dir.display())).arg("-lbudget"));
        if !live {
            let (rw, rw_lib) = (case.rw.clone(), case.rw_dir.join(LIB));
            for (from, to) in [(&orig, &rw), (&lib, &rw_lib)] {
                case.lopi(&["rewrite".as_ref(), from.as_os_str(), "-o".as_ref(), to.as_os_str(), "--probe".as_ref(), "entry,exit".as_ref(), "--budget".as_ref(), "5%".as_ref()]);
            }
        }
        case
    }

    fn fail_msg(&self, what: impl std::fmt::Display) -> String {
        let mut s = format!("=== [{}] {}\n  temp dir kept: {}\n  repro:\n", self.label, what.to_string().trim_end(), self.dir.display());
        for r in &self.repro {
            let _ = writeln!(s, "    {r}");
        }
        s
    }

    fn check(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(problem());
        }
    }

    fn finish(self) {
        if !self.problems.is_empty() {
            panic!("{}", self.fail_msg(format!("{} problem(s):\n  {}", self.problems.len(), self.problems.join("\n  "))));
        }
        cleanup(&self.dir);
    }

    fn compile(&mut self, cmd: &mut Command) {
        self.repro.push(render_cmd(cmd));
        if let Err(e) = compile(cmd) {
            panic!("{}", self.fail_msg(e));
        }
    }

    fn run(&mut self, cmd: &mut Command) -> Output {
        self.repro.push(render_cmd(cmd));
        run(cmd, default_timeout()).unwrap_or_else(|e| panic!("{}", self.fail_msg(format!("cannot run: {e}"))))
    }

    /// Runs lopi with `args`; it must succeed.
    fn lopi(&mut self, args: &[&OsStr]) -> Output {
        let out = self.run(Command::new(lopi_bin()).args(args));
        if !out.status.success() || out.stderr_str().contains("panicked") {
            panic!("{}", self.fail_msg(format!("lopi failed ({}):\n{}", out.describe_status(), out.stderr_str())));
        }
        out
    }

    fn json(&mut self, args: &[&OsStr]) -> Json {
        let out = self.lopi(args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{}", self.fail_msg(format!("bad JSON from lopi: {e}"))))
    }

    /// Runs the original program, then the probed one with a budget of 5% (under `lopi run`,
    /// or rewritten): same output, exact counts, the library's short functions switched,
    /// timing within the budget, rates measured.
    fn check_run(&mut self) {
        let mut native = Command::new(&self.orig);
        native.current_dir(&self.dir).env("LD_LIBRARY_PATH", &self.lib_dir).env_remove("LOPI_OUTPUT");
        let want = self.run(&mut native);
        if !want.status.success() {
            panic!("{}", self.fail_msg(format!("fixture bug: the original program ended with {}", want.describe_status())));
        }
        let data = self.dir.join("data.lopi");
        let mut probed = if self.live {
            let mut c = Command::new(lopi_bin());
            c.args(["run", "-q", "--probe", "entry,exit", "--budget", "5%", "--functions", "*", "--functions"]).arg(format!("{LIB}:*")).arg("--").arg(&self.orig);
            c.env("LD_LIBRARY_PATH", &self.lib_dir);
            c
        } else {
            let mut c = Command::new(&self.rw);
            c.env("LD_LIBRARY_PATH", &self.rw_dir);
            c
        };
        probed.current_dir(&self.dir).env("LOPI_OUTPUT", &data);
        let got = self.run(&mut probed);
        if got.status != want.status || got.stdout != want.stdout {
            panic!(
                "{}",
                self.fail_msg(format!("the probed program ended with {} (native: {}):\n{}", got.describe_status(), want.describe_status(), diff("native", &want.stdout_str(), "probed", &got.stdout_str())))
            );
        }
        self.check_counts(&want.stdout_str(), &data);
        self.check_budget(&data);
        self.check_open_calls(&got.stderr_str(), &data);
    }

    /// lib_step's calls open when the library's check switched it ended without their exit
    /// probes; the program's runtime, whose probe came next, counted them without a time
    /// instead of timing them until then.
    fn check_open_calls(&mut self, stderr: &str, data: &Path) {
        let measured = stderr.lines().find_map(|l| l.strip_prefix("measured steps_ns=")?.trim().parse::<f64>().ok());
        let Some(steps) = measured else {
            self.problems.push(format!("the program did not say how long its calls of lib_step took:\n{stderr}"));
            return;
        };
        let report = self.json(&["report".as_ref(), data.as_os_str(), "--format".as_ref(), "json".as_ref()]);
        let step = report["functions"].as_array().into_iter().flatten().find(|f| f["name"] == "lib_step").cloned().unwrap_or_default();
        let longest = step["max_ns"].as_f64().unwrap_or(f64::NAN);
        self.check(longest < steps / 4.0, || format!("lib_step's longest call took {longest} ns of the {steps} ns of all its calls: an open call ran on"));
        let open: u64 = report["timing"]["threads"].as_array().into_iter().flatten().filter_map(|t| t["switched_open"].as_u64()).sum();
        self.check(open <= 10, || format!("{open} calls open at a switch; lib_step recurses 10 deep"));
    }

    /// Every call counted: the program's functions as its `lopi-expect` line says, the
    /// library's as the library counted them itself (and as its `lopi-expect-lib` line says).
    fn check_counts(&mut self, stdout: &str, data: &Path) {
        let own: BTreeMap<String, u64> = stdout.split_whitespace().filter_map(|w| Some((w.split_once('=')?.0.to_string(), w.split_once('=')?.1.parse().ok()?))).collect();
        let report = self.json(&["report".as_ref(), data.as_os_str(), "--format".as_ref(), "json".as_ref()]);
        let calls = |name: &str, lib: bool| -> u64 {
            report["functions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["name"] == name && f["module"].as_str().is_some_and(|m| m.ends_with(LIB) == lib))
                .filter_map(|f| f["calls"].as_u64())
                .sum()
        };
        for (name, want) in self.fx.expect_lib.clone() {
            let got = calls(&name, true);
            let counted = own.get(&name).copied();
            self.check(got == want && counted.is_none_or(|c| c == want), || format!("{name}: lopi counted {got} calls, the library {counted:?}, expected {want}"));
        }
        for (name, want) in self.fx.expect.clone() {
            let got = calls(&name, false);
            self.check(got == want, || format!("{name}: lopi counted {got} calls, expected {want}"));
        }
        let threads = report["timing"]["threads"].as_array().cloned().unwrap_or_default();
        let unmatched: u64 = threads.iter().map(|t| t["unmatched_exits"].as_u64().unwrap_or(u64::MAX)).sum();
        self.check(threads.len() == 1 && unmatched == 0, || format!("{} timed threads, {unmatched} unmatched exits", threads.len()));
    }

    /// `lopi report --budget`: the library's short functions switched (named with their
    /// module) and its long one kept; timing within a few points of the budget; every rate
    /// finite and plausible.
    fn check_budget(&mut self, data: &Path) {
        let budget = self.json(&["report".as_ref(), data.as_os_str(), "--budget".as_ref(), "--format".as_ref(), "json".as_ref()]);
        let threads = budget.as_array().cloned().unwrap_or_default();
        let [thread] = threads.as_slice() else {
            self.problems.push(format!("want one thread's budget, got {budget}"));
            return;
        };
        let switches = thread["switches"].as_array().cloned().unwrap_or_default();
        let switched = |name: &str, lib: bool| switches.iter().any(|s| s["function"] == name && s["module"].as_str().is_some_and(|m| m.ends_with(LIB) == lib));
        for name in ["lib_tiny", "lib_mix"] {
            self.check(switched(name, true), || format!("{name} of {LIB} not switched; switches: {switches:?}"));
        }
        self.check(switched("main_step", false), || format!("main_step of the program not switched; switches: {switches:?}"));
        self.check(switched("lib_step", true), || format!("lib_step of {LIB} not switched; switches: {switches:?}"));
        for (name, lib) in [("lib_slow", true), ("main", false), ("main_after", false)] {
            self.check(!switched(name, lib), || format!("{name} was switched: {switches:?}"));
        }
        for s in &switches {
            let rate = s["calls_per_s"].as_f64().unwrap_or(f64::NAN);
            self.check(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE, || format!("switch {s}: implausible call rate"));
        }
        let b = &thread["budget"];
        let (timing, cpu) = (b["timing_ns"].as_f64().unwrap_or(f64::NAN), b["cpu_ns"].as_f64().unwrap_or(f64::NAN));
        let cost = timing / cpu;
        self.check(cost <= 0.05 + SLACK, || format!("timing cost {:.1}% of the thread's CPU time, budget 5%: {b}", 100.0 * cost));
        let modules = b["modules"].as_array().cloned().unwrap_or_default();
        self.check(modules.len() == 2 && modules.iter().any(|m| m.as_str().is_some_and(|m| m.ends_with(LIB))), || format!("modules whose checks switch functions: {modules:?}"));
        let text = self.lopi(&["report".as_ref(), data.as_os_str(), "--budget".as_ref()]).stdout_str();
        self.check(text.lines().any(|l| l.ends_with(&format!(" lib_tiny  [{LIB}]"))), || format!("lopi report --budget does not name lib_tiny's module:\n{text}"));
    }
}
