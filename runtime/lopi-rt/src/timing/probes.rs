//! The probes' slow paths, called by the stubs with every call-clobbered register saved.
use super::thread::{Child, Thread};
use super::script;
use crate::base::tsc::rdtsc;
use crate::base::vars::{counter, mode_word, vars};
use crate::abi::{self, Frame, RuntimeVars};
use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

/// Counts a call that gets no frame of its own (no timing yet, a nested probe, a full stack,
/// no node) in the function's shared counter, so that counts stay exact.
#[inline(always)]
pub(super) unsafe fn count_untimed(counter: u64) {
    // SAFETY: `counter` is the function's counter slot in its module's RW segment.
    unsafe { asm!("lock inc qword ptr [{}]", in(reg) counter, options(nostack)) };
}

/// True when the budget switched this module's function `index` to counting (a call that
/// began before the switch still reaches the probes).
unsafe fn switched(v: *const RuntimeVars, index: u64) -> bool {
    // SAFETY: every counter index of this module has a mode word.
    unsafe { index < (*v).counter_count && read_volatile(mode_word(v, index)) != abi::mode::TIMED }
}

/// True when `func` names a function of this module that the budget switched to counting.
pub(super) unsafe fn switched_function(v: *const RuntimeVars, func: u64) -> bool {
    let first = counter(0);
    // SAFETY: forwarded.
    func >= first && (func - first) % 8 == 0 && unsafe { switched(v, (func - first) / 8) }
}

/// Entry probe: `index` is the function's counter index (the counter's address is its name
/// in context trees), `rsp` the stack pointer at its entry, `regs` the registers the stub
/// saved. The function's script probes run before its frame opens, so that their time is
/// not the call's.
pub(super) unsafe extern "C" fn probe_enter(index: u64, rsp: u64, regs: *const u64) {
    let v = vars();
    let counter = counter(index);
    // SAFETY: see `begin_entry`.
    unsafe {
        let Some((t, began)) = begin_entry(v, counter, rsp) else { return };
        let (list, _) = script::hooks(v, index);
        if list != 0 {
            script::run(&t, v, list, index, script::Regs::function(regs), rsp, (*t.h).depth, script::Side::Entry);
        }
        enter(&t, v, counter, counter, rsp, began);
        write_volatile(&mut (*t.h).busy, 0);
    }
}

/// The calling thread, made busy: `None`, with the call counted in the shared counter `slot`
/// (if any), when the thread has no state yet or a probe of it is running (a signal handler
/// interrupted it). The caller clears `busy`.
pub(super) unsafe fn claim(v: *const RuntimeVars, slot: Option<u64>) -> Option<Thread> {
    // SAFETY: see `Thread::current`; `busy` keeps a signal handler's probes off the state
    // the probe is changing. The header is only accessed through the raw pointer.
    unsafe {
        let Some(t) = Thread::current(v) else {
            slot.inspect(|&s| count_untimed(s));
            return None;
        };
        let h = t.h;
        if read_volatile(&(*h).busy) != 0 {
            if let Some(s) = slot {
                (*h).nested_skipped += 1;
                count_untimed(s);
            }
            return None;
        }
        write_volatile(&mut (*h).busy, 1);
        Some(t)
    }
}

/// How every entry-side slow path (a function's, a system call's, a contended lock call's)
/// begins: the calling thread, claimed, with the frames at or below `key` closed (left without
/// their exit: longjmp, exceptions, a signal handler's), and the TSC read then. The first
/// probe inside an unclocked call reads its start. `None` as for [`claim`].
pub(super) unsafe fn begin_entry(v: *const RuntimeVars, slot: u64, key: u64) -> Option<(Thread, u64)> {
    // SAFETY: the claimed thread's frames are below `depth`.
    unsafe {
        let t = claim(v, Some(slot))?;
        let h = t.h;
        let began = rdtsc();
        let now = began.wrapping_sub((*h).paused_ticks);
        if (*h).depth > 0 && (*t.frame((*h).depth - 1)).rsp <= key {
            t.unwind_to(key, now, true);
        }
        t.clock_unclocked_top(now);
        Some((t, began))
    }
}

/// How an exit-side slow path (a function's, a lock call's) begins: the calling thread,
/// claimed, with the frames above `key` closed, and the thread clock at `tsc`. `None` when the
/// thread has no state or a probe of it is running: its entry was skipped too (and counted
/// there), or it ends unmatched later. The caller clears `busy`.
pub(super) unsafe fn begin_exit(v: *const RuntimeVars, key: u64, tsc: u64) -> Option<(Thread, u64)> {
    // SAFETY: as in `begin_entry`.
    unsafe {
        let t = claim(v, None)?;
        let now = tsc.wrapping_sub((*t.h).paused_ticks);
        t.unwind_to(key, now, false);
        Some((t, now))
    }
}

/// What a slow path costs beyond the fast path it replaces (about half a call's probe cost,
/// which the report removes per call) is taken out of the open calls. An ordinary slow path
/// takes microseconds: beyond 20 us the thread was descheduled (or took a page fault), which
/// a wall-clock profile charges as it would anywhere else; only growing the tree or stack,
/// adding a node and checking the budget (`heavy`) are taken out whole. Returns the TSC it
/// read, which an entry takes as its call's start (one clock read less: what is left of the
/// probe is a few stores).
pub(super) unsafe fn pause_excess(t: &Thread, began: u64, heavy: bool) -> u64 {
    // SAFETY: the header is this thread's.
    unsafe {
        let h = t.h;
        let now = rdtsc();
        let mut excess = now.wrapping_sub(began).saturating_sub((*h).probe_pair_ticks / 2);
        if !heavy {
            excess = excess.min((*h).tsc_hz / 50_000);
        }
        t.pause(excess);
        now
    }
}

/// When a call's frame starts.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// The clock is read last, so that the probe's own work falls outside the call's time,
    /// and what the probe took beyond a fast path's cost is taken out of the open calls.
    Last,
    /// At this thread-clock time, read earlier in the probe (a lock call's: its work after
    /// that is the lock function's time, a few dozen ns against the clock read it saves).
    At(u64),
    /// Not read: see `abi::FRAME_UNCLOCKED`.
    Unclocked,
}

/// Opens a frame for a call of `name` (a function's counter address, or a system call's
/// name) at `rsp`; a call that gets no timed frame is counted in the shared counter `slot`.
pub(super) unsafe fn enter(t: &Thread, v: *const RuntimeVars, name: u64, slot: u64, rsp: u64, began: u64) {
    // SAFETY: the caller holds `busy`.
    unsafe { enter_under(t, v, t.top_node(), name, slot, rsp, began, Start::Last) }
}

/// [`enter`] with the call's node under `parent` (a lock call's site node, say), starting at
/// `start`; `began` is the TSC when the probe began (unused when `Unclocked`).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn enter_under(t: &Thread, v: *const RuntimeVars, parent: u32, name: u64, slot: u64, rsp: u64, began: u64, start: Start) {
    // SAFETY: the caller holds `busy`; frames and nodes are this thread's.
    unsafe {
        let h = t.h;
        let before = ((*h).node_cap, (*h).stack_cap, (*h).node_count);
        if (*h).depth >= (*h).stack_cap && !t.grow_stack(v) {
            (*h).too_deep += 1;
            count_untimed(slot);
            return;
        }
        let (node, mut flags) = match t.child(v, parent, name) {
            Some(Child::Path(n)) => (n, 0),
            Some(Child::Merged(n)) => (n, abi::FRAME_MERGED | if t.is_open(name) { abi::FRAME_NESTED } else { 0 }),
            None => {
                (*h).untimed_calls += 1;
                count_untimed(slot);
                (abi::MERGED_NODE, abi::FRAME_UNTIMED)
            }
        };
        // A new node touches memory of the data file never touched before: its page fault
        // (which may wait for writeback) is lopi's cost, taken out whole. (An unclocked
        // call's is left in its caller's time: no clock was read to measure it.)
        let heavy = ((*h).node_cap, (*h).stack_cap, (*h).node_count) != before;
        let start_tsc = match start {
            // Read last, so that the probe's own work falls outside the call's time.
            Start::Last => pause_excess(t, began, heavy).wrapping_sub((*h).paused_ticks),
            Start::At(now) => {
                if heavy {
                    pause_excess(t, began, true);
                }
                now
            }
            Start::Unclocked => {
                flags |= abi::FRAME_UNCLOCKED;
                (*h).last_tsc
            }
        };
        let depth = (*h).depth;
        let f = t.frame(depth);
        *f = Frame { rsp, node, flags, start_tsc };
        (*h).depth = depth + 1;
        if flags & abi::FRAME_UNTIMED == 0 {
            t.record((*f).start_tsc, node, abi::EVENT_ENTER);
        }
    }
}

/// Exit probe: `rsp` is the stack pointer at the `ret` (or tail jump), `tsc` the TSC the stub
/// read first, `word` what the probe pushed (`abi::exit_word`: the exiting function's counter
/// index, or a site shared by several functions; a tail call marked), `regs` the registers the
/// stub saved. The function's script probes run once its frame is closed, with the call's time.
pub(super) unsafe extern "C" fn probe_exit(rsp: u64, tsc: u64, word: u32, regs: *const u64) {
    let v = vars();
    // SAFETY: see `begin_exit`.
    unsafe {
        let Some((t, now)) = begin_exit(v, rsp, tsc) else { return };
        let h = t.h;
        let depth = (*h).depth;
        let shared = word & abi::exit_word::SHARED == abi::exit_word::SHARED;
        let mut index = u64::from(word & abi::exit_word::INDEX);
        if depth > 0 && (*t.frame(depth - 1)).rsp == rsp {
            let top = *t.frame(depth - 1);
            if shared {
                // The frame's node names the function.
                index = (*t.node(top.node)).func.wrapping_sub(counter(0)) / 8;
            }
            let elapsed = if top.flags & (abi::FRAME_UNTIMED | abi::FRAME_UNCLOCKED) == 0 { now.saturating_sub(top.start_tsc) } else { 0 };
            t.close_top(now, abi::EVENT_EXIT);
            let (_, list) = script::hooks(v, index);
            if list != 0 {
                script::run_return(&t, v, list, index, word & abi::exit_word::TAIL != 0, script::Regs::function(regs), rsp, depth - 1, elapsed);
            }
        } else if switched(v, index) {
            // Its function was switched to counting as this call began: its trampoline
            // counted the entry, and no frame was made.
        } else if depth == 0 {
            // Every open frame is newer than this call: it began before timing started
            // (an attach, or code run before the module's init).
            (*h).early_exits += 1;
        } else {
            t.note_unmatched(if shared { 0 } else { counter(index) });
        }
        (*h).last_tsc = now;
        let check = tsc >= (*h).next_check_tsc;
        if check {
            super::budget::check(&t, v, tsc);
        }
        pause_excess(&t, tsc, check);
        write_volatile(&mut (*h).busy, 0);
    }
}
