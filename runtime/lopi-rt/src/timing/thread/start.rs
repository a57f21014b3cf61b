//! A thread's start: its chunk, mapped at its first probe (`Thread::current`), and, in a
//! forked child, the calls its parent had begun, which it goes on with.
use super::budget_state::first_check;
use super::chunk::Thread;
use super::sampling;
use super::tree::Child;
use crate::abi::{self, Frame, RuntimeVars, ThreadHeader, PAGE_SIZE};
use crate::base::data_file::{append, open_data_file};
use crate::base::sys;
use crate::base::tcb::{fork_slot, own_tid, set_fork_slot, set_thread_slot, thread_slot};
use crate::base::tsc::rdtsc;
use crate::timing::records::cpus;
use core::ptr::{read_volatile, write_volatile};

impl Thread {
    /// The current thread's chunk, creating it on first use; `None` when timing is off,
    /// not ready, or the thread is setting up its chunk (a signal handler during that).
    #[inline(always)]
    pub unsafe fn current(v: *const RuntimeVars) -> Option<Thread> {
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

    /// Continues a parent's open calls, given outermost first as (rsp, function, start in TSC
    /// time): paths are rebuilt in this tree and the frames marked inherited (counted in the
    /// parent).
    pub unsafe fn inherit(&self, v: *const RuntimeVars, calls: impl Iterator<Item = (u64, u64, u64)>) {
        // SAFETY: depth stays below this chunk's stack capacity.
        unsafe {
            let mut under = 0;
            for (rsp, func, start) in calls {
                let depth = (*self.h).depth;
                if depth >= (*self.h).stack_cap {
                    break;
                }
                let (node, flags) = match self.child(v, under, func) {
                    Some(Child::Path(n)) => (n, 0),
                    Some(Child::Merged(n)) => (n, abi::FRAME_MERGED),
                    None => break,
                };
                let mine = self.frame(depth);
                // Sampled time: this thread's samples are its own, from its clock's start.
                let start_tsc = if (*self.h).sample_ticks != 0 { (*self.h).sample_clock } else { start.wrapping_sub((*self.h).paused_ticks) };
                *mine = Frame { rsp, node, flags: flags | abi::FRAME_INHERITED, start_tsc };
                (*self.h).depth = depth + 1;
                under = node;
            }
        }
    }
}

/// Maps a new chunk for the calling thread.
#[cold]
unsafe fn new_thread(v: *const RuntimeVars, pid_page: *mut u32) -> Option<Thread> {
    let old = thread_slot();
    set_thread_slot(1);
    // SAFETY: `old`, when above the first page, is a chunk this runtime (or the parent
    // process's) mapped; it stays mapped in a forked child.
    unsafe {
        let mut pid = read_volatile(pid_page);
        if pid == 0 {
            // A forked child: its wipe-on-fork page came back zeroed.
            pid = sys::call3(sys::GETPID, 0, 0, 0) as u32;
            write_volatile(pid_page, pid);
        }
        let Some(chunk) = map_chunk(&*v, pid) else {
            set_thread_slot(old);
            return None;
        };
        let t = Thread { h: chunk, base: chunk as usize };
        // `v` is the module's variables page, which the runtime writes (`vars()`).
        super::dispatch::start(v.cast_mut());
        t.read_name();
        if old >= PAGE_SIZE as usize && (*(old as *const ThreadHeader)).pid != pid {
            // A forked child: it is still inside the calls its parent had begun, so it goes
            // on with copies of them and their exits match. The fork handler's snapshot
            // has them as they were at the fork; without it (a forking module that is a
            // library) the parent's chunk is the best guess, read through the file, since
            // its regions may have moved where this process has no mapping.
            let parent = old as *const ThreadHeader;
            let parent_pid = (*parent).pid;
            let snapshot = fork_slot() as *const u32;
            if !snapshot.is_null() && *snapshot == parent_pid {
                let depth = *snapshot.add(1) as usize;
                let frames = snapshot.add(2) as *const u64;
                t.inherit(v, (0..depth).map(|i| (*frames.add(3 * i), *frames.add(3 * i + 1), *frames.add(3 * i + 2))));
            } else if let Some(fd) = open_data_file(v) {
                t.inherit(v, ParentCalls::new(fd, &*parent));
                sys::call3(sys::CLOSE, fd, 0, 0);
            }
            set_fork_slot(0);
        }
        set_thread_slot(chunk as usize);
        Some(t)
    }
}

/// A parent process's open calls, read from the data file (outermost first, starts in TSC
/// time).
struct ParentCalls {
    fd: usize,
    paused: u64,
    stack_file: u64,
    nodes_file: u64,
    node_count: u32,
    depth: u32,
    next: u32,
}

impl ParentCalls {
    fn new(fd: usize, parent: &ThreadHeader) -> Self {
        // The parent may be changing its header meanwhile: a torn read only costs time.
        ParentCalls {
            fd,
            paused: parent.paused_ticks,
            stack_file: parent.stack_file,
            nodes_file: parent.nodes_file,
            node_count: parent.node_count.min(parent.node_cap),
            depth: parent.depth.min(parent.stack_cap),
            next: 0,
        }
    }

    fn read_u64(&self, at: u64) -> Option<u64> {
        let mut word = [0u8; 8];
        // SAFETY: pread64 (17) into an 8-byte buffer.
        let n = unsafe { sys::call6(17, self.fd, word.as_mut_ptr() as usize, 8, at as usize, 0, 0) };
        (n == 8).then(|| u64::from_le_bytes(word))
    }
}

impl Iterator for ParentCalls {
    type Item = (u64, u64, u64);

    fn next(&mut self) -> Option<Self::Item> {
        while self.next < self.depth {
            let at = self.stack_file + u64::from(self.next) * abi::FRAME_LEN as u64;
            self.next += 1;
            let rsp = self.read_u64(at)?;
            let word = self.read_u64(at + 8)?;
            let (node, flags) = (word as u32, (word >> 32) as u32);
            let start = self.read_u64(at + 16)?;
            if flags & abi::FRAME_UNTIMED != 0 || node >= self.node_count {
                continue;
            }
            let func = self.read_u64(self.nodes_file + u64::from(node) * abi::CONTEXT_NODE_LEN as u64 + 8)?;
            return Some((rsp, func, start.wrapping_add(self.paused)));
        }
        None
    }
}

/// Appends a chunk to the data file and maps it.
unsafe fn map_chunk(v: &RuntimeVars, pid: u32) -> Option<*mut ThreadHeader> {
    let node_cap = INITIAL_NODES.min(v.node_limit);
    let stack_cap = INITIAL_FRAMES.min(v.stack_limit);
    let [nodes, hash, stack, trace, len] = abi::thread_chunk_layout(node_cap, stack_cap, v.trace_cap)?;
    // SAFETY: a fresh mapping of `len` bytes; the rest reads as an empty chunk until filled in.
    unsafe {
        let (m, file) = append(v, abi::THREAD_MAGIC, len)?;
        let h = &mut *(m as *mut ThreadHeader);
        h.pid = pid;
        h.tid = own_tid(v);
        h.space_pid = v.space_pid;
        h.node_limit = v.node_limit;
        h.stack_limit = v.stack_limit;
        h.tsc_hz = v.tsc_hz;
        h.probe_inner_ticks = v.probe_inner_ticks;
        h.probe_pair_ticks = v.probe_pair_ticks;
        h.syscall_inner_ticks = v.syscall_inner_ticks;
        h.syscall_pair_ticks = v.syscall_pair_ticks;
        h.trace_cap = v.trace_cap;
        h.trace_offset = trace;
        h.nodes_offset = nodes;
        h.hash_offset = hash;
        h.stack_offset = stack;
        h.nodes_file = file + nodes;
        h.stack_file = file + stack;
        h.node_cap = node_cap;
        h.stack_cap = stack_cap;
        h.start_tsc = rdtsc();
        h.next_check_tsc = first_check(v, h.start_tsc);
        sampling::start(v, h);
        if let Some((user, system)) = cpus::own_times() {
            let end = (m + abi::THREAD_END as usize) as *mut abi::ThreadEnd;
            write_volatile(&raw mut (*end).start_cpu_ns, user.wrapping_add(system));
            write_volatile(&raw mut (*end).start_runq_ns, cpus::runq_wait(0).unwrap_or(0));
        }
        // The root and the merged-paths node; published last, as readers take 0 as "not ready".
        write_volatile(&mut h.node_count, abi::FIRST_FREE_NODE);
        Some(m as *mut ThreadHeader)
    }
}

/// A new chunk's capacities; both grow up to their limits.
const INITIAL_NODES: u32 = 1 << 14;
const INITIAL_FRAMES: u32 = 4096;
