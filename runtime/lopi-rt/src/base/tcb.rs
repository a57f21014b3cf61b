//! The words of glibc's thread control block that lopi owns (`fs:0x38` and `fs:0x40`,
//! `tcbhead_t.unused_vgetcpu_cache`, which nothing else uses on x86-64), and the thread id
//! glibc keeps in its thread descriptor.
use super::sys;
use crate::abi::RuntimeVars;
use core::arch::asm;

#[inline(always)]
pub(crate) fn thread_slot() -> usize {
    let t: usize;
    // SAFETY: fs points at the thread control block on every glibc thread.
    unsafe { asm!("mov {}, fs:[0x38]", out(reg) t, options(nostack, readonly, preserves_flags)) };
    t
}

/// The u32 at `offset` from the thread pointer.
#[inline(always)]
pub(crate) fn thread_word(offset: u32) -> u32 {
    let w: u32;
    // SAFETY: `offset` is within glibc's thread descriptor (checked when it was found).
    unsafe { asm!("mov {:e}, fs:[{}]", out(reg) w, in(reg) offset as usize, options(nostack, readonly, preserves_flags)) };
    w
}

#[inline(always)]
pub(crate) fn set_thread_slot(t: usize) {
    // SAFETY: writes the TCB word lopi owns (see the module comment).
    unsafe { asm!("mov fs:[0x38], {}", in(reg) t, options(nostack, preserves_flags)) };
}

/// `fs:0x40` (`unused_vgetcpu_cache[1]`): between a fork handler and the child's first
/// probe, the snapshot of the forking thread's open calls; 0 otherwise.
pub(crate) fn fork_slot() -> usize {
    let s: usize;
    // SAFETY: reads the second TCB word lopi owns.
    unsafe { asm!("mov {}, fs:[0x40]", out(reg) s, options(nostack, readonly, preserves_flags)) };
    s
}

pub(crate) fn set_fork_slot(s: usize) {
    // SAFETY: writes the second TCB word lopi owns.
    unsafe { asm!("mov fs:[0x40], {}", in(reg) s, options(nostack, preserves_flags)) };
}

/// The calling thread's id: glibc's copy in its thread descriptor when its place is known
/// (no system call), else `gettid`.
pub(crate) fn own_tid(v: *const RuntimeVars) -> u32 {
    // SAFETY: `v` is this module's variables page; the offset, when set, was checked to lie
    // within glibc's thread descriptor.
    match unsafe { (*v).tid_offset } {
        // SAFETY: gettid takes no arguments.
        0 => unsafe { sys::call3(sys::GETTID, 0, 0, 0) as u32 },
        offset => thread_word(offset),
    }
}
