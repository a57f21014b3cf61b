//! The checks of a report against the fixture and lopi info (`Built::check_*`), and the
//! helpers the tests compare with.

use super::{Built, Report};
use crate::common::*;
use std::collections::BTreeMap;
use std::time::Duration;

impl Built {
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

pub fn expect(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|&(n, c)| (n.to_string(), c)).collect()
}
