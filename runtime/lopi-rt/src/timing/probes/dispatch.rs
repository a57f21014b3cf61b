//! The dispatch point (`lopi_rt_abi::dispatch`): the `SIGSYS` handler that Syscall User
//! Dispatch calls for a system call made from code no probe covers. The call is recorded as a
//! probed site's would be (`syscalls::dispatched`, at the module's last counter) and made
//! here, where the kernel lets it through, its result written into the interrupted context.
//!
//! What a signal handler cannot make for the program is made where the program made it:
//! `vfork` and a `clone` sharing memory (the child would run on the handler's stack) go back
//! to their `syscall` with the selector letting them through, counted and untimed. The
//! program's signal calls are made as `dispatch_masks.rs` says.
use super::dispatch_masks as masks;
use super::syscalls::{count_dispatched, dispatched};
use crate::abi::{dispatch, RuntimeVars, PAGE_SIZE};
use crate::base::mem::read_own;
use crate::base::sys::{self, write_stderr};
use crate::base::tcb::{own_tid, set_selector};
use crate::base::vars::vars;
use crate::timing::thread::sampling::{action, same_code, set_action, KernelSigaction, SIG_IGN};
use crate::timing::whatif::appkernel::Saved;
use core::arch::{asm, global_asm};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU64, Ordering};

pub(super) const SIGSYS: usize = 31;
const RT_SIGRETURN: u64 = 15;
const CLONE: u64 = 56;
const VFORK: u64 = 58;
const CLONE3: u64 = 435;
const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;

/// `ucontext_t`: the general registers (`uc_mcontext.gregs`).
const GREGS: usize = 40;
/// Indices into `gregs`.
const R8: usize = 0;
const R9: usize = 1;
const R10: usize = 2;
const R11: usize = 3;
const RDI: usize = 8;
const RSI: usize = 9;
const RBP: usize = 10;
const RDX: usize = 12;
const RAX: usize = 13;
const RSP: usize = 15;
const RIP: usize = 16;

global_asm!(
    // The signal return of the frame at `rdi` with the selector blocking the program's calls
    // again: only from the owner's runtime, which the kernel lets through.
    ".globl lopi_sigreturn_at",
    "lopi_sigreturn_at:",
    "mov byte ptr fs:[{selector}], {block}",
    "mov rsp, rdi",
    "mov eax, 15",
    "syscall",
    "ud2",
    selector = const dispatch::SELECTOR,
    block = const dispatch::BLOCK,
);

/// The runtime's first byte and its length (the linker script's symbols), RIP-relative: a
/// symbol's address taken in Rust may go through a GOT slot, which the flat blob cannot have.
fn own_range() -> (usize, usize) {
    let (start, end): (usize, usize);
    // SAFETY: computes addresses; reads nothing.
    unsafe { asm!("lea {}, [rip + lopi_rt_start]", "lea {}, [rip + lopi_rt_end]", out(reg) start, out(reg) end, options(nomem, nostack, preserves_flags)) };
    (start, end - start)
}

/// The address of `lopi_sigreturn_at`, RIP-relative as above.
fn sigreturn_code() -> usize {
    let at: usize;
    // SAFETY: computes an address; reads nothing.
    unsafe { asm!("lea {}, [rip + lopi_sigreturn_at]", out(reg) at, options(nomem, nostack, preserves_flags)) };
    at
}

/// Installs the handler (or finds another module's copy of it, which serves this module too)
/// and notes in `v` whose runtime it is and its range. A handler the program had (a running
/// program `lopi attach` finds) becomes the program's action, to which `SIGSYS`s that are not
/// the dispatcher's go; a detach puts it back.
pub(crate) unsafe fn install(v: *mut RuntimeVars) {
    // SAFETY: forwarded; rt_sigaction on this blob's code.
    unsafe {
        let Some(old) = action(SIGSYS) else {
            write_stderr(b"lopi: cannot read SIGSYS's action; calls from code no probe covers are not counted\n");
            return;
        };
        let own = on_sigsys as usize;
        let handler = if old.handler > SIG_IGN && same_code(old.handler, own) {
            old.handler
        } else {
            if !set_action(SIGSYS, &KernelSigaction::ours_nested(own)) {
                write_stderr(b"lopi: cannot install the SIGSYS handler; calls from code no probe covers are not counted\n");
                return;
            }
            write_volatile(&raw mut (*v).sigsys_program_action, old.words());
            own
        };
        // Every module's runtime is the same code: the owner's is this one moved by `shift`.
        let shift = handler.wrapping_sub(own);
        let owner_deltas = (crate::base::vars::deltas() as usize).wrapping_add(shift) as *const i64;
        let owner_vars = (owner_deltas as usize).wrapping_add(read_volatile(owner_deltas) as usize);
        let (start, len) = own_range();
        write_volatile(&raw mut (*v).dispatch_start, start.wrapping_add(shift) as u64);
        write_volatile(&raw mut (*v).dispatch_len, len as u64);
        write_volatile(&raw mut (*v).dispatch_owner, owner_vars as u64);
    }
}

/// Where the owner's copy of this runtime's `code` is.
pub(super) fn in_owner(v: *const RuntimeVars, code: usize) -> usize {
    // SAFETY: reads the module's variables.
    let start = unsafe { read_volatile(&(*v).dispatch_start) } as usize;
    code.wrapping_sub(own_range().0).wrapping_add(start)
}

/// True when the process catches calls from unprobed code (this module knows the owner).
pub(crate) unsafe fn active(v: *const RuntimeVars) -> bool {
    // SAFETY: reads the module's variables.
    unsafe { read_volatile(&(*v).dispatch_owner) != 0 }
}

/// The signal return of the frame at `rsp` (a probed `rt_sigreturn`'s), made from the owner's
/// runtime with the selector blocking: the selector the trampoline set to let the call
/// through would otherwise stay so in the context the call returns to.
pub(crate) unsafe fn sigreturn_at(v: *const RuntimeVars, rsp: u64) -> ! {
    let at = in_owner(v, sigreturn_code());
    // SAFETY: the owner's copy of `lopi_sigreturn_at`; the frame is the kernel's.
    unsafe {
        let f: unsafe extern "C" fn(u64) -> ! = core::mem::transmute(at);
        f(rsp)
    }
}

/// Syscall User Dispatch's signal: a call from code no probe covers, or from a trampoline
/// that a signal handler's return left blocked (its probes count it: made here, uncounted).
extern "C" fn on_sigsys(sig: i32, info: *const u8, context: *mut u8) {
    let v = vars();
    // SAFETY: the kernel's siginfo and ucontext for this signal; the registers are the
    // interrupted thread's, written back before the signal return restores them.
    unsafe {
        if read_volatile(info.add(8).cast::<i32>()) != dispatch::SI_CODE {
            masks::to_program(v, sig, info, context);
            return;
        }
        let g = context.add(GREGS).cast::<u64>();
        let reg = |i: usize| read_volatile(g.add(i));
        let nr = reg(RAX);
        let counted = !after_site(v, reg(RIP));
        let key = reg(RSP).wrapping_sub(128);
        let index = read_volatile(&(*v).counter_count).wrapping_sub(1);
        let mut saved = Saved { rbp: reg(RBP), r11: reg(R11), r10: reg(R10), r9: reg(R9), r8: reg(R8), rdi: reg(RDI), rsi: reg(RSI), rdx: reg(RDX), rax: nr };
        if nr == RT_SIGRETURN {
            if counted {
                count_dispatched(index, key, nr);
            }
            let own: unsafe extern "C" fn(u64) -> ! = core::mem::transmute(sigreturn_code());
            own(reg(RSP));
        }
        if at_site(v, nr, reg(RDI)) {
            if counted {
                count_dispatched(index, key, nr);
            }
            match stub_for(v, reg(RIP)) {
                Some(stub) => write_volatile(g.add(RIP), stub),
                // At its own `syscall`, with calls let through until the thread's next probed
                // call sets the selector back.
                None => {
                    write_volatile(g.add(RIP), reg(RIP) - 2);
                    set_selector(dispatch::ALLOW);
                }
            }
            return;
        }
        let make = |s: &mut Saved| match masks::signal_call(v, s.rax, [s.rdi, s.rsi, s.rdx, s.r10], context) {
            Some(result) => result,
            None => sys::raw6(s.rax as usize, s.rdi as usize, s.rsi as usize, s.rdx as usize, s.r10 as usize, s.r8 as usize, s.r9 as usize) as u64,
        };
        let result = if counted { dispatched(index, key, &mut saved, make) } else { make(&mut saved) };
        write_volatile(g.add(RAX), result);
    }
}

/// The stub of the call site whose `syscall` returns to `ret`, made now if it has none yet,
/// in the pool mapped at first use (`dispatch::stub`; `v` is the owner's variables). `None`
/// when the pool cannot be mapped or is full. A stub is published by its first byte, written
/// last; a thread runs a stub it did not write only after its own signal return, which
/// serialises.
unsafe fn stub_for(v: *mut RuntimeVars, ret: u64) -> Option<u64> {
    const PROT_READ_WRITE_EXEC: usize = 7;
    // SAFETY: the owner's variables page, whose words are 8-aligned; the pool is this
    // runtime's mapping, each slot written by the thread that took it.
    unsafe {
        let pool_word = AtomicU64::from_ptr(&raw mut (*v).dispatch_stubs);
        let taken = AtomicU64::from_ptr(&raw mut (*v).dispatch_stubs_taken);
        let mut pool = pool_word.load(Ordering::Acquire);
        if pool == 0 {
            let len = dispatch::STUBS * dispatch::STUB_LEN;
            let mapped = sys::call6(sys::MMAP, 0, len, PROT_READ_WRITE_EXEC, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
            if mapped < 0 {
                return None;
            }
            pool = match pool_word.compare_exchange(0, mapped as u64, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => mapped as u64,
                Err(other) => {
                    sys::call3(sys::MUNMAP, mapped as usize, len, 0);
                    other
                }
            };
        }
        let slot = |i: u64| pool + i * dispatch::STUB_LEN as u64;
        let code = dispatch::stub(ret);
        for i in 0..taken.load(Ordering::Acquire).min(dispatch::STUBS as u64) {
            let at = slot(i);
            if read_volatile(at as *const u8) == code[0] && read_volatile((at + dispatch::STUB_RETURN as u64) as *const u64) == ret {
                return Some(at);
            }
        }
        let i = taken.fetch_add(1, Ordering::AcqRel);
        if i >= dispatch::STUBS as u64 {
            return None;
        }
        let at = slot(i);
        for (k, &b) in code.iter().enumerate().skip(1) {
            write_volatile((at + k as u64) as *mut u8, b);
        }
        core::sync::atomic::fence(Ordering::Release);
        write_volatile(at as *mut u8, code[0]);
        Some(at)
    }
}

/// True when the code at `after` (right after the caught `syscall`) is a trampoline's
/// (`dispatch::SITE_SIGNATURE`). Read in place when it lies on the page of the `syscall`,
/// which just ran, else through `process_vm_readv`.
unsafe fn after_site(v: *const RuntimeVars, after: u64) -> bool {
    const LEN: usize = dispatch::SITE_SIGNATURE.len();
    let mut bytes = [0u8; LEN];
    // SAFETY: the page holding the `syscall`'s last byte is mapped and executable, so readable.
    unsafe {
        if (after - 1) / PAGE_SIZE == (after + LEN as u64 - 1) / PAGE_SIZE {
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = read_volatile((after + i as u64) as *const u8);
            }
        } else if read_own(own_tid(v), after, bytes.as_mut_ptr(), LEN as u64) != LEN as u64 {
            return false;
        }
    }
    bytes == dispatch::SITE_SIGNATURE
}

/// Calls a signal handler cannot make for the program: its child would run on this stack
/// (`vfork`, a `clone` or `clone3` sharing memory).
unsafe fn at_site(v: *const RuntimeVars, nr: u64, arg0: u64) -> bool {
    match nr {
        VFORK => true,
        CLONE => arg0 & (CLONE_VM | CLONE_VFORK) != 0,
        CLONE3 => {
            let mut flags = 0u64;
            // SAFETY: clone3's first argument points at its `clone_args`, flags first.
            unsafe { read_own(own_tid(v), arg0, (&raw mut flags).cast(), 8) == 8 && flags & (CLONE_VM | CLONE_VFORK) != 0 }
        }
        _ => false,
    }
}
