//! Syscall User Dispatch (`prctl(PR_SET_SYSCALL_USER_DISPATCH)`, Linux 5.11): a thread's system
//! calls from outside one address range raise `SIGSYS` instead of running while a byte of
//! memory, its selector, says so. lopi keeps each thread's selector at [`BLOCK`] while the
//! program runs, so that a call from code no probe covers (JIT code, a library mapped after
//! the probes went in) reaches the runtime's handler, which records it and makes it. A probed
//! site's trampoline sets [`ALLOW`] around its own `syscall`, and the runtime around its calls;
//! the range is the handler's runtime, where its signal return is.

/// Offset of the selector from the thread pointer: `tcbhead_t.__glibc_unused1`, which glibc
/// leaves unused on x86-64 (lopi owns the words before it, `fs:0x38` and `fs:0x40`).
pub const SELECTOR: u32 = 0x4c;
/// Selector values, the kernel's `SYSCALL_DISPATCH_FILTER_ALLOW` and `_BLOCK`.
pub const ALLOW: u8 = 0;
pub const BLOCK: u8 = 1;
/// `siginfo.si_code` of a call the kernel dispatched (`SYS_USER_DISPATCH`).
pub const SI_CODE: i32 = 2;
/// The bytes right after a probed site's `syscall`: `mov byte ptr fs:[SELECTOR], BLOCK`. A
/// dispatched call followed by them comes from a trampoline, whose probes record it (the
/// thread was interrupted between the trampoline's `ALLOW` and its call, which a signal handler
/// set back): the handler only makes it.
pub const SITE_SIGNATURE: [u8; 9] = [0x64, 0xc6, 0x04, 0x25, SELECTOR as u8, 0, 0, 0, BLOCK];
/// Offset of the thread's `SIGSYS` state byte from the thread pointer (the byte after the
/// selector): the program's own mask would block `SIGSYS` ([`PROGRAM_BLOCKS`]), and a
/// `SIGSYS` not the dispatcher's came meanwhile ([`HELD`]).
pub const MASK_STATE: u32 = SELECTOR + 1;
pub const PROGRAM_BLOCKS: u8 = 1;
pub const HELD: u8 = 2;
/// Offset from the thread pointer of a byte set while the thread makes a call that copies
/// its process (`fork`, a `clone` without `CLONE_VM`): in the child, the call's exit probe
/// gives glibc's thread descriptor the child's own thread id when the program made the call
/// itself (glibc's `fork` has the kernel write it), so that the child never takes its
/// parent's chunk for its own. Not dispatch's, but in the same unused word of the TCB.
pub const FORKING: u32 = SELECTOR + 2;
/// A stub that makes, for code no probe covers, a call its `SIGSYS` handler cannot make
/// (`vfork`, a `clone` sharing memory, whose child would run on the handler's stack), with the
/// selector letting it through around it, then goes on after the original `syscall` with `rcx`
/// as the kernel would have left it: `mov byte fs:[SELECTOR],ALLOW; syscall; mov byte
/// fs:[SELECTOR],BLOCK; mov rcx, imm64; jmp rcx`. One per call site, made at its first call.
pub const STUB_LEN: usize = 32;
/// Where a stub's return address (the `imm64`) is.
pub const STUB_RETURN: usize = 22;
/// Stubs in the process's pool (one mapping).
pub const STUBS: usize = 2048;

/// The stub for the call site whose `syscall` returns to `ret`.
pub const fn stub(ret: u64) -> [u8; STUB_LEN] {
    let r = ret.to_le_bytes();
    let s = SELECTOR as u8;
    [
        0x64, 0xc6, 0x04, 0x25, s, 0, 0, 0, ALLOW, // mov byte fs:[SELECTOR], ALLOW
        0x0f, 0x05, // syscall
        0x64, 0xc6, 0x04, 0x25, s, 0, 0, 0, BLOCK, // mov byte fs:[SELECTOR], BLOCK
        0x48, 0xb9, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], // mov rcx, ret
        0xff, 0xe1, // jmp rcx
    ]
}
