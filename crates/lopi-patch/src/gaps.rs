//! Alignment padding between functions: bytes no code reaches, where tactic 2 may let a
//! jump run on and tactic 3 may place bounces.
use lopi_elf::{ElfModule, Svma};
use crate::targets::Targets;
use std::collections::BTreeMap;

/// Free padding intervals, `start -> end` (exclusive), never overlapping.
pub struct Gaps {
    free: BTreeMap<u64, u64>,
}

impl Gaps {
    /// Padding is a gap between code of known extent, which ends in a `ret`, `jmp` or trap,
    /// and the next known start that decodes entirely as nop/int3 and that no branch targets.
    pub fn find(module: &ElfModule<'_>, targets: &Targets) -> Self {
        let mut extents: Vec<(u64, u64)> = module
            .functions
            .iter()
            .map(|f| (f.addr.0, f.size))
            .chain(module.fragments.iter().map(|&(a, n)| (a.0, n)))
            .collect();
        extents.sort_unstable();
        let mut free = BTreeMap::new();
        for section in &module.code_sections {
            let section_end = section.addr.0 + section.size;
            let inside: Vec<(u64, u64)> =
                extents.iter().copied().filter(|&(a, _)| a >= section.addr.0 && a < section_end).collect();
            // The furthest known end so far (0 = unknown extent), and where its code starts.
            let (mut reach, mut from) = (0u64, 0u64);
            for (i, &(start, size)) in inside.iter().enumerate() {
                if size == 0 {
                    reach = 0;
                    continue;
                }
                if start + size > reach {
                    (reach, from) = (start + size, start);
                }
                let next = inside.get(i + 1).map_or(section_end, |&(a, _)| a);
                if next > reach && reach > start {
                    let (lo, hi) = (reach, next);
                    let Some(bytes) = module.bytes_from(Svma(lo)).and_then(|b| b.get(..(hi - lo) as usize)) else { continue };
                    if targets.range(lo..hi).next().is_none() && lopi_x86::is_padding(bytes, lo) && !falls_through(module, from, lo) {
                        free.insert(lo, hi);
                    }
                }
            }
        }
        for &(start, size) in extents.iter().filter(|e| e.1 > 0) {
            dead_code_padding(module, start, start + size, targets, &mut free);
        }
        Gaps { free }
    }

    fn remove(&mut self, at: u64, len: usize) {
        let Some((&start, &end)) = self.free.range(..=at).next_back() else { return };
        self.free.remove(&start);
        if start < at {
            self.free.insert(start, at);
        }
        let taken_end = at + len as u64;
        if taken_end < end {
            self.free.insert(taken_end, end);
        }
    }

    /// Adds `[start, end)`, dead code lent by a site (see `lend.rs`), unless it overlaps
    /// free padding already.
    pub fn lend(&mut self, start: u64, end: u64) -> bool {
        let before = self.free.range(..end).next_back().is_some_and(|(_, &e)| e > start);
        if !before {
            self.free.insert(start, end);
        }
        !before
    }

    /// Claims exactly `[at, at+len)` if it is free padding.
    pub fn take_at(&mut self, at: u64, len: usize) -> bool {
        let fits = self.free.range(..=at).next_back().is_some_and(|(_, &end)| at + len as u64 <= end);
        if fits {
            self.remove(at, len);
        }
        fits
    }

    /// Claims `len` free bytes starting somewhere in `[lo, hi]`, at the end of a free
    /// interval: its start, right after some code, is where a jump may need to run on.
    pub fn take_near(&mut self, lo: u64, hi: u64, len: usize) -> Option<u64> {
        let first = self.free.range(..=lo).next_back().map_or(lo, |(&s, _)| s);
        let found = self.free.range(first..=hi).find_map(|(&start, &end)| {
            let at = end.checked_sub(len as u64)?.min(hi);
            (at >= start.max(lo)).then_some(at)
        })?;
        self.remove(found, len);
        Some(found)
    }
}

/// True unless the code from `start` ends at `end` with an instruction that never goes on to
/// the next: hand-written assembly may run on through the padding into the next function
/// (glibc's `__memcpy_chk_avx512_unaligned_erms` ends in `jb __chk_fail` and falls into
/// `__memcpy_avx512_unaligned_erms`). A call that ends a function counts as going on: that
/// it does not return (`abort`) cannot be known here, and this costs 0.1% of libc's probes.
fn falls_through(module: &ElfModule<'_>, start: u64, end: u64) -> bool {
    let Some(bytes) = module.bytes_from(Svma(start)).and_then(|b| b.get(..(end - start) as usize)) else { return true };
    !lopi_x86::decode(bytes, start).last().is_some_and(|i| i.next_ip() == end && lopi_x86::flow(&i).is_terminal())
}

/// Padding inside a function after a `ret`/`jmp` that nothing targets (GCC aligns loop
/// heads and labels with multi-byte nops): dead, so as free as padding between functions.
fn dead_code_padding(module: &ElfModule<'_>, start: u64, end: u64, targets: &Targets, free: &mut BTreeMap<u64, u64>) {
    let Some(bytes) = module.bytes_from(Svma(start)).and_then(|b| b.get(..(end - start) as usize)) else { return };
    let mut after_terminal = false;
    let mut run: Option<u64> = None;
    for insn in lopi_x86::decode(bytes, start) {
        let at = insn.ip();
        let raw = &bytes[(at - start) as usize..(at - start) as usize + insn.len()];
        let dead = (after_terminal || run.is_some()) && !targets.contains(&at) && lopi_x86::is_padding(raw, at);
        match (dead, run) {
            (true, None) => run = Some(at),
            (false, Some(from)) => {
                free.insert(from, at);
                run = None;
            }
            _ => {}
        }
        after_terminal = lopi_x86::flow(&insn).is_terminal();
    }
    if let Some(from) = run {
        free.insert(from, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taking_splits_intervals() {
        let mut g = Gaps { free: BTreeMap::from([(100, 116)]) };
        assert!(g.take_at(100, 3));
        assert!(!g.take_at(101, 1));
        assert_eq!(g.take_near(0, 200, 5), Some(111), "from the end");
        assert_eq!(g.take_near(0, 107, 5), Some(106), "the last start within the window");
        assert_eq!(g.take_near(0, 200, 5), None);
        assert!(g.take_at(103, 3));
        assert!(g.free.is_empty());
    }

    #[test]
    fn lent_room_never_overlaps_padding() {
        let mut g = Gaps { free: BTreeMap::from([(100, 110)]) };
        assert!(!g.lend(105, 120));
        assert!(!g.lend(90, 101));
        assert!(g.lend(110, 120));
        assert_eq!(g.take_near(110, 115, 5), Some(115));
    }
}
