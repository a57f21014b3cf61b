//! One thread's timing state: its chunk of the data file, the calling-context tree and the
//! shadow stack, which grow into extensions of the data file as the program needs them.
//!
//! Regions grow by doubling: the thread appends an extension, copies the region there and
//! points its header at it (file offset first, then capacity, for readers; memory offset for
//! the probes). The slow path that grows them takes its time out of every open call. At its limit
//! the tree stops adding call paths: further calls are timed in one node per function under
//! the merged-paths node (exact calls, self and inclusive time per function; their parent's
//! self time excludes them). Merged nodes have room for 2^20 functions beyond the limit;
//! only past that would calls be counted untimed.
use crate::base::data_file::{append, map_extension, open_data_file};
use crate::base::mem::copy;
use crate::base::tcb::{fork_slot, own_tid, set_fork_slot, set_thread_slot, thread_slot, thread_word};
use crate::base::tsc::rdtsc;
use crate::base::vars::vars;
use crate::abi::{self, ContextNode, Event, Frame, RuntimeVars, ThreadHeader, UnmatchedExit, PAGE_SIZE};
use crate::base::sys;
use core::ptr::{read_volatile, write_volatile};

pub(super) struct Thread {
    pub h: *mut ThreadHeader,
    pub base: usize,
}

/// The node a call gets.
#[derive(Clone, Copy)]
pub(super) enum Child {
    /// Its own call path.
    Path(u32),
    /// Its function's merged node: the tree is at its limit.
    Merged(u32),
}

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

    unsafe fn hash(&self) -> *mut u32 {
        // SAFETY: the hash table has 2 * node_cap slots.
        unsafe { self.base.wrapping_add((*self.h).hash_offset as usize) as *mut u32 }
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

    /// The node of a call of `func` under `parent`, created if new, and remembered in the
    /// parent's cache; `None` when not even a merged node fits.
    pub unsafe fn child(&self, v: *const RuntimeVars, parent: u32, func: u64) -> Option<Child> {
        // SAFETY: as in `child_uncached`.
        unsafe {
            let found = self.child_uncached(v, parent, func)?;
            if let Child::Path(n) = found {
                self.remember(parent, func, n);
            }
            Some(found)
        }
    }

    /// [`Thread::child`], leaving the parent's cache as it is.
    pub unsafe fn child_uncached(&self, v: *const RuntimeVars, parent: u32, func: u64) -> Option<Child> {
        // SAFETY: parent < node_count; the tree is this thread's.
        unsafe {
            if parent == abi::MERGED_NODE || (*self.node(parent)).parent == abi::MERGED_NODE {
                // Under a merged call, paths are merged too.
                return self.merged(v, func).map(Child::Merged);
            }
            if let Some(found) = self.lookup(parent, func) {
                return Some(Child::Path(found));
            }
            let h = self.h;
            let limit = (*h).node_limit;
            // Room kept for merged nodes, one per function, once paths stop.
            if (*h).node_count >= limit - limit / 16 {
                return self.merged(v, func).map(Child::Merged);
            }
            if (*h).node_count >= (*h).node_cap && !self.grow_tree(v) {
                return self.merged(v, func).map(Child::Merged);
            }
            Some(Child::Path(self.insert(parent, func)))
        }
    }

    /// The merged node of `func`, created if new.
    unsafe fn merged(&self, v: *const RuntimeVars, func: u64) -> Option<u32> {
        // SAFETY: as in `child`.
        unsafe {
            if let Some(found) = self.lookup(abi::MERGED_NODE, func) {
                return Some(found);
            }
            let h = self.h;
            if (*h).node_count >= (*h).node_cap && !self.grow_tree(v) {
                return None;
            }
            if (*h).merged_from == 0 {
                (*h).merged_from = (*h).node_count;
            }
            Some(self.insert(abi::MERGED_NODE, func))
        }
    }

    unsafe fn lookup(&self, parent: u32, func: u64) -> Option<u32> {
        // SAFETY: the hash table has 2 * node_cap u32 slots (node index + 1, 0 = free) and at
        // most node_cap are used, so probing ends.
        unsafe {
            let mask = (*self.h).node_cap as usize * 2 - 1;
            let table = self.hash();
            let mut i = abi::node_slot(parent, func, mask);
            loop {
                let e = *table.add(i);
                if e == 0 {
                    return None;
                }
                let n = self.node(e - 1);
                if (*n).func == func && (*n).parent == parent {
                    return Some(e - 1);
                }
                i = (i + 1) & mask;
            }
        }
    }

    /// Adds a node (callers made sure there is room) and its hash entry.
    unsafe fn insert(&self, parent: u32, func: u64) -> u32 {
        // SAFETY: node_count < node_cap (callers); the table's probing ends as in `lookup`.
        unsafe {
            let h = self.h;
            let index = (*h).node_count;
            (*h).node_count = index + 1;
            let n = self.node(index);
            (*n).parent = parent;
            (*n).func = func;
            self.hash_in(parent, func, index);
            super::budget::new_path(h);
            index
        }
    }

    unsafe fn hash_in(&self, parent: u32, func: u64, index: u32) {
        // SAFETY: as in `insert`.
        unsafe {
            let mask = (*self.h).node_cap as usize * 2 - 1;
            let table = self.hash();
            let mut i = abi::node_slot(parent, func, mask);
            while *table.add(i) != 0 {
                i = (i + 1) & mask;
            }
            *table.add(i) = index + 1;
        }
    }

    /// The parent's one-entry cache, which the entry stub's fast path reads. Merged nodes
    /// are never cached (nor cache owners), so calls under and into them take the slow path.
    pub unsafe fn remember(&self, parent: u32, func: u64, child: u32) {
        // SAFETY: parent < node_count.
        unsafe {
            let p = self.node(parent);
            (*p).cache_child = child;
            (*p).cache_func = func;
        }
    }

    /// Doubles the tree (up to its limit) into an extension. False when it cannot.
    unsafe fn grow_tree(&self, v: *const RuntimeVars) -> bool {
        // SAFETY: the new region is a fresh mapping of `new_cap` nodes and their hash table;
        // the old one is unmapped only after the header points at the new one, and nothing
        // else holds pointers into it (the probes recompute addresses from the header).
        unsafe {
            let h = self.h;
            let old_cap = (*h).node_cap;
            let new_cap = old_cap.saturating_mul(2).min(tree_cap_limit((*h).node_limit));
            if new_cap <= old_cap {
                return false;
            }
            let [node_bytes, hash_bytes] = abi::tree_bytes(new_cap);
            let Some((at, file)) = map_extension(v, node_bytes + hash_bytes) else { return false };
            let count = (*h).node_count as usize;
            copy(at, self.node(0) as usize, count * abi::CONTEXT_NODE_LEN);
            let [old_node_bytes, old_hash_bytes] = abi::tree_bytes(old_cap);
            let old_at = self.node(0) as usize;
            let old_in_extension = !self.in_chunk((*h).nodes_offset);
            let old_file = (*h).nodes_file;
            write_volatile(&mut (*h).nodes_file, file);
            write_volatile(&mut (*h).node_cap, new_cap);
            (*h).nodes_offset = at.wrapping_sub(self.base) as u64;
            (*h).hash_offset = (at + node_bytes as usize).wrapping_sub(self.base) as u64;
            for i in abi::FIRST_FREE_NODE..count as u32 {
                let n = self.node(i);
                self.hash_in((*n).parent, (*n).func, i);
            }
            release(v, old_at, old_file, (old_node_bytes + old_hash_bytes) as usize, old_in_extension);
            true
        }
    }

    /// Doubles the shadow stack (up to its limit). False when it cannot.
    pub unsafe fn grow_stack(&self, v: *const RuntimeVars) -> bool {
        // SAFETY: as in `grow_tree`.
        unsafe {
            let h = self.h;
            let old_cap = (*h).stack_cap;
            let new_cap = old_cap.saturating_mul(2).min((*h).stack_limit);
            if new_cap <= old_cap {
                return false;
            }
            let bytes = abi::page_align(u64::from(new_cap) * abi::FRAME_LEN as u64);
            let Some((at, file)) = map_extension(v, bytes) else { return false };
            copy(at, self.frame(0) as usize, (*h).depth as usize * abi::FRAME_LEN);
            let old_at = self.frame(0) as usize;
            let old_in_extension = !self.in_chunk((*h).stack_offset);
            let old_file = (*h).stack_file;
            write_volatile(&mut (*h).stack_file, file);
            write_volatile(&mut (*h).stack_cap, new_cap);
            (*h).stack_offset = at.wrapping_sub(self.base) as u64;
            release(v, old_at, old_file, abi::page_align(u64::from(old_cap) * abi::FRAME_LEN as u64) as usize, old_in_extension);
            true
        }
    }

    /// True when a region at this offset lies in the chunk itself (not in an extension,
    /// which never overlaps the chunk's mapping).
    unsafe fn in_chunk(&self, offset: u64) -> bool {
        // SAFETY: the header is this thread's.
        unsafe { offset < (*self.h).chunk_len }
    }

    /// Takes `ticks` spent inside the probes out of every open call: the thread's clock
    /// (frame starts, `last_tsc`, trace events) is the TSC minus the time paused so far.
    pub unsafe fn pause(&self, ticks: u64) {
        // SAFETY: the header is this thread's.
        unsafe { (*self.h).paused_ticks = (*self.h).paused_ticks.wrapping_add(ticks) };
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
                let start_tsc = start.wrapping_sub((*self.h).paused_ticks);
                *mine = Frame { rsp, node, flags: flags | abi::FRAME_INHERITED, start_tsc };
                (*self.h).depth = depth + 1;
                under = node;
            }
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

    pub unsafe fn record(&self, tsc: u64, node: u32, kind: u32) {
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
            if kind == abi::EVENT_UNWIND && super::probes::switched_function(vars(), (*n).func) {
                // The budget switched its function while it ran: its exit is no longer
                // probed, so when it ended is unknown. (A frame a forked child inherited is
                // its parent's call.)
                if f.flags & abi::FRAME_INHERITED == 0 {
                    super::probes::count_untimed((*n).func);
                    (*h).switched_open += 1;
                }
                return;
            }
            if kind == abi::EVENT_UNWIND && super::budget::switched_here(self, (*n).func) {
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
                // A system call's probes are not timing's cost (see `budget.rs`).
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

/// Unmaps a region that moved (an extension goes with its header page) and gives its file
/// blocks back: readers follow the header, which no longer names it.
unsafe fn release(v: *const RuntimeVars, at: usize, file: u64, len: usize, in_extension: bool) {
    let (start, len) = if in_extension { (at - PAGE_SIZE as usize, len + PAGE_SIZE as usize) } else { (at, len) };
    // SAFETY: the range is a region of this thread's chunk or extension that nothing points
    // into any more; the hole keeps the file's size, so every offset stays valid.
    unsafe {
        sys::call3(sys::MUNMAP, start, len, 0);
        if let Some(fd) = open_data_file(v) {
            let file_start = if in_extension { file - PAGE_SIZE } else { file };
            // An extension's header page stays, so that readers can still step over it.
            let (hole, hole_len) = if in_extension { (file_start + PAGE_SIZE, len - PAGE_SIZE as usize) } else { (file_start, len) };
            sys::call6(sys::FALLOCATE, fd, sys::FALLOC_PUNCH_HOLE_KEEP_SIZE, hole as usize, hole_len, 0, 0);
            sys::call3(sys::CLOSE, fd, 0, 0);
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
        h.next_check_tsc = super::budget::first_check(v, h.start_tsc);
        if let Some((user, system)) = super::records::cpus::own_times() {
            let end = (m + abi::THREAD_END as usize) as *mut abi::ThreadEnd;
            write_volatile(&raw mut (*end).start_cpu_ns, user.wrapping_add(system));
            write_volatile(&raw mut (*end).start_runq_ns, super::records::cpus::runq_wait(0).unwrap_or(0));
        }
        // The root and the merged-paths node; published last, as readers take 0 as "not ready".
        write_volatile(&mut h.node_count, abi::FIRST_FREE_NODE);
        Some(m as *mut ThreadHeader)
    }
}

/// Most nodes a tree may hold: paths stop before `node_limit`, and merged nodes (one per
/// function) may use up to `MERGED_ROOM` more, so that a small limit still times every call.
fn tree_cap_limit(node_limit: u32) -> u32 {
    (u64::from(node_limit) + MERGED_ROOM).next_power_of_two().min(1 << 31) as u32
}

const MERGED_ROOM: u64 = 1 << 20;

/// A new chunk's capacities; both grow up to their limits.
const INITIAL_NODES: u32 = 1 << 14;
const INITIAL_FRAMES: u32 = 4096;
