//! System-call sites: every `syscall` instruction the module's code decodes to (the planner's
//! sweep, confirmed by decoding its function from the start: never a search for `0f 05`).
//!
//! A site is patched by the same ladder as an exit: the `syscall` moves with its neighbours in
//! its basic block (none of which but the first may be a branch target), first the ones before
//! it, so that the patch usually ends right after the `syscall` (a thread blocked in the call
//! then returns to the first byte after the patch); then the ones after it, up to a `ret` or
//! `jmp`, whose jump may run on into padding; or a `jmp rel8` to a bounce in nearby padding.
//! A `syscall` already among an entry or exit site's moved instructions gets its probe there.
use crate::gaps::Gaps;
use crate::targets::Targets;
use crate::{Action, Outcome, Point, Refusal, Site, Tactic};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{Flow, Insn, JMP32_LEN, JMP8_LEN};
use std::collections::BTreeMap;

/// `Site::function` of a system-call site outside every known function.
pub(crate) const NO_FUNCTION: usize = usize::MAX;

/// One `syscall` instruction of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SyscallSite {
    pub at: Svma,
    /// The function it is in (`None`: a fragment or code no function covers).
    pub function: Option<usize>,
    /// The system call number when the code sets it right before (`mov eax, N`).
    pub nr: Option<u32>,
    /// `Probed`, `Moved` or `Skipped`.
    pub outcome: Outcome,
}

/// The stretch of decoded code a `syscall` lies in: its function, or fragment, or the code
/// between known starts.
struct Region {
    function: Option<usize>,
    start: u64,
    end: u64,
}

fn region_of(module: &ElfModule<'_>, starts: &[u64], ip: u64) -> Option<Region> {
    let start = *starts.get(starts.partition_point(|&s| s <= ip).checked_sub(1)?)?;
    let next = starts.get(starts.partition_point(|&s| s <= ip)).copied().unwrap_or(u64::MAX);
    let function = module.functions.binary_search_by_key(&start, |f| f.addr.0).ok();
    let sized = |size: u64| if size == 0 { next } else { (start + size).min(next) };
    let end = match function {
        Some(f) => sized(module.functions[f].size),
        None => module.fragments.iter().find(|fr| fr.0 .0 == start).map_or(next, |fr| sized(fr.1)),
    };
    let end = module.code_section_of(Svma(ip)).map_or(end, |s| end.min(s.addr.0 + s.size));
    (ip < end).then_some(Region { function, start, end })
}

/// Ranges of original code that planned sites already patch: start -> end.
pub(crate) struct Occupied(BTreeMap<u64, u64>);

impl Occupied {
    pub fn of(sites: &[Site]) -> Self {
        let mut map = BTreeMap::new();
        for s in sites {
            map.insert(s.patch_at.0, s.patch_at.0 + s.covered as u64);
            if let Some(b) = s.bounce {
                map.insert(b.0, b.0 + JMP32_LEN as u64);
            }
        }
        Occupied(map)
    }

    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.0.range(..end).next_back().is_some_and(|(_, &e)| e > start)
    }

    fn add(&mut self, site: &Site) {
        self.0.insert(site.patch_at.0, site.patch_at.0 + site.covered as u64);
        if let Some(b) = site.bounce {
            self.0.insert(b.0, b.0 + JMP32_LEN as u64);
        }
    }
}

/// Plans a site for every `syscall` the sweep found that no entry site moved, after the
/// entry and exit sites (whose ranges and padding it leaves alone).
pub(crate) fn plan(module: &ElfModule<'_>, targets: &Targets, gaps: &mut Gaps, sites: &mut Vec<Site>, wanted: impl Fn(Option<u32>) -> bool) -> Vec<SyscallSite> {
    // Code before a section's first function is decoded from the section's start.
    let starts = crate::functions::code_starts(module, module.code_sections.iter().map(|s| s.addr.0));
    let mut occupied = Occupied::of(sites);
    let moved_by: BTreeMap<u64, usize> = sites
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.relocated.iter().filter(|insn| lopi_x86::is_syscall(insn) && insn.ip() != 0).map(move |insn| (insn.ip(), i)))
        .collect();
    let mut out = Vec::with_capacity(targets.syscalls.len());
    for &ip in &targets.syscalls {
        let Some(region) = region_of(module, &starts, ip) else { continue };
        let insns = decode_to(module, region.start, region.end);
        let Some(k) = insns.iter().position(|i| i.ip() == ip && lopi_x86::is_syscall(i)) else {
            out.push(SyscallSite { at: Svma(ip), function: region.function, nr: None, outcome: Outcome::Skipped(Refusal::Misaligned) });
            continue;
        };
        let nr = static_number(&insns, k, targets);
        if !wanted(nr) && !moved_by.contains_key(&ip) {
            continue;
        }
        let outcome = if let Some(&by) = moved_by.get(&ip) {
            sites[by].syscalls.push(ip);
            Outcome::Moved
        } else if occupied.overlaps(ip, ip + 2) {
            Outcome::Skipped(Refusal::Covered)
        } else {
            match site(module, region.function.unwrap_or(NO_FUNCTION), &insns, k, &occupied, targets, gaps) {
                Ok((site, tactic)) => {
                    occupied.add(&site);
                    sites.push(site);
                    Outcome::Probed(tactic)
                }
                Err(reason) => Outcome::Skipped(reason),
            }
        };
        out.push(SyscallSite { at: Svma(ip), function: region.function, nr, outcome });
    }
    out
}

/// The region's instructions from its start, as far as they decode.
fn decode_to(module: &ElfModule<'_>, start: u64, end: u64) -> Vec<Insn> {
    let Some(bytes) = module.bytes_from(Svma(start)).and_then(|b| b.get(..(end - start) as usize)) else { return Vec::new() };
    lopi_x86::decode(bytes, start).collect()
}

/// `mov eax, N` (or `mov rax, N`) in the same basic block before the `syscall` at `k`, with
/// nothing in between that writes `eax`.
fn static_number(insns: &[Insn], k: usize, targets: &Targets) -> Option<u32> {
    for i in (0..k).rev() {
        let insn = &insns[i];
        if let Some(value) = lopi_x86::sets_rax(insn) {
            return value;
        }
        if lopi_x86::flow(insn) != Flow::Next || targets.contains(&insn.ip()) {
            return None;
        }
    }
    None
}

/// Plans the site of the `syscall` at `insns[k]`, and says how it is patched.
fn site(module: &ElfModule<'_>, function: usize, insns: &[Insn], k: usize, occupied: &Occupied, targets: &Targets, gaps: &mut Gaps) -> Result<(Site, Tactic), Refusal> {
    let (mut first, mut last) = (k, k);
    let mut len = insns[k].len();
    // Before it: plain instructions of the same block.
    while len < JMP32_LEN && first > 0 {
        let prev = &insns[first - 1];
        let bytes = module.bytes_from(Svma(prev.ip())).and_then(|b| b.get(..prev.len()));
        if targets.contains(&insns[first].ip())
            || lopi_x86::flow(prev) != Flow::Next
            || occupied.overlaps(prev.ip(), prev.next_ip())
            || bytes.is_none_or(|b| lopi_x86::is_padding(b, prev.ip()))
        {
            break;
        }
        first -= 1;
        len += prev.len();
    }
    // After it, up to and including a branch or return.
    while len < JMP32_LEN && last + 1 < insns.len() && matches!(lopi_x86::flow(&insns[last]), Flow::Next | Flow::Interrupt) {
        let next = &insns[last + 1];
        let movable = matches!(lopi_x86::flow(next), Flow::Next | Flow::Return | Flow::Jump | Flow::ConditionalJump);
        if targets.contains(&next.ip()) || !movable || occupied.overlaps(next.ip(), next.next_ip()) {
            break;
        }
        last += 1;
        len += next.len();
    }
    let patch_at = Svma(insns[first].ip());
    let terminal = lopi_x86::flow(&insns[last]).is_terminal();
    let after = insns[last].next_ip();
    let make = |covered: usize, bounce: Option<Svma>, tactic: Tactic| {
        let site = Site {
            function,
            point: Point::Syscall(tactic),
            owners: Vec::new(),
            action: Action::Count,
            patch_at,
            covered,
            moved_from: patch_at,
            moved_len: len,
            relocated: insns[first..=last].to_vec(),
            resume: (!terminal).then_some(Svma(after)),
            bounce,
            exits: Vec::new(),
            nops: Vec::new(),
            copy_from: None,
            copy: None,
            syscalls: vec![insns[k].ip()],
        };
        (site, tactic)
    };
    if len >= JMP32_LEN {
        return Ok(make(len, None, Tactic::Jmp32));
    }
    if terminal && !occupied.overlaps(after, after + (JMP32_LEN - len) as u64) && gaps.take_at(after, JMP32_LEN - len) {
        return Ok(make(JMP32_LEN, None, Tactic::Jmp32IntoPadding));
    }
    // `len` >= 2: the `syscall` alone fits a `jmp rel8`.
    let from = patch_at.0 + JMP8_LEN as u64;
    let bounce = gaps.take_near(from.saturating_sub(128), from + 127 - JMP32_LEN as u64, JMP32_LEN).ok_or(Refusal::NoBounceSpace)?;
    Ok(make(len, Some(Svma(bounce)), Tactic::Jmp8ViaBounce))
}
