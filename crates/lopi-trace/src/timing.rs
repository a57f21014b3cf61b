//! The timed view of a data file: per thread, a calling-context tree (calls and time per
//! call path) and, with `--trace`, the entry/exit events. Times are nanoseconds with the
//! probes' own measured cost already removed.
use lopi_rt_abi as abi;
use serde::Serialize;
use std::collections::HashMap;

/// A probed function that appears in some thread's calling-context tree.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TimedFunction {
    pub name: String,
    pub module: String,
    /// Address in the module's file (not the runtime address).
    pub addr: u64,
    /// A system call, timed as a leaf of the path it was made from (`[syscall] read`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syscall: Option<u64>,
    /// A lock (or thread) function called on one object (`--probe locks`), named
    /// `pthread_mutex_lock(0xADDR)` until a reader that knows the process's symbols renames it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockCall>,
}

/// What a lock function's frame works on.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct LockCall {
    pub pid: u32,
    /// The object's runtime address (a `pthread_create`: its start routine's).
    pub addr: u64,
    #[serde(skip)]
    pub op: abi::lock_name::Op,
}

/// The C function an operation is a call of.
pub fn lock_function_name(op: abi::lock_name::Op) -> String {
    match op.kind() {
        abi::lock_name::Kind::Semaphore => op.name().to_string(),
        _ => format!("pthread_{}", op.name()),
    }
}

/// Nodes of a lock call's bookkeeping, not calls: its site (the call's return address, whose
/// children are shown under the site's caller), the holds, the threads a create started, a
/// condition wait's relock.
fn lock_bookkeeping(func: u64) -> bool {
    use abi::lock_name::{self, Op, Outcome};
    lock_name::decode_site(func).is_some()
        || lock_name::decode(func).is_some_and(|l| matches!(l.outcome, Outcome::Hold | Outcome::Started) || l.op == Op::CondRelock)
}

/// A probed `syscall` instruction that some timed call went through.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SyscallSiteInfo {
    pub module: String,
    /// Address in the module's file.
    pub addr: u64,
    /// The function it is in ("" when none is known).
    pub function: String,
}

/// What a system-call node adds to its function (`[syscall] NAME`).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct SyscallCall {
    /// Index into [`Timing::syscall_sites`] (`None`: a site of a module no record describes).
    pub site: Option<u32>,
    /// The calls on this path returned an error (`-errno`).
    pub error: bool,
}

/// One call path: the function called, under its parent path.
///
/// Node 1 is the merged-paths node: once a thread's tree reached its limit, calls on paths
/// that did not fit were timed in one node per function under it (a *merged* node). Their
/// calls, self and inclusive times are exact per function; their callers are not known.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ContextNode {
    /// Index of the parent in the same thread's `nodes`; the root's parent is itself (0).
    pub parent: u32,
    /// Index into [`Timing::functions`]; `None` for the root (node 0) and the merged-paths
    /// node (node 1).
    pub function: Option<u32>,
    pub calls: u64,
    /// Inclusive time of all calls on this path; for a merged node, of its calls made while
    /// no other call of its function was open (recursion counted once).
    pub total_ns: f64,
    /// Time in the function itself: `total_ns` minus the children's, and minus calls made from
    /// here whose paths were merged.
    pub self_ns: f64,
    /// Longest single call on this path.
    pub max_ns: f64,
    /// A merged node (its parent is the merged-paths node).
    pub merged: bool,
    /// For a system call: where it was made, and whether these calls failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syscall: Option<SyscallCall>,
    /// Of `calls`, those still open when the thread's recording ended (its process ended, or
    /// lopi detached), with their time up to then.
    #[serde(skip_serializing_if = "is_zero")]
    pub open: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ThreadProfile {
    pub pid: u32,
    pub tid: u32,
    /// The thread's name (`comm`) as it last read it.
    pub name: String,
    /// `nodes[0]` is the root (no function).
    pub nodes: Vec<ContextNode>,
    /// Entry/exit events in time order; empty unless the module was rewritten with `--trace`.
    pub events: Vec<TraceEvent>,
    /// Events that did not fit in the thread's trace buffer (the profile still counts them).
    pub trace_dropped: u64,
    /// When the first event was dropped, in the same clock as `TraceEvent::ns`.
    pub first_drop_ns: Option<f64>,
    /// Exits whose call had no frame although calls begun before it had (their entry was
    /// not timed), by function (`None`: an exit site several functions share).
    pub unmatched_exits: u64,
    pub unmatched_by_function: Vec<(Option<u32>, u64)>,
    /// Exits of calls begun before the thread's timing started (before an attach).
    pub early_exits: u64,
    /// Calls not timed because the shadow stack was at its limit (`LOPI_DEPTH`).
    pub too_deep: u64,
    /// Calls that began while the same thread was inside a probe (a signal handler
    /// interrupted it): counted, not timed.
    pub nested_skipped: u64,
    /// Calls timed in merged nodes: the tree was at its limit (`LOPI_NODES`).
    pub merged_calls: u64,
    /// Call paths in the tree when the first call was merged (`None`: none was).
    pub merged_after_paths: Option<u32>,
    /// Calls counted but not timed: not even a merged node fitted.
    pub untimed_calls: u64,
    /// Time the probes spent growing the tree and stack or checking the budget, taken out of
    /// the calls open meanwhile.
    pub paused_ns: f64,
    /// Exits whose clock read came before their entry's (a TSC step between CPUs), taken as 0.
    pub clock_backwards: u64,
    /// Calls of functions the budget switched to counting while the calls ran: counted, not
    /// timed (their ends were no longer probed).
    pub switched_open: u64,
    /// Functions the budget switched from timing to counting, in order.
    pub switches: Vec<Switched>,
    /// What the thread's budget checks saw (`None`: it made none).
    pub budget: Option<BudgetUse>,
    /// With sampled time (`--time sampled`), how the thread's time was sampled; `None` with
    /// exact time.
    pub sampling: Option<Sampling>,
}

/// A thread's time sampling: its times are `samples` samples of `period_ns` of its CPU time,
/// each given to the calls open when it was taken.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sampling {
    pub period_ns: f64,
    pub samples: u64,
    /// The errno of the thread's timer when it could not be made (the thread has no samples).
    pub timer_error: Option<i32>,
}

impl Sampling {
    fn of(h: &abi::ThreadHeader) -> Option<Sampling> {
        (h.sample_ticks != 0).then(|| Sampling {
            period_ns: h.sample_ticks as f64 * 1e9 / h.tsc_hz as f64,
            samples: h.samples,
            timer_error: (h.sample_error != 0).then_some(h.sample_error),
        })
    }

    /// About 95% of the times sampling gives a call path with `ns` of time lie within this of
    /// it: samples fall as a Poisson process, `n` of them within about 2 sqrt(n).
    pub fn error_ns(&self, ns: f64) -> f64 {
        2.0 * (ns / self.period_ns).max(1.0).sqrt() * self.period_ns
    }
}

/// A thread's perturbation budget and what timing cost it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BudgetUse {
    /// The budget, in parts per million of the thread's CPU time.
    pub ppm: u64,
    /// What its timed calls cost (each one call's probes, as calibrated), its run time (wall
    /// clock), and its CPU time until the budget's latest check, which the budget is a share of.
    pub timing_ns: f64,
    pub run_ns: f64,
    pub cpu_ns: f64,
    pub checks: u64,
    /// Scans of its calling-context tree, and the time they took.
    pub scans: u64,
    pub scan_ns: f64,
    /// The modules whose probes' checks switch their functions (each module switches its
    /// own), and of those the ones the data file had no room for a table for (their
    /// functions stayed timed).
    pub modules: Vec<String>,
    pub modules_without_table: Vec<String>,
    /// Checks made in modules beyond the ones a thread keeps a state for
    /// (`BUDGET_MODULE_SLOTS`): those modules' functions stayed timed.
    pub unkept_checks: u32,
}

/// A function the perturbation budget switched to counting.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Switched {
    pub function: u32,
    /// When, in the same clock as `TraceEvent::ns`.
    pub at_ns: f64,
    /// Its timed calls in the thread in the scan window before, per second (`None`: the
    /// table gives no window, a damaged file).
    pub calls_per_s: Option<f64>,
}

/// What removing the probes' own cost took off the times.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Default)]
pub struct ProbeCost {
    /// Probe time inside a timed call's own interval, per call.
    pub inner_ns: f64,
    /// Time a call's probes add to its caller, per call.
    pub pair_ns: f64,
    /// The same for a system call's probes.
    pub syscall_inner_ns: f64,
    pub syscall_pair_ns: f64,
    /// Total taken off all inclusive times of top-level calls.
    pub removed_ns: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Default)]
pub struct Timing {
    pub functions: Vec<TimedFunction>,
    pub threads: Vec<ThreadProfile>,
    pub probe_cost: ProbeCost,
    pub syscall_sites: Vec<SyscallSiteInfo>,
}

/// The longest call on a path, with the probe cost of an average call on that path removed,
/// and never more than the path's total (exactly the total for a single call).
fn longest(calls: u64, max_ticks: u64, below: f64, corrected_total: f64, inner: f64) -> f64 {
    if calls <= 1 {
        return corrected_total;
    }
    let per_call_cost = inner + below / calls as f64;
    (max_ticks as f64 - per_call_cost).clamp(0.0, corrected_total)
}

/// A node's raw figures (the calls still open at the end closed by the reader: `open.rs`).
#[derive(Clone, Copy, Default)]
struct Raw {
    calls: u64,
    ticks: u64,
    max: u64,
    merged_ticks: u64,
    /// Merged nodes: ticks of their outermost calls.
    outer: u64,
    /// Path nodes: calls that ended without their exit probe (left by `longjmp` or an
    /// exception, or still open at the end).
    unwound: u64,
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
            for (c, f, _) in record.meta.functions() {
                let key = (record.meta.module.clone(), f.addr);
                let index = *index_of.entry(key).or_insert_with(|| {
                    functions.push(TimedFunction { name: f.name.clone(), module: record.meta.module.clone(), addr: f.addr, syscall: None, lock: None });
                    functions.len() as u32 - 1
                });
                // Timed calls name their function by its counter's runtime address.
                by_address.insert((record.pid, record.meta.counter_addr(c, record.load_bias)), index);
            }
        }
        // System calls name their site by its counter's runtime address (low 48 bits).
        let mut site_by_counter: HashMap<(u32, u64), u32> = HashMap::new();
        let mut syscall_sites: Vec<SyscallSiteInfo> = Vec::new();
        let mut site_index: HashMap<(String, u64), u32> = HashMap::new();
        for record in &data.records {
            for (c, s) in record.meta.syscalls() {
                let index = *site_index.entry((record.meta.module.clone(), s.addr)).or_insert_with(|| {
                    syscall_sites.push(SyscallSiteInfo { module: record.meta.module.clone(), addr: s.addr, function: s.function.clone() });
                    syscall_sites.len() as u32 - 1
                });
                site_by_counter.insert((record.pid, record.meta.counter_addr(c, record.load_bias) & ((1 << 48) - 1)), index);
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
            let ns = |ticks: f64| ticks * 1e9 / h.tsc_hz as f64;
            let mut function = |func: u64| -> u32 {
                if let Some(call) = abi::syscall_name::decode(func) {
                    return *index_of.entry(("[syscall]".to_string(), call.nr)).or_insert_with(|| {
                        let name = format!("[syscall] {}", crate::syscall_name(call.nr));
                        functions.push(TimedFunction { name, module: String::new(), addr: call.nr, syscall: Some(call.nr), lock: None });
                        functions.len() as u32 - 1
                    });
                }
                if lock_bookkeeping(func) {
                    return *index_of.entry(("[lock]".to_string(), 0)).or_insert_with(|| {
                        functions.push(TimedFunction { name: "[lock call site]".into(), module: String::new(), addr: 0, syscall: None, lock: None });
                        functions.len() as u32 - 1
                    });
                }
                if let Some(l) = abi::lock_name::decode(func) {
                    let key = (format!("[lock] {} {}", h.space_pid, l.op as u8), l.addr);
                    return *index_of.entry(key).or_insert_with(|| {
                        let name = format!("{}({:#x})", lock_function_name(l.op), l.addr);
                        let lock = LockCall { pid: h.space_pid, addr: l.addr, op: l.op };
                        functions.push(TimedFunction { name, module: String::new(), addr: l.addr, syscall: None, lock: Some(lock) });
                        functions.len() as u32 - 1
                    });
                }
                *by_address.get(&(h.space_pid, func)).unwrap_or_else(|| {
                    // Not in any record (a module registered by another process image):
                    // keep the address as its name rather than drop the time.
                    let name = format!("[unknown function, counter at {func:#x}]");
                    index_of.entry((String::new(), func)).or_insert_with(|| {
                        functions.push(TimedFunction { name, module: String::new(), addr: func, syscall: None, lock: None });
                        functions.len() as u32 - 1
                    })
                })
            };
            let nodes = &chunk.nodes;
            let is_merged = |i: usize| i > MERGED && nodes[i].parent as usize == MERGED;
            let mut raw: Vec<Raw> = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| Raw {
                    calls: n.calls,
                    ticks: n.ticks,
                    max: n.max_ticks,
                    merged_ticks: n.merged_ticks,
                    outer: if is_merged(i) { n.aux } else { 0 },
                    unwound: if is_merged(i) { 0 } else { n.aux },
                })
                .collect();
            let bookkeeping: Vec<bool> = nodes.iter().enumerate().map(|(i, n)| i > MERGED && lock_bookkeeping(n.func)).collect();
            for (r, _) in raw.iter_mut().zip(&bookkeeping).filter(|(_, &b)| b) {
                *r = Raw::default();
            }
            // A lock call shows under the function that made it, not under its site's node.
            let shown_parent = |i: usize| {
                let p = nodes[i].parent;
                if bookkeeping.get(p as usize).copied().unwrap_or(false) && abi::lock_name::decode_site(nodes[p as usize].func).is_some() {
                    nodes[p as usize].parent
                } else {
                    p
                }
            };
            let open = chunk.open_by_node();
            let ids: Vec<Option<u32>> = nodes.iter().enumerate().map(|(i, n)| (i > MERGED).then(|| function(n.func))).collect();
            // Probe cost: each call carries `inner` inside its own interval, and each call
            // below it in the tree (descendants) adds `pair` to it; a call whose exit probe
            // never ran (left by longjmp or an exception, or still open) about half of each.
            // Calls below a merged call are not known one by one: their probes stay in the
            // merged paths' inclusive time.
            let inner = h.probe_inner_ticks as f64;
            let pair = h.probe_pair_ticks as f64;
            // A system call's probes cost what the runtime measured for them.
            let costs = |i: usize| {
                if i > MERGED && abi::syscall_name::decode(nodes[i].func).is_some() {
                    (h.syscall_inner_ticks as f64, h.syscall_pair_ticks as f64)
                } else {
                    (inner, pair)
                }
            };
            // Ticks the probes of the calls below each path added to it.
            let mut below = vec![0.0f64; raw.len()];
            for i in (1..raw.len()).rev() {
                let parent = nodes[i].parent as usize;
                if parent != i && !is_merged(i) {
                    below[parent] += below[i] + (raw[i].calls as f64 - raw[i].unwound as f64 / 2.0) * costs(i).1;
                }
            }
            let mut corrected: Vec<f64> = raw
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let ticks = if is_merged(i) { r.outer } else { r.ticks };
                    let own = r.calls as f64 - r.unwound as f64 / 2.0;
                    (ticks as f64 - own * costs(i).0 - below[i]).max(0.0)
                })
                .collect();
            // Self time: the inclusive time less the children's and less the calls made from
            // here whose paths were merged. Merged calls are not in the tree: the runtime took
            // their probes' cost out of their ancestors' clocks, and their inner cost out of
            // `merged_ticks`, so that a merged child weighs on its caller as a tree child does.
            // Merged nodes' children are other merged nodes, known only through that sum.
            let merged_self = |r: &Raw| (r.ticks as f64 - r.calls as f64 * inner - r.merged_ticks as f64).max(0.0);
            // The estimate can take more than a path's real probe cost (calls left by longjmp
            // had no exit probe): never let a path's time fall below its children's, so
            // self times stay >= 0 and totals nest. Children come after their parents.
            let mut children_total = vec![0.0; raw.len()];
            for i in (1..raw.len()).rev() {
                if is_merged(i) {
                    // Its inclusive time counts only calls no other call of its function
                    // enclosed, so it may be less than its self time.
                    continue;
                }
                corrected[i] = corrected[i].max(children_total[i] + raw[i].merged_ticks as f64);
                children_total[nodes[i].parent as usize] += corrected[i];
            }
            let out: Vec<ContextNode> = (0..raw.len())
                .map(|i| {
                    let r = &raw[i];
                    let self_ticks = if is_merged(i) {
                        merged_self(r)
                    } else {
                        (corrected[i] - children_total[i] - r.merged_ticks as f64).max(0.0)
                    };
                    ContextNode {
                        parent: if i == 0 { 0 } else { shown_parent(i) },
                        function: ids[i],
                        calls: r.calls,
                        total_ns: ns(corrected[i]),
                        self_ns: ns(self_ticks),
                        max_ns: ns(longest(r.calls, r.max, below[i], corrected[i], costs(i).0)),
                        merged: is_merged(i),
                        syscall: (i > MERGED).then(|| abi::syscall_name::decode(nodes[i].func)).flatten().map(|call| SyscallCall {
                            site: site_by_counter.get(&(h.space_pid, call.site)).copied(),
                            error: call.error,
                        }),
                        open: if bookkeeping[i] { 0 } else { open.get(&(i as u32)).copied().unwrap_or(0) },
                    }
                })
                .collect();
            for i in 1..raw.len() {
                if shown_parent(i) == 0 && i != MERGED && !bookkeeping[i] {
                    probe_cost.removed_ns += ns(raw[i].ticks as f64) - ns(corrected[i]);
                }
            }
            probe_cost.inner_ns = ns(inner);
            probe_cost.pair_ns = ns(pair);
            probe_cost.syscall_inner_ns = ns(h.syscall_inner_ticks as f64);
            probe_cost.syscall_pair_ns = ns(h.syscall_pair_ticks as f64);
            let events = chunk
                .events
                .iter()
                .map(|e| TraceEvent {
                    ns: ns(e.tsc.saturating_sub(origin) as f64),
                    node: e.node,
                    kind: match e.kind {
                        abi::EVENT_ENTER => EventKind::Enter,
                        abi::EVENT_EXIT => EventKind::Exit,
                        _ => EventKind::Unwind,
                    },
                })
                .collect();
            let unmatched_by_function = chunk.unmatched.iter().map(|u| ((u.func != 0).then(|| function(u.func)), u.count)).collect();
            let switches = chunk
                .switches
                .iter()
                .map(|s| Switched {
                    function: function(s.func),
                    at_ns: ns(s.switched_tsc.saturating_sub(origin) as f64),
                    calls_per_s: (s.window_ticks > 0).then(|| s.window_calls as f64 * h.tsc_hz as f64 / s.window_ticks as f64),
                })
                .collect();
            threads.push(ThreadProfile {
                pid: h.pid,
                tid: h.tid,
                name: thread_name(h),
                nodes: out,
                events,
                trace_dropped: h.trace_dropped,
                first_drop_ns: (h.trace_dropped > 0).then(|| ns(h.first_drop_tsc.saturating_sub(origin) as f64)),
                unmatched_exits: h.unmatched_exits,
                unmatched_by_function,
                early_exits: h.early_exits,
                too_deep: h.too_deep,
                nested_skipped: h.nested_skipped,
                merged_calls: raw.iter().enumerate().filter(|&(i, _)| is_merged(i)).map(|(_, r)| r.calls).sum(),
                merged_after_paths: (h.merged_from != 0).then_some(h.merged_from),
                untimed_calls: h.untimed_calls,
                paused_ns: ns(h.paused_ticks as f64),
                clock_backwards: h.clock_backwards,
                switched_open: u64::from(h.switched_open),
                sampling: Sampling::of(h),
                switches,
                budget: (chunk.budget.checks > 0).then(|| {
                    // A module's state names it by its counter array's address.
                    let module_of = |m: &abi::BudgetModule| {
                        data.records
                            .iter()
                            .find(|r| r.pid == h.space_pid && r.meta.counters.wrapping_add(r.load_bias) == m.counters)
                            .map_or_else(|| format!("[unknown module, counters at {:#x}]", m.counters), |r| r.meta.module.clone())
                    };
                    let modules = chunk.budget_modules.iter().map(module_of).collect();
                    let modules_without_table = chunk.budget_modules.iter().filter(|m| m.table_file == 0).map(module_of).collect();
                    let timed: u64 = chunk.nodes.iter().filter(|n| n.func != 0 && abi::syscall_name::decode(n.func).is_none()).map(|n| n.calls).sum();
                    BudgetUse {
                        ppm: chunk.budget.budget_ppm,
                        timing_ns: ns(timed as f64 * h.probe_pair_ticks as f64),
                        run_ns: ns(h.last_tsc.wrapping_add(h.paused_ticks).saturating_sub(h.start_tsc) as f64),
                        // The CPU clock the budget's checks read, from the chunk's start to the latest check.
                        cpu_ns: (ns(chunk.budget.last_check_cpu as f64) - chunk.end.start_cpu_ns as f64).max(0.0),
                        checks: chunk.budget.checks,
                        scans: chunk.budget.scans,
                        scan_ns: ns(chunk.budget.scan_ticks as f64),
                        modules,
                        modules_without_table,
                        unkept_checks: chunk.budget.unkept_checks,
                    }
                }),
            });
        }
        Some(Timing { functions, threads, probe_cost, syscall_sites })
    }
}

/// Index of the merged-paths node.
const MERGED: usize = abi::MERGED_NODE as usize;

/// A thread's name (`comm`) as its chunk last read it.
pub(crate) fn thread_name(h: &lopi_rt_abi::ThreadHeader) -> String {
    let len = h.comm.iter().position(|&b| b == 0).unwrap_or(h.comm.len());
    String::from_utf8_lossy(&h.comm[..len]).into_owned()
}
