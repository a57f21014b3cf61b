//! End-to-end tests of the perturbation budget (`--budget 5%`) on one program: short frequent
//! functions switched to counting, calls open across a switch, threads and fork. The budget
//! over a program and its library is `budget_modules_e2e.rs`; the harness is `timing_harness/`.

mod common;
#[macro_use]
mod timing_harness;

use std::collections::BTreeMap;
use timing_harness::*;

static_and_live! {
    /// `--budget 5%`: tiny() (20 million calls of a few ns) is switched to counting early, slow()
    /// (20 calls of 2 ms) and work() stay timed; every call is still counted, slow()'s time is
    /// right, and the report says what was switched. LOPI_BUDGET=0 turns the budget off.
    budget_switches_short_frequent_functions, budget_switches_short_frequent_functions_live, budget_in
}

fn budget_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("budget.c", cfg, &["--budget", "5%"], live);
        let names = b.names();
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &["slow", "work"]);
        b.check_self_within_total(r);
        let switched = r.switched();
        b.check(switched.contains(&"tiny"), || format!("tiny not switched; switched: {switched:?}"));
        for keep in ["slow", "work", "main"] {
            b.check(!switched.contains(&keep), || format!("{keep} was switched: {switched:?}"));
        }
        b.check(r.tree_calls("slow") == 20, || format!("slow: {} timed calls, want 20", r.tree_calls("slow")));
        let (slow, own) = (r.num("slow", "total_ns"), measured(&p.got)["slow_sum"] as f64);
        // lopi takes its probes' work out; the program's own clock keeps it.
        b.check(close(slow, own, 0.1, 0.0), || format!("slow: {slow} ns, the program measured {own} ns"));
        b.check(r.tree_calls("tiny") < 20_000_000 / 10, || format!("tiny: {} calls still timed", r.tree_calls("tiny")));
        let text = b.lopi(&["report".as_ref(), p.data.as_os_str()]).stdout_str();
        b.check(text.contains("note: the budget switched") && text.contains("tiny at "), || format!("text report:\n{text}"));
        let listed = b.lopi(&["report".as_ref(), p.data.as_os_str(), "--budget".as_ref()]).stdout_str();
        b.check(listed.contains("budget 5%") && listed.lines().any(|l| l.ends_with(" tiny")), || format!("lopi report --budget:\n{listed}"));
        let budgets: Vec<u64> = r.threads().iter().filter_map(|t| t["budget"]["ppm"].as_u64()).collect();
        b.check(budgets == [50_000], || format!("threads' budgets: {budgets:?}"));

        let (got, _, data) = b.run_rewritten(&[("LOPI_BUDGET", "0")]);
        b.same_behaviour(&p.want, &got);
        let off = b.report(&data);
        b.check_functions(&off, &exp, &["slow", "work", "tiny"]);
        b.check_tree_has_every_call(&off, &names);
        b.finish();
    }
}

static_and_live! {
    /// `--budget 5%` switching step(), which recurses ten deep, while calls of it are open: every
    /// call is still counted; the open ones, whose exits the switch took out, are counted without
    /// a time (so none runs on to main's exit), and the report says how many.
    budget_switch_with_calls_open, budget_switch_with_calls_open_live, budget_open_in
}

fn budget_open_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("budget_open.c", cfg, &["--budget", "5%"], live);
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &["tail"]);
        b.check_self_within_total(r);
        let switched = r.switched();
        b.check(switched.contains(&"step") && !switched.contains(&"tail"), || format!("switched: {switched:?}"));
        let open = r.thread_sum("switched_open");
        b.check(open <= 10, || format!("{open} calls of step open at the switch; it recurses 10 deep"));
        let (step_max, run) = (r.num("step", "max_ns"), r.num("main", "total_ns"));
        b.check(step_max < run / 4.0, || format!("step's longest call {step_max} ns of main's {run} ns: an open call ran on"));
        b.check_thread_counter(r, "unmatched_exits", 0);
        let text = b.lopi(&["report".as_ref(), p.data.as_os_str()]).stdout_str();
        let noted = text.contains("switched to counting while the calls ran");
        b.check(noted == (open > 0), || format!("{open} open calls, text report:\n{text}"));
        b.finish();
    }
}

static_and_live! {
    /// `--budget 5%` in four threads and a forked child, all calling tiny() 21 million times:
    /// threads' checks switch it (changing its code under the others), and every call is counted
    /// exactly in both processes; slow() and work() stay timed.
    budget_under_threads_and_fork, budget_under_threads_and_fork_live, budget_threads_in
}

fn budget_threads_in(live: bool) {
    for cfg in configs() {
        let mut b = build_mode("budget_threads.c", cfg, &["--budget", "5%"], live);
        let exp = b.fx.expect.clone();
        let p = b.run_pair(&[]);
        let r = &p.report;
        b.check_functions(r, &exp, &["slow", "work", "worker"]);
        b.check_self_within_total(r);
        let switched = r.switched();
        b.check(switched.contains(&"tiny"), || format!("tiny not switched; switched: {switched:?}"));
        // One switch per process: the threads' checks race for it.
        let mut per_process: BTreeMap<u64, usize> = BTreeMap::new();
        for t in r.threads() {
            let n = t["switches"].as_array().into_iter().flatten().filter(|s| s["function"] == "tiny").count();
            *per_process.entry(t["pid"].as_u64().unwrap_or(0)).or_default() += n;
        }
        b.check(per_process.values().all(|&n| n <= 1), || format!("tiny switched per process: {per_process:?}"));
        for keep in ["slow", "work", "worker", "main"] {
            b.check(!switched.contains(&keep), || format!("{keep} was switched: {switched:?}"));
        }
        b.check(r.tree_calls("slow") == 20, || format!("slow: {} timed calls, want 20", r.tree_calls("slow")));
        b.check_thread_counter(r, "unmatched_exits", 0);
        b.finish();
    }
}
