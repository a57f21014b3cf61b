//! The perturbation budget: every so often a thread's exit probe estimates what timing costs
//! this thread (timed calls x the measured cost of one call's probes, over the thread's run
//! time so far) and, when that is above the budget, switches this module's shortest timed
//! functions that cost a noticeable part of it to counting until the estimate fits, with
//! some margin. A switched function's trampoline then counts its calls per CPU, as a counting
//! trampoline does, and skips its exit probes, so its time becomes its caller's self time.
//! Each switch is logged in the thread's header page; the check's own time is taken out of
//! every open call (as any slow path's).
use super::thread::Thread;
use super::{counter, mode_word, rdtsc};
use crate::abi::{self, RuntimeVars, Switch};
use crate::sys;
use core::ptr::{read_volatile, write_volatile};

/// When a new thread first checks: soon, so that a short run does not pay for long.
pub(super) fn first_check(v: &RuntimeVars, start: u64) -> u64 {
    if v.budget_ppm == 0 || v.tsc_hz == 0 {
        u64::MAX
    } else {
        start.saturating_add(v.tsc_hz / 1000)
    }
}

/// One function's timed calls in this thread, and their durations.
#[derive(Clone, Copy)]
struct Entry {
    func: u64,
    calls: u64,
    ticks: u64,
}

pub(super) unsafe fn check(t: &Thread, v: *const RuntimeVars, now: u64) {
    // SAFETY: the caller holds `busy`; the scratch table is a private mapping of `cap`
    // entries, unmapped before returning.
    unsafe {
        let h = t.h;
        let started = rdtsc();
        let elapsed = now.saturating_sub((*h).start_tsc).max(1);
        let nodes = (*h).node_count;
        let cap = (nodes as usize * 2).next_power_of_two().max(64);
        let bytes = cap * core::mem::size_of::<Entry>();
        let m = sys::call6(sys::MMAP, 0, bytes, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if m > 0 {
            let table = core::slice::from_raw_parts_mut(m as *mut Entry, cap);
            for i in abi::FIRST_FREE_NODE..nodes {
                let n = t.node(i);
                add(table, (*n).func, (*n).calls, (*n).ticks);
            }
            decide(t, v, table, now, elapsed);
            sys::call3(sys::MUNMAP, m as usize, bytes, 0);
        }
        // The exit probe takes this time out of the open calls with the rest of its slow path.
        let cost = rdtsc().wrapping_sub(started);
        // Every 2 ms, so that a phase of the program that calls new short functions is caught
        // early, but never costing more than 2% of the run (a large tree takes longer to scan).
        let interval = ((*v).tsc_hz / 500).max(cost.saturating_mul(50));
        (*h).next_check_tsc = now.saturating_add(interval);
    }
}

fn add(table: &mut [Entry], func: u64, calls: u64, ticks: u64) {
    let mask = table.len() - 1;
    let mut i = (func.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask;
    loop {
        let e = &mut table[i];
        if e.func == func || e.func == 0 {
            e.func = func;
            e.calls += calls;
            e.ticks = e.ticks.wrapping_add(ticks);
            return;
        }
        i = (i + 1) & mask;
    }
}

/// Switches this module's shortest functions (by average call, so that the probes are the
/// largest share of what they measure) among those whose timing costs a noticeable part of the
/// excess, until the thread's estimated timing cost is below three quarters of the budget.
unsafe fn decide(t: &Thread, v: *const RuntimeVars, table: &mut [Entry], now: u64, elapsed: u64) {
    // SAFETY: slots of this module's counters lie in its table after the variables.
    unsafe {
        let h = t.h;
        let pair = (*h).probe_pair_ticks.max(1);
        let first = counter(0);
        let count = (*v).counter_count;
        let mine = |func: u64| func >= first && (func - first) / 8 < count && (func - first) % 8 == 0;
        let slot = |func: u64| mode_word(v, (func - first) / 8);
        // A function with script probes stays timed: counting would skip its probes.
        let scripted = |func: u64| super::script::hooks(v, (func - first) / 8) != (0, 0);
        // System calls are timed whatever the budget says: their probes are not timing's cost.
        let timed = |func: u64| abi::syscall_name::decode(func).is_none() && (!mine(func) || *slot(func) == abi::mode::TIMED);
        let mut cost: u64 = table.iter().filter(|e| e.func != 0 && timed(e.func)).map(|e| e.calls.saturating_mul(pair)).fold(0, u64::saturating_add);
        // In two steps, so that long runs do not overflow.
        let allowed = elapsed / 1000 * u64::from((*v).budget_ppm) / 1000;
        let target = allowed * 3 / 4;
        if cost <= allowed {
            return;
        }
        // This module's timed functions whose timing costs a noticeable part of the excess,
        // shortest first, moved to the front of the table and sorted there (no allocator).
        let worth = (cost - target) / 100;
        let mut len = 0;
        for i in 0..table.len() {
            let e = table[i];
            if e.func != 0 && e.calls > 0 && e.calls.saturating_mul(pair) >= worth && mine(e.func) && *slot(e.func) == abi::mode::TIMED && !scripted(e.func) {
                swap(table, len, i);
                len += 1;
            }
        }
        let candidates = &mut table[..len];
        sort_by_average(candidates);
        for e in candidates.iter() {
            if cost <= target {
                break;
            }
            write_volatile(slot(e.func), abi::mode::COUNTING);
            cost = cost.saturating_sub(e.calls.saturating_mul(pair));
            log(t, Switch { tsc: now, func: e.func, calls: e.calls, window_ticks: elapsed });
        }
    }
}

/// Swaps two entries one word at a time: a whole-entry copy may be compiled to vector
/// moves, and the probes' callers do not save vector registers (the blob's build checks).
fn swap(entries: &mut [Entry], i: usize, j: usize) {
    if i == j {
        return;
    }
    let (a, b) = (&raw mut entries[i], &raw mut entries[j]);
    // SAFETY: two distinct, valid entries of the slice.
    unsafe {
        for field in [core::mem::offset_of!(Entry, func), core::mem::offset_of!(Entry, calls), core::mem::offset_of!(Entry, ticks)] {
            let (x, y) = ((a as *mut u8).add(field) as *mut u64, (b as *mut u8).add(field) as *mut u64);
            let t = read_volatile(x);
            write_volatile(x, read_volatile(y));
            write_volatile(y, t);
        }
    }
}

/// Shell sort by average call duration, shortest first: in place, O(n^1.3)-ish, no recursion.
fn sort_by_average(entries: &mut [Entry]) {
    let key = |e: &Entry| e.ticks / e.calls.max(1);
    let mut gap = 1;
    while gap < entries.len() / 3 {
        gap = gap * 3 + 1;
    }
    while gap > 0 {
        for i in gap..entries.len() {
            let mut j = i;
            while j >= gap && key(&entries[j - gap]) > key(&entries[j]) {
                swap(entries, j - gap, j);
                j -= gap;
            }
        }
        gap /= 3;
    }
}

unsafe fn log(t: &Thread, switch: Switch) {
    // SAFETY: the log lies in the header page after the unmatched-exit table.
    unsafe {
        let h = t.h;
        let len = (*h).switch_len;
        if len >= abi::SWITCH_SLOTS {
            (*h).switches_dropped += 1;
            return;
        }
        *((t.base + abi::SWITCH_LOG as usize) as *mut Switch).add(len as usize) = switch;
        (*h).switch_len = len + 1;
    }
}
