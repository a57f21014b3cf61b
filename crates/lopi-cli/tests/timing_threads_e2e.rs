//! End-to-end tests of timing (`--probe entry,exit`, rewritten and under `lopi run`) in what
//! interrupts or multiplies a program's calls: signal handlers, threads created, joined and
//! detached, and fork. The harness is `timing_harness/` (see `timing_e2e.rs`).

mod common;
#[macro_use]
mod timing_harness;

use common::*;
use std::collections::BTreeSet;
use timing_harness::*;

// ---------------------------------------------------------------------------
// 6. Signals
// ---------------------------------------------------------------------------

/// A SIGALRM handler (every 500 us) calls timed functions while main calls timed functions
/// in a loop. Output identical, entry counts exact (the program reports how often each
/// ran), handler calls in the trees only under what main was doing, no unmatched exits.
#[test]
fn signal_handler_calls_timed_functions() {
    for cfg in configs() {
        let mut b = build("signals.c", cfg, &[]);
        let p = b.run_pair(&[]);
        let exp = signal_expectations(&p.got);
        let ticks = exp[3].1;
        let r = &p.report;
        b.check_functions(r, &exp, &["main", "main_work", "main_inner", "on_tick", "tick_work"]);
        b.check_self_within_total(r);
        b.check(ticks >= 30, || format!("handler ran {ticks} times"));
        b.check_sane(r, p.wall, true);
        for field in ["unmatched_exits", "too_deep", "merged_calls", "untimed_calls"] {
            b.check_thread_counter(r, field, 0);
        }
        for (caller, _) in r.edges().keys().filter(|(_, c)| c == "on_tick") {
            let ok = matches!(caller.as_deref(), Some("main") | Some("main_work") | Some("main_inner"));
            b.check(ok, || format!("on_tick called from {caller:?}"));
        }
        b.finish();
    }
}

/// Exact counts of signals.c, from what the program says it ran (stderr).
fn signal_expectations(out: &Output) -> Vec<(String, u64)> {
    let m = measured(out);
    let (work, ticks) = (m["main_work"] as u64, m["ticks"] as u64);
    expect(&[
        ("main", 1),
        ("main_work", work),
        ("main_inner", work),
        ("on_tick", ticks),
        ("tick_work", 2 * ticks),
        ("tick_leaf", 2 * ticks),
    ])
}

static_and_live! {
    /// Calls made while a signal handler interrupts main's probes keep their calling contexts:
    /// main's calls are all main -> main_work -> main_inner; a handler that interrupted a probe
    /// is not timed at all (counted once in `nested_skipped`), so every other call is in the
    /// trees under its real caller. 10 runs with a tick every 500 us.
    signal_handler_keeps_calling_contexts, signal_handler_keeps_calling_contexts_live, signal_handler_keeps_calling_contexts_in
}

fn signal_handler_keeps_calling_contexts_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("signals.c", cfg, &[], live);
        let names: Vec<String> = ["main", "main_work", "main_inner", "on_tick", "tick_work", "tick_leaf"]
            .map(String::from)
            .to_vec();
        for _ in 0..10 {
            let p = b.run_pair(&[]);
            let exp = signal_expectations(&p.got);
            let work = exp[1].1;
            let r = &p.report;
            for (caller, callee) in [(Some("main"), "main_work"), (Some("main_work"), "main_inner")] {
                let (n, _) = r.edge(caller, callee);
                b.check(n == work, || {
                    format!("{caller:?} -> {callee}: {n}, expected {work} (all of main's calls)")
                });
            }
            for (callee, callers) in [
                ("main_work", &["main"][..]),
                ("main_inner", &["main_work"][..]),
                ("tick_work", &["on_tick"][..]),
                ("tick_leaf", &["tick_work"][..]),
            ] {
                for (caller, (n, _)) in r
                    .edges()
                    .iter()
                    .filter(|((_, c), _)| c == callee)
                    .map(|((a, _), v)| (a.clone(), *v))
                {
                    let ok = caller.as_deref().is_some_and(|c| callers.contains(&c));
                    b.check(ok, || {
                        format!("edge {caller:?} -> {callee} ({n} calls): {callee} is only called from {callers:?}")
                    });
                }
            }
            let mut skipped_calls = 0;
            for name in &names {
                if b.is_timed(name) {
                    skipped_calls += r.calls(name).unwrap_or(0).saturating_sub(r.tree_calls(name));
                }
            }
            b.check_thread_counter(r, "nested_skipped", skipped_calls);
            if !b.problems.is_empty() {
                break;
            }
        }
        b.finish();
    }
}

/// The text report's note on handler calls that interrupted a probe counts calls, as it says.
#[test]
fn signal_note_counts_calls() {
    let mut b = build("signals.c", O2_PIE, &[]);
    let p = b.run_pair(&[]);
    let r = &p.report;
    let skipped: u64 = ["on_tick", "tick_work", "tick_leaf"]
        .iter()
        .filter(|n| b.is_timed(n))
        .map(|n| r.calls(n).unwrap_or(0) - r.tree_calls(n))
        .sum();
    let text = b.lopi(&["report".as_ref(), p.data.as_os_str()]).stdout_str();
    let note = text
        .lines()
        .find(|l| l.contains("a signal handler interrupted it"))
        .map(String::from);
    let n: Option<u64> = note.as_deref().and_then(|l| l.split_whitespace().find_map(|t| t.parse().ok()));
    if skipped > 0 {
        b.check(n == Some(skipped), || {
            format!(
                "text note {note:?}, but {skipped} calls were not timed (nested_skipped = {})",
                r.thread_sum("nested_skipped")
            )
        });
    }
    b.finish();
}

// ---------------------------------------------------------------------------
// 7. Threads
// ---------------------------------------------------------------------------

static_and_live! {
    /// 11 rounds of 8 joined threads and 8 detached threads that leave by pthread_exit from
    /// inside timed frames (96 threads). Calls exact; at most one timing.threads entry per
    /// thread (glibc reuses a finished thread's descriptor, and lopi then records both threads
    /// in one entry), their calls add up to all timed calls; no calling context leaks from a
    /// dead thread into the thread that reuses its descriptor (exact edges).
    threads_created_joined_and_detached, threads_created_joined_and_detached_live, threads_created_joined_and_detached_in
}

fn threads_created_joined_and_detached_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("threads.c", cfg, &[], live);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &["worker", "work", "leaf", "detached_main", "exit_outer", "main"]);
        b.check_self_within_total(r);
        b.check_tree_has_every_call(r, &names);
        let mut edges = vec![
            (None, "main", 1),
            (None, "worker", 88),
            (None, "detached_main", 8),
            (Some("worker"), "work", 440_000),
            (Some("detached_main"), "work", 8000),
            (Some("work"), "leaf", 448_000),
            (Some("detached_main"), "exit_outer", 8),
        ];
        if b.is_timed("exit_inner") {
            edges.push((Some("exit_outer"), "exit_inner", 8));
        }
        if b.is_timed("joined_round") {
            edges.push((Some("main"), "joined_round", 11));
        }
        b.check_edges(r, &names, &edges);
        b.check_sane(r, p.wall, false);
        let threads = r.threads();
        b.check((1..=97).contains(&threads.len()), || {
            format!("{} timing.threads entries for 97 threads", threads.len())
        });
        let pid = p.got.pid;
        b.check(threads.iter().all(|t| t["pid"].as_u64() == Some(pid as u64)), || {
            "a thread entry with another pid".into()
        });
        let tids: BTreeSet<u64> = threads.iter().filter_map(|t| t["tid"].as_u64()).collect();
        b.check(tids.len() == threads.len(), || {
            "two timing.threads entries with the same tid".into()
        });
        b.check(tids.contains(&(pid as u64)), || {
            "no timing.threads entry for the main thread".into()
        });
        let timed_calls: u64 = names.iter().filter(|n| b.is_timed(n)).map(|n| r.calls(n).unwrap_or(0)).sum();
        b.check_thread_counter(r, "calls", timed_calls);
        for field in ["unmatched_exits", "too_deep", "nested_skipped", "merged_calls", "untimed_calls"] {
            b.check_thread_counter(r, field, 0);
        }
        b.finish();
    }
}

// ---------------------------------------------------------------------------
// 9. fork
// ---------------------------------------------------------------------------

static_and_live! {
    /// Parent and two forked children call timed functions into one data file: threads from all
    /// three pids, calls exact, the parent's thread exact. What a child's thread holds beyond its
    /// own c_work calls depends on the calls it inherits (see `fork_child_continues_parent_calls`):
    /// at most main and the spawn function, with at most that many unmatched exits.
    fork_parent_and_children, fork_parent_and_children_live, fork_parent_and_children_in
}

fn fork_parent_and_children_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("fork.c", cfg, &[], live);
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &["p_work", "c_work", "spawn_exit", "spawn_return"]);
        b.check_self_within_total(r);
        b.check_tree_has_every_call(r, &["p_work".into(), "c_work".into()]);
        let main_timed = b.is_timed("main") as u64;
        let m = measured(&p.got);
        let (parent, c1, c2) = (m["parent"] as u64, m["child1"] as u64, m["child2"] as u64);
        b.check(parent == p.got.pid as u64, || {
            format!("parent pid {parent} != spawned pid {}", p.got.pid)
        });
        let threads = r.threads();
        let by_pid = |pid: u64| {
            threads
                .iter()
                .filter(|t| t["pid"].as_u64() == Some(pid))
                .copied()
                .collect::<Vec<_>>()
        };
        let pids: BTreeSet<u64> = threads.iter().filter_map(|t| t["pid"].as_u64()).collect();
        b.check(pids == BTreeSet::from([parent, c1, c2]), || {
            format!("thread pids {pids:?}, expected parent {parent}, children {c1} {c2}")
        });
        let open_at_fork = 1 + main_timed;
        for (pid, own, is_child) in [(parent, 2000 + 2 + main_timed, false), (c1, 500, true), (c2, 300, true)] {
            let t = by_pid(pid);
            b.check(t.len() == 1, || format!("pid {pid}: {} thread entries, expected 1", t.len()));
            let Some(t) = t.first() else { continue };
            let calls = t["calls"].as_u64().unwrap_or(0);
            let unmatched = t["unmatched_exits"].as_u64().unwrap_or(u64::MAX);
            b.check(t["tid"].as_u64() == Some(pid), || format!("pid {pid}: tid {}", t["tid"]));
            if is_child {
                b.check((own..=own + open_at_fork).contains(&calls), || {
                    format!("child {pid}: {calls} calls, expected {own} + up to {open_at_fork} inherited")
                });
                b.check(unmatched <= open_at_fork, || format!("child {pid}: {unmatched} unmatched exits"));
            } else {
                b.check(calls == own, || format!("parent: {calls} calls, expected {own}"));
                b.check(unmatched == 0, || format!("parent: {unmatched} unmatched exits"));
            }
        }
        for field in ["too_deep", "nested_skipped", "merged_calls", "untimed_calls"] {
            b.check_thread_counter(r, field, 0);
        }
        // Per function, the parent's and the children's copies of main overlap in time.
        b.check_sane(r, p.wall, false);
        b.finish();
    }
}

/// A forked child goes on with copies of the calls its parent had open when it forked
/// (main and the spawn function; the executable's fork handler snapshots them), so their
/// exits match in the child. Calls are counted where they began, so the copies add no
/// calls: each child counts exactly its own c_work calls, the trees count main and each
/// spawn function once, and no exit is unmatched. 10 runs per configuration.
#[test]
fn fork_child_continues_parent_calls() {
    for cfg in configs() {
        let mut b = build("fork.c", cfg, &[]);
        let main_timed = b.is_timed("main") as u64;
        for _ in 0..10 {
            let p = b.run_pair(&[]);
            let r = &p.report;
            let m = measured(&p.got);
            for (name, want) in [("spawn_exit", 1), ("spawn_return", 1), ("main", main_timed)] {
                let got = r.tree_calls(name);
                b.check(got == want, || format!("{name}: {got} calls in the trees, expected {want} (the parent's)"));
            }
            for (child, own) in [("child1", 500), ("child2", 300)] {
                let pid = m[child] as u64;
                let Some(t) = r.threads().into_iter().find(|t| t["pid"].as_u64() == Some(pid)) else {
                    b.problem(format!("{child} (pid {pid}): no thread entry"));
                    continue;
                };
                let (calls, unmatched) = (t["calls"].as_u64().unwrap_or(0), t["unmatched_exits"].as_u64().unwrap_or(9));
                b.check(calls == own && unmatched == 0, || {
                    format!("{child}: {calls} calls and {unmatched} unmatched exits, expected {own} calls, none unmatched")
                });
            }
            if !b.problems.is_empty() {
                break;
            }
        }
        b.finish();
    }
}
