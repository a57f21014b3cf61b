//! The emulated application kernel (`lopi whatif --kernel app-kernel`, the thesis's Paper III):
//! each thread's system calls are made by a proxy thread of its own, as the application
//! kernel forwards them to the CPU that runs the operating system. The proxies run on one CPU
//! (`kernel_cpu`, the lowest the program may use), the program's threads on the others.
//!
//! A call is posted to the thread's mailbox; the proxy makes it and posts the result back,
//! and the trampoline skips its own `syscall` (the enter stub leaves `rcx` zero). Both sides
//! wait for each other in `futex` (`app-kernel`) or spin, yielding the CPU now and then
//! (`app-kernel-spin`). A proxy is a thread of the process (`CLONE_THREAD`, sharing memory,
//! files, the working directory and signal actions) that blocks every signal, so the kernel
//! never delivers the program's signals to it; it is made at the thread's first forwarded
//! call and ends when the thread does (or finds it gone).
//!
//! Calls about the calling thread itself run in place (`in_place`): its end and its children,
//! which start from its registers; its signal mask, signal stack and signal waits; its
//! thread pointer, robust list and `rseq` area; its id, affinity, scheduling, credentials and
//! namespaces; its CPU clock; priority-inheritance futexes, whose owner is the caller. So does
//! a signal handler's call while a call of its thread is forwarded (the mailbox is taken).
//! Not modelled: a signal does not interrupt a forwarded call (its handler runs, the call goes
//! on); a signal the kernel sends the caller of a failing call (`SIGPIPE`, `SIGXFSZ`) is
//! passed on to it, others stay with the proxy.
use crate::abi::{self, whatif, ProxyState, RuntimeVars};
use crate::base::sys;
use crate::base::tsc::rdtsc;
use crate::timing::thread::chunk::Thread;
use core::arch::asm;
use core::mem::MaybeUninit;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

/// The registers a system-call stub saved, from its frame pointer up.
#[repr(C)]
pub(crate) struct Saved {
    pub rbp: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    /// The call's number; its result when the probe made the call.
    pub rax: u64,
}

/// Where a thread and its proxy meet: at the start of the proxy's mapping, its stack above.
#[repr(C)]
struct Mailbox {
    state: AtomicU32,
    proxy_sleeps: AtomicU32,
    caller_sleeps: AtomicU32,
    caller_pid: u32,
    caller_tid: u32,
    spin: u32,
    nr: u64,
    args: [u64; 6],
    result: u64,
    /// TSC ticks the proxy took to make the call.
    ticks: u64,
}

const IDLE: u32 = 0;
const REQUEST: u32 = 1;
const DONE: u32 = 2;
const EXIT: u32 = 3;

/// The proxy's mapping: its mailbox and its stack (the proxy only makes system calls).
const PROXY_MAPPING: usize = 64 * 1024;
const MAP_STACK: usize = 0x20000;
/// Memory, files, working directory, signal actions and SysV undo lists shared; one thread
/// group (`CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM`).
const CLONE_PROXY: usize = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000;
const CLONE: usize = 56;
const SYS_EXIT: usize = 60;
const MUNMAP: usize = sys::MUNMAP;
const RT_SIGPROCMASK: usize = 14;
const SIG_SETMASK: usize = 2;
const SCHED_YIELD: usize = 24;
const SCHED_SETAFFINITY: usize = 203;
const FUTEX: usize = 202;
const FUTEX_WAIT_PRIVATE: usize = 128;
const FUTEX_WAKE_PRIVATE: usize = 129;
const RT_SIGTIMEDWAIT: usize = 128;
const PR_SET_NAME: usize = 15;
const ETIMEDOUT: isize = -110;
const EPIPE: u64 = (-32i64) as u64;
const EFBIG: u64 = (-27i64) as u64;
const SIGPIPE: usize = 13;
const SIGXFSZ: usize = 25;
/// Bytes of a CPU mask (1,024 CPUs).
const MASK_WORDS: usize = 16;

/// A raw clone: the child starts on `stack` with every register as the parent's but rax,
/// and runs `proxy_main(mailbox)`; the parent gets the child's tid (or -errno).
unsafe fn spawn_proxy(stack: usize, mailbox: *mut Mailbox) -> isize {
    let tid: isize;
    // SAFETY: the child runs only on its own stack and never returns here; the parent's
    // registers are as the kernel's syscall ABI leaves them.
    unsafe {
        asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r9",
            "and rsp, -16",
            "call {main}",
            "ud2",
            "2:",
            main = sym proxy_main,
            inlateout("rax") CLONE as isize => tid,
            in("rdi") CLONE_PROXY, in("rsi") stack, in("rdx") 0, in("r10") 0, in("r8") 0, in("r9") mailbox,
            lateout("rcx") _, lateout("r11") _,
        );
    }
    tid
}

/// Unmaps the proxy's own mapping (its stack), then ends the proxy without touching it. Both
/// calls are the runtime's own: counted from registers (`own_calls`), the `exit` before it is
/// made, without a time.
unsafe fn proxy_exit(mapping: usize) -> ! {
    crate::base::own_calls::count(SYS_EXIT, 0);
    let munmap = crate::base::own_calls::entry_address(MUNMAP as u64);
    // SAFETY: nothing runs on the stack after the unmapping; the table entry is this module's.
    unsafe {
        asm!(
            "xor r14d, r14d",
            "rdtsc",
            "shl rdx, 32",
            "or rax, rdx",
            "mov r12, rax",
            "mov eax, {munmap}",
            "syscall",
            "rdtsc",
            "shl rdx, 32",
            "or rax, rdx",
            "sub rax, r12",
            "cmovb rax, r14",
            "lock add qword ptr [r13], 1",
            "lock add qword ptr [r13 + 8], rax",
            "mov eax, {exit}",
            "xor edi, edi",
            "syscall",
            "ud2",
            munmap = const MUNMAP,
            exit = const SYS_EXIT,
            in("rdi") mapping, in("rsi") PROXY_MAPPING, in("r13") munmap,
            options(noreturn, nostack),
        )
    }
}

/// Chooses the kernel's CPU (once for every process recording into the data file, in the
/// word at `kernel_cpu` of its shared first page) and moves the calling thread off it, when
/// it may run elsewhere; the threads it makes inherit that.
pub(crate) unsafe fn enable(v: *mut RuntimeVars, kernel_cpu: *const AtomicU32) {
    let mut mask = MaybeUninit::<[u64; MASK_WORDS]>::uninit();
    // SAFETY: the kernel writes `n` bytes of the mask, whole words; only those are read and
    // given back. The word lies in the shared page.
    unsafe {
        let n = sys::call3(sys::SCHED_GETAFFINITY, 0, MASK_WORDS * 8, mask.as_mut_ptr() as usize);
        let words = (usize::try_from(n).unwrap_or(0) / 8).min(MASK_WORDS);
        let mask = mask.as_mut_ptr() as *mut u64;
        let set = |c: usize| c / 64 < words && read_volatile(mask.add(c / 64)) & 1 << (c % 64) != 0;
        let Some(lowest) = (0..words * 64).find(|&c| set(c)) else { return };
        let word = &*kernel_cpu;
        let _ = word.compare_exchange(0, 1 + lowest as u32, Ordering::AcqRel, Ordering::Acquire);
        let cpu = (word.load(Ordering::Acquire) - 1) as usize;
        (*v).kernel_cpu = cpu as u32;
        let count: u32 = (0..words).map(|i| read_volatile(mask.add(i)).count_ones()).sum();
        if set(cpu) && count > 1 {
            write_volatile(mask.add(cpu / 64), read_volatile(mask.add(cpu / 64)) & !(1 << (cpu % 64)));
            sys::call3(SCHED_SETAFFINITY, 0, words * 8, mask as usize);
        }
    }
}

fn proxy_state(t: &Thread) -> *mut ProxyState {
    (t.h as usize + abi::PROXY_STATE as usize) as *mut ProxyState
}

/// Makes the call whose registers `saved` holds on the thread's proxy: true when it did (the
/// result in `saved.rax`), false when the call runs in place.
pub(crate) unsafe fn forward(t: &Thread, v: *const RuntimeVars, saved: *mut Saved) -> bool {
    // SAFETY: `saved` is the stub's frame; the proxy state lies in the thread's header page;
    // the mailbox stays mapped while the thread lives (its proxy unmaps it when it ends).
    unsafe {
        let p = proxy_state(t);
        let nr = read_volatile(&raw const (*saved).rax);
        let (a0, a1) = (read_volatile(&raw const (*saved).rdi), read_volatile(&raw const (*saved).rsi));
        let mailbox = if runs_in_place(nr, a0, a1) { None } else { mailbox(t, v) };
        let Some(m) = mailbox.filter(|m| (**m).state.load(Ordering::Relaxed) == IDLE) else {
            write_volatile(&raw mut (*p).in_place, read_volatile(&raw const (*p).in_place) + 1);
            return false;
        };
        write_volatile(&raw mut (*m).nr, nr);
        write_volatile(&raw mut (*m).args[0], a0);
        write_volatile(&raw mut (*m).args[1], a1);
        write_volatile(&raw mut (*m).args[2], read_volatile(&raw const (*saved).rdx));
        write_volatile(&raw mut (*m).args[3], read_volatile(&raw const (*saved).r10));
        write_volatile(&raw mut (*m).args[4], read_volatile(&raw const (*saved).r8));
        write_volatile(&raw mut (*m).args[5], read_volatile(&raw const (*saved).r9));
        let m = &*m;
        let posted = rdtsc();
        m.state.store(REQUEST, Ordering::SeqCst);
        if m.proxy_sleeps.load(Ordering::SeqCst) != 0 {
            futex(&m.state, FUTEX_WAKE_PRIVATE, 1, 0);
        }
        if m.spin != 0 {
            spin_until(|| m.state.load(Ordering::Acquire) == DONE);
        } else {
            while m.state.load(Ordering::Acquire) != DONE {
                m.caller_sleeps.store(1, Ordering::SeqCst);
                if m.state.load(Ordering::SeqCst) != DONE {
                    futex(&m.state, FUTEX_WAIT_PRIVATE, REQUEST, 0);
                }
                m.caller_sleeps.store(0, Ordering::Relaxed);
            }
        }
        let round_trip = rdtsc().wrapping_sub(posted);
        write_volatile(&raw mut (*saved).rax, read_volatile(&raw const m.result));
        let ticks = read_volatile(&raw const m.ticks);
        m.state.store(IDLE, Ordering::Relaxed);
        write_volatile(&raw mut (*p).forwarded, read_volatile(&raw const (*p).forwarded) + 1);
        write_volatile(&raw mut (*p).round_trip_ticks, read_volatile(&raw const (*p).round_trip_ticks).wrapping_add(round_trip));
        write_volatile(&raw mut (*p).proxy_ticks, read_volatile(&raw const (*p).proxy_ticks).wrapping_add(ticks));
        true
    }
}

/// The thread is ending (`exit`): so does its proxy.
pub(crate) unsafe fn caller_exits(t: &Thread) {
    // SAFETY: as in `forward`.
    unsafe {
        let m = read_volatile(&raw const (*proxy_state(t)).mailbox) as *const Mailbox;
        if !m.is_null() {
            (*m).state.store(EXIT, Ordering::SeqCst);
            futex(&(*m).state, FUTEX_WAKE_PRIVATE, 1, 0);
        }
    }
}

/// The thread's mailbox; its proxy is made at its first forwarded call. `None` when it could
/// not be (the thread's calls then run in place).
unsafe fn mailbox(t: &Thread, v: *const RuntimeVars) -> Option<*mut Mailbox> {
    // SAFETY: a fresh private mapping for the proxy; the signal mask is restored right after
    // the clone, which the child inherits blocked (no handler of the program may ever run on
    // the proxy, whose thread pointer is its caller's).
    unsafe {
        let p = proxy_state(t);
        let known = read_volatile(&raw const (*p).mailbox);
        if known != 0 {
            return Some(known as *mut Mailbox);
        }
        if read_volatile(&raw const (*p).failed) != 0 {
            return None;
        }
        let base = sys::call6(sys::MMAP, 0, PROXY_MAPPING, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS | MAP_STACK, usize::MAX, 0);
        if base <= 0 {
            write_volatile(&raw mut (*p).failed, 1);
            return None;
        }
        let m = base as usize as *mut Mailbox;
        write_volatile(&raw mut (*m).caller_pid, (*t.h).pid);
        write_volatile(&raw mut (*m).caller_tid, (*t.h).tid);
        write_volatile(&raw mut (*m).spin, u32::from(read_volatile(&(*v).whatif) == whatif::APP_KERNEL_SPIN));
        // The kernel's CPU, for the proxy to move to: in its result word until it starts.
        write_volatile(&raw mut (*m).result, u64::from((*v).kernel_cpu));
        let all = u64::MAX;
        let mut old = 0u64;
        sys::call6(RT_SIGPROCMASK, SIG_SETMASK, &raw const all as usize, &raw mut old as usize, 8, 0, 0);
        let start = rdtsc();
        let tid = spawn_proxy(base as usize + PROXY_MAPPING, m);
        crate::base::own_calls::count(CLONE, rdtsc().saturating_sub(start));
        sys::call6(RT_SIGPROCMASK, SIG_SETMASK, &raw const old as usize, 0, 8, 0, 0);
        if tid <= 0 {
            sys::call3(sys::MUNMAP, base as usize, PROXY_MAPPING, 0);
            write_volatile(&raw mut (*p).failed, 1);
            return None;
        }
        write_volatile(&raw mut (*p).proxy_tid, tid as u32);
        write_volatile(&raw mut (*p).mailbox, m as u64);
        Some(m)
    }
}

/// The proxy: moves to the kernel's CPU, then makes its thread's calls until it ends.
unsafe extern "C" fn proxy_main(m: *mut Mailbox) -> ! {
    // SAFETY: the mailbox is at the start of this thread's own mapping, which it unmaps last.
    unsafe {
        let mut mask = MaybeUninit::<[u64; MASK_WORDS]>::uninit();
        let cpu = read_volatile(&raw const (*m).result) as usize;
        if cpu < MASK_WORDS * 64 {
            let words = mask.as_mut_ptr() as *mut u64;
            for i in 0..=cpu / 64 {
                write_volatile(words.add(i), if i == cpu / 64 { 1 << (cpu % 64) } else { 0 });
            }
            sys::call3(SCHED_SETAFFINITY, 0, (cpu / 64 + 1) * 8, words as usize);
        }
        sys::call3(sys::PRCTL, PR_SET_NAME, c"lopi-kernel".as_ptr() as usize, 0);
        let mb = &*m;
        while wait_for_work(mb) == REQUEST {
            let a = |i: usize| read_volatile(&raw const (*m).args[i]) as usize;
            let nr = read_volatile(&raw const (*m).nr);
            let began = rdtsc();
            // The program's call, not lopi's own (`own_calls`).
            let result = sys::raw6(nr as usize, a(0), a(1), a(2), a(3), a(4), a(5)) as u64;
            write_volatile(&raw mut (*m).ticks, rdtsc().wrapping_sub(began));
            pass_on_signal(mb, result);
            write_volatile(&raw mut (*m).result, result);
            mb.state.store(DONE, Ordering::SeqCst);
            if mb.caller_sleeps.load(Ordering::SeqCst) != 0 {
                futex(&mb.state, FUTEX_WAKE_PRIVATE, 1, 0);
            }
        }
        proxy_exit(m as usize)
    }
}

/// A call or the end (`EXIT`, also when the caller is found gone).
fn wait_for_work(m: &Mailbox) -> u32 {
    let work = |s: u32| s == REQUEST || s == EXIT;
    if m.spin != 0 {
        let mut rounds: u32 = 0;
        let mut found = IDLE;
        spin_until(|| {
            found = m.state.load(Ordering::Acquire);
            rounds = rounds.wrapping_add(1);
            if rounds % (1 << 14) == 0 && caller_gone(m) {
                found = EXIT;
            }
            work(found)
        });
        return found;
    }
    loop {
        let s = m.state.load(Ordering::Acquire);
        if work(s) {
            return s;
        }
        m.proxy_sleeps.store(1, Ordering::SeqCst);
        let s = m.state.load(Ordering::SeqCst);
        // A second at most: then it checks that its caller still lives.
        let mut timeout = MaybeUninit::uninit();
        let r = if work(s) { 0 } else { futex(&m.state, FUTEX_WAIT_PRIVATE, s, seconds(&mut timeout, 1)) };
        m.proxy_sleeps.store(0, Ordering::Relaxed);
        if r == ETIMEDOUT && caller_gone(m) {
            return EXIT;
        }
    }
}

/// Its caller ended without a probe seeing it (an `exit` at a site not probed).
fn caller_gone(m: &Mailbox) -> bool {
    // SAFETY: signal 0 sends nothing.
    unsafe { sys::call3(sys::TGKILL, m.caller_pid as usize, m.caller_tid as usize, 0) == sys::ESRCH }
}

/// A write to a broken pipe raises `SIGPIPE`, one beyond the file size limit `SIGXFSZ`, in
/// the thread that made it: the caller gets it, before the result, as it would have.
unsafe fn pass_on_signal(m: &Mailbox, result: u64) {
    let sig = match result {
        EPIPE => SIGPIPE,
        EFBIG => SIGXFSZ,
        _ => return,
    };
    let set = 1u64 << (sig - 1);
    let mut zero = MaybeUninit::uninit();
    // SAFETY: takes the signal off this thread's queue, if it is there, without waiting.
    unsafe {
        if sys::call6(RT_SIGTIMEDWAIT, &raw const set as usize, 0, seconds(&mut zero, 0), 8, 0, 0) == sig as isize {
            sys::call3(sys::TGKILL, m.caller_pid as usize, m.caller_tid as usize, sig);
        }
    }
}

/// `t` as a `timespec` of `secs` seconds, written word by word where it is (no vector
/// registers, no copy).
fn seconds(t: &mut MaybeUninit<[u64; 2]>, secs: u64) -> usize {
    let words = t.as_mut_ptr() as *mut u64;
    // SAFETY: both words are within `t`.
    unsafe {
        write_volatile(words, secs);
        write_volatile(words.add(1), 0);
    }
    words as usize
}

/// Spins until `done`, giving the CPU away every 64 rounds (the threads that share it may be
/// the ones to wait for).
fn spin_until(mut done: impl FnMut() -> bool) {
    let mut rounds: u32 = 0;
    while !done() {
        core::hint::spin_loop();
        rounds = rounds.wrapping_add(1);
        if rounds % 64 == 0 {
            // SAFETY: no arguments.
            unsafe { sys::call3(SCHED_YIELD, 0, 0, 0) };
        }
    }
}

fn futex(word: &AtomicU32, op: usize, value: u32, timeout: usize) -> isize {
    // SAFETY: the word is ours and aligned; `timeout` is 0 or a timespec of the caller's.
    unsafe { sys::call6(FUTEX, word.as_ptr() as usize, op, value as usize, timeout, 0, 0) }
}

/// Calls about the calling thread itself, which only it can make.
fn runs_in_place(nr: u64, a0: u64, a1: u64) -> bool {
    match nr {
        // Its end and its children (which start from its registers and its stack); exec.
        56..=60 | 231 | 322 | 435 => true,
        // Its signal mask, returns from its handlers, its waits for signals, its signal stack.
        14 | 15 | 34 | 127 | 128 | 130 | 131 => true,
        // Giving its CPU away.
        24 => true,
        // Tracing, credentials (per thread in Linux), personality, priority and scheduling.
        101 | 105 | 106 | 113 | 114 | 116 | 117 | 119 | 122 | 123 | 126 | 135 | 140..=148 => true,
        // prctl (its name, ...), its thread pointer and id, its affinity, `clear_child_tid`,
        // a restarted call, its memory policy, I/O priority, namespaces, robust list, perf
        // events of itself, its CPU, its scheduling attributes, seccomp, rseq, landlock.
        157 | 158 | 186 | 203..=205 | 211 | 218 | 219 | 238 | 239 | 251 | 252 | 272..=274 | 298 | 308 | 309 | 314 | 315 | 317 | 334 | 446 => true,
        // getrusage(RUSAGE_THREAD).
        98 => a0 == 1,
        // Its CPU clock (CLOCK_THREAD_CPUTIME_ID): clock_gettime, clock_getres, a timer.
        222 | 228 | 229 => a0 == 3,
        // Priority-inheritance futexes: the kernel makes the caller their owner.
        202 => matches!(a1 & 0x7f, 6..=8 | 11..=13),
        _ => false,
    }
}
