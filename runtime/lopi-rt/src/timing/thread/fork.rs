//! Fork handlers: right before `fork`, the forking thread's open calls go into a snapshot that
//! its TCB names, which the child inherits; the child's first probe continues them
//! (`start.rs`).
use super::chunk::Thread;
use crate::abi::{self, RuntimeVars};
use crate::base::sys;
use crate::base::tcb::set_fork_slot;
use crate::base::vars::vars;
use crate::loader::{libc_symbols, Auxv};

/// Registers `before_fork`/`after_fork_in_parent` with glibc (`__register_atfork`, what
/// `pthread_atfork` calls), with a private snapshot buffer. Only executables do: they are
/// never unloaded, so the handlers never outlive their code.
pub(crate) unsafe fn register_handlers(v: *mut RuntimeVars, auxv: &Auxv) {
    type Handler = unsafe extern "C" fn();
    type RegisterAtfork = unsafe extern "C" fn(Option<Handler>, Option<Handler>, Option<Handler>, *mut u8) -> i32;
    let Some([Some(register)]) = libc_symbols(auxv, [b"__register_atfork\0"]) else { return };
    // SAFETY: a fresh private mapping for the snapshot; `register` is glibc's
    // `__register_atfork`, called with handlers that live as long as the process.
    unsafe {
        let len = abi::page_align(8 + 24 * u64::from(fork_snapshot_frames(v))) as usize;
        let buffer = sys::call6(sys::MMAP, 0, len, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if buffer <= 0 {
            return;
        }
        (*v).fork_snapshot = buffer as u64;
        let register: RegisterAtfork = core::mem::transmute(register);
        register(Some(before_fork), Some(after_fork_in_parent), None, core::ptr::null_mut());
    }
}

/// Open calls a fork snapshot keeps (a child forked deeper sees the outermost ones).
unsafe fn fork_snapshot_frames(v: *const RuntimeVars) -> u32 {
    // SAFETY: the variables page is set up before the handlers are registered.
    unsafe { (*v).stack_limit.min(1 << 16) }
}

/// In the forking thread, right before `fork`: copies its open calls into the snapshot and
/// names the snapshot in the thread's TCB, which the child inherits.
unsafe extern "C" fn before_fork() {
    let v = vars();
    // SAFETY: the snapshot buffer holds 8 + 24 * fork_snapshot_frames bytes; the thread's chunk is its
    // own (tid checked by `Thread::current`).
    unsafe {
        let snapshot = (*v).fork_snapshot as *mut u32;
        let Some(t) = Thread::existing(v) else { return };
        if snapshot.is_null() {
            return;
        }
        let frames = snapshot.add(2) as *mut u64;
        let mut depth = 0;
        for (i, (rsp, func, start)) in t.open_calls().take(fork_snapshot_frames(v) as usize).enumerate() {
            *frames.add(3 * i) = rsp;
            *frames.add(3 * i + 1) = func;
            *frames.add(3 * i + 2) = start;
            depth = i + 1;
        }
        *snapshot = (*t.h).pid;
        *snapshot.add(1) = depth as u32;
        set_fork_slot(snapshot as usize);
    }
}

/// In the parent, right after `fork`: the snapshot was for the child only.
unsafe extern "C" fn after_fork_in_parent() {
    set_fork_slot(0);
}
