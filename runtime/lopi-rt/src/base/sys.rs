//! Raw Linux x86-64 syscalls (numbers from arch/x86/entry/syscalls/syscall_64.tbl), and two
//! writes made of them: a message to stderr, a whole buffer at a file offset.
use core::arch::asm;

pub const READ: usize = 0;
pub const WRITE: usize = 1;
pub const OPEN: usize = 2;
pub const CLOSE: usize = 3;
pub const LSEEK: usize = 8;
pub const MMAP: usize = 9;
pub const MPROTECT: usize = 10;
pub const PWRITE64: usize = 18;
pub const GETPID: usize = 39;
pub const GETUID: usize = 102;
pub const GETGID: usize = 104;
pub const FLOCK: usize = 73;
pub const FTRUNCATE: usize = 77;
pub const READLINK: usize = 89;
pub const GETCWD: usize = 79;
pub const MUNMAP: usize = 11;
pub const MADVISE: usize = 28;
pub const GETTID: usize = 186;
pub const GETRUSAGE: usize = 98;
pub const RUSAGE_THREAD: usize = 1;
pub const SCHED_GETAFFINITY: usize = 204;
pub const GETDENTS64: usize = 217;
pub const FSTAT: usize = 5;
pub const KILL: usize = 62;
pub const SCHED_YIELD: usize = 24;
pub const TGKILL: usize = 234;
pub const PRCTL: usize = 157;
pub const PR_GET_NAME: usize = 16;
pub const CLOCK_GETTIME: usize = 228;
pub const GETCPU: usize = 309;
pub const PROCESS_VM_READV: usize = 310;
pub const PROCESS_VM_WRITEV: usize = 311;
pub const FALLOCATE: usize = 285;
pub const RT_SIGACTION: usize = 13;
pub const TIMER_CREATE: usize = 222;
pub const TIMER_SETTIME: usize = 223;

/// `-ESRCH`: no such process or thread.
pub const ESRCH: isize = -3;

pub const O_RDONLY: usize = 0;
pub const O_RDWR: usize = 2;
pub const O_CREAT: usize = 0o100;
pub const O_CLOEXEC: usize = 0o2000000;
pub const O_DIRECTORY: usize = 0o200000;
pub const SEEK_END: usize = 2;
pub const LOCK_EX: usize = 2;
pub const LOCK_UN: usize = 8;
pub const PROT_READ_WRITE: usize = 3;
pub const MAP_SHARED: usize = 0x01;
pub const MAP_SHARED_FIXED: usize = 0x01 | 0x10;
pub const MAP_PRIVATE_ANONYMOUS: usize = 0x02 | 0x20;
pub const MADV_WIPEONFORK: usize = 18;
pub const FALLOC_PUNCH_HOLE_KEEP_SIZE: usize = 0x02 | 0x01;

/// Makes one of the runtime's own calls, counted with its time (`own_calls`). Returns the
/// raw result: negative values are `-errno`.
#[inline(always)]
pub unsafe fn call6(nr: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let start = super::tsc::rdtsc();
    // SAFETY: forwarded from the caller.
    let ret = unsafe { raw6(nr, a, b, c, d, e, f) };
    super::own_calls::count(nr, super::tsc::rdtsc().saturating_sub(start));
    ret
}

/// A call that is not the runtime's but the program's (the application kernel's proxies
/// make them for it): not counted as lopi's. Made with the thread's Syscall User Dispatch
/// selector letting it through (`lopi_rt_abi::dispatch`; this module's runtime may not be the
/// range the kernel lets through), and the selector put back as it was.
#[inline(always)]
pub unsafe fn raw6(nr: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let ret: isize;
    // SAFETY: the kernel's syscall ABI: rcx and r11 are clobbered, no stack use; the
    // caller guarantees the arguments are valid for `nr`. The selector is a byte of the
    // thread control block lopi owns.
    unsafe {
        asm!("movzx {was:e}, byte ptr fs:[{selector}]",
            "mov byte ptr fs:[{selector}], {allow}",
            "syscall",
            "mov byte ptr fs:[{selector}], {was:l}",
            selector = const crate::abi::dispatch::SELECTOR,
            allow = const crate::abi::dispatch::ALLOW,
            was = out(reg) _,
            inlateout("rax") nr as isize => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") e, in("r9") f,
            lateout("rcx") _, lateout("r11") _,
            options(nostack));
    }
    ret
}

#[inline(always)]
pub unsafe fn call3(nr: usize, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: forwarded from the caller.
    unsafe { call6(nr, a, b, c, 0, 0, 0) }
}

pub(crate) fn write_stderr(msg: &[u8]) {
    // SAFETY: writing a valid buffer to fd 2; a failure is deliberately ignored.
    unsafe { call3(WRITE, 2, msg.as_ptr() as usize, msg.len()) };
}

pub(crate) fn pwrite_all(fd: usize, data: *const u8, len: usize, offset: u64) -> isize {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `data` is valid for `len` bytes (caller); we write a sub-range.
        let n = unsafe {
            call6(PWRITE64, fd, data as usize + done, len - done, offset as usize + done, 0, 0)
        };
        if n <= 0 {
            return if n == 0 { -5 } else { n };
        }
        done += n as usize;
    }
    0
}
