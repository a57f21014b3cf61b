//! Exit probes for timed functions: every `ret` and tail jump of a function (and of the
//! `.cold` parts it jumps into) gets a probe right before it, in place, as XRay does with
//! its sleds: the return address on the stack is never touched, so the return predictor,
//! unwinders (C++ exceptions, `backtrace()`, gdb) and CET shadow stacks see the real
//! callers.
//!
//! An exit is patched by moving it with the instructions just before it in its basic block
//! (none of which, but the first, may be a branch target) into a trampoline, so that at
//! least five bytes are covered; or by letting the jump run on into padding after a final
//! `ret`; or with a `jmp rel8` to a bounce in nearby padding. A function is timed only if
//! all its exits can be probed: a missed exit would leave its frame open.
use crate::gaps::Gaps;
use crate::targets::Targets;
use crate::{Action, Point, Refusal, Site};
use lopi_elf::{Cfa, ElfModule, Svma};
use lopi_x86::{ExitKind, Flow, Insn, JMP32_LEN, JMP8_LEN};
use std::collections::{BTreeMap, HashSet};

/// A stretch of code with a known extent: a function or a fragment of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Region {
    pub start: u64,
    pub end: u64,
}

/// What the planner knows about code layout, for classifying jumps.
pub(crate) struct CodeMap {
    entries: HashSet<u64>,
    /// Function start -> end, for functions of known size.
    functions: BTreeMap<u64, u64>,
    /// Fragment start -> end.
    fragments: BTreeMap<u64, u64>,
    /// Executable ranges outside the code sections: PLT stubs, whose jumps are calls.
    stubs: Vec<(u64, u64)>,
    code: Vec<(u64, u64)>,
    /// Entries of the lock functions probed (`--probe locks`), which a followed tail jump
    /// does not continue into: their own probes time the call from there.
    locks: HashSet<u64>,
}

impl CodeMap {
    pub fn new(module: &ElfModule<'_>) -> Self {
        CodeMap {
            entries: module.functions.iter().map(|f| f.addr.0).collect(),
            functions: module.functions.iter().filter(|f| f.size > 0).map(|f| (f.addr.0, f.addr.0 + f.size)).collect(),
            fragments: module.fragments.iter().filter(|f| f.1 > 0).map(|&(a, n)| (a.0, a.0 + n)).collect(),
            stubs: module.segments.iter().filter(|s| s.flags & 1 != 0).map(|s| (s.vaddr.0, s.vaddr.0 + s.memsz)).collect(),
            code: module.code_sections.iter().map(|s| (s.addr.0, s.addr.0 + s.size)).collect(),
            locks: HashSet::new(),
        }
    }

    /// With the entries of the lock functions probed.
    pub fn with_locks(mut self, entries: impl IntoIterator<Item = u64>) -> Self {
        self.locks = entries.into_iter().collect();
        self
    }

    /// A jump there leaves for another function: an entry, or a PLT stub (a tail call into
    /// another module).
    fn is_call_target(&self, addr: u64) -> bool {
        let within = |ranges: &[(u64, u64)]| ranges.iter().any(|&(a, b)| (a..b).contains(&addr));
        self.entries.contains(&addr) || (within(&self.stubs) && !within(&self.code))
    }

    pub fn is_entry(&self, addr: u64) -> bool {
        self.entries.contains(&addr)
    }

    /// The function starting at `addr`, when its size is known.
    fn function_at(&self, addr: u64) -> Option<Region> {
        self.functions.get(&addr).map(|&end| Region { start: addr, end })
    }

    fn fragment_of(&self, addr: u64) -> Option<Region> {
        let (&start, &end) = self.fragments.range(..=addr).next_back()?;
        (addr < end).then_some(Region { start, end })
    }
}

/// Where control goes when an instruction leaves the straight line.
enum Class {
    Inside,
    Exit(ExitKind),
    Fragment(Region),
    Foreign,
    /// A followed tail jump into another probed lock function.
    IntoLock,
}

/// `function` is the region the timed function itself covers: jumps back into it from its
/// fragments are internal. With `follow`, a direct jump into another function of the module
/// continues the call there (a lock function's tail jump into glibc's shared code).
/// `cfa` is where the canonical frame address is at the instruction, when `.eh_frame` says.
fn classify(insn: &Insn, region: Region, function: Region, map: &CodeMap, has_indirect_targets: bool, cfa: Option<Cfa>, follow: bool) -> Class {
    let inside = |t: u64| (region.start..region.end).contains(&t) || (function.start..function.end).contains(&t);
    let direct = |t: u64, kind| {
        if inside(t) {
            Class::Inside
        } else if follow && map.locks.contains(&t) {
            // glibc's compat versions (pthread_cond_wait@GLIBC_2.2.5) tail-jump into the
            // current ones: followed, both would plan exit sites at the same returns.
            Class::IntoLock
        } else if let Some(f) = map.function_at(t).filter(|_| follow) {
            Class::Fragment(f)
        } else if map.is_call_target(t) {
            Class::Exit(kind)
        } else if let Some(f) = map.fragment_of(t) {
            Class::Fragment(f)
        } else {
            Class::Foreign
        }
    };
    match lopi_x86::flow(insn) {
        Flow::Return => Class::Exit(ExitKind::Return),
        Flow::Jump => lopi_x86::branch_target(insn).map_or(Class::Foreign, |t| direct(t, ExitKind::TailJump)),
        Flow::ConditionalJump => {
            lopi_x86::branch_target(insn).map_or(Class::Foreign, |t| direct(t, ExitKind::ConditionalTailJump))
        }
        // Through the GOT or a function pointer in memory: a tail call. Through a register
        // or a table: a switch when the function has jump-table or computed-goto targets, or
        // when its frame is still set up there (a tail call leaves with CFA = rsp+8; tables
        // whose entries lopi could not read, such as a computed goto's, are caught so).
        Flow::IndirectJump if cfa.is_some_and(|c| c != Cfa::Rsp(8)) => Class::Inside,
        Flow::IndirectJump if lopi_x86::rip_relative_address(insn).is_some() || !has_indirect_targets => {
            Class::Exit(ExitKind::TailJump)
        }
        _ => Class::Inside,
    }
}

/// One exit, located in its region's decoded instructions.
pub(crate) struct ExitAt {
    pub region: Region,
    pub index: usize,
    pub kind: ExitKind,
}

/// Decoded code of the regions a timed function runs in, and its exits.
pub(crate) struct FunctionExits {
    pub code: BTreeMap<u64, (Region, Vec<Insn>)>,
    pub exits: Vec<ExitAt>,
}

/// Finds every exit of the function in `function` and of the fragments it jumps into (and,
/// with `follow`, of the functions it tail-jumps to).
pub(crate) fn find(module: &ElfModule<'_>, function: Region, map: &CodeMap, targets: &Targets, follow: bool) -> Result<FunctionExits, Refusal> {
    let mut out = FunctionExits { code: BTreeMap::new(), exits: Vec::new() };
    let mut todo = vec![function];
    while let Some(region) = todo.pop() {
        if out.code.contains_key(&region.start) {
            continue;
        }
        let bytes = module
            .bytes_from(Svma(region.start))
            .and_then(|b| b.get(..(region.end - region.start) as usize))
            .ok_or(Refusal::Undecodable)?;
        let insns: Vec<Insn> = lopi_x86::decode(bytes, region.start).collect();
        if insns.iter().map(|i| i.len() as u64).sum::<u64>() != region.end - region.start {
            return Err(Refusal::Undecodable);
        }
        let has_indirect = targets.indirect.range(region.start..region.end).next().is_some()
            || targets.indirect.range(function.start..function.end).next().is_some();
        for (index, insn) in insns.iter().enumerate() {
            let cfa = (lopi_x86::flow(insn) == Flow::IndirectJump).then(|| module.cfa_at(Svma(insn.ip()))).flatten();
            match classify(insn, region, function, map, has_indirect, cfa, follow) {
                Class::Inside => {}
                Class::Exit(kind) => out.exits.push(ExitAt { region, index, kind }),
                Class::Fragment(f) => todo.push(f),
                Class::Foreign => return Err(Refusal::JumpsIntoOtherCode),
                Class::IntoLock => return Err(Refusal::ContinuesInLock),
            }
        }
        out.code.insert(region.start, (region, insns));
    }
    Ok(out)
}

/// Exit kinds of instructions in `insns` (moved by an entry site, say).
pub(crate) fn kinds_among(insns: &[Insn], exits: &FunctionExits) -> Vec<(u64, ExitKind)> {
    let ips: Vec<u64> = insns.iter().map(Insn::ip).filter(|&ip| ip != 0).collect();
    exits
        .exits
        .iter()
        .filter_map(|e| {
            let ip = exits.code[&e.region.start].1[e.index].ip();
            ips.contains(&ip).then_some((ip, e.kind))
        })
        .collect()
}

/// Plans the site of one exit. `floor` is the lowest address it may cover (the end of the
/// entry patch or of the previous exit site in the same region). With `syscalls` (system
/// calls are probed too) a `syscall` before the exit may move with it, and gets its probe in
/// the exit's trampoline: in `mov eax, N; syscall; ret` it has no room of its own.
#[allow(clippy::too_many_arguments)]
pub(crate) fn site(
    module: &ElfModule<'_>,
    function: usize,
    exit: &ExitAt,
    insns: &[Insn],
    floor: u64,
    targets: &Targets,
    gaps: &mut Gaps,
    syscalls: bool,
) -> Result<Site, Refusal> {
    let last = &insns[exit.index];
    let mut first = exit.index;
    let mut len = last.len();
    while len < JMP32_LEN && first > 0 {
        let prev = &insns[first - 1];
        let at = module.bytes_from(Svma(prev.ip())).and_then(|b| b.get(..prev.len()));
        let movable = lopi_x86::flow(prev) == Flow::Next || (syscalls && lopi_x86::is_syscall(prev));
        if targets.contains(&insns[first].ip())
            || !movable
            || prev.ip() < floor
            || at.is_none_or(|b| lopi_x86::is_padding(b, prev.ip()))
        {
            break;
        }
        first -= 1;
        len += prev.len();
    }
    let patch_at = Svma(insns[first].ip());
    let terminal = exit.kind != ExitKind::ConditionalTailJump;
    let site = |covered: usize, bounce: Option<Svma>| Site {
        function,
        point: Point::Exit,
        owners: vec![function],
        action: Action::Time,
        patch_at,
        covered,
        moved_from: patch_at,
        moved_len: len,
        relocated: insns[first..=exit.index].to_vec(),
        resume: (!terminal).then(|| Svma(last.next_ip())),
        bounce,
        exits: vec![(last.ip(), exit.kind)],
        nops: Vec::new(),
        copy_from: None,
        copy: None,
        syscalls: Vec::new(),
    };
    if len >= JMP32_LEN {
        return Ok(site(len, None));
    }
    // After a final exit, dead padding may complete the jump.
    let after = last.next_ip();
    let mut covered = len;
    if terminal && gaps.take_at(after, JMP32_LEN - len) {
        return Ok(site(JMP32_LEN, None));
    }
    if terminal && len < JMP8_LEN && gaps.take_at(after, JMP8_LEN - len) {
        covered = JMP8_LEN;
    }
    if covered < JMP8_LEN {
        return Err(Refusal::ExitTooShort);
    }
    let from = patch_at.0 + JMP8_LEN as u64;
    let bounce = gaps
        .take_near(from.saturating_sub(128), from + 127 - JMP32_LEN as u64, JMP32_LEN)
        .ok_or(Refusal::ExitNoBounceSpace)?;
    Ok(site(covered, Some(Svma(bounce))))
}

/// A one-byte `ret` followed directly by another exit of the same region that is a `ret`
/// too: as a `nop` it falls into that exit, with the same effect.
pub(crate) fn falls_into_next_exit(exit: &ExitAt, insns: &[Insn], found: &FunctionExits) -> bool {
    let next = exit.index + 1;
    exit.kind == ExitKind::Return
        && insns[exit.index].len() == 1
        && found.exits.iter().any(|e| e.region == exit.region && e.index == next && e.kind == ExitKind::Return)
}
