//! Emulated kernels (`lopi whatif`, `LOPI_WHATIF` in the program's environment), which the
//! system-call probes run: kernels of locks (`kernel_locks.rs`) and the application kernel's
//! proxy threads (`appkernel.rs`); here, which one from the environment.
pub(crate) mod appkernel;
pub(crate) mod kernel_locks;

use crate::abi::{whatif, RuntimeVars, PAGE_SIZE};
use crate::base::data_file::open_data_file;
use crate::base::env::getenv;
use crate::base::sys::{self, write_stderr};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::AtomicU32;
use kernel_locks::FD_TABLE;

/// Sets the emulation up from `LOPI_WHATIF` (`giant-lock` or `subsystem-locks`): maps the data
/// file's first page, where the lock words are, and the file-descriptor table.
pub(crate) unsafe fn enable(v: *mut RuntimeVars, envp: *const *const u8) {
    // SAFETY: envp is the process environment; the mappings are fresh.
    unsafe {
        let Some(value) = getenv(envp, b"LOPI_WHATIF") else { return };
        let mode = if starts(value, b"giant-lock\0") {
            whatif::GIANT_LOCK
        } else if starts(value, b"subsystem-locks\0") {
            whatif::SUBSYSTEM_LOCKS
        } else if starts(value, b"app-kernel\0") {
            whatif::APP_KERNEL
        } else if starts(value, b"app-kernel-spin\0") {
            whatif::APP_KERNEL_SPIN
        } else {
            write_stderr(b"lopi: LOPI_WHATIF is giant-lock, subsystem-locks, app-kernel or app-kernel-spin; no kernel emulated\n");
            return;
        };
        let Some(fd) = open_data_file(v) else { return };
        let page = sys::call6(sys::MMAP, 0, PAGE_SIZE as usize, sys::PROT_READ_WRITE, sys::MAP_SHARED, fd, 0);
        sys::call3(sys::CLOSE, fd, 0, 0);
        let kinds = sys::call6(sys::MMAP, 0, FD_TABLE, sys::PROT_READ_WRITE, sys::MAP_PRIVATE_ANONYMOUS, usize::MAX, 0);
        if page <= 0 || kinds <= 0 {
            return;
        }
        (*v).kernel_locks = page as u64 + whatif::LOCKS;
        (*v).fd_kinds = kinds as u64;
        if mode >= whatif::APP_KERNEL {
            appkernel::enable(v, (page as u64 + whatif::KERNEL_CPU) as *const AtomicU32);
        }
        write_volatile(&mut (*v).whatif, mode);
    }
}

/// True when the NUL-terminated `s` is `word` (which ends in NUL).
unsafe fn starts(s: *const u8, word: &[u8]) -> bool {
    // SAFETY: stops at the first difference, at the latest at s's NUL.
    word.iter().enumerate().all(|(i, &b)| unsafe { read_volatile(s.add(i)) } == b)
}
