//! The process's memory map, recorded at start-up by a module with lock probes and again at
//! the process's `exit_group`: readers name locks (static data) and call sites in modules that
//! have no probes by it (the last record of a process wins: it has the libraries loaded later).
use crate::abi::{self, RuntimeVars, PAGE_SIZE};
use crate::base::data_file::append;
use crate::base::mem::copy;
use crate::base::sys;

/// Most of `/proc/self/maps` kept (a process with thousands of mappings loses the rest).
const MAX_TEXT: usize = 1 << 20;

/// Appends a `MAPS_MAGIC` record of `/proc/self/maps` for process `pid`.
pub(crate) unsafe fn record(v: *const RuntimeVars, pid: u32) {
    // SAFETY: raw syscalls on a private buffer and a descriptor of our own; the record is a
    // fresh mapping of the data file of the length asked for.
    unsafe {
        let buf = sys::call6(sys::MMAP, 0, MAX_TEXT, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if buf <= 0 {
            return;
        }
        let buf = buf as usize;
        let fd = sys::call3(sys::OPEN, c"/proc/self/maps".as_ptr() as usize, sys::O_RDONLY | sys::O_CLOEXEC, 0);
        let mut len = 0;
        if fd >= 0 {
            while len < MAX_TEXT {
                let n = sys::call3(sys::READ, fd as usize, buf + len, MAX_TEXT - len);
                if n <= 0 {
                    break;
                }
                len += n as usize;
            }
            sys::call3(sys::CLOSE, fd as usize, 0, 0);
        }
        let total = (abi::MAPS_HEADER_LEN + len as u64).next_multiple_of(PAGE_SIZE);
        if len > 0 {
            if let Some((at, _)) = append(v, abi::MAPS_MAGIC, total) {
                *((at + 16) as *mut u32) = pid;
                *((at + 24) as *mut u64) = len as u64;
                copy(at + abi::MAPS_HEADER_LEN as usize, buf, len);
                sys::call3(sys::MUNMAP, at, total as usize, 0);
            }
        }
        sys::call3(sys::MUNMAP, buf, MAX_TEXT, 0);
    }
}
