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
use crate::abi::lock_name::{Kind, Op, Outcome, Role};
use crate::abi::script::lock_event;
use crate::abi::{self, lock_name, HeldLock, ThreadHeader};
use crate::base::tsc::rdtsc;
use crate::base::vars::{count_untimed, counter, vars};
use crate::timing::script;
use crate::timing::thread::calls::{claim, enter_under, pause_excess, Start};
use crate::timing::thread::chunk::Thread;
use crate::timing::thread::tree::Child;
use core::ptr::{read_volatile, write_volatile};

/// At a lock function's entry: `word` is its counter index and operation, `key` its entry
/// stack pointer, `addr`, `arg1` and `arg2` its first three arguments.
pub(super) unsafe extern "C" fn probe_lock_enter(word: u64, key: u64, addr: u64, arg1: u64, arg2: u64) {
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
            let (released, held) = if op.role() == Role::Release { release(&t, addr, now) } else { (None, None) };
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
            let index = word & lock_name::INDEX_MASK;
            match op.role() {
                Role::Acquire { .. } => {
                    script::run_lock(&t, v, lock_event::ACQUIRE, index, addr, arg1, arg2, 0, key, None);
                    if outcome == Outcome::Contended {
                        script::run_lock(&t, v, lock_event::CONTENDED, index, addr, arg1, arg2, 0, key, None);
                    }
                }
                Role::Release => script::run_lock(&t, v, lock_event::RELEASE, index, addr, arg1, arg2, 0, key, Some(held.unwrap_or(0))),
                _ => {}
            }
        }
        write_volatile(&mut (*h).busy, 0);
    }
}

/// Right before a lock function returns `result` (or a function it tail-calls, whose exits
/// serve it): ends the call whose frame is at `key`; any other call of those functions (made
/// by libc itself) is not a lock call and is ignored.
pub(super) unsafe extern "C" fn probe_lock_exit(word: u64, key: u64, result: u64) {
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
            if matches!(name.op.role(), Role::Acquire { .. }) && outcome.acquired() {
                let wait = if frame.flags & abi::FRAME_UNCLOCKED != 0 { 0 } else { now.saturating_sub(frame.start_tsc) };
                script::run_lock(&t, v, lock_event::ACQUIRED, word & lock_name::INDEX_MASK, name.addr, 0, 0, result, key, Some(wait));
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
unsafe fn release(t: &Thread, addr: u64, now: u64) -> (Option<u32>, Option<u64>) {
    // SAFETY: the caller holds `busy`; the table is this thread's, its nodes below node_count.
    unsafe {
        let h = t.h;
        let Some(i) = (0..(*h).held_len).rev().find(|&i| {
            let e = load(held(h).add(i as usize));
            e.addr == addr && e.flags & abi::HELD_PENDING == 0
        }) else {
            (*h).orphan_releases += 1;
            return (None, None);
        };
        let e = load(held(h).add(i as usize));
        forget(h, i);
        let dt = now.saturating_sub(e.start);
        if e.flags & abi::HELD_NESTED != 0 || e.node == 0 {
            return (None, (e.flags & abi::HELD_NESTED == 0).then_some(dt));
        }
        let n = t.node(e.node);
        (*n).calls += 1;
        (*n).ticks = (*n).ticks.wrapping_add(dt);
        if dt > (*n).max_ticks {
            (*n).max_ticks = dt;
        }
        // Merged nodes own no cache.
        (((*n).parent != abi::MERGED_NODE).then_some(e.node), Some(dt))
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
    // the new thread's control block, whose tid field the kernel set (CLONE_PARENT_SETTID); a
    // chunk is a mapping this runtime made, which stays mapped.
    unsafe {
        let offset = (*v).tid_offset;
        let thread = if at == 0 || offset == 0 { 0 } else { read_volatile(at as *const u64) };
        if thread == 0 {
            return None;
        }
        let tid = read_volatile((thread + u64::from(offset)) as *const u32);
        if tid != 0 {
            return Some(u64::from(tid));
        }
        // The thread has ended already (the kernel clears the tid then, CLONE_CHILD_CLEARTID);
        // its control block stays until it is joined, and the chunk it made, found through the
        // word lopi owns in it (see `rename`), still names it.
        let chunk = read_volatile((thread + 0x38) as *const u64);
        if chunk < abi::PAGE_SIZE || read_volatile(chunk as *const u64) != u64::from_le_bytes(abi::THREAD_MAGIC) {
            return None;
        }
        let tid = read_volatile(&raw const (*(chunk as *const ThreadHeader)).tid);
        (tid != 0).then_some(u64::from(tid))
    }
}

/// A `pthread_setname_np(thread, name)` call: the name, if the call will take it (at most 15
/// bytes), goes into that thread's header, found through its control block's word that lopi
/// owns (see `base/tcb.rs`) and checked against the thread's tid. A thread with no state yet
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
