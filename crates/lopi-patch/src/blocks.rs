//! Basic blocks (`--probe block`, `lopi coverage`): each function's control-flow graph, from
//! decoding its code and the `.cold` fragments it jumps into (as its exits are found), split
//! at every address the branch-target analysis knows (branch and call targets, jump-table
//! entries, landing pads) and after every branch; and the tactic a probe at each block's start
//! would take, from the same ladder as function entries. A block's probe may move only the
//! block's own instructions: it stops at the next block's start, branch target or not.
use crate::exits::{self, CodeMap, Region, UntimedReason};
use crate::gaps::Gaps;
use crate::targets::Targets;
use crate::{patch_instructions, Analysis, Filter, SkipReason, Tactic};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{Flow, Insn, JMP32_LEN, JMP8_LEN};
use std::collections::BTreeSet;

/// Where control goes from a block's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "to")]
pub enum Edge {
    /// Falls through into the next block.
    Next(u64),
    /// A direct jump, conditional or not, to a block of the function.
    Jump(u64),
    /// An indirect jump: to any of the function's jump-table entries.
    Table,
    /// Returns, tail-calls or jumps out of the function.
    Leaves,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Block {
    pub start: u64,
    pub end: u64,
    pub instructions: u32,
    pub edges: Vec<Edge>,
}

/// What a probe at a block's start would be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockOutcome {
    Probed(Tactic),
    Skipped(SkipReason),
}

/// A function's blocks, in address order (its entry first when it lies lowest), or why its
/// graph is not known.
#[derive(Clone, Debug)]
pub struct FunctionBlocks {
    pub function: usize,
    pub blocks: Result<Vec<(Block, BlockOutcome)>, UntimedReason>,
}

/// The control-flow graph of the function at `index` (ending at `end`).
pub(crate) fn graph(module: &ElfModule<'_>, targets: &Targets, map: &CodeMap, index: usize, end: u64) -> Result<Vec<Block>, UntimedReason> {
    let function = &module.functions[index];
    if function.size == 0 {
        return Err(UntimedReason::UnknownSize);
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
            let body = &insns[i..j];
            i = j;
            if !leaders.contains(&start) || (body.iter().all(lopi_x86::is_filler) && !targets.contains(&start)) {
                // Padding after a jump or return that nothing reaches.
                continue;
            }
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
            blocks.push(Block { start, end: next, instructions: body.len() as u32, edges });
        }
    }
    Ok(blocks)
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

/// Every selected function's blocks and the tactic each block's probe would take: the
/// direct tactics first, then bounces into the padding they left.
pub fn plan(module: &ElfModule<'_>, analysis: &Analysis, filter: &Filter) -> Vec<FunctionBlocks> {
    let targets = &analysis.targets;
    let map = CodeMap::new(module);
    let mut gaps = Gaps::find(module, targets);
    let ends = crate::function_ends(module);
    let mut out = Vec::new();
    let mut bounces = Vec::new();
    for (index, function) in module.functions.iter().enumerate() {
        if !filter.selects(&crate::names_of(function)) {
            continue;
        }
        let blocks = graph(module, targets, &map, index, ends[index]).map(|blocks| {
            let starts: BTreeSet<u64> = blocks.iter().map(|b| b.start).collect();
            blocks
                .into_iter()
                .map(|b| {
                    let outcome = direct_tactic(module, targets, &starts, &b, &mut gaps);
                    if outcome == BlockOutcome::Probed(Tactic::Jmp8ViaBounce) {
                        bounces.push((out.len(), b.start));
                    }
                    (b, outcome)
                })
                .collect::<Vec<_>>()
        });
        out.push(FunctionBlocks { function: index, blocks });
    }
    for (f, start) in bounces {
        let Ok(blocks) = &mut out[f].blocks else { continue };
        let Some((block, outcome)) = blocks.iter_mut().find(|(b, _)| b.start == start) else { continue };
        let from = patch_start(module, block.start) + JMP8_LEN as u64;
        let (lo, hi) = (from.saturating_sub(128), from + 127 - JMP32_LEN as u64);
        if gaps.take_near(lo, hi, JMP32_LEN).is_none() {
            *outcome = BlockOutcome::Skipped(SkipReason::NoBounceSpace);
        }
    }
    out
}

/// Where a probe at `start` goes: past an `endbr64`.
fn patch_start(module: &ElfModule<'_>, start: u64) -> u64 {
    start + if module.bytes_from(Svma(start)).is_some_and(lopi_x86::is_endbr64) { 4 } else { 0 }
}

/// Tactics 1 and 2 for the block; `Jmp8ViaBounce` when only a short jump fits (its bounce is
/// found later).
fn direct_tactic(module: &ElfModule<'_>, targets: &Targets, starts: &BTreeSet<u64>, block: &Block, gaps: &mut Gaps) -> BlockOutcome {
    let stop = |ip: u64| targets.contains(&ip) || starts.contains(&ip);
    let entry = match patch_instructions(module, Svma(block.start), block.end, targets, &stop, JMP32_LEN) {
        Ok(entry) => entry,
        Err(reason) => return BlockOutcome::Skipped(reason),
    };
    if entry.len >= JMP32_LEN {
        return BlockOutcome::Probed(Tactic::Jmp32);
    }
    let after = entry.patch_at.0 + entry.len as u64;
    if entry.ends_terminal && !entry.stopped_at_target && gaps.take_at(after, JMP32_LEN - entry.len) {
        return BlockOutcome::Probed(Tactic::Jmp32IntoPadding);
    }
    if entry.len < JMP8_LEN {
        return BlockOutcome::Skipped(SkipReason::TooShort);
    }
    BlockOutcome::Probed(Tactic::Jmp8ViaBounce)
}
