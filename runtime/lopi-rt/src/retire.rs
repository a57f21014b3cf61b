//! Coverage probes that take themselves out: once a probe has marked its block, running it
//! again records nothing new, so its trampoline calls `lopi_retire_stub`, which puts the
//! site's original code back. A program then pays for each block's first run only.
//!
//! The site changes while other threads may be running it, so every state they can see
//! must be whole code (the argument HotSpot makes for patching call sites in place):
//! 1. the bytes after the jump (int3 filler, which no thread ever runs) get the original
//!    code first;
//! 2. one `lock cmpxchg` of eight bytes inside one cache line then replaces the jump's bytes
//!    (the planner retires only sites whose jump lies within a cache line). A thread sees the
//!    jump, and goes through the trampoline, which stays for it, or the original code.
//!
//! `cmpxchg` also leaves the site alone if its bytes changed since they were read (a live
//! installer removing probes). The page is made writable with `mprotect` for the time of
//! the change and executable all along; if the process may not do that (a seccomp filter,
//! `MemoryDenyWriteExecute`), retiring stops and probes only mark. One thread retires at a
//! time; another, or a signal handler on the same thread, finds the lock held and leaves
//! the work to the probe's next run (see [`take`] for a holder that is gone).
use crate::abi::{retire, PAGE_SIZE};
use crate::sys;
use core::arch::{asm, global_asm};
use core::ptr::{addr_of_mut, read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

const PROT_READ_EXEC: usize = 1 | 4;
const PROT_READ_WRITE_EXEC: usize = 1 | 2 | 4;
const CACHE_LINE: usize = 64;
/// The jumps a site can start with: `jmp rel32` and `jmp rel8`.
const JMP32: u8 = 0xe9;
const JMP8: u8 = 0xeb;

global_asm!(
    // Called from a coverage trampoline below the red zone, with rdi = the site's record,
    // rsi = the site, both saved by the trampoline; flags and every other register are live.
    ".globl lopi_retire_stub",
    "lopi_retire_stub:",
    "pushfq",
    "cld",
    "push rax", "push rcx", "push rdx", "push r8", "push r9", "push r10", "push r11", "push rbx",
    "mov rbx, rsp",
    "and rsp, -16",
    "call {retire}",
    "mov rsp, rbx",
    "pop rbx", "pop r11", "pop r10", "pop r9", "pop r8", "pop rdx", "pop rcx", "pop rax",
    "popfq",
    "ret",
    retire = sym retire_site,
);

/// The process may not change its code.
struct Refused;

/// Puts back the original code at `site` from its `record` (see `abi::retire`).
unsafe extern "C" fn retire_site(record: *const u8, site: *mut u8) {
    let v = crate::timing::vars();
    // SAFETY: the runtime variables are this module's, in its RW segment, for the life of the
    // process; `AtomicU32` has the layout of `u32`.
    let (lock, off) = unsafe { (AtomicU32::from_ptr(addr_of_mut!((*v).retire_lock)), addr_of_mut!((*v).retire_off)) };
    // SAFETY: see above.
    if unsafe { read_volatile(off) } != 0 || !take(lock) {
        return;
    }
    // SAFETY: the trampoline passes its own record and site, which the planner built together.
    if let Err(Refused) = unsafe { restore(record, site) } {
        // SAFETY: see above.
        unsafe { write_volatile(off, 1) };
    }
    lock.store(0, Ordering::Release);
}

/// Takes the lock, its word then holding this thread's id; false when another thread of this
/// process holds it, or this one (a signal handler's probe inside a retirement). A holder
/// that is no thread of this process (a forked child inherits the word; a thread that exited
/// inside its handler) can never give it back: the lock is taken over.
fn take(lock: &AtomicU32) -> bool {
    // SAFETY: gettid takes no arguments.
    let me = unsafe { sys::call3(sys::GETTID, 0, 0, 0) } as u32;
    let holder = match lock.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
        Ok(_) => return true,
        Err(holder) => holder,
    };
    // SAFETY: getpid takes no arguments; signal 0 sends nothing.
    let gone = holder != me && unsafe { sys::call3(sys::TGKILL, sys::call3(sys::GETPID, 0, 0, 0) as usize, holder as usize, 0) } == sys::ESRCH;
    gone && lock.compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed).is_ok()
}

/// Leaves the site alone when it is already original, no longer starts with lopi's jump, or
/// changed while being restored.
unsafe fn restore(record: *const u8, site: *mut u8) -> Result<(), Refused> {
    // SAFETY: the record's header and `len` original bytes are in the trampoline's code.
    let (len, jump) = unsafe { (*record.add(retire::LEN) as usize, *record.add(retire::JUMP_LEN) as usize) };
    // SAFETY: as above, for i < len.
    let original = |i: usize| unsafe { *record.add(retire::ORIGINAL + i) };
    let line_offset = site as usize % CACHE_LINE;
    if !(jump == 2 || jump == 5) || len < jump || len > retire::MAX_LEN || line_offset + jump > CACHE_LINE {
        return Ok(());
    }
    // SAFETY: the site's `len` bytes are mapped code (read access is never taken away).
    let current = |i: usize| unsafe { read_volatile(site.add(i)) };
    if (0..len).all(|i| current(i) == original(i)) || ![JMP32, JMP8].contains(&current(0)) {
        return Ok(());
    }
    let page = site as usize & !(PAGE_SIZE as usize - 1);
    let pages = (site as usize + len).next_multiple_of(PAGE_SIZE as usize) - page;
    // SAFETY: changes the protection of the module's own code pages, which stay executable.
    if unsafe { sys::call3(sys::MPROTECT, page, pages, PROT_READ_WRITE_EXEC) } < 0 {
        return Err(Refused);
    }
    for i in jump..len {
        // SAFETY: filler bytes inside the patch, now writable; no thread runs them.
        unsafe { write_volatile(site.add(i), original(i)) };
    }
    // Eight bytes inside the jump's cache line that cover the jump: the bytes around it are
    // written back as they are.
    let window = (site as usize - line_offset + CACHE_LINE - 8).min(site as usize);
    let old: u64;
    // SAFETY: the window is inside the site's cache line, in the writable page.
    unsafe { asm!("mov {}, qword ptr [{}]", out(reg) old, in(reg) window, options(nostack, readonly, preserves_flags)) };
    let mut new = old;
    for i in 0..jump {
        let shift = 8 * (site as usize + i - window);
        new = (new & !(0xff << shift)) | (u64::from(original(i)) << shift);
    }
    // SAFETY: as above; a locked access within a cache line is atomic. If the bytes changed
    // since they were read, it writes nothing.
    unsafe { asm!("lock cmpxchg qword ptr [{w}], {new}", w = in(reg) window, new = in(reg) new, inout("rax") old => _, options(nostack)) };
    // SAFETY: gives the pages back their protection.
    unsafe { sys::call3(sys::MPROTECT, page, pages, PROT_READ_EXEC) };
    Ok(())
}
