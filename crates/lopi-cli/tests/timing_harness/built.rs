//! One fixture in one configuration: built, rewritten (or run under `lopi run`), run beside
//! the original, its report read; the problems found are reported together at the end.

use super::{Config, Report};
use crate::common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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
}

pub struct Pair {
    pub want: Output,
    pub got: Output,
    pub wall: Duration,
    pub report: Report,
    pub data: PathBuf,
}
