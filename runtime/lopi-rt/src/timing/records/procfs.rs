//! Reading the kernel's files of a thread (`/proc/thread-self`, `/proc/self/task/TID`) into
//! buffers on the stack.
use crate::base::sys;
use core::mem::MaybeUninit;
use core::ptr::write_volatile;

/// Buffers the syscalls fill: uninitialised, since zeroing them would take vector stores,
/// which the probe stubs do not save.
pub(crate) const TEXT: usize = 1024;

/// Reads the file at the NUL-terminated `path` into `buf`; the bytes read.
pub(crate) unsafe fn read_file<'a>(path: &[u8], buf: &'a mut MaybeUninit<[u8; TEXT]>) -> Option<&'a [u8]> {
    // SAFETY: a descriptor of our own; only the bytes the kernel wrote are read back.
    unsafe {
        let fd = sys::call3(sys::OPEN, path.as_ptr() as usize, sys::O_RDONLY | sys::O_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let n = sys::call3(sys::READ, fd as usize, buf.as_mut_ptr() as usize, TEXT);
        sys::call3(sys::CLOSE, fd as usize, 0, 0);
        Some(core::slice::from_raw_parts(buf.as_ptr() as *const u8, usize::try_from(n).ok()?.min(TEXT)))
    }
}

/// `/proc/thread-self/NAME` (tid 0) or `/proc/self/task/TID/NAME`, NUL-terminated, in `out`.
pub(crate) fn proc_path<'a>(tid: u32, name: &[u8], out: &'a mut MaybeUninit<[u8; 64]>) -> &'a [u8] {
    let out = out.as_mut_ptr() as *mut u8;
    let mut len = 0;
    let mut push = |b: u8| {
        if len < 63 {
            // SAFETY: within the 64-byte buffer.
            unsafe { write_volatile(out.add(len), b) };
            len += 1;
        }
    };
    let prefix: &[u8] = if tid == 0 { b"/proc/thread-self/" } else { b"/proc/self/task/" };
    prefix.iter().for_each(|&b| push(b));
    if tid != 0 {
        let mut digits = [0u8; 10];
        let mut n = tid;
        let mut i = 0;
        while n > 0 || i == 0 {
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            i += 1;
        }
        (0..i).rev().for_each(|j| push(digits[j]));
        push(b'/');
    }
    name.iter().for_each(|&b| push(b));
    push(0);
    // SAFETY: `len` bytes were written.
    unsafe { core::slice::from_raw_parts(out, len) }
}
