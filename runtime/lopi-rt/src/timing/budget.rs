//! The perturbation budget, a share of each thread's CPU time: a thread that mostly waits (a
//! server reading its socket) runs its probes in what CPU time it has, so its wall-clock run
//! would allow them many times what they may cost. Windows are measured by the thread's CPU
//! clock (its CPU time, read from the kernel at each check, in TSC ticks). Every 0.1 ms a
//! thread's exit probe compares what timing cost the thread since its previous check (its
//! timed calls in the window x the measured cost of one call's probes) with the window's
//! share of the budget: three quarters of it, half while the
//! run as a whole is over budget, so that the excess is paid back. When the excess is worth a
//! scan of the calling-context tree, the check sums each function's timed calls and switches
//! the shortest functions (by average call) called since the module's previous scan of the
//! module whose probe made the check to counting, until what that module's calls in the
//! window cost fits its share of the window's target: in proportion to its calls against
//! those of every module whose functions can be switched, once the calls no module can switch
//! (lock holds) are paid for. Each module has its own runtime and switches only its own
//! functions (another module may have been unloaded: its variables are out of reach); its
//! checks come in proportion to its calls, as they run at exits. A function whose calls,
//! lately or on its busiest call path, are so long that its probes cost less than the
//! budget's share of each stays timed: it is what the profile is for; what such functions
//! cost beyond their module's share is then allowed for a while rather than scanned for
//! again. A switch is for good, so one whose probes cost under four times that share waits
//! for the thread's first 10 ms. A switched function counts its calls per CPU as a counting
//! trampoline does: its entry jumps straight to that code and its exit sites get their
//! original code back (`retire::switch_code`), so its time becomes its caller's self time.
//!
//! The thread's budget state (in its header page) has what the checks share and a state per
//! module (`abi::BudgetModule`, up to 16; a further module's functions stay timed) with the
//! module's table, an extension of the chunk with an entry per counter of the module, which
//! keeps what the scans saw of each function and records each switch (when, and the call
//! rate that made it), so readers list every one. The check's own time is taken out of every
//! open call (as any slow path's).
use super::thread::budget_state::{interval, modules, slot};
use super::thread::chunk::Thread;
use crate::abi::{self, BudgetEntry, BudgetModule, BudgetState, RuntimeVars};
use crate::base::tsc::rdtsc;
use crate::base::vars::{counter, mode_word};
use core::ptr::write_volatile;
use core::sync::atomic::{AtomicU32, Ordering};

pub(super) unsafe fn check(t: &Thread, v: *const RuntimeVars, now: u64) {
    // SAFETY: the caller holds `busy`; the state and the module states lie in the header
    // page, a module's table in an extension of `entries` entries and twice as many scratch
    // words.
    unsafe {
        let h = t.h;
        // The exit probe takes this check's time out of the open calls with the rest of its
        // slow path.
        (*h).next_check_tsc = now.saturating_add(interval(&*v));
        if (*v).budget_ppm == 0 {
            // A module rewritten without a budget takes no part: the window goes on.
            return;
        }
        let state = (t.base + abi::BUDGET_STATE as usize) as *mut BudgetState;
        let start = cpu_start(t, v);
        let clock = cpu_clock(t, v, now).unwrap_or(start.saturating_add(now.saturating_sub((*h).start_tsc)));
        if (*state).checks == 0 {
            (*state).last_check_cpu = start;
            (*state).budget_ppm = u64::from((*v).budget_ppm);
        }
        (*state).checks += 1;
        let budget = (*state).budget_ppm;
        let pair = (*h).probe_pair_ticks.max(1);
        let calls = (*h).timed_calls.wrapping_sub((*state).calls_seen);
        let window = clock.saturating_sub((*state).last_check_cpu);
        let elapsed = clock.saturating_sub(start);
        let excess = calls.saturating_mul(pair).saturating_sub(target(budget, (*h).timed_calls.saturating_mul(pair), elapsed, window).saturating_add(floors(t, window, clock)));
        (*state).calls_seen = (*h).timed_calls;
        (*state).last_check_cpu = clock;
        let Some(m) = module(t, v, state) else { return };
        // A scan is worth it when the excess it takes away over the next windows (until the
        // program's phase changes, say eight) is more than a scan costs (a large tree takes long
        // to scan). Scans cost at most 2% of the thread's run, and a quarter of what timing
        // cost beyond the budget so far. A window too short to tell a call rate waits.
        let scan_cost = (*state).scan_ticks / (*state).scans.max(1);
        let over_budget = (*h).timed_calls.saturating_mul(pair).saturating_sub(parts(elapsed, budget));
        let since = clock.saturating_sub((*m).last_scan_cpu);
        let ready = (*m).last_scan_cpu == 0 || since >= (*v).tsc_hz / (1_000_000_000 / abi::BUDGET_MIN_WINDOW_NS);
        if (*m).table_file != 0 && ready && excess.saturating_mul(8) > scan_cost && (*state).scan_ticks <= elapsed / 50 + over_budget / 4 {
            let started = rdtsc();
            let count = (*m).entries as usize;
            let at = t.base.wrapping_add((*m).table_offset as usize);
            let words = at + count * abi::BUDGET_ENTRY_LEN;
            let table = Table {
                entries: core::slice::from_raw_parts_mut(at as *mut BudgetEntry, count),
                scratch: core::slice::from_raw_parts_mut(words as *mut u32, count),
                touched: core::slice::from_raw_parts_mut((words + 4 * count) as *mut u32, count),
            };
            let scratch = table.scratch.as_ptr();
            let (switched, left) = scan(t, v, state, m, table, Clocks { now, cpu: clock, start });
            // What the module's functions that must stay timed cost beyond its share: checks
            // allow it for a while rather than scan again for nothing.
            if left > 0 {
                // With a quarter more, for the short windows' noise.
                write_volatile(&raw mut (*m).floor_ppm, left.saturating_mul(1_250_000) / since.max(1));
                write_volatile(&raw mut (*m).floor_until, clock.saturating_add(50 * interval(&*v)));
            }
            write_volatile(&raw mut (*m).last_scan_cpu, clock.max(1));
            // Changing the switched functions' code is not counted: it is done once for each.
            (*state).scan_ticks += rdtsc().wrapping_sub(started);
            (*state).scans += 1;
            crate::retire::switch_code(v.cast_mut(), core::slice::from_raw_parts(scratch, switched));
        }
    }
}

/// The thread's CPU clock at `now`: its CPU time in TSC ticks (`None` when the kernel does not
/// say). Read from the kernel at most every millisecond (`abi::BudgetClock`): at every 0.1 ms
/// check, the system call would be a cost of its own, and on a loaded machine a point where
/// the thread is preempted inside the probe's time.
unsafe fn cpu_clock(t: &Thread, v: *const RuntimeVars, now: u64) -> Option<u64> {
    // SAFETY: the clock lies in the thread's header page; the variables are this module's.
    unsafe {
        let c = (t.base + abi::BUDGET_CLOCK as usize) as *mut abi::BudgetClock;
        let since = now.saturating_sub((*c).read_tsc);
        if (*c).read_tsc != 0 && since < (*v).tsc_hz / 1000 {
            return Some((*c).read_cpu.saturating_add(since.saturating_mul((*c).rate_q20) >> 20));
        }
        let cpu = ticks_of_ns(crate::timing::records::cpus::own_cpu_ns()?, (*v).tsc_hz);
        // Running all the time until two readings tell.
        let rate = match (*c).read_tsc {
            0 => 1 << 20,
            _ => (cpu.saturating_sub((*c).read_cpu) << 20) / since.max(1),
        };
        write_volatile(&raw mut (*c).read_tsc, now);
        write_volatile(&raw mut (*c).read_cpu, cpu);
        write_volatile(&raw mut (*c).rate_q20, rate.min(1 << 20));
        Some(cpu)
    }
}

/// The thread's CPU clock when its chunk was made (its first probe).
unsafe fn cpu_start(t: &Thread, v: *const RuntimeVars) -> u64 {
    // SAFETY: the thread's end record lies in its header page.
    unsafe {
        let end = (t.base + abi::THREAD_END as usize) as *const abi::ThreadEnd;
        ticks_of_ns(core::ptr::read_volatile(&raw const (*end).start_cpu_ns), (*v).tsc_hz)
    }
}

/// `ns` in ticks of a `hz` clock, without 128-bit arithmetic (a libgcc call the blob cannot
/// link): whole microseconds, then the rest.
fn ticks_of_ns(ns: u64, hz: u64) -> u64 {
    let per_us = hz / 1_000_000;
    (ns / 1000).saturating_mul(per_us).saturating_add(ns % 1000 * per_us / 1000)
}

/// When a check happens: the TSC (for the record of a switch) and the thread's CPU clock now
/// and at its chunk's start (for the budget's windows).
#[derive(Clone, Copy)]
struct Clocks {
    now: u64,
    cpu: u64,
    start: u64,
}

/// This module's state in the thread's budget, made (with its table) at its first check;
/// `None` when every state is taken (its functions then stay timed) or it has no counters.
unsafe fn module(t: &Thread, v: *const RuntimeVars, state: *mut BudgetState) -> Option<*mut BudgetModule> {
    // SAFETY: forwarded; a new state's slot is free and lies in the header page, its table's
    // extension is fresh, zeroed and this thread's.
    unsafe {
        let (counters, entries) = (counter(0), (*v).counter_count);
        if let Some(i) = modules(t).iter().position(|m| m.counters == counters && m.entries == entries) {
            return Some(slot(t, i));
        }
        let used = (*state).modules;
        if entries == 0 {
            return None;
        }
        if used >= abi::BUDGET_MODULE_SLOTS {
            (*state).unkept_checks = (*state).unkept_checks.saturating_add(1);
            return None;
        }
        let m = slot(t, used as usize);
        write_volatile(&raw mut (*m).counters, counters);
        write_volatile(&raw mut (*m).entries, entries);
        // Without a table (the data file cannot grow) the module's functions stay timed.
        if let Some((at, file)) = crate::base::data_file::map_extension(v, abi::budget_table_bytes(entries)) {
            write_volatile(&raw mut (*m).table_offset, at.wrapping_sub(t.base) as u64);
            write_volatile(&raw mut (*m).table_file, file);
        }
        write_volatile(&raw mut (*state).modules, used + 1);
        Some(m)
    }
}

/// What the modules' functions that must stay timed may cost beyond the target in a window
/// of `window` ticks (see `check`).
unsafe fn floors(t: &Thread, window: u64, clock: u64) -> u64 {
    // SAFETY: forwarded.
    unsafe { modules(t).iter().filter(|m| clock < m.floor_until).map(|m| parts(window, m.floor_ppm)).fold(0, u64::saturating_add) }
}

/// The timing cost a window of `window` ticks may have: three quarters of its share of the
/// budget (`ppm`) while the thread's run as a whole (`spent` of `elapsed`) is within it,
/// half while the excess is paid back.
fn target(ppm: u64, spent: u64, elapsed: u64, window: u64) -> u64 {
    let share = |ticks: u64| parts(ticks, ppm);
    if spent > share(elapsed) { share(window) / 2 } else { share(window) * 3 / 4 }
}

/// `ppm` parts per million of `ticks`: in two steps, so that long runs do not overflow.
fn parts(ticks: u64, ppm: u64) -> u64 {
    ticks / 1000 * ppm / 1000
}

/// `part` of `whole` of `amount` (nothing of an empty whole).
fn share(amount: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        0
    } else {
        parts(amount, part.min(whole).saturating_mul(1_000_000) / whole)
    }
}

struct Table<'a> {
    entries: &'a mut [BudgetEntry],
    /// Indices of the candidates to switch.
    scratch: &'a mut [u32],
    /// Indices of the functions a scan found in the tree.
    touched: &'a mut [u32],
}

/// Sums the timed calls of each function of module `m` on all its paths, and those of the
/// other modules' functions; from its second scan on (the first only takes the counts),
/// switches the module's shortest functions (by average call, so that the probes are the
/// largest share of what they measure) until what their timed calls since the previous scan
/// cost, less theirs, is within the module's share of the target. Returns how many it
/// switched (their indices start the table's scratch) and what the module's timed calls in
/// the window still cost beyond its share.
unsafe fn scan(t: &Thread, v: *const RuntimeVars, state: *mut BudgetState, m: *mut BudgetModule, table: Table<'_>, clocks: Clocks) -> (usize, u64) {
    // SAFETY: nodes below `node_count` are initialised; mode words and hooks exist for every
    // counter of this module; the module states are the thread's.
    unsafe {
        let h = t.h;
        let pair = (*h).probe_pair_ticks.max(1);
        let epoch = (*state).checks;
        let entries = table.entries;
        let modules = modules(t);
        let me = &*m;
        // Another module's function whose module has a table: its own checks may switch it.
        let switchable_elsewhere = |func: u64| modules.iter().any(|o| o.table_file != 0 && o.index(func).is_some());
        let (mut others, mut fixed) = (0u64, 0u64);
        let mut touched = 0;
        for n in abi::FIRST_FREE_NODE..(*h).node_count {
            let n = t.node(n);
            let func = (*n).func;
            match me.index(func) {
                Some(i) => {
                    let e = &mut entries[i as usize];
                    if e.epoch != epoch {
                        // One field at a time: adjacent stores may become vector stores, and
                        // the probes' callers do not save vector registers.
                        write_volatile(&raw mut e.epoch, epoch);
                        write_volatile(&raw mut e.calls, 0);
                        write_volatile(&raw mut e.ticks, 0);
                        write_volatile(&raw mut e.path_calls, 0);
                        table.touched[touched] = i as u32;
                        touched += 1;
                    }
                    e.calls += (*n).calls;
                    e.ticks = e.ticks.wrapping_add((*n).ticks);
                    if (*n).calls >= e.path_calls {
                        write_volatile(&raw mut e.path_calls, (*n).calls);
                        write_volatile(&raw mut e.path_ticks, (*n).ticks);
                    }
                }
                // System calls are timed whatever the budget says: their probes are not
                // timing's cost. The merged-paths node names no function.
                None if func == 0 || abi::syscall_name::decode(func).is_some() => {}
                None if switchable_elsewhere(func) => others += (*n).calls,
                None => fixed += (*n).calls,
            }
        }
        // A window that began when the thread had other modules with tables compares counts
        // of a different split: it only takes the counts.
        let decide = me.last_scan_cpu != 0 && me.modules_seen == u64::from((*state).modules);
        let switched = if decide {
            let timed = |i: usize| *mode_word(v, i as u64) == abi::mode::TIMED;
            let mut spent = others.saturating_add(fixed);
            let mut own = 0u64;
            for &i in &table.touched[..touched] {
                let e = &entries[i as usize];
                spent = spent.saturating_add(e.calls);
                if timed(i as usize) {
                    own = own.saturating_add(e.calls.saturating_sub(e.seen_calls));
                }
            }
            let ticks = clocks.cpu.saturating_sub(me.last_scan_cpu).max(1);
            let budget = (*state).budget_ppm;
            let target = target(budget, spent.saturating_mul(pair), clocks.cpu.saturating_sub(clocks.start), ticks);
            // The module's share of the window's target: what the calls no module can switch
            // leave of it, in proportion to the module's calls against those of every module
            // that can switch its own.
            let left = target.saturating_sub(fixed.saturating_sub(me.fixed_seen).saturating_mul(pair));
            let target = share(left, own, own.saturating_add(others.saturating_sub(me.others_seen)));
            let window = Window { cost: own.saturating_mul(pair), target, ticks, now: clocks.now };
            switch(v, h, budget, entries, &table.touched[..touched], table.scratch, window)
        } else {
            (0, 0)
        };
        write_volatile(&raw mut (*m).others_seen, others);
        write_volatile(&raw mut (*m).fixed_seen, fixed);
        write_volatile(&raw mut (*m).modules_seen, u64::from((*state).modules));
        for &i in &table.touched[..touched] {
            let e = &mut entries[i as usize];
            // One field at a time (no vector stores, as above).
            write_volatile(&raw mut e.seen_calls, e.calls);
            write_volatile(&raw mut e.seen_ticks, e.ticks);
        }
        switched
    }
}

/// The window since the previous scan: what its timed calls cost, what they may cost, its
/// length, its end.
struct Window {
    cost: u64,
    target: u64,
    ticks: u64,
    now: u64,
}

/// Switches timed functions `called` in the window, shortest first, until its cost is within
/// its target; returns how many (their indices it leaves at the start of `scratch`) and what
/// is left of the cost beyond the target.
unsafe fn switch(v: *const RuntimeVars, h: *mut abi::ThreadHeader, ppm: u64, entries: &mut [BudgetEntry], called: &[u32], scratch: &mut [u32], window: Window) -> (usize, u64) {
    // SAFETY: mode words and hooks exist for every counter of this module.
    unsafe {
        let Window { mut cost, target, ticks, now } = window;
        if cost <= target {
            return (0, 0);
        }
        let pair = (*h).probe_pair_ticks.max(1);
        // A function whose calls are so long that its probes cost less than the budget's share
        // of each stays timed whatever the rest costs: it is what the profile is for. Long
        // lately or on its busiest call path on the whole is long, so that a function whose
        // calls are long in most of the program's phases is not switched in one where they are
        // short (not its average over all paths: a recursion's outer calls include its inner
        // ones).
        let long = |average: u64| average.saturating_mul(ppm) >= pair.saturating_mul(1_000_000);
        // A switch is for good: a function whose probes cost under four times the budget's share
        // of its calls is switched only once the thread has run for 10 ms, so that a first phase
        // of short calls does not decide for the whole run.
        let early = now.saturating_sub((*h).start_tsc) < (*v).tsc_hz / 100;
        let very = |average: u64| average.saturating_mul(ppm).saturating_mul(4) < pair.saturating_mul(1_000_000);
        let short = |e: &BudgetEntry| {
            let (lately, path) = (window_average(e), e.path_ticks / e.path_calls.max(1));
            !long(lately) && !long(path) && (!early || (very(lately) && very(path)))
        };
        // A function with script probes stays timed: counting would skip its probes.
        let switchable = |i: usize| *mode_word(v, i as u64) == abi::mode::TIMED && super::script::hooks(v, i as u64) == (0, 0);
        // A function called so rarely that its calls are under a thousandth of the excess is
        // not worth switching (nor its code changing): "short and frequent".
        let worth = ((cost - target) / 1000).max(1);
        let mut len = 0;
        for &i in called {
            let e = &entries[i as usize];
            if e.calls.saturating_sub(e.seen_calls).saturating_mul(pair) >= worth && short(e) && switchable(i as usize) {
                scratch[len] = i;
                len += 1;
            }
        }
        let candidates = &mut scratch[..len];
        sort_by_average(candidates, entries);
        let mut switched = 0;
        for k in 0..candidates.len() {
            if cost <= target {
                break;
            }
            let i = candidates[k];
            let e = &mut entries[i as usize];
            let calls = e.calls.saturating_sub(e.seen_calls);
            cost = cost.saturating_sub(calls.saturating_mul(pair));
            // Another thread's check may have switched it meanwhile: that one records it and
            // changes its code.
            if AtomicU32::from_ptr(mode_word(v, u64::from(i))).compare_exchange(abi::mode::TIMED, abi::mode::COUNTING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            candidates[switched] = i;
            switched += 1;
            write_volatile(&raw mut e.func, counter(u64::from(i)));
            write_volatile(&raw mut e.window_calls, calls);
            write_volatile(&raw mut e.window_ticks, ticks);
            write_volatile(&raw mut e.switched_tsc, now);
            (*h).switched += 1;
        }
        (switched, cost.saturating_sub(target))
    }
}

/// A function's average call since the previous scan: calls that once included timed calls
/// of its since switched callees count as long only for as long as they did.
fn window_average(e: &BudgetEntry) -> u64 {
    e.ticks.wrapping_sub(e.seen_ticks) / e.calls.saturating_sub(e.seen_calls).max(1)
}

/// Shell sort of entry indices by average call since the previous scan, shortest first: in
/// place, O(n^1.3)-ish, no recursion.
fn sort_by_average(indices: &mut [u32], entries: &[BudgetEntry]) {
    let key = |i: u32| window_average(&entries[i as usize]);
    let mut gap = 1;
    while gap < indices.len() / 3 {
        gap = gap * 3 + 1;
    }
    while gap > 0 {
        for i in gap..indices.len() {
            let mut j = i;
            while j >= gap && key(indices[j - gap]) > key(indices[j]) {
                indices.swap(j - gap, j);
                j -= gap;
            }
        }
        gap /= 3;
    }
}
