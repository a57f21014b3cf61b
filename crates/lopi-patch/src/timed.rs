//! Timing's plan: the exit sites of every timed or lock function whose exits can all be
//! probed, and the clean copy a small leaf runs once the budget switches it to counting.
use crate::exits::{self, CodeMap, Region};
use crate::gaps::Gaps;
use crate::progress::PROGRESS_EVERY;
use crate::targets::Targets;
use crate::{Action, Point, Progress, Refusal, Site, Stage, Tactic, TimingOutcome};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{ExitKind, Flow, Insn};
use std::collections::HashMap;
/// What [`plan_timing`] times.
pub(crate) struct Timing<'a> {
    /// Where each function ends.
    pub(crate) ends: &'a [u64],
    /// Each function's lock operation (`--probe locks`).
    pub(crate) lock_ops: &'a [Option<lopi_rt_abi::lock_name::Op>],
    /// Functions other than lock functions are timed (`--probe entry,exit`).
    pub(crate) time_others: bool,
    /// Exit sites may move a `syscall` (whose probes then go in their trampoline).
    pub(crate) syscalls: bool,
}

/// Adds exit sites for every timed or lock function whose exits can all be probed, and sets
/// its entry site's action; others stay counted only, with the reason.
pub(crate) fn plan_timing(
    module: &ElfModule<'_>,
    timing: &Timing<'_>,
    targets: &Targets,
    gaps: &mut Gaps,
    sites: &mut Vec<Site>,
    outcomes: &mut [TimingOutcome],
    progress: &dyn Progress,
) {
    let lock_entries = timing.lock_ops.iter().zip(&module.functions).filter(|(op, _)| op.is_some()).map(|(_, f)| f.addr.0);
    let map = CodeMap::new(module).with_locks(lock_entries);
    // Exit sites of fragments already planned (a stripped file's fragment may be reached
    // from several functions): fragment start -> indices in `sites`, or why not.
    let mut fragments: HashMap<u64, Result<Vec<usize>, Refusal>> = HashMap::new();
    let entries = sites.len();
    for entry_index in 0..entries {
        if entry_index % PROGRESS_EVERY == 0 {
            progress.update(Stage::Exits, entry_index as u64, entries as u64);
        }
        let f = sites[entry_index].function;
        let action = match timing.lock_ops[f] {
            Some(op) => Action::Lock(op as u8),
            None if timing.time_others => Action::Time,
            None => continue,
        };
        let follow = matches!(action, Action::Lock(_));
        let ends = timing.ends;
        let result = timed_exits(module, f, ends[f], &sites[entry_index], &map, targets, gaps, &mut fragments, sites.len(), timing.syscalls, follow);
        match result {
            Ok(mut plan) => {
                let site = &mut sites[entry_index];
                site.action = action;
                site.exits = plan.entry_exits;
                // A lock call is never switched to counting by the budget.
                let copy = plan.copy.take().filter(|_| !follow);
                site.copy_from = copy.as_ref().map(|_| (module.functions[f].addr, (ends[f] - module.functions[f].addr.0) as usize));
                site.copy = copy;
                for new in &mut plan.sites {
                    new.action = action;
                }
                for &i in &plan.shared {
                    sites[i].owners.push(f);
                }
                // Fragment indices recorded for later functions were counted from
                // `sites.len()` on, in this order.
                sites.extend(plan.sites);
                outcomes[f] = TimingOutcome::Timed;
            }
            Err(reason) => outcomes[f] = TimingOutcome::Untimed(reason),
        }
    }
}

/// What timing a function takes, from [`timed_exits`].
struct TimedPlan {
    /// Exits among the entry site's moved instructions.
    entry_exits: Vec<(u64, ExitKind)>,
    /// New exit sites (the function's own, and of fragments planned for it first).
    sites: Vec<Site>,
    /// Indices of existing fragment exit sites it also needs.
    shared: Vec<usize>,
    /// The whole function, when a clean copy of it can run once it is switched to counting.
    copy: Option<Vec<Insn>>,
}

/// Plans a function's exits; newly planned fragments are recorded in `fragments`.
#[allow(clippy::too_many_arguments)]
fn timed_exits(
    module: &ElfModule<'_>,
    f: usize,
    end: u64,
    entry: &Site,
    map: &CodeMap,
    targets: &Targets,
    gaps: &mut Gaps,
    fragments: &mut HashMap<u64, Result<Vec<usize>, Refusal>>,
    next_index: usize,
    syscalls: bool,
    follow: bool,
) -> Result<TimedPlan, Refusal> {
    let function = &module.functions[f];
    if function.addr.0 > i32::MAX as u64 {
        return Err(Refusal::AddressTooHigh);
    }
    if function.size == 0 {
        return Err(Refusal::UnknownSize);
    }
    let own = Region { start: function.addr.0, end };
    let found = exits::find(module, own, map, targets, follow)?;
    let entry_exits = exits::kinds_among(&entry.relocated, &found);
    let whole = entry.point == Point::Entry(Tactic::WholeFunction);
    let entry_end = entry.patch_at.0 + entry.covered as u64;
    let mut new_sites: Vec<Site> = Vec::new();
    let mut shared = Vec::new();
    let mut planned_fragments = Vec::new();
    for (&start, (region, insns)) in &found.code {
        let in_own = start == own.start;
        if !in_own {
            if let Some(done) = fragments.get(&start) {
                shared.extend(done.clone()?);
                continue;
            }
        }
        let mut floor = region.start;
        let mut region_sites = Vec::new();
        let mut failure = None;
        // `ret`s too short to patch that fall through into the next exit (`ret; ret`, GCC's
        // tail duplication): they become `nop`s and share that exit's site.
        let mut into_next: Vec<Svma> = Vec::new();
        for exit in found.exits.iter().filter(|e| e.region.start == start) {
            let ip = insns[exit.index].ip();
            if in_own && (whole || (ip >= entry.patch_at.0 && ip < entry_end)) {
                if !into_next.is_empty() {
                    failure = Some(Refusal::ExitTooShort);
                    break;
                }
                continue; // the entry trampoline probes it
            }
            if in_own && ip >= entry.patch_at.0 {
                floor = floor.max(entry_end);
            }
            match exits::site(module, f, exit, insns, floor, targets, gaps, syscalls) {
                Ok(mut site) => {
                    floor = site.patch_at.0 + site.covered as u64;
                    site.nops = std::mem::take(&mut into_next);
                    region_sites.push(site);
                }
                Err(Refusal::ExitTooShort) if exits::falls_into_next_exit(exit, insns, &found) => {
                    into_next.push(Svma(ip));
                }
                Err(reason) => {
                    failure = Some(reason);
                    break;
                }
            }
        }
        if failure.is_none() && !into_next.is_empty() {
            failure = Some(Refusal::ExitTooShort);
        }
        if !in_own {
            let indices = (0..region_sites.len()).map(|k| next_index + new_sites.len() + k).collect();
            planned_fragments.push((start, failure.map_or(Ok(indices), Err)));
        }
        if let Some(reason) = failure {
            for (start, result) in planned_fragments {
                fragments.insert(start, result.and(Err(reason)));
            }
            return Err(reason);
        }
        new_sites.extend(region_sites);
    }
    for (start, result) in planned_fragments {
        fragments.insert(start, result);
    }
    let copy = clean_copy(&found, own);
    Ok(TimedPlan { entry_exits, sites: new_sites, shared, copy })
}

/// Largest function copied for the perturbation budget: the functions it switches are short.
const MAX_CLEAN_COPY: u64 = 512;

/// The function's instructions, when a copy of them can run in place of the probed original
/// once the budget switches it to counting: a small leaf (no calls, so no unwinder ever needs
/// to find the copy; no indirect jumps, whose tables point into the original) that never
/// leaves its own bytes except by returning or by a jump elsewhere.
fn clean_copy(found: &exits::FunctionExits, own: Region) -> Option<Vec<Insn>> {
    if found.code.len() != 1 || own.end - own.start > MAX_CLEAN_COPY {
        return None;
    }
    let (_, insns) = found.code.get(&own.start)?;
    // A `syscall` in the copy would run without its probe.
    let leaf = insns.iter().all(|i| !matches!(lopi_x86::flow(i), Flow::Call | Flow::IndirectCall | Flow::IndirectJump | Flow::Interrupt));
    let ends_terminal = insns.last().is_some_and(|i| lopi_x86::flow(i).is_terminal());
    (leaf && ends_terminal).then(|| insns.clone())
}
