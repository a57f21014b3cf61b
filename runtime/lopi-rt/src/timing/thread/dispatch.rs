//! Syscall User Dispatch, per thread (`lopi_rt_abi::dispatch`): a thread's first chunk turns it
//! on for the thread (the kernel clears it in every new task), so that its calls from code no
//! probe covers raise `SIGSYS` (the handler is `probes/dispatch.rs`'s).
use crate::abi::{dispatch, RuntimeVars};
use crate::base::sys::{self, write_stderr};
use crate::base::tcb::{set_mask_state, set_selector};
use core::arch::asm;
use core::ptr::write_volatile;

const PR_SET_SYSCALL_USER_DISPATCH: usize = 59;
const PR_SYS_DISPATCH_ON: usize = 1;
const RT_SIGPROCMASK: usize = 14;
const SIG_UNBLOCK: usize = 1;
const SIGSYS: usize = 31;

/// Turns dispatch on for the calling thread when its process catches calls from unprobed
/// code: the owner's runtime is the range let through, the thread's selector byte in its
/// thread control block, set to block. A kernel without it (before Linux 5.11) is said once
/// per module, which then stops asking.
pub(crate) unsafe fn start(v: *mut RuntimeVars) {
    // SAFETY: `v` is this module's variables page.
    unsafe {
        if (*v).dispatch_owner == 0 {
            return;
        }
        let tcb: usize;
        // SAFETY: fs:0x10 is the thread control block's own address on every glibc thread.
        asm!("mov {}, fs:[0x10]", out(reg) tcb, options(nostack, readonly, preserves_flags));
        let selector = tcb + dispatch::SELECTOR as usize;
        let on = sys::call6(sys::PRCTL, PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, (*v).dispatch_start as usize, (*v).dispatch_len as usize, selector, 0);
        if on < 0 {
            write_volatile(&raw mut (*v).dispatch_owner, 0);
            write_stderr(b"lopi: this kernel has no Syscall User Dispatch (Linux 5.11): system calls from code no probe covers (JIT code, libraries loaded later) are not counted\n");
            return;
        }
        set_selector(dispatch::BLOCK);
        // The thread's mask may hold SIGSYS (set before dispatch was on: a new thread's,
        // restored from its creator's as the program saw it), which would make a caught call
        // fatal: taken out, and kept as the program's wish. A reused control block's state
        // (a finished thread's) is replaced; no signal is held yet.
        let sigsys = 1u64 << (SIGSYS - 1);
        let mut old = 0u64;
        sys::call6(RT_SIGPROCMASK, SIG_UNBLOCK, (&raw const sigsys) as usize, (&raw mut old) as usize, 8, 0, 0);
        set_mask_state(if old & sigsys != 0 { dispatch::PROGRAM_BLOCKS } else { 0 });
    }
}
