//! End-to-end tests of sampled time (`--time sampled`): calls and calling contexts exact as
//! with exact time, time from each thread's CPU-time samples (threads and a forked child each
//! with a timer of their own), and the combinations it refuses. The harness is
//! `timing_harness/`.

mod common;
#[macro_use]
mod timing_harness;

use common::{lopi_bin, require};
use std::process::Command;
use timing_harness::*;

static_and_live! {
    /// sampled.c under `--time sampled`: every call counted and every edge as exact timing
    /// finds them; heavy() and light() take the CPU time the program measured (within what
    /// sampling at the kernel's tick allows), three to one; every thread and the forked child
    /// sampled; the text report says how.
    sampled_time_matches_the_cpu_time_measured, sampled_time_matches_the_cpu_time_measured_live, sampled_in
}

fn sampled_in(live: bool) {
    // Alone on the machine: the kernel checks CPU-time timers at its ticks, and a thread that
    // an oversubscribed CPU runs mostly between them is sampled in bursts (the static and live
    // runs side by side, with other jobs, once gave light() half of heavy()'s samples).
    let alone = || Share::Alone(MACHINE.write().unwrap_or_else(|e| e.into_inner()));
    for cfg in configs() {
        let mut exact = build_sharing("sampled.c", cfg, &[], live, alone());
        let exact_edges = exact.run_pair(&[]).report.edges();
        exact.finish();

        let mut b = build_sharing("sampled.c", cfg, &["--time", "sampled"], live, alone());
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check(r.sampled(), || "the report's threads have no sampling".into());
        b.check_functions(r, &exp, &["heavy", "light", "unit"]);
        b.check_self_within_total(r);
        b.check_tree_has_every_call(r, &names);
        let calls = |e: &std::collections::BTreeMap<(Option<String>, String), (u64, f64)>| e.iter().map(|(k, v)| (k.clone(), v.0)).collect::<Vec<_>>();
        b.check(calls(&r.edges()) == calls(&exact_edges), || format!("edges differ from exact timing's:\nsampled {:?}\nexact   {:?}", calls(&r.edges()), calls(&exact_edges)));

        // The parent's three threads measured; the child did the same work as each of them.
        let m = measured(&p.got);
        let (heavy, light) = (m["heavy_ns"] as f64 * 4.0 / 3.0, m["light_ns"] as f64 * 4.0 / 3.0);
        let (got_heavy, got_light) = (r.num("heavy", "total_ns"), r.num("light", "total_ns"));
        b.check(close(got_heavy, heavy, 0.3, 0.0), || format!("heavy: {got_heavy} ns sampled, about {heavy} ns of CPU time measured"));
        b.check(close(got_light, light, 0.3, 0.0), || format!("light: {got_light} ns sampled, about {light} ns of CPU time measured"));
        let ratio = got_heavy / got_light;
        b.check((2.0..=4.5).contains(&ratio), || format!("heavy / light = {ratio}, want about 3"));

        let threads = r.threads();
        b.check(threads.len() == 4, || format!("{} threads recorded, want 4 (main, 2 workers, the child)", threads.len()));
        for t in &threads {
            let s = &t["sampling"];
            b.check(s["samples"].as_u64().is_some_and(|n| n > 0) && s["timer_error"].is_null(), || format!("thread {}: sampling {s}", t["tid"]));
        }
        let text = b.lopi(&["report".as_ref(), p.data.as_os_str()]).stdout_str();
        b.check(text.contains("time: sampled, ") && text.contains("calls and calling contexts are exact"), || format!("text report:\n{text}"));
        // pprof reads it as a CPU profile: calls, samples and their CPU time, with the period.
        let pb = b.dir.join("sampled.pb");
        b.lopi(&["export".as_ref(), p.data.as_os_str(), "--format".as_ref(), "pprof".as_ref(), "-o".as_ref(), pb.as_os_str()]);
        let raw = b.run(Command::new(require("go", "golang-go")).args(["tool", "pprof", "-raw"]).arg(&pb)).stdout_str();
        b.check(raw.contains("PeriodType: cpu nanoseconds") && raw.contains("calls/count samples/count cpu/nanoseconds[dflt]"), || format!("go tool pprof -raw:\n{raw}"));
        b.finish();
    }
}

/// What sampled time cannot do is refused before anything runs, with the reason.
#[test]
fn sampled_time_refuses_what_it_cannot_time() {
    let cases: [(&[&str], &str); 6] = [
        (&["run", "--time", "sampled", "--", "true"], "it times calls"),
        (&["run", "--time", "sampled", "--probe", "entry,exit", "--budget", "5%", "--", "true"], "needs no --budget"),
        (&["run", "--time", "sampled", "--probe", "entry,exit", "--trace", "--", "true"], "a trace's timestamps"),
        (&["run", "--time", "sampled", "--probe", "entry,exit,syscall", "--", "true"], "CPU-time samples do not see"),
        (&["rewrite", "/bin/true", "-o", "/nonexistent/x", "--time", "sampled", "--probe", "entry,exit,locks"], "CPU-time samples do not see"),
        (&["run", "--time", "sampled", "--probe", "entry,exit", "--sample-hz", "0", "--", "true"], "0 is not in 10..=100000"),
    ];
    for (args, want) in cases {
        let out = Command::new(lopi_bin()).args(args).output().expect("lopi runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(want), "lopi {}: status {}, stderr:\n{stderr}\n(want {want:?})", args.join(" "), out.status);
    }
}
