//! Lock-operation probes (`--probe locks`). A call of a lock function is a frame like a timed
//! call's, whose node hangs under a site node (the call's return address) and is named by
//! the operation, how it went and the lock (`abi::lock_name`), so that its ticks are the
//! wait and its children the `futex` calls it blocked in. The entry reads the lock word to
//! tell a contended arrival; the exit reads the result and moves a failed call to its
//! outcome's sibling. Each thread keeps the locks it holds in a table in its header page:
//! a release ends the hold, which is added to a hold node beside the acquisition's.
//!
//! Thread calls are probed by the same stubs: a create records the thread it started (its
//! tid, read from the new `pthread_t`, which the kernel filled in before the call returned),
//! a `pthread_setname_np` writes the name into the named thread's header (the kernel's copy
//! of a thread's name is gone when it ends), a `pthread_exit` is counted when made.
use super::probes::{claim, count_untimed, enter_under, pause_excess, Start};
use super::thread::{Child, Thread};
use super::{counter, rdtsc, vars};
use crate::abi::{self, lock_name, ContextNode, HeldLock, RuntimeVars, ThreadHeader};
use crate::abi::lock_name::{Kind, Op, Outcome, Role};
use core::arch::global_asm;
use core::mem::offset_of;
use core::ptr::{read_volatile, write_volatile};

global_asm!(
    // Called from a lock function's trampoline as `push <counter index | op << 24>; call`,
    // at its entry and right before each exit, where the flags are dead. Saves every
    // call-clobbered general register. After the ten pushes: [rbp+88] = the pushed word,
    // rbp+96 = the call's frame key (its entry stack pointer), [rbp+40], [rbp+48], [rbp+56]
    // and [rbp+72] = the caller's rdi, rsi, rdx and rax.
    //
    // The fast paths handle an uncontended mutex's lock and unlock with the nodes the slow
    // paths cached: the caller's node caches the site, the site the call, the call its hold
    // node, the hold node the site its holds were last released from. Anything else (another
    // lock kind, a taken lock, an error, a trace, a nested lock call, a cache miss) goes to the
    // Rust slow paths. THREAD: r8 = this thread's chunk, `busy` taken (to 9 when the thread
    // has no chunk of its own or a probe of it runs, to 8 when it traces).
    ".macro LOPI_LOCK_STUB_SAVE",
    "push rax", "push rcx", "push rdx", "push rsi", "push rdi",
    "push r8", "push r9", "push r10", "push r11", "push rbp",
    "mov rbp, rsp",
    ".endm",
    ".macro LOPI_LOCK_STUB_THREAD",
    "mov r8, qword ptr fs:[0x38]",
    "cmp r8, 4095",
    "jbe 9f",
    "lea rsi, [rip + LOPI_DELTAS]",
    "add rsi, [rsi]",
    "mov ecx, dword ptr [rsi + {v_tid}]",
    "test ecx, ecx",
    "jz 9f",
    "mov ecx, dword ptr fs:[rcx]",
    "cmp ecx, dword ptr [r8 + {t_tid}]",
    "jne 9f",
    "cmp dword ptr [r8 + {t_busy}], 0",
    "jne 9f",
    "mov dword ptr [r8 + {t_busy}], 1",
    "cmp qword ptr [r8 + {t_trace_cap}], 0",
    "jne 8f",
    // r9 = the shadow stack, r10 = the nodes, ecx = depth.
    "mov r9, r8",
    "add r9, [r8 + {t_stack}]",
    "mov r10, r8",
    "add r10, [r8 + {t_nodes}]",
    "mov ecx, dword ptr [r8 + {t_depth}]",
    ".endm",
    // rdx = the name of the site whose return address is at the frame key.
    ".macro LOPI_LOCK_SITE_NAME",
    "mov rdx, [rbp + 96]",
    "shl rdx, 16",
    "shr rdx, 16",
    "bts rdx, {site_bit}",
    ".endm",
    ".globl lopi_lock_enter_stub",
    "lopi_lock_enter_stub:",
    "LOPI_LOCK_STUB_SAVE",
    "mov eax, dword ptr [rbp + 88]",
    "shr eax, {op_shift}",
    "lea ecx, [rax - 1]",
    "cmp ecx, {mutex_ops}",
    "jae 9f",
    "LOPI_LOCK_STUB_THREAD",
    "cmp ecx, dword ptr [r8 + {t_stack_cap}]",
    "jae 8f",
    // r11 = the caller's node: the top frame's, which must not be a lock call nor end here.
    "xor r11d, r11d",
    "test ecx, ecx",
    "jz 2f",
    "lea rsi, [rcx + rcx*2]",
    "lea rsi, [r9 + rsi*8 - 24]",
    "lea rdx, [rbp + 96]",
    "cmp [rsi], rdx",
    "jbe 8f",
    "mov r11d, dword ptr [rsi + 8]",
    "imul rsi, r11, {n_len}",
    "mov rsi, [r10 + rsi + {n_func}]",
    "shr rsi, {tag_bit}",
    "cmp esi, 1",
    "je 8f",
    "2:",
    "cmp eax, {op_unlock}",
    "je 5f",
    // An acquisition: the mutex is free (`__lock` is 0), the caller's node caches the site
    // and the site the call.
    "cmp dword ptr [rdi], 0",
    "jne 8f",
    "imul rsi, r11, {n_len}",
    "add rsi, r10",
    "LOPI_LOCK_SITE_NAME",
    "cmp [rsi + {n_cache_func}], rdx",
    "jne 8f",
    "mov esi, dword ptr [rsi + {n_cache_child}]",
    "imul rsi, rsi, {n_len}",
    "add rsi, r10",
    "shl rax, {op_name_shift}",
    "shl rdi, 16",
    "shr rdi, 16",
    "or rax, rdi",
    "bts rax, {tag_bit}",
    "cmp [rsi + {n_cache_func}], rax",
    "jne 8f",
    "mov edx, dword ptr [rsi + {n_cache_child}]",
    // An unclocked frame (see `abi::FRAME_UNCLOCKED`).
    "lea rsi, [rcx + rcx*2]",
    "lea rsi, [r9 + rsi*8]",
    "lea rax, [rbp + 96]",
    "mov [rsi], rax",
    "mov dword ptr [rsi + 8], edx",
    "mov dword ptr [rsi + 12], {f_unclocked}",
    "mov rax, [r8 + {t_last}]",
    "mov [rsi + 16], rax",
    "inc ecx",
    "mov dword ptr [r8 + {t_depth}], ecx",
    "mov dword ptr [r8 + {t_busy}], 0",
    "jmp 3f",
    // An unlock: the mutex is the held table's last entry, whose hold node caches this
    // site (under the caller's node), which caches the call.
    "5:",
    "mov edx, dword ptr [r8 + {t_held_len}]",
    "test edx, edx",
    "jz 8f",
    "lea rsi, [rdx + rdx*2]",
    "lea rsi, [r8 + rsi*8 + {held_table} - 24]",
    "cmp [rsi], rdi",
    "jne 8f",
    "test dword ptr [rsi + {h_flags}], {held_special}",
    "jnz 8f",
    "mov eax, dword ptr [rsi + {h_node}]",
    "test eax, eax",
    "jz 8f",
    "imul rax, rax, {n_len}",
    "add rax, r10",
    "LOPI_LOCK_SITE_NAME",
    "cmp [rax + {n_cache_func}], rdx",
    "jne 8f",
    "mov edx, dword ptr [rax + {n_cache_child}]",
    "imul rdx, rdx, {n_len}",
    "add rdx, r10",
    "cmp dword ptr [rdx + {n_parent}], r11d",
    "jne 8f",
    "shl rdi, 16",
    "shr rdi, 16",
    "or rdi, [rip + {unlock_name}]",
    "cmp [rdx + {n_cache_func}], rdi",
    "jne 8f",
    "mov edi, dword ptr [rdx + {n_cache_child}]",
    "mov r10, rax",
    // The hold ends now, and the unlock's frame starts (a clock going backwards ends it at 0).
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "sub rax, [r8 + {t_paused}]",
    "mov rdx, rax",
    "sub rdx, [rsi + {h_start}]",
    "jae 4f",
    "xor edx, edx",
    "4:",
    "inc qword ptr [r10 + {n_calls}]",
    "add [r10 + {n_ticks}], rdx",
    "cmp rdx, [r10 + {n_max}]",
    "jbe 4f",
    "mov [r10 + {n_max}], rdx",
    "4:",
    "dec dword ptr [r8 + {t_held_len}]",
    "lea rsi, [rcx + rcx*2]",
    "lea rsi, [r9 + rsi*8]",
    "lea rdx, [rbp + 96]",
    "mov [rsi], rdx",
    "mov dword ptr [rsi + 8], edi",
    "mov dword ptr [rsi + 12], 0",
    "mov [rsi + 16], rax",
    "inc ecx",
    "mov dword ptr [r8 + {t_depth}], ecx",
    "mov [r8 + {t_last}], rax",
    "mov dword ptr [r8 + {t_busy}], 0",
    "jmp 3f",
    "8:",
    "mov dword ptr [r8 + {t_busy}], 0",
    "9:",
    "mov r8, [rbp + 56]",
    "mov rcx, [rbp + 48]",
    "mov rdx, [rbp + 40]",
    "mov rdi, [rbp + 88]",
    "lea rsi, [rbp + 96]",
    "and rsp, -16",
    "call {enter}",
    "jmp 3f",
    ".globl lopi_lock_exit_stub",
    "lopi_lock_exit_stub:",
    "LOPI_LOCK_STUB_SAVE",
    "LOPI_LOCK_STUB_THREAD",
    // The top frame is this call's, a mutex call that found the lock free and returned 0.
    "test ecx, ecx",
    "jz 8f",
    "lea rsi, [rcx + rcx*2]",
    "lea rsi, [r9 + rsi*8 - 24]",
    "lea rdx, [rbp + 96]",
    "cmp [rsi], rdx",
    "jne 8f",
    "test eax, eax",
    "jnz 8f",
    "mov r11d, dword ptr [rsi + 8]",
    "imul r11, r11, {n_len}",
    "add r11, r10",
    "mov rdx, [r11 + {n_func}]",
    "mov rdi, rdx",
    "shr rdi, {outcome_shift}",
    "cmp edi, {unlock_ok}",
    "je 5f",
    "lea eax, [rdi - {lock_ok}]",
    "cmp eax, {acquire_span}",
    "ja 8f",
    "test eax, 15",
    "jnz 8f",
    "cmp dword ptr [rsi + 12], {f_unclocked}",
    "jne 8f",
    "cmp dword ptr [r8 + {t_held_len}], {held_slots}",
    "jae 8f",
    // The call's node caches its hold node.
    "mov rax, rdx",
    "or rax, [rip + {hold_outcome}]",
    "cmp [r11 + {n_cache_func}], rax",
    "jne 8f",
    "mov edi, dword ptr [r11 + {n_cache_child}]",
    "mov r10, rdx",
    "shl r10, 16",
    "shr r10, 16",
    "mov r9, rdx",
    "shr r9, {op_name_shift}",
    "and r9d, 0x7f",
    // The hold starts now; the call took no time.
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "sub rax, [r8 + {t_paused}]",
    "inc qword ptr [r11 + {n_calls}]",
    "dec dword ptr [r8 + {t_depth}]",
    "mov edx, dword ptr [r8 + {t_held_len}]",
    "lea rcx, [rdx + rdx*2]",
    "lea rcx, [r8 + rcx*8 + {held_table}]",
    "mov [rcx], r10",
    "mov [rcx + {h_start}], rax",
    "mov dword ptr [rcx + {h_node}], edi",
    "mov dword ptr [rcx + {h_flags}], r9d",
    "inc edx",
    "mov dword ptr [r8 + {t_held_len}], edx",
    "mov [r8 + {t_last}], rax",
    "mov dword ptr [r8 + {t_busy}], 0",
    "jmp 3f",
    // An unlock in which nothing probed happened: it ends where it began.
    "5:",
    "cmp dword ptr [rsi + 12], 0",
    "jne 8f",
    "mov rdx, [rsi + 16]",
    "cmp rdx, [r8 + {t_last}]",
    "jne 8f",
    "inc qword ptr [r11 + {n_calls}]",
    "dec dword ptr [r8 + {t_depth}]",
    "mov dword ptr [r8 + {t_busy}], 0",
    "jmp 3f",
    "8:",
    "mov dword ptr [r8 + {t_busy}], 0",
    "9:",
    "mov rdx, [rbp + 72]",
    "mov rdi, [rbp + 88]",
    "lea rsi, [rbp + 96]",
    "and rsp, -16",
    "call {exit}",
    "3:",
    "mov rsp, rbp",
    "pop rbp", "pop r11", "pop r10", "pop r9", "pop r8",
    "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
    "ret 8",
    enter = sym probe_lock_enter,
    exit = sym probe_lock_exit,
    unlock_name = sym UNLOCK_NAME,
    hold_outcome = sym HOLD_OUTCOME,
    op_shift = const lock_name::OP_SHIFT,
    mutex_ops = const Op::MutexUnlock as u32,
    op_unlock = const Op::MutexUnlock as u32,
    op_name_shift = const lock_name::OP_SHIFT_NAME,
    outcome_shift = const lock_name::OUTCOME_SHIFT,
    tag_bit = const lock_name::TAG.trailing_zeros(),
    site_bit = const lock_name::SITE.trailing_zeros(),
    unlock_ok = const lock_name::encode(Op::MutexUnlock, Outcome::Ok, 0) >> lock_name::OUTCOME_SHIFT,
    lock_ok = const lock_name::encode(Op::MutexLock, Outcome::Ok, 0) >> lock_name::OUTCOME_SHIFT,
    acquire_span = const (Op::MutexTimedlock as u64 - Op::MutexLock as u64) << (lock_name::OP_SHIFT_NAME - lock_name::OUTCOME_SHIFT),
    f_unclocked = const abi::FRAME_UNCLOCKED,
    held_table = const abi::HELD_TABLE,
    held_slots = const abi::HELD_SLOTS,
    held_special = const abi::HELD_NESTED | abi::HELD_PENDING,
    h_start = const offset_of!(HeldLock, start),
    h_node = const offset_of!(HeldLock, node),
    h_flags = const offset_of!(HeldLock, flags),
    v_tid = const offset_of!(RuntimeVars, tid_offset),
    t_tid = const offset_of!(ThreadHeader, tid),
    t_busy = const offset_of!(ThreadHeader, busy),
    t_depth = const offset_of!(ThreadHeader, depth),
    t_stack_cap = const offset_of!(ThreadHeader, stack_cap),
    t_trace_cap = const offset_of!(ThreadHeader, trace_cap),
    t_stack = const offset_of!(ThreadHeader, stack_offset),
    t_nodes = const offset_of!(ThreadHeader, nodes_offset),
    t_last = const offset_of!(ThreadHeader, last_tsc),
    t_paused = const offset_of!(ThreadHeader, paused_ticks),
    t_held_len = const offset_of!(ThreadHeader, held_len),
    n_len = const abi::CONTEXT_NODE_LEN,
    n_parent = const offset_of!(ContextNode, parent),
    n_func = const offset_of!(ContextNode, func),
    n_cache_func = const offset_of!(ContextNode, cache_func),
    n_cache_child = const offset_of!(ContextNode, cache_child),
    n_calls = const offset_of!(ContextNode, calls),
    n_ticks = const offset_of!(ContextNode, ticks),
    n_max = const offset_of!(ContextNode, max_ticks),
);

/// The name of an uncontended `pthread_mutex_unlock` without its lock's address, and what a
/// name's outcome bits become for a hold: 64-bit constants the stubs `or` from memory.
static UNLOCK_NAME: u64 = lock_name::encode(Op::MutexUnlock, Outcome::Ok, 0);
static HOLD_OUTCOME: u64 = lock_name::encode(Op::MutexLock, Outcome::Hold, 0) & !lock_name::encode(Op::MutexLock, Outcome::Ok, 0);

/// At a lock function's entry: `word` is its counter index and operation, `key` its entry
/// stack pointer, `addr`, `arg1` and `arg2` its first three arguments.
unsafe extern "C" fn probe_lock_enter(word: u64, key: u64, addr: u64, arg1: u64, arg2: u64) {
    let v = vars();
    let slot = counter(word & lock_name::INDEX_MASK);
    // SAFETY: as in `probe_enter`; the lock's words are read where the lock function itself
    // is about to read them.
    unsafe {
        let Some(op) = Op::from_u8((word >> lock_name::OP_SHIFT) as u8) else {
            count_untimed(slot);
            return;
        };
        let Some(t) = claim(v, Some(slot)) else { return };
        let h = t.h;
        let depth = (*h).depth;
        let stale = depth > 0 && (*t.frame(depth - 1)).rsp <= key;
        let outcome = arrival(op, addr, (*h).tid);
        // An acquisition that finds its lock free takes no measurable time: the clock (the
        // probes' main cost) is read at its end, where the hold begins, unless a probe
        // inside it shows that it waited after all. A trace times every call.
        let unclocked = !stale && outcome == Outcome::Ok && matches!(op.role(), Role::Acquire { .. }) && (*h).trace_cap == 0;
        let began = if unclocked { 0 } else { rdtsc() };
        let now = began.wrapping_sub((*h).paused_ticks);
        if stale {
            t.unwind_to(key, now, true);
        }
        if !inside_lock_call(&t) {
            if !unclocked {
                t.clock_unclocked_top(now);
            }
            let released = if op.role() == Role::Release { release(&t, addr, now) } else { None };
            if op.is_cond_wait() {
                release(&t, arg1, now);
                hold(&t, HeldLock { addr: arg1, start: key, node: 0, flags: Op::CondRelock as u32 | abi::HELD_PENDING });
            }
            match op {
                // Its `pthread_t *`, read when it returns.
                Op::ThreadCreate => hold(&t, HeldLock { addr, start: key, node: 0, flags: op as u32 | abi::HELD_PENDING }),
                Op::ThreadSetname => rename(v, addr, arg1),
                _ => {}
            }
            let ret = read_volatile(key as *const u64);
            let name = lock_name::encode(op, outcome, if op == Op::ThreadCreate { arg2 } else { addr });
            let site = t.child(v, t.top_node(), lock_name::site(ret));
            if let (Some(hold), Some(Child::Path(site))) = (released, site) {
                // Where this lock's holds end next, most likely.
                t.remember(hold, lock_name::site(ret), site);
            }
            match site {
                Some(Child::Path(site) | Child::Merged(site)) if op == Op::ThreadExit => {
                    add_call(&t, v, site, name);
                }
                Some(Child::Path(site) | Child::Merged(site)) => {
                    let start = if unclocked { Start::Unclocked } else { Start::At(now) };
                    enter_under(&t, v, site, name, slot, key, began, start);
                    // A quiet release's exit compares this with its start.
                    if !unclocked {
                        (*h).last_tsc = now;
                    }
                }
                None => {
                    (*h).untimed_calls += 1;
                    count_untimed(slot);
                }
            }
        }
        write_volatile(&mut (*h).busy, 0);
    }
}

/// Right before a lock function returns `result` (or a function it tail-calls, whose exits
/// serve it): ends the call whose frame is at `key`; any other call of those functions (made
/// by libc itself) is not a lock call and is ignored.
unsafe extern "C" fn probe_lock_exit(_word: u64, key: u64, result: u64) {
    let v = vars();
    // SAFETY: the claimed thread's frames are below `depth`, their nodes below `node_count`.
    unsafe {
        let Some(t) = claim(v, None) else { return };
        let h = t.h;
        let depth = (*h).depth;
        let top = if depth > 0 { Some(*t.frame(depth - 1)) } else { None };
        let call = top.filter(|f| f.rsp == key && f.flags & abi::FRAME_UNTIMED == 0).and_then(|f| lock_name::decode((*t.node(f.node)).func).map(|n| (f, n)));
        // A release (a wake, an init) that nothing probed happened in since its entry read the
        // clock (`last_tsc` is still its start) ends there: its atomic store is its caller's
        // time, and the clock read it saves is most of what its probes cost.
        let quiet = call.is_some_and(|(f, n)| {
            matches!(n.op.role(), Role::Release | Role::Wake | Role::Init) && f.flags == 0 && (*h).last_tsc == f.start_tsc && (*h).trace_cap == 0
        });
        let (tsc, now) = match call {
            Some((f, _)) if quiet => (0, f.start_tsc),
            _ => {
                let tsc = rdtsc();
                (tsc, tsc.wrapping_sub((*h).paused_ticks))
            }
        };
        t.unwind_to(key, now, false);
        let nodes_before = (*h).node_count;
        if let Some((frame, name)) = call {
            let site = (*t.node(frame.node)).parent;
            let mut outcome = result_outcome(name.op, name.outcome, result as u32);
            // It found the lock free, then waited (a probe ran inside: its `futex`).
            if outcome == Outcome::Ok && frame.flags & abi::FRAME_CLOCKED_INSIDE != 0 && matches!(name.op.role(), Role::Acquire { .. }) {
                outcome = Outcome::Contended;
            }
            let mut node = frame.node;
            if outcome != name.outcome {
                if let Some(Child::Path(n) | Child::Merged(n)) = t.child(v, site, lock_name::encode(name.op, outcome, name.addr)) {
                    (*t.frame(depth - 1)).node = n;
                    node = n;
                }
            }
            t.close_top(now, abi::EVENT_EXIT);
            if name.op == Op::ThreadCreate {
                let created = take_pending(&t, key).filter(|_| outcome == Outcome::Ok);
                if let Some(tid) = created.and_then(|e| new_thread(v, e.addr)) {
                    if let Some(Child::Path(n) | Child::Merged(n)) = t.child(v, node, lock_name::encode(name.op, Outcome::Started, tid)) {
                        (*t.node(n)).calls += 1;
                        (*t.node(n)).max_ticks = tsc;
                    }
                }
            }
            if name.op.holds() && outcome == Outcome::Nested {
                hold(&t, HeldLock { addr: name.addr, start: now, node: 0, flags: name.op as u32 | abi::HELD_NESTED });
            } else if name.op.holds() && outcome.acquired() {
                let hold_name = lock_name::encode(name.op, Outcome::Hold, name.addr);
                if let Some(Child::Path(n) | Child::Merged(n)) = t.child_uncached(v, site, hold_name) {
                    if frame.flags & abi::FRAME_MERGED == 0 {
                        t.remember(node, hold_name, n);
                    }
                    hold(&t, HeldLock { addr: name.addr, start: now, node: n, flags: name.op as u32 });
                }
            }
            if name.op.is_cond_wait() {
                relock(&t, v, key, site, now);
            }
            (*h).last_tsc = now;
        }
        // As in `enter_under`: a new node's cost is taken out whole.
        if (*h).node_count != nodes_before && !quiet {
            pause_excess(&t, tsc, true);
        }
        write_volatile(&mut (*h).busy, 0);
    }
}

/// A lock function called from inside another one's call (glibc's old-version condition
/// variable functions call the new ones): the outer call accounts for it.
unsafe fn inside_lock_call(t: &Thread) -> bool {
    // SAFETY: the caller holds `busy`.
    unsafe {
        let depth = (*t.h).depth;
        depth > 0 && {
            let f = *t.frame(depth - 1);
            f.flags & abi::FRAME_UNTIMED == 0 && lock_name::decode((*t.node(f.node)).func).is_some()
        }
    }
}

/// Whether the call finds the lock taken on arrival, from glibc's x86-64 layouts (a
/// recursive mutex relocked by its owner is `Nested`).
unsafe fn arrival(op: Op, addr: u64, tid: u32) -> Outcome {
    let word = |offset: u64| {
        // SAFETY: the lock function reads the same object.
        unsafe { read_volatile((addr + offset) as *const u32) }
    };
    let contended = |taken: bool| if taken { Outcome::Contended } else { Outcome::Ok };
    match (op.kind(), op.role()) {
        // pthread_mutex_t: __lock (0 = free; a PI or robust mutex holds its owner's tid there), __owner.
        (Kind::Mutex, Role::Acquire { try_only, .. }) => {
            let (lock, owner) = (word(0), word(8));
            if lock != 0 && owner == tid {
                Outcome::Nested
            } else {
                contended(lock != 0 && !try_only)
            }
        }
        // pthread_rwlock_t.__readers: WRPHASE 1, WRLOCKED 2, readers from bit 3.
        (Kind::RwLock, Role::Acquire { try_only: false, read: true }) => contended(word(0) & 3 != 0),
        (Kind::RwLock, Role::Acquire { try_only: false, read: false }) => contended(word(0) & !5 != 0),
        // A counter: 1 free, 0 taken, negative while others spin.
        (Kind::SpinLock, Role::Acquire { try_only: false, .. }) => contended(word(0) as i32 <= 0),
        // The value is the low 32 bits of the semaphore's first word.
        (Kind::Semaphore, Role::Wait { try_only: false }) => contended(word(0) == 0),
        // in, current_round, count: every arrival but a round's last waits.
        (Kind::Barrier, _) => {
            let count = word(8);
            contended(count != 0 && word(0).wrapping_add(1) % count != 0)
        }
        _ => Outcome::Ok,
    }
}

/// How the call ended, from its result and how it began.
fn result_outcome(op: Op, began: Outcome, result: u32) -> Outcome {
    match op.kind() {
        // 0, or -1 with errno (read from libc's thread-local storage it would take to tell
        // more): a try finds no unit, a timed wait times out.
        Kind::Semaphore if result == u32::MAX => match op {
            Op::SemTrywait => Outcome::Busy,
            Op::SemTimedwait => Outcome::TimedOut,
            _ => Outcome::OtherError,
        },
        Kind::Semaphore => began,
        // PTHREAD_BARRIER_SERIAL_THREAD.
        Kind::Barrier if result == u32::MAX => Outcome::Serial,
        _ => match Outcome::of_result(result) {
            Outcome::Ok => began,
            other => other,
        },
    }
}

/// Adds `lock` to the thread's held table (a full table loses the hold, counted).
unsafe fn hold(t: &Thread, lock: HeldLock) {
    // SAFETY: the table lies in the header page after the header.
    unsafe {
        let h = t.h;
        let len = (*h).held_len;
        if len >= abi::HELD_SLOTS {
            (*h).holds_dropped += 1;
            return;
        }
        store(held(h).add(len as usize), lock);
        (*h).held_len = len + 1;
    }
}

fn held(h: *mut ThreadHeader) -> *mut HeldLock {
    (h as usize + abi::HELD_TABLE as usize) as *mut HeldLock
}

/// An entry's fields one at a time: a whole-struct copy may be compiled to vector moves,
/// which the probes' callers do not save (the blob's build checks).
unsafe fn load(e: *const HeldLock) -> HeldLock {
    // SAFETY: `e` is an entry of the table.
    unsafe {
        HeldLock {
            addr: read_volatile(&raw const (*e).addr),
            start: read_volatile(&raw const (*e).start),
            node: read_volatile(&raw const (*e).node),
            flags: read_volatile(&raw const (*e).flags),
        }
    }
}

unsafe fn store(e: *mut HeldLock, v: HeldLock) {
    // SAFETY: `e` is an entry of the table.
    unsafe {
        write_volatile(&raw mut (*e).addr, v.addr);
        write_volatile(&raw mut (*e).start, v.start);
        write_volatile(&raw mut (*e).node, v.node);
        write_volatile(&raw mut (*e).flags, v.flags);
    }
}

/// Removes entry `i` from the held table.
unsafe fn forget(h: *mut ThreadHeader, i: u32) {
    // SAFETY: i < held_len <= HELD_SLOTS.
    unsafe {
        let len = (*h).held_len;
        for j in i..len - 1 {
            store(held(h).add(j as usize), load(held(h).add(j as usize + 1)));
        }
        (*h).held_len = len - 1;
    }
}

/// The lock at `addr` is released at `now`: its latest acquisition's hold ends (a recursive
/// relock's ends nothing). Returns the hold node it added to, unless merged.
unsafe fn release(t: &Thread, addr: u64, now: u64) -> Option<u32> {
    // SAFETY: the caller holds `busy`; the table is this thread's, its nodes below node_count.
    unsafe {
        let h = t.h;
        let Some(i) = (0..(*h).held_len).rev().find(|&i| {
            let e = load(held(h).add(i as usize));
            e.addr == addr && e.flags & abi::HELD_PENDING == 0
        }) else {
            (*h).orphan_releases += 1;
            return None;
        };
        let e = load(held(h).add(i as usize));
        forget(h, i);
        if e.flags & abi::HELD_NESTED != 0 || e.node == 0 {
            return None;
        }
        let dt = now.saturating_sub(e.start);
        let n = t.node(e.node);
        (*n).calls += 1;
        (*n).ticks = (*n).ticks.wrapping_add(dt);
        if dt > (*n).max_ticks {
            (*n).max_ticks = dt;
        }
        // Merged nodes own no cache.
        ((*n).parent != abi::MERGED_NODE).then_some(e.node)
    }
}

/// A condition wait at `key` returns: it took its mutex back, an acquisition at its `site`
/// whose hold begins now.
unsafe fn relock(t: &Thread, v: *const abi::RuntimeVars, key: u64, site: u32, now: u64) {
    // SAFETY: the caller holds `busy`; the table is this thread's.
    unsafe {
        let Some(e) = take_pending(t, key) else { return };
        if let Some(Child::Path(n) | Child::Merged(n)) = t.child_uncached(v, site, lock_name::encode(Op::CondRelock, Outcome::Hold, e.addr)) {
            hold(t, HeldLock { addr: e.addr, start: now, node: n, flags: Op::CondRelock as u32 });
        }
        add_call(t, v, site, lock_name::encode(Op::CondRelock, Outcome::Ok, e.addr));
    }
}

/// Removes and returns the pending entry of the call at `key`.
unsafe fn take_pending(t: &Thread, key: u64) -> Option<HeldLock> {
    // SAFETY: the caller holds `busy`; the table is this thread's.
    unsafe {
        let h = t.h;
        let i = (0..(*h).held_len).rev().find(|&i| {
            let e = load(held(h).add(i as usize));
            e.flags & abi::HELD_PENDING != 0 && e.start == key
        })?;
        let e = load(held(h).add(i as usize));
        forget(h, i);
        Some(e)
    }
}

/// Counts a call of `name` under `parent` that has no duration (made, or never returning).
unsafe fn add_call(t: &Thread, v: *const abi::RuntimeVars, parent: u32, name: u64) {
    // SAFETY: the caller holds `busy`.
    unsafe {
        if let Some(Child::Path(n) | Child::Merged(n)) = t.child(v, parent, name) {
            (*t.node(n)).calls += 1;
        }
    }
}

/// The tid of the thread whose `pthread_t` a successful `pthread_create` stored at `at`.
unsafe fn new_thread(v: *const abi::RuntimeVars, at: u64) -> Option<u64> {
    // SAFETY: `at` is the create's first argument, written by the create; a `pthread_t` is
    // the new thread's control block, whose tid field the kernel set (CLONE_PARENT_SETTID).
    unsafe {
        let offset = (*v).tid_offset;
        let thread = if at == 0 || offset == 0 { 0 } else { read_volatile(at as *const u64) };
        let tid = if thread == 0 { 0 } else { read_volatile((thread + u64::from(offset)) as *const u32) };
        (tid != 0).then_some(u64::from(tid))
    }
}

/// A `pthread_setname_np(thread, name)` call: the name, if the call will take it (at most 15
/// bytes), goes into that thread's header, found through its control block's word that lopi
/// owns (see `timing/mod.rs`) and checked against the thread's tid. A thread with no state yet
/// reads its name when it makes it.
unsafe fn rename(v: *const abi::RuntimeVars, thread: u64, name: u64) {
    // SAFETY: `thread` and `name` are the arguments glibc is about to use in the same way: the
    // control block's words and a NUL-terminated string. The other thread's header is written
    // only in its name, which readers take as it is at the end.
    unsafe {
        let offset = (*v).tid_offset;
        if thread == 0 || name == 0 || offset == 0 {
            return;
        }
        let chunk = read_volatile((thread + 0x38) as *const u64);
        if chunk < abi::PAGE_SIZE {
            return;
        }
        let h = chunk as *mut ThreadHeader;
        if read_volatile(h as *const u64) != u64::from_le_bytes(abi::THREAD_MAGIC) || read_volatile(&raw const (*h).tid) != read_volatile((thread + u64::from(offset)) as *const u32) {
            return;
        }
        let Some(len) = (0..16).find(|&i| read_volatile((name + i) as *const u8) == 0) else { return };
        for i in 0..16 {
            let b = if i < len { read_volatile((name + i) as *const u8) } else { 0 };
            write_volatile((&raw mut (*h).comm as *mut u8).add(i as usize), b);
        }
    }
}
