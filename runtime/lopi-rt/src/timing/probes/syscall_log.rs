//! `lopi run --log`: the system-call probes write each call into the thread's trace, with its
//! arguments, result and the bytes it named (`abi::syscall_log`), read with `process_vm_readv`
//! so that a bad pointer of the program's costs an empty string, not a fault.
use crate::abi::syscall_log::{self as log, Bytes, SyscallRecord, LEN_RESULT, MAX_SLOTS, SLOT_LEN, SYSCALL_RECORD_LEN};
use crate::abi::{self, syscall_name, Event, RuntimeVars};
use super::syscalls::VFORKING;
use crate::base::mem::read_own;
use crate::base::sys;
use crate::base::tsc::rdtsc;
use crate::timing::script::SYSCALL_ARG_SLOTS;
use crate::timing::thread::chunk::Thread;
use core::ptr::{read_volatile, write_volatile};

/// The call's argument `i` from the stub's saved registers.
unsafe fn arg(saved: *const u64, i: usize) -> u64 {
    // SAFETY: the stub saved each of `SYSCALL_ARG_SLOTS`.
    unsafe { read_volatile(saved.add(SYSCALL_ARG_SLOTS[i])) }
}

/// A call `nr` a `vfork` child makes on its suspended parent's state (`busy` is `VFORKING`,
/// so no probe of it runs): logged as made, with the child's tid, and its result when it
/// returns ([`vfork_child_returned`]).
pub(super) unsafe fn vfork_child_made(v: *const RuntimeVars, nr: u64, saved: *const u64) {
    // SAFETY: the parent is suspended until the child executes a program or exits, so the
    // child alone writes the trace; its signal handlers' probes find `busy` set and skip.
    unsafe {
        let Some(t) = Thread::existing(v) else { return };
        if read_volatile(&(*t.h).busy) != VFORKING {
            return;
        }
        let flags = made_flags(nr).unwrap_or(log::MADE);
        let tid = sys::call3(sys::GETTID, 0, 0, 0) as u32;
        if let Some(at) = record(&t, v, rdtsc(), nr, flags, saved, 0, tid) {
            if flags != log::NO_RETURN {
                (*t.h).vfork_log = u32::try_from(at + 1).unwrap_or(0);
            }
        }
    }
}

/// How call `nr` is logged when made, before it returns: one that never returns, an `execve`
/// on its way (see `log::PENDING`); `None` for the others, logged when they return.
pub(super) fn made_flags(nr: u64) -> Option<u32> {
    match nr {
        _ if syscall_name::never_returns(nr) => Some(log::NO_RETURN),
        EXECVE | EXECVEAT => Some(log::PENDING),
        _ => None,
    }
}

const EXECVE: u64 = 59;
const EXECVEAT: u64 = 322;

/// The return, with `result`, of the call a `vfork` child logged last.
pub(super) unsafe fn vfork_child_returned(t: &Thread, result: u64) {
    // SAFETY: as in `vfork_child_made`; `vfork_log` names a record this trace holds.
    unsafe {
        let h = t.h;
        let at = (*h).vfork_log;
        if at == 0 {
            return;
        }
        (*h).vfork_log = 0;
        let r = (t.base + (*h).trace_offset as usize + at as usize * abi::EVENT_LEN) as *mut SyscallRecord;
        write_volatile(&raw mut (*r).ret, result);
        write_volatile(&raw mut (*r).flags, log::RETURNED);
    }
}

/// Logs call `nr` with the arguments in `saved` at `tsc`, made by thread `tid` (0: the trace's):
/// `flags` says whether it returned (`ret`), never returns, or is on its way. A full trace drops
/// the call and counts it. Returns where the record's event is (its slot in the trace).
/// Arguments are read one by one: an array of them would be copied with vector registers, which
/// the stubs do not save.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn record(t: &Thread, v: *const RuntimeVars, tsc: u64, nr: u64, flags: u32, saved: *const u64, ret: u64, tid: u32) -> Option<u64> {
    // SAFETY: the caller holds `busy`; the trace region holds `trace_cap` slots, and a
    // payload of at most `MAX_SLOTS` is written only where that many are free.
    unsafe {
        let h = t.h;
        if read_volatile(&(*v).syscall_log) == 0 || (*h).trace_cap == 0 {
            return None;
        }
        let len = (*h).trace_len;
        if (*h).trace_cap - len.min((*h).trace_cap) < 1 + MAX_SLOTS as u64 {
            t.trace_full(tsc);
            return None;
        }
        let event = t.base + (*h).trace_offset as usize + len as usize * abi::EVENT_LEN;
        let payload = event + abi::EVENT_LEN;
        let mut at = payload + SYSCALL_RECORD_LEN;
        let (mut lens, mut cuts) = ([0u16; 2], [0u16; 2]);
        let returned = flags == log::RETURNED && !syscall_name::is_error(ret);
        for (i, part) in log::bytes_of(nr).into_iter().enumerate() {
            let (copied, cut) = copy_bytes(t, part, saved, returned.then_some(ret), at as *mut u8);
            lens[i] = copied as u16;
            cuts[i] = cut;
            at += log::slots_of(copied) * SLOT_LEN;
        }
        let r = payload as *mut SyscallRecord;
        write_volatile(&raw mut (*r).nr, nr as u32);
        write_volatile(&raw mut (*r).flags, flags);
        write_volatile(&raw mut (*r).ret, ret);
        for i in 0..6 {
            write_volatile(&raw mut (*r).args[i], arg(saved, i));
        }
        write_volatile(&raw mut (*r).lens, lens);
        write_volatile(&raw mut (*r).cut, cuts);
        write_volatile(&raw mut (*r).tid, tid);
        write_volatile(&raw mut (*r).envc, log::envp_arg(nr).map_or(0, |a| env_count((*t.h).pid, arg(saved, a))));
        let slots = (at - payload) / SLOT_LEN;
        let e = event as *mut Event;
        write_volatile(&raw mut (*e).tsc, tsc);
        write_volatile(&raw mut (*e).node, slots as u32);
        write_volatile(&raw mut (*e).kind, abi::EVENT_SYSCALL);
        (*h).trace_len = len + 1 + slots as u64;
        Some(len)
    }
}

/// Copies one part of a call's bytes to `to` (room for `PATH_BYTES` or `ARGV_BYTES`): how many
/// bytes, and how many it named beyond them (1 for "more" where the length is unknown). Data a
/// call returned (`read`'s) only when it returned, `result`.
unsafe fn copy_bytes(t: &Thread, part: Bytes, saved: *const u64, result: Option<u64>, to: *mut u8) -> (usize, u16) {
    // SAFETY: `to` has room for the largest part; reads go through `read_own`.
    unsafe {
        let pid = (*t.h).pid;
        match part {
            Bytes::None => (0, 0),
            Bytes::Path(a) => string(pid, arg(saved, a as usize), to, log::PATH_BYTES),
            Bytes::Data { buf, len } => {
                let named = if len == LEN_RESULT { result.unwrap_or(0) } else { arg(saved, len as usize) };
                let want = named.min(log::DATA_BYTES as u64);
                let got = read_own(pid, arg(saved, buf as usize), to, want) as usize;
                (got, (named - got as u64).min(u16::MAX as u64) as u16)
            }
            Bytes::Argv(a) => {
                // Uninitialised: zeroing it would take vector registers, which the stubs do not save.
                let mut pointers = core::mem::MaybeUninit::<[u64; log::ARGV_STRINGS]>::uninit();
                let first = pointers.as_mut_ptr() as *mut u64;
                let words = read_own(pid, arg(saved, a as usize), first as *mut u8, 8 * log::ARGV_STRINGS as u64) as usize / 8;
                let mut at = 0;
                for i in 0..words {
                    let p = read_volatile(first.add(i));
                    if p == 0 {
                        return (at, 0);
                    }
                    let room = log::ARGV_BYTES - at;
                    let (len, cut) = string(pid, p, to.add(at), room.saturating_sub(1));
                    if len + 1 > room || cut != 0 {
                        return (at, 1);
                    }
                    *to.add(at + len) = 0;
                    at += len + 1;
                }
                (at, u16::from(words == log::ARGV_STRINGS))
            }
        }
    }
}

/// How many pointers the NULL-terminated array at `at` holds, plus 1 (0: unreadable), up to
/// `log::MAX_ENV`.
unsafe fn env_count(pid: u32, at: u64) -> u32 {
    const CHUNK: usize = 16;
    // Uninitialised: zeroing it would take vector registers, which the stubs do not save.
    let mut words = core::mem::MaybeUninit::<[u64; CHUNK]>::uninit();
    let first = words.as_mut_ptr() as *mut u64;
    let mut count = 0u32;
    // SAFETY: reads go through `read_own`; only the words it filled are read.
    unsafe {
        while count < log::MAX_ENV {
            let got = read_own(pid, at + 8 * u64::from(count), first as *mut u8, 8 * CHUNK as u64) as usize / 8;
            if got == 0 {
                return if count == 0 { 0 } else { count + 1 };
            }
            for i in 0..got {
                if read_volatile(first.add(i)) == 0 {
                    return count + 1;
                }
                count += 1;
            }
        }
    }
    count + 1
}

/// The NUL-terminated string at `src`, at most `max` bytes of it, without its NUL: its length,
/// and 1 when it went on beyond `max`.
unsafe fn string(pid: u32, src: u64, to: *mut u8, max: usize) -> (usize, u16) {
    // SAFETY: `to` has `max` bytes.
    unsafe {
        let got = read_own(pid, src, to, max as u64) as usize;
        match core::slice::from_raw_parts(to, got).iter().position(|&b| b == 0) {
            Some(len) => (len, 0),
            None => (got, u16::from(got == max)),
        }
    }
}
