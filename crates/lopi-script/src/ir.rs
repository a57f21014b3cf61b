//! The checked program a code generator walks: probe points resolved, maps and locals numbered
//! with their types, every expression node typed, string constants interned, `printf` formats
//! split into text and typed conversions. Nothing in it needs checking again.
use std::fmt;

pub use crate::ast::{BinOp, Builtin, LockEvent, Spelling, UnOp};

/// Type of a value. Ints have bpftrace's signedness: literals are signed, what the context
/// gives (`arg0`..`arg5`, `retval` of a function, `pid`, `nsecs`, `elapsed`...) unsigned, and
/// an operation is unsigned when an operand is (a shift when its left one is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// 64-bit signed.
    Int,
    /// 64-bit unsigned: compared, divided, shifted right and printed as such.
    Uint,
    /// Bounded by [`Program::str_size`].
    Str,
    /// A user stack (`ustack()`): only a key, a local or printed.
    Stack,
    /// An address of the program that prints as its symbol (`usym()`): only a key, a local,
    /// printed, or `printf`'s `%s`.
    Usym,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Type::Int => "int",
            Type::Uint => "uint",
            Type::Str => "str",
            Type::Stack => "stack",
            Type::Usym => "usym",
        })
    }
}

impl Type {
    /// `int` or `uint`.
    pub fn is_int(self) -> bool {
        matches!(self, Type::Int | Type::Uint)
    }

    /// Whether a value is one 64-bit word, held in a register: an int, or a `usym`'s address.
    pub fn is_word(self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Usym)
    }

    /// Whether a value of one type goes where the other is wanted: ints of either sign do (a
    /// map, a local or a key keeps the sign it was first given, as bpftrace's do).
    pub fn same_kind(self, other: Type) -> bool {
        self == other || (self.is_int() && other.is_int())
    }

    /// Whether `lhs op rhs` on ints is unsigned, as bpftrace has it: when either operand is,
    /// and for a shift when its left operand is.
    pub fn unsigned_op(op: BinOp, lhs: Type, rhs: Type) -> bool {
        match op {
            BinOp::Shl | BinOp::Shr => lhs == Type::Uint,
            _ => lhs == Type::Uint || rhs == Type::Uint,
        }
    }
}

/// What an aggregation map keeps per key. A sum of unsigned values is unsigned (printed as such);
/// minimums, maximums, averages, stats and histograms take their values as signed, as bpftrace's
/// do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggKind {
    Count,
    Sum { unsigned: bool },
    Avg,
    Min,
    Max,
    /// Count, sum, min and max together.
    Stats,
    /// Power-of-two buckets.
    Hist,
    /// Linear buckets from `min` to `max` (exclusive) of `step` each, plus one below and one above.
    Lhist { min: i64, max: i64, step: i64 },
}

/// What a map's values are: plain values assigned by `=`, or an aggregation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// `Int`, `Uint` or `Str`.
    Plain(Type),
    Agg(AggKind),
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueKind::Plain(ty) => ty.fmt(f),
            ValueKind::Agg(AggKind::Lhist { min, max, step }) => write!(f, "lhist(.., {min}, {max}, {step})"),
            ValueKind::Agg(agg) => {
                let name = match agg {
                    AggKind::Count => "count",
                    AggKind::Sum { .. } => "sum",
                    AggKind::Avg => "avg",
                    AggKind::Min => "min",
                    AggKind::Max => "max",
                    AggKind::Stats => "stats",
                    _ => "hist",
                };
                write!(f, "{name}()")
            }
        }
    }
}

impl ValueKind {
    /// Whether two assignments agree: the same kind of values, of either sign for ints.
    pub fn same_kind(self, other: ValueKind) -> bool {
        let signless = |kind: ValueKind| match kind {
            ValueKind::Plain(ty) if ty.is_int() => ValueKind::Plain(Type::Int),
            ValueKind::Agg(AggKind::Sum { .. }) => ValueKind::Agg(AggKind::Sum { unsigned: false }),
            other => other,
        };
        signless(self) == signless(other)
    }
}

/// Index into [`Program::maps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MapId(pub usize);

/// Index into its probe's [`Probe::locals`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalId(pub usize);

/// Index into [`Program::strings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StrId(pub usize);

/// Index into [`Program::formats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FormatId(pub usize);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// Without the `@`; empty for `@`.
    pub name: String,
    /// Key tuple, empty for a map used as a scalar.
    pub keys: Vec<Type>,
    pub value: ValueKind,
    /// Bound on live keys.
    pub max_entries: u32,
    /// Per part of the key, the frames a stack part keeps (0 for other parts): see
    /// `codegen::abi::key_size`.
    pub key_frames: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Local {
    /// Without the `$`.
    pub name: String,
    pub ty: Type,
}

/// A resolved probe point.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// Functions matching `glob`, in the main program or in library `lib`.
    FuncEntry { lib: Option<String>, glob: String },
    FuncReturn { lib: Option<String>, glob: String },
    /// The instruction `offset` bytes into function `name`.
    FuncOffset { lib: Option<String>, name: String, offset: u64 },
    Addr(u64),
    /// The static markers (USDT) named `name` (a glob), of provider `provider` if given, in
    /// the file `lib` (the program, by path or name, or a library).
    Usdt { lib: String, provider: Option<String>, name: String },
    /// Before the system calls matching `glob`.
    SyscallEntry { glob: String, spelling: Spelling },
    SyscallReturn { glob: String, spelling: Spelling },
    Lock(LockEvent),
    Begin,
    End,
    Interval { ns: u64 },
    /// A sample every `ns` of the process's CPU time, in the thread that was running.
    Profile { ns: u64 },
    ThreadStart,
    ThreadExit,
}

/// The point as a script writes it; also what the `probe` builtin yields (a system call's in
/// the spelling the script used, the tracepoints' names where they differ: `stat` is
/// `tracepoint:syscalls:sys_enter_newstat`).
impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lib = |lib: &Option<String>| lib.as_ref().map(|l| format!("{l}:")).unwrap_or_default();
        match self {
            Point::FuncEntry { lib: l, glob } => write!(f, "func:{}{glob}", lib(l)),
            Point::FuncReturn { lib: l, glob } => write!(f, "func:{}{glob}:return", lib(l)),
            Point::FuncOffset { lib: l, name, offset } => write!(f, "func:{}{name}+{offset:#x}", lib(l)),
            Point::Addr(addr) => write!(f, "addr:{addr:#x}"),
            Point::Usdt { lib, provider: Some(provider), name } => write!(f, "usdt:{lib}:{provider}:{name}"),
            Point::Usdt { lib, provider: None, name } => write!(f, "usdt:{lib}:{name}"),
            Point::SyscallEntry { glob, spelling } => syscall(f, glob, *spelling, false),
            Point::SyscallReturn { glob, spelling } => syscall(f, glob, *spelling, true),
            Point::Lock(event) => write!(f, "lock:{}", event.name()),
            Point::Begin => f.write_str("begin"),
            Point::End => f.write_str("end"),
            Point::Interval { ns } => match [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")].into_iter().find(|(unit, _)| ns % unit == 0) {
                Some((unit, name)) => write!(f, "interval:{}{name}", ns / unit),
                None => write!(f, "interval:{ns}ns"),
            },
            Point::Profile { ns } => match [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")].into_iter().find(|(unit, _)| ns % unit == 0) {
                Some((unit, name)) => write!(f, "profile:{name}:{}", ns / unit),
                None => write!(f, "profile:hz:{}", 1_000_000_000 / ns.max(&1)),
            },
            Point::ThreadStart => f.write_str("thread:start"),
            Point::ThreadExit => f.write_str("thread:exit"),
        }
    }
}

fn syscall(f: &mut fmt::Formatter<'_>, glob: &str, spelling: Spelling, ret: bool) -> fmt::Result {
    let side = if ret { "exit" } else { "enter" };
    match spelling {
        Spelling::Lopi => write!(f, "syscall:{glob}{}", if ret { ":return" } else { "" }),
        Spelling::Tracepoint => write!(f, "tracepoint:syscalls:sys_{side}_{}", crate::syscall_args::tracepoint_of_call(glob)),
        Spelling::RawTracepoint => write!(f, "tracepoint:raw_syscalls:sys_{side}"),
    }
}

/// Points sharing a predicate and a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub points: Vec<Point>,
    /// Locals of one run of the body; all assigned before they are read.
    pub locals: Vec<Local>,
    pub predicate: Option<Expr>,
    pub body: Vec<Stmt>,
}

/// A typed expression node. Trees are at most [`crate::limits::MAX_DEPTH`] deep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    pub ty: Type,
    pub kind: ExprKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExprKind {
    /// A literal; those above `i64::MAX` wrap (`0xffff_ffff_ffff_ffff` is -1).
    Int(i64),
    Str(StrId),
    Builtin(Builtin),
    Local(LocalId),
    /// Value of a plain map (0 or "" for a missing key).
    Map { map: MapId, keys: Vec<Expr> },
    /// `str(ptr)` / `str(ptr, len)`: at most [`Program::str_size`] bytes of the traced program.
    ReadStr { ptr: Box<Expr>, len: Option<Box<Expr>> },
    Ustack { depth: u8 },
    /// `pystack(n)`: frames tagged `lopi_rt_abi::python::PY_FRAME`; `gil_held` at CPython's own
    /// markers only (`lopi_rt_abi::python::PYSTACK_GIL_HELD`).
    Pystack { depth: u8, gil_held: bool },
    /// `usym(addr)`: the address, typed to print as its symbol.
    Usym(Box<Expr>),
    Unary { op: UnOp, expr: Box<Expr> },
    /// `==`/`!=` compare strings when both sides are `Str`.
    Binary { op: BinOp, lhs: Box<Expr>, rhs: Box<Expr> },
    Ternary { cond: Box<Expr>, then: Box<Expr>, els: Box<Expr> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// `$x = v`, or `$x op= v` when `op` is set (`$x++` is `$x += 1`).
    SetLocal { local: LocalId, op: Option<BinOp>, value: Expr },
    /// The same on an element of a plain map; the keys are evaluated once.
    SetMap { map: MapId, keys: Vec<Expr>, op: Option<BinOp>, value: Expr },
    /// Adds `value` to the element's aggregation (the kind is the map's); `None` for `count()`.
    Aggregate { map: MapId, keys: Vec<Expr>, value: Option<Expr> },
    /// The first arm whose condition holds runs, else `els`.
    If { arms: Vec<IfArm>, els: Vec<Stmt> },
    Delete { map: MapId, keys: Vec<Expr> },
    Clear(MapId),
    Exit,
    Printf { format: FormatId, args: Vec<Expr> },
    /// `print(@m[, top[, div]])`: its `top` greatest entries (0: all), values divided by `div`
    /// (0 is 1), as bpftrace's.
    PrintMap { map: MapId, top: u32, div: u32 },
    Print(Expr),
    /// `join(array, sep)`: the strings the NULL-terminated array of pointers at `array` points
    /// at (up to [`crate::codegen::abi::JOIN_ARGS`] of at most
    /// [`crate::codegen::abi::JOIN_ARG_SIZE`] bytes each, to the first empty one), joined by
    /// `sep`, as one line.
    Join { array: Expr, sep: StrId },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfArm {
    pub cond: Expr,
    pub body: Vec<Stmt>,
}

/// A `printf` format: text and conversions, one argument per conversion in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub pieces: Vec<Piece>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text as is (`%%` already made `%`).
    Text(StrId),
    Conv(Conversion),
    /// The time of day when lopi prints it, written by a `strftime` format (`time()`).
    Time(StrId),
}

/// One `%...` of a format; length modifiers (`%ld`) are accepted and dropped, as every integer
/// is 64-bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conversion {
    pub kind: ConvKind,
    /// Flags `-`, `0`, `+`, ` `, `#`.
    pub left: bool,
    pub zero: bool,
    pub plus: bool,
    pub space: bool,
    pub alt: bool,
    pub width: Option<u8>,
    pub precision: Option<u8>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvKind {
    /// `%d`, `%i`.
    #[default]
    Signed,
    Unsigned,
    /// `%x`, `%X`.
    Hex,
    HexUpper,
    Str,
    /// `%c`: the low byte of an int.
    Char,
    /// `%s` of a `usym`: its symbol's name.
    Sym,
}

impl ConvKind {
    /// The type its argument must have.
    pub fn arg_type(self) -> Type {
        match self {
            ConvKind::Str => Type::Str,
            ConvKind::Sym => Type::Usym,
            _ => Type::Int,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub maps: Vec<Map>,
    pub probes: Vec<Probe>,
    /// Interned string constants: literals and the text of formats.
    pub strings: Vec<Vec<u8>>,
    pub formats: Vec<Format>,
    /// Bytes of a string value.
    pub str_size: usize,
}

impl Program {
    pub fn map(&self, id: MapId) -> &Map {
        &self.maps[id.0]
    }

    pub fn string(&self, id: StrId) -> &[u8] {
        &self.strings[id.0]
    }

    pub fn format(&self, id: FormatId) -> &Format {
        &self.formats[id.0]
    }

    /// Bounds every map to `entries` live keys instead of [`crate::limits::DEFAULT_MAX_ENTRIES`].
    pub fn set_max_entries(&mut self, entries: u32) {
        for map in &mut self.maps {
            map.max_entries = entries;
        }
    }
}
