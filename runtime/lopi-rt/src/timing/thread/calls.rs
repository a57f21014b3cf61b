//! How the probes' slow paths begin and end calls: the calling thread claimed (`busy`), the
//! frames left without their exit closed, a call's frame opened under its parent's node and
//! closed at its end, and what a slow path costs taken out of the open calls.
use super::budget_state::switched_here;
use super::chunk::Thread;
use super::tree::Child;
use crate::abi::{self, Frame, RuntimeVars};
use crate::base::vars::{count_untimed, switched_function, vars};
use core::ptr::{read_volatile, write_volatile};

/// The calling thread, made busy: `None`, with the call counted in the shared counter `slot`
/// (if any), when the thread has no state yet or a probe of it is running (a signal handler
/// interrupted it). The caller clears `busy`.
pub(crate) unsafe fn claim(v: *const RuntimeVars, slot: Option<u64>) -> Option<Thread> {
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
/// their exit: longjmp, exceptions, a signal handler's), and its clock read then (`Thread::clock`). The first
/// probe inside an unclocked call reads its start. `None` as for [`claim`].
pub(crate) unsafe fn begin_entry(v: *const RuntimeVars, slot: u64, key: u64) -> Option<(Thread, u64)> {
    // SAFETY: the claimed thread's frames are below `depth`.
    unsafe {
        let t = claim(v, Some(slot))?;
        let h = t.h;
        let began = t.clock();
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
pub(crate) unsafe fn begin_exit(v: *const RuntimeVars, key: u64, tsc: u64) -> Option<(Thread, u64)> {
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
/// probe is a few stores). In the thread's clock before pauses (`Thread::clock`).
pub(crate) unsafe fn pause_excess(t: &Thread, began: u64, heavy: bool) -> u64 {
    // SAFETY: the header is this thread's.
    unsafe {
        let h = t.h;
        let now = t.clock();
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
pub(crate) enum Start {
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
pub(crate) unsafe fn enter(t: &Thread, v: *const RuntimeVars, name: u64, slot: u64, rsp: u64, began: u64) {
    // SAFETY: the caller holds `busy`.
    unsafe { enter_under(t, v, t.top_node(), name, slot, rsp, began, Start::Last) }
}

/// [`enter`] with the call's node under `parent` (a lock call's site node, say), starting at
/// `start`; `began` is the TSC when the probe began (unused when `Unclocked`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn enter_under(t: &Thread, v: *const RuntimeVars, parent: u32, name: u64, slot: u64, rsp: u64, began: u64, start: Start) {
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

impl Thread {
    /// Ends the top frame at `now`.
    pub unsafe fn close_top(&self, now: u64, kind: u32) {
        // SAFETY: depth > 0 (callers check); node indices of timed frames are below node_count.
        unsafe {
            let h = self.h;
            let depth = (*h).depth - 1;
            (*h).depth = depth;
            let f = *self.frame(depth);
            if f.flags & abi::FRAME_UNTIMED != 0 {
                return;
            }
            let n = self.node(f.node);
            if kind == abi::EVENT_UNWIND && switched_function(vars(), (*n).func) {
                // The budget switched its function while it ran: its exit is no longer
                // probed, so when it ended is unknown. (A frame a forked child inherited is
                // its parent's call.)
                if f.flags & abi::FRAME_INHERITED == 0 {
                    count_untimed((*n).func);
                    (*h).switched_open += 1;
                }
                return;
            }
            if kind == abi::EVENT_UNWIND && switched_here(self, (*n).func) {
                // The same, for another module's function, which this thread's budget switched:
                // its counter is that module's (which may be unloaded), so the call is counted
                // in its node, as a call left without its exit probe, with no time.
                if f.flags & abi::FRAME_INHERITED == 0 {
                    (*n).calls += 1;
                    if f.flags & abi::FRAME_MERGED == 0 {
                        (*n).aux += 1;
                    }
                    (*h).switched_open += 1;
                }
                return;
            }
            let start = if f.flags & abi::FRAME_UNCLOCKED != 0 { now } else { f.start_tsc };
            let dt = match now.checked_sub(start) {
                Some(dt) => dt,
                None => {
                    (*h).clock_backwards += 1;
                    0
                }
            };
            if f.flags & abi::FRAME_INHERITED == 0 {
                (*n).calls += 1;
                // A system call's probes are not timing's cost (see `timing/budget.rs`).
                if (*n).func & abi::syscall_name::TAG == 0 {
                    (*h).timed_calls += 1;
                }
                if kind == abi::EVENT_UNWIND && f.flags & abi::FRAME_MERGED == 0 {
                    (*n).aux += 1;
                }
            }
            (*n).ticks = (*n).ticks.wrapping_add(dt);
            if dt > (*n).max_ticks {
                (*n).max_ticks = dt;
            }
            if f.flags & abi::FRAME_MERGED != 0 {
                if f.flags & abi::FRAME_NESTED == 0 {
                    (*n).aux = (*n).aux.wrapping_add(dt);
                }
                // The reader removes the probes' cost of a call from its ancestors through
                // the tree; a merged call is not in the tree, so the clock of every call still
                // open stops for that cost here. What then remains of its probes in the
                // caller's self time is `inner` less than a tree child's (see the reader).
                if depth > 0 {
                    let below = *self.frame(depth - 1);
                    if below.flags & abi::FRAME_UNTIMED == 0 {
                        let p = self.node(below.node);
                        (*p).merged_ticks = (*p).merged_ticks.wrapping_add(dt.saturating_sub((*h).probe_inner_ticks));
                    }
                }
                self.pause((*h).probe_pair_ticks);
            }
            self.record(now, f.node, kind);
        }
    }

    /// A probe at thread-clock time `now` inside an unclocked call (the top frame) is the first
    /// sign that the call did more than find its lock free: its start is taken as now.
    pub unsafe fn clock_unclocked_top(&self, now: u64) {
        // SAFETY: depth <= stack_cap.
        unsafe {
            let depth = (*self.h).depth;
            if depth > 0 {
                let f = self.frame(depth - 1);
                if (*f).flags & abi::FRAME_UNCLOCKED != 0 {
                    (*f).start_tsc = now;
                    (*f).flags ^= abi::FRAME_UNCLOCKED | abi::FRAME_CLOCKED_INSIDE;
                }
            }
        }
    }

    /// Frames whose stack pointer is below `rsp` (or at it, with `inclusive`) are gone.
    pub unsafe fn unwind_to(&self, rsp: u64, now: u64, inclusive: bool) {
        // SAFETY: depth <= stack_cap.
        unsafe {
            while (*self.h).depth > 0 {
                let top = (*self.frame((*self.h).depth - 1)).rsp;
                if top > rsp || (top == rsp && !inclusive) {
                    break;
                }
                self.close_top(now, abi::EVENT_UNWIND);
            }
        }
    }
}
