//! The timed view of a data file: per thread, a calling-context tree (calls and time per
//! call path) and, with `--trace`, the entry/exit events. Times are nanoseconds with the
//! probes' own measured cost already removed.
use serde::Serialize;
use std::collections::HashMap;

/// A probed function that appears in some thread's calling-context tree.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TimedFunction {
    pub name: String,
    pub module: String,
    /// Address in the module's file (not the runtime address).
    pub addr: u64,
}

/// One call path: the function called, under its parent path.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ContextNode {
    /// Index of the parent in the same thread's `nodes`; the root's parent is itself (0).
    pub parent: u32,
    /// Index into [`Timing::functions`]; `None` for the root (node 0) and for the node that
    /// collects calls made once the tree was full ([`ThreadProfile::lost_context_calls`]).
    pub function: Option<u32>,
    pub calls: u64,
    /// Inclusive time of all calls on this path.
    pub total_ns: f64,
    /// `total_ns` minus the children's `total_ns`.
    pub self_ns: f64,
    /// Longest single call on this path.
    pub max_ns: f64,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    Enter,
    Exit,
    /// The frame was left without its exit probe (longjmp, exception, a tail call lopi could
    /// not see): the event is when lopi noticed.
    Unwind,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct TraceEvent {
    /// Nanoseconds since the earliest timestamp in the data file.
    pub ns: f64,
    /// Index into the thread's `nodes`: which call path entered or left.
    pub node: u32,
    pub kind: EventKind,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadProfile {
    pub pid: u32,
    pub tid: u32,
    /// `nodes[0]` is the root (no function).
    pub nodes: Vec<ContextNode>,
    /// Entry/exit events in time order; empty unless the module was rewritten with `--trace`.
    pub events: Vec<TraceEvent>,
    /// Events that did not fit in the thread's trace buffer (the profile still counts them).
    pub trace_dropped: u64,
    /// When the first event was dropped, in the same clock as `TraceEvent::ns`.
    pub first_drop_ns: Option<f64>,
    /// Exits that matched no recorded entry (calls deeper than the shadow stack, or entered
    /// before the thread's record existed).
    pub unmatched_exits: u64,
    /// Calls not timed because the shadow stack was full.
    pub too_deep: u64,
    /// Calls that began while the same thread was inside a probe (a signal handler
    /// interrupted it): counted, not timed.
    pub nested_skipped: u64,
    /// Calls made once the calling-context tree was full, collected in one node.
    pub lost_context_calls: u64,
}

/// What removing the probes' own cost took off the times.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Default)]
pub struct ProbeCost {
    /// Probe time inside a timed call's own interval, per call.
    pub inner_ns: f64,
    /// Time a call's probes add to its caller, per call.
    pub pair_ns: f64,
    /// Total taken off all inclusive times of top-level calls.
    pub removed_ns: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Default)]
pub struct Timing {
    pub functions: Vec<TimedFunction>,
    pub threads: Vec<ThreadProfile>,
    pub probe_cost: ProbeCost,
}

/// The longest call on a path, with the probe cost of an average call on that path removed,
/// and never more than the path's total (exactly the total for a single call).
fn longest((calls, _, max_ticks): (u64, u64, u64), below: u64, corrected_total: f64, inner: f64, pair: f64) -> f64 {
    if calls <= 1 {
        return corrected_total;
    }
    let per_call_cost = inner + below as f64 / calls as f64 * pair;
    (max_ticks as f64 - per_call_cost).clamp(0.0, corrected_total)
}

impl Timing {
    /// The timed profile of a data file; `None` when no thread recorded time (the modules
    /// were rewritten without exit probes, or no timed function ran).
    pub fn from_data(data: &crate::DataFile) -> Option<Timing> {
        if data.threads.is_empty() {
            return None;
        }
        // Runtime address -> function, per address space (the pid that registered modules).
        let mut by_address: HashMap<(u32, u64), u32> = HashMap::new();
        let mut functions: Vec<TimedFunction> = Vec::new();
        let mut index_of: HashMap<(String, u64), u32> = HashMap::new();
        for record in &data.records {
            for (i, f) in record.meta.functions.iter().enumerate() {
                let key = (record.meta.module.clone(), f.addr);
                let index = *index_of.entry(key).or_insert_with(|| {
                    functions.push(TimedFunction { name: f.name.clone(), module: record.meta.module.clone(), addr: f.addr });
                    functions.len() as u32 - 1
                });
                // Timed calls name their function by its counter's runtime address.
                let counter = record.meta.counters.wrapping_add(8 * i as u64).wrapping_add(record.load_bias);
                by_address.insert((record.pid, counter), index);
            }
        }
        let origin = data.threads.iter().map(|t| t.header.start_tsc).min().unwrap_or(0);
        let mut probe_cost = ProbeCost::default();
        let mut threads = Vec::new();
        for chunk in &data.threads {
            let h = &chunk.header;
            if h.tsc_hz == 0 {
                continue;
            }
            let ns = |ticks: u64| ticks as f64 * 1e9 / h.tsc_hz as f64;
            let mut raw: Vec<(u64, u64, u64)> = chunk.nodes.iter().map(|n| (n.calls, n.ticks, n.max_ticks)).collect();
            // Calls still running when the process stopped end at its last probe (a forked
            // child's copies of its parent's calls add time, not calls).
            for frame in &chunk.open_frames {
                let dt = h.last_tsc.saturating_sub(frame.start_tsc);
                let n = &mut raw[frame.node as usize];
                n.0 += u64::from(frame.inherited == 0);
                n.1 = n.1.wrapping_add(dt);
                n.2 = n.2.max(dt);
            }
            let mut function = |i: usize, func: u64| -> Option<u32> {
                if i <= lopi_rt_abi::LOST_CONTEXT_NODE as usize {
                    return None;
                }
                Some(*by_address.get(&(h.space_pid, func)).unwrap_or_else(|| {
                    // Not in any record (a module registered by another process image):
                    // keep the address as its name rather than drop the time.
                    let name = format!("[unknown function, counter at {func:#x}]");
                    index_of.entry((String::new(), func)).or_insert_with(|| {
                        functions.push(TimedFunction { name, module: String::new(), addr: func });
                        functions.len() as u32 - 1
                    })
                }))
            };
            let ids: Vec<Option<u32>> = chunk.nodes.iter().enumerate().map(|(i, n)| function(i, n.func)).collect();
            // Probe cost: each call carries `inner` inside its own interval, and each call
            // below it (descendants) adds `pair` to it.
            let inner = h.probe_inner_ticks as f64;
            let pair = h.probe_pair_ticks as f64;
            let mut below = vec![0u64; raw.len()];
            for i in (1..raw.len()).rev() {
                let parent = chunk.nodes[i].parent as usize;
                if parent != i {
                    below[parent] += below[i] + raw[i].0;
                }
            }
            let mut corrected: Vec<f64> = raw
                .iter()
                .zip(&below)
                .map(|(&(calls, ticks, _), &b)| (ticks as f64 - calls as f64 * inner - b as f64 * pair).max(0.0))
                .collect();
            // The estimate can take more than a path's real probe cost (calls left by longjmp
            // had no exit probe): never let a path's time fall below its children's, so
            // self times stay >= 0 and totals nest. Children come after their parents.
            let mut children_total = vec![0.0; raw.len()];
            for i in (1..raw.len()).rev() {
                corrected[i] = corrected[i].max(children_total[i]);
                children_total[chunk.nodes[i].parent as usize] += corrected[i];
            }
            let nodes: Vec<ContextNode> = (0..raw.len())
                .map(|i| ContextNode {
                    parent: if i == 0 { 0 } else { chunk.nodes[i].parent },
                    function: ids[i],
                    calls: raw[i].0,
                    total_ns: ns(corrected[i] as u64),
                    self_ns: ns((corrected[i] - children_total[i]).max(0.0) as u64),
                    max_ns: ns(longest(raw[i], below[i], corrected[i], inner, pair) as u64),
                })
                .collect();
            for i in 1..raw.len() {
                if chunk.nodes[i].parent == 0 {
                    probe_cost.removed_ns += ns(raw[i].1) - ns(corrected[i] as u64);
                }
            }
            probe_cost.inner_ns = ns(h.probe_inner_ticks);
            probe_cost.pair_ns = ns(h.probe_pair_ticks);
            let events = chunk
                .events
                .iter()
                .map(|e| TraceEvent {
                    ns: ns(e.tsc.saturating_sub(origin)),
                    node: e.node,
                    kind: match e.kind {
                        lopi_rt_abi::EVENT_ENTER => EventKind::Enter,
                        lopi_rt_abi::EVENT_EXIT => EventKind::Exit,
                        _ => EventKind::Unwind,
                    },
                })
                .collect();
            threads.push(ThreadProfile {
                pid: h.pid,
                tid: h.tid,
                lost_context_calls: raw.get(lopi_rt_abi::LOST_CONTEXT_NODE as usize).map_or(0, |n| n.0),
                nodes,
                events,
                trace_dropped: h.trace_dropped,
                first_drop_ns: (h.trace_dropped > 0).then(|| ns(h.first_drop_tsc.saturating_sub(origin))),
                unmatched_exits: h.unmatched_exits,
                too_deep: h.too_deep,
                nested_skipped: h.nested_skipped,
            });
        }
        Some(Timing { functions, threads, probe_cost })
    }
}
