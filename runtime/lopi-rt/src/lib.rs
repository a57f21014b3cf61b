//! lopi's injected runtime: registers a rewritten module's counters in the data file.
//!
//! It runs once per module, from the module's init hook, before the module's own `_init`.
//! The probes themselves never call into it: they increment counters in place. What this
//! code does is move those counters from anonymous memory into a shared mapping of the data
//! file, so that every later increment lands in the page cache and survives `_exit`,
//! SIGKILL and crashes.
//!
//! Constraints (see ARCHITECTURE.md, "crates/lopi-rt-blob and runtime/lopi-rt"): built
//! without Cargo into a flat, position-independent blob; no libc, no statics that need
//! relocation, no writable data, no panics reachable (the build fails if any relocation or
//! data section survives).
//!
//! Its modules, each importing only those before it: `base/` (system calls, the TSC and the
//! clock, this module's variables and counters, the data file), `loader.rs` (what ld.so, libc
//! and the vDSO export), `register.rs` (the module's record), `retire.rs` (code changed under
//! running threads), `timing/` (the probes and all that runs in them); this file, the module's
//! init.
#![no_std]
#![allow(clippy::missing_safety_doc)]

#[path = "../../../crates/lopi-rt-abi/src/lib.rs"]
mod abi;
mod base;
mod loader;
mod register;
mod retire;
mod timing;

use abi::{ModuleDescriptor, PAGE_SIZE};
use base::buf::Buf;
use base::env::getenv;
use base::sys::{self, write_stderr};
use core::arch::asm;
use loader::{glibc_tid_offset, vdso_clock_gettime, Auxv};
use register::{register, Module, NOT_A_DATA_FILE};

fn report_failure(what: &[u8], path: &[u8], err: isize) {
    let mut msg = Buf::<512>::new();
    msg.push_bytes(b"lopi: ");
    msg.push_bytes(what);
    msg.push_bytes(b" '");
    msg.push_bytes(path);
    msg.push_bytes(b"' failed (errno ");
    msg.push_decimal(err.unsigned_abs() as u64);
    msg.push_bytes(b"); this module's counts stay in memory and will not be saved\n");
    write_stderr(msg.as_bytes());
}

/// Registers one rewritten module. Called by the module's init stub with the arguments
/// glibc passes to `DT_INIT` functions, so `envp` is the process environment; or by the live
/// installer, with an `envp` of its own. Returns 0, or a negative errno (the init stub
/// ignores it; the live installer reports it).
///
/// # Safety
/// `desc` must point to the module's descriptor and `envp` to a NULL-terminated array of
/// NUL-terminated strings (or be null).
#[no_mangle]
#[link_section = ".text.lopi_rt_init"]
pub unsafe extern "C" fn lopi_rt_init(
    desc: *const ModuleDescriptor,
    _argc: isize,
    _argv: *const *const u8,
    envp: *const *const u8,
) -> isize {
    // SAFETY: the descriptor is emitted by the rewriter next to this code.
    let d = unsafe { &*desc };
    if d.magic != abi::DESCRIPTOR_MAGIC {
        return -22; // EINVAL
    }
    let base = desc as usize;
    let counters = base.wrapping_add(d.counters_offset as usize) as *const u8;
    let meta = base.wrapping_add(d.meta_offset as usize) as *const u8;
    let vars = base.wrapping_add(d.vars_offset as usize) as *mut abi::RuntimeVars;
    let auxv = Auxv::read();
    let clock = vdso_clock_gettime(&auxv);
    // The record's TSC rate: timing's calibration (before the data file is locked), else the
    // ticks and nanoseconds that pass until the record is written.
    let began = base::clock::clock_pair(clock);
    // A rate the installer measured once gives every module of every process it probes its
    // rate without 3 ms of calibration each (`lopi run` following a tree).
    let given = base::env::env_number(envp, abi::TSC_HZ_ENV.as_bytes(), 0, u64::MAX);
    let tsc_hz = match d.probes & abi::PROBE_TIMING != 0 {
        true if given != 0 => given,
        true => base::clock::tsc_hz(clock),
        false => 0,
    };
    let rate = || if tsc_hz != 0 { tsc_hz } else { base::clock::rate_since(began, clock) };
    // SAFETY: the variables page belongs to this module's RW segment. The thread id's place
    // lets the runtime read a thread's id without a system call (also coverage's retirements).
    unsafe { (*vars).tid_offset = glibc_tid_offset(&auxv).unwrap_or(0) };
    // SAFETY: getpid cannot fail.
    let pid = unsafe { sys::call3(sys::GETPID, 0, 0, 0) } as u64;

    let mut exe = Buf::<{ abi::MAX_EXE_LEN }>::new();
    // SAFETY: readlink writes at most `cap` bytes into the buffer.
    exe.fill_with(|buf, cap| unsafe {
        sys::call3(sys::READLINK, b"/proc/self/exe\0".as_ptr() as usize, buf as usize, cap)
    });

    let mut path = Buf::<4096>::new();
    let mut from_env = false;
    // SAFETY: envp is the process environment (caller).
    if let Some(mut p) = unsafe { getenv(envp, abi::OUTPUT_ENV.as_bytes()) } {
        // SAFETY: the value is NUL-terminated.
        unsafe {
            while *p != 0 {
                if *p == b'%' && *p.add(1) == b'p' {
                    path.push_decimal(pid);
                    p = p.add(2);
                } else {
                    path.push(*p);
                    p = p.add(1);
                }
                from_env = true;
            }
        }
    }
    if !from_env {
        let name = exe.as_bytes();
        let mut start = 0;
        for (i, &c) in name.iter().enumerate() {
            if c == b'/' {
                start = i + 1;
            }
        }
        path.push_bytes(name.get(start..).unwrap_or(b"lopi"));
        path.push(b'.');
        path.push_decimal(pid);
        path.push_bytes(abi::DATA_SUFFIX.as_bytes());
    }

    let cpath = path.as_cstr();
    // SAFETY: cpath is NUL-terminated.
    let fd = unsafe { sys::call3(sys::OPEN, cpath as usize, sys::O_RDWR | sys::O_CREAT | sys::O_CLOEXEC, 0o644) };
    if fd < 0 {
        report_failure(b"opening", path.as_bytes(), fd);
        return fd;
    }
    let fd = fd as usize;
    // SAFETY: fd is ours; the lock serialises modules and processes sharing the file.
    unsafe { sys::call3(sys::FLOCK, fd, sys::LOCK_EX, 0) };
    let err = register(fd, d, Module { base, counters, meta, pid, exe: exe.as_bytes() }, &auxv, rate);
    if err == NOT_A_DATA_FILE {
        let mut msg = Buf::<512>::new();
        msg.push_bytes(b"lopi: '");
        msg.push_bytes(path.as_bytes());
        msg.push_bytes(b"' exists and is not a data file of this lopi version; remove it or set LOPI_OUTPUT elsewhere (counts are not saved)\n");
        write_stderr(msg.as_bytes());
    } else if err < 0 {
        report_failure(b"recording to", path.as_bytes(), err);
    }
    // SAFETY: closing our own descriptor; the shared mapping outlives it.
    unsafe {
        sys::call3(sys::FLOCK, fd, sys::LOCK_UN, 0);
        sys::call3(sys::CLOSE, fd, 0, 0);
    }
    if err >= 0 && d.probes & abi::PROBE_TIMING != 0 {
        // SAFETY: the variables page and the path page after it belong to this module's RW
        // segment; threads find chunks through the path later, so it must be absolute.
        unsafe {
            let dst = (vars as usize + abi::vars::PATH as usize) as *mut u8;
            let mut n = 0;
            let mut put = |c: u8| {
                if n + 1 < PAGE_SIZE as usize {
                    *dst.add(n) = c;
                    n += 1;
                }
            };
            if path.as_bytes().first() != Some(&b'/') {
                let mut cwd = Buf::<4096>::new();
                cwd.fill_with(|buf, cap| sys::call3(sys::GETCWD, buf as usize, cap, 0) - 1);
                cwd.as_bytes().iter().chain(b"/").for_each(|&c| put(c));
            }
            path.as_bytes().iter().for_each(|&c| put(c));
            *dst.add(n) = 0;
            timing::enable(vars, d, pid as u32, envp, &auxv, clock, tsc_hz);
        }
    }
    err.min(0)
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // The build rejects blobs that can reach this; keep the trap for defence in depth.
    loop {
        // SAFETY: ud2 raises SIGILL, which is the least surprising way to stop.
        unsafe { asm!("ud2", options(noreturn)) };
    }
}
