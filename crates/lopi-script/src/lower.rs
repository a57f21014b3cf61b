//! Probes that only count function calls (`func:GLOB { @m[func] = count(); }`, or
//! `@m = count()`, no predicate, a map nothing else touches): what they keep is exactly the
//! calls of each function they cover, which lopi's plain counting probe counts already (per
//! CPU, in a restartable sequence, a few ns a call). Such probes are taken out of the program
//! and their maps filled from the record's call counts when printed: one probe model, the
//! script's action being the built-in count.
use crate::ir::{AggKind, Builtin, ExprKind, MapId, Point, Probe, Program, Stmt, ValueKind};

/// A map the calls of functions fill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedMap {
    pub map: MapId,
    /// Keyed by `func` (else one value, the sum).
    pub by_func: bool,
    /// The globs of each probe counting into it: a function matched by two probes counts twice,
    /// as two probes firing would.
    pub probes: Vec<Vec<String>>,
}

impl CountedMap {
    /// How many times each call of a function named `names` (its name and aliases) counts.
    pub fn weight(&self, names: &[&str]) -> u64 {
        self.probes.iter().filter(|globs| globs.iter().any(|g| names.iter().any(|n| crate::glob_match(g, n)))).count() as u64
    }
}

/// The map a probe counts into, if it only counts calls.
fn counting(program: &Program, probe: &Probe) -> Option<(MapId, bool)> {
    if probe.predicate.is_some() || probe.points.is_empty() || !probe.points.iter().all(|p| matches!(p, Point::FuncEntry { lib: None, .. })) {
        return None;
    }
    let [Stmt::Aggregate { map, keys, value: None }] = probe.body.as_slice() else { return None };
    if program.map(*map).value != ValueKind::Agg(AggKind::Count) {
        return None;
    }
    match keys.as_slice() {
        [] => Some((*map, false)),
        [key] if key.kind == ExprKind::Builtin(Builtin::Func) => Some((*map, true)),
        _ => None,
    }
}

/// Maps a statement touches other than by printing them.
fn touched(stmts: &[Stmt], out: &mut Vec<MapId>) {
    for stmt in stmts {
        match stmt {
            Stmt::SetMap { map, .. } | Stmt::Aggregate { map, .. } | Stmt::Delete { map, .. } | Stmt::Clear(map) => out.push(*map),
            Stmt::If { arms, els } => {
                arms.iter().for_each(|arm| touched(&arm.body, out));
                touched(els, out);
            }
            _ => {}
        }
        stmt_reads(stmt, out);
    }
}

/// Maps read in a statement's expressions.
fn stmt_reads(stmt: &Stmt, out: &mut Vec<MapId>) {
    let mut exprs = Vec::new();
    match stmt {
        Stmt::SetLocal { value, .. } | Stmt::Print(value) | Stmt::Join { array: value, .. } => exprs.push(value),
        Stmt::SetMap { keys, value, .. } => exprs.extend(keys.iter().chain([value])),
        Stmt::Aggregate { keys, value, .. } => exprs.extend(keys.iter().chain(value)),
        Stmt::Delete { keys, .. } => exprs.extend(keys),
        Stmt::Printf { args, .. } => exprs.extend(args),
        Stmt::If { arms, .. } => exprs.extend(arms.iter().map(|a| &a.cond)),
        Stmt::Clear(_) | Stmt::Exit | Stmt::PrintMap { .. } => {}
    }
    while let Some(e) = exprs.pop() {
        match &e.kind {
            ExprKind::Map { map, keys } => {
                out.push(*map);
                exprs.extend(keys);
            }
            ExprKind::ReadStr { ptr, len } => exprs.extend([&**ptr].into_iter().chain(len.as_deref())),
            ExprKind::Unary { expr, .. } | ExprKind::Usym(expr) => exprs.push(expr),
            ExprKind::Binary { lhs, rhs, .. } => exprs.extend([&**lhs, &**rhs]),
            ExprKind::Ternary { cond, then, els } => exprs.extend([&**cond, &**then, &**els]),
            _ => {}
        }
    }
}

/// Takes the probes that only count calls out of `program`, and says which maps they fill.
pub fn counted_maps(program: &mut Program) -> Vec<CountedMap> {
    let candidates: Vec<Option<(MapId, bool)>> = program.probes.iter().map(|p| counting(program, p)).collect();
    // Maps the other probes touch (other than by printing them) stay the script's.
    let mut others = Vec::new();
    for (probe, candidate) in program.probes.iter().zip(&candidates) {
        if candidate.is_none() {
            touched(&probe.body, &mut others);
            if let Some(p) = &probe.predicate {
                stmt_reads(&Stmt::Print(p.clone()), &mut others);
            }
        }
    }
    let mut out: Vec<CountedMap> = Vec::new();
    for (probe, candidate) in program.probes.iter().zip(&candidates) {
        let Some((map, by_func)) = *candidate else { continue };
        // Every probe counting into the map must count the same way.
        let same_way = candidates.iter().flatten().all(|&(m, f)| m != map || f == by_func);
        if others.contains(&map) || !same_way {
            continue;
        }
        let globs = probe.points.iter().filter_map(|p| if let Point::FuncEntry { glob, .. } = p { Some(glob.clone()) } else { None }).collect();
        match out.iter_mut().find(|c| c.map == map) {
            Some(c) => c.probes.push(globs),
            None => out.push(CountedMap { map, by_func, probes: vec![globs] }),
        }
    }
    let lowered = |c: &Option<(MapId, bool)>| matches!(c, Some((map, _)) if out.iter().any(|o| o.map == *map));
    let mut keep = candidates.iter().map(|c| !lowered(c));
    program.probes.retain(|_| keep.next().unwrap_or(true));
    out
}
