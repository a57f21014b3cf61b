//! This module's runtime variables and counters, found from `LOPI_DELTAS` (RIP-relative, so
//! that the blob needs no relocation), and each counter's mode word.
use crate::abi::{self, RuntimeVars};
use core::arch::asm;
use core::ptr::read_volatile;

/// Where the rewriter stores the distances from this word to the module's runtime variables
/// and (from the second word) to its counter array: valid from the first instruction, before
/// any init or relocation.
#[no_mangle]
#[used]
pub static LOPI_DELTAS: [i64; 2] = [0, 0];

fn from_delta(slot: *const i64) -> usize {
    // SAFETY: the slot is in the blob's read-only data; volatile so that the compiler does
    // not fold the build-time zero that the rewriter overwrites.
    let delta = unsafe { read_volatile(slot) };
    (slot as isize).wrapping_add(delta as isize) as usize
}

/// The address of `LOPI_DELTAS`, always RIP-relative: a Rust reference to an exported
/// static may go through a GOT slot, which the flat blob cannot have.
pub(crate) fn deltas() -> *const i64 {
    let at: *const i64;
    // SAFETY: computes an address; reads nothing.
    unsafe { asm!("lea {}, [rip + LOPI_DELTAS]", out(reg) at, options(nomem, nostack, preserves_flags)) };
    at
}

pub(crate) fn vars() -> *mut RuntimeVars {
    from_delta(deltas()) as *mut RuntimeVars
}

/// This module's mode word of counter `index` (see `abi::mode`).
pub(crate) fn mode_word(v: *const RuntimeVars, index: u64) -> *mut u32 {
    // SAFETY: reads the counter count the runtime set at init (0 before: then no index is ours).
    let count = unsafe { (*v).counter_count };
    (v as usize + abi::vars::modes_offset(count) as usize + 4 * index as usize) as *mut u32
}

/// Address of counter `index` of this module.
pub(crate) fn counter(index: u64) -> u64 {
    (from_delta(deltas().wrapping_add(1)) as u64).wrapping_add(8 * index)
}

/// Counts a call that gets no frame of its own (no timing yet, a nested probe, a full stack,
/// no node) in the function's shared counter, so that counts stay exact.
#[inline(always)]
pub(crate) unsafe fn count_untimed(counter: u64) {
    // SAFETY: `counter` is the function's counter slot in its module's RW segment.
    unsafe { asm!("lock inc qword ptr [{}]", in(reg) counter, options(nostack)) };
}

/// True when the budget switched this module's function `index` to counting (a call that
/// began before the switch still reaches the probes).
pub(crate) unsafe fn switched(v: *const RuntimeVars, index: u64) -> bool {
    // SAFETY: every counter index of this module has a mode word.
    unsafe { index < (*v).counter_count && read_volatile(mode_word(v, index)) != abi::mode::TIMED }
}


/// True when `func` names a function of this module that the budget switched to counting.
pub(crate) unsafe fn switched_function(v: *const RuntimeVars, func: u64) -> bool {
    let first = counter(0);
    // SAFETY: forwarded.
    func >= first && (func - first) % 8 == 0 && unsafe { switched(v, (func - first) / 8) }
}
