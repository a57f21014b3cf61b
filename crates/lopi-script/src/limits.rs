//! The bounds every script is checked against. A probe runs inside the traced program, so what
//! it may use is fixed before it runs (SystemTap's rule): bounded maps, strings and work.

/// Maps in a script.
pub const MAX_MAPS: usize = 64;
/// Probes (`points { body }` blocks) in a script.
pub const MAX_PROBES: usize = 64;
/// Locals in one probe body.
pub const MAX_LOCALS: usize = 32;
/// Elements of a map's key tuple.
pub const MAX_KEYS: usize = 8;
/// Bytes of a string literal, after escapes.
pub const MAX_STR_LITERAL: usize = 256;
/// Nesting of expressions, and of `if`s. The parser enforces it itself, so no input can make it
/// (or the checker after it) recurse deeper.
pub const MAX_DEPTH: usize = 64;
/// Buckets of one `lhist`.
pub const MAX_LHIST_BUCKETS: i128 = 1000;
/// Frames of one `ustack(n)`; also the depth of `ustack()`.
pub const MAX_USTACK: u8 = 127;
/// Shortest `interval:` period.
pub const MIN_INTERVAL_NS: u64 = 1_000_000;
/// Entries of a map unless the caller sets another bound ([`crate::ir::Program::set_max_entries`]).
pub const DEFAULT_MAX_ENTRIES: u32 = 4096;
/// Bytes of a string value (`comm`, `str(p)`, map values and keys).
pub const DEFAULT_STR_SIZE: usize = 64;
/// Most times one `unroll (N)` writes its block out (bpftrace's limit).
pub const MAX_UNROLL: usize = 100;
/// Most copies of a block nested `unroll`s write out together.
pub const MAX_UNROLLED: usize = 1000;
