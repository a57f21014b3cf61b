//! The program's `SIGSYS` while the process catches calls with Syscall User Dispatch: the
//! kernel turns a dispatched `SIGSYS` that is blocked into death, so the thread's real mask and
//! its handlers' masks never hold it, and the handler is always lopi's. The program sees what
//! it set all the same: `rt_sigprocmask`, `rt_sigaction` and `rt_sigpending` are made here
//! (from the probes, or from the handler for a caught call), with the thread's wish to block
//! `SIGSYS` in its thread control block (`dispatch::MASK_STATE`), each signal's in the owner's
//! variables, and the program's own `SIGSYS` action there too. A `SIGSYS` that is not the
//! dispatcher's (`raise`, `kill`, a seccomp filter's) goes to that action, or is held while the
//! program blocks it and raised again when it unblocks it.
//!
//! Word by word: a probe's slow path may not use vector registers (the stubs do not save
//! them), which an array's copy would.
use super::dispatch::SIGSYS;
use crate::abi::{dispatch, RuntimeVars};
use crate::base::mem::{read_own, write_own};
use crate::base::sys;
use crate::base::tcb::{mask_state, own_tid, selector, set_mask_state, set_selector};
use crate::timing::thread::sampling::{set_action, KernelSigaction, SIG_IGN};
use core::arch::{asm, global_asm};
use core::mem::MaybeUninit;
use core::ptr::{read_volatile, write_volatile};

const SIGSYS_BIT: u64 = 1 << (SIGSYS - 1);
/// Signals no mask holds: `SIGKILL` and `SIGSTOP`.
const UNBLOCKABLE: u64 = 1 << 8 | 1 << 18;
const SA_SIGINFO: u64 = 4;
const EFAULT: u64 = -14i64 as u64;
const EINVAL: u64 = -22i64 as u64;
const RT_SIGACTION: u64 = 13;
const RT_SIGPROCMASK: u64 = 14;
const RT_SIGPENDING: u64 = 127;
const SIG_BLOCK: u64 = 0;
const SIG_UNBLOCK: u64 = 1;
const SIG_SETMASK: u64 = 2;
/// `ucontext_t.uc_sigmask`: the mask a signal return restores.
const UC_SIGMASK: usize = 296;

/// `rt_sigaction`, `rt_sigprocmask` or `rt_sigpending` (`nr`, first arguments `args`) made as
/// the program sees it: `Some(result)`; `None` for other calls. `context` is a caught call's
/// interrupted context, whose mask the signal return restores (null: the thread's own mask).
pub(crate) unsafe fn signal_call(v: *const RuntimeVars, nr: u64, args: [u64; 4], context: *mut u8) -> Option<u64> {
    // SAFETY: forwarded.
    unsafe {
        match nr {
            RT_SIGACTION => Some(sigaction(v, args)),
            RT_SIGPROCMASK => Some(sigprocmask(v, args, context)),
            RT_SIGPENDING => Some(sigpending(v, args[0], args[1])),
            _ => None,
        }
    }
}

/// The owner's variables, where the process's `SIGSYS` state is.
unsafe fn owner(v: *const RuntimeVars) -> *mut RuntimeVars {
    // SAFETY: set at init, before any probe runs.
    unsafe { read_volatile(&(*v).dispatch_owner) as *mut RuntimeVars }
}

/// `rt_sigaction(sig, act, oldact, size)`: `SIGSYS` out of the handler's mask the kernel gets
/// and back in the one `oldact` reads; a handler given is called by the runtime's wrapper,
/// and read back as given; `SIGSYS`'s own action kept apart.
unsafe fn sigaction(v: *const RuntimeVars, [sig, act, oldact, size]: [u64; 4]) -> u64 {
    // SAFETY: the program's pointers through process_vm_*; the copies are read once filled.
    unsafe {
        if size != 8 || !(1..=64).contains(&sig) {
            return sys::raw6(RT_SIGACTION as usize, sig as usize, act as usize, oldact as usize, size as usize, 0, 0) as u64;
        }
        if sig == SIGSYS as u64 {
            return program_action(v, act, oldact);
        }
        let pid = own_tid(v);
        let owner = owner(v);
        let masks = &raw mut (*owner).sigsys_in_masks;
        let handlers = (&raw mut (*owner).program_handlers).cast::<u64>().add(sig as usize - 1);
        let wrapper = super::dispatch::in_owner(v, wrapper_code()) as u64;
        let bit = 1u64 << (sig - 1);
        let mut given = MaybeUninit::<[u64; 4]>::uninit();
        let words = given.as_mut_ptr().cast::<u64>();
        let mut wants = false;
        let mut handler = 0;
        if act != 0 {
            if read_own(pid, act, words.cast(), 32) != 32 {
                return EFAULT;
            }
            let mask = read_volatile(words.add(3));
            wants = mask & SIGSYS_BIT != 0;
            write_volatile(words.add(3), mask & !SIGSYS_BIT);
            handler = read_volatile(words);
            if handler > SIG_IGN as u64 {
                write_volatile(words, wrapper);
            }
        }
        let had = read_volatile(masks) & bit != 0;
        let had_handler = read_volatile(handlers);
        let result = sys::raw6(RT_SIGACTION as usize, sig as usize, if act != 0 { words as usize } else { 0 }, oldact as usize, 8, 0, 0) as u64;
        if result != 0 {
            return result;
        }
        if act != 0 {
            let all = read_volatile(masks);
            write_volatile(masks, if wants { all | bit } else { all & !bit });
            // Never cleared: a vfork child resetting actions shares this table with its parent.
            if handler > SIG_IGN as u64 {
                write_volatile(handlers, handler);
            }
        }
        if oldact != 0 {
            let mut old = MaybeUninit::<[u64; 4]>::uninit();
            let words = old.as_mut_ptr().cast::<u64>();
            if read_own(pid, oldact, words.cast(), 32) == 32 {
                if read_volatile(words) == wrapper {
                    write_volatile(words, had_handler);
                }
                if had {
                    write_volatile(words.add(3), read_volatile(words.add(3)) | SIGSYS_BIT);
                }
                write_own(pid, oldact, words.cast(), 32);
            }
        }
        0
    }
}

global_asm!(
    // The kernel's entry to a program's signal handler (`rdi` = signal): the selector set to
    // block calls (the signal may have come as a call returned, the selector letting it
    // through), then on to the program's handler, with nothing of the runtime's left on the
    // stack: its return goes to its signal return, which lopi makes with the selector blocking
    // (`sigreturn_at`) and through which a context interrupted on its way into a call finds
    // that call caught and made. Only the owner's copy runs: its variables hold the handlers.
    ".globl lopi_signal_wrapper",
    "lopi_signal_wrapper:",
    "mov byte ptr fs:[{selector}], {block}",
    "lea rax, [rip + LOPI_DELTAS]",
    "add rax, [rax]",
    "jmp qword ptr [rax + rdi*8 + {handlers} - 8]",
    selector = const dispatch::SELECTOR,
    block = const dispatch::BLOCK,
    handlers = const core::mem::offset_of!(RuntimeVars, program_handlers),
);

/// The address of `lopi_signal_wrapper`, RIP-relative (a symbol's address taken in Rust may go
/// through a GOT slot, which the flat blob cannot have).
fn wrapper_code() -> usize {
    let at: usize;
    // SAFETY: computes an address; reads nothing.
    unsafe { asm!("lea {}, [rip + lopi_signal_wrapper]", out(reg) at, options(nomem, nostack, preserves_flags)) };
    at
}

/// `rt_sigaction(SIGSYS, act, oldact, 8)`: the program's own action read and replaced; the
/// kernel keeps lopi's handler.
unsafe fn program_action(v: *const RuntimeVars, act: u64, oldact: u64) -> u64 {
    // SAFETY: the owner's variables page; the program's pointers through process_vm_*.
    unsafe {
        let kept = (&raw mut (*owner(v)).sigsys_program_action).cast::<u64>();
        let pid = own_tid(v);
        let mut new = MaybeUninit::<[u64; 4]>::uninit();
        let words = new.as_mut_ptr().cast::<u64>();
        if act != 0 && read_own(pid, act, words.cast(), 32) != 32 {
            return EFAULT;
        }
        if oldact != 0 && !write_own(pid, oldact, kept.cast(), 32) {
            return EFAULT;
        }
        if act != 0 {
            for i in 0..4 {
                let word = read_volatile(words.add(i));
                write_volatile(kept.add(i), if i == 3 { word & !UNBLOCKABLE } else { word });
            }
        }
        0
    }
}

/// `rt_sigprocmask(how, set, oldset, size)`: the real mask without `SIGSYS`, the program's wish
/// for it in the thread's state; a `SIGSYS` held while it was blocked is raised once unblocked.
/// With `context`, the mask changed is the one its signal return restores (the handler's own
/// would be thrown away then).
unsafe fn sigprocmask(v: *const RuntimeVars, [how, set, oldset, size]: [u64; 4], context: *mut u8) -> u64 {
    // SAFETY: the program's pointers through process_vm_*; `context` is the kernel's.
    unsafe {
        if size != 8 {
            return EINVAL;
        }
        let pid = own_tid(v);
        let mut given = 0u64;
        if set != 0 && read_own(pid, set, (&raw mut given).cast(), 8) != 8 {
            return EFAULT;
        }
        let state = mask_state();
        let blocks = state & dispatch::PROGRAM_BLOCKS != 0;
        let asks = given & SIGSYS_BIT != 0;
        let still_blocks = match (set, how) {
            (0, _) => blocks,
            (_, SIG_BLOCK) => blocks || asks,
            (_, SIG_UNBLOCK) => blocks && !asks,
            (_, SIG_SETMASK) => asks,
            _ => return EINVAL,
        };
        let given = given & !SIGSYS_BIT;
        let mut old = 0u64;
        if context.is_null() {
            let result = sys::raw6(RT_SIGPROCMASK as usize, how as usize, if set != 0 { (&raw const given) as usize } else { 0 }, (&raw mut old) as usize, 8, 0, 0);
            if result != 0 {
                return result as u64;
            }
        } else {
            let mask = context.add(UC_SIGMASK).cast::<u64>();
            old = read_volatile(mask);
            let new = match (set, how) {
                (0, _) => old,
                (_, SIG_BLOCK) => old | given,
                (_, SIG_UNBLOCK) => old & !given,
                _ => given,
            };
            write_volatile(mask, new & !(UNBLOCKABLE | SIGSYS_BIT));
        }
        let shown = if blocks { old | SIGSYS_BIT } else { old };
        if oldset != 0 && !write_own(pid, oldset, (&raw const shown).cast(), 8) {
            return EFAULT;
        }
        let held = state & dispatch::HELD != 0;
        set_mask_state(if still_blocks { dispatch::PROGRAM_BLOCKS } else { 0 } | if still_blocks && held { dispatch::HELD } else { 0 });
        if held && !still_blocks {
            raise_again(v);
        }
        0
    }
}

/// `rt_sigpending(set, size)`: with a `SIGSYS` the program's mask holds.
unsafe fn sigpending(v: *const RuntimeVars, set: u64, size: u64) -> u64 {
    // SAFETY: the program's pointer through process_vm_*.
    unsafe {
        let result = sys::raw6(RT_SIGPENDING as usize, set as usize, size as usize, 0, 0, 0, 0) as u64;
        if result == 0 && mask_state() & dispatch::HELD != 0 {
            let pid = own_tid(v);
            let mut pending = 0u64;
            if read_own(pid, set, (&raw mut pending).cast(), 8) == 8 {
                pending |= SIGSYS_BIT;
                write_own(pid, set, (&raw const pending).cast(), 8);
            }
        }
        result
    }
}

/// Sends the thread the `SIGSYS` it held.
unsafe fn raise_again(v: *const RuntimeVars) {
    // SAFETY: tgkill to this thread.
    unsafe {
        let pid = sys::call3(sys::GETPID, 0, 0, 0);
        sys::call3(sys::TGKILL, pid as usize, own_tid(v) as usize, SIGSYS);
    }
}

/// A `SIGSYS` that is not the dispatcher's: held while the program blocks it, else the
/// program's action. Its default ends the process, as it would have.
pub(super) unsafe fn to_program(v: *const RuntimeVars, sig: i32, info: *const u8, context: *mut u8) {
    // SAFETY: the owner's variables (this handler is the owner's code); a handler the program
    // gave is its code, called as the kernel would call it.
    unsafe {
        let state = mask_state();
        if state & dispatch::PROGRAM_BLOCKS != 0 {
            set_mask_state(state | dispatch::HELD);
            return;
        }
        let kept = (&raw const (*owner(v)).sigsys_program_action).cast::<u64>();
        let (handler, flags) = (read_volatile(kept), read_volatile(kept.add(1)));
        match handler as usize {
            0 => {
                set_action(SIGSYS, &KernelSigaction::default_action());
                raise_again(v);
            }
            SIG_IGN => {}
            // With the selector blocking calls, as the wrapper runs other handlers: this signal
            // may have come as a call returned.
            h => {
                let was = selector();
                set_selector(dispatch::BLOCK);
                if flags & SA_SIGINFO != 0 {
                    let f: extern "C" fn(i32, *const u8, *mut u8) = core::mem::transmute(h);
                    f(sig, info, context);
                } else {
                    let f: extern "C" fn(i32) = core::mem::transmute(h);
                    f(sig);
                }
                set_selector(was);
            }
        }
    }
}
