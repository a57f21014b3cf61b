//! Selection: which functions and sites get probes, and the tactic of each entry (bounces
//! last, into the padding the direct tactics left free).
use crate::entry::{entry_site, Choice};
use crate::functions::{function_ends, names_of};
use crate::gaps::Gaps;
use crate::progress::PROGRESS_EVERY;
use crate::timed::{plan_timing, Timing};
use crate::{blocks, lend, locks, syscalls};
use crate::{Action, Analysis, Filter, Measure, Outcome, Place, Point, Probes, Progress, Refusal, Selection, Stage, Tactic, TimingOutcome};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{JMP32_LEN, JMP8_LEN};
use std::collections::{BTreeSet, HashSet};

/// Chooses a tactic for every selected function's entry, and as `probes` asks its exit sites
/// and a site for every `syscall` instruction. `analysis` comes from [`analyse`] on this module.
pub fn select(module: &ElfModule<'_>, analysis: &Analysis, filter: &Filter, probes: Probes) -> Selection {
    select_with(module, analysis, filter, probes, &())
}

/// [`select`], telling `progress` how it goes.
pub fn select_with(module: &ElfModule<'_>, analysis: &Analysis, filter: &Filter, probes: Probes, progress: &dyn Progress) -> Selection {
    let targets = &analysis.targets;
    let mut gaps = Gaps::find(module, targets);
    let mut outcomes = vec![Outcome::NotSelected; module.functions.len()];
    let ends = function_ends(module);
    let locks = probes.has(Place::LockFunctions);
    let entries = probes.at(Place::Entries);
    let lock_ops: Vec<_> = module.functions.iter().map(|f| if locks { locks::op_of(&names_of(f)) } else { None }).collect();
    let lock_parts = if locks { locks::tail_parts(module, &ends, &lock_ops, targets) } else { HashSet::new() };
    let mut sites = Vec::new();
    let mut need_bounce = Vec::new();
    let functions = module.functions.len() as u64;
    for (index, function) in module.functions.iter().enumerate().filter(|_| entries.is_some() || locks) {
        if index % PROGRESS_EVERY == 0 {
            progress.update(Stage::Entries, index as u64, functions);
        }
        if lock_ops[index].is_none() && !(entries.is_some() && filter.selects(&names_of(function))) {
            continue;
        }
        if lock_parts.contains(&function.addr.0) && lock_ops[index].is_none() {
            outcomes[index] = Outcome::Skipped(Refusal::PartOfLockFunction);
            continue;
        }
        let end = ends[index];
        match entry_site(module, index, end, targets, &mut gaps) {
            Ok(Choice::Direct(site)) => {
                if let Point::Entry(tactic) = site.point {
                    outcomes[index] = Outcome::Probed(tactic);
                }
                sites.push(site);
            }
            Ok(Choice::NeedsBounce(entry)) => need_bounce.push((index, entry)),
            Err(reason) => outcomes[index] = Outcome::Skipped(reason),
        }
    }
    // Bounces go last, into whatever padding the direct tactics left free, or into room a
    // neighbouring entry site lends (once).
    let mut lent = HashSet::new();
    for (index, entry) in need_bounce {
        // The rel8 displacement counts from the end of the 2-byte jump.
        let from = entry.patch_at.0 + JMP8_LEN as u64;
        let (lo, hi) = (from.saturating_sub(128), from + 127 - JMP32_LEN as u64);
        let bounce = gaps.take_near(lo, hi, JMP32_LEN).or_else(|| {
            lend::lend_room(module, &mut sites, &mut lent, &ends, targets, &mut gaps, lo, hi).then(|| gaps.take_near(lo, hi, JMP32_LEN)).flatten()
        });
        match bounce {
            Some(bounce) => {
                outcomes[index] = Outcome::Probed(Tactic::Jmp8ViaBounce);
                let covered = entry.len;
                sites.push(entry.into_site(index, Tactic::Jmp8ViaBounce, covered, Some(Svma(bounce))));
            }
            None => outcomes[index] = Outcome::Skipped(Refusal::NoBounceSpace),
        }
    }
    if entries == Some(Measure::Mark) {
        for site in sites.iter_mut().filter(|s| s.is_entry()) {
            site.action = Action::Mark;
        }
    }
    let mut timing_outcomes = vec![TimingOutcome::Off; module.functions.len()];
    let time_others = entries == Some(Measure::Time);
    if time_others || locks {
        let timing = Timing { ends: &ends, lock_ops: &lock_ops, time_others, syscalls: probes.probes_system_calls() };
        plan_timing(module, &timing, targets, &mut gaps, &mut sites, &mut timing_outcomes, progress);
    }
    let syscalls = match (probes.has(Place::Syscalls), locks) {
        (true, _) => syscalls::plan(module, targets, &mut gaps, &mut sites, |_| true),
        // Locks alone: the `futex` calls (blocking), the calls that end a thread (its end),
        // and those whose number is set out of sight.
        (false, true) => syscalls::plan(module, targets, &mut gaps, &mut sites, |nr| nr.is_none_or(|n| LOCK_SYSCALLS.contains(&n))),
        (false, false) => Vec::new(),
    };
    let blocks = if let Some(measure) = probes.at(Place::Blocks) {
        let action = if measure == Measure::Mark { Action::Mark } else { Action::Count };
        let (block_sites, blocks) = blocks::select(module, targets, filter, &mut gaps, action);
        sites.extend(block_sites);
        blocks
    } else {
        Vec::new()
    };
    sites.sort_by_key(|s| s.patch_at);
    Selection { sites, outcomes, timing: timing_outcomes, syscalls, blocks, entry_probes: BTreeSet::new() }
}

/// What `--probe locks` probes of the system calls on x86-64: `futex`, `exit`, `exit_group`.
const LOCK_SYSCALLS: [u32; 3] = [202, 60, 231];
