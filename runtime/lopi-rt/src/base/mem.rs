//! Copying memory without libc: `copy` for the runtime's own copies, and the `mem*` functions
//! the compiler may emit calls to.
use super::sys;
use core::arch::asm;

/// Copies up to `len` bytes of this process's (`pid`'s) memory at `src` to `dst` with
/// `process_vm_readv`, which fails instead of faulting on a bad address: how many were read.
/// The part before the next page is read on its own (the call reads a part whole or not at
/// all), so that what ends before an unmapped page is still read.
pub(crate) unsafe fn read_own(pid: u32, src: u64, dst: *mut u8, len: u64) -> u64 {
    // SAFETY: `dst` has `len` bytes; the iovecs are on this stack.
    unsafe {
        let first = (4096 - src % 4096).min(len);
        let local = [dst as u64, len];
        let remote = [src, first, src.wrapping_add(first), len - first];
        let iovecs = if first == len { 1 } else { 2 };
        let got = sys::call6(sys::PROCESS_VM_READV, pid as usize, local.as_ptr() as usize, 1, remote.as_ptr() as usize, iovecs, 0);
        got.max(0) as u64
    }
}

/// Copies `len` bytes from `src` to this process's (`pid`'s) memory at `dst` with
/// `process_vm_writev`, which fails instead of faulting on a bad address: true when all were
/// written.
pub(crate) unsafe fn write_own(pid: u32, dst: u64, src: *const u8, len: u64) -> bool {
    // SAFETY: `src` has `len` bytes; the iovecs are on this stack.
    unsafe {
        let local = [src as u64, len];
        let remote = [dst, len];
        sys::call6(sys::PROCESS_VM_WRITEV, pid as usize, local.as_ptr() as usize, 1, remote.as_ptr() as usize, 1, 0) == len as isize
    }
}

/// Copies `len` bytes between regions that do not overlap. Not `memcpy`: a call of the
/// exported symbol may go through a GOT slot, which the flat blob cannot have.
pub(crate) unsafe fn copy(dst: usize, src: usize, len: usize) {
    // SAFETY: the caller's ranges are mapped and disjoint.
    unsafe { core::arch::asm!("rep movsb", inout("rcx") len => _, inout("rdi") dst => _, inout("rsi") src => _, options(nostack, preserves_flags)) };
}

// The compiler may emit calls to these; the blob has no libc to provide them. `rep` string
// instructions keep LLVM from recognising the loops and calling these functions recursively.

#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees non-overlapping valid ranges (memcpy contract).
    unsafe { asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _, options(nostack, preserves_flags)) };
    dst
}

#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: memmove contract; copy backwards (std) when the ranges overlap that way.
    unsafe {
        if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize + n) {
            asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _, options(nostack, preserves_flags));
        } else {
            asm!("std", "rep movsb", "cld",
                inout("rcx") n => _, inout("rdi") dst.add(n).wrapping_sub(1) => _, inout("rsi") src.add(n).wrapping_sub(1) => _,
                options(nostack));
        }
    }
    dst
}

#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: memset contract.
    unsafe { asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") c as u8, options(nostack, preserves_flags)) };
    dst
}

#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: memcmp contract: both ranges are valid for n bytes.
        let (x, y) = unsafe { (core::ptr::read_volatile(a.add(i)), core::ptr::read_volatile(b.add(i))) };
        if x != y {
            return x as i32 - y as i32;
        }
        i += 1;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract as memcmp.
    unsafe { memcmp(a, b, n) }
}
