//! System-call probes. A `syscall` is timed as a call of a pseudo-function named after the
//! system call and its site (`abi::syscall_name`): one frame on the thread's shadow stack,
//! keyed by the site's stack pointer less 128 (the trampoline calls the stubs below the red
//! zone), so that it nests in its caller's frame, a signal handler's calls nest in it, and
//! the tree holds it as a leaf of the calling context it was made from.
//!
//! Calls that never return (`exit`, `exit_group`, `rt_sigreturn`) are counted when made. A
//! `vfork` (or a `clone` with `CLONE_VFORK`, as `posix_spawn` makes) suspends the caller
//! while its child runs on the same thread pointer, maybe on another stack: the caller's
//! state is marked busy until the call returns in the caller, so that the child's probes
//! neither pop nor push its frames (the child's system calls are counted per site).
use super::probes::{count_untimed, enter, pause_excess};
use super::thread::{Child, Thread};
use super::{counter, rdtsc, vars};
use crate::abi::{self, syscall_name, RuntimeVars};
use core::arch::global_asm;
use core::ptr::{read_volatile, write_volatile};

/// `busy` while the thread waits for a vfork child.
const VFORKING: u32 = 2;
const CLONE_VFORK: u64 = 0x4000;
const PRCTL: u64 = 157;

global_asm!(
    // Called from a system-call site's trampoline as `lea rsp,[rsp-128]; push <site counter
    // index>; call`. Preserves every register (rcx and r11 too, which the kernel would
    // clobber anyway) and the flags; the direction flag is cleared for the Rust code. After
    // the eleven pushes: [rbp+96] = counter index, rbp+104 = the frame's key, [rbp+72] = rax
    // (the call's number), [rbp+40] = rdi (its first argument).
    ".globl lopi_syscall_enter_stub",
    "lopi_syscall_enter_stub:",
    "pushfq",
    "push rax", "push rcx", "push rdx", "push rsi", "push rdi", "push r8", "push r9", "push r10", "push r11", "push rbp",
    "cld",
    "mov rbp, rsp",
    "mov edi, dword ptr [rbp + 96]",
    "lea rsi, [rbp + 104]",
    "mov rdx, [rbp + 72]",
    "mov rcx, [rbp + 40]",
    "and rsp, -16",
    "call {enter}",
    "mov rsp, rbp",
    "pop rbp", "pop r11", "pop r10", "pop r9", "pop r8", "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
    "popfq",
    "ret 8",
    // The same right after the `syscall`: [rbp+72] = rax, its result.
    ".globl lopi_syscall_exit_stub",
    "lopi_syscall_exit_stub:",
    "pushfq",
    "push rax", "push rcx", "push rdx", "push rsi", "push rdi", "push r8", "push r9", "push r10", "push r11", "push rbp",
    "cld",
    "mov rbp, rsp",
    "mov edi, dword ptr [rbp + 96]",
    "lea rsi, [rbp + 104]",
    "mov rdx, [rbp + 72]",
    "and rsp, -16",
    "call {exit}",
    "mov rsp, rbp",
    "pop rbp", "pop r11", "pop r10", "pop r9", "pop r8", "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
    "popfq",
    "ret 8",
    enter = sym probe_syscall_enter,
    exit = sym probe_syscall_exit,
);

/// Before the system call `nr` (first argument `arg0`) at the site with counter `index`.
unsafe extern "C" fn probe_syscall_enter(index: u64, key: u64, nr: u64, arg0: u64) {
    let v = vars();
    let slot = counter(index);
    // SAFETY: as in `probe_enter`; `busy` keeps a signal handler's (or a vfork child's) probes
    // off the state this probe changes.
    unsafe {
        let Some(t) = Thread::current(v) else {
            count_untimed(slot);
            return;
        };
        let h = t.h;
        if read_volatile(&(*h).busy) != 0 {
            (*h).nested_skipped += 1;
            count_untimed(slot);
            return;
        }
        write_volatile(&mut (*h).busy, 1);
        let began = rdtsc();
        if (*h).depth > 0 && (*t.frame((*h).depth - 1)).rsp <= key {
            // Frames left without their exit (longjmp out of a signal handler, say).
            t.unwind_to(key, began.wrapping_sub((*h).paused_ticks), true);
        }
        let name = syscall_name::encode(slot, nr, false);
        if syscall_name::never_returns(nr) {
            count_now(&t, v, name, slot);
            pause_excess(&t, began, false);
        } else {
            enter(&t, v, name, slot, key, began);
        }
        let vforks = nr == 58 || (nr == 56 && arg0 & CLONE_VFORK != 0) || (nr == 435 && arg0 != 0 && read_volatile(arg0 as *const u64) & CLONE_VFORK != 0);
        write_volatile(&mut (*h).busy, if vforks { VFORKING } else { 0 });
    }
}

/// Counts a call that has no end, under the current call path.
unsafe fn count_now(t: &Thread, v: *const RuntimeVars, name: u64, slot: u64) {
    // SAFETY: the caller holds `busy`.
    unsafe {
        match t.child(v, t.top_node(), name) {
            Some(Child::Path(n) | Child::Merged(n)) => (*t.node(n)).calls += 1,
            None => count_untimed(slot),
        }
    }
}

/// After the system call at the site with counter `index` returned `result`.
unsafe extern "C" fn probe_syscall_exit(index: u64, key: u64, result: u64) {
    let tsc = rdtsc();
    let v = vars();
    // SAFETY: as in `probe_syscall_enter`.
    unsafe {
        let Some(t) = Thread::current(v) else { return };
        let h = t.h;
        let busy = read_volatile(&(*h).busy);
        let depth = (*h).depth;
        let top = if depth > 0 { Some(*t.frame(depth - 1)) } else { None };
        let ours = top.filter(|f| f.rsp == key);
        let name = ours.filter(|f| f.flags & abi::FRAME_UNTIMED == 0).map(|f| (*t.node(f.node)).func).and_then(syscall_name::decode);
        let leave = match busy {
            // Only the caller's own return (never 0: the child's pid, or an error) ends it.
            VFORKING => result == 0 || ours.is_none(),
            0 => result == 0 && (ours.is_none() || name.is_some_and(|n| syscall_name::makes_child(n.nr))),
            _ => true,
        };
        if leave {
            // A nested probe's; or a new child's (of clone, fork), which leaves the call to
            // its parent; or a call whose entry was counted untimed.
            return;
        }
        write_volatile(&mut (*h).busy, 1);
        let now = tsc.wrapping_sub((*h).paused_ticks);
        t.unwind_to(key, now, false);
        let depth = (*h).depth;
        if depth > 0 && (*t.frame(depth - 1)).rsp == key {
            if syscall_name::is_error(result) {
                as_error(&t, v, depth - 1);
            }
            t.close_top(now, abi::EVENT_EXIT);
        } else if depth == 0 {
            (*h).early_exits += 1;
        } else {
            t.note_unmatched(counter(index));
        }
        if name.is_some_and(|n| n.nr == PRCTL) {
            // Perhaps `PR_SET_NAME`.
            t.read_name();
        }
        (*h).last_tsc = now;
        pause_excess(&t, tsc, false);
        write_volatile(&mut (*h).busy, 0);
    }
}

/// Moves the frame at `depth` to its call path's sibling for failed calls.
unsafe fn as_error(t: &Thread, v: *const RuntimeVars, depth: u32) {
    // SAFETY: the caller holds `busy`; the frame is timed, its node in the tree.
    unsafe {
        let f = t.frame(depth);
        if (*f).flags != 0 {
            // A merged call path: its failures are not told apart.
            return;
        }
        let n = t.node((*f).node);
        if let Some(Child::Path(e)) = t.child(v, (*n).parent, (*n).func | syscall_name::ERROR) {
            (*f).node = e;
        }
    }
}
