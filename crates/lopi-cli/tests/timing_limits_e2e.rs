//! End-to-end tests of timing at its limits: recursion deeper than the shadow stack
//! (`LOPI_DEPTH`), a calling-context tree at `LOPI_NODES` (merged paths), and a trace buffer
//! that fills (`LOPI_TRACE_EVENTS`). The harness is `timing_harness/`.

mod common;
#[macro_use]
mod timing_harness;

use serde_json::Value as Json;
use timing_harness::*;

// ---------------------------------------------------------------------------
// 10. Deep recursion
// ---------------------------------------------------------------------------

/// 3 descents of 10001 frames: the shadow stack grows past its first 4096 frames, so every
/// call is timed. With LOPI_DEPTH=4096 (its limit) the deepest 5906 calls of each descent
/// (5907 if main is not timed) are not timed, and their exits match no entry: the report
/// names `deep` for them.
#[test]
fn recursion_deeper_than_shadow_stack() {
    for cfg in configs() {
        let mut b = build("deep.c", cfg, &[]);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_thread_counter(r, "too_deep", 0);
        b.check_thread_counter(r, "unmatched_exits", 0);
        b.check_tree_has_every_call(r, &names);
        b.check_functions(r, &exp, &[]);
        b.check_sane(r, p.wall, true);

        let (got, _, data) = b.run_rewritten(&[("LOPI_DEPTH", "4096")]);
        b.same_behaviour(&p.want, &got);
        let r = b.report(&data);
        b.check_functions(&r, &exp, &["deep"]);
        b.check_self_within_total(&r);
        let main_frames = b.is_timed("main") as u64;
        let timed_deep = 4096 - main_frames;
        let too_deep = 3 * (10001 - timed_deep);
        b.check_thread_counter(&r, "too_deep", too_deep);
        b.check_thread_counter(&r, "unmatched_exits", too_deep);
        let (n, _) = r.edge(Some("deep"), "deep");
        b.check(n == 3 * (timed_deep - 1), || format!("deep -> deep: {n}, expected {}", 3 * (timed_deep - 1)));
        b.check(r.tree_calls("deep") == 3 * timed_deep, || format!("deep: {} calls in the trees", r.tree_calls("deep")));
        // Text report says so, and names the function whose exits matched nothing.
        let text = b.lopi(&["report".as_ref(), data.as_os_str()]).stdout_str();
        for want in [format!("{too_deep} calls not timed: shadow stack at its limit"), format!("{too_deep} exits matched no timed entry: deep ({too_deep})")] {
            b.check(text.contains(&want), || format!("text report lacks {want:?}:\n{text}"));
        }
        b.finish();
    }
}

/// paths.c needs about 153,000 calling-context nodes: the tree grows past its first 16,384
/// and every call is in it. With LOPI_NODES=4096 it reaches its limit: later paths are timed
/// per function under [merged call paths], calls stay exact, none is untimed, and leaf()'s
/// time, nearly all of the program's, stays close to the uninstrumented program's run time.
/// main's self time stays small: merged calls' time is not moved to their callers.
#[test]
fn tree_grows_and_merges_paths_at_its_limit() {
    for cfg in configs() {
        let mut b = build_alone("paths.c", cfg, &[]);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        b.check_functions(&p.report, &exp, &["leaf"]);
        b.check_tree_has_every_call(&p.report, &names);
        for field in ["merged_calls", "untimed_calls", "unmatched_exits", "too_deep"] {
            b.check_thread_counter(&p.report, field, 0);
        }

        // leaf()'s own time under merged paths against the uninstrumented program's run time
        // (leaf() is nearly all of it), the fastest run of each: a thread descheduled for
        // milliseconds in one run (this VM's steal time) only ever adds, and moves a median of
        // five more than any error of lopi's could. Not
        // against the full tree's: on some hosts (an Intel Xeon VM) the full tree (153,000
        // nodes, 10 MB) slows leaf()'s own loop by a sixth and adds more to its time (issue 27),
        // where 4,096 nodes stay in the cache; a merged call's own time is what is claimed exact.
        let mut fulls = vec![p.report];
        let mut mergeds = Vec::new();
        let mut natives = Vec::new();
        let mut last = None;
        for round in 0..2 {
            for _ in 0..if round == 0 { 3 } else { 2 } {
                let (got, _, data) = b.run_rewritten(&[("LOPI_NODES", "4096")]);
                b.same_behaviour(&p.want, &got);
                mergeds.push(b.report(&data));
                last = Some(data);
                let began = std::time::Instant::now();
                b.run_original();
                natives.push(began.elapsed().as_secs_f64() * 1e9);
                if fulls.len() < mergeds.len() {
                    let (_, _, again) = b.run_rewritten(&[]);
                    fulls.push(b.report(&again));
                }
            }
            let middle = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let median = |reports: &[Report], name: &str, field: &str| middle(reports.iter().map(|r| r.num(name, field)).collect());
            let mut off = Vec::new();
            let fastest = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
            let native = fastest(natives.clone());
            for field in ["total_ns", "self_ns"] {
                let got = fastest(mergeds.iter().map(|r| r.num("leaf", field)).collect());
                // The run time also holds start-up, exit and the node functions' own time.
                if !(0.7 * native..=1.05 * native).contains(&got) {
                    off.push(format!("leaf: {field} is {got:.0} merged, against the program's uninstrumented run time of {native:.0} (fastest of {} runs)", mergeds.len()));
                }
            }
            if b.is_timed("main") {
                for (reports, which) in [(&fulls, "full tree"), (&mergeds, "merged")] {
                    let share = median(reports, "main", "self_ns") / median(reports, "main", "total_ns");
                    if share >= 0.05 {
                        off.push(format!("main's self time is {share:.3} of its total ({which}, median)"));
                    }
                }
            }
            if off.is_empty() || round == 1 {
                off.into_iter().for_each(|o| b.problem(o));
                break;
            }
        }
        let data = last.expect("a merged run");
        let merged = mergeds.pop().expect("a merged run");
        let n = merged.thread_sum("merged_calls");
        b.check_functions(&merged, &exp, &["leaf"]);
        b.check_tree_has_every_call(&merged, &names);
        b.check_self_within_total(&merged);
        for field in ["untimed_calls", "unmatched_exits"] {
            b.check_thread_counter(&merged, field, 0);
        }
        b.check(n > 100_000, || format!("only {n} calls merged with LOPI_NODES=4096"));
        let text = b.lopi(&["report".as_ref(), data.as_os_str()]).stdout_str();
        b.check(text.contains(&format!("note: {n} calls on call paths beyond the tree's limit")), || {
            format!("text report lacks the merged-paths note:\n{text}")
        });
        b.finish();
    }
}

// ---------------------------------------------------------------------------
// 11. Trace mode
// ---------------------------------------------------------------------------

static_and_live! {
    /// `--trace`: one entry and one exit event per timed call (511 calls: 1022 events); with
    /// LOPI_TRACE_EVENTS=100 the first 100 are kept and 922 dropped, the profile still counts
    /// every call. Chrome export: a B/E pair per recorded call.
    trace_events, trace_events_live, trace_events_in
}

fn trace_events_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("trace.c", cfg, &["--trace"], live);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &all);
        b.check_self_within_total(r);
        b.check_tree_has_every_call(r, &names);
        b.check_edges(
            r,
            &names,
            &[
                (None, "main", 1),
                (Some("main"), "outer", 10),
                (Some("outer"), "inner", 50),
                (Some("main"), "inner", 450),
            ],
        );
        b.check(r.threads().len() == 1, || format!("{} threads", r.threads().len()));
        b.check_thread_counter(r, "calls", 511);
        b.check_thread_counter(r, "trace_events", 1022);
        b.check_thread_counter(r, "trace_dropped", 0);
        b.check_sane(r, p.wall, true);
        let chrome = b.dir.join("trace.json");
        b.lopi(&[
            "export".as_ref(),
            p.data.as_os_str(),
            "--format".as_ref(),
            "chrome".as_ref(),
            "-o".as_ref(),
            chrome.as_os_str(),
        ]);
        let j: Json = serde_json::from_slice(&std::fs::read(&chrome).unwrap_or_default()).unwrap_or(Json::Null);
        let events = j["traceEvents"].as_array().cloned().unwrap_or_default();
        let count = |ph: &str, name: &str| events.iter().filter(|e| e["ph"] == ph && e["name"] == name).count();
        for (name, n) in [("main", 1), ("outer", 10), ("inner", 500)] {
            let (bg, en) = (count("B", name), count("E", name));
            b.check(bg == n && en == n, || {
                format!("chrome trace: {name}: {bg} B and {en} E events, expected {n} each")
            });
        }
        // Timestamps never go backwards within the thread.
        let ts: Vec<f64> = events
            .iter()
            .filter(|e| e["ph"] == "B" || e["ph"] == "E")
            .filter_map(|e| e["ts"].as_f64())
            .collect();
        b.check(ts.windows(2).all(|w| w[0] <= w[1]), || {
            "chrome trace: timestamps go backwards".into()
        });
        let folded = b.dir.join("calls.folded");
        b.lopi(&[
            "export".as_ref(),
            p.data.as_os_str(),
            "--format".as_ref(),
            "folded".as_ref(),
            "--weight".as_ref(),
            "calls".as_ref(),
            "-o".as_ref(),
            folded.as_os_str(),
        ]);
        let text = std::fs::read_to_string(&folded).unwrap_or_default();
        b.check(text == "main 1\nmain;inner 450\nmain;outer 10\nmain;outer;inner 50\n", || {
            format!("folded (calls):\n{text}")
        });

        let (got, _, data) = b.run_rewritten(&[("LOPI_TRACE_EVENTS", "100")]);
        b.same_behaviour(&p.want, &got);
        let r = b.report(&data);
        b.check_functions(&r, &exp, &[]);
        b.check_thread_counter(&r, "calls", 511);
        b.check_thread_counter(&r, "trace_events", 100);
        b.check_thread_counter(&r, "trace_dropped", 922);
        b.lopi(&[
            "export".as_ref(),
            data.as_os_str(),
            "--format".as_ref(),
            "chrome".as_ref(),
            "-o".as_ref(),
            chrome.as_os_str(),
        ]);
        let j: Json = serde_json::from_slice(&std::fs::read(&chrome).unwrap_or_default()).unwrap_or(Json::Null);
        let events = j["traceEvents"].as_array().cloned().unwrap_or_default();
        let marks = events
            .iter()
            .filter(|e| e["ph"] == "i" && e["name"].as_str().is_some_and(|n| n.contains("922")))
            .count();
        b.check(marks == 1, || {
            format!("chrome trace with drops: {marks} drop marks mentioning 922 events")
        });
        let (bg, en) = (
            events.iter().filter(|e| e["ph"] == "B").count(),
            events.iter().filter(|e| e["ph"] == "E").count(),
        );
        b.check(bg == en && bg >= 50, || format!("chrome trace with drops: {bg} B, {en} E"));
        b.finish();
    }
}
