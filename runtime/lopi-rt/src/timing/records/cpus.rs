//! The CPU time threads used, for the multiprocessor breakdown: the kernel forgets a thread's
//! times when it ends, so a thread's `exit` probe reads its own, and an `exit_group` probe
//! also records those of the threads it is about to end (a `CPUS_MAGIC` record).
use super::names;
use super::procfs::{proc_path, read_file};
use crate::abi::{self, RuntimeVars, PAGE_SIZE};
use crate::base::data_file::append;
use crate::base::sys;
use core::mem::MaybeUninit;
use core::ptr::{read_volatile, write_volatile};

/// Threads recorded at most (a process with more loses the rest's times, said by their absence).
const MAX_THREADS: usize = 4096;

/// The calling thread's user and kernel CPU time in ns: its exact CPU time (its CPU clock),
/// split as `getrusage(RUSAGE_THREAD)` splits it. (getrusage alone trails the clock by up to
/// a tick: the running thread's time since the scheduler last looked is not in it.)
pub(crate) fn own_times() -> Option<(u64, u64)> {
    // struct rusage starts with ru_utime and ru_stime, each {tv_sec, tv_usec}; 18 longs in all.
    let mut usage = MaybeUninit::<[u64; 18]>::uninit();
    // SAFETY: the kernel writes the whole struct on success.
    if unsafe { sys::call3(sys::GETRUSAGE, sys::RUSAGE_THREAD, usage.as_mut_ptr() as usize, 0) } != 0 {
        return None;
    }
    // Each word read alone: a pair read at once may be compiled to a vector load.
    let words = usage.as_ptr() as *const u64;
    // SAFETY: the kernel wrote the struct; i < 18.
    let word = |i: usize| unsafe { read_volatile(words.add(i)) };
    let us = |sec: u64, usec: u64| sec.wrapping_mul(1_000_000).wrapping_add(usec);
    let (user, system) = (us(word(0), word(1)), us(word(2), word(3)));
    let total = cpu_clock(CLOCK_THREAD_CPUTIME_ID).unwrap_or(user.wrapping_add(system).wrapping_mul(1000));
    Some(split(total, user, system))
}

/// `total` ns split in the ratio `user : system` (without 128-bit arithmetic: a libgcc call
/// the blob cannot link).
fn split(total: u64, user: u64, system: u64) -> (u64, u64) {
    let ticks = user.saturating_add(system);
    if ticks == 0 {
        return (total, 0);
    }
    // The user share in 1/2^20ths, both counts scaled down until user * 2^20 fits.
    let shift = (64 - ticks.leading_zeros()).saturating_sub(43);
    let share = ((user >> shift) << 20) / (ticks >> shift).max(1);
    let u = ((total >> 20) * share + (((total & ((1 << 20) - 1)) * share) >> 20)).min(total);
    (u, total - u)
}

const CLOCK_THREAD_CPUTIME_ID: usize = 3;

/// The calling thread's CPU time (user and system), in ns.
pub(crate) fn own_cpu_ns() -> Option<u64> {
    cpu_clock(CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU clock of thread `tid` of this process (its exact run time, in ns).
fn thread_clock(tid: u32) -> usize {
    // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): (~tid << 3) | CPUCLOCK_PERTHREAD | SCHED.
    ((!(tid as isize)) << 3 | 6) as usize
}

/// A CPU clock's reading in ns.
fn cpu_clock(clock: usize) -> Option<u64> {
    let mut ts = MaybeUninit::<[u64; 2]>::uninit();
    // SAFETY: the kernel writes the timespec on success; its words are read one at a time.
    unsafe {
        if sys::call3(sys::CLOCK_GETTIME, clock, ts.as_mut_ptr() as usize, 0) != 0 {
            return None;
        }
        let words = ts.as_ptr() as *const u64;
        Some(read_volatile(words).wrapping_mul(1_000_000_000).wrapping_add(read_volatile(words.add(1))))
    }
}

/// How many CPUs thread `tid` (0: the caller) may run on; 0 if unknown.
pub(crate) fn allowed(tid: u32) -> u32 {
    let mut mask = MaybeUninit::<[u64; 16]>::uninit();
    // SAFETY: the kernel writes `n` bytes of the mask, whole words; only those are read.
    unsafe {
        let n = sys::call3(sys::SCHED_GETAFFINITY, tid as usize, 128, mask.as_mut_ptr() as usize);
        let words = usize::try_from(n).unwrap_or(0) / 8;
        let mask = mask.as_ptr() as *const u64;
        (0..words.min(16)).map(|i| read_volatile(mask.add(i)).count_ones()).sum()
    }
}

fn number(field: &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
    }
    (!field.is_empty()).then_some(value)
}

/// Field `index` (0-based) of `schedstat`: 0 ns on a CPU, 1 ns waiting on a run queue.
fn schedstat(tid: u32, index: usize) -> Option<u64> {
    let mut path = MaybeUninit::uninit();
    let mut buf = MaybeUninit::uninit();
    // SAFETY: see `read_file`.
    let text = unsafe { read_file(proc_path(tid, b"schedstat", &mut path), &mut buf)? };
    number(text.split(|&b| b == b' ' || b == b'\n').nth(index)?)
}

/// Ns thread `tid` (0: the caller) spent runnable, waiting for a CPU.
pub(crate) fn runq_wait(tid: u32) -> Option<u64> {
    schedstat(tid, 1)
}

/// Another thread's user and system ns: its exact CPU time, split by its clock-tick counts.
fn times_of(tid: u32) -> Option<(u64, u64)> {
    let run = cpu_clock(thread_clock(tid)).or_else(|| schedstat(tid, 0))?;
    let mut path = MaybeUninit::uninit();
    let mut buf = MaybeUninit::uninit();
    // SAFETY: see `read_file`.
    let text = unsafe { read_file(proc_path(tid, b"stat", &mut path), &mut buf)? };
    // After the command name (which may hold spaces and parentheses): state is field 3,
    // utime 14, stime 15.
    let after = text.iter().rposition(|&b| b == b')')?;
    let mut fields = text[after + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty());
    let utime = number(fields.nth(11)?)?;
    let stime = number(fields.next()?)?;
    Some(split(run, utime, stime))
}

/// At `exit_group` by thread `caller` of process `pid`: a `CPUS_MAGIC` record of the CPU
/// times of the process's other threads, which the call ends without a probe of their own,
/// and a `NAMES_MAGIC` record of their names.
pub(crate) unsafe fn record_others(v: *const RuntimeVars, pid: u32, caller: u32) {
    // SAFETY: raw syscalls on private buffers and descriptors of our own; the record is a
    // fresh mapping of the data file of the length asked for.
    unsafe {
        let tids = sys::call6(sys::MMAP, 0, MAX_THREADS * 4, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if tids <= 0 {
            return;
        }
        let tids = tids as usize as *mut u32;
        let count = list_threads(tids, caller);
        if count > 0 {
            let len = (abi::CPUS_HEADER_LEN + count as u64 * abi::CPUS_ENTRY_LEN).next_multiple_of(PAGE_SIZE);
            if let Some((at, _)) = append(v, abi::CPUS_MAGIC, len) {
                let mut n = 0;
                for i in 0..count {
                    let tid = read_volatile(tids.add(i));
                    let Some((user, system)) = times_of(tid) else { continue };
                    let e = at + (abi::CPUS_HEADER_LEN + n as u64 * abi::CPUS_ENTRY_LEN) as usize;
                    write_volatile(e as *mut u32, tid);
                    write_volatile((e + 4) as *mut u32, abi::THREAD_END_CPU | allowed(tid).min(0xffff) << abi::THREAD_END_CPUS_SHIFT);
                    write_volatile((e + 8) as *mut u64, user);
                    write_volatile((e + 16) as *mut u64, system);
                    write_volatile((e + 24) as *mut u64, runq_wait(tid).unwrap_or(0));
                    n += 1;
                }
                write_volatile((at + 20) as *mut u32, n);
                // The pid last: a reader takes a record without one as unfinished.
                write_volatile((at + 16) as *mut u32, pid);
                sys::call3(sys::MUNMAP, at, len as usize, 0);
            }
            names::record(v, pid, tids, count);
        }
        sys::call3(sys::MUNMAP, tids as usize, MAX_THREADS * 4, 0);
    }
}

/// The process's threads but `caller`, from `/proc/self/task`, into `out`; how many.
unsafe fn list_threads(out: *mut u32, caller: u32) -> usize {
    let mut buf = MaybeUninit::<[u8; 4096]>::uninit();
    let mut count = 0;
    // SAFETY: a descriptor of our own; getdents64 writes whole records into `buf`, of which
    // only the `n` bytes written are read.
    unsafe {
        let fd = sys::call3(sys::OPEN, c"/proc/self/task".as_ptr() as usize, sys::O_RDONLY | sys::O_DIRECTORY | sys::O_CLOEXEC, 0);
        if fd < 0 {
            return 0;
        }
        loop {
            let n = sys::call3(sys::GETDENTS64, fd as usize, buf.as_mut_ptr() as usize, 4096);
            if n <= 0 {
                break;
            }
            let bytes = core::slice::from_raw_parts(buf.as_ptr() as *const u8, n as usize);
            let mut at = 0;
            // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name (NUL-terminated).
            while at + 19 < bytes.len() {
                let reclen = usize::from(u16::from_le_bytes([bytes[at + 16], bytes[at + 17]]));
                if reclen == 0 || at + reclen > bytes.len() {
                    break;
                }
                let name = &bytes[at + 19..at + reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if let Some(tid) = number(name).and_then(|t| u32::try_from(t).ok()) {
                    if tid != caller && count < MAX_THREADS {
                        write_volatile(out.add(count), tid);
                        count += 1;
                    }
                }
                at += reclen;
            }
        }
        sys::call3(sys::CLOSE, fd as usize, 0, 0);
    }
    count
}
