//! The calling thread's chunk of the data file as the probes see it (`Thread`): its header,
//! shadow stack, calling-context nodes and trace, found through the TCB word lopi owns.
use crate::abi::{self, ContextNode, Event, Frame, RuntimeVars, ThreadHeader, UnmatchedExit, PAGE_SIZE};
use crate::base::sys;
use crate::base::tcb::{thread_slot, thread_word};
use core::ptr::read_volatile;

pub(crate) struct Thread {
    pub h: *mut ThreadHeader,
    pub base: usize,
}

impl Thread {
    /// The current thread's chunk if it has one of its own already.
    #[inline(always)]
    pub unsafe fn existing(v: *const RuntimeVars) -> Option<Thread> {
        // SAFETY: `v` is this module's variables page; the pid page, once published, is a
        // mapped page; a slot value above the first page is a chunk this runtime mapped.
        unsafe {
            let pid_page = read_volatile(&(*v).pid_page) as *mut u32;
            let t = thread_slot();
            if pid_page.is_null() || t < PAGE_SIZE as usize {
                return None;
            }
            let h = t as *const ThreadHeader;
            let tid_offset = (*v).tid_offset;
            // glibc reuses a finished thread's descriptor (and our slot in it) for a new
            // thread, and a forked child inherits it: the thread id tells them apart.
            let same = if tid_offset != 0 { thread_word(tid_offset) == (*h).tid } else { (*h).pid == read_volatile(pid_page) };
            same.then_some(Thread { h: t as *mut ThreadHeader, base: t })
        }
    }

    pub unsafe fn frame(&self, i: u32) -> *mut Frame {
        // SAFETY: i < stack_cap (callers check); the stack region holds stack_cap frames.
        unsafe { (self.base.wrapping_add((*self.h).stack_offset as usize) + i as usize * abi::FRAME_LEN) as *mut Frame }
    }

    pub unsafe fn node(&self, i: u32) -> *mut ContextNode {
        // SAFETY: i < node_count <= node_cap.
        unsafe { (self.base.wrapping_add((*self.h).nodes_offset as usize) + i as usize * abi::CONTEXT_NODE_LEN) as *mut ContextNode }
    }

    /// The node new calls go under: the top frame's (the merged-paths node under an untimed
    /// frame, whose cache never hits), or the root.
    pub unsafe fn top_node(&self) -> u32 {
        // SAFETY: depth <= stack_cap.
        unsafe {
            let depth = (*self.h).depth;
            if depth == 0 {
                0
            } else {
                (*self.frame(depth - 1)).node
            }
        }
    }

    /// Takes `ticks` spent inside the probes out of every open call: the thread's clock
    /// (frame starts, `last_tsc`, trace events) is the TSC minus the time paused so far. Not
    /// with sampled time, whose clock moves a whole sample at a time: a pause shorter than a
    /// sample would set it back behind frames already open.
    pub unsafe fn pause(&self, ticks: u64) {
        // SAFETY: the header is this thread's.
        unsafe {
            if (*self.h).sample_ticks == 0 {
                (*self.h).paused_ticks = (*self.h).paused_ticks.wrapping_add(ticks);
            }
        }
    }

    /// The thread's clock before pauses: the TSC, or with sampled time the samples' clock
    /// (see `ThreadHeader::sample_clock`).
    #[inline(always)]
    pub unsafe fn clock(&self) -> u64 {
        // SAFETY: the header is this thread's; its timer's handler writes `sample_clock`.
        unsafe {
            let sampled = read_volatile(&(*self.h).sample_clock);
            if sampled != 0 {
                sampled
            } else {
                crate::base::tsc::rdtsc()
            }
        }
    }

    /// True when a call of `func` is open on the shadow stack.
    pub unsafe fn is_open(&self, func: u64) -> bool {
        // SAFETY: frames below depth hold nodes below node_count (or none).
        unsafe {
            (0..(*self.h).depth).any(|i| {
                let f = self.frame(i);
                (*f).flags & abi::FRAME_UNTIMED == 0 && (*self.node((*f).node)).func == func
            })
        }
    }

    /// This thread's open calls as (rsp, function, start in TSC time), outermost first.
    pub unsafe fn open_calls(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        // SAFETY: frames below depth hold nodes below node_count, or are untimed.
        unsafe {
            let paused = (*self.h).paused_ticks;
            (0..(*self.h).depth).filter_map(move |i| {
                let f = self.frame(i);
                ((*f).flags & abi::FRAME_UNTIMED == 0)
                    .then(|| ((*f).rsp, (*self.node((*f).node)).func, (*f).start_tsc.wrapping_add(paused)))
            })
        }
    }

    /// Counts what the full trace could not take at `tsc` (an event, a logged call).
    pub unsafe fn trace_full(&self, tsc: u64) {
        // SAFETY: the header is this thread's; the caller holds `busy`.
        unsafe {
            let h = self.h;
            if (*h).trace_dropped == 0 {
                (*h).first_drop_tsc = tsc;
            }
            (*h).trace_dropped += 1;
        }
    }

    pub unsafe fn record(&self, tsc: u64, node: u32, kind: u32) {
        // SAFETY: trace_len < trace_cap before the write; the trace region holds trace_cap events.
        unsafe {
            let h = self.h;
            let len = (*h).trace_len;
            if len >= (*h).trace_cap {
                if (*h).trace_cap != 0 {
                    self.trace_full(tsc);
                }
                return;
            }
            let e = (self.base + (*h).trace_offset as usize + len as usize * abi::EVENT_LEN) as *mut Event;
            *e = Event { tsc, node, kind };
            (*h).trace_len = len + 1;
        }
    }

    /// Copies the thread's name (`comm`) into the header.
    pub unsafe fn read_name(&self) {
        // SAFETY: PR_GET_NAME writes at most 16 bytes, the size of the field.
        unsafe { sys::call3(sys::PRCTL, sys::PR_GET_NAME, core::ptr::addr_of_mut!((*self.h).comm) as usize, 0) };
    }

    /// Counts an exit of `func` (0: unknown) that matched no frame, by function.
    pub unsafe fn note_unmatched(&self, func: u64) {
        // SAFETY: the table lies in the header page, below the budget state.
        unsafe {
            let h = self.h;
            (*h).unmatched_exits += 1;
            let table = (self.base + abi::UNMATCHED_TABLE as usize) as *mut UnmatchedExit;
            let len = (*h).unmatched_len;
            for i in 0..len {
                let e = table.add(i as usize);
                if (*e).func == func {
                    (*e).count += 1;
                    return;
                }
            }
            if len < abi::UNMATCHED_SLOTS {
                *table.add(len as usize) = UnmatchedExit { func, count: 1 };
                (*h).unmatched_len = len + 1;
            }
        }
    }
}
