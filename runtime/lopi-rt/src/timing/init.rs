//! Timing's set-up at the module's init: limits from the environment, the wipe-on-fork pid page,
//! fork handlers, the probes' calibration, a script, an emulated kernel, Syscall User
//! Dispatch's handler, the memory map;
//! then the pid page, which turns the probes on.
use super::calibrate::calibrate;
use super::thread::{fork, sampling};
use super::{records, script, whatif};
use crate::abi::{self, RuntimeVars, PAGE_SIZE};
use crate::base::clock::{clock_pair, VdsoClock};
use crate::base::env::{env_number, getenv};
use crate::base::sys::{self, write_stderr};
use crate::loader::Auxv;
use core::ptr::write_volatile;

/// Prepares timing for a module: probe cost, capacities, the wipe-on-fork pid page, with the
/// TSC rate `tsc_hz` measured against `clock`. Publishes `pid_page` last; until then the
/// probes do nothing.
///
/// # Safety
/// `v` is the module's variables page (followed by its path page, already written).
pub(crate) unsafe fn enable(
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
        // `thread/tree.rs`): 2^25 nodes is 2.3 GiB per thread (64-byte nodes and their hash slots).
        (*v).node_limit = env_number(envp, b"LOPI_NODES", 1 << 25, 1 << 30).max(64).next_power_of_two() as u32;
        (*v).stack_limit = env_number(envp, b"LOPI_DEPTH", 1 << 20, 1 << 26) as u32;
        (*v).budget_ppm = env_budget(envp).unwrap_or(d.budget_ppm.min(999_999) as u32);
        if d.sample_hz != 0 && tsc_hz != 0 {
            sample(v, probes, d.sample_hz, tsc_hz);
        }
        (*v).counter_count = d.counter_count;
        if d.switches_offset != 0 {
            (*v).switches = (d as *const abi::ModuleDescriptor as u64).wrapping_add(d.switches_offset as u64);
        }
        (*v).trace_cap =
            if probes & abi::PROBE_TRACE != 0 { env_number(envp, b"LOPI_TRACE_EVENTS", 1 << 20, 1 << 32) } else { 0 };
        (*v).syscall_log = u64::from(probes & abi::PROBE_SYSCALL_LOG != 0);
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
            fork::register_handlers(v, auxv);
        }
        calibrate(v, page as u64);
        script::enable(v, d, clock_pair(clock), auxv);
        whatif::enable(v, envp);
        // An emulated kernel's proxies share their callers' thread pointers, and so selectors.
        if probes & abi::PROBE_SYSCALL_DISPATCH != 0 && (*v).whatif == 0 {
            super::probes::dispatch::install(v);
        }
        if probes & abi::PROBE_LOCKS != 0 {
            records::maps::record(v, pid);
        }
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        write_volatile(&mut (*v).pid_page, page as u64);
        script::start_profile(v);
    }
}

/// Sampled time (`ModuleDescriptor::sample_hz`): the handler of the threads' timers, and the
/// period; the budget is exact timing's. Lock probes and traces read the TSC: with them, or
/// without the handler, time stays exact.
unsafe fn sample(v: *mut RuntimeVars, probes: u64, hz: u64, tsc_hz: u64) {
    // SAFETY: the caller's contract.
    unsafe {
        if probes & (abi::PROBE_LOCKS | abi::PROBE_TRACE) != 0 {
            write_stderr(b"lopi: lock probes and traces need exact time; time is not sampled\n");
            return;
        }
        if !sampling::install_handler(v, probes & abi::MODULE_EXECUTABLE != 0) {
            return;
        }
        let hz = hz.clamp(1, 100_000);
        (*v).sample_hz = hz;
        (*v).sample_ticks = tsc_hz / hz;
        (*v).budget_ppm = 0;
    }
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

