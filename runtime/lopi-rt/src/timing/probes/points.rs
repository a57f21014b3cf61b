//! Probes at any instruction (a script's `addr:`, `func:NAME+OFF` and `usdt:` points): the stub
//! saves every register and the flags (the code around the point may use any of them, and a
//! USDT marker's arguments may be in any of them), and the slow path runs the probes hooked to
//! the site's counter with the registers as they were.
use crate::base::vars::vars;
use crate::timing::script;
use crate::timing::thread::chunk::Thread;
use core::arch::global_asm;
use core::ptr::{read_volatile, write_volatile};

global_asm!(
    // Called from a point's trampoline as `lea rsp,[rsp-128]; push <site counter>; call`.
    // After the flags and fifteen pushes: [rbp+40..72] = rdi, rsi, rdx, rcx, [rbp+32] = r8,
    // [rbp+24] = r9, [rbp+72] = rax (the entry stubs' layout, `script::Regs::function`),
    // [rbp+80..112] = rbx, r12..r15 (`script::site_args`), [rbp+136] = the counter.
    ".globl lopi_point_stub",
    "lopi_point_stub:",
    "pushfq",
    "push r15", "push r14", "push r13", "push r12", "push rbx",
    "push rax", "push rcx", "push rdx", "push rsi", "push rdi",
    "push r8", "push r9", "push r10", "push r11", "push rbp",
    "mov rbp, rsp",
    "cld",
    "mov edi, dword ptr [rbp + 136]",
    "mov rsi, rbp",
    "and rsp, -16",
    "call {probe_point}",
    "mov rsp, rbp",
    "pop rbp", "pop r11", "pop r10", "pop r9", "pop r8",
    "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
    // rbx and r12..r15 are as they were: the call keeps them.
    "lea rsp, [rsp + 40]",
    "popfq",
    "ret 8",
    probe_point = sym probe_point,
);

/// At the point with counter `index`; `saved` is where the stub saved the registers.
unsafe extern "C" fn probe_point(index: u64, saved: *const u64) {
    let v = vars();
    // SAFETY: the thread's chunk is its own; `busy` keeps a signal handler's probes off it
    // while this one runs.
    unsafe {
        let Some(t) = Thread::current(v) else { return };
        if read_volatile(&(*t.h).busy) != 0 {
            return;
        }
        write_volatile(&mut (*t.h).busy, 1);
        let (list, _) = script::hooks(v, index);
        if list != 0 {
            let mut args = core::mem::MaybeUninit::<[u64; 6]>::uninit();
            let regs = script::point_regs(v, index, saved, args.as_mut_ptr() as *mut u64);
            script::run(&t, v, list, index, regs, 0, (*t.h).depth, script::Side::Entry);
        }
        write_volatile(&mut (*t.h).busy, 0);
    }
}
