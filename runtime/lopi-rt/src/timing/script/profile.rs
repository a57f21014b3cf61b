//! `profile:hz:N` points: a POSIX timer on the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`)
//! raises `SIGPROF` every period, which the kernel gives the thread that was running; the
//! handler runs the script's `profile:` probes in it, with the interrupted instruction and
//! frame pointer for `ustack`. Samples come in proportion to each thread's CPU time, as the
//! process spends it (bpftrace's `profile:` fires on every CPU, whatever runs there). A thread
//! inside one of lopi's probes then takes no sample, counted in its area; one that has made no
//! probe yet (no system call: its chunk is made at its first) takes none either.
use super::Thread;
use crate::abi::RuntimeVars;
use crate::base::sys::{self, write_stderr};
use crate::base::vars::vars;
use crate::timing::thread::sampling;
use core::ptr::{read_volatile, write_volatile};

const SIGPROF: usize = 27;
const CLOCK_PROCESS_CPUTIME_ID: usize = 2;
const SIGEV_SIGNAL: i32 = 0;
/// `ucontext_t`'s general registers start at this offset; RBP is register 10, RIP 16.
const GREGS: usize = 40;
const REG_RBP: usize = 10;
const REG_RIP: usize = 16;

/// Starts sampling the process every `ns` of its CPU time, unless a module's runtime already
/// does (its handler is installed) or the program handles `SIGPROF` itself (said, and no
/// samples). The timer and the replaced action go into `v` for a detach.
pub(crate) unsafe fn start(v: *mut RuntimeVars, ns: u64) {
    // SAFETY: reading the signal's action.
    let Some(old) = (unsafe { sampling::action(SIGPROF) }) else { return };
    // SAFETY: a handler the kernel holds is mapped code.
    if old.handler > sampling::SIG_IGN && unsafe { sampling::same_code(old.handler, on_profile as usize) } {
        // Another module's runtime samples already.
        return;
    }
    if old.handler > sampling::SIG_IGN {
        write_stderr(b"lopi: the program handles SIGPROF (profile: points' signal): no profile samples\n");
        return;
    }
    // SAFETY: the handler is this blob's code.
    if !unsafe { sampling::set_action(SIGPROF, &sampling::KernelSigaction::ours(on_profile as usize)) } {
        write_stderr(b"lopi: cannot install the SIGPROF handler: no profile samples\n");
        return;
    }
    // The sigevent (64 bytes): signo at 8, notify at 12; written word by word (no vector
    // stores in the runtime's code paths).
    let mut ev = core::mem::MaybeUninit::<[u64; 8]>::uninit();
    let words = ev.as_mut_ptr() as *mut u64;
    for i in 0..8 {
        // SAFETY: a word of the sigevent.
        unsafe { write_volatile(words.add(i), 0) };
    }
    // SAFETY: signo and notify are the second word's halves.
    unsafe { write_volatile(words.add(1), SIGPROF as u64 | (SIGEV_SIGNAL as u32 as u64) << 32) };
    let mut id: i32 = -1;
    // SAFETY: timer_create with a valid sigevent and a place for the id.
    if unsafe { sys::call3(sys::TIMER_CREATE, CLOCK_PROCESS_CPUTIME_ID, ev.as_ptr() as usize, &mut id as *mut i32 as usize) } < 0 {
        write_stderr(b"lopi: cannot make the profile timer: no profile samples\n");
        return;
    }
    // SAFETY: this module's variables.
    unsafe {
        (*v).profile_old_action = old.words();
        (*v).profile_timer = id as u64 + 1;
    }
    let mut spec = core::mem::MaybeUninit::<[u64; 4]>::uninit();
    let words = spec.as_mut_ptr() as *mut u64;
    for i in 0..4 {
        let value = if i % 2 == 0 { ns / 1_000_000_000 } else { ns % 1_000_000_000 };
        // SAFETY: a word of the itimerspec.
        unsafe { write_volatile(words.add(i), value) };
    }
    // SAFETY: timer_settime of the timer just made, with a valid itimerspec.
    if unsafe { sys::call6(sys::TIMER_SETTIME, id as usize, 0, spec.as_ptr() as usize, 0, 0, 0) } < 0 {
        write_stderr(b"lopi: cannot start the profile timer: no profile samples\n");
    }
}

/// `SIGPROF`: the running thread's sample, if it has a chunk and is in none of lopi's probes.
extern "C" fn on_profile(_sig: i32, _info: *const u8, context: *const u8) {
    let v: *const RuntimeVars = vars();
    // SAFETY: a chunk above the first page is this thread's (checked by its tid); the kernel's
    // ucontext holds the interrupted registers; the busy flag keeps the sample out of a probe's
    // state, as a probe in a signal handler is kept out.
    unsafe {
        let Some(t) = Thread::existing(v) else { return };
        if read_volatile(&(*t.h).busy) != 0 {
            super::missed_sample(&t, v);
            return;
        }
        write_volatile(&mut (*t.h).busy, 1);
        let gregs = context.add(GREGS) as *const u64;
        let (pc, fp) = (read_volatile(gregs.add(REG_RIP)), read_volatile(gregs.add(REG_RBP)));
        super::run_profile(&t, v, pc, fp);
        write_volatile(&mut (*t.h).busy, 0);
    }
}
