//! The runtime's own system calls, counted by number with the TSC ticks they took in the table
//! at the end of the module's counters region (`abi::own_calls`). Registration maps that
//! region onto the data file, so every thread and every forked process adds to one count,
//! which `lopi report` shows apart from the program's calls. Every call the runtime makes
//! goes through `sys::call6`, which counts it here (the application kernel's proxies count the
//! `clone`, `munmap` and `exit` they make from assembly themselves); only the program's own
//! calls, which those proxies make for it, are not counted (`sys::raw6`).
use crate::abi::own_calls;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU64, Ordering};

/// The table's words: calls and ticks per entry.
const WORDS: usize = (own_calls::LEN / 8) as usize;

fn table() -> usize {
    (super::vars::vars() as usize).wrapping_sub(own_calls::LEN as usize)
}

/// Entry `nr`'s two words.
fn entry(nr: u64) -> (&'static AtomicU64, &'static AtomicU64) {
    let at = table() + own_calls::entry(nr) as usize;
    // SAFETY: the table lies in this module's RW segment (page-aligned, so the words are
    // aligned) for the life of the process: private until registration, then the data file's.
    unsafe { (AtomicU64::from_ptr(at as *mut u64), AtomicU64::from_ptr((at + 8) as *mut u64)) }
}

/// Counts one call of `nr` that took `ticks`.
#[inline(always)]
pub(crate) fn count(nr: usize, ticks: u64) {
    let (calls, time) = entry(nr as u64);
    calls.fetch_add(1, Ordering::Relaxed);
    time.fetch_add(ticks, Ordering::Relaxed);
}

/// The table's address of `nr`'s call count (its ticks follow), for code that counts a call
/// it makes from assembly.
pub(crate) fn entry_address(nr: u64) -> usize {
    table() + own_calls::entry(nr) as usize
}

/// Runs `map`, which maps the data file's table (zeros) over this one, and carries the calls
/// counted until then over into it; returns what `map` did. Nothing else runs this module's
/// code meanwhile: its init has not returned, and its probes count nothing but their counters
/// before it has.
pub(crate) fn carried_over(map: impl FnOnce() -> isize) -> isize {
    let mut copy = MaybeUninit::<[u64; WORDS]>::uninit();
    // SAFETY: the table is `LEN` bytes; the copy is as large; they do not overlap.
    unsafe { super::mem::copy(copy.as_mut_ptr() as usize, table(), own_calls::LEN as usize) };
    let mapped = map();
    if mapped < 0 {
        return mapped;
    }
    let words = copy.as_ptr() as *const u64;
    for nr in 0..own_calls::SLOTS {
        let i = (own_calls::entry(nr) / 8) as usize;
        // SAFETY: the copy filled every word; i + 1 < WORDS.
        let (calls, ticks) = unsafe { (core::ptr::read_volatile(words.add(i)), core::ptr::read_volatile(words.add(i + 1))) };
        if calls != 0 {
            let (c, t) = entry(nr);
            c.fetch_add(calls, Ordering::Relaxed);
            t.fetch_add(ticks, Ordering::Relaxed);
        }
    }
    mapped
}
