//! Appending to the data file: a thread's chunk and its extensions, and the process's records
//! (CPU times, names, the memory map, a script's area), each mapped where it was appended.
use super::sys;
use crate::abi::{self, RuntimeVars, PAGE_SIZE};

/// Opens the data file named in the variables' path page.
pub(crate) unsafe fn open_data_file(v: *const RuntimeVars) -> Option<usize> {
    // SAFETY: the variables page is followed by the NUL-terminated path (see `vars::PATH`).
    unsafe {
        let path = (v as usize + abi::vars::PATH as usize) as *const u8;
        let fd = sys::call3(sys::OPEN, path as usize, sys::O_RDWR | sys::O_CLOEXEC, 0);
        (fd >= 0).then_some(fd as usize)
    }
}

/// Appends `head` (magic and length) and `len` more bytes to the data file under its lock, and
/// maps the whole: (address, file offset) of the appended bytes. The magic and length go in
/// while the lock is held, so that readers can always step over the chunk.
pub(crate) unsafe fn append(v: *const RuntimeVars, magic: [u8; 8], len: u64) -> Option<(usize, u64)> {
    // SAFETY: raw syscalls on our own descriptor.
    unsafe {
        let fd = open_data_file(v)?;
        sys::call3(sys::FLOCK, fd, sys::LOCK_EX, 0);
        let at = sys::call3(sys::LSEEK, fd, 0, sys::SEEK_END);
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&magic);
        head[8..].copy_from_slice(&len.to_le_bytes());
        let mut mapped = None;
        if at >= 0
            && at as u64 % PAGE_SIZE == 0
            && sys::call3(sys::FTRUNCATE, fd, at as usize + len as usize, 0) == 0
            && sys::pwrite_all(fd, head.as_ptr(), head.len(), at as u64) == 0
        {
            let m = sys::call6(sys::MMAP, 0, len as usize, sys::PROT_READ_WRITE, sys::MAP_SHARED, fd, at as usize);
            if m > 0 {
                mapped = Some((m as usize, at as u64));
            }
        }
        sys::call3(sys::FLOCK, fd, sys::LOCK_UN, 0);
        sys::call3(sys::CLOSE, fd, 0, 0);
        mapped
    }
}

/// An extension of `len` bytes after its header page: (address, file offset) of the bytes.
pub(crate) unsafe fn map_extension(v: *const RuntimeVars, len: u64) -> Option<(usize, u64)> {
    // SAFETY: forwarded.
    let (at, file) = unsafe { append(v, abi::EXTENSION_MAGIC, PAGE_SIZE + len)? };
    Some((at + PAGE_SIZE as usize, file + PAGE_SIZE))
}
