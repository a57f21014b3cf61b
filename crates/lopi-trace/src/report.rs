//! Aggregation of records into per-function totals, and of calling-context trees into
//! per-function times and caller -> callee edges.
use crate::{DataFile, Timing};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Calls (and, when timed, time) of one function, summed over processes and threads.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FunctionCount {
    pub name: String,
    pub module: String,
    #[serde(serialize_with = "hex")]
    pub addr: u64,
    /// Exact count from the entry probes (counters, plus context-tree nodes when timed).
    pub calls: u64,
    /// Whether the function was timed (entry and exit probes).
    pub timed: bool,
    /// Inclusive time; recursive calls inside an outer call of the same function are
    /// counted once. `None` when not timed, or when no call was timed (calls before the
    /// runtime started, such as `_start`'s).
    pub total_ns: Option<f64>,
    /// Time in the function itself, not in timed callees.
    pub self_ns: Option<f64>,
    /// Longest single call (`None` with sampled time, which does not time single calls).
    pub max_ns: Option<f64>,
    /// `total_ns` over the timed calls.
    pub avg_ns: Option<f64>,
    /// Of `calls`, those still open when their thread's recording ended (its process ended,
    /// or lopi detached): their time is up to then.
    #[serde(skip_serializing_if = "is_zero")]
    pub open: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// Calls from one function to another (or from outside any timed function: `caller` None).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Edge {
    pub caller: Option<String>,
    pub callee: String,
    pub calls: u64,
    /// Inclusive time of the callee on these calls.
    pub total_ns: f64,
}

/// Per-thread totals.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadSummary {
    pub pid: u32,
    pub tid: u32,
    pub calls: u64,
    /// Inclusive time of the thread's outermost timed calls.
    pub total_ns: f64,
    pub unmatched_exits: u64,
    /// Unmatched exits by function name (`None`: a shared exit site).
    pub unmatched_by_function: Vec<(Option<String>, u64)>,
    pub early_exits: u64,
    pub too_deep: u64,
    pub nested_skipped: u64,
    pub merged_calls: u64,
    pub merged_after_paths: Option<u32>,
    pub untimed_calls: u64,
    pub paused_ns: f64,
    pub clock_backwards: u64,
    pub switched_open: u64,
    pub switches: Vec<SwitchSummary>,
    pub budget: Option<crate::timing::BudgetUse>,
    pub trace_events: usize,
    pub trace_dropped: u64,
    /// When the first event was dropped (ns since the earliest timestamp in the file).
    pub first_drop_ns: Option<f64>,
    pub sampling: Option<crate::timing::Sampling>,
}

/// A function the budget switched to counting.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SwitchSummary {
    pub function: String,
    pub module: String,
    /// Milliseconds after the first thread started timing.
    pub at_ms: f64,
    /// `None`: the record gives no window (a damaged file).
    pub calls_per_s: Option<f64>,
}

/// What the timing part of a report says about itself.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TimingSummary {
    pub probe_cost: crate::ProbeCost,
    pub threads: Vec<ThreadSummary>,
}

/// What `lopi report` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub program: String,
    pub pids: Vec<u32>,
    /// The programs a followed tree's processes ran last, with how many processes ran each,
    /// most first (empty without process records).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<(String, u32)>,
    pub modules: Vec<String>,
    /// Sorted by total time when timed, else by calls, most first; then by module and address.
    pub functions: Vec<FunctionCount>,
    pub total_calls: u64,
    /// A process died while registering a module; its counts are missing.
    pub incomplete: bool,
    /// Present when some function was timed.
    pub timing: Option<TimingSummary>,
    /// Caller -> callee edges of timed functions, most calls first.
    pub edges: Vec<Edge>,
    /// The system calls lopi's runtime made in the program's processes (not the program's).
    pub runtime_syscalls: crate::OwnCalls,
}

#[derive(Default)]
struct Times {
    calls: u64,
    open: u64,
    total: f64,
    self_ns: f64,
    max: f64,
}

impl Profile {
    pub fn from_data(data: &DataFile) -> Profile {
        let mut totals: BTreeMap<(String, u64), FunctionCount> = BTreeMap::new();
        let mut pids = Vec::new();
        let mut modules = Vec::new();
        for record in &data.records {
            if !pids.contains(&record.pid) {
                pids.push(record.pid);
            }
            if !modules.contains(&record.meta.module) {
                modules.push(record.meta.module.clone());
            }
            // A marked entry tells that its function ran, not how often: not a call count.
            for (counter, f, action) in record.meta.functions().filter(|&(_, _, a)| a != crate::MetaAction::Mark) {
                let entry = totals.entry((record.meta.module.clone(), f.addr)).or_insert_with(|| FunctionCount {
                    name: f.name.clone(),
                    module: record.meta.module.clone(),
                    addr: f.addr,
                    calls: 0,
                    timed: action.timed(),
                    total_ns: None,
                    self_ns: None,
                    max_ns: None,
                    avg_ns: None,
                    open: 0,
                });
                entry.calls = entry.calls.saturating_add(record.count(counter));
            }
        }
        let timing = Timing::from_data(data);
        let mut edges = Vec::new();
        let mut summary = None;
        if let Some(timing) = &timing {
            let (times, edge_map, threads) = aggregate(timing);
            // A sampled call's longest time is the samples one call got: not a call's length.
            let sampled = timing.threads.iter().any(|t| t.sampling.is_some());
            for (id, t) in times.iter().enumerate() {
                let f = &timing.functions[id];
                if let Some(entry) = totals.get_mut(&(f.module.clone(), f.addr)) {
                    // A timed call is counted in its context's node; its counter only has
                    // the calls that could not be timed.
                    entry.calls = entry.calls.saturating_add(t.calls);
                    entry.open += t.open;
                    if entry.timed && t.calls > 0 {
                        entry.total_ns = Some(t.total);
                        entry.self_ns = Some(t.self_ns);
                        entry.max_ns = (!sampled).then_some(t.max);
                        entry.avg_ns = Some(if t.calls > 0 { t.total / t.calls as f64 } else { 0.0 });
                    }
                }
            }
            let name = |id: u32| timing.functions[id as usize].name.clone();
            edges = edge_map
                .into_iter()
                .map(|((caller, callee), (calls, total_ns))| Edge { caller: caller.map(name), callee: name(callee), calls, total_ns })
                .collect();
            edges.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| (&a.caller, &a.callee).cmp(&(&b.caller, &b.callee))));
            summary = Some(TimingSummary { probe_cost: timing.probe_cost, threads });
        }
        let mut functions: Vec<FunctionCount> = totals.into_values().collect();
        functions.sort_by(|a, b| {
            let time = |f: &FunctionCount| f.total_ns.unwrap_or(-1.0);
            time(b).total_cmp(&time(a)).then(b.calls.cmp(&a.calls)).then_with(|| (&a.module, a.addr).cmp(&(&b.module, b.addr)))
        });
        Profile {
            program: data.records.first().map(|r| r.exe.clone()).unwrap_or_default(),
            pids,
            programs: programs(data),
            modules,
            total_calls: functions.iter().map(|f| f.calls).fold(0u64, u64::saturating_add),
            functions,
            incomplete: data.truncated,
            timing: summary,
            edges,
            runtime_syscalls: crate::OwnCalls::from_data(data),
        }
    }
}

type EdgeMap = HashMap<(Option<u32>, u32), (u64, f64)>;

/// Per-function times over every thread's tree, edges, and per-thread totals. A function's
/// total counts only its outermost calls on each path, so recursion is not counted twice.
fn aggregate(timing: &Timing) -> (Vec<Times>, EdgeMap, Vec<ThreadSummary>) {
    let mut times: Vec<Times> = (0..timing.functions.len()).map(|_| Times::default()).collect();
    let mut edges: EdgeMap = HashMap::new();
    let mut threads = Vec::new();
    for thread in &timing.threads {
        let nodes = &thread.nodes;
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate().skip(1) {
            children[n.parent as usize].push(i);
        }
        let mut active = vec![0u32; timing.functions.len()];
        // Depth-first, with an explicit stack: (node, leaving?).
        let mut stack = vec![(0usize, false)];
        while let Some((i, leaving)) = stack.pop() {
            let node = &nodes[i];
            let Some(f) = node.function else {
                if !leaving {
                    stack.extend(children[i].iter().map(|&c| (c, false)));
                }
                continue;
            };
            let f = f as usize;
            if leaving {
                active[f] -= 1;
                continue;
            }
            let t = &mut times[f];
            t.calls += node.calls;
            t.open += node.open;
            t.self_ns += node.self_ns;
            t.max = t.max.max(node.max_ns);
            if active[f] == 0 {
                t.total += node.total_ns;
            }
            let caller = nodes[node.parent as usize].function;
            let e = edges.entry((caller, f as u32)).or_default();
            e.0 += node.calls;
            e.1 += node.total_ns;
            active[f] += 1;
            stack.push((i, true));
            stack.extend(children[i].iter().map(|&c| (c, false)));
        }
        // Merged nodes hang under node 1 (no function), itself under the root.
        let top = children[0].iter().flat_map(|&c| if nodes[c].function.is_none() { children[c].clone() } else { vec![c] });
        let name = |id: u32| timing.functions[id as usize].name.clone();
        threads.push(ThreadSummary {
            pid: thread.pid,
            tid: thread.tid,
            calls: nodes.iter().map(|n| n.calls).sum(),
            total_ns: top.map(|c| nodes[c].total_ns).sum(),
            unmatched_exits: thread.unmatched_exits,
            unmatched_by_function: thread.unmatched_by_function.iter().map(|&(f, n)| (f.map(name), n)).collect(),
            early_exits: thread.early_exits,
            too_deep: thread.too_deep,
            nested_skipped: thread.nested_skipped,
            merged_calls: thread.merged_calls,
            merged_after_paths: thread.merged_after_paths,
            untimed_calls: thread.untimed_calls,
            paused_ns: thread.paused_ns,
            clock_backwards: thread.clock_backwards,
            switched_open: thread.switched_open,
            switches: thread
                .switches
                .iter()
                .map(|s| SwitchSummary { function: name(s.function), module: timing.functions[s.function as usize].module.clone(), at_ms: s.at_ns / 1e6, calls_per_s: s.calls_per_s })
                .collect(),
            budget: thread.budget.clone(),
            trace_events: thread.events.len(),
            trace_dropped: thread.trace_dropped,
            first_drop_ns: thread.first_drop_ns,
            sampling: thread.sampling.clone(),
        });
    }
    (times, edges, threads)
}

/// How many processes of a followed tree ran each program (its last), most first.
fn programs(data: &DataFile) -> Vec<(String, u32)> {
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for p in &data.processes {
        *counts.entry(p.program()).or_default() += 1;
    }
    let mut programs: Vec<(String, u32)> = counts.into_iter().map(|(name, n)| (name.to_string(), n)).collect();
    programs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    programs
}
