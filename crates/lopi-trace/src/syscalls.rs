//! The system-call view of a data file (`lopi report --syscalls`), in the spirit of
//! `strace -c`: per system call, per thread, and per call site with its calling context.
//! Timed calls come from the threads' calling-context trees (`[syscall] NAME` leaves); calls
//! that got no timed frame (made before the runtime was ready, inside a probe, or by a vfork
//! child) come from the sites' counters and are named by the number the code sets there.
use crate::{DataFile, Timing};
use serde::Serialize;
use std::collections::HashMap;

/// Calls of one system call.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SyscallStats {
    pub name: String,
    pub nr: u64,
    pub calls: u64,
    /// Calls that returned `-errno`.
    pub errors: u64,
    /// Time from the instruction before the `syscall` to the one after, probe cost removed.
    pub total_ns: f64,
    pub max_ns: f64,
    /// Calls counted without a time (included in `calls`).
    #[serde(skip_serializing_if = "is_zero")]
    pub untimed: u64,
    /// Calls still in progress when their thread's recording ended (included in `calls`, with
    /// their time up to then).
    #[serde(skip_serializing_if = "is_zero")]
    pub open: u64,
    /// Calls a followed program made before its probes went live (the dynamic loader's,
    /// constructors'), counted by lopi through ptrace (included in `calls` and `untimed`).
    #[serde(skip_serializing_if = "is_zero")]
    pub startup: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One thread's system calls.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadSyscalls {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub syscalls: Vec<SyscallStats>,
}

/// One `syscall` instruction on one call path.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SiteStats {
    /// The function the instruction is in ("" when none is known).
    pub function: String,
    pub module: String,
    /// Address of the instruction in the module's file.
    pub addr: String,
    pub name: String,
    pub calls: u64,
    pub errors: u64,
    pub total_ns: f64,
    /// Calls still in progress at the end (as in [`SyscallStats::open`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub open: u64,
    /// The timed functions it was called from, outermost first (empty without entry,exit).
    pub context: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Syscalls {
    pub syscalls: Vec<SyscallStats>,
    pub threads: Vec<ThreadSyscalls>,
    /// Busiest first.
    pub sites: Vec<SiteStats>,
    /// The system calls lopi's runtime made in the program's processes: not the program's,
    /// and in none of the lists above.
    pub runtime_syscalls: crate::OwnCalls,
}

/// Sums by system call number, sorted by time then calls.
#[derive(Default)]
struct ByNumber(HashMap<u64, SyscallStats>);

impl ByNumber {
    #[allow(clippy::too_many_arguments)]
    fn add(&mut self, nr: u64, calls: u64, errors: u64, total_ns: f64, max_ns: f64, untimed: u64, open: u64) {
        let s = self.0.entry(nr).or_insert_with(|| SyscallStats { name: crate::syscall_name(nr), nr, ..SyscallStats::default() });
        s.calls += calls;
        s.open += open;
        s.errors += errors;
        s.total_ns += total_ns;
        s.max_ns = s.max_ns.max(max_ns);
        s.untimed += untimed;
    }

    fn add_startup(&mut self, nr: u64, calls: u64) {
        self.add(nr, calls, 0, 0.0, 0.0, calls, 0);
        if let Some(s) = self.0.get_mut(&nr) {
            s.startup += calls;
        }
    }

    fn sorted(self) -> Vec<SyscallStats> {
        let mut v: Vec<SyscallStats> = self.0.into_values().collect();
        v.sort_by(|a, b| b.total_ns.total_cmp(&a.total_ns).then(b.calls.cmp(&a.calls)).then(a.nr.cmp(&b.nr)));
        v
    }
}

impl Syscalls {
    /// `None` when no module had system-call probes.
    pub fn from_data(data: &DataFile) -> Option<Syscalls> {
        if data.records.iter().all(|r| r.meta.syscalls().next().is_none()) {
            return None;
        }
        let mut total = ByNumber::default();
        let mut threads = Vec::new();
        let mut sites: HashMap<(Option<u32>, u64, bool, Vec<String>), SiteStats> = HashMap::new();
        if let Some(timing) = Timing::from_data(data) {
            for thread in &timing.threads {
                let mut mine = ByNumber::default();
                for node in &thread.nodes {
                    let (Some(call), Some(f)) = (node.syscall, node.function) else { continue };
                    if node.calls == 0 {
                        // The path's calls all failed: they are on its error sibling.
                        continue;
                    }
                    let Some(nr) = timing.functions[f as usize].syscall else { continue };
                    let errors = if call.error { node.calls } else { 0 };
                    mine.add(nr, node.calls, errors, node.total_ns, node.max_ns, 0, node.open);
                    total.add(nr, node.calls, errors, node.total_ns, node.max_ns, 0, node.open);
                    let context = context_of(&timing, &thread.nodes, node.parent);
                    let site = sites.entry((call.site, nr, call.error, context.clone())).or_insert_with(|| {
                        let info = call.site.map(|s| &timing.syscall_sites[s as usize]);
                        SiteStats {
                            function: info.map(|i| i.function.clone()).unwrap_or_default(),
                            module: info.map(|i| i.module.clone()).unwrap_or_default(),
                            addr: info.map(|i| format!("{:#x}", i.addr)).unwrap_or_default(),
                            name: crate::syscall_name(nr),
                            calls: 0,
                            errors: 0,
                            total_ns: 0.0,
                            open: 0,
                            context,
                        }
                    });
                    site.calls += node.calls;
                    site.open += node.open;
                    site.errors += errors;
                    site.total_ns += node.total_ns;
                }
                threads.push(ThreadSyscalls { pid: thread.pid, tid: thread.tid, name: thread.name.clone(), syscalls: mine.sorted() });
            }
        }
        for call in uncontexted(data) {
            match call.before_probes {
                true => total.add_startup(call.nr, call.calls),
                false => total.add(call.nr, call.calls, 0, 0.0, 0.0, call.calls, 0),
            }
        }
        let mut sites: Vec<SiteStats> = sites.into_values().collect();
        sites.sort_by(|a, b| b.total_ns.total_cmp(&a.total_ns).then(b.calls.cmp(&a.calls)).then(a.addr.cmp(&b.addr)));
        Some(Syscalls { syscalls: total.sorted(), threads, sites, runtime_syscalls: crate::OwnCalls::from_data(data) })
    }
}

/// System calls counted without a calling context, by process and number.
pub(crate) struct Uncontexted {
    pub pid: u32,
    pub nr: u64,
    pub calls: u64,
    /// Made before a followed program's probes went live (counted through ptrace); else
    /// counted at its site (before the runtime was ready, inside a probe, by a vfork child).
    pub before_probes: bool,
}

/// Every [`Uncontexted`] count of `data`: the sites' counters, then the process records'
/// start-up calls.
pub(crate) fn uncontexted(data: &DataFile) -> impl Iterator<Item = Uncontexted> + '_ {
    let at_sites = data.records.iter().flat_map(|r| {
        r.meta.syscalls().map(move |(c, site)| Uncontexted { pid: r.pid, nr: site.nr.map_or(lopi_rt_abi::syscall_name::NR_OTHER, u64::from), calls: r.count(c), before_probes: false })
    });
    let startup = data.processes.iter().flat_map(|p| p.startup.iter().map(move |&(nr, calls)| Uncontexted { pid: p.pid, nr, calls, before_probes: true }));
    at_sites.chain(startup).filter(|c| c.calls > 0)
}

/// The names of the timed calls above node `parent`, outermost first.
fn context_of(timing: &Timing, nodes: &[crate::ContextNode], mut parent: u32) -> Vec<String> {
    let mut out = Vec::new();
    while parent != 0 && (parent as usize) < nodes.len() && out.len() < 64 {
        let node = &nodes[parent as usize];
        if let Some(f) = node.function {
            out.push(timing.functions[f as usize].name.clone());
        }
        parent = node.parent;
    }
    out.reverse();
    out
}
