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
use super::{dispatch, dispatch_masks, syscall_log};
use crate::abi::{self, syscall_log as log, syscall_name, ContextNode, RuntimeVars, ThreadHeader};
use crate::base::tcb::{forking, set_forking, set_thread_slot, take_own_tid};
use crate::base::tsc::rdtsc;
use crate::base::vars::{count_untimed, counter, vars};
use crate::timing::records::cpus;
use crate::timing::script;
use crate::timing::thread::calls::{begin_entry, enter, pause_excess};
use crate::timing::thread::chunk::Thread;
use crate::timing::thread::tree::Child;
use crate::timing::whatif::appkernel::{self, Saved};
use crate::timing::whatif::kernel_locks;
use core::mem::offset_of;
use core::ptr::{read_volatile, write_volatile};

/// `busy` while the thread waits for a vfork child.
pub(super) const VFORKING: u32 = 2;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_VM: u64 = 0x100;
const FORK: u64 = 57;
const PRCTL: u64 = 157;
const RT_SIGRETURN: u64 = 15;
const EXIT: u64 = 60;
const EXIT_GROUP: u64 = 231;

stub_asm!(
    // What both stubs share, as assembler macros. SAVE: rax and the arithmetic flags (`lahf`,
    // `seto`: cheaper than `pushfq`/`popfq`), then rdx, rsi, rdi, r8. THREAD: rdi = this
    // thread's chunk, rsi = the runtime variables, `busy` taken; to 9 when the thread has no
    // chunk of its own or a probe of it is running, to 8 (`busy` to give back) when it traces.
    // SLOW_AND_RETURN: labels 8 and 9, the Rust slow path `target(index, key, rax, fourth,
    // rsi, saved)` (`saved`: where the registers are) with every register saved and the
    // direction flag saved and cleared, its result in rcx; then label 3, where the fast path
    // joins: registers and flags back, `ret 8`.
    ".macro LOPI_SYSCALL_STUB_SAVE",
    "push rax",
    "lahf",
    "seto al",
    "xchg rax, [rsp]",
    "push rax", "push rdx", "push rsi", "push rdi", "push r8",
    ".endm",
    ".macro LOPI_SYSCALL_STUB_THREAD",
    "lea rsi, [rip + LOPI_DELTAS]",
    "add rsi, [rsi]",
    "mov rdi, qword ptr fs:[0x38]",
    claim_thread!("rdi", "rsi", "rcx", "ecx", "edx"),
    // An emulated kernel's locks are taken on the slow paths, and a script's probes of
    // system calls run there.
    "cmp dword ptr [rsi + {v_whatif}], 0",
    "jne 8f",
    "cmp qword ptr [rsi + {v_script_syscalls}], 0",
    "jne 8f",
    ".endm",
    ".macro LOPI_SYSCALL_STUB_SLOW_AND_RETURN target, fourth",
    "8:",
    "mov dword ptr [rdi + {t_busy}], 0",
    "9:",
    "push r9", "push r10", "push r11", "push rbp",
    "mov rbp, rsp",
    "pushfq",
    "cld",
    "mov edi, dword ptr [rbp + 88]",
    "lea rsi, [rbp + 96]",
    "mov rdx, [rbp + 64]",
    "mov rcx, \\fourth",
    "mov r8, [rbp + 48]",
    "mov r9, rbp",
    "and rsp, -16",
    "call \\target",
    "mov rcx, rax",
    "lea rsp, [rbp - 8]",
    "popfq",
    "pop rbp", "pop r11", "pop r10", "pop r9",
    "3:",
    "pop r8", "pop rdi", "pop rsi", "pop rdx",
    "mov rax, [rsp + 8]",
    "add al, 0x7f",
    "sahf",
    "pop rax",
    "lea rsp, [rsp + 8]",
    "ret 8",
    ".endm",
    // Called from a system-call site's trampoline as `lea rsp,[rsp-128]; push <site counter
    // index>; call`. Preserves every register but rcx and r11 (the `syscall` clobbers them
    // anyway) and the flags; rcx is 0 when the slow path made the call itself, its result in
    // rax, and non-zero otherwise (the fast path's depth). Fast path: a call whose node is the one the
    // caller's path last used for this call at this site, on a stack with room; calls that
    // never return, make children or change the thread's name take the slow path. After the
    // six pushes: [rsp+32] = rax (the call's number), [rsp+56] = counter index, rsp+64 = the
    // frame's key.
    // On a cache line of its own, as the entry and exit stubs.
    ".p2align 6",
    ".globl lopi_syscall_enter_stub",
    "lopi_syscall_enter_stub:",
    "LOPI_SYSCALL_STUB_SAVE",
    "LOPI_SYSCALL_STUB_THREAD",
    "lea r8, [rip + LOPI_DELTAS + 8]",
    "add r8, [r8]",
    "mov rax, [rsp + 32]",
    "cmp rax, {nr_other}",
    "jae 8f",
    "cmp rax, 15",
    "je 8f",
    // With Syscall User Dispatch, `rt_sigaction`, `rt_sigprocmask` and `rt_sigpending` keep
    // `SIGSYS` unblocked.
    "lea rdx, [rax - 13]",
    "cmp rdx, 1",
    "jbe 5f",
    "cmp rax, 127",
    "jne 6f",
    "5:",
    "cmp qword ptr [rsi + {v_dispatch}], 0",
    "jne 8f",
    "6:",
    "lea rdx, [rax - 56]",
    "cmp rdx, 4",
    "jbe 8f",
    "cmp rax, 157",
    "je 8f",
    "cmp rax, 231",
    "je 8f",
    "cmp rax, 435",
    "je 8f",
    // The call's name: tag, number, the site counter's address.
    "mov edx, dword ptr [rsp + 56]",
    "lea rdx, [r8 + rdx*8]",
    "shl rdx, 16",
    "shr rdx, 16",
    "shl rax, 48",
    "or rax, rdx",
    "bts rax, 63",
    "mov ecx, dword ptr [rdi + {t_depth}]",
    "cmp ecx, dword ptr [rdi + {t_stack_cap}]",
    "jae 8f",
    "mov rsi, rdi",
    "add rsi, [rdi + {t_stack}]",
    "xor edx, edx",
    "test ecx, ecx",
    "jz 2f",
    "lea rdx, [rcx + rcx*2]",
    "lea rdx, [rsi + rdx*8 - 24]",
    "lea r8, [rsp + 64]",
    "cmp [rdx], r8",
    "jbe 8f",
    // The first probe inside an unclocked call reads its start.
    "test dword ptr [rdx + 12], {f_unclocked}",
    "jnz 8f",
    "mov edx, dword ptr [rdx + 8]",
    "2:",
    "imul rdx, rdx, {n_len}",
    "add rdx, [rdi + {t_nodes}]",
    "add rdx, rdi",
    "cmp [rdx + {n_cache_func}], rax",
    "jne 8f",
    "mov r8d, dword ptr [rdx + {n_cache_child}]",
    "lea rdx, [rcx + rcx*2]",
    "lea rsi, [rsi + rdx*8]",
    "lea rax, [rsp + 64]",
    "mov [rsi], rax",
    "mov [rsi + 8], r8",
    "inc ecx",
    "mov dword ptr [rdi + {t_depth}], ecx",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "sub rax, [rdi + {t_paused}]",
    "mov [rsi + 16], rax",
    "mov dword ptr [rdi + {t_busy}], 0",
    "jmp 3f",
    "LOPI_SYSCALL_STUB_SLOW_AND_RETURN {enter}, [rbp+40]",
    // The same right after the `syscall`: [rsp+32] = rax, its result. Fast path: the end of
    // the top frame's call, which succeeded.
    ".p2align 6",
    ".globl lopi_syscall_exit_stub",
    "lopi_syscall_exit_stub:",
    "LOPI_SYSCALL_STUB_SAVE",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "LOPI_SYSCALL_STUB_THREAD",
    "cmp qword ptr [rsp + 32], -4095",
    "jae 8f",
    "mov ecx, dword ptr [rdi + {t_depth}]",
    "test ecx, ecx",
    "jz 8f",
    "mov rdx, rdi",
    "add rdx, [rdi + {t_stack}]",
    "lea rsi, [rcx + rcx*2]",
    "lea rdx, [rdx + rsi*8 - 24]",
    "lea rsi, [rsp + 64]",
    "cmp [rdx], rsi",
    "jne 8f",
    "cmp dword ptr [rdx + 12], 0",
    "jne 8f",
    "mov r8d, dword ptr [rdx + 8]",
    "imul r8, r8, {n_len}",
    "add r8, [rdi + {t_nodes}]",
    "add r8, rdi",
    // A `prctl` may have renamed the thread.
    "mov rsi, [r8 + {n_func}]",
    "shr rsi, 48",
    "and esi, {nr_other}",
    "cmp esi, 157",
    "je 8f",
    // The child of a call that copies the process may have its parent's chunk.
    "cmp esi, 435",
    "je 8f",
    "sub esi, 56",
    "cmp esi, 2",
    "jbe 8f",
    "mov rsi, rax",
    "sub rsi, [rdi + {t_paused}]",
    "mov [rdi + {t_last}], rsi",
    "sub rsi, [rdx + 16]",
    "jb 8f",
    "dec ecx",
    "mov dword ptr [rdi + {t_depth}], ecx",
    "inc qword ptr [r8 + {n_calls}]",
    "add [r8 + {n_ticks}], rsi",
    "cmp rsi, [r8 + {n_max}]",
    "jbe 2f",
    "mov [r8 + {n_max}], rsi",
    "2:",
    "mov dword ptr [rdi + {t_busy}], 0",
    "jmp 3f",
    "LOPI_SYSCALL_STUB_SLOW_AND_RETURN {exit}, rax",
    // A system-call site as the planner makes it, for calibration, with `edi` as its
    // counter index and no `syscall` between the probes (`eax` holds a number, then a result).
    ".globl lopi_calibration_syscall",
    "lopi_calibration_syscall:",
    "jmp 4f",
    "4:",
    "mov eax, 39",
    "lea rsp, [rsp - 128]",
    "push rdi",
    "call lopi_syscall_enter_stub",
    "lea rsp, [rsp + 128]",
    "lea rsp, [rsp - 128]",
    "push rdi",
    "call lopi_syscall_exit_stub",
    "lea rsp, [rsp + 128]",
    "ret",
    ".globl lopi_calibration_syscall_empty",
    "lopi_calibration_syscall_empty:",
    "mov eax, 39",
    "ret";
    enter = sym probe_syscall_enter,
    exit = sym probe_syscall_exit,
    nr_other = const syscall_name::NR_OTHER,
    v_whatif = const offset_of!(RuntimeVars, whatif),
    v_script_syscalls = const offset_of!(RuntimeVars, script_syscalls),
    v_dispatch = const offset_of!(RuntimeVars, dispatch_owner),
    f_unclocked = const abi::FRAME_UNCLOCKED,
    t_depth = const offset_of!(ThreadHeader, depth),
    t_stack_cap = const offset_of!(ThreadHeader, stack_cap),
    t_stack = const offset_of!(ThreadHeader, stack_offset),
    t_nodes = const offset_of!(ThreadHeader, nodes_offset),
    t_last = const offset_of!(ThreadHeader, last_tsc),
    t_paused = const offset_of!(ThreadHeader, paused_ticks),
    n_len = const abi::CONTEXT_NODE_LEN,
    n_func = const offset_of!(ContextNode, func),
    n_cache_func = const offset_of!(ContextNode, cache_func),
    n_cache_child = const offset_of!(ContextNode, cache_child),
    n_calls = const offset_of!(ContextNode, calls),
    n_ticks = const offset_of!(ContextNode, ticks),
    n_max = const offset_of!(ContextNode, max_ticks),
);

extern "C" {
    pub(crate) fn lopi_calibration_syscall(counter: u32);
    pub(crate) fn lopi_calibration_syscall_empty();
}

/// Before the system call `nr` (first arguments `arg0`, `arg1`; all its registers in `saved`)
/// at the site with counter `index`. Returns 0 when it made the call itself (its result in
/// `saved`), so that the trampoline skips its own `syscall`. With Syscall User Dispatch, it
/// makes a signal return itself (with the selector blocking) and the program's signal calls
/// (`dispatch_masks.rs`).
unsafe extern "C" fn probe_syscall_enter(index: u64, key: u64, nr: u64, arg0: u64, arg1: u64, saved: *mut Saved) -> u64 {
    let v = vars();
    // SAFETY: as in `syscall_entry`; `saved` holds the stub's registers.
    unsafe {
        let made = syscall_entry(v, index, key, nr, arg0, arg1, saved);
        if made == 0 || !dispatch::active(v) {
            return made;
        }
        if nr == RT_SIGRETURN {
            dispatch::sigreturn_at(v, key + 128);
        }
        let arg = |r: &u64| read_volatile(r);
        let s = &*saved;
        match dispatch_masks::signal_call(v, nr, [arg(&s.rdi), arg(&s.rsi), arg(&s.rdx), arg(&s.r10)], core::ptr::null_mut()) {
            Some(result) => {
                (*saved).rax = result;
                0
            }
            None => made,
        }
    }
}

/// A call caught by Syscall User Dispatch (`dispatch.rs`), recorded as a probed site's at the
/// dispatch point's counter `index`, keyed by the caller's stack pointer as a site's: the
/// entry probe, `make` (the call, or its emulation), the exit probe. Returns the result.
pub(super) unsafe fn dispatched(index: u64, key: u64, saved: &mut Saved, make: impl FnOnce(&mut Saved) -> u64) -> u64 {
    let v = vars();
    let nr = saved.rax;
    // SAFETY: the handler's copy of the interrupted registers stands for the stub's.
    unsafe {
        let result = if syscall_entry(v, index, key, nr, saved.rdi, saved.rsi, saved) == 0 { saved.rax } else { make(saved) };
        saved.rax = result;
        probe_syscall_exit(index, key, result, rdtsc(), 0, saved);
        result
    }
}

/// A call caught by Syscall User Dispatch that never returns, or that the program makes itself
/// at its site (`dispatch.rs`): counted under the thread's calling context, untimed.
pub(super) unsafe fn count_dispatched(index: u64, key: u64, nr: u64) {
    let v = vars();
    let slot = counter(index);
    // SAFETY: as in `syscall_entry`.
    unsafe {
        if let Some((t, _)) = begin_entry(v, slot, key) {
            count_now(&t, v, syscall_name::encode(slot, nr, false), slot);
            write_volatile(&mut (*t.h).busy, 0);
        }
    }
}

/// The entry probe of a system call, as [`probe_syscall_enter`] describes it.
unsafe fn syscall_entry(v: *mut RuntimeVars, index: u64, key: u64, nr: u64, arg0: u64, arg1: u64, saved: *mut Saved) -> u64 {
    let slot = counter(index);
    // SAFETY: as in `probe_enter`; `busy` keeps a signal handler's (or a vfork child's) probes
    // off the state this probe changes.
    unsafe {
        let Some((t, mut began)) = begin_entry(v, slot, key) else {
            syscall_log::vfork_child_made(v, nr, saved as *const u64);
            return 1;
        };
        let h = t.h;
        let kernel = read_volatile(&(*v).whatif);
        if kernel != 0 && kernel < abi::whatif::APP_KERNEL {
            // Waiting for the emulated kernel's lock is the program's time, not the probe's.
            kernel_locks::enter(&t, v, key, nr, arg0, arg1);
            began = rdtsc();
        }
        let (list, _) = script::syscall_hooks(v, nr);
        if list != 0 {
            script::run_call(&t, v, list, index, script::Regs::syscall(saved as *const u64), 0, (*h).depth, script::Side::Entry, nr + 1);
        }
        let name = syscall_name::encode(slot, nr, false);
        if shares_thread_pointer(nr, arg0) {
            count_now(&t, v, name, slot);
            write_volatile(&mut (*h).busy, 0);
            set_thread_slot(1);
            return 1;
        }
        if let Some(flags) = syscall_log::made_flags(nr) {
            syscall_log::record(&t, v, began, nr, flags, saved as *const u64, 0, 0);
        }
        if syscall_name::never_returns(nr) {
            if nr == EXIT || nr == EXIT_GROUP {
                script::run_thread(&t, v, abi::script::THREAD_EXIT);
                ended(&t, v, began, nr);
            }
            count_now(&t, v, name, slot);
            pause_excess(&t, began, false);
        } else {
            enter(&t, v, name, slot, key, began);
        }
        let vforks = nr == 58 || clone_flags(nr, arg0).is_some_and(|f| f & CLONE_VFORK != 0);
        set_forking(nr == FORK || clone_flags(nr, arg0).is_some_and(|f| f & CLONE_VM == 0));
        write_volatile(&mut (*h).busy, if vforks { VFORKING } else { 0 });
        if kernel >= abi::whatif::APP_KERNEL {
            if nr == EXIT {
                appkernel::caller_exits(&t);
            }
            // The round trip is the call's time: after the probe's own cost.
            return u64::from(!appkernel::forward(&t, v, saved));
        }
        1
    }
}

/// A `clone` whose child runs in this address space on this thread pointer (`CLONE_VM`
/// without `CLONE_THREAD`, `CLONE_SETTLS` or `CLONE_VFORK`: a raw clone, not a glibc thread)
/// would share this thread's state with another task, and a claim of it is not atomic. From
/// then on the thread pointer has no state (`Thread::current` is `None` on slot 1): both
/// tasks' calls are counted per site, untimed, with atomic increments.
unsafe fn shares_thread_pointer(nr: u64, arg0: u64) -> bool {
    const CLONE_THREAD: u64 = 0x1_0000;
    const CLONE_SETTLS: u64 = 0x8_0000;
    // SAFETY: as in `clone_flags`.
    unsafe { clone_flags(nr, arg0) }.is_some_and(|flags| flags & (CLONE_VM | CLONE_THREAD | CLONE_SETTLS | CLONE_VFORK) == CLONE_VM)
}

/// The flags of a `clone` (its first argument) or `clone3` (the first field of the
/// `clone_args` its first argument points at); `None` for other calls.
unsafe fn clone_flags(nr: u64, arg0: u64) -> Option<u64> {
    match nr {
        56 => Some(arg0),
        // SAFETY: clone3's first argument points at its `clone_args`, flags first.
        435 if arg0 != 0 => Some(unsafe { read_volatile(arg0 as *const u64) }),
        _ => None,
    }
}

/// The thread ends at `tsc` (`exit`; `exit_group` ends its process): when, its name then
/// (another thread may have renamed it), and the CPU time it used (its share of the
/// multiprocessor breakdown: the kernel forgets a thread's times when it ends).
unsafe fn ended(t: &Thread, v: *const RuntimeVars, tsc: u64, nr: u64) {
    // SAFETY: the record lies in the header page; the caller holds `busy`.
    unsafe {
        let end = (t.h as usize + abi::THREAD_END as usize) as *mut abi::ThreadEnd;
        write_volatile(&raw mut (*end).tsc, tsc);
        write_volatile(&raw mut (*end).nr, nr as u32);
        t.read_name();
        if let Some((user, system)) = cpus::own_times() {
            write_volatile(&raw mut (*end).user_ns, user);
            write_volatile(&raw mut (*end).system_ns, system);
            write_volatile(&raw mut (*end).runq_wait_ns, cpus::runq_wait(0).unwrap_or(0));
            write_volatile(&raw mut (*end).flags, abi::THREAD_END_CPU | cpus::allowed(0).min(0xffff) << abi::THREAD_END_CPUS_SHIFT);
        }
        if nr == EXIT_GROUP {
            cpus::record_others(v, (*t.h).pid, (*t.h).tid);
            // The map as the process ends: readers name locks and sites in libraries it
            // loaded after its start (`dlopen`) by it.
            crate::timing::records::maps::record(v, (*t.h).pid);
        }
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

/// After the system call at the site with counter `index` returned `result`; `tsc` is
/// when the stub began, `saved` where its registers are.
unsafe extern "C" fn probe_syscall_exit(index: u64, key: u64, result: u64, tsc: u64, _rsi: u64, saved: *mut Saved) {
    let v = vars();
    // SAFETY: as in `probe_syscall_enter`.
    unsafe {
        if forking() {
            set_forking(false);
            if result == 0 && take_own_tid(v) {
                // Which calls the parent had begun at the fork is not known (its chunk has
                // gone on since): the child starts without them.
                set_thread_slot(0);
            }
        }
        let fresh = Thread::existing(v).is_none();
        let Some(t) = Thread::current(v) else { return };
        let h = t.h;
        let busy = read_volatile(&(*h).busy);
        let depth = (*h).depth;
        let top = if depth > 0 { Some(*t.frame(depth - 1)) } else { None };
        let ours = top.filter(|f| f.rsp == key);
        // A new thread's first probe is its `clone` returning 0 in it (a new process's main
        // thread has its pid for a tid, and its parent's chunk).
        if fresh && busy == 0 && result == 0 && ours.is_none() && (*h).tid != (*h).pid {
            write_volatile(&mut (*h).busy, 1);
            script::run_thread(&t, v, abi::script::THREAD_START);
            write_volatile(&mut (*h).busy, 0);
        }
        let name = ours.filter(|f| f.flags & abi::FRAME_UNTIMED == 0).map(|f| (*t.node(f.node)).func).and_then(syscall_name::decode);
        let leave = match busy {
            // Only the caller's own return (never 0: the child's pid, or an error) ends it.
            VFORKING => result == 0 || ours.is_none(),
            0 => result == 0 && (ours.is_none() || name.is_some_and(|n| syscall_name::makes_child(n.nr))),
            _ => true,
        };
        // An emulated kernel of locks.
        let emulated = (1..abi::whatif::APP_KERNEL).contains(&read_volatile(&(*v).whatif));
        if leave {
            // A nested probe's; or a new child's (of clone, fork), which leaves the call to
            // its parent; or a call whose entry was counted untimed.
            if busy == VFORKING {
                syscall_log::vfork_child_returned(&t, result);
            }
            if emulated {
                kernel_locks::exit(&t, v, key);
            }
            return;
        }
        if busy == VFORKING {
            // The parent's own return: its child executed a program or ended.
            (*h).vfork_log = 0;
        }
        write_volatile(&mut (*h).busy, 1);
        let now = tsc.wrapping_sub((*h).paused_ticks);
        t.unwind_to(key, now, false);
        let depth = (*h).depth;
        if depth > 0 && (*t.frame(depth - 1)).rsp == key {
            let top = *t.frame(depth - 1);
            if syscall_name::is_error(result) {
                as_error(&t, v, depth - 1);
            }
            t.close_top(now, abi::EVENT_EXIT);
            let nr = name.map_or(u64::MAX, |n| n.nr);
            if name.is_some() {
                syscall_log::record(&t, v, tsc, nr, log::RETURNED, saved as *const u64, result, 0);
            }
            let (_, list) = script::syscall_hooks(v, nr);
            if list != 0 {
                let ticks = if top.flags & (abi::FRAME_UNTIMED | abi::FRAME_UNCLOCKED) == 0 { now.saturating_sub(top.start_tsc) } else { 0 };
                script::run_call(&t, v, list, index, script::Regs::syscall(saved as *const u64), 0, depth - 1, script::Side::Return(ticks), nr + 1);
            }
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
        if emulated {
            // After the call's end and the probe's own cost: the wait is the program's.
            kernel_locks::exit(&t, v, key);
        }
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
