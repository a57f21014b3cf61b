//! Code the runtime changes under running threads. Coverage probes take themselves out: once
//! a probe has marked its block, running it again records nothing new, so its trampoline
//! calls `lopi_retire_stub`, which puts the site's original code back. A program then pays
//! for each block's first run only. And a function the perturbation budget switched to
//! counting gets its entry's jump retargeted to its trampoline's counting code and its exit
//! sites' original code back ([`switch_code`]), so that it costs what counting costs.
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
use crate::base::sys;
use core::arch::{asm, global_asm};
use core::ptr::{addr_of_mut, read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

const PROT_READ_EXEC: usize = 1 | 4;
const PROT_READ_WRITE_EXEC: usize = 1 | 2 | 4;
const CACHE_LINE: usize = 64;
/// The jumps a site can start with: `jmp rel32` and `jmp rel8`.
const JMP32: u8 = 0xe9;
const JMP8: u8 = 0xeb;
const NOP: u8 = 0x90;

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
    let v = crate::base::vars::vars();
    // SAFETY: the runtime variables are this module's, in its RW segment, for the life of the
    // process; `AtomicU32` has the layout of `u32`.
    let (lock, off) = unsafe { (AtomicU32::from_ptr(addr_of_mut!((*v).retire_lock)), addr_of_mut!((*v).retire_off)) };
    // SAFETY: see above.
    if unsafe { read_volatile(off) } != 0 || !take(lock, v) {
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
/// inside its handler) can never give it back: the lock is taken over. The id is glibc's copy
/// where the runtime knows its place (no system call per retirement); a vfork child has its
/// parent's there, which only matters if the child dies inside a retirement (retiring then
/// stops, probes only mark).
fn take(lock: &AtomicU32, v: *const crate::abi::RuntimeVars) -> bool {
    let me = crate::base::tcb::own_tid(v);
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
    let original = record.wrapping_add(retire::ORIGINAL);
    if !(jump == 2 || jump == 5) {
        return Ok(());
    }
    // SAFETY: the site's code and `len` bytes of it in the record, which the planner built
    // together.
    unsafe {
        // Another thread may have put it back already: no need to make the pages writable.
        if !needs_swap(site, original, len, jump) {
            return Ok(());
        }
        let pages = Writable::make(site as usize, site as usize + len)?;
        swap(site, original, len, jump);
        pages.restore();
    }
    Ok(())
}

/// Code pages made writable (and still executable) for the time of a change.
struct Writable {
    start: usize,
    len: usize,
}

impl Writable {
    unsafe fn make(start: usize, end: usize) -> Result<Self, Refused> {
        let start = start & !(PAGE_SIZE as usize - 1);
        let len = end.next_multiple_of(PAGE_SIZE as usize) - start;
        // SAFETY: changes the protection of the module's own code pages, which stay
        // executable.
        if unsafe { sys::call3(sys::MPROTECT, start, len, PROT_READ_WRITE_EXEC) } < 0 {
            return Err(Refused);
        }
        Ok(Self { start, len })
    }

    fn restore(self) {
        // SAFETY: gives the pages back their protection.
        unsafe { sys::call3(sys::MPROTECT, self.start, self.len, PROT_READ_EXEC) };
    }
}

/// Replaces the `len` bytes at `site`, writable, with those at `new`: the bytes after the
/// first `jump` (filler no thread runs) first, then those with one atomic store. Leaves the
/// site alone when it already holds them, when it is not what lopi put there (a jump, or a
/// `nop` for a one-byte swap), or when it changed meanwhile.
unsafe fn swap(site: *mut u8, new: *const u8, len: usize, jump: usize) {
    // SAFETY: forwarded.
    if !unsafe { needs_swap(site, new, len, jump) } {
        return;
    }
    // SAFETY: `new` holds `len` bytes (callers' contract).
    let byte = |i: usize| unsafe { *new.add(i) };
    let line_offset = site as usize % CACHE_LINE;
    for i in jump..len {
        // SAFETY: filler bytes inside the patch, writable; no thread runs them.
        unsafe { write_volatile(site.add(i), byte(i)) };
    }
    // Eight bytes inside the jump's cache line that cover the jump: the bytes around it are
    // written back as they are.
    let window = (site as usize - line_offset + CACHE_LINE - 8).min(site as usize);
    let old: u64;
    // SAFETY: the window is inside the site's cache line, in a writable page.
    unsafe { asm!("mov {}, qword ptr [{}]", out(reg) old, in(reg) window, options(nostack, readonly, preserves_flags)) };
    let mut value = old;
    for i in 0..jump {
        let shift = 8 * (site as usize + i - window);
        value = (value & !(0xff << shift)) | (u64::from(byte(i)) << shift);
    }
    // SAFETY: as above; a locked access within a cache line is atomic. If the bytes changed
    // since they were read, it writes nothing.
    unsafe { asm!("lock cmpxchg qword ptr [{w}], {new}", w = in(reg) window, new = in(reg) value, inout("rax") old => _, options(nostack)) };
}

/// False when the swap cannot be made safely (its jump would span two cache lines), the site
/// already holds the bytes at `new`, or it is not what lopi put there.
unsafe fn needs_swap(site: *const u8, new: *const u8, len: usize, jump: usize) -> bool {
    if jump == 0 || len < jump || len > retire::MAX_LEN || site as usize % CACHE_LINE + jump > CACHE_LINE {
        return false;
    }
    // SAFETY: the site's `len` bytes are mapped code (read access is never taken away); `new`
    // holds `len` bytes.
    let (current, byte) = unsafe { (|i: usize| read_volatile(site.add(i)), |i: usize| *new.add(i)) };
    let ours = if jump == 1 { current(0) == NOP } else { [JMP32, JMP8].contains(&current(0)) };
    ours && (0..len).any(|i| current(i) != byte(i))
}

/// Makes the swaps of the module's functions `indices`, which the budget has just switched to
/// counting (see `abi::switches`): their entries jump straight to their trampolines' counting
/// code and their exit sites get their original code back, so that they cost what counting
/// costs. Left to their mode words (which already count them) when another thread is changing
/// code or the process may not.
pub(crate) unsafe fn switch_code(v: *mut crate::abi::RuntimeVars, indices: &[u32]) {
    // SAFETY: the table is the module's, as the image wrote it: a `u32` per counter, then the
    // records; the variables are this module's.
    unsafe {
        let table = (*v).switches as *const u8;
        if table.is_null() || indices.is_empty() {
            return;
        }
        let (lock, off) = (AtomicU32::from_ptr(addr_of_mut!((*v).retire_lock)), addr_of_mut!((*v).retire_off));
        if read_volatile(off) != 0 || !take(lock, v) {
            return;
        }
        let (mut low, mut high) = (usize::MAX, 0);
        for_each_swap(table, (*v).counter_count, indices, |site, _, len, _| {
            low = low.min(site as usize);
            high = high.max(site as usize + len);
        });
        if low < high {
            match Writable::make(low, high) {
                Ok(pages) => {
                    for_each_swap(table, (*v).counter_count, indices, |site, new, len, jump| swap(site, new, len, jump));
                    pages.restore();
                }
                Err(Refused) => write_volatile(off, 1),
            }
        }
        lock.store(0, Ordering::Release);
    }
}

/// Calls `f(site, new bytes, length, jump length)` for each swap of functions `indices`.
unsafe fn for_each_swap(table: *const u8, counters: u64, indices: &[u32], mut f: impl FnMut(*mut u8, *const u8, usize, usize)) {
    use crate::abi::switches::SWAP_HEADER_LEN;
    // SAFETY: see `switch_code`.
    unsafe {
        for &i in indices.iter().filter(|&&i| u64::from(i) < counters) {
            let record = (table.add(4 * i as usize) as *const u32).read_unaligned();
            if record == 0 {
                continue;
            }
            let mut at = table.add(record as usize);
            let count = (at as *const u32).read_unaligned();
            at = at.add(4);
            for _ in 0..count {
                let offset = (at as *const i64).read_unaligned();
                let (len, jump) = (*at.add(8) as usize, *at.add(9) as usize);
                f(table.wrapping_offset(offset as isize) as *mut u8, at.add(SWAP_HEADER_LEN), len, jump);
                at = at.add(SWAP_HEADER_LEN + len);
            }
        }
    }
}
