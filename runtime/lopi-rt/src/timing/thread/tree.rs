//! The calling-context tree: a call's node under its parent, found in the parent's one-entry
//! cache or the hash table, or added; the tree and the shadow stack grow into extensions of the
//! data file as the program needs them.
//!
//! Regions grow by doubling: the thread appends an extension, copies the region there and
//! points its header at it (file offset first, then capacity, for readers; memory offset for
//! the probes). The slow path that grows them takes its time out of every open call. At its limit
//! the tree stops adding call paths: further calls are timed in one node per function under
//! the merged-paths node (exact calls, self and inclusive time per function; their parent's
//! self time excludes them). Merged nodes have room for 2^20 functions beyond the limit;
//! only past that would calls be counted untimed.
use super::budget_state;
use super::chunk::Thread;
use crate::abi::{self, RuntimeVars, PAGE_SIZE};
use crate::base::data_file::{map_extension, open_data_file};
use crate::base::mem::copy;
use crate::base::sys;
use core::ptr::write_volatile;

/// The node a call gets.
#[derive(Clone, Copy)]
pub(crate) enum Child {
    /// Its own call path.
    Path(u32),
    /// Its function's merged node: the tree is at its limit.
    Merged(u32),
}

impl Thread {
    unsafe fn hash(&self) -> *mut u32 {
        // SAFETY: the hash table has 2 * node_cap slots.
        unsafe { self.base.wrapping_add((*self.h).hash_offset as usize) as *mut u32 }
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
            budget_state::new_path(h);
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

/// Most nodes a tree may hold: paths stop before `node_limit`, and merged nodes (one per
/// function) may use up to `MERGED_ROOM` more, so that a small limit still times every call.
fn tree_cap_limit(node_limit: u32) -> u32 {
    (u64::from(node_limit) + MERGED_ROOM).next_power_of_two().min(1 << 31) as u32
}

const MERGED_ROOM: u64 = 1 << 20;
