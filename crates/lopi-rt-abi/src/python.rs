//! `pystack`: the Python frames of a sampled thread. The runtime walks CPython's own
//! structures (as py-spy does from outside) and names each code object once per thread, in a
//! [`PyCodeName`] table in the thread's script area, which the host reads to print the frames.
//!
//! The offsets are CPython 3.11's on x86-64 (`Include/cpython/pystate.h`,
//! `Include/internal/pycore_frame.h`, `Include/cpython/code.h`), checked against Debian's
//! python3.11 with ctypes; the host refuses `pystack` for a program whose `Py_Version` is not
//! 3.11.
use core::mem::{offset_of, size_of};

/// A stack frame word with this bit set is a Python frame: its low [`PY_CODE_BITS`] are its code
/// object's address (a user-space address never has bit 63), the bits between a hash of the
/// code object's names ([`py_code_tag`]), so that a code object made where a freed one was is
/// another frame.
pub const PY_FRAME: u64 = 1 << 63;
pub const PY_CODE_BITS: u32 = 47;

/// The bits of a Python frame word above the code object's address: a hash of the addresses of
/// its name and file name objects and its first line.
pub fn py_code_tag(qualname: u64, filename: u64, line: u32) -> u64 {
    let h = (qualname ^ filename.rotate_left(21) ^ u64::from(line).rotate_left(42)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - (63 - PY_CODE_BITS))) << PY_CODE_BITS
}

/// `Py_Version`'s major and minor bytes (`PY_VERSION_HEX >> 16`) `pystack` reads.
pub const PY_VERSION_MAJOR_MINOR: u64 = 0x030b;

/// Set in `pystack`'s depth argument at CPython's own markers (provider `python`), which fire in
/// the interpreter with the GIL held: the running thread's state is then `_PyRuntime`'s
/// current one and its frames whole, so they are read with plain loads, without a system call.
pub const PYSTACK_GIL_HELD: u64 = 1 << 16;

/// Code objects a thread's table names; a frame of one more prints as its address.
pub const PY_CODES: usize = 1024;
/// Bytes of a name, and of a file name, kept (longer ones are cut).
pub const PY_NAME_LEN: usize = 64;
pub const PY_FILE_LEN: usize = 176;

/// One code object's names. `code` (its frame word less [`PY_FRAME`]) is written last (0: a
/// free entry): an entry whose `code` is set is whole.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyCodeName {
    pub code: u64,
    /// `co_firstlineno`.
    pub line: u32,
    pub name_len: u16,
    pub file_len: u16,
    /// `co_qualname`, UTF-8.
    pub name: [u8; PY_NAME_LEN],
    /// `co_filename`, UTF-8.
    pub file: [u8; PY_FILE_LEN],
}

pub const PY_CODE_NAME_LEN: usize = 256;
const _: () = {
    assert!(size_of::<PyCodeName>() == PY_CODE_NAME_LEN);
    assert!(offset_of!(PyCodeName, name) == 16 && offset_of!(PyCodeName, file) == 16 + PY_NAME_LEN);
};

/// CPython 3.11's structures, as byte offsets.
pub mod cpython311 {
    /// `_PyRuntime.interpreters.head`.
    pub const RUNTIME_INTERPRETERS_HEAD: u64 = 40;
    /// `_PyRuntime.gilstate.tstate_current`: the state of the thread holding the GIL.
    pub const RUNTIME_TSTATE_CURRENT: u64 = 576;
    /// `PyInterpreterState.threads.head`.
    pub const INTERP_THREADS_HEAD: u64 = 16;
    /// `PyThreadState.next`, `.cframe` and `.thread_id` (its `pthread_self()`).
    pub const TSTATE_NEXT: u64 = 8;
    pub const TSTATE_CFRAME: u64 = 56;
    pub const TSTATE_THREAD_ID: u64 = 152;
    /// `_PyCFrame.current_frame`.
    pub const CFRAME_CURRENT_FRAME: u64 = 8;
    /// `_PyInterpreterFrame.f_code` and `.previous`.
    pub const FRAME_CODE: u64 = 32;
    pub const FRAME_PREVIOUS: u64 = 48;
    /// `PyCodeObject.co_firstlineno`, `.co_filename` and `.co_qualname`.
    pub const CODE_FIRSTLINENO: u64 = 72;
    pub const CODE_FILENAME: u64 = 112;
    pub const CODE_QUALNAME: u64 = 128;
    /// `PyASCIIObject.length` and `.state`; a compact ASCII string's text follows the object
    /// (at [`ASCII_DATA`]), another compact one's UTF-8 copy is at [`COMPACT_UTF8`] (a pointer,
    /// 0 until made) with its length at [`COMPACT_UTF8_LENGTH`].
    pub const STR_LENGTH: u64 = 16;
    pub const STR_STATE: u64 = 32;
    pub const STR_STATE_COMPACT: u32 = 1 << 5;
    pub const STR_STATE_ASCII: u32 = 1 << 6;
    pub const ASCII_DATA: u64 = 48;
    pub const COMPACT_UTF8_LENGTH: u64 = 48;
    pub const COMPACT_UTF8: u64 = 56;
}
