//! Where a module's probe image can go in a running process: free address space from which
//! a `jmp rel32` reaches every byte of the module's code and back.
use crate::procfs::Mapping;

const PAGE: u64 = 4096;
/// `jmp rel32` reaches ±2 GiB from the end of the jump; stay a page inside that.
const REACH: u64 = (1 << 31) - PAGE;
/// The lowest address user mappings may use on default kernels (`vm.mmap_min_addr`).
const LOWEST: u64 = 1 << 16;
/// The top of the x86-64 user address space with 4-level page tables.
const HIGHEST: u64 = 1 << 47;
/// Room left for the heap and the main stack to grow into.
const GROWTH: u64 = 256 << 20;

/// Occupied address ranges: every mapping, with room for the heap to grow from `start_brk`
/// (past `[heap]`) and for the stack below `[stack]`, and a guard page after each mapping.
pub fn occupied(maps: &[Mapping], start_brk: Option<u64>) -> Vec<(u64, u64)> {
    let mut busy: Vec<(u64, u64)> = maps
        .iter()
        .map(|m| if m.path == "[stack]" { (m.start.saturating_sub(GROWTH), m.end) } else { (m.start, m.end + PAGE) })
        .collect();
    if let Some(start) = start_brk {
        let heap_end = maps.iter().filter(|m| m.path == "[heap]").map(|m| m.end).max().unwrap_or(start);
        busy.push((start, heap_end.max(start) + GROWTH));
    }
    busy.push((0, LOWEST));
    busy.sort_unstable();
    busy
}

/// A page-aligned start for `len` bytes, as close to `code` (the module's code range) as
/// possible, such that every byte of the image is within `jmp rel32` reach of every byte of
/// the code. `None` when no such hole exists.
pub fn find_hole(busy: &[(u64, u64)], code: (u64, u64), len: u64) -> Option<u64> {
    let len = len.div_ceil(PAGE) * PAGE;
    let (lo, hi) = code;
    // The image must satisfy start >= hi - REACH and start + len <= lo + REACH.
    let window_lo = hi.saturating_sub(REACH).max(LOWEST).div_ceil(PAGE) * PAGE;
    let window_hi = (lo.checked_add(REACH)?).min(HIGHEST) / PAGE * PAGE;
    let mut best: Option<(u64, u64)> = None;
    let mut consider = |start: u64| {
        if start < window_lo || start.checked_add(len).is_none_or(|end| end > window_hi) {
            return;
        }
        let distance = if start >= hi { start - hi } else { lo.saturating_sub(start + len) };
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, start));
        }
    };
    // Holes between the occupied ranges (which may overlap).
    let mut cursor = 0u64;
    for &(start, end) in busy {
        if start > cursor {
            let (hole_lo, hole_hi) = (cursor.div_ceil(PAGE) * PAGE, start / PAGE * PAGE);
            if hole_hi >= hole_lo + len {
                // The two ends of the hole nearest the code, clamped to the window.
                consider(hole_lo.max(window_lo).max(if hi <= hole_hi { hi.div_ceil(PAGE) * PAGE } else { 0 }).min(hole_hi - len));
                consider((hole_hi - len).min(window_hi.saturating_sub(len)).max(hole_lo));
            }
        }
        cursor = cursor.max(end);
    }
    if HIGHEST > cursor {
        let hole_lo = cursor.div_ceil(PAGE) * PAGE;
        if HIGHEST >= hole_lo + len {
            consider(hole_lo.max(window_lo));
        }
    }
    best.map(|(_, start)| start)
}

/// Whether `len` bytes at `start` (page-aligned) are free and within `jmp rel32` reach of
/// every byte of `code`, as [`find_hole`]'s choices are.
pub fn fits(busy: &[(u64, u64)], code: (u64, u64), start: u64, len: u64) -> bool {
    let len = len.div_ceil(PAGE) * PAGE;
    let Some(end) = start.checked_add(len) else { return false };
    start.is_multiple_of(PAGE)
        && start >= LOWEST.max(code.1.saturating_sub(REACH))
        && end <= HIGHEST.min(code.0.saturating_add(REACH))
        && busy.iter().all(|&(s, e)| end <= s || start >= e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, path: &str) -> Mapping {
        Mapping { start, end, readable: true, executable: false, offset: 0, dev: "00:00".into(), inode: 0, path: path.into() }
    }

    fn reaches(start: u64, len: u64, code: (u64, u64)) -> bool {
        start + len <= code.0 + REACH && start >= code.1.saturating_sub(REACH)
    }

    fn free(busy: &[(u64, u64)], start: u64, len: u64) -> bool {
        busy.iter().all(|&(s, e)| start + len <= s || start >= e)
    }

    #[test]
    fn right_after_a_pie_executable_below_its_heap() {
        let maps = [map(0x5555_5555_4000, 0x5555_5556_0000, "/bin/x"), map(0x7fff_f000_0000, 0x7fff_f002_1000, "[stack]")];
        let busy = occupied(&maps, Some(0x5555_6000_0000));
        let code = (0x5555_5555_5000, 0x5555_5556_0000);
        let at = find_hole(&busy, code, 3 * PAGE).unwrap();
        assert!(free(&busy, at, 3 * PAGE) && reaches(at, 3 * PAGE, code));
        assert!(at < 0x5555_6000_0000 && at.abs_diff(code.0) < 1 << 20, "next to the program, clear of its heap: {at:#x}");
    }

    #[test]
    fn below_packed_libraries() {
        let maps = [
            map(0x7f00_0000_0000, 0x7f00_0010_0000, "/lib/libc.so.6"),
            map(0x7f00_0010_0000, 0x7f00_0020_0000, "/lib/ld.so"),
            map(0x7f00_0020_0000, 0x7fff_0000_0000, "filler"),
        ];
        let busy = occupied(&maps, None);
        let code = (0x7f00_0000_1000, 0x7f00_0008_0000);
        let at = find_hole(&busy, code, 5 * PAGE).unwrap();
        assert_eq!(at + 5 * PAGE, 0x7f00_0000_0000);
        assert!(free(&busy, at, 5 * PAGE) && reaches(at, 5 * PAGE, code));
    }

    #[test]
    fn below_libraries_of_a_real_layout() {
        let maps = crate::procfs::parse_maps(
            "556b00b22000-556b00b24000 r--p 00000000 fe:00 247026 /usr/bin/cat
556b318fe000-556b3191f000 rw-p 00000000 00:00 0 [heap]
7f6ee00ea000-7f6ee010c000 rw-p 00000000 00:00 0
7f6ee016f000-7f6ee0195000 r--p 00000000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
7f6ee0195000-7f6ee02eb000 r-xp 00026000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
7f6ee0342000-7f6ee0344000 rw-p 001d3000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffe8d118000-7ffe8d139000 rw-p 00000000 00:00 0 [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]",
        );
        let busy = occupied(&maps, Some(0x556b_318f_e000));
        let code = (0x7f6e_e019_5000, 0x7f6e_e02e_b000);
        let at = find_hole(&busy, code, 64 * PAGE).unwrap();
        assert!(free(&busy, at, 64 * PAGE) && reaches(at, 64 * PAGE, code));
        assert!(at.abs_diff(code.0) < 4 << 20, "near libc: {at:#x}");
    }

    #[test]
    fn fits_where_free_and_within_reach() {
        let maps = [map(0x5555_5555_4000, 0x5555_5556_0000, "/bin/x")];
        let busy = occupied(&maps, Some(0x5555_6000_0000));
        let code = (0x5555_5555_5000, 0x5555_5556_0000);
        assert!(fits(&busy, code, 0x5555_5550_0000, 4 * PAGE));
        assert!(!fits(&busy, code, 0x5555_5555_2000, 4 * PAGE), "overlaps the program");
        assert!(!fits(&busy, code, 0x5555_5550_0100, PAGE), "not page-aligned");
        assert!(!fits(&busy, code, 0x5555_5555_5000 - REACH - PAGE, PAGE), "out of reach");
        assert!(!fits(&busy, code, u64::MAX - PAGE + 1, 2 * PAGE), "wraps");
    }

    #[test]
    fn none_when_everything_within_reach_is_taken() {
        let maps = [map(0x1_0000_0000, 0x3_0000_0000, "big")];
        let busy = occupied(&maps, None);
        assert_eq!(find_hole(&busy, (0x1_8000_0000, 0x1_8000_1000), PAGE), None);
    }

    #[test]
    fn non_pie_executable_low_in_memory() {
        let maps = [map(0x40_0000, 0x45_0000, "/bin/x")];
        let busy = occupied(&maps, Some(0x50_0000));
        let code = (0x40_1000, 0x44_0000);
        let at = find_hole(&busy, code, 2 * PAGE).unwrap();
        assert!(free(&busy, at, 2 * PAGE) && reaches(at, 2 * PAGE, code) && at >= LOWEST);
    }
}
