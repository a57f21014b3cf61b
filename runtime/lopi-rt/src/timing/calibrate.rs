//! The probes' cost, measured at start-up on a scratch chunk: what a timed call's probes put
//! inside its own interval and add to its callers', what a hash-table lookup adds, and the
//! same for system-call probes. The reader takes them out of the profile.
use super::probes::entry_exit_stubs::{lopi_calibration_empty, lopi_calibration_fanout, lopi_calibration_probed};
use super::probes::syscalls;
use super::thread::chunk::Thread;
use crate::abi::{self, RuntimeVars, ThreadHeader};
use crate::base::clock::median;
use crate::base::sys;
use crate::base::tcb::{own_tid, set_thread_slot, thread_slot};
use crate::base::tsc::rdtsc;
use core::ptr::write_volatile;

/// Measures the probes on chains of timed calls, on a scratch chunk: the ticks they put inside
/// a call's own interval (from the innermost call, which has no callees) and the ticks each
/// call's probes add to its callers. Medians of rounds, so that an interrupt in one round
/// does not count.
pub(super) unsafe fn calibrate(v: *mut RuntimeVars, pid_page: u64) {
    const ROUNDS: usize = 15;
    const CHAINS: u64 = 25;
    const DEPTH: u32 = 7; // calls per chain: DEPTH + 1
    // The fanout trees: 2^(FANOUT_DEPTH + 1) - 1 calls, as many nodes in all.
    const FANOUT_DEPTH: u32 = 5;
    const FANOUT_CALLS: u64 = (1 << (FANOUT_DEPTH + 1)) - 1;
    const CAP: u32 = 128;
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
        (*h).chunk_len = len;
        (*h).pid = *(pid_page as *const u32);
        (*h).tid = own_tid(v);
        (*h).node_limit = CAP;
        (*h).stack_limit = CAP;
        (*h).node_cap = CAP;
        (*h).stack_cap = CAP;
        (*h).nodes_offset = nodes;
        (*h).hash_offset = hash;
        (*h).stack_offset = stack;
        (*h).trace_offset = trace;
        (*h).next_check_tsc = u64::MAX;
        (*h).node_count = abi::FIRST_FREE_NODE;
        let saved_slot = thread_slot();
        write_volatile(&mut (*v).pid_page, pid_page);
        set_thread_slot(m as usize);
        let t = Thread { h, base: m as usize };
        // The innermost call's node: root (0), merged paths (1), then one node per level.
        let innermost = abi::FIRST_FREE_NODE + DEPTH;
        let innermost_ticks = || if (*h).node_count > innermost { (*t.node(innermost)).ticks } else { 0 };
        let chains = || {
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
            (median(&mut inner), median(&mut pair))
        };
        let (inner, pair) = chains();
        // Entries that miss their parent's cache and find their node in the hash table:
        // trees of calls whose parents alternate between two functions, against trees of the
        // same shape where they do not (run once first: their nodes are new).
        let mut lookup = [0u64; ROUNDS];
        lopi_calibration_fanout(FANOUT_DEPTH, 0, 0);
        lopi_calibration_fanout(FANOUT_DEPTH, 0, 1);
        for slot in lookup.iter_mut() {
            let t0 = rdtsc();
            lopi_calibration_fanout(FANOUT_DEPTH, 0, 0);
            let t1 = rdtsc();
            lopi_calibration_fanout(FANOUT_DEPTH, 0, 1);
            let t2 = rdtsc();
            *slot = (t2 - t1).saturating_sub(t1 - t0) / FANOUT_CALLS;
        }
        // System-call probes, at the root: the call's node is the root's cached child.
        let mut syscall_inner = [0u64; ROUNDS];
        let mut syscall_pair = [0u64; ROUNDS];
        let syscall_ticks = || {
            let child = (*t.node(0)).cache_child;
            if child >= abi::FIRST_FREE_NODE && child < (*h).node_count { (*t.node(child)).ticks } else { 0 }
        };
        for r in 0..ROUNDS {
            let before = syscall_ticks();
            let t0 = rdtsc();
            for _ in 0..calls {
                syscalls::lopi_calibration_syscall(0);
            }
            let t1 = rdtsc();
            for _ in 0..calls {
                syscalls::lopi_calibration_syscall_empty();
            }
            let t2 = rdtsc();
            syscall_inner[r] = syscall_ticks().wrapping_sub(before) / calls;
            syscall_pair[r] = (t1 - t0).saturating_sub(t2 - t1) / calls;
        }
        // Sampled time: the probes without their clock reads, on the samples' clock (which
        // does not move here). Their part inside a call's interval cannot be read on that
        // clock, and taking off an estimate of it would take all the time of a short function
        // called very often (samples are few, the estimate per call is not exact): it stays
        // in the call's time. Only the caller's part is taken off (the part outside the call,
        // in the same share as with the TSC). A lookup's cost stays too (the stub cannot stop
        // a clock that moves by whole samples).
        let (mut inner, mut pair, mut lookup) = (inner, pair, median(&mut lookup));
        if (*v).sample_hz != 0 {
            // The chunk's header through its own pointer: the closures borrow `h`'s fields.
            let header = m as *mut ThreadHeader;
            (*header).sample_ticks = 1;
            (*header).sample_clock = 1;
            let (_, sampled_pair) = chains();
            let sampled_inner = if pair == 0 { 0 } else { inner.saturating_mul(sampled_pair) / pair };
            pair = sampled_pair.saturating_sub(sampled_inner);
            inner = 0;
            lookup = 0;
        }
        set_thread_slot(saved_slot);
        write_volatile(&mut (*v).pid_page, 0);
        sys::call3(sys::MUNMAP, m as usize, len as usize, 0);
        (*v).probe_inner_ticks = inner;
        (*v).probe_pair_ticks = pair;
        (*v).probe_lookup_ticks = lookup;
        (*v).syscall_inner_ticks = median(&mut syscall_inner);
        (*v).syscall_pair_ticks = median(&mut syscall_pair);
    }
}
