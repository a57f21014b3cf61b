//! Sampled time (`--time sampled`): each thread's CPU-time timer (`timer_create` on
//! `CLOCK_THREAD_CPUTIME_ID`, delivered to that thread) raises `abi::SAMPLE_SIGNAL` (`SIGURG`)
//! every period, and the handler advances the thread's clock (`ThreadHeader::sample_clock`) by
//! one sample. The probes read that clock instead of the TSC, so that everything else is as
//! with exact time: a call's time is the samples taken while it ran, its calls and calling
//! context are exact.
use crate::abi::{self, RuntimeVars, ThreadHeader, PAGE_SIZE};
use crate::base::sys::{self, write_stderr};
use crate::base::tcb::{own_tid, thread_slot};
use crate::base::vars::vars;
use core::arch::global_asm;
use core::ptr::{read_volatile, write_volatile};

const CLOCK_THREAD_CPUTIME_ID: usize = 3;
const SIGEV_THREAD_ID: i32 = 4;
const SA_SIGINFO: u64 = 4;
const SA_RESTART: u64 = 0x1000_0000;
const SI_TIMER: i32 = -2;
const SA_RESTORER: u64 = 0x0400_0000;
pub(crate) const SIG_IGN: usize = 1;

/// The kernel's `struct sigaction` on x86-64.
#[repr(C)]
pub(crate) struct KernelSigaction {
    pub(crate) handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

impl KernelSigaction {
    /// `handler`, this runtime's code, taking `siginfo` and restarting interrupted calls; it
    /// returns through the kernel's signal return.
    pub(crate) fn ours(handler: usize) -> KernelSigaction {
        KernelSigaction { handler, flags: SA_SIGINFO | SA_RESTART | SA_RESTORER, restorer: lopi_sample_restorer as usize, mask: 0 }
    }

    /// `handler` as [`KernelSigaction::ours`], also run for a signal that comes while it runs
    /// (`SA_NODEFER`): Syscall User Dispatch's, which the kernel would otherwise turn into
    /// the default action (death) when the program's handler it calls makes a caught call.
    pub(crate) fn ours_nested(handler: usize) -> KernelSigaction {
        const SA_NODEFER: u64 = 0x4000_0000;
        KernelSigaction { flags: SA_SIGINFO | SA_RESTART | SA_RESTORER | SA_NODEFER, ..KernelSigaction::ours(handler) }
    }

    /// The default action (`SIG_DFL`).
    pub(crate) fn default_action() -> KernelSigaction {
        KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 }
    }

    /// Its words, as a detach writes them back with `rt_sigaction`.
    pub(crate) fn words(&self) -> [u64; 4] {
        [self.handler as u64, self.flags, self.restorer as u64, self.mask]
    }
}

/// The action of `signal` now; `None` if the kernel does not say.
pub(crate) unsafe fn action(signal: usize) -> Option<KernelSigaction> {
    let mut old = KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: rt_sigaction reading the current action into `old` (sigsetsize 8).
    let r = unsafe { sys::call6(sys::RT_SIGACTION, signal, 0, &mut old as *mut _ as usize, 8, 0, 0) };
    (r >= 0).then_some(old)
}

/// Sets the action of `signal`; false if the kernel refused.
pub(crate) unsafe fn set_action(signal: usize, act: &KernelSigaction) -> bool {
    // SAFETY: rt_sigaction installing `act`, whose handler and restorer are mapped code.
    unsafe { sys::call6(sys::RT_SIGACTION, signal, act as *const _ as usize, 0, 8, 0, 0) >= 0 }
}

/// The kernel's `struct sigevent` (64 bytes), for `SIGEV_THREAD_ID`.
#[repr(C)]
struct SigEvent {
    _value: u64,
    signo: i32,
    notify: i32,
    tid: i32,
    _pad: [i32; 11],
}

global_asm!(
    // What the handler returns to: the kernel's signal return (libc's `__restore_rt`).
    ".globl lopi_sample_restorer",
    "lopi_sample_restorer:",
    "mov eax, 15",
    "syscall",
);

extern "C" {
    fn lopi_sample_restorer();
}

/// Installs the sample handler for `SIGURG`, unless the process has a handler of its own
/// (which would then miss its signals, or take ours): a library's runtime leaves one that is
/// there alone, the executable's (never unloaded) replaces another module's. Another module's
/// lopi handler (the same code) serves this module too. The action replaced is kept in `v`,
/// for a detach to put back. `false`, with a message, when time cannot be sampled.
pub(crate) unsafe fn install_handler(v: *mut RuntimeVars, executable: bool) -> bool {
    // SAFETY: forwarded.
    let Some(old) = (unsafe { action(abi::SAMPLE_SIGNAL as usize) }) else {
        write_stderr(b"lopi: cannot read SIGURG's action; time is not sampled\n");
        return false;
    };
    // SAFETY: a handler the kernel holds is mapped code.
    let ours = old.handler > SIG_IGN && unsafe { is_sample_handler(old.handler) };
    if ours {
        return true;
    }
    if old.handler > SIG_IGN && !executable {
        write_stderr(b"lopi: SIGURG has a handler already (sampled time's signal); this module's time is not sampled\n");
        return false;
    }
    // SAFETY: the handler is this blob's code.
    if !unsafe { set_action(abi::SAMPLE_SIGNAL as usize, &KernelSigaction::ours(on_sample as usize)) } {
        write_stderr(b"lopi: cannot install the SIGURG handler; time is not sampled\n");
        return false;
    }
    // SAFETY: `v` is this module's variables page.
    unsafe {
        (*v).sample_old_action = old.words();
        (*v).sample_handler_installed = 1;
    }
    true
}

/// True when the code at `handler` is this handler's: another module's copy of the runtime.
unsafe fn is_sample_handler(handler: usize) -> bool {
    // SAFETY: forwarded.
    unsafe { same_code(handler, on_sample as usize) }
}

/// True when the code at `a` is the code at `own` (a handler of this runtime), or another
/// module's copy of it: compared within the page each starts on, which is mapped.
pub(crate) unsafe fn same_code(a: usize, own: usize) -> bool {
    const LEN: usize = 32;
    if a == own {
        return true;
    }
    if a % PAGE_SIZE as usize > PAGE_SIZE as usize - LEN || own % PAGE_SIZE as usize > PAGE_SIZE as usize - LEN {
        return false;
    }
    // SAFETY: both ranges lie within a page of mapped code (checked above).
    unsafe { (0..LEN).all(|i| read_volatile((a + i) as *const u8) == read_volatile((own + i) as *const u8)) }
}

/// Starts sampling a new thread's clock: its header's sample fields, then a timer on its CPU
/// time signalling it alone. A thread whose timer cannot be made keeps its errno in the header
/// (and has no samples: the reader says so).
pub(crate) unsafe fn start(v: &RuntimeVars, h: &mut ThreadHeader) {
    if v.sample_hz == 0 {
        return;
    }
    h.sample_ticks = v.sample_ticks.max(1);
    h.sample_clock = 1;
    h.sample_timer = -1;
    let period_ns = 1_000_000_000 / v.sample_hz;
    // Filled word by word: a probe's slow path may not use vector registers (the stubs do
    // not save them), which a struct's zeroing would.
    let mut ev = core::mem::MaybeUninit::<SigEvent>::uninit();
    let words = ev.as_mut_ptr() as *mut u64;
    for i in 0..8 {
        // SAFETY: the sigevent is 8 words.
        unsafe { write_volatile(words.add(i), 0) };
    }
    // SAFETY: as above; the fields are plain integers, every byte written.
    unsafe {
        let e = ev.as_mut_ptr();
        write_volatile(&raw mut (*e).signo, abi::SAMPLE_SIGNAL as i32);
        write_volatile(&raw mut (*e).notify, SIGEV_THREAD_ID);
        write_volatile(&raw mut (*e).tid, own_tid(v) as i32);
    }
    let mut id: i32 = -1;
    // SAFETY: timer_create with a valid sigevent and a place for the id.
    let r = unsafe { sys::call3(sys::TIMER_CREATE, CLOCK_THREAD_CPUTIME_ID, ev.as_ptr() as usize, &mut id as *mut i32 as usize) };
    if r < 0 {
        h.sample_error = -r as i32;
        return;
    }
    // The itimerspec: interval and first expiry, both one period (volatile: no vector stores).
    let mut spec = core::mem::MaybeUninit::<[u64; 4]>::uninit();
    let words = spec.as_mut_ptr() as *mut u64;
    for i in 0..4 {
        let value = if i % 2 == 0 { period_ns / 1_000_000_000 } else { period_ns % 1_000_000_000 };
        // SAFETY: a word of the itimerspec.
        unsafe { write_volatile(words.add(i), value) };
    }
    // SAFETY: timer_settime of the timer just made, with a valid itimerspec.
    let r = unsafe { sys::call6(sys::TIMER_SETTIME, id as usize, 0, spec.as_ptr() as usize, 0, 0, 0) };
    if r < 0 {
        h.sample_error = -r as i32;
        return;
    }
    h.sample_timer = id;
}

/// `SIGURG`: samples of the interrupted thread's CPU time, if the thread samples (the signal
/// of another sender, or of a thread whose chunk is not made yet, changes nothing). The kernel
/// checks CPU-time timers at its clock ticks (`CONFIG_HZ`, often 250): a period shorter than a
/// tick expires several times per signal, which the signal's overrun count says.
extern "C" fn on_sample(_sig: i32, info: *const i32, _context: *const u8) {
    let t = thread_slot();
    if t < PAGE_SIZE as usize {
        return;
    }
    let h = t as *mut ThreadHeader;
    // SAFETY: a slot above the first page is a chunk this process's runtime mapped (a reused
    // descriptor's belongs to a finished thread: its id differs). The handler interrupts the
    // thread between instructions, and the probes read the clock in one load.
    unsafe {
        let ticks = read_volatile(&(*h).sample_ticks);
        if ticks == 0 || read_volatile(&(*h).tid) != own_tid(vars()) {
            return;
        }
        // siginfo_t: si_code at 8 bytes, a timer's si_overrun at 20.
        let overrun = if !info.is_null() && *info.add(2) == SI_TIMER { (*info.add(5)).max(0) as u64 } else { 0 };
        let expiries = 1 + overrun;
        write_volatile(&mut (*h).sample_clock, read_volatile(&(*h).sample_clock).wrapping_add(ticks * expiries));
        write_volatile(&mut (*h).samples, read_volatile(&(*h).samples) + expiries);
    }
}
