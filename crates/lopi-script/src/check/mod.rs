//! Resolution and type checking: [`check`] turns a parsed script into an [`ir::Program`], or
//! reports every error it finds, not only the first.
//!
//! A map may be read before the statement that gives it its type: `func:f:return` reads what
//! `func:f` stored, whichever of the two is written first. So the bodies are checked in
//! rounds: a read of a map not typed yet takes the type the previous round ended with, until
//! a round relies on nothing its own end contradicts. Points are resolved once, before.
mod args;
mod expr;
mod locals;
mod maps;
mod points;
mod stmt;

pub use points::Resolver;

use crate::ast::{self, Script};
use crate::diag::{diagnostics, Diagnostics, Issue, Span};
use crate::ir::{self, Builtin, Format, Point, Program, StrId, Type};
use crate::limits::{DEFAULT_MAX_ENTRIES, DEFAULT_STR_SIZE, MAX_MAPS, MAX_PROBES};
use locals::Locals;
use maps::{Hints, MapInfo, Maps};
use points::{Elapsed, Source};
use std::collections::{HashMap, HashSet};

/// The program `script` describes, checked against the target `resolver` knows.
pub fn check(script: &Script, resolver: &dyn Resolver) -> Result<Program, Diagnostics> {
    let mut issues = Vec::new();
    let mut units = Vec::new();
    for (index, probe) in script.probes.iter().enumerate() {
        let mut points = points::resolve(&probe.points, resolver, &mut issues);
        if probe.reads_probe {
            points = points::each_call(points, resolver);
        }
        units.extend(args::split(&points, &probe.args, resolver).into_iter().map(|(points, args)| Unit { probe: index, points, args }));
    }
    if let Some(extra) = units.get(MAX_PROBES) {
        let message = match units.len() > script.probes.len() {
            true => format!("too many probes: at most {MAX_PROBES} are allowed (probes reading `args` count once per set of system calls whose arguments differ)"),
            false => format!("too many probes: at most {MAX_PROBES} are allowed"),
        };
        issues.push(Issue::new(script.probes[extra.probe].span, message));
    }
    let assigned = maps::assigned(script);
    let mut hints = Hints::new();
    let mut round = Checker::run(script, &units, &assigned, &hints);
    // A round that is not settled typed a map the one before did not; the bound stops a
    // script whose rounds would never agree (its last round's errors are reported).
    for _ in 0..=MAX_MAPS {
        if round.settled {
            break;
        }
        hints = round.values;
        round = Checker::run(script, &units, &assigned, &hints);
    }
    issues.extend(round.issues);
    let mut maps = Vec::new();
    for info in round.maps {
        match (info.keys, info.value) {
            (Some((keys, _)), Some((value, _))) => maps.push(ir::Map { name: info.name, keys, value, max_entries: DEFAULT_MAX_ENTRIES, key_frames: Vec::new() }),
            _ if issues.is_empty() => issues.push(Issue::new(info.first, format!("the type of map `@{}` could not be inferred", info.name))),
            _ => {}
        }
    }
    if !issues.is_empty() {
        return Err(diagnostics(issues, &script.source));
    }
    let mut program = Program { maps, probes: round.probes, strings: round.strings, formats: round.formats, str_size: DEFAULT_STR_SIZE };
    let key_frames = crate::stack_keys::key_frames(&program);
    for (map, frames) in program.maps.iter_mut().zip(key_frames) {
        map.key_frames = frames;
    }
    Ok(program)
}

/// A probe as it is checked and compiled: a probe of the script with all its points, or with
/// those at which its `args` fields read the same ([`args::split`]).
struct Unit {
    /// Its index in the script.
    probe: usize,
    points: Vec<Point>,
    args: args::Fields,
}

/// What one round over all bodies found.
struct Round {
    probes: Vec<ir::Probe>,
    maps: Vec<MapInfo>,
    strings: Vec<Vec<u8>>,
    formats: Vec<Format>,
    issues: Vec<Issue>,
    /// The maps' value kinds at the end.
    values: Hints,
    /// No read went untyped, and every hint it took held: another round would find the same.
    settled: bool,
}

/// The state of one round: maps and constants of the whole script, locals of the probe at hand.
struct Checker<'s> {
    maps: Maps<'s>,
    strings: Vec<Vec<u8>>,
    interned: HashMap<Vec<u8>, StrId>,
    formats: Vec<Format>,
    issues: Vec<Issue>,
    /// The points of the probe being checked: every one must give the builtins its body reads.
    points: &'s [Point],
    /// What its `args` fields read there.
    args: Option<&'s args::Fields>,
    /// Per [`Source`], the first of `points` that does not give its builtins, as written.
    lacking: [Option<String>; 3],
    /// What `elapsed` is there.
    elapsed: Elapsed,
    locals: Locals,
}

impl<'s> Checker<'s> {
    fn run(script: &Script, units: &'s [Unit], assigned: &'s HashSet<String>, hints: &'s Hints) -> Round {
        let mut checker = Checker {
            maps: Maps::new(assigned, hints),
            strings: Vec::new(),
            interned: HashMap::new(),
            formats: Vec::new(),
            issues: Vec::new(),
            points: &[],
            args: None,
            lacking: Default::default(),
            elapsed: Elapsed::Call,
            locals: Locals::default(),
        };
        let mut probes = Vec::new();
        for unit in units {
            checker.points = &unit.points;
            checker.args = Some(&unit.args);
            probes.push(checker.probe(&script.probes[unit.probe]));
        }
        let values = checker.maps.values();
        let held = checker.maps.used_hints.iter().all(|(name, kind)| values.get(name) == Some(kind));
        let settled = held || values == *hints;
        Round {
            probes,
            maps: checker.maps.list,
            strings: checker.strings,
            formats: checker.formats,
            issues: checker.issues,
            values,
            settled,
        }
    }

    fn probe(&mut self, probe: &ast::Probe) -> ir::Probe {
        self.locals = Locals::default();
        self.lacking = Source::ALL.map(|source| self.points.iter().find(|p| !source.gives(p)).map(Point::to_string));
        self.elapsed = Elapsed::at(&probe.points);
        let predicate = probe.predicate.as_ref().and_then(|p| self.condition(p, "a predicate"));
        let body = self.block(&probe.body);
        let locals = std::mem::take(&mut self.locals).finish(&mut self.issues);
        ir::Probe { points: self.points.to_vec(), locals, predicate, body }
    }

    fn intern(&mut self, bytes: &[u8]) -> StrId {
        if let Some(&id) = self.interned.get(bytes) {
            return id;
        }
        let id = StrId(self.strings.len());
        self.strings.push(bytes.to_vec());
        self.interned.insert(bytes.to_vec(), id);
        id
    }

    /// What `args.FIELD` reads at the probe's points.
    fn args_field(&mut self, field: &ast::Name) -> Option<Builtin> {
        match self.args.and_then(|a| a.get(&field.text)) {
            Some(Ok(builtin)) => Some(*builtin),
            Some(Err(why)) => {
                self.issues.push(Issue::new(field.span, why.clone()));
                None
            }
            None => None,
        }
    }

    /// What `builtin` reads at the probe's points (`elapsed` has two meanings, see [`Elapsed`])
    /// and its type, or an error if a point of the probe does not give it.
    fn builtin(&mut self, builtin: Builtin, span: Span) -> Option<(Builtin, Type)> {
        let builtin = match (builtin, self.elapsed) {
            (Builtin::Elapsed, Elapsed::SinceStart) => Builtin::SinceStart,
            (Builtin::Elapsed, Elapsed::Both) => {
                let message = "`elapsed` is the call's time at some points of this probe (lopi's own return points, `lock:acquired`, `lock:release`) and the time since the trace began at the others (bpftrace's): write them as two probes";
                self.issues.push(Issue::new(span, message));
                return None;
            }
            (builtin, _) => builtin,
        };
        if let Some(source) = Source::of(builtin) {
            if let Some(point) = &self.lacking[source as usize] {
                self.issues.push(Issue::new(span, format!("`{}` needs {}, and `{point}` is not one", builtin.name(), source.needed())));
                return None;
            }
        }
        Some((builtin, match builtin {
            Builtin::Comm | Builtin::Func | Builtin::Probe => Type::Str,
            // The kernel's result of a system call is a `long` (`-errno` on failure), as
            // bpftrace's `args.ret`; a function's `rax` is bpftrace's uint64 `retval`.
            Builtin::Retval if self.points.iter().all(|p| matches!(p, Point::SyscallReturn { .. })) => Type::Int,
            // bpftrace's uint64 builtins.
            Builtin::Pid | Builtin::Tid | Builtin::Uid | Builtin::Gid | Builtin::Cpid | Builtin::Cpu | Builtin::Nsecs | Builtin::Arg(_) | Builtin::Retval | Builtin::Elapsed | Builtin::SinceStart => Type::Uint,
            // The kernel's `long id`.
            Builtin::SyscallNr => Type::Int,
        }))
    }
}
