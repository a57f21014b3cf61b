//! Laying out a [`Selection`]: trampolines encoded at the layout's addresses, counters
//! numbered (function entries first, then system-call sites), and the patches over the
//! original code. A site that cannot be encoded is given up with a reason, never patched
//! half-way.
use crate::{lend, Action, CodePatch, CodeSwap, SwitchPatches, Layout, Outcome, PatchPlan, Point, Probe, ProbePoint, Refusal, Selection, Site, Tactic, TimingOutcome, RSEQ_CS_SIZE};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::JMP32_LEN;
use std::collections::HashMap;

impl Selection {
    /// Number of counters the layout must provide (an upper bound: a site that cannot be
    /// encoded is dropped).
    pub fn counter_count(&self) -> u64 {
        self.sites.iter().filter(|s| s.is_entry() || s.is_block()).count() as u64 + self.sites.iter().map(|s| s.syscalls.len() as u64).sum::<u64>()
    }

    /// True when some function is timed: the layout must then provide the stubs.
    pub fn has_timing(&self) -> bool {
        self.timing.contains(&TimingOutcome::Timed)
    }

    /// True when some `syscall` is probed: the layout must then provide the stubs.
    pub fn has_syscalls(&self) -> bool {
        self.sites.iter().any(|s| !s.syscalls.is_empty())
    }

    /// Encodes trampolines at `layout` and the jumps into them. A site whose instructions
    /// cannot be re-encoded there is dropped with a reason, never patched half-way; if it
    /// was an exit site, its functions are counted but not timed.
    pub fn lay_out(mut self, module: &ElfModule<'_>, layout: Layout) -> PatchPlan {
        loop {
            match self.try_lay_out(module, layout) {
                Ok(plan) => return plan,
                Err(Failed { site, refusal }) => self.give_up(site, refusal),
            }
        }
    }

    /// Gives up the site whose jump is written at `patch_at` (a live installer found a
    /// thread stopped inside its bytes): an entry site's function is skipped, and it no
    /// longer needs its exit sites; an exit site's functions are counted but not timed.
    /// Returns false when no site patches there.
    pub fn withdraw(&mut self, patch_at: Svma) -> bool {
        let Some(index) = self.sites.iter().position(|s| s.patch_at == patch_at) else { return false };
        self.give_up(index, Refusal::ThreadInside);
        true
    }

    /// Gives up the site at `index` for `refusal`, with what that means at its point: an
    /// entry's function is skipped, an exit's functions are counted but not timed, a
    /// `syscall` or a block stays without a probe.
    fn give_up(&mut self, index: usize, refusal: Refusal) {
        match self.sites[index].point {
            Point::Exit => self.demote(index, refusal),
            Point::Entry(_) => self.remove_entry(index, refusal),
            Point::Syscall(_) => self.remove_syscall_site(index, refusal),
            Point::Block(_) => self.remove_block(index, refusal),
        }
    }

    /// Gives up the block site at `index`: its block is counted as skipped for `reason`.
    fn remove_block(&mut self, index: usize, reason: Refusal) {
        let site = self.sites.remove(index);
        for f in self.blocks.iter_mut().filter(|f| f.function == site.function) {
            crate::blocks::set_outcome_at(f, site.patch_at.0, Outcome::Skipped(reason));
        }
    }

    /// Gives up the entry site at `index`: its function is skipped for `reason` and no longer
    /// needs its exit sites; sites whose bounce was in its moved bytes (see `lend.rs`) go too.
    fn remove_entry(&mut self, index: usize, reason: Refusal) {
        let site = self.sites.remove(index);
        // Its moved `syscall`s stay in place, unprobed: they cannot get a site of their own
        // once the layout has begun.
        self.skip_syscalls(&site.syscalls, Refusal::Covered);
        self.outcomes[site.function] = Outcome::Skipped(reason);
        self.timing[site.function] = TimingOutcome::Off;
        for s in &mut self.sites {
            s.owners.retain(|&o| o != site.function);
        }
        self.retain_sites(Site::needed);
        let lent = site.patch_at.0..site.patch_at.0 + site.covered as u64;
        while let Some(i) = self.sites.iter().position(|s| s.bounce.is_some_and(|b| lent.contains(&b.0))) {
            if self.sites[i].is_entry() {
                self.remove_entry(i, Refusal::NoBounceSpace);
            } else {
                self.demote(i, Refusal::ExitNoBounceSpace);
            }
        }
    }

    /// Keeps the sites `keep` says; a `syscall` a dropped site moved stays unprobed.
    fn retain_sites(&mut self, keep: impl Fn(&Site) -> bool) {
        let dropped: Vec<u64> = self.sites.iter().filter(|s| !keep(s)).flat_map(|s| s.syscalls.iter().copied()).collect();
        self.sites.retain(keep);
        self.skip_syscalls(&dropped, Refusal::Covered);
    }

    /// Gives up a system-call site.
    fn remove_syscall_site(&mut self, index: usize, reason: Refusal) {
        let site = self.sites.remove(index);
        self.skip_syscalls(&site.syscalls, reason);
    }

    fn skip_syscalls(&mut self, ips: &[u64], reason: Refusal) {
        for s in self.syscalls.iter_mut().filter(|s| ips.contains(&s.at.0)) {
            s.outcome = Outcome::Skipped(reason);
        }
    }

    /// Counts `function` without timing it (its entry stops calling the entry probe; exit
    /// sites only it needed go).
    pub fn count_only(&mut self, function: usize, reason: Refusal) {
        if self.timing.get(function) != Some(&TimingOutcome::Timed) {
            return;
        }
        self.timing[function] = TimingOutcome::Untimed(reason);
        for site in &mut self.sites {
            site.owners.retain(|&o| o != function);
            if site.function == function && site.is_entry() {
                site.action = Action::Count;
                site.exits.clear();
            }
        }
        self.retain_sites(Site::needed);
    }

    /// Takes a failed exit site's functions off timing: their entry sites stop calling the
    /// entry probe and their other exit sites go.
    fn demote(&mut self, failed: usize, reason: Refusal) {
        let owners = self.sites[failed].owners.clone();
        for &f in &owners {
            self.timing[f] = TimingOutcome::Untimed(reason);
        }
        self.retain_sites(|s| s.point != Point::Exit || !s.owners.iter().any(|o| owners.contains(o)));
        for site in self.sites.iter_mut().filter(|s| owners.contains(&s.function) && s.is_entry()) {
            site.action = Action::Count;
            site.exits.clear();
        }
    }

    /// A site whose patch or bounce overlaps another's (see [`overlapping`]).
    fn overlapping(&self) -> Option<usize> {
        let spans = self.sites.iter().enumerate().flat_map(|(i, s)| {
            let patch = (s.patch_at.0, s.patch_at.0 + s.covered as u64, i);
            let bounce = s.bounce.map(|b| (b.0, b.0 + JMP32_LEN as u64, i));
            std::iter::once(patch).chain(bounce)
        });
        overlapping(spans.collect())
    }

    /// Lays out every site, or says which site failed.
    fn try_lay_out(&self, module: &ElfModule<'_>, layout: Layout) -> Result<PatchPlan, Failed> {
        if let Some(site) = self.overlapping() {
            // In each point's words: a `syscall`'s bytes are covered by the other site; timing
            // has no word for overlapping code, and says its exit failed to relocate.
            let refusal = match self.sites[site].point {
                Point::Exit => Refusal::RelocationFailed,
                Point::Entry(_) | Point::Block(_) => Refusal::OverlappingCode,
                Point::Syscall(_) => Refusal::Covered,
            };
            return Err(Failed { site, refusal });
        }
        // Counter indices follow the entry sites' order; exit sites name their function's.
        let counters: HashMap<usize, u32> =
            self.sites.iter().filter(|s| s.is_entry()).enumerate().map(|(i, s)| (s.function, i as u32)).collect();
        // System-call sites are numbered after the functions, in address order.
        let first_syscall = counters.len() as u32;
        let mut syscall_ips: Vec<u64> = self.sites.iter().flat_map(|s| s.syscalls.iter().copied()).collect();
        syscall_ips.sort_unstable();
        let syscall_counters: Vec<(u64, u32)> = syscall_ips.iter().enumerate().map(|(i, &ip)| (ip, first_syscall + i as u32)).collect();
        // Block sites after them, in address order.
        let first_block = first_syscall + syscall_counters.len() as u32;
        let block_counters: HashMap<usize, u32> =
            self.sites.iter().enumerate().filter(|(_, s)| s.is_block()).enumerate().map(|(k, (i, _))| (i, first_block + k as u32)).collect();
        let mut probes = Vec::new();
        let mut block_sections = Vec::new();
        let mut entry_count = 0u32;
        let mut rseq_sections = Vec::new();
        let mut code_patches = Vec::new();
        let mut code = Vec::new();
        let mut exit_sites = 0;
        // With a budget: each timed function's entry swap, and its exit sites' swaps.
        let mut entry_swaps: Vec<(usize, u32, Option<CodeSwap>)> = Vec::new();
        let mut exit_swaps: HashMap<usize, Vec<CodeSwap>> = HashMap::new();
        let mut bounces: Vec<u64> = self.sites.iter().filter_map(|s| s.bounce.map(|b| b.0)).collect();
        bounces.sort_unstable();
        for (index, site) in self.sites.iter().enumerate() {
            let trampoline = layout.trampolines + code.len() as u64;
            let syscalls = layout.stubs.filter(|_| !site.syscalls.is_empty()).map(|stubs| lopi_x86::SyscallProbes {
                enter_stub: stubs.syscall_enter.0,
                exit_stub: stubs.syscall_exit.0,
                sites: &syscall_counters,
                dispatch: layout.dispatch,
            });
            let loops_in_copy = site.point == Point::Entry(Tactic::WholeFunction);
            let body = lopi_x86::Body { insns: &site.relocated, loops_in_copy, exits: &site.exits, resume: site.resume.map(|r| r.0), syscalls };
            let encoded = match (site.point, layout.stubs) {
                (Point::Block(_) | Point::Entry(_), _) if site.action == Action::Mark => {
                    let counter = if site.is_entry() { entry_count } else { block_counters[&index] };
                    marking(module, &layout, site, counter, &bounces, &body, trampoline).map(|t| (t.bytes, Some(t.section), t.syscall_returns, t.counting))
                }
                (Point::Block(_), Some(stubs)) if site.action == Action::Probe => {
                    lopi_x86::point_trampoline(stubs.point.0, block_counters[&index], &body, trampoline.0).map(|t| (t.bytes, Some(t.section), t.syscall_returns, t.counting))
                }
                (Point::Block(_), _) => {
                    let access = counter_access(&layout, block_counters[&index]);
                    let flags_dead = lopi_x86::flags_dead(&site.relocated);
                    lopi_x86::counting_trampoline(&access, lopi_x86::Counted::Block { flags_dead }, &body, trampoline.0).map(|t| (t.bytes, Some(t.section), t.syscall_returns, t.counting))
                }
                (Point::Entry(_), stubs) => {
                    let counter = entry_count;
                    let access = counter_access(&layout, counter);
                    match (stubs, site.action) {
                        (Some(stubs), Action::Time | Action::Lock(_)) => {
                            let (enter_stub, exit_stub) = stubs.of(site.action);
                            let timed = lopi_x86::TimedEntry {
                                enter_stub,
                                exit_stub,
                                counter: access,
                                mode: layout.mode_of(counter),
                                entry_tag: match site.action {
                                    Action::Lock(op) => u32::from(op) << lopi_rt_abi::lock_name::OP_SHIFT,
                                    _ => 0,
                                },
                            };
                            let copy = site.copy.as_deref().filter(|_| layout.budget);
                            lopi_x86::timing_trampoline(lopi_x86::Timed::Entry { entry: &timed, copy }, &body, trampoline.0)
                        }
                        (Some(stubs), Action::Count) if self.probes_entry(site.function) => {
                            lopi_x86::counting_trampoline(&access, lopi_x86::Counted::ProbedEntry { stub: stubs.point.0, counter }, &body, trampoline.0)
                        }
                        _ => lopi_x86::counting_trampoline(&access, lopi_x86::Counted::Entry, &body, trampoline.0),
                    }
                    .map(|t| (t.bytes, Some(t.section), t.syscall_returns, t.counting))
                }
                (Point::Exit, Some(stubs)) => {
                    let counter = match site.owners.as_slice() {
                        [only] => counters.get(only).copied(),
                        _ => None,
                    };
                    let mark_tail = site.action == Action::Time;
                    let probe = lopi_x86::ExitProbe { stub: stubs.of(site.action).1, counter, mode: counter.map(|c| layout.mode_of(c)), mark_tail };
                    lopi_x86::timing_trampoline(lopi_x86::Timed::Exit(probe), &body, trampoline.0).map(|t| (t.bytes, None, t.syscall_returns, None))
                }
                (Point::Exit, None) => return Err(Failed { site: index, refusal: Refusal::RelocationFailed }),
                (Point::Syscall(_), Some(_)) => lopi_x86::timing_trampoline(lopi_x86::Timed::Syscall, &body, trampoline.0).map(|t| (t.bytes, None, t.syscall_returns, None)),
                (Point::Syscall(_), None) => return Err(Failed { site: index, refusal: Refusal::RelocationFailed }),
            };
            let placed = encoded.ok().and_then(|e| Some((e, site_patches(module, site, trampoline)?)));
            let Some(((bytes, section, returns, counting), patches)) = placed else {
                // Timing tells no out-of-range exit from one that failed to relocate.
                let out_of_range = site.point != Point::Exit && site_patches(module, site, trampoline).is_none();
                let refusal = if out_of_range { Refusal::OutOfRange } else { Refusal::RelocationFailed };
                return Err(Failed { site: index, refusal });
            };
            for (ip, returns_to) in returns {
                let Some(&(_, counter)) = syscall_counters.iter().find(|&&(at, _)| at == ip) else { continue };
                let site = self.syscalls.partition_point(|s| s.at.0 < ip);
                probes.push(Probe { point: ProbePoint::Syscall { at: Svma(ip), site, returns_to: Svma(returns_to) }, action: Action::Time, counter });
            }
            code.extend_from_slice(&bytes);
            // Keep trampolines 16-byte aligned, padded with int3.
            code.resize(code.len().next_multiple_of(16), 0xcc);
            code_patches.extend(patches);
            if layout.budget && site.action == Action::Time && layout.stubs.is_some() {
                match site.point {
                    Point::Entry(_) => entry_swaps.push((site.function, entry_count, counting.and_then(|to| entry_swap(module, site, to)))),
                    Point::Exit => {
                        if let ([owner], Some(swaps)) = (site.owners.as_slice(), exit_restore(module, site, &bounces)) {
                            exit_swaps.entry(*owner).or_default().extend(swaps);
                        }
                    }
                    _ => {}
                }
            }
            match (site.point, section) {
                (Point::Entry(tactic), Some(section)) => {
                    let action = match (layout.stubs, site.action) {
                        (_, Action::Mark) => Action::Mark,
                        (None, _) => Action::Count,
                        (Some(_), Action::Count) if self.probes_entry(site.function) => Action::Probe,
                        (Some(_), action) => action,
                    };
                    let point = ProbePoint::Entry { function: site.function, tactic, patch_at: site.patch_at, trampoline };
                    probes.push(Probe { point, action, counter: entry_count });
                    entry_count += 1;
                    rseq_sections.push(section);
                }
                (Point::Block(tactic), Some(section)) => {
                    let block = self.blocks.iter().filter(|f| f.function == site.function).find_map(|f| crate::blocks::block_of(f, site.patch_at.0));
                    let point = ProbePoint::Block {
                        function: site.function,
                        start: Svma(block.map_or(site.patch_at.0, |b| b.start)),
                        end: Svma(block.map_or(site.patch_at.0 + site.moved_len as u64, |b| b.end)),
                        patch_at: site.patch_at,
                        tactic,
                    };
                    probes.push(Probe { point, action: site.action, counter: block_counters[&index] });
                    block_sections.push(section);
                }
                (Point::Exit, _) => exit_sites += 1,
                _ => {}
            }
        }
        // System-call counters have no critical section; their slots stay unused.
        rseq_sections.resize(rseq_sections.len() + syscall_counters.len(), lopi_x86::RseqSection { start: 0, post_commit_offset: 0, abort: 0 });
        rseq_sections.extend(block_sections);
        probes.sort_by_key(|p| p.counter);
        if layout.dispatch {
            probes.push(Probe { point: ProbePoint::Dispatch, action: Action::Time, counter: probes.len() as u32 });
            rseq_sections.push(lopi_x86::RseqSection { start: 0, post_commit_offset: 0, abort: 0 });
        }
        debug_assert!(probes.iter().enumerate().all(|(i, p)| p.counter as usize == i), "counters are the probes' indices");
        let switch_patches = entry_swaps
            .into_iter()
            .map(|(function, counter, entry)| SwitchPatches { counter, entry, exits: exit_swaps.remove(&function).unwrap_or_default() })
            .filter(|s| s.swaps().next().is_some())
            .collect();
        Ok(PatchPlan {
            layout,
            probes,
            syscalls: self.syscalls.clone(),
            blocks: self.blocks.clone(),
            rseq_sections,
            code_patches: lend::merge_nested(code_patches),
            trampoline_code: code,
            outcomes: self.outcomes.clone(),
            timing: self.timing.clone(),
            exit_sites,
            switch_patches,
        })
    }
}

/// A site that could not be laid out, and why: the layout starts again without it (its point
/// decides what that means, see [`Selection::give_up`]).
struct Failed {
    site: usize,
    refusal: Refusal,
}

/// Of `spans` (start, end, site), a site whose span overlaps another's without lying inside
/// it (a bounce in the room a site lent, see `lend.rs`): the two would write over each
/// other. The planner's choices exclude it; should one slip through, the later site pays,
/// never the code.
fn overlapping(mut spans: Vec<(u64, u64, usize)>) -> Option<usize> {
    spans.sort_unstable();
    let mut host: Option<(u64, usize)> = None;
    for (start, end, i) in spans {
        match host {
            Some((host_end, _)) if start < host_end && end <= host_end => {}
            Some((host_end, other)) if start < host_end => return Some(i.max(other)),
            _ => host = Some((end, i)),
        }
    }
    None
}

/// How a counting trampoline reaches counter `counter`.
fn counter_access(layout: &Layout, counter: u32) -> lopi_x86::CounterAccess {
    lopi_x86::CounterAccess {
        shared: layout.counters.0 + 8 * u64::from(counter),
        rseq_offset_var: layout.vars.0 + lopi_rt_abi::vars::RSEQ_OFFSET,
        cpu_count_var: layout.vars.0 + lopi_rt_abi::vars::CPU_COUNT,
        percpu_base_var: layout.vars.0 + lopi_rt_abi::vars::PERCPU_BASE,
        stride: layout.stride,
        index: counter,
        cs: layout.rseq_table.0 + RSEQ_CS_SIZE * u64::from(counter),
    }
}

/// A marking probe's trampoline: the mark goes into the counter's shared slot, without a
/// critical section (a one-byte store is never torn, and two threads storing 1 leave 1), and
/// the probe takes itself out once it fired where the runtime can do that safely.
fn marking(module: &ElfModule<'_>, layout: &Layout, site: &Site, counter: u32, bounces: &[u64], body: &lopi_x86::Body<'_>, at: Svma) -> Result<lopi_x86::Trampoline, lopi_x86::RelocError> {
    let mark = layout.counters.0 + 8 * u64::from(counter);
    let retire = retire_record(module, layout, site, bounces);
    let retire = retire.as_ref().map(|(stub, jump_len, original)| lopi_x86::Retire { stub: stub.0, site: site.patch_at.0, jump_len: *jump_len, original });
    lopi_x86::marking_trampoline(mark, retire.as_ref(), body, at.0)
}

/// What a coverage probe's trampoline needs to put `site`'s original code back once it has
/// fired (the runtime's stub, the jump's length, the original bytes), or `None` when the
/// runtime could not do that safely (see [`restorable`]).
fn retire_record(module: &ElfModule<'_>, layout: &Layout, site: &Site, bounces: &[u64]) -> Option<(Svma, u8, Vec<u8>)> {
    let stub = layout.retire_stub?;
    let (jump_len, original) = restorable(module, site, bounces)?;
    Some((stub, jump_len, original))
}

/// The jump's length and the original bytes of `site`, when its runtime can put them back
/// safely: not when the jump would span two cache lines (one store could not replace it), the
/// code is not in a read-only executable segment (the runtime gives the page back exactly that
/// protection), or another site's bounce lives in its bytes.
fn restorable(module: &ElfModule<'_>, site: &Site, bounces: &[u64]) -> Option<(u8, Vec<u8>)> {
    let jump_len = if site.bounce.is_some() { lopi_x86::JMP8_LEN } else { JMP32_LEN };
    let len = site.covered.max(jump_len);
    let at = site.patch_at.0;
    let one_line = crate::blocks::within_line(at, jump_len);
    let hosts_bounce = bounces.get(bounces.partition_point(|&b| b < at)).is_some_and(|&b| b < at + len as u64);
    if !one_line || !read_exec(module, at, len) || hosts_bounce || len > lopi_rt_abi::retire::MAX_LEN {
        return None;
    }
    let original = module.bytes_from(site.patch_at)?.get(..len)?.to_vec();
    Some((jump_len as u8, original))
}

fn read_exec(module: &ElfModule<'_>, at: u64, len: usize) -> bool {
    module.segments.iter().any(|s| at >= s.vaddr.0 && at + len as u64 <= s.vaddr.0 + s.filesz && s.is_read_exec())
}

/// A switched function's entry: its jump (or its bounce's) retargeted to the counting code at
/// `to`, past the trampoline's mode check.
fn entry_swap(module: &ElfModule<'_>, site: &Site, to: u64) -> Option<CodeSwap> {
    let at = site.bounce.unwrap_or(site.patch_at).0;
    let bytes = lopi_x86::jmp32_bytes(at, to)?.to_vec();
    (crate::blocks::within_line(at, JMP32_LEN) && read_exec(module, at, JMP32_LEN)).then_some(CodeSwap { at: Svma(at), jump_len: JMP32_LEN as u8, bytes })
}

/// A switched function's exit site with its original code back: the `ret`s turned into `nop`s
/// before it first (so that no thread falls into the site's original code from one), then the
/// site. `None` when the site moved a probed `syscall` or cannot be restored safely.
fn exit_restore(module: &ElfModule<'_>, site: &Site, bounces: &[u64]) -> Option<Vec<CodeSwap>> {
    if !site.syscalls.is_empty() {
        return None;
    }
    let (jump_len, original) = restorable(module, site, bounces)?;
    let mut swaps = Vec::new();
    for &at in &site.nops {
        let original = module.bytes_from(at)?.first().copied()?;
        read_exec(module, at.0, 1).then_some(())?;
        swaps.push(CodeSwap { at, jump_len: 1, bytes: vec![original] });
    }
    swaps.push(CodeSwap { at: site.patch_at, jump_len, bytes: original });
    Some(swaps)
}

/// The jump (and bounce) written over the original code for one site.
fn site_patches(module: &ElfModule<'_>, site: &Site, trampoline: Svma) -> Option<Vec<CodePatch>> {
    let original = |at: Svma, len: usize| module.bytes_from(at).and_then(|b| b.get(..len)).map(<[u8]>::to_vec);
    let mut out = Vec::new();
    let mut head = match site.bounce {
        None => lopi_x86::jmp32_bytes(site.patch_at.0, trampoline.0)?.to_vec(),
        Some(bounce) => {
            let jump = lopi_x86::jmp32_bytes(bounce.0, trampoline.0)?;
            out.push(CodePatch { at: bounce, bytes: jump.to_vec(), original: original(bounce, JMP32_LEN)? });
            lopi_x86::jmp8_bytes(site.patch_at.0, bounce.0)?.to_vec()
        }
    };
    // Whatever the jump leaves of the moved instructions is unreachable: fill with int3.
    head.resize(site.covered.max(head.len()), 0xcc);
    out.push(CodePatch { at: site.patch_at, original: original(site.patch_at, head.len())?, bytes: head });
    for &at in &site.nops {
        out.push(CodePatch { at, bytes: vec![0x90], original: original(at, 1)? });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::overlapping;

    #[test]
    fn overlapping_patches_are_found_nested_ones_are_not() {
        // A bounce inside a lent room, then a site right after: nothing overlaps.
        assert_eq!(overlapping(vec![(0x100, 0x10c, 0), (0x106, 0x10b, 1), (0x10c, 0x111, 2)]), None);
        // A block probe over dead padding and a bounce reaching past it (glibc's strcmp).
        assert_eq!(overlapping(vec![(0x452, 0x45d, 3), (0x45b, 0x460, 1)]), Some(3));
        assert_eq!(overlapping(vec![(0x45b, 0x460, 5), (0x452, 0x45d, 2), (0x500, 0x505, 0)]), Some(5));
    }
}
