//! A system call's name in a calling-context tree, where functions are named by their
//! counter's address (below 2^47): bit 63 marks a system call, bit 62 one that returned an
//! error, bits 48..58 hold its number, and the low 48 bits the address of its site's counter.

pub const TAG: u64 = 1 << 63;
pub const ERROR: u64 = 1 << 62;
const NR_SHIFT: u32 = 48;
/// Numbers from here on (x32 calls, numbers no kernel has yet) share this one.
pub const NR_OTHER: u64 = 0x3ff;
const SITE_MASK: u64 = (1 << NR_SHIFT) - 1;

/// The name of system call `nr` made at the site whose counter is at `site`.
pub const fn encode(site: u64, nr: u64, error: bool) -> u64 {
    let nr = if nr > NR_OTHER { NR_OTHER } else { nr };
    TAG | if error { ERROR } else { 0 } | nr << NR_SHIFT | (site & SITE_MASK)
}

/// A decoded system-call name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallName {
    /// Runtime address of the site's counter.
    pub site: u64,
    pub nr: u64,
    pub error: bool,
}

/// `None` for a function's name.
pub const fn decode(name: u64) -> Option<SyscallName> {
    if name & TAG == 0 {
        return None;
    }
    Some(SyscallName { site: name & SITE_MASK, nr: (name >> NR_SHIFT) & NR_OTHER, error: name & ERROR != 0 })
}

/// True for a call that returned `-errno` (`rax` in -4095..-1).
pub const fn is_error(result: u64) -> bool {
    result > (-4096i64) as u64
}

/// System calls that never return to the instruction after them: counted when made.
pub const fn never_returns(nr: u64) -> bool {
    matches!(nr, 15 /* rt_sigreturn */ | 60 /* exit */ | 231 /* exit_group */)
}

/// System calls that return 0 in a new child (`clone`, `fork`, `vfork`, `clone3`), which may
/// share the caller's memory and thread pointer: the child leaves the call to its parent.
pub const fn makes_child(nr: u64) -> bool {
    matches!(nr, 56 | 57 | 58 | 435)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_never_look_like_counters() {
        let site = 0x7f12_3456_7890;
        for (nr, error) in [(0, false), (1, true), (435, false), (5000, true)] {
            let name = encode(site, nr, error);
            assert!(name >= 1 << 47);
            assert_eq!(decode(name), Some(SyscallName { site, nr: nr.min(NR_OTHER), error }));
        }
        assert_eq!(decode(site), None);
        assert!(is_error(-4095i64 as u64) && is_error(-1i64 as u64) && !is_error(0) && !is_error(-4096i64 as u64));
    }
}
