//! What a probe script's generated code shares with the runtime that calls it (and with the
//! host that prints what it kept): the context a probe function receives, the helpers it
//! calls, and the bytes of map keys and value slots. The code generator is lopi-script's
//! `codegen`; the sizes of keys and slots per map are worked out there from the script's types.
//!
//! A probe function is `extern "sysv64" fn(ctx: *mut ScriptCtx)`. Every helper takes the same
//! `ctx` first, so the runtime finds its per-thread state in [`ScriptCtx::runtime`].
//!
//! Values:
//! - an `int` is an `i64`, a `uint` a `u64`;
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
    /// The thread's cached value slots of maps without keys, a `u64` per map, 0 until known
    /// (see [`SCALAR_SLOTS`]); 0 when there is no such cache.
    pub scalars: u64,
    /// C handlers only (`--handler`; scripts read names through the helpers): the function's
    /// name or the system call's, NUL-terminated.
    pub name: u64,
    /// C handlers only: the probed function's address in the process, or the `syscall`
    /// instruction's.
    pub addr: u64,
    /// The system call's number (a script's `args.id`); `u64::MAX` at a function's probe.
    pub nr: u64,
}

const _: () = {
    assert!(size_of::<ScriptCtx>() == 136);
    assert!(offset_of!(ScriptCtx, name) == 112 && offset_of!(ScriptCtx, addr) == 120 && offset_of!(ScriptCtx, nr) == 128);
    assert!(offset_of!(ScriptCtx, scalars) == 104);
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
    /// [`UstackFn`]'s type: writes up to `depth` Python frames, innermost first (`pystack`).
    pub pystack: u64,
    /// [`JoinFn`].
    pub join: u64,
}

/// `builtin(ctx, which) -> value`, `which` an [`IntBuiltin`].
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
/// `print_map(ctx, map, top, div)`: `print(@map, top, div)`, 0 and 1 for a whole map.
pub type PrintMapFn = extern "sysv64" fn(ctx: *mut ScriptCtx, map: u64, top: u64, div: u64);
/// `join(ctx, array, sep)`: a [`record::JOIN`] of the strings the traced program's
/// NULL-terminated array of pointers at `array` points at; `sep` is the separator's string id.
pub type JoinFn = extern "sysv64" fn(ctx: *mut ScriptCtx, array: u64, sep: u64);
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
    /// Nanoseconds since the trace began ([`ScriptImage::start_ns`]): bpftrace's `elapsed`.
    SinceStart = 4,
    /// The thread's real user and group ids.
    Uid = 5,
    Gid = 6,
    /// The pid of the process the module's runtime started in: the one lopi started or
    /// attached to.
    Cpid = 7,
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
    /// An unsigned int, 8 bytes as an `Int`.
    Uint = 3,
    /// A `usym()`: the address, 8 bytes.
    Usym = 4,
}


/// Strings `join()` takes from its array at most, and bytes of each with its NUL (bpftrace's
/// `join_argnum` and `join_argsize`).
pub const JOIN_ARGS: usize = 16;
pub const JOIN_ARG_SIZE: usize = 1024;

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

/// First bytes of a module image's [`ScriptImage`].
pub const SCRIPT_IMAGE_MAGIC: [u8; 8] = *b"LOPISCI4";

/// A module image's probe script (R region), found through the module descriptor: the
/// compiled probes and what the runtime needs to run them and to make each thread's area.
/// Offsets are from this header (module addresses: the image moves as a whole).
///
/// ```text
/// formats      a FormatArgs per printf format
/// syscalls     a u64 per system-call number: entry list and return list, as hooks; then, for
///              a C handler, a (u32 offset, u32 length) per number into `strings`: the call's
///              name
/// hooks        a u64 per counter: entry list (low u32) and exit list (high u32), indices of
///              the first word of a list in `lists`, 0 for none (word 0 is never a list's)
/// lists        u32 words: (probe, point) pairs, each list ending with u32::MAX
/// functions    a FunctionName per counter (the probed function's name and address)
/// points       a (u32 offset, u32 length) per point, into `strings`: the point's text
/// tables       a TableShape per map
/// probe_code   a u64 per probe: offset of its function from `code`
/// locks        LOCK_EVENTS u32 list indices, one per lock event
/// threads      THREAD_EVENTS u32 list indices, one per thread event
/// relocs       C handlers: a (u64 slot, u64 target) per address the handler's data holds,
///              both offsets from `handler_data`; the runtime adds the data's address
/// site_args    a u32 per counter: 0, or the index in `arg_specs` of the first SiteArg of an
///              instruction point whose arguments are not the argument registers (a USDT
///              marker's), its list ending with a SiteArg of kind `site_arg::END`
/// arg_specs    SiteArgs
/// ```
///
/// A C handler (`--handler`) is a script whose probes are the handler's functions (`code`
/// is its text), with no maps: its data lies at `handler_data`, in the image's RW part.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptImage {
    pub magic: [u8; 8],
    /// Identity of the script and its options: a thread's area made for another one is not
    /// used (a forked child keeps no area).
    pub id: u64,
    pub code: i64,
    pub probe_code: i64,
    pub hooks: i64,
    pub lists: i64,
    pub lists_len: u32,
    pub counter_count: u32,
    pub functions: i64,
    pub points: i64,
    pub strings: i64,
    pub strings_len: u64,
    pub tables: i64,
    pub probe_count: u32,
    pub point_count: u32,
    pub map_count: u32,
    pub str_size: u32,
    /// Bytes of a thread's [`ScriptArea`]: header, tables, output ring; a multiple of 4096.
    pub area_len: u64,
    /// Offset and length of the output ring in the area.
    pub ring_offset: u64,
    pub ring_len: u64,
    /// A [`FormatArgs`] per `printf` format.
    pub formats: i64,
    pub format_count: u32,
    /// [`HANDLER`] for a C handler.
    pub flags: u32,
    /// The probes of system calls: a `u64` per call number below [`SYSCALLS`], entry list
    /// (low u32) and return list (high u32) as in `hooks`; 0 when the script has none.
    pub syscalls: i64,
    /// C handlers: their data (writable), the relocations the runtime applies to it at init,
    /// and `lopi_init` (0: none), which it then calls.
    pub handler_data: i64,
    pub relocs: i64,
    pub reloc_count: u64,
    pub handler_init: i64,
    /// The probes of lock events: [`LOCK_EVENTS`] u32 list indices (as in `hooks`), 0 when
    /// the script has none.
    pub locks: i64,
    /// The probes of thread events: [`THREAD_EVENTS`] u32 list indices (start, exit, sample), 0 when
    /// the script has none.
    pub threads: i64,
    /// Where instruction points find their arguments (USDT markers): a `u32` per counter and
    /// the [`SiteArg`]s they index; both 0 when no point has such arguments.
    pub site_args: i64,
    pub arg_specs: i64,
    /// `profile:` points: the period, in ns of the process's CPU time (0: none).
    pub profile_ns: u64,
    /// `pystack`: the offset in a thread's area of its [`PyCodeName`] table (0: none).
    pub py_codes: u64,
    /// When the trace began, in CLOCK_MONOTONIC ns (0: when the module's runtime started, as in
    /// a rewritten program).
    pub start_ns: u64,
}

/// Where one argument of an instruction point is (a USDT marker's specifier, `-4@%eax`,
/// `8@-16(%rbp)`, `4@$5`): the registers are those the point's stub saved, as they were at
/// the instruction.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteArg {
    /// One of [`site_arg`]'s kinds.
    pub kind: u8,
    /// Bytes read, 1, 2, 4 or 8, then sign-extended when `signed` is 1, else zero-extended.
    pub size: u8,
    pub signed: u8,
    /// A register's number in x86's encoding (rax 0 .. r15 15), [`site_arg::NO_REG`], or for a
    /// memory operand [`site_arg::IMAGE`]: `value` is then an offset from the [`ScriptImage`]
    /// (a symbol's address, `counter(%rip)`).
    pub base: u8,
    /// Memory operands: the index register (or `NO_REG`) and its scale.
    pub index: u8,
    pub scale: u8,
    /// A register's bits 8..16 (`%ah`).
    pub high_byte: u8,
    pub _pad: u8,
    /// The constant, or a memory operand's displacement.
    pub value: i64,
}

pub const SITE_ARG_LEN: usize = 16;
const _: () = assert!(size_of::<SiteArg>() == SITE_ARG_LEN);

impl SiteArg {
    pub fn to_bytes(&self) -> [u8; SITE_ARG_LEN] {
        let mut out = [0u8; SITE_ARG_LEN];
        out[..8].copy_from_slice(&[self.kind, self.size, self.signed, self.base, self.index, self.scale, self.high_byte, 0]);
        out[8..].copy_from_slice(&self.value.to_le_bytes());
        out
    }
}

/// [`SiteArg::kind`]s and register values.
pub mod site_arg {
    /// Ends a site's list.
    pub const END: u8 = 0;
    pub const CONSTANT: u8 = 1;
    pub const REGISTER: u8 = 2;
    pub const MEMORY: u8 = 3;
    /// No base or index register.
    pub const NO_REG: u8 = 0xff;
    /// The base of a memory operand at a fixed address in the module.
    pub const IMAGE: u8 = 0xfe;
    /// The register `rsp` (its value at the instruction is worked out, not saved).
    pub const RSP: u8 = 4;
}

/// Thread events, in the order of [`ScriptImage::threads`]'s lists: a new thread's start
/// (its `clone` returning in it), a thread's end (its `exit`, or the `exit_group` it makes),
/// and a sample of the thread that was running (`profile:`).
pub const THREAD_EVENTS: usize = 3;
pub const THREAD_START: usize = 0;
pub const THREAD_EXIT: usize = 1;
pub const PROFILE: usize = 2;

/// Lock events, in the order of [`ScriptImage::locks`]'s lists.
pub const LOCK_EVENTS: usize = 4;
pub mod lock_event {
    /// An acquisition's entry.
    pub const ACQUIRE: usize = 0;
    /// An acquisition that got its lock, at its return (elapsed: the wait).
    pub const ACQUIRED: usize = 1;
    /// A release's entry (elapsed: the hold it ends).
    pub const RELEASE: usize = 2;
    /// An acquisition that found its lock held, at its entry.
    pub const CONTENDED: usize = 3;
}

/// [`ScriptImage::flags`]: the probes are a C handler's functions.
pub const HANDLER: u32 = 1;

pub const SCRIPT_IMAGE_LEN: usize = 248;
/// System-call numbers the script probes of system calls cover.
pub const SYSCALLS: usize = 512;
const _: () = assert!(size_of::<ScriptImage>() == SCRIPT_IMAGE_LEN);

impl ScriptImage {
    /// The header's bytes, in field order (the struct has no padding).
    pub fn to_bytes(&self) -> [u8; SCRIPT_IMAGE_LEN] {
        let mut out = [0u8; SCRIPT_IMAGE_LEN];
        let words: [u64; 18] = [
            u64::from_le_bytes(self.magic),
            self.id,
            self.code as u64,
            self.probe_code as u64,
            self.hooks as u64,
            self.lists as u64,
            u64::from(self.lists_len) | u64::from(self.counter_count) << 32,
            self.functions as u64,
            self.points as u64,
            self.strings as u64,
            self.strings_len,
            self.tables as u64,
            u64::from(self.probe_count) | u64::from(self.point_count) << 32,
            u64::from(self.map_count) | u64::from(self.str_size) << 32,
            self.area_len,
            self.ring_offset,
            self.ring_len,
            self.formats as u64,
        ];
        for (i, w) in words.iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[144..148].copy_from_slice(&self.format_count.to_le_bytes());
        out[148..152].copy_from_slice(&self.flags.to_le_bytes());
        for (i, w) in [self.syscalls as u64, self.handler_data as u64, self.relocs as u64, self.reloc_count, self.handler_init as u64, self.locks as u64, self.threads as u64, self.site_args as u64, self.arg_specs as u64, self.profile_ns, self.py_codes, self.start_ns].iter().enumerate() {
            out[152 + 8 * i..160 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Where a counter's function is named in [`ScriptImage::strings`], and its address as an
/// offset from the [`ScriptImage`] (the function's `func` and `ustack` frame).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionName {
    pub name: u32,
    pub name_len: u32,
    pub addr: i64,
}

/// The arguments of a `printf` format, which the runtime copies into its output record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FormatArgs {
    /// Conversions, at most [`MAX_PRINTF_ARGS`].
    pub count: u32,
    pub _pad: u32,
    /// Bit `i` set: argument `i` is a string (`str_size` bytes), else an int.
    pub strings: u64,
}

/// Most arguments a `printf` may take.
pub const MAX_PRINTF_ARGS: usize = 64;

/// A map's table in a thread's area: `script_map`'s shape, at `offset` from the area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableShape {
    pub key_size: u32,
    pub slot_size: u32,
    pub max_entries: u32,
    pub _pad: u32,
    pub offset: u64,
}

/// First bytes of a thread's [`ScriptArea`] in the data file.
pub const SCRIPT_AREA_MAGIC: [u8; 8] = *b"LOPISCA1";

/// A thread's probe-script state, appended to the data file on its first script probe: this
/// header, a `script_map` table per map, and the output ring the host prints from. Only the
/// thread writes it, except `ring_tail`, which the host advances as it prints.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptArea {
    pub magic: [u8; 8],
    /// Bytes of the area, a multiple of 4096.
    pub len: u64,
    pub pid: u32,
    pub tid: u32,
    pub script_id: u64,
    /// Runtime faults of the script (bad reads, division by zero): counted, never fatal.
    pub faults: u64,
    /// Output records dropped because the ring was full (no host reading, or one too slow).
    pub ring_drops: u64,
    /// Bytes written to the ring and bytes the host has taken out, both counting up from 0
    /// (positions in the ring are these modulo its length).
    pub ring_head: u64,
    pub ring_tail: u64,
    /// Non-zero once a probe of this thread called `exit()`.
    pub exit: u64,
    /// Returns not given to `:return` probes: the function left by a tail call.
    pub tail_returns: u64,
    /// `profile:` samples not taken: the thread was inside a probe.
    pub missed_samples: u64,
}

pub const SCRIPT_AREA_HEADER_LEN: usize = 88;

/// Most maps a script has (lopi-script's limit).
pub const MAX_MAPS: usize = 64;
/// Offsets in a thread's area of the host's clear requests and of the clears the thread made,
/// a `u32` per map each: a table whose two differ still holds what it held before the host's
/// last `clear()` (an `interval` probe's); the thread clears it on its next use of the map,
/// and readers skip it until then.
pub const CLEAR_REQUESTS: usize = SCRIPT_AREA_HEADER_LEN;
pub const CLEARS_DONE: usize = CLEAR_REQUESTS + 4 * MAX_MAPS;
/// Offset in a thread's area of the address of each map's value slot for the empty key (a
/// map without keys), 0 until the thread first made it: the generated code then takes no
/// helper call. A clear request zeroes it, after the request, and the thread checks the
/// request again after it sets it.
pub const SCALAR_SLOTS: usize = CLEARS_DONE + 4 * MAX_MAPS;
/// Where the tables of a thread's area begin.
pub const AREA_TABLES: usize = SCALAR_SLOTS + 8 * MAX_MAPS;
const _: () = assert!(size_of::<ScriptArea>() == SCRIPT_AREA_HEADER_LEN);
/// Where the host writes `ring_tail` in the data file, from the area's start.
pub const RING_TAIL: usize = 56;
const _: () = assert!(offset_of!(ScriptArea, ring_tail) == RING_TAIL);

/// An output record in a thread's ring: this header, then `len - 16` bytes of payload,
/// `len` a multiple of 8. A record never wraps: one that would is preceded by a
/// [`record::PAD`] record to the ring's end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHead {
    pub len: u32,
    /// One of [`record`]'s kinds.
    pub kind: u16,
    pub _pad: u16,
    /// The format, map or value type the record is about.
    pub what: u32,
    pub _pad2: u32,
    pub tsc: u64,
}

pub const RECORD_HEAD_LEN: usize = 24;
const _: () = assert!(size_of::<RecordHead>() == RECORD_HEAD_LEN);

/// Kinds of output records.
pub mod record {
    /// Filler to the ring's end.
    pub const PAD: u16 = 0;
    /// `printf`: `what` is the format; per conversion, an int (8 bytes) or a string
    /// (`str_size` bytes, padded to 8).
    pub const PRINTF: u16 = 1;
    /// `print(@map, top, div)`: `what` is the map; then `top` and `div` (u64 each); the host
    /// prints the map as it is then.
    pub const PRINT_MAP: u16 = 2;
    /// `print(value)`: `what` is the `ValueType`; the value's bytes, padded to 8.
    pub const PRINT_VALUE: u16 = 3;
    /// `exit()` ran: the host stops the trace.
    pub const EXIT: u16 = 4;
    /// `join()`: `what` is the separator's string id; the strings, each ended by a NUL.
    pub const JOIN: u16 = 5;
}
