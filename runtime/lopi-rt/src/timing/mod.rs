//! Timing probes: per-thread shadow stacks and calling-context trees in the data file.
//!
//! A timed trampoline calls `lopi_enter_stub` with the function's counter index pushed, and
//! every exit site calls `lopi_exit_stub` the same way right before its `ret` or tail jump.
//! The stubs (`stubs.rs`) save the registers they use (the runtime is built without vector
//! registers, see the blob's build script) and call the Rust slow paths (`probes.rs`) for
//! what their fast paths do not handle. `thread.rs` holds a thread's state and its growth,
//! `budget.rs` the perturbation budget.
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
mod budget;
mod probes;
mod records;
mod script;
mod thread;
mod whatif;

use crate::abi::{self, RuntimeVars, ThreadHeader, PAGE_SIZE};
use crate::base::clock::{clock_pair, median, VdsoClock};
use crate::base::env::getenv;
use crate::base::sys::{self, write_stderr};
use crate::base::tcb::{own_tid, set_fork_slot, set_thread_slot, thread_slot};
use crate::base::tsc::rdtsc;
use crate::base::vars::vars;
use crate::loader::{libc_symbols, Auxv};
use core::ptr::write_volatile;
use probes::entry_exit_stubs::{lopi_calibration_empty, lopi_calibration_fanout, lopi_calibration_probed};
use probes::syscalls;
use thread::chunk::Thread;

/// Prepares timing for a module: probe cost, capacities, the wipe-on-fork pid page, with the
/// TSC rate `tsc_hz` measured against `clock`. Publishes `pid_page` last; until then the
/// probes do nothing.
///
/// # Safety
/// `v` is the module's variables page (followed by its path page, already written).
pub unsafe fn enable(
    v: *mut RuntimeVars,
    d: &abi::ModuleDescriptor,
    pid: u32,
    envp: *const *const u8,
    auxv: &Auxv,
    clock: Option<VdsoClock>,
    tsc_hz: u64,
) {
    let probes = d.probes;
    // SAFETY: the caller's contract; mmap/madvise of a fresh anonymous page.
    unsafe {
        (*v).space_pid = pid;
        // Limits of each thread's tree and shadow stack, which grow up to them (see
        // `thread.rs`): 2^25 nodes is 2.3 GiB per thread (64-byte nodes and their hash slots).
        (*v).node_limit = env_number(envp, b"LOPI_NODES", 1 << 25, 1 << 30).max(64).next_power_of_two() as u32;
        (*v).stack_limit = env_number(envp, b"LOPI_DEPTH", 1 << 20, 1 << 26) as u32;
        (*v).budget_ppm = env_budget(envp).unwrap_or(d.budget_ppm.min(999_999) as u32);
        (*v).counter_count = d.counter_count;
        if d.switches_offset != 0 {
            (*v).switches = (d as *const abi::ModuleDescriptor as u64).wrapping_add(d.switches_offset as u64);
        }
        (*v).trace_cap =
            if probes & abi::PROBE_TRACE != 0 { env_number(envp, b"LOPI_TRACE_EVENTS", 1 << 20, 1 << 32) } else { 0 };
        (*v).tsc_hz = tsc_hz;
        let page = sys::call6(sys::MMAP, 0, PAGE_SIZE as usize, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if page <= 0 || (*v).tsc_hz == 0 {
            return;
        }
        if sys::call3(sys::MADVISE, page as usize, PAGE_SIZE as usize, sys::MADV_WIPEONFORK) != 0 {
            // Without it a forked child would write into its parent's chunks.
            write_stderr(b"lopi: this kernel lacks MADV_WIPEONFORK; timing is off\n");
            return;
        }
        write_volatile(page as *mut u32, pid);
        if probes & abi::MODULE_EXECUTABLE != 0 {
            register_fork_handlers(v, auxv);
        }
        calibrate(v, page as u64);
        script::enable(v, d, clock_pair(clock));
        whatif::enable(v, envp);
        if probes & abi::PROBE_LOCKS != 0 {
            records::maps::record(v, pid);
        }
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        write_volatile(&mut (*v).pid_page, page as u64);
    }
}

/// Registers `before_fork`/`after_fork_in_parent` with glibc (`__register_atfork`, what
/// `pthread_atfork` calls), with a private snapshot buffer. Only executables do: they are
/// never unloaded, so the handlers never outlive their code.
unsafe fn register_fork_handlers(v: *mut RuntimeVars, auxv: &Auxv) {
    type Handler = unsafe extern "C" fn();
    type RegisterAtfork = unsafe extern "C" fn(Option<Handler>, Option<Handler>, Option<Handler>, *mut u8) -> i32;
    let Some([Some(register)]) = libc_symbols(auxv, [b"__register_atfork\0"]) else { return };
    // SAFETY: a fresh private mapping for the snapshot; `register` is glibc's
    // `__register_atfork`, called with handlers that live as long as the process.
    unsafe {
        let len = abi::page_align(8 + 24 * u64::from(fork_snapshot_frames(v))) as usize;
        let buffer = sys::call6(sys::MMAP, 0, len, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if buffer <= 0 {
            return;
        }
        (*v).fork_snapshot = buffer as u64;
        let register: RegisterAtfork = core::mem::transmute(register);
        register(Some(before_fork), Some(after_fork_in_parent), None, core::ptr::null_mut());
    }
}

/// Open calls a fork snapshot keeps (a child forked deeper sees the outermost ones).
unsafe fn fork_snapshot_frames(v: *const RuntimeVars) -> u32 {
    // SAFETY: the variables page is set up before the handlers are registered.
    unsafe { (*v).stack_limit.min(1 << 16) }
}

/// In the forking thread, right before `fork`: copies its open calls into the snapshot and
/// names the snapshot in the thread's TCB, which the child inherits.
unsafe extern "C" fn before_fork() {
    let v = vars();
    // SAFETY: the snapshot buffer holds 8 + 24 * fork_snapshot_frames bytes; the thread's chunk is its
    // own (tid checked by `Thread::current`).
    unsafe {
        let snapshot = (*v).fork_snapshot as *mut u32;
        let Some(t) = Thread::existing(v) else { return };
        if snapshot.is_null() {
            return;
        }
        let frames = snapshot.add(2) as *mut u64;
        let mut depth = 0;
        for (i, (rsp, func, start)) in t.open_calls().take(fork_snapshot_frames(v) as usize).enumerate() {
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

/// `LOPI_BUDGET`: the perturbation budget in percent (`5`, `2.5`, `5%`), as parts per million;
/// `None` when unset, 0 (no budget) when invalid or not below 100.
fn env_budget(envp: *const *const u8) -> Option<u32> {
    // SAFETY: envp is the process environment (NULL-terminated, or null).
    let mut p = unsafe { getenv(envp, b"LOPI_BUDGET") }?;
    let (mut whole, mut frac, mut scale) = (0u64, 0u64, 1u64);
    let mut seen_point = false;
    // SAFETY: the value is NUL-terminated.
    unsafe {
        loop {
            let c = *p;
            match c {
                b'0'..=b'9' if !seen_point => whole = whole.saturating_mul(10).saturating_add(u64::from(c - b'0')),
                b'0'..=b'9' if scale < 1_000_000 => {
                    frac = frac * 10 + u64::from(c - b'0');
                    scale *= 10;
                }
                b'0'..=b'9' => {}
                b'.' if !seen_point => seen_point = true,
                b'%' if *p.add(1) == 0 => {}
                0 => break,
                _ => return Some(0),
            }
            p = p.add(1);
        }
    }
    // `scale` is a power of ten from 1 to 10^6: no division by a variable (it could panic).
    let mut frac_ppm = frac * 10_000;
    while scale > 1 {
        frac_ppm /= 10;
        scale /= 10;
    }
    let ppm = whole.saturating_mul(10_000).saturating_add(frac_ppm);
    Some(if ppm >= 1_000_000 { 0 } else { ppm as u32 })
}

/// A decimal environment value, clamped to `1..=max`; `default` when unset or invalid.
fn env_number(envp: *const *const u8, name: &[u8], default: u64, max: u64) -> u64 {
    // SAFETY: envp is the process environment (NULL-terminated, or null).
    let Some(mut p) = (unsafe { getenv(envp, name) }) else { return default };
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

/// Measures the probes on chains of timed calls, on a scratch chunk: the ticks they put inside
/// a call's own interval (from the innermost call, which has no callees) and the ticks each
/// call's probes add to its callers. Medians of rounds, so that an interrupt in one round
/// does not count.
unsafe fn calibrate(v: *mut RuntimeVars, pid_page: u64) {
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
        set_thread_slot(saved_slot);
        write_volatile(&mut (*v).pid_page, 0);
        sys::call3(sys::MUNMAP, m as usize, len as usize, 0);
        (*v).probe_inner_ticks = median(&mut inner);
        (*v).probe_pair_ticks = median(&mut pair);
        (*v).probe_lookup_ticks = median(&mut lookup);
        (*v).syscall_inner_ticks = median(&mut syscall_inner);
        (*v).syscall_pair_ticks = median(&mut syscall_pair);
    }
}

