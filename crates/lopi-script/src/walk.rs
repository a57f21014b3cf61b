//! A walk over a program's predicates, statements and expressions, for the passes that collect
//! what the probes use (`needs.rs`, `stack_keys.rs`): each says what it looks at, the walk
//! reaches every node.
use crate::ir::{Expr, ExprKind, MapId, Probe, Stmt};

pub(crate) trait Visit {
    /// Every expression, before the expressions inside it.
    fn expr(&mut self, _expr: &Expr) {}
    /// Every statement, before its expressions.
    fn stmt(&mut self, _stmt: &Stmt) {}
    /// Every use of an element of a map, with its keys (before them).
    fn map_key(&mut self, _map: MapId, _keys: &[Expr]) {}
}

pub(crate) fn probe(v: &mut impl Visit, probe: &Probe) {
    if let Some(predicate) = &probe.predicate {
        expr(v, predicate);
    }
    stmts(v, &probe.body);
}

fn stmts(v: &mut impl Visit, stmts: &[Stmt]) {
    for stmt in stmts {
        v.stmt(stmt);
        match stmt {
            Stmt::SetLocal { value, .. } | Stmt::Print(value) => expr(v, value),
            Stmt::SetMap { map, keys, value, .. } => {
                map_key(v, *map, keys);
                expr(v, value);
            }
            Stmt::Aggregate { map, keys, value } => {
                map_key(v, *map, keys);
                value.iter().for_each(|e| expr(v, e));
            }
            Stmt::Delete { map, keys } => map_key(v, *map, keys),
            Stmt::If { arms, els } => {
                for arm in arms {
                    expr(v, &arm.cond);
                    self::stmts(v, &arm.body);
                }
                self::stmts(v, els);
            }
            Stmt::Printf { args, .. } => args.iter().for_each(|a| expr(v, a)),
            Stmt::Join { array, .. } => expr(v, array),
            Stmt::Exit | Stmt::Clear(_) | Stmt::PrintMap { .. } => {}
        }
    }
}

fn map_key(v: &mut impl Visit, map: MapId, keys: &[Expr]) {
    v.map_key(map, keys);
    keys.iter().for_each(|k| expr(v, k));
}

fn expr(v: &mut impl Visit, e: &Expr) {
    v.expr(e);
    match &e.kind {
        ExprKind::ReadStr { ptr, len } => {
            expr(v, ptr);
            len.iter().for_each(|l| expr(v, l));
        }
        ExprKind::Map { map, keys } => map_key(v, *map, keys),
        ExprKind::Unary { expr: inner, .. } | ExprKind::Usym(inner) => expr(v, inner),
        ExprKind::Binary { lhs, rhs, .. } => {
            expr(v, lhs);
            expr(v, rhs);
        }
        ExprKind::Ternary { cond, then, els } => {
            expr(v, cond);
            expr(v, then);
            expr(v, els);
        }
        ExprKind::Builtin(_) | ExprKind::Int(_) | ExprKind::Str(_) | ExprKind::Local(_) | ExprKind::Ustack { .. } | ExprKind::Pystack { .. } => {}
    }
}
