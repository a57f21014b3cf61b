//! The helpers a probe script's compiled code calls (`lopi_rt_abi::script::Helpers`), through
//! the jump table `lopi_script_helpers` whose entries the image builder hands the code
//! generator: builtins, maps, reads of the program's memory, stacks and output records.
use super::image::{function, string, table_of};
use crate::abi::script::{self, record, RecordHead, ScriptArea, ScriptCtx, ScriptImage, TableShape};
use crate::abi::script_map;
use crate::base::mem::read_own;
use crate::base::sys;
use crate::base::tcb::thread_word;
use crate::base::tsc::rdtsc;
use crate::timing::thread::chunk::Thread;
use core::arch::global_asm;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{fence, Ordering};

// One `jmp` per helper, 8 bytes apart, in `script::Helpers` order.
global_asm!(
    ".globl lopi_script_helpers",
    ".p2align 3",
    "lopi_script_helpers:",
    "jmp {builtin}", ".p2align 3",
    "jmp {builtin_str}", ".p2align 3",
    "jmp {map_slot}", ".p2align 3",
    "jmp {map_lookup}", ".p2align 3",
    "jmp {map_delete}", ".p2align 3",
    "jmp {map_clear}", ".p2align 3",
    "jmp {read_str}", ".p2align 3",
    "jmp {ustack}", ".p2align 3",
    "jmp {printf}", ".p2align 3",
    "jmp {print_map}", ".p2align 3",
    "jmp {print_value}", ".p2align 3",
    "jmp {pystack}", ".p2align 3",
    "jmp {join}", ".p2align 3",
    builtin = sym builtin,
    builtin_str = sym builtin_str,
    map_slot = sym map_slot,
    map_lookup = sym map_lookup,
    map_delete = sym map_delete,
    map_clear = sym map_clear,
    read_str = sym read_str,
    ustack = sym ustack,
    printf = sym printf,
    print_map = sym print_map,
    print_value = sym print_value,
    pystack = sym super::python::pystack,
    join = sym join,
);

/// What the helpers find through `ScriptCtx::runtime`. In C order, the fields callers often
/// pass as constants (no call, no system call, no counter) each between two that vary: the
/// compiler would store adjacent constants with a vector register.
#[repr(C)]
pub(super) struct Env {
    pub(super) s: *const ScriptImage,
    /// Stack pointer at the call's entry (its return address; 0: none).
    pub(super) call_rsp: u64,
    pub(super) area: *mut ScriptArea,
    /// A system call's number plus 1 (0: a function's probe).
    pub(super) syscall: u64,
    pub(super) h: *const crate::abi::ThreadHeader,
    /// Counter index of the probed function.
    pub(super) index: u64,
    pub(super) thread: usize,
    /// Frames below the call.
    pub(super) below: u32,
    /// Whether the system call returned.
    pub(super) returned: bool,
    /// A `profile:` sample's interrupted instruction and frame pointer ((0, 0): no sample).
    pub(super) sample: (u64, u64),
}

/// The context's environment.
pub(super) unsafe fn env<'a>(ctx: *mut ScriptCtx) -> &'a Env {
    // SAFETY: `run` set `runtime` to an Env that outlives the probe function.
    unsafe { &*((*ctx).runtime as *const Env) }
}

/// The table of map `map`, if the script has it; cleared first if the host asked for that
/// since this thread last used it.
unsafe fn table<'a>(ctx: *mut ScriptCtx, map: u64) -> Option<&'a mut [u8]> {
    // SAFETY: as `env`; the shapes table has `map_count` entries, at most `MAX_MAPS`, and the
    // area has a clear request and a done word for each.
    unsafe {
        let e = env(ctx);
        if map >= u64::from((*e.s).map_count) || map >= script::MAX_MAPS as u64 {
            return None;
        }
        let shape = *((e.s as u64).wrapping_add((*e.s).tables as u64) as *const TableShape).add(map as usize);
        let table = table_of(e.area, shape);
        if !cleared_as_asked(e.area, map) {
            script_map::clear(table);
            write_volatile(scalar_slot(e.area, map), 0);
            write_volatile(clears_done(e.area, map), read_volatile(clear_request(e.area, map)));
        }
        Some(table)
    }
}

fn clear_request(area: *mut ScriptArea, map: u64) -> *mut u32 {
    (area as usize + script::CLEAR_REQUESTS + 4 * map as usize) as *mut u32
}

fn clears_done(area: *mut ScriptArea, map: u64) -> *mut u32 {
    (area as usize + script::CLEARS_DONE + 4 * map as usize) as *mut u32
}

fn scalar_slot(area: *mut ScriptArea, map: u64) -> *mut u64 {
    (area as usize + script::SCALAR_SLOTS + 8 * map as usize) as *mut u64
}

/// Whether the thread has made every clear of map `map` the host asked for.
unsafe fn cleared_as_asked(area: *mut ScriptArea, map: u64) -> bool {
    // SAFETY: both words are in the area's header part (map < MAX_MAPS).
    unsafe { read_volatile(clear_request(area, map)) == read_volatile(clears_done(area, map)) }
}

extern "sysv64" fn builtin(ctx: *mut ScriptCtx, which: u64) -> u64 {
    // SAFETY: see `env`; the thread header is this thread's.
    unsafe {
        let e = env(ctx);
        let v = crate::base::vars::vars();
        match which {
            0 => u64::from((*e.h).pid),
            1 => u64::from((*e.h).tid),
            2 => match (*v).rseq_offset {
                0 => {
                    let mut cpu = 0u32;
                    sys::call3(sys::GETCPU, &mut cpu as *mut u32 as usize, 0, 0);
                    u64::from(cpu)
                }
                // `struct rseq`'s `cpu_id` follows `cpu_id_start`.
                offset => u64::from(thread_word((offset + 4) as u32)),
            },
            3 => now_ns(v),
            4 => match (*e.s).start_ns {
                0 => now_ns(v).wrapping_sub((*v).clock_ns),
                start => now_ns(v).saturating_sub(start),
            },
            5 => sys::call3(sys::GETUID, 0, 0, 0) as u64,
            6 => sys::call3(sys::GETGID, 0, 0, 0) as u64,
            7 => u64::from((*v).space_pid),
            _ => 0,
        }
    }
}

/// CLOCK_MONOTONIC now, in ns, from the TSC and the clock pair the module read at its start.
unsafe fn now_ns(v: *const crate::abi::RuntimeVars) -> u64 {
    // SAFETY: `v` is the module's variables.
    unsafe {
        let ticks = rdtsc().wrapping_sub((*v).clock_tsc);
        (*v).clock_ns.wrapping_add(((u128::from(ticks) * u128::from((*v).ns_per_tick_q32)) >> 32) as u64)
    }
}

extern "sysv64" fn builtin_str(ctx: *mut ScriptCtx, which: u64, dst: *mut u8, cap: u64) -> u64 {
    // SAFETY: see `env`; `dst` has `cap` bytes (the generated code's buffer).
    unsafe {
        let e = env(ctx);
        let (src, len) = match which {
            0 => {
                let comm = &(*e.h).comm;
                (comm.as_ptr(), comm.iter().position(|&b| b == 0).unwrap_or(comm.len()))
            }
            1 => match function(e.s, (*ctx).func) {
                Some(f) => string(e.s, f.name, f.name_len),
                None => (dst as *const u8, 0),
            },
            2 if (*ctx).probe < u64::from((*e.s).point_count) => {
                let point = *((e.s as u64).wrapping_add((*e.s).points as u64) as *const [u32; 2]).add((*ctx).probe as usize);
                string(e.s, point[0], point[1])
            }
            _ => (dst as *const u8, 0),
        };
        let n = len.min(cap as usize);
        crate::base::mem::copy(dst as usize, src as usize, n);
        n as u64
    }
}

extern "sysv64" fn map_slot(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *mut u8 {
    // SAFETY: `key` has `key_len` bytes (the generated code's buffer).
    unsafe {
        let Some(table) = table(ctx, map) else { return core::ptr::null_mut() };
        let key = core::slice::from_raw_parts(key, key_len as usize);
        let copy = |dst: &mut [u8], src: &[u8]| crate::base::mem::copy(dst.as_mut_ptr() as usize, src.as_ptr() as usize, dst.len().min(src.len()));
        let zero = |dst: &mut [u8]| fill_zero(dst.as_mut_ptr(), dst.len());
        let slot = script_map::slot_with(table, key, copy, zero).map_or(core::ptr::null_mut(), |s| s.as_mut_ptr());
        if key_len == 0 && !slot.is_null() {
            // Cached for the generated code; undone if a clear request came in meanwhile (the
            // host asks, then zeroes the cache).
            let area = env(ctx).area;
            write_volatile(scalar_slot(area, map), slot as u64);
            fence(Ordering::SeqCst);
            if !cleared_as_asked(area, map) {
                write_volatile(scalar_slot(area, map), 0);
            }
        }
        slot
    }
}

extern "sysv64" fn map_lookup(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *const u8 {
    // SAFETY: as `map_slot`.
    unsafe {
        let Some(table) = table(ctx, map) else { return core::ptr::null() };
        let key = core::slice::from_raw_parts(key, key_len as usize);
        script_map::lookup(table, key).map_or(core::ptr::null(), |s| s.as_ptr())
    }
}

extern "sysv64" fn map_delete(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) {
    // SAFETY: as `map_slot`.
    unsafe {
        if let Some(table) = table(ctx, map) {
            script_map::delete(table, core::slice::from_raw_parts(key, key_len as usize));
        }
    }
}

extern "sysv64" fn map_clear(ctx: *mut ScriptCtx, map: u64) {
    // SAFETY: as `map_slot`.
    unsafe {
        if let Some(table) = table(ctx, map) {
            script_map::clear(table);
        }
    }
}

/// Copies the traced program's bytes with `process_vm_readv` on itself, which fails instead
/// of faulting on a bad address.
extern "sysv64" fn read_str(ctx: *mut ScriptCtx, dst: *mut u8, src: u64, max: u64) -> u64 {
    // SAFETY: `dst` has `max` bytes.
    unsafe {
        let Some(len) = read_c_string(env(ctx), src, dst, max) else {
            (*ctx).faults += 1;
            return 0;
        };
        fill_zero(dst.add(len), max as usize - len);
        len as u64
    }
}

/// Reads the program's string at `src` into `dst`, at most `max` bytes of it: its length up to
/// its NUL (or `max`), `None` when nothing could be read.
unsafe fn read_c_string(e: &Env, src: u64, dst: *mut u8, max: u64) -> Option<usize> {
    // SAFETY: `dst` has `max` bytes.
    unsafe {
        let got = (read_pages(e, src, dst, max) as usize).min(max as usize);
        (got > 0).then(|| core::slice::from_raw_parts(dst, got).iter().position(|&b| b == 0).unwrap_or(got))
    }
}

/// `join(array, sep)`: a record of the strings the program's array of pointers at `array`
/// points at, up to the first NULL (or empty string) and at most `JOIN_ARGS` of them, each cut
/// to `JOIN_ARG_SIZE` bytes with its NUL, read straight into the output ring. An unreadable
/// array gives an empty line and counts a fault.
extern "sysv64" fn join(ctx: *mut ScriptCtx, array: u64, sep: u64) {
    // SAFETY: see `env`; `emit_with` hands `fill` room for `JOIN_ARGS * JOIN_ARG_SIZE` bytes.
    unsafe {
        let e = env(ctx);
        let mut pointers = core::mem::MaybeUninit::<[u64; script::JOIN_ARGS]>::uninit();
        let words = pointers.as_mut_ptr() as *mut u64;
        let count = read_pages(e, array, words as *mut u8, 8 * script::JOIN_ARGS as u64) as usize / 8;
        if count == 0 {
            (*ctx).faults += 1;
        }
        let room = (script::JOIN_ARGS * script::JOIN_ARG_SIZE) as u64;
        emit_with(e.area, e.s, record::JOIN, sep as u32, room, |to| {
            let mut at = 0;
            for i in 0..count {
                let dst = to.add(at);
                match read_c_string(e, read_volatile(words.add(i)), dst, script::JOIN_ARG_SIZE as u64 - 1) {
                    Some(len) if len > 0 => {
                        *dst.add(len) = 0;
                        at += len + 1;
                    }
                    _ => break,
                }
            }
            at as u64
        });
    }
}

/// The probed function's address, the return address of its call, then those of the calls
/// below it on the shadow stack (probed functions only), innermost first; at a `profile:`
/// sample, the interrupted instruction, then the return addresses the frame-pointer chain
/// gives (as bpftrace's `ustack`: code built without frame pointers gives a short stack).
extern "sysv64" fn ustack(ctx: *mut ScriptCtx, dst: *mut u64, depth: u64) -> u64 {
    // SAFETY: `dst` has room for `depth` frames (at most `STACK_FRAMES`); frames below
    // `below` are this thread's open calls, whose stack pointers hold return addresses.
    unsafe {
        let e = env(ctx);
        let depth = depth.min(script::STACK_FRAMES as u64) as usize;
        if e.sample.0 != 0 {
            return frame_chain(e, dst, depth) as u64;
        }
        let t = Thread { h: e.h as *mut _, base: e.thread };
        // A system-call site has no function of its own and its frame's key is no return address.
        let own = function(e.s, e.index).filter(|f| f.name_len != 0).map(|f| (e.s as u64).wrapping_add(f.addr as u64));
        let returns_to = (e.call_rsp != 0).then(|| *(e.call_rsp as *const u64));
        let callers = (0..e.below).rev().map(|i| *((*t.frame(i)).rsp as *const u64));
        let mut n = 0;
        for addr in own.into_iter().chain(returns_to).chain(callers).take(depth) {
            *dst.add(n) = addr;
            n += 1;
        }
        n as u64
    }
}

/// Copies `len` bytes of the program's memory at `src` to `dst` with `process_vm_readv`:
/// how many were read (fewer where memory is not readable).
pub(super) unsafe fn read_program(e: &Env, src: u64, dst: *mut u8, len: u64) -> u64 {
    // SAFETY: `dst` has `len` bytes; the iovecs are on this stack.
    unsafe {
        let local = [dst as u64, len];
        let remote = [src, len];
        let got = sys::call6(sys::PROCESS_VM_READV, (*e.h).pid as usize, local.as_ptr() as usize, 1, remote.as_ptr() as usize, 1, 0);
        got.max(0) as u64
    }
}

/// [`read_own`] in the traced program.
unsafe fn read_pages(e: &Env, src: u64, dst: *mut u8, len: u64) -> u64 {
    // SAFETY: `dst` has `len` bytes.
    unsafe { read_own((*e.h).pid, src, dst, len) }
}

/// A sample's stack: its instruction, then each frame's return address while the frame
/// pointers chain upwards through readable memory (read with `process_vm_readv`, which fails
/// where a load would fault).
unsafe fn frame_chain(e: &Env, dst: *mut u64, depth: usize) -> usize {
    // SAFETY: `dst` has room for `depth` frames.
    unsafe {
        let (pc, mut fp) = e.sample;
        if depth == 0 {
            return 0;
        }
        *dst = pc;
        let mut n = 1;
        while n < depth && fp != 0 && fp % 8 == 0 {
            let mut frame = core::mem::MaybeUninit::<[u64; 2]>::uninit();
            if read_program(e, fp, frame.as_mut_ptr() as *mut u8, 16) != 16 {
                break;
            }
            let words = frame.as_ptr() as *const u64;
            let (next, ret) = (read_volatile(words), read_volatile(words.add(1)));
            if ret == 0 {
                break;
            }
            *dst.add(n) = ret;
            n += 1;
            // Frames go up the stack, not far apart.
            if next <= fp || next - fp > 1 << 24 {
                break;
            }
            fp = next;
        }
        n
    }
}

extern "sysv64" fn printf(ctx: *mut ScriptCtx, format: u64, args: *const u64) {
    // SAFETY: `args` has a word per conversion of the format, the format table an entry per
    // format; a string argument's word is the address of `str_size` bytes.
    unsafe {
        let e = env(ctx);
        let s = e.s;
        if format >= u64::from((*s).format_count) {
            return;
        }
        let f = *((s as u64).wrapping_add((*s).formats as u64) as *const script::FormatArgs).add(format as usize);
        let str_size = (*s).str_size as usize;
        let count = (f.count as usize).min(script::MAX_PRINTF_ARGS);
        let part = |i: usize| {
            let word = args.add(i);
            if f.strings >> i & 1 != 0 { (*word as *const u8, str_size) } else { (word as *const u8, 8) }
        };
        emit(e.area, s, record::PRINTF, format as u32, count, part);
    }
}

extern "sysv64" fn print_map(ctx: *mut ScriptCtx, map: u64, top: u64, div: u64) {
    // SAFETY: see `env`; the parts are this frame's arguments.
    unsafe {
        let e = env(ctx);
        emit(e.area, e.s, record::PRINT_MAP, map as u32, 2, |i| (if i == 0 { &top } else { &div } as *const u64 as *const u8, 8));
    }
}

extern "sysv64" fn print_value(ctx: *mut ScriptCtx, ty: u64, value: *const u8) {
    // SAFETY: `value` has the type's bytes.
    unsafe {
        let e = env(ctx);
        let len = match ty {
            1 => (*e.s).str_size as usize,
            2 => core::mem::size_of::<script::StackValue>(),
            _ => 8,
        };
        emit(e.area, e.s, record::PRINT_VALUE, ty as u32, 1, |_| (value, len));
    }
}

/// Zeroes `len` bytes. Not `memset`, for the reason `thread::copy` is not `memcpy`.
unsafe fn fill_zero(dst: *mut u8, len: usize) {
    // SAFETY: the caller's range is mapped.
    unsafe { core::arch::asm!("rep stosb", inout("rcx") len => _, inout("rdi") dst => _, in("al") 0u8, options(nostack, preserves_flags)) };
}

/// A part of no bytes.
pub(super) fn value_none() -> *const u8 {
    core::ptr::null()
}

/// Appends a record of `count` parts, `part(i)` giving each one's bytes (padded to 8 in the
/// record), to the area's ring, or counts a drop.
pub(super) unsafe fn emit(area: *mut ScriptArea, s: *const ScriptImage, kind: u16, what: u32, count: usize, part: impl Fn(usize) -> (*const u8, usize)) {
    // SAFETY: `fill` gets room for every part, each padded to 8.
    unsafe {
        let payload: u64 = (0..count).map(|i| (part(i).1 as u64 + 7) & !7).sum();
        emit_with(area, s, kind, what, payload, |to| {
            let mut at = 0;
            for i in 0..count {
                let (from, len) = part(i);
                crate::base::mem::copy(to as usize + at, from as usize, len);
                at += (len + 7) & !7;
            }
            at as u64
        });
    }
}

/// Appends a record whose payload `fill` writes where it is given (at most `room` bytes, padded
/// to 8 in the record) and returns the length of, or counts a drop when the ring has no `room`
/// left.
pub(super) unsafe fn emit_with(area: *mut ScriptArea, s: *const ScriptImage, kind: u16, what: u32, room: u64, fill: impl FnOnce(*mut u8) -> u64) {
    // SAFETY: the ring lies inside the area; only this thread writes it.
    unsafe {
        let ring = (area as *mut u8).add((*s).ring_offset as usize);
        let ring_len = (*s).ring_len;
        let most = script::RECORD_HEAD_LEN as u64 + ((room + 7) & !7);
        let head = (*area).ring_head;
        let tail = read_volatile(&(*area).ring_tail);
        let to_end = ring_len - head % ring_len;
        let pad = if most > to_end { to_end } else { 0 };
        if most > ring_len || head.wrapping_add(pad + most).wrapping_sub(tail) > ring_len {
            (*area).ring_drops += 1;
            return;
        }
        if pad != 0 {
            write_volatile(ring.add((head % ring_len) as usize) as *mut [u32; 2], [pad as u32, u32::from(record::PAD)]);
        }
        let at = ring.add(((head + pad) % ring_len) as usize);
        let payload = at.add(script::RECORD_HEAD_LEN);
        let wrote = fill(payload).min(room);
        let used = (wrote + 7) & !7;
        // The padding reads as NULs, not as what the ring held there before.
        fill_zero(payload.add(wrote as usize), (used - wrote) as usize);
        let need = script::RECORD_HEAD_LEN as u64 + used;
        let record = at as *mut RecordHead;
        write_volatile(&mut (*record).len, need as u32);
        write_volatile(&mut (*record).kind, kind);
        write_volatile(&mut (*record).what, what);
        write_volatile(&mut (*record).tsc, rdtsc());
        fence(Ordering::Release);
        write_volatile(&mut (*area).ring_head, head + pad + need);
    }
}
