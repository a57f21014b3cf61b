//! The lopi runtime as bytes, ready to be copied into an executable segment.
//!
//! The blob is position independent and holds no writable data. Entry point:
//! `lopi_rt_init(descriptor, argc, argv, envp)` at [`INIT_OFFSET`], System V calling
//! convention; see `runtime/lopi-rt` for what it does.
#![forbid(unsafe_code)]

include!(concat!(env!("OUT_DIR"), "/blob.rs"));

/// The runtime's code and read-only data, loaded at any 16-byte-aligned address.
pub static BLOB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lopi_rt.bin"));
