//! The words of glibc's thread control block that lopi owns (`fs:0x38` and `fs:0x40`,
//! `tcbhead_t.unused_vgetcpu_cache`, which nothing else uses on x86-64, and the Syscall User
//! Dispatch selector and `SIGSYS` state bytes at `fs:0x4c`, in `__glibc_unused1`), and the thread id glibc keeps in
//! its thread descriptor.
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

/// The byte at `offset` of the thread control block, one lopi owns.
#[inline(always)]
fn own_byte(offset: u32) -> u8 {
    let b: u8;
    // SAFETY: reads a TCB byte lopi owns (see the module comment).
    unsafe { asm!("mov {}, byte ptr fs:[{}]", out(reg_byte) b, in(reg) offset as usize, options(nostack, readonly, preserves_flags)) };
    b
}

#[inline(always)]
fn set_own_byte(offset: u32, value: u8) {
    // SAFETY: writes a TCB byte lopi owns (see the module comment).
    unsafe { asm!("mov byte ptr fs:[{}], {}", in(reg) offset as usize, in(reg_byte) value, options(nostack, preserves_flags)) };
}

/// The thread's Syscall User Dispatch selector (`lopi_rt_abi::dispatch`).
pub(crate) fn selector() -> u8 {
    own_byte(crate::abi::dispatch::SELECTOR)
}

pub(crate) fn set_selector(value: u8) {
    set_own_byte(crate::abi::dispatch::SELECTOR, value);
}

/// The thread's `SIGSYS` state byte (`lopi_rt_abi::dispatch::MASK_STATE`).
pub(crate) fn mask_state() -> u8 {
    own_byte(crate::abi::dispatch::MASK_STATE)
}

pub(crate) fn set_mask_state(value: u8) {
    set_own_byte(crate::abi::dispatch::MASK_STATE, value);
}

/// The thread's "a call copying the process is being made" byte (`dispatch::FORKING`).
pub(crate) fn forking() -> bool {
    own_byte(crate::abi::dispatch::FORKING) != 0
}

pub(crate) fn set_forking(on: bool) {
    set_own_byte(crate::abi::dispatch::FORKING, u8::from(on));
}

/// In a forked child: glibc's copy of the thread id set to the child's own (see
/// `dispatch::FORKING`). True when it was its parent's: the program made the call itself, and
/// no fork handler saw it.
pub(crate) fn take_own_tid(v: *const RuntimeVars) -> bool {
    // SAFETY: the offset, when set, was checked to lie within glibc's thread descriptor.
    unsafe {
        let offset = (*v).tid_offset;
        let tid = sys::call3(sys::GETTID, 0, 0, 0) as u32;
        if offset == 0 || thread_word(offset) == tid {
            return false;
        }
        asm!("mov dword ptr fs:[{}], {:e}", in(reg) offset as usize, in(reg) tid, options(nostack, preserves_flags));
        true
    }
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
