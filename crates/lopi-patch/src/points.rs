//! Probes at any instruction (a probe script's `addr:` and `func:NAME+OFF` points, GILK's
//! splicing anywhere): the address must start an instruction of the control-flow graph of the
//! function that holds it, and a 5-byte jump must fit from there within its basic block,
//! stopping at any branch target, without covering another probe's bytes. Its site runs
//! `Action::Probe`: a trampoline that calls the runtime's point stub below the red zone,
//! which runs the probes hooked to the site's counter (a block counter, after the blocks').
//! A function's entry that is counted, not timed, runs its own counter's probes the same way
//! before it counts ([`Selection::probe_entries`]).
use crate::exits::CodeMap;
use crate::entry::patch_instructions;
use crate::{Action, Analysis, Point, PointKind, Refusal, Selection, Tactic};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::JMP32_LEN;
use std::collections::BTreeSet;

/// Why no probe can go at an address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointError {
    #[error("no function's code holds {0:#x}")]
    NoFunction(u64),
    /// A function's cold part, which the compiler split from it (`.text.unlikely`): its code is
    /// not read as a function of its own.
    #[error("{0:#x} is in a cold part split from a function (`.text.unlikely`), where lopi does not probe yet")]
    ColdFragment(u64),
    #[error("{0:#x} is not where an instruction of {1} starts")]
    NotAnInstruction(u64, String),
    /// Its control-flow graph cannot be read (it is read as a timed function's exits are, so
    /// the refusal is told in their words).
    #[error("the code of {0} is not known well enough to probe inside it ({why})", why = .1.describe(PointKind::Exit))]
    NoGraph(String, Refusal),
    #[error("a probe at {0:#x} would cover the bytes of another probe (a function's entry or exit, or a system call's)")]
    Shared(u64),
    #[error("no probe fits at {0:#x}: {why}", why = .1.describe(PointKind::Block))]
    Skipped(u64, Refusal),
}

impl Selection {
    /// Adds a probe at each of `addrs` (module addresses), or says why one cannot go there; on
    /// an error nothing is added.
    pub fn add_points(&mut self, module: &ElfModule<'_>, analysis: &Analysis, addrs: &[u64]) -> Result<(), PointError> {
        let mut added = Vec::new();
        for &addr in addrs {
            let site = point_site(module, analysis, addr)?;
            let range = addr..addr + site.covered as u64;
            let overlaps = |s: &crate::Site| {
                let own = s.patch_at.0..s.patch_at.0 + s.covered.max(s.moved_len) as u64;
                let bounce = s.bounce.map_or(0..0, |b| b.0..b.0 + JMP32_LEN as u64);
                [own, bounce].iter().any(|r| r.start < range.end && range.start < r.end) || s.nops.iter().any(|n| range.contains(&n.0))
            };
            if self.sites.iter().chain(&added).any(overlaps) {
                return Err(PointError::Shared(addr));
            }
            added.push(site);
        }
        self.sites.extend(added);
        self.sites.sort_by_key(|s| s.patch_at);
        Ok(())
    }

    /// Makes the entries of `functions` run the probes hooked to their counters (a script's
    /// entry probes) where they are counted, not timed (their exits cannot all be probed): the
    /// point stub first, then the counting code. A timed entry runs them already.
    pub fn probe_entries(&mut self, functions: impl IntoIterator<Item = usize>) {
        self.entry_probes.extend(functions);
    }

    /// Whether the counted entry of `function` runs its counter's probes.
    pub(crate) fn probes_entry(&self, function: usize) -> bool {
        self.entry_probes.contains(&function)
    }

    /// True when some instruction or counted entry has a probe of its own: the layout must
    /// then provide the point stub.
    pub fn has_points(&self) -> bool {
        self.sites.iter().any(|s| s.action == Action::Probe || (s.is_entry() && self.probes_entry(s.function)))
    }
}

/// Whether a probe fits at `addr` (a module address) on its own, or why not (other probes'
/// sites are not known yet: [`Selection::add_points`] checks those).
pub fn point_fits(module: &ElfModule<'_>, analysis: &Analysis, addr: u64) -> Result<(), PointError> {
    point_site(module, analysis, addr).map(drop)
}

/// The site a probe at `addr` would have on its own, or why it cannot go there.
fn point_site(module: &ElfModule<'_>, analysis: &Analysis, addr: u64) -> Result<crate::Site, PointError> {
    let targets = &analysis.targets;
    let ends = crate::functions::function_ends(module);
    let in_fragment = || module.fragments.iter().any(|&(at, len)| (at.0..at.0 + len).contains(&addr));
    let index = match (0..module.functions.len()).find(|&i| (module.functions[i].addr.0..ends[i]).contains(&addr)) {
        Some(index) => index,
        None if in_fragment() => return Err(PointError::ColdFragment(addr)),
        None => return Err(PointError::NoFunction(addr)),
    };
    let name = &module.functions[index].name;
    let (blocks, _) = crate::blocks::graph(module, targets, &CodeMap::new(module), index, ends[index]).map_err(|r| PointError::NoGraph(name.clone(), r))?;
    let block = blocks.iter().find(|b| (b.start..b.end).contains(&addr)).ok_or_else(|| PointError::NotAnInstruction(addr, name.clone()))?;
    if !starts_instruction(module, block.start, addr) {
        return Err(PointError::NotAnInstruction(addr, name.clone()));
    }
    let starts: BTreeSet<u64> = blocks.iter().map(|b| b.start).collect();
    let stop = |ip: u64| targets.contains(&ip) || starts.contains(&ip);
    let entry = patch_instructions(module, Svma(addr), block.end, targets, &stop, JMP32_LEN).map_err(|r| PointError::Skipped(addr, r))?;
    // An `endbr64` stays where it is: the probe would go after it.
    if entry.patch_at.0 != addr {
        return Err(PointError::Skipped(addr, Refusal::OverlappingCode));
    }
    if entry.len < JMP32_LEN {
        return Err(PointError::Skipped(addr, Refusal::TooShort));
    }
    let covered = entry.len;
    let site = entry.into_site(index, Tactic::Jmp32, covered, None);
    Ok(crate::Site { point: Point::Block(Tactic::Jmp32), action: Action::Probe, owners: Vec::new(), ..site })
}

/// Whether decoding from `start` (a block's first instruction) reaches `addr` at an instruction
/// boundary: a block has no branch into its middle, so its instructions follow one another.
fn starts_instruction(module: &ElfModule<'_>, start: u64, addr: u64) -> bool {
    let Some(bytes) = module.bytes_from(Svma(start)) else { return false };
    let mut ip = start;
    while ip < addr {
        match bytes.get((ip - start) as usize..).and_then(|code| lopi_x86::decode_one(code, ip)) {
            Some(insn) => ip = insn.next_ip(),
            None => return false,
        }
    }
    ip == addr
}
