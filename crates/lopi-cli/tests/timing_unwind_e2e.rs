//! End-to-end tests of timing where calls end without their exits: setjmp/longjmp out of deep
//! recursion, C++ exceptions, and the real callers that glibc's backtrace() and gdb see under
//! the probes. The harness is `timing_harness/`; `timing_e2e.rs` has what these share.

mod common;
#[macro_use]
mod timing_harness;

use common::*;
use std::path::Path;
use std::process::Command;
use timing_harness::*;

// ---------------------------------------------------------------------------
// 4. setjmp/longjmp
// ---------------------------------------------------------------------------

const LONGJMP_EDGES: &[(Option<&str>, &str, u64)] = &[
    (None, "main", 1),
    (Some("main"), "one_round", 1000),
    (Some("one_round"), "dive", 1000),
    (Some("dive"), "dive", 50_000),
    (Some("dive"), "escape", 1000),
    (Some("one_round"), "inner_guard", 100),
    (Some("inner_guard"), "inner_jump", 100),
    (Some("main"), "slow_round", 5),
    (Some("slow_round"), "slow_dive", 5),
    (Some("slow_dive"), "slow_dive", 15),
    (Some("slow_dive"), "slow_escape", 5),
];

static_and_live! {
    /// longjmp out of 52 timed frames, 1000 times; frames left this way are closed at the next
    /// probe above them. Observed: no unmatched exits (the landing function's own exit probe
    /// closes them), and the shadow stack never holds more than the real stack: with
    /// LOPI_DEPTH=54 (the real maximum) nothing is too deep, with 53 exactly the 1000 escape()
    /// calls are. Time spent in frames that longjmp leaves is kept (slow rounds, 2 ms each).
    longjmp_out_of_deep_recursion, longjmp_out_of_deep_recursion_live, longjmp_out_of_deep_recursion_in
}

fn longjmp_out_of_deep_recursion_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("longjmp.c", cfg, &[], live);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        let p = b.run_pair(&[("LOPI_DEPTH", "64")]);
        let r = &p.report;
        b.check_functions(r, &exp, &all);
        b.check_tree_has_every_call(r, &names);
        b.check_edges(r, &names, LONGJMP_EDGES);
        b.check_sane(r, p.wall, true);
        for field in ["unmatched_exits", "too_deep", "nested_skipped", "merged_calls", "untimed_calls"] {
            b.check_thread_counter(r, field, 0);
        }
        let m = measured(&p.got);
        let slow = m["slow_ns"] as f64;
        for f in ["slow_round", "slow_escape"] {
            let t = r.num(f, "total_ns");
            b.check(close(t, slow, 0.05, 0.0), || {
                format!("{f} total_ns {t}, the program measured {slow} for the slow rounds")
            });
        }
        let esc_max = r.num("slow_escape", "max_ns");
        b.check(esc_max >= 0.95 * 2e6, || format!("slow_escape max_ns {esc_max} < 2 ms of spinning"));

        // The shadow stack tracks the real one: 54 frames fit, 53 do not.
        let (got, _, data) = b.run_rewritten(&[("LOPI_DEPTH", "54")]);
        b.same_behaviour(&p.want, &got);
        let r = b.report(&data);
        b.check_thread_counter(&r, "too_deep", 0);
        b.check_thread_counter(&r, "unmatched_exits", 0);
        b.check_edges(&r, &names, LONGJMP_EDGES);
        let (got, _, data) = b.run_rewritten(&[("LOPI_DEPTH", "53")]);
        b.same_behaviour(&p.want, &got);
        let r = b.report(&data);
        b.check_thread_counter(&r, "too_deep", 1000);
        b.check_thread_counter(&r, "unmatched_exits", 0);
        let without_escape: Vec<_> = LONGJMP_EDGES.iter().copied().filter(|e| e.1 != "escape").collect();
        b.check_edges(&r, &names, &without_escape);
        b.check_functions(&r, &exp, &[]);
        b.finish();
    }
}

/// A caller's inclusive time covers what it calls, and a function's self time is part of its
/// total: main's total_ns must be at least the total of its calls to slow_round (10+ ms of
/// spinning), one_round (1000 calls, 50 us uninstrumented, 1.5 ms instrumented) must not
/// show 0 ns.
#[test]
fn longjmp_caller_total_covers_callees() {
    for cfg in configs() {
        let mut b = build("longjmp.c", cfg, &[]);
        let p = b.run_pair(&[]);
        let r = &p.report;
        let main_total = r.num("main", "total_ns");
        let callees: f64 = r
            .edges()
            .iter()
            .filter(|((c, _), _)| c.as_deref() == Some("main"))
            .map(|(_, (_, t))| t)
            .sum();
        // Sums of f64 in another order may differ in the last bits.
        b.check(main_total >= callees * (1.0 - 1e-12), || {
            format!(
                "main total_ns {main_total} < sum of its callees' totals {callees} (main -> slow_round {:?}, main -> one_round {:?})",
                r.edge(Some("main"), "slow_round"),
                r.edge(Some("main"), "one_round")
            )
        });
        let m = measured(&p.want);
        for f in ["one_round", "dive"] {
            let t = r.num(f, "total_ns");
            b.check(t > 0.0, || {
                format!("{f}: total_ns {t}, though 1000 rounds took {} ns uninstrumented", m["loop_ns"])
            });
        }
        b.check_self_within_total(r);
        b.finish();
    }
}

// ---------------------------------------------------------------------------
// 5. C++ exceptions
// ---------------------------------------------------------------------------

static_and_live! {
    /// Exceptions thrown through 4 timed frames and caught, caught-and-rethrown (`throw;`),
    /// captured and rethrown with std::rethrow_exception; normal returns through the same frames.
    /// Frames left by unwinding are closed: with LOPI_DEPTH=6 (the deepest real stack: main,
    /// catcher, level1..3, thrower) nothing is too deep, with 5 exactly the 200 throwers under
    /// level3 are.
    cxx_exceptions, cxx_exceptions_live, cxx_exceptions_in
}

fn cxx_exceptions_in(live: bool) {
    let throw_path = [
        "_Z7catcheri",
        "_Z6level1i",
        "_Z6level2i",
        "_Z6level3i",
        "_Z7throweri",
        "_Z11outer_catchi",
        "_Z9rethroweri",
        "_Z10mid_unwindi",
        "_Z11ptr_rethrowi",
        "main",
    ];
    let fixed_edges = [
        (Some("main"), "_Z7catcheri", 200),
        (Some("_Z7catcheri"), "_Z6level1i", 200),
        (Some("_Z6level1i"), "_Z6level2i", 300),
        (Some("_Z6level2i"), "_Z6level3i", 300),
        (Some("_Z6level3i"), "_Z7throweri", 200),
        (Some("main"), "_Z11outer_catchi", 100),
        (Some("_Z11outer_catchi"), "_Z9rethroweri", 100),
        (Some("_Z9rethroweri"), "_Z10mid_unwindi", 100),
        (Some("_Z10mid_unwindi"), "_Z7throweri", 100),
        (Some("main"), "_Z11ptr_rethrowi", 50),
        (Some("_Z11ptr_rethrowi"), "_Z7throweri", 50),
        (None, "main", 1),
    ];
    for cfg in configs() {
        let mut b = build_mode("exceptions.cpp", cfg, &[], live);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &throw_path);
        b.check_self_within_total(r);
        b.check_tree_has_every_call(r, &names);
        for &(caller, callee, n) in &fixed_edges {
            let (got, _) = r.edge(caller, callee);
            b.check(got == n, || format!("{caller:?} -> {callee}: {got} calls, expected {n}"));
        }
        b.check_sane(r, p.wall, true);
        for field in ["unmatched_exits", "too_deep", "nested_skipped", "merged_calls", "untimed_calls"] {
            b.check_thread_counter(r, field, 0);
        }
        // thrower's time runs until the frame is noticed gone (the catching frame's next
        // probe), so it includes the unwinding: more than zero for every throw.
        let thrower_min = r.num("_Z7throweri", "total_ns") / 350.0;
        b.check(thrower_min > 0.0, || "thrower: no time for 350 throws".into());

        for (depth, too_deep) in [("6", 0), ("5", 200)] {
            let (got, _, data) = b.run_rewritten(&[("LOPI_DEPTH", depth)]);
            b.same_behaviour(&p.want, &got);
            let r = b.report(&data);
            b.check_thread_counter(&r, "too_deep", too_deep);
            b.check_thread_counter(&r, "unmatched_exits", 0);
            b.check_functions(&r, &exp, &[]);
        }
        b.finish();
    }
}

// ---------------------------------------------------------------------------
// 8. Backtraces
// ---------------------------------------------------------------------------

/// glibc backtrace() inside a timed function 3 levels deep prints the real callers (exit
/// probes do not touch return addresses): identical output.
#[test]
fn backtrace_shows_real_callers() {
    for cfg in configs() {
        let mut b = build("backtrace.c", cfg, &[]);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let out = p.got.stdout_str();
        b.check(out.matches("from c: c b a main\n").count() == 2, || {
            format!("unexpected backtrace output:\n{out}")
        });
        b.check_functions(&p.report, &exp, &["main", "a", "b", "c", "marker"]);
        b.check_self_within_total(&p.report);
        b.check_tree_has_every_call(&p.report, &names);
        b.finish();
    }
}

/// Function names of gdb's `bt` at each stop of `gdb -batch` with the given breakpoint.
fn gdb_backtraces(b: &mut Built, prog: &Path, breakpoint: &str) -> Vec<Vec<String>> {
    let data = b.dir.join("gdb.lopi");
    let mut cmd = Command::new("gdb");
    cmd.args([
        "-nx",
        "-batch",
        "-ex",
        &format!("break {breakpoint}"),
        "-ex",
        "run",
        "-ex",
        "bt",
        "-ex",
        "continue",
        "-ex",
        "bt",
        "-ex",
        "continue",
    ])
    .arg(prog)
    .env("LOPI_OUTPUT", &data)
    .current_dir(&b.dir);
    let out = b.run(&mut cmd);
    let mut traces: Vec<Vec<String>> = Vec::new();
    for line in out.stdout_str().lines() {
        let Some(rest) = line.strip_prefix('#') else { continue };
        let toks: Vec<&str> = rest.split_whitespace().collect();
        if toks.first() == Some(&"0") {
            traces.push(Vec::new());
        }
        let name = if toks.get(1).is_some_and(|t| t.starts_with("0x")) {
            toks.get(3)
        } else {
            toks.get(1)
        };
        if let (Some(t), Some(name)) = (traces.last_mut(), name) {
            t.push(name.to_string());
        }
    }
    traces
}

/// gdb stops in the rewritten program where it stops in the original and
/// shows the same frames: `break *marker` (inside c, under b, a, main) and `break c` (gdb's
/// own choice of address after the prologue, which lopi's entry jump replaced).
#[test]
fn gdb_backtrace_matches_original() {
    require("gdb", "gdb");
    for cfg in configs() {
        let mut b = build("backtrace.c", cfg, &[]);
        for bp in ["*marker", "c"] {
            let (orig, rw) = (b.orig.clone(), b.rw.clone());
            let want = gdb_backtraces(&mut b, &orig, bp);
            let got = gdb_backtraces(&mut b, &rw, bp);
            let expected_top = if bp == "c" {
                vec!["c", "b", "a", "main"]
            } else {
                vec!["marker", "c", "b", "a", "main"]
            };
            b.check(want.len() == 2 && want.iter().all(|t| t == &expected_top), || {
                format!("gdb on the ORIGINAL, break {bp}: {want:?}")
            });
            b.check(got == want, || {
                format!("gdb break {bp}: rewritten shows {got:?}, original {want:?}")
            });
        }
        b.finish();
    }
}
