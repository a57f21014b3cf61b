//! Probe points against the target: a `func:` or `syscall:` point must cover at least one
//! function or system call the [`Resolver`] knows. Also which builtins each kind of point
//! can give.
use crate::ast::{self, PointSpec};
use crate::diag::Issue;
use crate::glob::is_glob;
use crate::ir::{Builtin, LockEvent, Point, Spelling};
use std::collections::HashSet;

/// What the checker asks about the program to be traced. Implementations match names with
/// [`crate::glob_match`].
pub trait Resolver {
    /// How many functions of the main program (`lib: None`) or of the loaded library `lib`
    /// (a path or a file name such as `libc.so.6`) match `glob`.
    fn functions_matching(&self, lib: Option<&str>, glob: &str) -> usize;
    /// Whether `name` is a system call of the target's architecture.
    fn syscall_known(&self, name: &str) -> bool;
    /// The system calls matching `glob`, by name.
    fn syscalls_matching(&self, glob: &str) -> Vec<String>;
    /// How many static markers (USDT) of the file `lib` (the program's path or name, or a
    /// library's) are named `name` (a glob), of a provider matching `provider` if given.
    fn markers_matching(&self, lib: &str, provider: Option<&str>, name: &str) -> usize;
}

/// The resolved points of one probe, without repeats (`lock:*` is its four events); an error
/// for each point that covers nothing.
pub(super) fn resolve(points: &[ast::Point], resolver: &dyn Resolver, issues: &mut Vec<Issue>) -> Vec<Point> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for point in points {
        let lib_of = |lib: &Option<ast::Name>| lib.as_ref().map(|l| l.text.clone());
        let in_lib = |lib: &Option<ast::Name>| lib.as_ref().map(|l| format!(" in `{}`", l.text)).unwrap_or_default();
        let resolved = match &point.spec {
            PointSpec::Func { lib, glob, ret } => {
                if resolver.functions_matching(lib.as_ref().map(|l| l.text.as_str()), &glob.text) == 0 {
                    let what = if is_glob(&glob.text) { "matches" } else { "is named" };
                    issues.push(Issue::new(glob.span, format!("no function {what} `{}`{}", glob.text, in_lib(lib))));
                    continue;
                }
                let (lib, glob) = (lib_of(lib), glob.text.clone());
                vec![if *ret { Point::FuncReturn { lib, glob } } else { Point::FuncEntry { lib, glob } }]
            }
            PointSpec::FuncOffset { lib, name, offset } => {
                if resolver.functions_matching(lib.as_ref().map(|l| l.text.as_str()), &name.text) == 0 {
                    issues.push(Issue::new(name.span, format!("no function is named `{}`{}", name.text, in_lib(lib))));
                    continue;
                }
                vec![Point::FuncOffset { lib: lib_of(lib), name: name.text.clone(), offset: *offset }]
            }
            PointSpec::Syscall { glob, ret, spelling } => {
                let known = if is_glob(&glob.text) { !resolver.syscalls_matching(&glob.text).is_empty() } else { resolver.syscall_known(&glob.text) };
                if !known {
                    let message = match is_glob(&glob.text) {
                        true => format!("no system call matches `{}`", glob.text),
                        false => format!("unknown system call `{}`", glob.text),
                    };
                    issues.push(Issue::new(glob.span, message));
                    continue;
                }
                let (glob, spelling) = (glob.text.clone(), *spelling);
                vec![if *ret { Point::SyscallReturn { glob, spelling } } else { Point::SyscallEntry { glob, spelling } }]
            }
            PointSpec::Addr(addr) => vec![Point::Addr(*addr)],
            PointSpec::Usdt { lib, provider, name } => {
                let provider_text = provider.as_ref().map(|p| p.text.as_str());
                if resolver.markers_matching(&lib.text, provider_text, &name.text) == 0 {
                    let what = provider_text.map(|p| format!("{p}:{}", name.text)).unwrap_or_else(|| name.text.clone());
                    issues.push(Issue::new(name.span, format!("no static marker (USDT) matches `{what}` in `{}` (`lopi info {} --usdt` lists them)", lib.text, lib.text)));
                    continue;
                }
                vec![Point::Usdt { lib: lib.text.clone(), provider: provider.as_ref().map(|p| p.text.clone()), name: name.text.clone() }]
            }
            PointSpec::Lock(Some(event)) => vec![Point::Lock(*event)],
            PointSpec::Lock(None) => LockEvent::ALL.into_iter().map(Point::Lock).collect(),
            PointSpec::Begin => vec![Point::Begin],
            PointSpec::End => vec![Point::End],
            PointSpec::Interval { ns } => vec![Point::Interval { ns: *ns }],
            PointSpec::Profile { ns } => vec![Point::Profile { ns: *ns }],
            PointSpec::ThreadStart => vec![Point::ThreadStart],
            PointSpec::ThreadExit => vec![Point::ThreadExit],
        };
        for point in resolved {
            if seen.insert(point.clone()) {
                out.push(point);
            }
        }
    }
    out
}

/// `points` with each of their system-call globs replaced by the calls it matches, each a
/// point of its own: where a probe reads `probe`, each call gives its own name (the globs of
/// `tracepoint:raw_syscalls` are one point, as bpftrace's).
pub(super) fn each_call(points: Vec<Point>, resolver: &dyn Resolver) -> Vec<Point> {
    let mut out = Vec::new();
    for point in points {
        let (glob, spelling, ret) = match &point {
            Point::SyscallEntry { glob, spelling } if is_glob(glob) && *spelling != Spelling::RawTracepoint => (glob, *spelling, false),
            Point::SyscallReturn { glob, spelling } if is_glob(glob) && *spelling != Spelling::RawTracepoint => (glob, *spelling, true),
            _ => {
                out.push(point);
                continue;
            }
        };
        for glob in resolver.syscalls_matching(glob) {
            let call = if ret { Point::SyscallReturn { glob, spelling } } else { Point::SyscallEntry { glob, spelling } };
            if !out.contains(&call) {
                out.push(call);
            }
        }
    }
    out
}

/// What `elapsed` is at the points of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Elapsed {
    /// The call's time: at lopi's own return points (`func:F:return`, `syscall:S:return`), the
    /// wait at `lock:acquired`, the hold at `lock:release`.
    Call,
    /// bpftrace's meaning, the time since the trace began: at every other point, those written
    /// in bpftrace's spelling too (`uretprobe:`, `tracepoint:syscalls:sys_exit_*`), so that its
    /// scripts (sslsnoop.bt's timestamps at uretprobes) mean what they meant there.
    SinceStart,
    /// Some points of each kind (`lock:*` is).
    Both,
}

impl Elapsed {
    pub fn at(points: &[ast::Point]) -> Elapsed {
        let (mut call, mut since) = (false, false);
        for point in points {
            let (c, s) = match &point.spec {
                PointSpec::Func { ret: true, .. } | PointSpec::Syscall { ret: true, .. } if !point.bpftrace => (true, false),
                PointSpec::Lock(Some(LockEvent::Acquired | LockEvent::Release)) => (true, false),
                PointSpec::Lock(None) => (true, true),
                _ => (false, true),
            };
            (call, since) = (call || c, since || s);
        }
        match (call, since) {
            (true, false) => Elapsed::Call,
            (false, _) => Elapsed::SinceStart,
            (true, true) => Elapsed::Both,
        }
    }
}

/// The builtins only some points give, grouped by the points that give them.
#[derive(Clone, Copy)]
pub(super) enum Source {
    Return,
    Args,
    Func,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::Return, Source::Args, Source::Func];

    /// `None` for the builtins every point gives.
    pub fn of(builtin: Builtin) -> Option<Source> {
        match builtin {
            Builtin::Retval => Some(Source::Return),
            Builtin::Arg(_) => Some(Source::Args),
            Builtin::Func => Some(Source::Func),
            // `elapsed` is given everywhere ([`Elapsed`]); `args.id` only ever a system call's.
            Builtin::Pid | Builtin::Tid | Builtin::Uid | Builtin::Gid | Builtin::Cpid | Builtin::Comm | Builtin::Cpu | Builtin::Nsecs | Builtin::Probe | Builtin::Elapsed | Builtin::SinceStart | Builtin::SyscallNr => None,
        }
    }

    pub fn gives(self, point: &Point) -> bool {
        match self {
            Source::Return => matches!(point, Point::FuncReturn { .. } | Point::SyscallReturn { .. } | Point::Lock(LockEvent::Acquired)),
            Source::Args => matches!(point, Point::FuncEntry { .. } | Point::FuncOffset { .. } | Point::Addr(_) | Point::Usdt { .. } | Point::SyscallEntry { .. } | Point::Lock(_)),
            Source::Func => matches!(point, Point::FuncEntry { .. } | Point::FuncReturn { .. } | Point::FuncOffset { .. } | Point::Lock(_)),
        }
    }

    /// The kind of point that gives them.
    pub fn needed(self) -> &'static str {
        match self {
            Source::Return => "a return probe (`func:F:return`, `syscall:S:return` or `lock:acquired`)",
            Source::Args => "a function entry, `func:F+OFF`, `addr:`, `usdt:`, system call entry or `lock:` probe",
            Source::Func => "a `func:` or `lock:` probe",
        }
    }
}
