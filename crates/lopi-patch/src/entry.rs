//! An entry site: the instructions a patch point may move, and the tactic ladder that
//! patches them (a whole function, a jump into padding, a bounce).
use crate::gaps::Gaps;
use crate::targets::Targets;
use crate::{Action, Point, Refusal, Site, Tactic};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{Flow, Insn, JMP32_LEN, JMP8_LEN};
/// The instructions at a patch point that may be moved: stops before a branch target, after
/// a call (moved as an emulated call), at the function's end, or once `want` bytes are covered.
pub(crate) struct Entry {
    pub(crate) patch_at: Svma,
    pub(crate) insns: Vec<Insn>,
    pub(crate) len: usize,
    /// The last moved instruction never falls through.
    pub(crate) ends_terminal: bool,
    /// Why collection stopped early, if it did before `want` bytes.
    pub(crate) stopped_at_target: bool,
}

impl Entry {
    /// A site that moves these instructions and continues after them unless they end in
    /// ret/jmp (or an emulated call).
    pub(crate) fn into_site(self, function: usize, tactic: Tactic, covered: usize, bounce: Option<Svma>) -> Site {
        Site {
            function,
            point: Point::Entry(tactic),
            owners: vec![function],
            action: Action::Count,
            patch_at: self.patch_at,
            covered,
            moved_from: self.patch_at,
            moved_len: self.len,
            resume: (!self.ends_terminal).then(|| self.patch_at + self.len as u64),
            relocated: self.insns,
            bounce,
            exits: Vec::new(),
            nops: Vec::new(),
            copy_from: None,
            copy: None,
            syscalls: Vec::new(),
        }
    }
}

impl Site {
    pub(crate) fn is_entry(&self) -> bool {
        matches!(self.point, Point::Entry(_))
    }

    pub(crate) fn is_block(&self) -> bool {
        matches!(self.point, Point::Block(_))
    }

    /// An exit site is needed only while some timed function owns it.
    pub(crate) fn needed(&self) -> bool {
        self.point != Point::Exit || !self.owners.is_empty()
    }
}

/// What tactics 1 and 2 decided.
pub(crate) enum Choice {
    Direct(Site),
    /// Only a short jump fits: tactic 3, once direct sites have claimed their padding.
    NeedsBounce(Entry),
}

pub(crate) fn entry_instructions(
    module: &ElfModule<'_>,
    function: &lopi_elf::Function,
    end: u64,
    targets: &Targets,
    want: usize,
) -> Result<Entry, Refusal> {
    patch_instructions(module, function.addr, end, targets, &|ip| targets.contains(&ip), want)
}

/// The instructions a patch at `at` may move (after an `endbr64`, which indirect branches
/// must still find there): up to `end`, the first address `stop` names after the first, or
/// `want` bytes.
pub(crate) fn patch_instructions(
    module: &ElfModule<'_>,
    at: Svma,
    end: u64,
    targets: &Targets,
    stop: &dyn Fn(u64) -> bool,
    want: usize,
) -> Result<Entry, Refusal> {
    let bytes = module.bytes_from(at).ok_or(Refusal::NotInFile)?;
    let skip = if lopi_x86::is_endbr64(bytes) { 4 } else { 0 };
    let patch_at = at + skip as u64;
    let limit = end.saturating_sub(patch_at.0).min(bytes.len().saturating_sub(skip) as u64) as usize;
    let code = &bytes[skip..skip + limit.min(64)];
    let mut entry = Entry { patch_at, insns: Vec::new(), len: 0, ends_terminal: false, stopped_at_target: false };
    let mut ip = patch_at.0;
    while entry.len < want {
        if entry.len > 0 && stop(ip) {
            entry.stopped_at_target = true;
            break;
        }
        let Some(insn) = lopi_x86::decode_one(&code[entry.len..], ip) else {
            if entry.len == 0 {
                return Err(if code.is_empty() { Refusal::TooShort } else { Refusal::Undecodable });
            }
            break;
        };
        let next = ip + insn.len() as u64;
        if targets.range(ip + 1..next).next().is_some() {
            return Err(Refusal::OverlappingCode);
        }
        if matches!(lopi_x86::flow(&insn), Flow::Call | Flow::IndirectCall) {
            // A moved call becomes push-return-address + jmp; the callee returns to the
            // original code right after it, so those bytes stay live: nothing past it moves.
            let Some(emulation) = lopi_x86::emulate_call(&insn) else {
                return Err(if entry.len == 0 { Refusal::CallAtEntry } else { Refusal::TooShort });
            };
            entry.len += insn.len();
            entry.insns.extend(emulation);
            entry.ends_terminal = true;
            entry.stopped_at_target = true;
            break;
        }
        entry.len += insn.len();
        entry.ends_terminal = lopi_x86::flow(&insn).is_terminal();
        entry.insns.push(insn);
        ip = next;
        if entry.ends_terminal {
            // Past a ret/jmp only padding (checked by the caller) may be overwritten.
            entry.stopped_at_target = stop(ip);
            break;
        }
    }
    Ok(entry)
}

/// Tactics 1 and 2 (and whole-function relocation for loops at the entry).
pub(crate) fn entry_site(
    module: &ElfModule<'_>,
    index: usize,
    end: u64,
    targets: &Targets,
    gaps: &mut Gaps,
) -> Result<Choice, Refusal> {
    let function = &module.functions[index];
    let entry = entry_instructions(module, function, end, targets, JMP32_LEN)?;
    if targets.loops.contains(&entry.patch_at.0) || targets.loops.contains(&function.addr.0) {
        // A jump to the entry from the function itself is a loop iteration, not a call:
        // move the whole function so that the loop runs in the copy, past the counter.
        return whole_function(module, index, entry.patch_at, end, targets).map(Choice::Direct);
    }
    if entry.len >= JMP32_LEN {
        let covered = entry.len;
        return Ok(Choice::Direct(entry.into_site(index, Tactic::Jmp32, covered, None)));
    }
    let after = entry.patch_at.0 + entry.len as u64;
    let rest = JMP32_LEN - entry.len;
    if entry.ends_terminal
        && !entry.stopped_at_target
        && gaps.take_at(after, rest)
    {
        return Ok(Choice::Direct(entry.into_site(index, Tactic::Jmp32IntoPadding, JMP32_LEN, None)));
    }
    if entry.len < JMP8_LEN {
        return Err(Refusal::TooShort);
    }
    Ok(Choice::NeedsBounce(entry))
}

/// Largest function moved whole; bigger loops at entries are skipped.
const MAX_WHOLE_FUNCTION: u64 = 4096;

/// GILK's whole-function relocation, for functions without calls or indirect jumps (so
/// that every path stays inside the moved copy until it returns or leaves by a jump).
///
/// The copy starts at the function's first byte (an `endbr64` included) so that a loop
/// reaching either the entry or the patch point is redirected into the copy.
pub(crate) fn whole_function(module: &ElfModule<'_>, index: usize, patch_at: Svma, end: u64, targets: &Targets) -> Result<Site, Refusal> {
    let start = module.functions[index].addr;
    let len = end.saturating_sub(start.0);
    if module.functions[index].size == 0 || end < patch_at.0 + JMP32_LEN as u64 || len > MAX_WHOLE_FUNCTION {
        return Err(Refusal::LoopAtEntry);
    }
    // Targets under the jump must be the function's own (they follow the copy).
    let covered = patch_at.0 + 1..patch_at.0 + JMP32_LEN as u64;
    if targets.range(covered).any(|t| !targets.loops.contains(t)) {
        return Err(Refusal::LoopAtEntry);
    }
    let bytes = module.bytes_from(start).and_then(|b| b.get(..len as usize)).ok_or(Refusal::NotInFile)?;
    let insns: Vec<Insn> = lopi_x86::decode(bytes, start.0).collect();
    let decoded: usize = insns.iter().map(|i| i.len()).sum();
    let movable = insns.iter().all(|i| !matches!(lopi_x86::flow(i), Flow::Call | Flow::IndirectCall | Flow::IndirectJump));
    let ends_terminal = insns.last().is_some_and(|i| lopi_x86::flow(i).is_terminal());
    if decoded != bytes.len() || !movable || !ends_terminal {
        return Err(Refusal::LoopAtEntry);
    }
    Ok(Site {
        function: index,
        point: Point::Entry(Tactic::WholeFunction),
        owners: vec![index],
        action: Action::Count,
        patch_at,
        covered: JMP32_LEN,
        moved_from: start,
        moved_len: bytes.len(),
        relocated: insns,
        resume: None,
        bounce: None,
        exits: Vec::new(),
        nops: Vec::new(),
        copy_from: None,
        copy: None,
        syscalls: Vec::new(),
    })
}
