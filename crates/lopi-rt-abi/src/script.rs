//! What a probe script's generated code shares with the runtime that calls it (and with the
//! host that prints what it kept): the context a probe function receives, the helpers it
//! calls, and the bytes of map keys and value slots. The code generator is lopi-script's
//! `codegen`; the sizes of keys and slots per map are worked out there from the script's types.
//!
//! A probe function is `extern "sysv64" fn(ctx: *mut ScriptCtx)`. Every helper takes the same
//! `ctx` first, so the runtime finds its per-thread state in [`ScriptCtx::runtime`].
//!
//! Values:
//! - an `int` is an `i64`;
//! - a `str` is exactly `str_size` bytes: its text ends at the first NUL or at `str_size`, and
//!   every byte after that NUL is 0, so two strings are equal exactly when their bytes are;
//! - a `stack` is a [`StackValue`]: a frame count, then [`STACK_FRAMES`] frames, the unused
//!   ones 0, whatever depth `ustack(n)` asked for (one layout, so that a stack is copied into
//!   a key as it is).
use core::mem::{offset_of, size_of};

/// The context of one probe run, filled by the runtime before it calls the probe function.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptCtx {
    /// `arg0`..`arg5`: the six integer argument registers at the probe.
    pub args: [u64; 6],
    /// `retval` (return probes).
    pub retval: u64,
    /// `elapsed`: nanoseconds since the matching entry (return probes).
    pub elapsed_ns: u64,
    /// The probed function's id; the runtime maps it to a name for `func`.
    pub func: u64,
    /// Which point fired: an index into the program's points, probe by probe in the
    /// program's order.
    pub probe: u64,
    /// Opaque to the generated code; the helpers' state (the thread's map area).
    pub runtime: u64,
    /// Runtime faults of the script (division by zero here, bad reads in the helpers):
    /// counted and reported, never fatal.
    pub faults: u64,
    /// Set to 1 by `exit()`.
    pub exit: u64,
}

const _: () = {
    assert!(size_of::<ScriptCtx>() == 104);
    assert!(offset_of!(ScriptCtx, args) == 0);
    assert!(offset_of!(ScriptCtx, retval) == 48);
    assert!(offset_of!(ScriptCtx, elapsed_ns) == 56);
    assert!(offset_of!(ScriptCtx, func) == 64);
    assert!(offset_of!(ScriptCtx, probe) == 72);
    assert!(offset_of!(ScriptCtx, runtime) == 80);
    assert!(offset_of!(ScriptCtx, faults) == 88);
    assert!(offset_of!(ScriptCtx, exit) == 96);
};

/// Addresses of the runtime's helpers, each an `extern "sysv64"` function of the type named
/// in its field. The generated code reaches them by `call rel32`, so each must be within
/// ±2 GiB of the code.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Helpers {
    /// [`BuiltinFn`]: `pid`, `tid`, `cpu`, `nsecs` by [`IntBuiltin`] number.
    pub builtin: u64,
    /// [`BuiltinStrFn`]: `comm`, `func`, `probe` by [`StrBuiltin`] number.
    pub builtin_str: u64,
    /// [`MapSlotFn`]: the value slot of a key, created zeroed if absent; null if the map is full
    /// (the runtime counts the drop, the generated code skips the update).
    pub map_slot: u64,
    /// [`MapLookupFn`]: the value slot of a key, or null if absent. Never creates one.
    pub map_lookup: u64,
    /// [`MapDeleteFn`].
    pub map_delete: u64,
    /// [`MapClearFn`].
    pub map_clear: u64,
    /// [`ReadStrFn`]: copies the traced program's bytes up to a NUL or `max`; a bad pointer
    /// copies nothing and counts a fault.
    pub read_str: u64,
    /// [`UstackFn`]: writes up to `depth` return addresses, innermost first.
    pub ustack: u64,
    /// [`PrintfFn`].
    pub printf: u64,
    /// [`PrintMapFn`].
    pub print_map: u64,
    /// [`PrintValueFn`].
    pub print_value: u64,
}

/// `builtin(ctx, which) -> value`.
pub type BuiltinFn = extern "sysv64" fn(ctx: *mut ScriptCtx, which: u64) -> u64;
/// `builtin_str(ctx, which, dst, cap) -> length`: writes at most `cap` bytes of the text to
/// `dst` and leaves the rest of it alone (the generated code has zeroed it).
pub type BuiltinStrFn = extern "sysv64" fn(ctx: *mut ScriptCtx, which: u64, dst: *mut u8, cap: u64) -> u64;
/// `map_slot(ctx, map, key, key_len) -> slot`, `map` being a map id's index.
pub type MapSlotFn = extern "sysv64" fn(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *mut u8;
/// `map_lookup(ctx, map, key, key_len) -> slot or null`.
pub type MapLookupFn = extern "sysv64" fn(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *const u8;
/// `map_delete(ctx, map, key, key_len)`.
pub type MapDeleteFn = extern "sysv64" fn(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64);
/// `map_clear(ctx, map)`.
pub type MapClearFn = extern "sysv64" fn(ctx: *mut ScriptCtx, map: u64);
/// `read_str(ctx, dst, src, max) -> bytes copied`; `max` is at most `str_size`.
pub type ReadStrFn = extern "sysv64" fn(ctx: *mut ScriptCtx, dst: *mut u8, src: u64, max: u64) -> u64;
/// `ustack(ctx, dst, depth) -> frames written`; more than `depth` is taken as `depth`.
pub type UstackFn = extern "sysv64" fn(ctx: *mut ScriptCtx, dst: *mut u64, depth: u64) -> u64;
/// `printf(ctx, format, args)`: `format` is a format id's index; `args` holds
/// one `u64` per conversion: an int's value, or the address of a `str` (`str_size` bytes).
pub type PrintfFn = extern "sysv64" fn(ctx: *mut ScriptCtx, format: u64, args: *const u64);
/// `print_map(ctx, map)`.
pub type PrintMapFn = extern "sysv64" fn(ctx: *mut ScriptCtx, map: u64);
/// `print_value(ctx, ty, value)`: `ty` a [`ValueType`] number, `value` the address of the value.
pub type PrintValueFn = extern "sysv64" fn(ctx: *mut ScriptCtx, ty: u64, value: *const u8);

/// The `which` of [`BuiltinFn`]: the builtins the context does not hold.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntBuiltin {
    Pid = 0,
    Tid = 1,
    Cpu = 2,
    Nsecs = 3,
}

/// The `which` of [`BuiltinStrFn`].
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrBuiltin {
    /// The thread's name.
    Comm = 0,
    /// The probed function's name ([`ScriptCtx::func`]).
    Func = 1,
    /// The point's text ([`ScriptCtx::probe`]), as the script's point displays it.
    Probe = 2,
}

/// The `ty` of [`PrintValueFn`].
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    Int = 0,
    Str = 1,
    Stack = 2,
}


/// Frames a [`StackValue`] has room for: the deepest `ustack(n)`.
pub const STACK_FRAMES: usize = 127;

/// A `stack` value, in a local, a key or the argument of [`PrintValueFn`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackValue {
    /// Frames in use, at most [`STACK_FRAMES`].
    pub len: u64,
    pub frames: [u64; STACK_FRAMES],
}

const _: () = assert!(size_of::<StackValue>() == 1024);

/// Slot of an `avg()` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvgSlot {
    pub sum: i64,
    pub count: u64,
}

/// Slot of a `min()` or `max()` map: `set` is 0 until the first value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtremeSlot {
    pub value: i64,
    pub set: u64,
}

/// Slot of a `stats()` map: `min` and `max` mean something once `count` is not 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSlot {
    pub count: u64,
    pub sum: i64,
    pub min: i64,
    pub max: i64,
}

const _: () = {
    assert!(size_of::<AvgSlot>() == 16 && offset_of!(AvgSlot, count) == 8);
    assert!(size_of::<ExtremeSlot>() == 16 && offset_of!(ExtremeSlot, set) == 8);
    assert!(size_of::<StatsSlot>() == 32 && offset_of!(StatsSlot, min) == 16 && offset_of!(StatsSlot, max) == 24);
};

/// `u64` counters of a `hist()` slot: see [`hist_bucket`]. A positive `i64` is below 2^63,
/// so 63 power-of-two buckets cover them all.
pub const HIST_BUCKETS: usize = 2 + 63;

/// The counter of a `hist()` slot that counts `value`: 0 for a negative value, 1 for 0, and
/// `k + 2` for `2^k <= value < 2^(k+1)`.
pub fn hist_bucket(value: i64) -> usize {
    match value {
        v if v < 0 => 0,
        0 => 1,
        v => 2 + v.ilog2() as usize,
    }
}

/// Linear buckets of `lhist(.., min, max, step)`: `ceil((max - min) / step)`, the last one
/// ending at `max` even when `step` does not divide `max - min`.
pub fn lhist_linear_buckets(min: i64, max: i64, step: i64) -> usize {
    let span = max.abs_diff(min);
    let step = step.unsigned_abs().max(1);
    span.div_ceil(step) as usize
}

/// The counter of an `lhist(.., min, max, step)` slot that counts `value`: 0 below `min`,
/// `1 + (value - min) / step` from `min` up to `max` (exclusive), and the last one,
/// `lhist_linear_buckets + 1`, from `max` up.
pub fn lhist_bucket(value: i64, min: i64, max: i64, step: i64) -> usize {
    if value < min {
        0
    } else if value >= max {
        lhist_linear_buckets(min, max, step) + 1
    } else {
        1 + (value.abs_diff(min) / step.unsigned_abs().max(1)) as usize
    }
}
