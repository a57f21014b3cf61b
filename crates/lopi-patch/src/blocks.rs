//! Basic blocks (`--probe block`, `lopi coverage`): each function's control-flow graph, from
//! decoding its code and the `.cold` fragments it jumps into (as its exits are found), split
//! at every address the branch-target analysis knows (branch and call targets, jump-table
//! entries, landing pads) and after every branch; and the tactic a probe at each block's start
//! would take, from the same ladder as function entries. A block's probe may move only the
//! block's own instructions: it stops at the next block's start, branch target or not.
use crate::exits::{self, CodeMap, Region};
use crate::gaps::Gaps;
use crate::targets::Targets;
use crate::entry::{patch_instructions, Choice, Entry};
use crate::{Action, Filter, Outcome, Point, Refusal, Site, Tactic};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{Flow, Insn, JMP32_LEN, JMP8_LEN};
use std::collections::BTreeSet;

pub use crate::block_graph::{Block, Edge, FunctionBlocks};
pub use crate::implied::{implications, Implication};

/// The control-flow graph of the function at `index` (ending at `end`).
pub(crate) fn graph(module: &ElfModule<'_>, targets: &Targets, map: &CodeMap, index: usize, end: u64) -> Result<(Vec<Block>, Vec<u64>), Refusal> {
    let function = &module.functions[index];
    if function.size == 0 {
        return Err(Refusal::UnknownSize);
    }
    let found = exits::find(module, Region { start: function.addr.0, end }, map, targets, false)?;
    let regions: Vec<Region> = found.code.values().map(|(r, _)| *r).collect();
    let inside = |a: u64| regions.iter().any(|r| (r.start..r.end).contains(&a));
    let table: Vec<u64> = regions.iter().flat_map(|r| targets.indirect.range(r.start..r.end).copied()).collect();
    let mut blocks = Vec::new();
    for (region, insns) in found.code.values() {
        let leaders = leaders(region, insns, targets);
        let mut i = 0;
        while i < insns.len() {
            let start = insns[i].ip();
            let mut j = i + 1;
            while j < insns.len() && !leaders.contains(&insns[j].ip()) {
                j += 1;
            }
            let mut body = &insns[i..j];
            let after_terminal = i > 0 && lopi_x86::flow(&insns[i - 1]).is_terminal();
            i = j;
            if !leaders.contains(&start) {
                continue;
            }
            if after_terminal && !targets.contains(&start) {
                // Padding after a jump or return that nothing reaches is no code (padding a
                // branch can fall into is a block: it runs); `gaps.rs` takes it for bounces.
                let dead = body.iter().take_while(|i| lopi_x86::is_filler(i)).count();
                body = &body[dead..];
            }
            let Some(first) = body.first() else { continue };
            let start = first.ip();
            let last = body.last().expect("a block has an instruction");
            let next = last.next_ip();
            let edges = match lopi_x86::flow(last) {
                Flow::Return | Flow::Stop => vec![Edge::Leaves],
                Flow::Jump => vec![direct(last, &inside)],
                Flow::ConditionalJump => vec![direct(last, &inside), Edge::Next(next)],
                Flow::IndirectJump if !table.is_empty() => vec![Edge::Table],
                Flow::IndirectJump => vec![Edge::Leaves],
                Flow::Next | Flow::Call | Flow::IndirectCall | Flow::Interrupt if next < region.end => vec![Edge::Next(next)],
                Flow::Next | Flow::Call | Flow::IndirectCall | Flow::Interrupt => vec![Edge::Leaves],
            };
            let calls = body.iter().any(|i| matches!(lopi_x86::flow(i), Flow::Call | Flow::IndirectCall | Flow::Interrupt));
            blocks.push(Block { start, end: next, instructions: body.len() as u32, edges, calls });
        }
    }
    Ok((blocks, table))
}

/// Block starts in one region: its start, every known target in it, and whatever follows a
/// branch or return.
fn leaders(region: &Region, insns: &[Insn], targets: &Targets) -> BTreeSet<u64> {
    let mut out: BTreeSet<u64> = targets.range(region.start..region.end).copied().collect();
    out.insert(region.start);
    for insn in insns {
        if !matches!(lopi_x86::flow(insn), Flow::Next | Flow::Call | Flow::IndirectCall | Flow::Interrupt) && insn.next_ip() < region.end {
            out.insert(insn.next_ip());
        }
    }
    out
}

fn direct(insn: &Insn, inside: &dyn Fn(u64) -> bool) -> Edge {
    match lopi_x86::branch_target(insn) {
        Some(t) if inside(t) => Edge::Jump(t),
        _ => Edge::Leaves,
    }
}

/// Every selected function's blocks and the sites of their probes (direct tactics first,
/// then bounces into the padding they left). With
/// `Action::Mark` (coverage) only the blocks whose running the probed blocks they dominate do
/// not tell get a probe (see `implied.rs`).
pub(crate) fn select(module: &ElfModule<'_>, targets: &Targets, filter: &Filter, gaps: &mut Gaps, action: Action) -> (Vec<Site>, Vec<FunctionBlocks>) {
    let map = CodeMap::new(module);
    let ends = crate::functions::function_ends(module);
    let mut out = Vec::new();
    let mut sites = Vec::new();
    let mut bounces = Vec::new();
    for (index, function) in module.functions.iter().enumerate() {
        if !filter.selects(&crate::functions::names_of(function)) {
            continue;
        }
        let mut table = Vec::new();
        let blocks = graph(module, targets, &map, index, ends[index]).map(|(blocks, t)| {
            let own = if action == Action::Mark { crate::implied::needs_own_probe(&blocks, &t, function.addr.0) } else { vec![true; blocks.len()] };
            table = t;
            let starts: BTreeSet<u64> = blocks.iter().map(|b| b.start).collect();
            blocks
                .into_iter()
                .zip(own)
                .map(|(b, own)| {
                    let outcome = match own.then(|| direct_site(module, targets, &starts, &b, gaps, action == Action::Mark)) {
                        None => Outcome::Skipped(Refusal::Implied),
                        Some(Ok(Choice::Direct(site))) => {
                            let tactic = site_tactic(&site);
                            sites.push(Site { function: index, action, ..site });
                            Outcome::Probed(tactic)
                        }
                        Some(Ok(Choice::NeedsBounce(entry))) => {
                            bounces.push((out.len(), b.start, index, entry));
                            Outcome::Probed(Tactic::Jmp8ViaBounce)
                        }
                        Some(Err(reason)) => Outcome::Skipped(reason),
                    };
                    (b, outcome)
                })
                .collect::<Vec<_>>()
        });
        out.push(FunctionBlocks { function: index, entry: function.addr.0, blocks, table });
    }
    for (f, start, function, entry) in bounces {
        let from = entry.patch_at.0 + JMP8_LEN as u64;
        let (lo, hi) = (from.saturating_sub(128), from + 127 - JMP32_LEN as u64);
        match gaps.take_near(lo, hi, JMP32_LEN) {
            Some(bounce) => {
                let covered = entry.len;
                sites.push(Site { action, ..as_block(entry.into_site(function, Tactic::Jmp8ViaBounce, covered, Some(Svma(bounce)))) });
            }
            None => set_outcome(&mut out[f], start, Outcome::Skipped(Refusal::NoBounceSpace)),
        }
    }
    (sites, out)
}

/// Records that the block at `start` of `f` is probed or skipped after all.
fn set_outcome(f: &mut FunctionBlocks, start: u64, outcome: Outcome) {
    if let Ok(blocks) = &mut f.blocks {
        if let Some((_, o)) = blocks.iter_mut().find(|(b, _)| b.start == start) {
            *o = outcome;
        }
    }
}

/// The same for the block a probe at `patch_at` is in (past its `endbr64`).
pub(crate) fn set_outcome_at(f: &mut FunctionBlocks, patch_at: u64, outcome: Outcome) {
    if let Some(start) = start_of(f, patch_at) {
        set_outcome(f, start, outcome);
    }
}

/// The start of the block of `f` that holds `addr`.
pub(crate) fn start_of(f: &FunctionBlocks, addr: u64) -> Option<u64> {
    block_of(f, addr).map(|b| b.start)
}

/// The block of `f` that holds `addr`.
pub(crate) fn block_of(f: &FunctionBlocks, addr: u64) -> Option<&Block> {
    f.blocks.as_ref().ok()?.iter().find(|(b, _)| (b.start..b.end).contains(&addr)).map(|(b, _)| b)
}

fn as_block(site: Site) -> Site {
    let tactic = site_tactic(&site);
    Site { point: Point::Block(tactic), ..site }
}

fn site_tactic(site: &Site) -> Tactic {
    match site.point {
        Point::Entry(t) | Point::Block(t) | Point::Syscall(t) => t,
        Point::Exit => Tactic::Jmp32,
    }
}

/// Tactics 1 and 2 for the block, or the instructions a short jump to a bounce would move.
/// A block's probe moves only the block's own instructions. With `fit_line` (a coverage
/// probe), a jump that would span two cache lines moves past the block's first instructions
/// if it can (see [`later_in_line`]).
fn direct_site(module: &ElfModule<'_>, targets: &Targets, starts: &BTreeSet<u64>, block: &Block, gaps: &mut Gaps, fit_line: bool) -> Result<Choice, Refusal> {
    let stop = |ip: u64| targets.contains(&ip) || starts.contains(&ip);
    let mut entry = patch_instructions(module, Svma(block.start), block.end, targets, &stop, JMP32_LEN)?;
    if fit_line && entry.len >= JMP32_LEN && !within_line(entry.patch_at.0, JMP32_LEN) {
        if let Some(later) = later_in_line(module, targets, &stop, block, &entry) {
            entry = later;
        }
    }
    if entry.len >= JMP32_LEN {
        let covered = entry.len;
        return Ok(Choice::Direct(as_block(entry.into_site(0, Tactic::Jmp32, covered, None))));
    }
    let after = entry.patch_at.0 + entry.len as u64;
    if entry.ends_terminal && !entry.stopped_at_target && gaps.take_at(after, JMP32_LEN - entry.len) {
        return Ok(Choice::Direct(as_block(entry.into_site(0, Tactic::Jmp32IntoPadding, JMP32_LEN, None))));
    }
    if entry.len < JMP8_LEN {
        return Err(Refusal::TooShort);
    }
    Ok(Choice::NeedsBounce(entry))
}

/// Bytes in a cache line: the runtime takes a coverage probe out with one store, which only
/// a jump within one line allows.
const CACHE_LINE: u64 = 64;

pub(crate) fn within_line(at: u64, len: usize) -> bool {
    at % CACHE_LINE + len as u64 <= CACHE_LINE
}

/// A coverage probe's site a few instructions into the block whose jump lies within one
/// cache line, if the instructions it passes only fall through: once they ran, the block
/// ran (no call that might not return, no system call).
fn later_in_line(module: &ElfModule<'_>, targets: &Targets, stop: &dyn Fn(u64) -> bool, block: &Block, entry: &Entry) -> Option<Entry> {
    let mut at = entry.patch_at.0;
    let mut first = *entry.insns.first()?;
    for _ in 0..4 {
        if lopi_x86::flow(&first) != Flow::Next {
            return None;
        }
        at += first.len() as u64;
        if at >= block.end || stop(at) {
            return None;
        }
        let later = patch_instructions(module, Svma(at), block.end, targets, stop, JMP32_LEN).ok()?;
        if later.len >= JMP32_LEN && within_line(at, JMP32_LEN) {
            return Some(later);
        }
        first = *later.insns.first()?;
    }
    None
}
