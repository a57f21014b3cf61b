//! Threads' names as their process ends: an `exit_group` ends the other threads without a
//! probe of theirs, and the kernel forgets their names with them, so the call records each
//! one's `comm` (a `NAMES_MAGIC` record). A thread renamed where no probe saw it (`prctl`
//! with lock probes alone) is then reported by the name it was given, not the one its chunk
//! read when it was made.
use super::procfs::{proc_path, read_file};
use crate::abi::{self, RuntimeVars, PAGE_SIZE};
use crate::base::data_file::append;
use crate::base::sys;
use core::mem::MaybeUninit;
use core::ptr::{read_volatile, write_volatile};

/// Appends the names of the `count` threads at `tids` of process `pid`.
pub(crate) unsafe fn record(v: *const RuntimeVars, pid: u32, tids: *const u32, count: usize) {
    let len = (abi::NAMES_HEADER_LEN + count as u64 * abi::NAMES_ENTRY_LEN).next_multiple_of(PAGE_SIZE);
    // SAFETY: `tids` holds `count` thread ids; the record is a fresh mapping of the data file
    // of the length asked for, each entry within it; only the bytes a read returned are read.
    unsafe {
        let Some((at, _)) = append(v, abi::NAMES_MAGIC, len) else { return };
        let mut n = 0;
        for i in 0..count {
            let tid = read_volatile(tids.add(i));
            let mut path = MaybeUninit::uninit();
            let mut buf = MaybeUninit::uninit();
            let Some(text) = read_file(proc_path(tid, b"comm", &mut path), &mut buf) else { continue };
            let e = at + (abi::NAMES_HEADER_LEN + n as u64 * abi::NAMES_ENTRY_LEN) as usize;
            write_volatile(e as *mut u32, tid);
            // One byte at a time: the file ends with a newline, the entry is NUL-padded.
            let name = (e + 8) as *mut u8;
            let mut k = 0;
            while k < 16 && k < text.len() && text[k] != b'\n' {
                write_volatile(name.add(k), text[k]);
                k += 1;
            }
            n += 1;
        }
        write_volatile((at + 20) as *mut u32, n);
        // The pid last: a reader takes a record without one as unfinished.
        write_volatile((at + 16) as *mut u32, pid);
        sys::call3(sys::MUNMAP, at, len as usize, 0);
    }
}
