//! A C handler (`--handler FILE.c`, LOPI's callbacks) in a probe image: its code after the
//! runtime blob in RX, its data at the end of RW, at the distance the handler was linked for
//! (so its RIP-relative references hold wherever the image goes), and a `ScriptImage` whose
//! probes are its callbacks: one probe model with the scripts.
use lopi_script::ir::{LockEvent, Point, Probe, Program, Spelling};

/// The callbacks a handler may define, in probe order, and where each runs.
pub const CALLBACKS: [&str; 10] = [
    "lopi_enter",
    "lopi_leave",
    "lopi_syscall_enter",
    "lopi_syscall_leave",
    "lopi_lock_acquire",
    "lopi_lock_acquired",
    "lopi_lock_release",
    "lopi_lock_contended",
    "lopi_thread_start",
    "lopi_thread_exit",
];

/// A handler linked for an image (by `lopi-cli`'s `handler` module, with the system's
/// compiler and linker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handler {
    /// Code and read-only data, to lie [`text_offset`]`(data_len)` bytes after the data.
    pub text: Vec<u8>,
    /// Initialised data; the rest of `data_len` is zeros (`.bss`).
    pub data: Vec<u8>,
    /// Bytes of data in the image, a multiple of 4096 (0: none).
    pub data_len: u64,
    /// Offset in `text` of each of [`CALLBACKS`] the handler defines.
    pub callbacks: [Option<u64>; 10],
    /// Offset in `text` of `lopi_init`, run once when the image's runtime starts.
    pub init: Option<u64>,
    /// (slot, target), offsets from the data's start: each slot holds target's address.
    pub relocs: Vec<(u64, u64)>,
    /// Identity of the handler (its source and flags), for the image cache and the areas.
    pub id: u64,
}

/// Where a handler's text lies from the start of its data: the data ends the image's RW
/// part, which the runtime blob's RX part follows, and the text follows the blob.
pub fn text_offset(data_len: u64) -> u64 {
    data_len + lopi_rt_blob::BLOB.len().next_multiple_of(16) as u64
}

impl Handler {
    /// The program whose probes are the handler's callbacks: every timed function's entry
    /// and return, every probed system call's entry and return, every lock and thread event.
    pub fn program(&self) -> Program {
        let points = [
            Point::FuncEntry { lib: None, glob: "*".into() },
            Point::FuncReturn { lib: None, glob: "*".into() },
            Point::SyscallEntry { glob: "*".into(), spelling: Spelling::Lopi },
            Point::SyscallReturn { glob: "*".into(), spelling: Spelling::Lopi },
            Point::Lock(LockEvent::Acquire),
            Point::Lock(LockEvent::Acquired),
            Point::Lock(LockEvent::Release),
            Point::Lock(LockEvent::Contended),
            Point::ThreadStart,
            Point::ThreadExit,
        ];
        let probes = points
            .into_iter()
            .zip(self.callbacks)
            .filter(|(_, at)| at.is_some())
            .map(|(point, _)| Probe { points: vec![point], locals: Vec::new(), predicate: None, body: Vec::new() })
            .collect();
        Program { maps: Vec::new(), probes, strings: Vec::new(), formats: Vec::new(), str_size: 64 }
    }

    /// Offsets in `text` of the program's probes, in its order.
    pub fn probe_offsets(&self) -> Vec<u64> {
        self.callbacks.iter().flatten().copied().collect()
    }
}
