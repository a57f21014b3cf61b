//! The timed view of a data file: per thread, a calling-context tree (calls and time per
//! call path) and, with `--trace`, the entry/exit events. Times are nanoseconds with the
//! probes' own measured cost already removed.
use serde::Serialize;

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
    /// Probes that fired while the same thread was inside a probe (a signal handler): counted,
    /// not timed.
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

impl Timing {
    /// The timed profile of a data file; `None` when no module recorded time (rewritten
    /// without exit probes).
    pub fn from_data(data: &crate::DataFile) -> Option<Timing> {
        let _ = data;
        None
    }
}
