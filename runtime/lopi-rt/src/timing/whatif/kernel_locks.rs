//! Emulated kernels of locks: the system-call probes take a lock around each call, as a kernel
//! under one giant lock (`giant-lock`), or one lock per subsystem (`subsystem-locks`), would, so that the program's
//! threads queue for the kernel as they would there. The lock is a spinlock (the thesis's
//! "spinning" column: each thread's spin time and contended acquisitions are kept in its
//! header page) in the data file's first page, shared by every process recording into it, as a
//! kernel is. A call that may sleep (wait for another thread, a child, the network, a pipe,
//! a terminal, time) would drop a real kernel's lock while it sleeps: it runs without it and
//! takes and drops it on its return, to finish. Only the calls the probes see are emulated
//! (page faults and interrupts are not system calls; the real kernel's own locks still exist
//! underneath).
use crate::abi::{self, whatif, whatif::Class, KernelLockState, RuntimeVars};
use crate::base::sys;
use crate::base::tsc::rdtsc;
use crate::timing::thread::chunk::Thread;
use core::mem::MaybeUninit;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

/// Kinds in the file-descriptor table: not known yet, never sleeps, may sleep.
const FD_UNKNOWN: u8 = 0;
const FD_QUICK: u8 = 1;
const FD_SLEEPS: u8 = 2;
pub(super) const FD_TABLE: usize = 4096;

fn state(t: &Thread) -> *mut KernelLockState {
    (t.h as usize + abi::KERNEL_LOCK_STATE as usize) as *mut KernelLockState
}

fn lock(v: *const RuntimeVars, index: u32) -> &'static AtomicU32 {
    // SAFETY: the lock words lie in the shared page `enable` mapped, which stays mapped.
    unsafe { &*(((*v).kernel_locks + u64::from(index) * whatif::LOCK_STRIDE) as *const AtomicU32) }
}

/// Before system call `nr` (arguments `a0`, `a1`) at frame `key` of thread `t`.
pub(crate) unsafe fn enter(t: &Thread, v: *const RuntimeVars, key: u64, nr: u64, a0: u64, a1: u64) {
    // SAFETY: the header page is this thread's; `fd_kinds` is this process's table.
    unsafe {
        let s = state(t);
        forget_fds(v, nr, a0, a1);
        if read_volatile(&raw const (*s).state) != 0 || abi::syscall_name::never_returns(nr) {
            // A signal handler's call inside a call that holds (or will take) the lock: the
            // lock is the outer call's. Or a call that never returns.
            return;
        }
        let (class, sleeps) = classify(v, nr, a0);
        let index = if read_volatile(&(*v).whatif) == whatif::GIANT_LOCK { 0 } else { class as u32 };
        write_volatile(&raw mut (*s).key, key);
        if sleeps {
            write_volatile(&raw mut (*s).state, 1 + whatif::LOCK_COUNT as u32 + index);
        } else if take(t, v, index) {
            write_volatile(&raw mut (*s).state, 1 + index);
        }
    }
}

/// After the system call at frame `key` returned: drops the lock it holds, or takes and drops
/// the one a sleeping call finishes under.
pub(crate) unsafe fn exit(t: &Thread, v: *const RuntimeVars, key: u64) {
    // SAFETY: as in `enter`.
    unsafe {
        let s = state(t);
        let st = read_volatile(&raw const (*s).state);
        if st == 0 || read_volatile(&raw const (*s).key) != key {
            return;
        }
        let count = whatif::LOCK_COUNT as u32;
        write_volatile(&raw mut (*s).state, 0);
        if st <= count || take(t, v, st - 1 - count) {
            lock(v, (st - 1) % count).store(0, Ordering::Release);
        }
    }
}

/// Spins until the lock is this thread's; the spin is counted. A kernel's lock holder is never
/// preempted, a thread here may be: after `SPIN_BURST_PER_S` of a second of spinning the
/// waiter gives its CPU away (`sched_yield`), so that a holder preempted on it runs and drops
/// the lock, and the time the waiter was off its CPU is no spin (a uniprocessor kernel never
/// spins). A holder that died (killed inside a system call) is taken over. After `GIVE_UP_SECONDS` of spinning the call goes on
/// without the lock (false), flagged in the thread's state: a holder is asleep in a call taken
/// for one that cannot sleep (opening a FIFO, say), and waiting longer could hang the program.
unsafe fn take(t: &Thread, v: *const RuntimeVars, index: u32) -> bool {
    // SAFETY: the header is this thread's.
    let tid = unsafe { (*t.h).tid };
    let word = lock(v, index);
    if word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
        return true;
    }
    let began = rdtsc();
    // SAFETY: `v` is this module's variables page.
    let hz = unsafe { (*v).tsc_hz };
    let give_up = hz.saturating_mul(GIVE_UP_SECONDS);
    let (burst, ran) = (hz / SPIN_BURST_PER_S, hz / YIELD_RAN_PER_S);
    let mut burst_began = began;
    let mut off_cpu: u64 = 0;
    let mut spins: u32 = 0;
    let mut taken = true;
    loop {
        core::hint::spin_loop();
        let owner = word.load(Ordering::Relaxed);
        if owner == 0 {
            if word.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                break;
            }
        } else {
            let now = rdtsc();
            if now.wrapping_sub(burst_began) > burst {
                // SAFETY: sched_yield has no arguments and no effect on memory.
                unsafe { sys::call3(sys::SCHED_YIELD, 0, 0, 0) };
                burst_began = rdtsc();
                let away = burst_began.wrapping_sub(now);
                if away > ran {
                    off_cpu = off_cpu.wrapping_add(away);
                }
            }
            spins = spins.wrapping_add(1);
            // kill(owner, 0): ESRCH once no such thread is left.
            // SAFETY: signal 0 sends nothing.
            if spins % (1 << 16) == 0 {
                if unsafe { sys::call3(sys::KILL, owner as usize, 0, 0) } == sys::ESRCH && word.compare_exchange(owner, tid, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    break;
                }
                if rdtsc().wrapping_sub(began) > give_up {
                    taken = false;
                    break;
                }
            }
        }
    }
    // SAFETY: the header is this thread's.
    unsafe {
        let s = state(t);
        let gave_up = abi::KERNEL_LOCK_GAVE_UP;
        let waits = read_volatile(&raw const (*s).waits);
        let count = (waits & !gave_up).wrapping_add(1) & !gave_up;
        let flag = (waits & gave_up) | if taken { 0 } else { gave_up };
        write_volatile(&raw mut (*s).waits, count | flag);
        let spun = rdtsc().wrapping_sub(began).saturating_sub(off_cpu);
        write_volatile(&raw mut (*s).spin_ticks, read_volatile(&raw const (*s).spin_ticks).wrapping_add(spun));
        write_volatile(&raw mut (*s).yield_ticks, read_volatile(&raw const (*s).yield_ticks).wrapping_add(off_cpu));
    }
    taken
}

/// A waiter spins for a 50,000th of a second (20 us: a kernel's critical sections are shorter)
/// before it gives its CPU away.
const SPIN_BURST_PER_S: u64 = 50_000;

/// A `sched_yield` that took longer than a 500,000th of a second (2 us) ran another thread.
const YIELD_RAN_PER_S: u64 = 500_000;

/// Seconds of spinning for the emulated lock before a call goes on without it.
const GIVE_UP_SECONDS: u64 = 2;

/// The subsystem of system call `nr` (first argument `a0`), and whether it may sleep.
unsafe fn classify(v: *const RuntimeVars, nr: u64, a0: u64) -> (Class, bool) {
    match nr {
        // read, write, pread64, pwrite64, readv, writev, sendfile, splice, tee, preadv,
        // pwritev, preadv2, pwritev2: quick on files, may sleep on pipes, sockets, terminals.
        0 | 1 | 17..=20 | 40 | 275 | 276 | 295 | 296 | 327 | 328 => {
            // SAFETY: forwarded.
            (Class::FileSystem, unsafe { fd_kind(v, a0) } != FD_QUICK)
        }
        // ioctl (a terminal's may sleep), fcntl (F_SETLKW waits for a lock), flock.
        16 | 72 | 73 => (Class::FileSystem, true),
        // Files and directories: open, close, stat family, lseek, access, dup, fsync, truncate,
        // getdents, cwd, rename, mkdir, link, unlink, chmod, chown, umask, statfs, the *at
        // calls, fallocate, dup3, renameat2, statx, close_range, openat2, faccessat2.
        2..=6 | 8 | 21 | 32 | 33 | 74..=95 | 137 | 138 | 217 | 257..=269 | 280 | 285 | 292 | 316 | 332 | 436 | 437 | 439 => (Class::FileSystem, false),
        // mmap, mprotect, munmap, brk, mremap, msync, mincore, madvise, mlock family,
        // membarrier, mlock2, pkeys.
        9..=12 | 25..=28 | 149..=152 | 324 | 325 | 329..=331 => (Class::Memory, false),
        // socket, shutdown, bind, listen, getsockname, getpeername, socketpair, setsockopt,
        // getsockopt.
        41 | 48..=55 => (Class::Network, false),
        // connect, accept, sendto, recvfrom, sendmsg, recvmsg, accept4, recvmmsg, sendmmsg;
        // and waiting for events: poll, select, epoll_wait, pselect6, ppoll, epoll_pwait(2).
        42..=47 | 288 | 299 | 307 | 7 | 23 | 232 | 270 | 271 | 281 | 441 => (Class::Network, true),
        // futex, SysV semaphores and messages, POSIX message queues.
        202 | 64..=71 | 240..=245 => (Class::Ipc, true),
        // Sleeping: pause, nanosleep, rt_sigtimedwait, rt_sigsuspend, clock_nanosleep; and
        // sched_yield, which gives the CPU away (a kernel drops its lock when it switches).
        34 | 35 | 128 | 130 | 230 => (Class::Time, true),
        24 => (Class::Process, true),
        // Clocks and timers.
        96 | 100 | 201 | 222..=229 | 283 | 286 | 287 => (Class::Time, false),
        // Children: clone, fork, vfork, execve, wait4, waitid, clone3, execveat (the child
        // returns from the same call, the caller may wait for it).
        56..=59 | 61 | 247 | 322 | 435 => (Class::Process, true),
        // The rest: ids, limits, signal masks and actions, scheduling, prctl, uname, ...
        _ => (Class::Process, false),
    }
}

/// What the kernel does with descriptor `fd`: quick (a file, a directory, a block device,
/// /dev/null, /dev/zero, /dev/(u)random) or may sleep; asked once per descriptor (`fstat`).
unsafe fn fd_kind(v: *const RuntimeVars, fd: u64) -> u8 {
    // SAFETY: the table has FD_TABLE entries; fstat writes a 144-byte struct stat.
    unsafe {
        let table = (*v).fd_kinds as *mut u8;
        if fd as usize >= FD_TABLE {
            return FD_SLEEPS;
        }
        let known = read_volatile(table.add(fd as usize));
        if known != FD_UNKNOWN {
            return known;
        }
        let mut st = MaybeUninit::<[u64; 18]>::uninit();
        if sys::call3(sys::FSTAT, fd as usize, st.as_mut_ptr() as usize, 0) != 0 {
            return FD_SLEEPS;
        }
        let words = st.as_ptr() as *const u64;
        let mode = read_volatile(words.add(3)) as u32 & 0o170000;
        let rdev = read_volatile(words.add(5));
        let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
        let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
        let kind = match mode {
            0o100000 | 0o040000 | 0o060000 => FD_QUICK,
            0o020000 if major == 1 && matches!(minor, 3 | 5 | 8 | 9) => FD_QUICK,
            _ => FD_SLEEPS,
        };
        write_volatile(table.add(fd as usize), kind);
        kind
    }
}

/// Descriptors `nr` closes (or replaces: dup2, dup3) are not known any more.
unsafe fn forget_fds(v: *const RuntimeVars, nr: u64, a0: u64, a1: u64) {
    // SAFETY: indices are checked against the table's size.
    unsafe {
        let table = (*v).fd_kinds as *mut u8;
        let forget = |fd: u64| {
            if (fd as usize) < FD_TABLE {
                write_volatile(table.add(fd as usize), FD_UNKNOWN);
            }
        };
        match nr {
            3 => forget(a0),
            33 | 292 => forget(a1),
            // close_range(first, last, flags)
            436 => (a0..=a1.min(FD_TABLE as u64 - 1)).for_each(forget),
            _ => {}
        }
    }
}
