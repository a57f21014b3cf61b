//! The syntax tree [`crate::parse`] builds: what the script says, with a span on everything a
//! diagnostic may point at. Nothing is resolved or typed yet; names are kept without their
//! sigils (`$`, `@`).
use crate::diag::{SourceMap, Span};

/// A whole script: its probes, in source order.
#[derive(Clone, Debug)]
pub struct Script {
    pub probes: Vec<Probe>,
    /// The text it was parsed from, so that the checker's diagnostics get lines and columns.
    pub(crate) source: SourceMap,
}

/// `POINTS [/PREDICATE/] { BODY }`.
#[derive(Clone, Debug)]
pub struct Probe {
    pub points: Vec<Point>,
    pub predicate: Option<Expr>,
    pub body: Vec<Stmt>,
    /// From the first point to the last.
    pub span: Span,
    /// The fields of `args` it names (`args.filename`), each once, in the order written.
    pub args: Vec<String>,
    /// It reads `probe`: each system call a glob of its points matches is then a point of
    /// its own, named as the call (bpftrace expands such probes the same way).
    pub reads_probe: bool,
}

#[derive(Clone, Debug)]
pub struct Point {
    pub spec: PointSpec,
    pub span: Span,
    /// Written in bpftrace's spelling (`uprobe:`, `uretprobe:`, `tracepoint:`, `BEGIN`,
    /// `END`): `elapsed` there is bpftrace's, the time since the trace began.
    pub bpftrace: bool,
}

/// A probe point as written; function and system-call names are resolved by the checker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PointSpec {
    /// `func:[LIB:]GLOB[:entry|:return]`.
    Func { lib: Option<Name>, glob: Name, ret: bool },
    /// `func:[LIB:]NAME+OFF`: the instruction `OFF` bytes into function `NAME`.
    FuncOffset { lib: Option<Name>, name: Name, offset: u64 },
    Addr(u64),
    /// `usdt:PATH:[PROVIDER:]NAME`: a SystemTap static marker of the file at PATH.
    Usdt { lib: Name, provider: Option<Name>, name: Name },
    /// `syscall:GLOB[:entry|:return]`, or bpftrace's tracepoints of the same calls.
    Syscall { glob: Name, ret: bool, spelling: Spelling },
    /// `lock:EVENT`; `None` for `lock:*`.
    Lock(Option<LockEvent>),
    Begin,
    End,
    Interval { ns: u64 },
    /// `profile:hz:N` (or `s`, `ms`, `us`): a sample of each thread every `ns` of the
    /// process's CPU time.
    Profile { ns: u64 },
    ThreadStart,
    ThreadExit,
}

/// How a system-call point is written, which is what `probe` gives back there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Spelling {
    /// `syscall:NAME`, `syscall:NAME:return`.
    Lopi,
    /// bpftrace's `tracepoint:syscalls:sys_enter_NAME`, `sys_exit_NAME`.
    Tracepoint,
    /// bpftrace's `tracepoint:raw_syscalls:sys_enter`, `sys_exit`: every call, one point.
    RawTracepoint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockEvent {
    Acquire,
    Acquired,
    Release,
    Contended,
}

impl LockEvent {
    pub const ALL: [LockEvent; 4] = [LockEvent::Acquire, LockEvent::Acquired, LockEvent::Release, LockEvent::Contended];

    pub fn name(self) -> &'static str {
        match self {
            LockEvent::Acquire => "acquire",
            LockEvent::Acquired => "acquired",
            LockEvent::Release => "release",
            LockEvent::Contended => "contended",
        }
    }
}

/// A name and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name {
    pub text: String,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    /// `$x = e`, `@m[k] += e`, `@m++`, `@m[k] = hist(e)`.
    Assign { target: Target, op: AssignOp, value: Rhs },
    /// `if (c) {..} else if (c) {..} else {..}`: the chain is flat, so a long `else if` chain
    /// does not nest.
    If { arms: Vec<IfArm>, els: Option<Vec<Stmt>> },
    Delete(MapRef),
    Clear(Name),
    Exit,
    Printf { format: StrLit, args: Vec<Expr> },
    /// `time("%H:%M:%S")`: the time of day, `strftime`'s format; `None` for `time()`.
    Time(Option<StrLit>),
    /// `print(@m)`: the whole map; `print(@m, top[, div])`: its `top` greatest entries, values
    /// divided by `div` (integer literals, checked later).
    PrintMap { map: Name, args: Vec<Expr> },
    Print(Expr),
    /// `join(argv[, sep])`: the strings of a NULL-terminated array of pointers, on one line.
    Join { array: Expr, sep: Option<StrLit> },
}

#[derive(Clone, Debug)]
pub struct IfArm {
    pub cond: Expr,
    pub body: Vec<Stmt>,
}

#[derive(Clone, Debug)]
pub enum Target {
    Local(Name),
    Map(MapRef),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignOp {
    Set,
    /// `+=` and the like.
    Compound(BinOp),
    /// `++`, `--`.
    Incr,
    Decr,
}

/// The right-hand side of an assignment: an aggregation only counts as one when it is the
/// whole of it.
#[derive(Clone, Debug)]
pub enum Rhs {
    Expr(Expr),
    Agg(Agg),
}

/// `count()`, `hist(x)`, `lhist(x, 0, 100, 10)`, ...
#[derive(Clone, Debug)]
pub struct Agg {
    pub func: AggFunc,
    pub args: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggFunc {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    Stats,
    Hist,
    Lhist,
}

impl AggFunc {
    pub fn from_name(name: &str) -> Option<AggFunc> {
        Some(match name {
            "count" => AggFunc::Count,
            "sum" => AggFunc::Sum,
            "avg" => AggFunc::Avg,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            "stats" => AggFunc::Stats,
            "hist" => AggFunc::Hist,
            "lhist" => AggFunc::Lhist,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Avg => "avg",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Stats => "stats",
            AggFunc::Hist => "hist",
            AggFunc::Lhist => "lhist",
        }
    }
}

/// `@name` or `@name[k1, k2]`; no keys for the first.
#[derive(Clone, Debug)]
pub struct MapRef {
    pub name: Name,
    pub keys: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    /// Up to `u64::MAX`: `0xffff_ffff_ffff_ffff` is a mask, not an overflow.
    Int(u64),
    Str(StrLit),
    Builtin(Builtin),
    Local(String),
    /// `args.NAME` or `args->NAME`: a field of a system-call tracepoint, which the checker
    /// resolves to an argument or the result at each point.
    Args(Name),
    Map(MapRef),
    Call { callee: Callee, args: Vec<Expr> },
    Unary { op: UnOp, expr: Box<Expr> },
    Binary { op: BinOp, lhs: Box<Expr>, rhs: Box<Expr> },
    Ternary { cond: Box<Expr>, then: Box<Expr>, els: Box<Expr> },
}

/// A string literal's bytes after escapes (`\xHH` may make them invalid UTF-8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrLit {
    pub bytes: Vec<u8>,
    pub span: Span,
    /// Source offset of what wrote each byte, then of the closing quote: a `printf` format's
    /// error points inside the literal.
    pub(crate) starts: Vec<usize>,
}

impl StrLit {
    /// The source span of bytes `from..to` of the literal.
    pub(crate) fn span_of(&self, from: usize, to: usize) -> Span {
        let at = |i: usize| self.starts.get(i).copied().unwrap_or(self.span.end);
        Span::new(at(from), at(to.max(from + 1)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Callee {
    /// `str(ptr)`, `str(ptr, len)`: a string read from the traced program's memory.
    Str,
    Ustack,
    /// `pystack`: the running Python code's frames (CPython 3.11).
    Pystack,
    /// `usym(addr)`: the symbol of an address of the program, named when printed.
    Usym,
    /// Only valid as a whole assignment value; kept as a call so the checker can say so.
    Agg(AggFunc),
}

/// Values the probe reads from its context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Builtin {
    Pid,
    Tid,
    /// The thread's user and group ids.
    Uid,
    Gid,
    /// The pid of the process lopi started (`lopi trace -- PROG`) or attached to.
    Cpid,
    Comm,
    Cpu,
    Nsecs,
    /// Name of the probed function.
    Func,
    /// The point that fired, as [`crate::ir::Point`]'s `Display` writes it.
    Probe,
    /// `arg0` to `arg5`.
    Arg(u8),
    Retval,
    /// Nanoseconds since the matching entry, in return probes.
    Elapsed,
    /// The system call's number: `args.id` (bpftrace's `raw_syscalls` field), no name of its own.
    SyscallNr,
    /// Nanoseconds since the trace began: what `elapsed` is where a point has no call's time
    /// (bpftrace's meaning), no name of its own.
    SinceStart,
}

impl Builtin {
    pub fn from_name(name: &str) -> Option<Builtin> {
        Some(match name {
            "pid" => Builtin::Pid,
            "tid" => Builtin::Tid,
            "uid" => Builtin::Uid,
            "gid" => Builtin::Gid,
            "cpid" => Builtin::Cpid,
            "comm" => Builtin::Comm,
            "cpu" => Builtin::Cpu,
            "nsecs" => Builtin::Nsecs,
            "func" => Builtin::Func,
            "probe" => Builtin::Probe,
            "retval" => Builtin::Retval,
            "elapsed" => Builtin::Elapsed,
            "arg0" | "arg1" | "arg2" | "arg3" | "arg4" | "arg5" => Builtin::Arg(name.as_bytes()[3] - b'0'),
            _ => return None,
        })
    }

    pub fn name(self) -> String {
        match self {
            Builtin::Pid => "pid".into(),
            Builtin::Tid => "tid".into(),
            Builtin::Uid => "uid".into(),
            Builtin::Gid => "gid".into(),
            Builtin::Cpid => "cpid".into(),
            Builtin::Comm => "comm".into(),
            Builtin::Cpu => "cpu".into(),
            Builtin::Nsecs => "nsecs".into(),
            Builtin::Func => "func".into(),
            Builtin::Probe => "probe".into(),
            Builtin::Arg(n) => format!("arg{n}"),
            Builtin::Retval => "retval".into(),
            Builtin::Elapsed => "elapsed".into(),
            Builtin::SyscallNr => "args.id".into(),
            Builtin::SinceStart => "elapsed".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    /// `!`: 1 for 0, else 0.
    Not,
    /// `~`.
    BitNot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Shl,
    Shr,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    /// `&&` and `||` evaluate their right side only when needed.
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::BitAnd => "&",
            BinOp::BitXor => "^",
            BinOp::BitOr => "|",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// C's binding strength: higher binds tighter.
    pub(crate) fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::BitOr => 3,
            BinOp::BitXor => 4,
            BinOp::BitAnd => 5,
            BinOp::Eq | BinOp::Ne => 6,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 7,
            BinOp::Shl | BinOp::Shr => 8,
            BinOp::Add | BinOp::Sub => 9,
            BinOp::Mul | BinOp::Div | BinOp::Rem => 10,
        }
    }
}
