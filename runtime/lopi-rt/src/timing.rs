//! Timing probes: per-thread shadow stacks and calling-context trees in the data file.
//!
//! A timed trampoline calls `lopi_enter_stub` after counting the call (with the function's
//! file address pushed), and every exit site calls `lopi_exit_stub` right before its `ret`
//! or tail jump. The stubs save every call-clobbered general register (the runtime is
//! built without vector registers, see the blob's build script) and call the Rust probes.
//!
//! A frame is keyed by the stack pointer at its entry, which is also the stack pointer at
//! its `ret`. Any probe that runs at or above a frame's stack pointer proves that frame is
//! gone (longjmp, an exception, a tail call through an unprobed path): it is closed then,
//! so the shadow stack always matches the real one.
//!
//! Per-thread state is found through `fs:0x38`, glibc's `tcbhead_t.unused_vgetcpu_cache`,
//! a word of the thread control block that nothing else uses on x86-64. It points at the
//! thread's chunk, a `MAP_SHARED` mapping of the data file: results survive crashes and
//! `_exit`, and threads never share a cache line on the hot path. A forked child inherits
//! the pointer; the chunk's pid, compared with a wipe-on-fork page, tells it to start its
//! own.
use crate::abi::{self, ContextNode, Event, Frame, RuntimeVars, ThreadHeader, PAGE_SIZE};
use crate::sys;
use core::arch::{asm, global_asm};
use core::mem::offset_of;
use core::ptr::{read_volatile, write_volatile};

/// `fs:` offset of the thread's chunk pointer: 0 = none yet, 1 = being set up or failed.
const THREAD_SLOT: usize = 0x38;

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

fn vars() -> *mut RuntimeVars {
    from_delta(&LOPI_DELTAS[0]) as *mut RuntimeVars
}

/// Address of counter `index` of this module.
fn counter(index: u64) -> u64 {
    (from_delta(&LOPI_DELTAS[1]) as u64).wrapping_add(8 * index)
}

#[inline(always)]
fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdtsc reads the time-stamp counter; no memory, no stack.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

#[inline(always)]
fn thread_slot() -> usize {
    let t: usize;
    // SAFETY: fs points at the thread control block on every glibc thread.
    unsafe { asm!("mov {}, fs:[0x38]", out(reg) t, options(nostack, readonly, preserves_flags)) };
    t
}

/// The u32 at `offset` from the thread pointer.
#[inline(always)]
fn thread_word(offset: u32) -> u32 {
    let w: u32;
    // SAFETY: `offset` is within glibc's thread descriptor (checked when it was found).
    unsafe { asm!("mov {:e}, fs:[{}]", out(reg) w, in(reg) offset as usize, options(nostack, readonly, preserves_flags)) };
    w
}

#[inline(always)]
fn set_thread_slot(t: usize) {
    // SAFETY: writes the TCB word lopi owns (see the module comment).
    unsafe { asm!("mov fs:[0x38], {}", in(reg) t, options(nostack, preserves_flags)) };
}

/// `fs:0x40` (`unused_vgetcpu_cache[1]`): between a fork handler and the child's first
/// probe, the snapshot of the forking thread's open calls; 0 otherwise.
fn fork_slot() -> usize {
    let s: usize;
    // SAFETY: reads the second TCB word lopi owns.
    unsafe { asm!("mov {}, fs:[0x40]", out(reg) s, options(nostack, readonly, preserves_flags)) };
    s
}

fn set_fork_slot(s: usize) {
    // SAFETY: writes the second TCB word lopi owns.
    unsafe { asm!("mov fs:[0x40], {}", in(reg) s, options(nostack, preserves_flags)) };
}

// The stubs' fast paths handle the common cases in a few instructions with six registers
// saved: a call whose context-tree node is the one its parent's last call of this function
// used, and an exit that ends the top frame. Everything else (a new thread, a new calling
// context, frames to close, trace events, a probe interrupting a probe) takes the Rust
// slow path with every call-clobbered register saved.
global_asm!(
    // Called from a timed trampoline as `push <counter index>; call`. After the six pushes:
    // [rsp+56] = counter index, rsp+64 = the function's entry stack pointer.
    ".globl lopi_enter_stub",
    "lopi_enter_stub:",
    "push rax", "push rcx", "push rdx", "push rsi", "push rdi", "push r8",
    "lea rsi, [rip + LOPI_DELTAS]",
    "lea r8, [rsi + 8]",
    "add rsi, [rsi]",
    "add r8, [r8]",
    "mov rdi, qword ptr fs:[0x38]",
    "cmp rdi, 4095",
    "jbe 9f",
    "mov ecx, dword ptr [rsi + {v_tid}]",
    "test ecx, ecx",
    "jz 9f",
    "mov eax, dword ptr fs:[rcx]",
    "cmp eax, dword ptr [rdi + {t_tid}]",
    "jne 9f",
    "cmp dword ptr [rdi + {t_busy}], 0",
    "jne 9f",
    // Busy from here on: a signal handler's probes now skip instead of changing the state
    // this probe reads (a handler that ran before this store has finished its changes).
    "mov dword ptr [rdi + {t_busy}], 1",
    "cmp qword ptr [rdi + {t_trace_cap}], 0",
    "jne 8f",
    "mov ecx, dword ptr [rdi + {t_depth}]",
    "cmp ecx, dword ptr [rdi + {t_stack_cap}]",
    "jae 8f",
    // The function's name in the tree: its counter's address.
    "mov rax, [rsp + 56]",
    "lea rax, [r8 + rax*8]",
    "mov rsi, rdi",
    "add rsi, [rdi + {t_stack}]",
    "xor edx, edx",
    "test ecx, ecx",
    "jz 2f",
    "lea rdx, [rcx + rcx*2]",
    "lea rdx, [rsi + rdx*8 - 24]",
    "lea r8, [rsp + 64]",
    // A frame at or below this entry's stack pointer was left: the slow path closes it.
    "cmp [rdx], r8",
    "jbe 8f",
    "mov edx, dword ptr [rdx + 8]",
    "2:",
    "imul rdx, rdx, {n_len}",
    "add rdx, [rdi + {t_nodes}]",
    "add rdx, rdi",
    "cmp [rdx + {n_cache_func}], rax",
    "jne 8f",
    "mov r8d, dword ptr [rdx + {n_cache_child}]",
    "lea rdx, [rcx + rcx*2]",
    "lea rsi, [rsi + rdx*8]",
    "lea rax, [rsp + 64]",
    "mov [rsi], rax",
    "mov dword ptr [rsi + 8], r8d",
    "inc ecx",
    "mov dword ptr [rdi + {t_depth}], ecx",
    // Read last, so that the probe's own work falls outside the call's time.
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "mov [rsi + 16], rax",
    "mov [rdi + {t_last}], rax",
    "mov dword ptr [rdi + {t_busy}], 0",
    "jmp 3f",
    "8:",
    "mov dword ptr [rdi + {t_busy}], 0",
    "9:",
    "push r9", "push r10", "push r11", "push rbp",
    "mov rbp, rsp",
    "mov rdi, [rbp + 88]",
    "lea rsi, [rbp + 96]",
    "and rsp, -16",
    "call {enter}",
    "mov rsp, rbp",
    "pop rbp", "pop r11", "pop r10", "pop r9",
    "3:",
    "pop r8", "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
    "ret 8",
    // Called right before a `ret` or tail jump. After the six pushes, rsp+56 = the stack
    // pointer at the exit.
    ".globl lopi_exit_stub",
    "lopi_exit_stub:",
    "push rax", "push rcx", "push rdx", "push rsi", "push rdi", "push r8",
    // Read first, for the same reason.
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "lea rsi, [rip + LOPI_DELTAS]",
    "add rsi, [rsi]",
    "mov rdi, qword ptr fs:[0x38]",
    "cmp rdi, 4095",
    "jbe 9f",
    "mov ecx, dword ptr [rsi + {v_tid}]",
    "test ecx, ecx",
    "jz 9f",
    "mov edx, dword ptr fs:[rcx]",
    "cmp edx, dword ptr [rdi + {t_tid}]",
    "jne 9f",
    "cmp dword ptr [rdi + {t_busy}], 0",
    "jne 9f",
    "mov dword ptr [rdi + {t_busy}], 1",
    "cmp qword ptr [rdi + {t_trace_cap}], 0",
    "jne 8f",
    "mov ecx, dword ptr [rdi + {t_depth}]",
    "test ecx, ecx",
    "jz 8f",
    "mov rsi, rdi",
    "add rsi, [rdi + {t_stack}]",
    "lea rdx, [rcx + rcx*2]",
    "lea rsi, [rsi + rdx*8 - 24]",
    "lea rdx, [rsp + 56]",
    "cmp [rsi], rdx",
    "jne 8f",
    // A call a forked child inherited was counted in its parent.
    "cmp dword ptr [rsi + 12], 0",
    "jne 8f",
    "dec ecx",
    "mov dword ptr [rdi + {t_depth}], ecx",
    "mov [rdi + {t_last}], rax",
    "sub rax, [rsi + 16]",
    "mov edx, dword ptr [rsi + 8]",
    "imul rdx, rdx, {n_len}",
    "add rdx, [rdi + {t_nodes}]",
    "add rdx, rdi",
    "inc qword ptr [rdx + {n_calls}]",
    "add [rdx + {n_ticks}], rax",
    "cmp rax, [rdx + {n_max}]",
    "jbe 2f",
    "mov [rdx + {n_max}], rax",
    "2:",
    "mov dword ptr [rdi + {t_busy}], 0",
    "jmp 3f",
    "8:",
    "mov dword ptr [rdi + {t_busy}], 0",
    "9:",
    "push r9", "push r10", "push r11", "push rbp",
    "mov rbp, rsp",
    "lea rdi, [rbp + 88]",
    "mov rsi, rax",
    "and rsp, -16",
    "call {exit}",
    "mov rsp, rbp",
    "pop rbp", "pop r11", "pop r10", "pop r9",
    "3:",
    "pop r8", "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
    "ret",
    // A timed function as the planner makes it, for calibration: the jump into the entry
    // trampoline, the push of its counter index (`rsi`), the entry probe, then a call of
    // itself while `edi` > 0 (probes on a call chain, as in real programs, not only side by
    // side), the jump into the exit site and the exit probe.
    "lopi_calibration_probed:",
    "jmp 4f",
    "4:",
    "push rsi",
    "call lopi_enter_stub",
    "test edi, edi",
    "jz 5f",
    "dec edi",
    "call lopi_calibration_probed",
    "inc edi",
    "jmp 5f",
    "5:",
    "call lopi_exit_stub",
    "ret",
    // The same chain without probes.
    "lopi_calibration_empty:",
    "test edi, edi",
    "jz 6f",
    "dec edi",
    "call lopi_calibration_empty",
    "inc edi",
    "6:",
    "ret",
    enter = sym probe_enter,
    exit = sym probe_exit,
    v_tid = const offset_of!(RuntimeVars, tid_offset),
    t_tid = const offset_of!(ThreadHeader, tid),
    t_busy = const offset_of!(ThreadHeader, busy),
    t_depth = const offset_of!(ThreadHeader, depth),
    t_stack_cap = const offset_of!(ThreadHeader, stack_cap),
    t_trace_cap = const offset_of!(ThreadHeader, trace_cap),
    t_stack = const offset_of!(ThreadHeader, stack_offset),
    t_nodes = const offset_of!(ThreadHeader, nodes_offset),
    t_last = const offset_of!(ThreadHeader, last_tsc),
    n_len = const abi::CONTEXT_NODE_LEN,
    n_cache_func = const offset_of!(ContextNode, cache_func),
    n_cache_child = const offset_of!(ContextNode, cache_child),
    n_calls = const offset_of!(ContextNode, calls),
    n_ticks = const offset_of!(ContextNode, ticks),
    n_max = const offset_of!(ContextNode, max_ticks),
);

extern "C" {
    fn lopi_calibration_probed(depth: u32, counter: u64);
    fn lopi_calibration_empty(depth: u32);
}

struct Thread {
    h: *mut ThreadHeader,
    base: usize,
}

impl Thread {
    /// The current thread's chunk, creating it on first use; `None` when timing is off,
    /// not ready, or the thread is setting up its chunk (a signal handler during that).
    #[inline(always)]
    unsafe fn current(v: *const RuntimeVars) -> Option<Thread> {
        // SAFETY: as in `existing`.
        unsafe {
            if let Some(t) = Self::existing(v) {
                return Some(t);
            }
            let pid_page = read_volatile(&(*v).pid_page) as *mut u32;
            if pid_page.is_null() || thread_slot() == 1 {
                return None;
            }
            new_thread(v, pid_page)
        }
    }

    /// The current thread's chunk if it has one of its own already.
    #[inline(always)]
    unsafe fn existing(v: *const RuntimeVars) -> Option<Thread> {
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

    unsafe fn frame(&self, i: u32) -> *mut Frame {
        // SAFETY: i < stack_cap (callers check); the stack region holds stack_cap frames.
        unsafe { (self.base + (*self.h).stack_offset as usize + i as usize * abi::FRAME_LEN) as *mut Frame }
    }

    unsafe fn node(&self, i: u32) -> *mut ContextNode {
        // SAFETY: i < node_count <= node_cap.
        unsafe { (self.base + (*self.h).nodes_offset as usize + i as usize * abi::CONTEXT_NODE_LEN) as *mut ContextNode }
    }

    /// The child of `parent` for `func`, created if new; the lost-context node when full.
    unsafe fn child(&self, parent: u32, func: u64) -> u32 {
        // SAFETY: the hash table has 2 * node_cap u32 slots (node index + 1, 0 = free), so
        // it is never full and probing ends.
        unsafe {
            let h = self.h;
            let mask = ((*h).node_cap as u64 * 2 - 1) as usize;
            let table = (self.base + (*h).hash_offset as usize) as *mut u32;
            let mut i = ((func ^ (u64::from(parent) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask;
            loop {
                let e = *table.add(i);
                if e == 0 {
                    break;
                }
                let n = self.node(e - 1);
                if (*n).func == func && (*n).parent == parent {
                    self.remember(parent, func, e - 1);
                    return e - 1;
                }
                i = (i + 1) & mask;
            }
            let index = (*h).node_count;
            if index >= (*h).node_cap {
                return abi::LOST_CONTEXT_NODE;
            }
            (*h).node_count = index + 1;
            let n = self.node(index);
            (*n).parent = parent;
            (*n).func = func;
            *table.add(i) = index + 1;
            self.remember(parent, func, index);
            index
        }
    }

    /// Continues a parent's open calls, given outermost first as (rsp, function, start):
    /// paths are rebuilt in this tree and the frames marked inherited (counted in the parent).
    unsafe fn inherit(&self, calls: impl Iterator<Item = (u64, u64, u64)>) {
        // SAFETY: depth stays below this chunk's stack capacity.
        unsafe {
            let mut under = 0;
            for (i, (rsp, func, start)) in calls.take((*self.h).stack_cap as usize).enumerate() {
                let child = self.child(under, func);
                let mine = self.frame(i as u32);
                (*mine).rsp = rsp;
                (*mine).node = child;
                (*mine).inherited = 1;
                (*mine).start_tsc = start;
                (*self.h).depth = i as u32 + 1;
                under = child;
            }
        }
    }

    /// This chunk's open calls as (rsp, function, start), outermost first. The chunk may be
    /// another process's, changing meanwhile: indices are bounds-checked, and a torn frame
    /// only costs time.
    unsafe fn open_calls(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        // SAFETY: the chunk is mapped; node indices are checked against its capacity.
        unsafe {
            let depth = read_volatile(&(*self.h).depth).min((*self.h).stack_cap);
            let nodes = read_volatile(&(*self.h).node_count).min((*self.h).node_cap);
            (0..depth).map_while(move |i| {
                let f = self.frame(i);
                ((*f).node < nodes).then(|| ((*f).rsp, (*self.node((*f).node)).func, (*f).start_tsc))
            })
        }
    }

    /// The parent's one-entry cache, which the entry stub's fast path reads.
    unsafe fn remember(&self, parent: u32, func: u64, child: u32) {
        // SAFETY: parent < node_count.
        unsafe {
            let p = self.node(parent);
            (*p).cache_child = child;
            (*p).cache_func = func;
        }
    }

    unsafe fn record(&self, tsc: u64, node: u32, kind: u32) {
        // SAFETY: trace_len < trace_cap before the write; the trace region holds trace_cap events.
        unsafe {
            let h = self.h;
            let len = (*h).trace_len;
            if len >= (*h).trace_cap {
                if (*h).trace_cap != 0 {
                    if (*h).trace_dropped == 0 {
                        (*h).first_drop_tsc = tsc;
                    }
                    (*h).trace_dropped += 1;
                }
                return;
            }
            let e = (self.base + (*h).trace_offset as usize + len as usize * abi::EVENT_LEN) as *mut Event;
            *e = Event { tsc, node, kind };
            (*h).trace_len = len + 1;
        }
    }

    /// Ends the top frame at `now`.
    unsafe fn close_top(&self, now: u64, kind: u32) {
        // SAFETY: depth > 0 (callers check).
        unsafe {
            let depth = (*self.h).depth - 1;
            (*self.h).depth = depth;
            let f = self.frame(depth);
            let node = (*f).node;
            let n = self.node(node);
            let dt = now.wrapping_sub((*f).start_tsc);
            if (*f).inherited == 0 {
                (*n).calls += 1;
            }
            (*n).ticks = (*n).ticks.wrapping_add(dt);
            if dt > (*n).max_ticks {
                (*n).max_ticks = dt;
            }
            self.record(now, node, kind);
        }
    }

    /// Frames whose stack pointer is below `rsp` (or at it, with `inclusive`) are gone.
    unsafe fn unwind_to(&self, rsp: u64, now: u64, inclusive: bool) {
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

/// Counts a call that gets no node of its own (no timing yet, a nested probe, a full stack
/// or tree) in the function's shared counter, so that counts stay exact.
#[inline(always)]
unsafe fn count_untimed(counter: u64) {
    // SAFETY: `counter` is the function's counter slot in its module's RW segment.
    unsafe { asm!("lock inc qword ptr [{}]", in(reg) counter, options(nostack)) };
}

/// Entry probe: `index` is the function's counter index (the counter's address is its name
/// in context trees), `rsp` the stack pointer at its entry.
unsafe extern "C" fn probe_enter(index: u64, rsp: u64) {
    let v = vars();
    let counter = counter(index);
    // SAFETY: see `Thread::current`; `busy` keeps a signal handler's probes off the state
    // this probe is changing. The header is only accessed through the raw pointer.
    unsafe {
        let Some(t) = Thread::current(v) else {
            count_untimed(counter);
            return;
        };
        let h = t.h;
        if read_volatile(&(*h).busy) != 0 {
            (*h).nested_skipped += 1;
            count_untimed(counter);
            return;
        }
        write_volatile(&mut (*h).busy, 1);
        if (*h).depth > 0 && (*t.frame((*h).depth - 1)).rsp <= rsp {
            // Frames left without their exit (longjmp, exceptions): rare, so the clock is
            // read here only when needed.
            t.unwind_to(rsp, rdtsc(), true);
        }
        let depth = (*h).depth;
        if depth >= (*h).stack_cap {
            (*h).too_deep += 1;
            count_untimed(counter);
        } else {
            let parent = if depth > 0 { (*t.frame(depth - 1)).node } else { 0 };
            let node = t.child(parent, counter);
            if node == abi::LOST_CONTEXT_NODE {
                count_untimed(counter);
            }
            let f = t.frame(depth);
            (*f).rsp = rsp;
            (*f).node = node;
            (*f).inherited = 0;
            (*h).depth = depth + 1;
            // Read last, so that the probe's own work falls outside the call's time.
            let start = rdtsc();
            (*f).start_tsc = start;
            (*h).last_tsc = start;
            t.record(start, node, abi::EVENT_ENTER);
        }
        write_volatile(&mut (*h).busy, 0);
    }
}

/// Exit probe: `rsp` is the stack pointer at the `ret` (or tail jump), `now` the TSC the
/// stub read first.
unsafe extern "C" fn probe_exit(rsp: u64, now: u64) {
    let v = vars();
    // SAFETY: as in `probe_enter`.
    unsafe {
        let Some(t) = Thread::current(v) else { return };
        let h = t.h;
        if read_volatile(&(*h).busy) != 0 {
            // Its entry was skipped too (and counted there), or ends unmatched later.
            return;
        }
        write_volatile(&mut (*h).busy, 1);
        t.unwind_to(rsp, now, false);
        let depth = (*h).depth;
        if depth > 0 && (*t.frame(depth - 1)).rsp == rsp {
            t.close_top(now, abi::EVENT_EXIT);
        } else {
            (*h).unmatched_exits += 1;
        }
        (*h).last_tsc = now;
        write_volatile(&mut (*h).busy, 0);
    }
}

/// Maps a new chunk for the calling thread.
#[cold]
unsafe fn new_thread(v: *const RuntimeVars, pid_page: *mut u32) -> Option<Thread> {
    let old = thread_slot();
    set_thread_slot(1);
    // SAFETY: the variables page is followed by the path page (see `vars::PATH`).
    unsafe {
        let mut pid = read_volatile(pid_page);
        if pid == 0 {
            // A forked child: its wipe-on-fork page came back zeroed.
            pid = sys::call3(sys::GETPID, 0, 0, 0) as u32;
            write_volatile(pid_page, pid);
        }
        let path = (v as usize + abi::vars::PATH as usize) as *const u8;
        let chunk = map_chunk(&*v, path, pid)?;
        let t = Thread { h: chunk, base: chunk as usize };
        if old >= PAGE_SIZE as usize && (*(old as *const ThreadHeader)).pid != pid {
            // A forked child: it is still inside the calls its parent had begun, so it goes
            // on with copies of them and their exits match. The fork handler's snapshot
            // has them as they were at the fork; without it (a forking module that is a
            // library) the parent's live chunk is the best guess. (A new thread on a reused
            // descriptor, same pid, starts empty.)
            let parent_pid = (*(old as *const ThreadHeader)).pid;
            let snapshot = fork_slot() as *const u32;
            if !snapshot.is_null() && *snapshot == parent_pid {
                let depth = *snapshot.add(1) as usize;
                let frames = snapshot.add(2) as *const u64;
                t.inherit((0..depth).map(|i| (*frames.add(3 * i), *frames.add(3 * i + 1), *frames.add(3 * i + 2))));
            } else {
                let parent = Thread { h: old as *mut ThreadHeader, base: old };
                t.inherit(parent.open_calls());
            }
            set_fork_slot(0);
        }
        set_thread_slot(chunk as usize);
        Some(t)
    }
}

/// Appends a chunk to the data file and maps it. Opens the file anew so that `flock`
/// excludes a forked parent or child sharing the init's open file description.
unsafe fn map_chunk(v: &RuntimeVars, path: *const u8, pid: u32) -> Option<*mut ThreadHeader> {
    let [nodes, hash, stack, trace, len] = abi::thread_chunk_layout(v.node_cap, v.stack_cap, v.trace_cap)?;
    // SAFETY: raw syscalls on our own descriptor; the header is written before the lock is
    // released, so a reader never sees the chunk without its length.
    unsafe {
        let fd = sys::call3(sys::OPEN, path as usize, sys::O_RDWR | sys::O_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let fd = fd as usize;
        sys::call3(sys::FLOCK, fd, sys::LOCK_EX, 0);
        let at = sys::call3(sys::LSEEK, fd, 0, sys::SEEK_END);
        let mut mapped = None;
        // Magic and length go in while the lock is held, so that readers can always step
        // over the chunk; the rest reads as an empty chunk until filled in.
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&abi::THREAD_MAGIC);
        head[8..].copy_from_slice(&len.to_le_bytes());
        if at >= 0
            && at as u64 % PAGE_SIZE == 0
            && sys::call3(sys::FTRUNCATE, fd, at as usize + len as usize, 0) == 0
            && crate::pwrite_all(fd, head.as_ptr(), head.len(), at as u64) == 0
        {
            let m = sys::call6(sys::MMAP, 0, len as usize, sys::PROT_READ_WRITE, sys::MAP_SHARED, fd, at as usize);
            if m > 0 {
                let h = &mut *(m as *mut ThreadHeader);
                h.pid = pid;
                h.tid = sys::call3(sys::GETTID, 0, 0, 0) as u32;
                h.space_pid = v.space_pid;
                h.node_cap = v.node_cap;
                h.tsc_hz = v.tsc_hz;
                h.probe_inner_ticks = v.probe_inner_ticks;
                h.probe_pair_ticks = v.probe_pair_ticks;
                h.stack_cap = v.stack_cap;
                h.trace_cap = v.trace_cap;
                h.nodes_offset = nodes;
                h.hash_offset = hash;
                h.stack_offset = stack;
                h.trace_offset = trace;
                h.start_tsc = rdtsc();
                h.node_count = 2; // the root and the lost-context node
                mapped = Some(m as *mut ThreadHeader);
            }
        }
        sys::call3(sys::FLOCK, fd, sys::LOCK_UN, 0);
        sys::call3(sys::CLOSE, fd, 0, 0);
        mapped
    }
}

/// Prepares timing for a module: clock rate, probe cost, capacities, the wipe-on-fork pid
/// page. Publishes `pid_page` last; until then the probes do nothing.
///
/// # Safety
/// `v` is the module's variables page (followed by its path page, already written).
pub unsafe fn enable(v: *mut RuntimeVars, probes: u64, pid: u32, envp: *const *const u8) {
    // SAFETY: the caller's contract; mmap/madvise of a fresh anonymous page.
    unsafe {
        (*v).space_pid = pid;
        (*v).node_cap = env_number(envp, b"LOPI_NODES", 1 << 14, 1 << 24).next_power_of_two() as u32;
        (*v).stack_cap = env_number(envp, b"LOPI_DEPTH", 4096, 1 << 20) as u32;
        (*v).trace_cap =
            if probes & abi::PROBE_TRACE != 0 { env_number(envp, b"LOPI_TRACE_EVENTS", 1 << 20, 1 << 32) } else { 0 };
        (*v).tsc_hz = tsc_hz();
        (*v).tid_offset = crate::glibc_tid_offset().unwrap_or(0);
        let page = sys::call6(sys::MMAP, 0, PAGE_SIZE as usize, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if page <= 0 || (*v).tsc_hz == 0 {
            return;
        }
        if sys::call3(sys::MADVISE, page as usize, PAGE_SIZE as usize, sys::MADV_WIPEONFORK) != 0 {
            // Without it a forked child would write into its parent's chunks.
            crate::write_stderr(b"lopi: this kernel lacks MADV_WIPEONFORK; timing is off\n");
            return;
        }
        write_volatile(page as *mut u32, pid);
        if probes & abi::MODULE_EXECUTABLE != 0 {
            register_fork_handlers(v);
        }
        calibrate(v, page as u64);
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        write_volatile(&mut (*v).pid_page, page as u64);
    }
}

/// Registers `before_fork`/`after_fork_in_parent` with glibc (`__register_atfork`, what
/// `pthread_atfork` calls), with a private snapshot buffer. Only executables do: they are
/// never unloaded, so the handlers never outlive their code.
unsafe fn register_fork_handlers(v: *mut RuntimeVars) {
    type Handler = unsafe extern "C" fn();
    type RegisterAtfork = unsafe extern "C" fn(Option<Handler>, Option<Handler>, Option<Handler>, *mut u8) -> i32;
    let Some([Some(register)]) = crate::libc_symbols([b"__register_atfork\0"]) else { return };
    // SAFETY: a fresh private mapping for the snapshot; `register` is glibc's
    // `__register_atfork`, called with handlers that live as long as the process.
    unsafe {
        let len = abi::page_align(8 + 24 * u64::from((*v).stack_cap)) as usize;
        let buffer = sys::call6(sys::MMAP, 0, len, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if buffer <= 0 {
            return;
        }
        (*v).fork_snapshot = buffer as u64;
        let register: RegisterAtfork = core::mem::transmute(register);
        register(Some(before_fork), Some(after_fork_in_parent), None, core::ptr::null_mut());
    }
}

/// In the forking thread, right before `fork`: copies its open calls into the snapshot and
/// names the snapshot in the thread's TCB, which the child inherits.
unsafe extern "C" fn before_fork() {
    let v = vars();
    // SAFETY: the snapshot buffer holds 8 + 24 * stack_cap bytes; the thread's chunk is its
    // own (tid checked by `Thread::current`).
    unsafe {
        let snapshot = (*v).fork_snapshot as *mut u32;
        let Some(t) = Thread::existing(v) else { return };
        if snapshot.is_null() {
            return;
        }
        let frames = snapshot.add(2) as *mut u64;
        let mut depth = 0;
        for (i, (rsp, func, start)) in t.open_calls().take((*v).stack_cap as usize).enumerate() {
            *frames.add(3 * i) = rsp;
            *frames.add(3 * i + 1) = func;
            *frames.add(3 * i + 2) = start;
            depth = i + 1;
        }
        *snapshot = (*t.h).pid;
        *snapshot.add(1) = depth as u32;
        set_fork_slot(snapshot as usize);
    }
}

/// In the parent, right after `fork`: the snapshot was for the child only.
unsafe extern "C" fn after_fork_in_parent() {
    set_fork_slot(0);
}

/// A decimal environment value, clamped to `1..=max`; `default` when unset or invalid.
fn env_number(envp: *const *const u8, name: &[u8], default: u64, max: u64) -> u64 {
    // SAFETY: envp is the process environment (NULL-terminated, or null).
    let Some(mut p) = (unsafe { crate::getenv(envp, name) }) else { return default };
    let mut n = 0u64;
    // SAFETY: the value is NUL-terminated.
    unsafe {
        while (*p).is_ascii_digit() {
            n = n.saturating_mul(10).saturating_add(u64::from(*p - b'0'));
            p = p.add(1);
        }
        if *p != 0 || n == 0 {
            return default;
        }
    }
    n.min(max)
}

fn monotonic_ns() -> u64 {
    let mut ts = [0u64; 2];
    // SAFETY: clock_gettime(CLOCK_MONOTONIC) into a timespec.
    unsafe { sys::call3(sys::CLOCK_GETTIME, 1, ts.as_mut_ptr() as usize, 0) };
    ts[0].wrapping_mul(1_000_000_000).wrapping_add(ts[1])
}

/// A (TSC, CLOCK_MONOTONIC) pair: the clock read between two TSC reads, from the tightest
/// of several tries, so that a preemption inside one try cannot skew it.
fn clock_pair() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..9 {
        let before = rdtsc();
        let ns = monotonic_ns();
        let after = rdtsc();
        let width = after.wrapping_sub(before);
        if width < best.2 {
            best = (before + width / 2, ns, width);
        }
    }
    (best.0, best.1)
}

/// TSC rate against CLOCK_MONOTONIC over 1 ms windows (bracketed pairs make that precise to
/// ~0.01%); the median of three, so that one window spoiled by preemption does not count.
fn tsc_hz() -> u64 {
    let mut rates = [0u64; 3];
    for rate in rates.iter_mut() {
        let (t0, m0) = clock_pair();
        while monotonic_ns().wrapping_sub(m0) < 1_000_000 {}
        let (t1, m1) = clock_pair();
        let dm = m1.wrapping_sub(m0);
        // Ticks over a few ms times 1e9 stays far below 2^64 (u128 would need a libgcc helper).
        *rate = if dm == 0 || t1 <= t0 { 0 } else { (t1 - t0).checked_mul(1_000_000_000).map_or(0, |n| n / dm) };
    }
    median(&mut rates)
}

/// Measures the probes on chains of timed calls, on a scratch chunk: the ticks they put inside
/// a call's own interval (from the innermost call, which has no callees) and the ticks each
/// call's probes add to its callers. Medians of rounds, so that an interrupt in one round
/// does not count.
unsafe fn calibrate(v: *mut RuntimeVars, pid_page: u64) {
    const ROUNDS: usize = 15;
    const CHAINS: u64 = 25;
    const DEPTH: u32 = 7; // calls per chain: DEPTH + 1
    const CAP: u32 = 16;
    let calls = CHAINS * u64::from(DEPTH + 1);
    let Some([nodes, hash, stack, trace, len]) = abi::thread_chunk_layout(CAP, CAP, 0) else { return };
    // SAFETY: a private scratch mapping laid out like a chunk; the thread slot and
    // `pid_page` are restored before returning, and no other probe of this module runs
    // meanwhile (its init has not returned).
    unsafe {
        let m = sys::call6(sys::MMAP, 0, len as usize, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if m <= 0 {
            return;
        }
        let h = m as *mut ThreadHeader;
        (*h).pid = *(pid_page as *const u32);
        (*h).tid = sys::call3(sys::GETTID, 0, 0, 0) as u32;
        (*h).node_cap = CAP;
        (*h).stack_cap = CAP;
        (*h).nodes_offset = nodes;
        (*h).hash_offset = hash;
        (*h).stack_offset = stack;
        (*h).trace_offset = trace;
        (*h).node_count = 2;
        let saved_slot = thread_slot();
        write_volatile(&mut (*v).pid_page, pid_page);
        set_thread_slot(m as usize);
        let t = Thread { h, base: m as usize };
        // The innermost call's node: root (0), lost (1), then one node per level.
        let innermost = 2 + DEPTH;
        let innermost_ticks = || if (*h).node_count > innermost { (*t.node(innermost)).ticks } else { 0 };
        let mut inner = [0u64; ROUNDS];
        let mut pair = [0u64; ROUNDS];
        for r in 0..ROUNDS {
            let before = innermost_ticks();
            let t0 = rdtsc();
            for _ in 0..CHAINS {
                lopi_calibration_probed(DEPTH, 0);
            }
            let t1 = rdtsc();
            for _ in 0..CHAINS {
                lopi_calibration_empty(DEPTH);
            }
            let t2 = rdtsc();
            inner[r] = innermost_ticks().wrapping_sub(before) / CHAINS;
            pair[r] = (t1 - t0).saturating_sub(t2 - t1) / calls;
        }
        set_thread_slot(saved_slot);
        write_volatile(&mut (*v).pid_page, 0);
        sys::call3(sys::MUNMAP, m as usize, len as usize, 0);
        (*v).probe_inner_ticks = median(&mut inner);
        (*v).probe_pair_ticks = median(&mut pair);
    }
}

fn median(values: &mut [u64]) -> u64 {
    // Insertion sort: a handful of values, and no library sort in the blob.
    for i in 1..values.len() {
        let mut j = i;
        while j > 0 && values[j - 1] > values[j] {
            values.swap(j - 1, j);
            j -= 1;
        }
    }
    values[values.len() / 2]
}
