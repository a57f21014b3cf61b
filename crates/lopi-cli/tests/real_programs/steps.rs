//! lopi's steps over a binary: `lopi info` (coverage asserted), `lopi rewrite` in a mode,
//! and `lopi report` read back (with the exports of a trace).

use super::{lopi, secs, Mode};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const MIN_COVERAGE: f64 = 99.0;

pub fn lopi_json(args: &[&str]) -> Value {
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
pub fn info(tag: &str, bin: &Path) -> Value {
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
pub fn rewrite(tag: &str, bin: &Path, out: &Path, mode: Mode) {
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

pub struct Report {
    json: Value,
}

impl Report {
    /// `lopi report DATA --format json`; what MODE records must be there (timing, trace
    /// events), and for a trace `lopi export --format chrome` and `lopi flamegraph` must work.
    pub fn load(tag: &str, data: &Path, mode: Mode) -> Report {
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
    pub fn expect_hot(&self, tag: &str, name: &str, n: usize) {
        let top = self.top_by_time(n);
        println!("[{tag}] top {n} by inclusive time: {top:?}");
        assert!(
            top.iter().any(|(f, t)| f == name && *t > 0.0),
            "[{tag}] {name} is not among the {n} functions with the most time: {top:?}"
        );
    }

    pub fn functions(&self) -> Vec<(String, String, u64)> {
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

    pub fn calls_prefix(&self, prefix: &str) -> u64 {
        self.functions()
            .iter()
            .filter(|(n, _, _)| n.starts_with(prefix))
            .map(|(_, _, c)| *c)
            .sum()
    }

    pub fn module_totals(&self, module: &str) -> (usize, u64) {
        let f: Vec<_> = self
            .functions()
            .into_iter()
            .filter(|(_, m, c)| m.contains(module) && *c > 0)
            .collect();
        (f.len(), f.iter().map(|(_, _, c)| c).sum())
    }

    pub fn expect(&self, tag: &str, name: &str, module: Option<&str>) -> u64 {
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

    pub fn print_top(&self, tag: &str, title: &str, module: Option<&str>) {
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
