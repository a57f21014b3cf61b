//! `pystack`: the Python frames of the running thread, innermost first, each its code object's
//! address tagged [`PY_FRAME`] and with a hash of its names; the code object's names go into
//! the thread's table once, for the host to print. Every read of the interpreter's memory goes
//! through `process_vm_readv`: a sample can land while CPython links or frees a frame, and a
//! bad pointer then reads nothing instead of faulting.
use super::helpers::{env, read_program, Env};
use crate::abi::python::{cpython311 as py, py_code_tag, PyCodeName, PYSTACK_GIL_HELD, PY_CODES, PY_CODE_BITS, PY_FILE_LEN, PY_FRAME, PY_NAME_LEN};
use crate::abi::script::{ScriptCtx, STACK_FRAMES};
use crate::base::sys;
use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

/// Threads of the interpreter looked at before giving up on finding the running one.
const MAX_THREADS: usize = 256;
/// Code objects read by one system call.
const BATCH: usize = 16;
/// The bytes of a code object read: `co_firstlineno` to `co_qualname`.
const CODE_SPAN: u64 = py::CODE_QUALNAME + 8 - py::CODE_FIRSTLINENO;

pub(super) extern "sysv64" fn pystack(ctx: *mut ScriptCtx, dst: *mut u64, depth: u64) -> u64 {
    // SAFETY: `dst` has room for `depth` frames (at most `STACK_FRAMES`); the environment is
    // the probe's.
    unsafe {
        let e = env(ctx);
        let runtime = read_volatile(&(*crate::base::vars::vars()).py_runtime);
        if runtime == 0 {
            return 0;
        }
        let gil_held = depth & PYSTACK_GIL_HELD != 0;
        let depth = (depth & (PYSTACK_GIL_HELD - 1)).min(STACK_FRAMES as u64) as usize;
        if gil_held {
            return held_frames(e, runtime, dst, depth) as u64;
        }
        let Some(tstate) = own_thread_state(e, runtime) else { return 0 };
        let Some(cframe) = word(e, tstate + py::TSTATE_CFRAME) else { return 0 };
        // The code objects first, then their names a batch at a time.
        let mut frame = word(e, cframe + py::CFRAME_CURRENT_FRAME).unwrap_or(0);
        let mut n = 0;
        while n < depth && frame != 0 {
            // f_code and previous, 16 bytes apart.
            let mut words = core::mem::MaybeUninit::<[u64; 3]>::uninit();
            if read_program(e, frame + py::FRAME_CODE, words.as_mut_ptr() as *mut u8, 24) != 24 {
                break;
            }
            let w = words.as_ptr() as *const u64;
            let (code, previous) = (read_volatile(w), read_volatile(w.add(2)));
            if code == 0 || code >> PY_CODE_BITS != 0 {
                break;
            }
            write_volatile(dst.add(n), code);
            n += 1;
            frame = previous;
        }
        let mut at = 0;
        while at < n {
            let batch = (n - at).min(BATCH);
            name_batch(e, dst.add(at), batch);
            at += batch;
        }
        n as u64
    }
}

/// The frames of the thread holding the GIL, which the caller is (a marker of CPython's own):
/// its state and frames are whole and stay so while it runs the probe, so plain loads read
/// them. Only a code object's names, on its first sight, cost system calls.
unsafe fn held_frames(e: &Env, runtime: u64, dst: *mut u64, depth: usize) -> usize {
    // SAFETY: `_PyRuntime` is the interpreter's static state; the thread state, its `_PyCFrame`
    // and the frames on its `previous` chain are the calling thread's own, initialised before
    // CPython links them; a frame holds a strong reference to its code object.
    unsafe {
        let load = |addr: u64| read_volatile(addr as *const u64);
        let tstate = load(runtime + py::RUNTIME_TSTATE_CURRENT);
        if tstate == 0 {
            return 0;
        }
        let cframe = load(tstate + py::TSTATE_CFRAME);
        let mut frame = if cframe == 0 { 0 } else { load(cframe + py::CFRAME_CURRENT_FRAME) };
        let mut n = 0;
        while n < depth && frame != 0 {
            let code = load(frame + py::FRAME_CODE);
            if code == 0 || code >> PY_CODE_BITS != 0 {
                break;
            }
            let line = read_volatile((code + py::CODE_FIRSTLINENO) as *const u32);
            let (filename, qualname) = (load(code + py::CODE_FILENAME), load(code + py::CODE_QUALNAME));
            let word = code | py_code_tag(qualname, filename, line);
            name_code(e, word, line, qualname, filename);
            write_volatile(dst.add(n), PY_FRAME | word);
            n += 1;
            frame = load(frame + py::FRAME_PREVIOUS);
        }
        n
    }
}

/// Turns `n` code object addresses at `codes` into frame words, reading their names' objects
/// and first lines with one system call, and names those the thread's table lacks. A code
/// object that cannot be read stays a bare address.
unsafe fn name_batch(e: &Env, codes: *mut u64, n: usize) {
    // SAFETY: `codes` has `n` words, at most `BATCH`; the iovecs and spans are on this stack.
    unsafe {
        let mut spans = core::mem::MaybeUninit::<[[u64; CODE_SPAN as usize / 8]; BATCH]>::uninit();
        let mut local = core::mem::MaybeUninit::<[[u64; 2]; BATCH]>::uninit();
        let mut remote = core::mem::MaybeUninit::<[[u64; 2]; BATCH]>::uninit();
        let (spans, local, remote) = (spans.as_mut_ptr() as *mut [u64; CODE_SPAN as usize / 8], local.as_mut_ptr() as *mut [u64; 2], remote.as_mut_ptr() as *mut [u64; 2]);
        for i in 0..n {
            write_volatile(local.add(i), [spans.add(i) as u64, CODE_SPAN]);
            write_volatile(remote.add(i), [read_volatile(codes.add(i)) + py::CODE_FIRSTLINENO, CODE_SPAN]);
        }
        let got = sys::call6(sys::PROCESS_VM_READV, (*e.h).pid as usize, local as usize, n, remote as usize, n, 0);
        // Whole spans only: the kernel stops at the first that fails.
        let whole = (got.max(0) as u64 / CODE_SPAN) as usize;
        for i in 0..n.min(whole) {
            let span = spans.add(i) as *const u64;
            let field = |offset: u64| read_volatile(span.add(((offset - py::CODE_FIRSTLINENO) / 8) as usize));
            let line = field(py::CODE_FIRSTLINENO) as u32;
            let (filename, qualname) = (field(py::CODE_FILENAME), field(py::CODE_QUALNAME));
            let code = read_volatile(codes.add(i)) | py_code_tag(qualname, filename, line);
            name_code(e, code, line, qualname, filename);
            write_volatile(codes.add(i), PY_FRAME | code);
        }
        for i in whole..n {
            write_volatile(codes.add(i), PY_FRAME | read_volatile(codes.add(i)));
        }
    }
}

/// The `PyThreadState` of the calling thread: the one of the main interpreter's whose
/// `thread_id` is this thread's `pthread_self()`.
unsafe fn own_thread_state(e: &Env, runtime: u64) -> Option<u64> {
    let me: u64;
    // SAFETY: glibc's `pthread_self()` is the thread descriptor's `header.self`, at fs:0x10.
    unsafe { asm!("mov {}, fs:[0x10]", out(reg) me, options(nostack, readonly, preserves_flags)) };
    // SAFETY: reads through `read_program` only.
    unsafe {
        let interp = word(e, runtime + py::RUNTIME_INTERPRETERS_HEAD)?;
        let mut tstate = word(e, interp + py::INTERP_THREADS_HEAD)?;
        for _ in 0..MAX_THREADS {
            if tstate == 0 {
                return None;
            }
            if word(e, tstate + py::TSTATE_THREAD_ID)? == me {
                return Some(tstate);
            }
            tstate = word(e, tstate + py::TSTATE_NEXT)?;
        }
        None
    }
}

/// The word at `addr` of the program, if it can be read.
unsafe fn word(e: &Env, addr: u64) -> Option<u64> {
    let mut w = 0u64;
    // SAFETY: 8 bytes into a local.
    let got = unsafe { read_program(e, addr, &mut w as *mut u64 as *mut u8, 8) };
    (got == 8).then_some(w)
}

/// Puts the names of `code` (a frame word less `PY_FRAME`) in the thread's table, unless they
/// are there or it is full.
unsafe fn name_code(e: &Env, code: u64, line: u32, qualname: u64, filename: u64) {
    // SAFETY: the table is `PY_CODES` entries at `py_codes` in the thread's area, which only
    // this thread writes.
    unsafe {
        let at = (*e.s).py_codes;
        if at == 0 {
            return;
        }
        let table = (e.area as u64 + at) as *mut PyCodeName;
        let mut slot = code.wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize % PY_CODES;
        for _ in 0..PY_CODES {
            match read_volatile(&(*table.add(slot)).code) {
                0 => break,
                c if c == code => return,
                _ => slot = (slot + 1) % PY_CODES,
            }
        }
        let entry = table.add(slot);
        if read_volatile(&(*entry).code) != 0 {
            return;
        }
        let name_len = text(e, qualname, (&raw mut (*entry).name) as *mut u8, PY_NAME_LEN);
        let file_len = text(e, filename, (&raw mut (*entry).file) as *mut u8, PY_FILE_LEN);
        write_volatile(&raw mut (*entry).line, line);
        write_volatile(&raw mut (*entry).name_len, name_len as u16);
        write_volatile(&raw mut (*entry).file_len, file_len as u16);
        // Whole before it is found.
        core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
        write_volatile(&raw mut (*entry).code, code);
    }
}

/// Copies up to `cap` bytes of the Python string `s` as UTF-8 to `dst`: a compact ASCII
/// string's text, or another compact string's UTF-8 copy if it has one. The bytes copied.
unsafe fn text(e: &Env, s: u64, dst: *mut u8, cap: usize) -> usize {
    // SAFETY: reads through `read_program`, into `dst`'s `cap` bytes.
    unsafe {
        let mut head = core::mem::MaybeUninit::<[u64; 8]>::uninit();
        if s == 0 || read_program(e, s, head.as_mut_ptr() as *mut u8, 64) != 64 {
            return 0;
        }
        let w = head.as_ptr() as *const u64;
        let at = |offset: u64| read_volatile(w.add(offset as usize / 8));
        let state = at(py::STR_STATE) as u32;
        if state & py::STR_STATE_COMPACT == 0 {
            return 0;
        }
        let (from, len) = match state & py::STR_STATE_ASCII {
            0 => (at(py::COMPACT_UTF8), at(py::COMPACT_UTF8_LENGTH)),
            _ => (s + py::ASCII_DATA, at(py::STR_LENGTH)),
        };
        if from == 0 {
            return 0;
        }
        read_program(e, from, dst, len.min(cap as u64)) as usize
    }
}
