//! The perturbation budget's state in a thread's header page (`budget.rs` has the checks that
//! change it): when the thread's next check is due, and the state of each module whose checks
//! may switch its functions.
use super::chunk::Thread;
use crate::abi::{self, BudgetEntry, BudgetModule, BudgetState, RuntimeVars};
use crate::base::tsc::rdtsc;
use core::ptr::read_volatile;

/// When a new thread first checks: soon, so that a short run does not pay for long.
pub(crate) fn first_check(v: &RuntimeVars, start: u64) -> u64 {
    if v.budget_ppm == 0 || v.tsc_hz == 0 {
        u64::MAX
    } else {
        start.saturating_add(interval(v))
    }
}

/// Time between checks: a check that does not scan only compares the thread's timed calls
/// since the previous one with the window's share of the budget.
pub(crate) fn interval(v: &RuntimeVars) -> u64 {
    v.tsc_hz / 10_000
}

/// A new call path: the program may be starting a phase with functions not seen before, so
/// the next check comes soon (with a budget: checks are never due otherwise).
pub(crate) unsafe fn new_path(h: *mut abi::ThreadHeader) {
    // SAFETY: the caller's thread header.
    unsafe {
        let next = (*h).next_check_tsc;
        if next != u64::MAX {
            (*h).next_check_tsc = next.min(rdtsc().saturating_add((*h).tsc_hz / 50_000));
        }
    }
}

/// The thread's module states in use (a reader's view: they change through [`slot`]).
pub(crate) unsafe fn modules<'a>(t: &Thread) -> &'a [BudgetModule] {
    // SAFETY: the states lie in the caller's thread's header page; `modules` counts those
    // written.
    unsafe {
        let used = (*((t.base + abi::BUDGET_STATE as usize) as *const BudgetState)).modules.min(abi::BUDGET_MODULE_SLOTS);
        core::slice::from_raw_parts(slot(t, 0), used as usize)
    }
}

/// The thread's module state `i`.
pub(crate) fn slot(t: &Thread, i: usize) -> *mut BudgetModule {
    (t.base + abi::BUDGET_MODULES as usize + i * abi::BUDGET_MODULE_LEN) as *mut BudgetModule
}

/// True when this thread's budget switched `func`, a function of another module than the
/// caller's (whose mode words are its runtime's, out of reach: see `abi::BUDGET_STATE`).
pub(crate) unsafe fn switched_here(t: &Thread, func: u64) -> bool {
    // SAFETY: forwarded; a table has an entry per counter of its module.
    unsafe {
        modules(t).iter().filter(|m| m.table_file != 0).find_map(|m| m.index(func).map(|i| (m, i))).is_some_and(|(m, i)| {
            let e = t.base.wrapping_add(m.table_offset as usize) + i as usize * abi::BUDGET_ENTRY_LEN;
            read_volatile(&(*(e as *const BudgetEntry)).switched_tsc) != 0
        })
    }
}
