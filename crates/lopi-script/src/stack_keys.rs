//! How many frames each stack part of a map's key keeps: the deepest stack any use of the map
//! puts there. A key is packed part after part, a stack part as its frame count and that many
//! frames, so that `@[pystack(1)]` hashes and compares 16 bytes, not a whole 1 KiB
//! `StackValue` (which locals and printing keep).
use crate::codegen::abi::STACK_FRAMES;
use crate::ir::{Expr, ExprKind, MapId, Program, Stmt, Type};

/// Per map, per part of its key: the frames a stack part keeps (0 for other parts).
pub fn key_frames(program: &Program) -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = program.maps.iter().map(|m| vec![0; m.keys.len()]).collect();
    for probe in &program.probes {
        let mut walk = Walk { frames: &mut frames };
        walk.stmts(&probe.body);
        if let Some(predicate) = &probe.predicate {
            walk.expr(predicate);
        }
    }
    frames
}

/// The frames a stack expression holds at most: its `ustack(n)`/`pystack(n)` depth, or all of
/// them for a local or a value of unknown depth.
fn depth(expr: &Expr) -> u8 {
    match &expr.kind {
        ExprKind::Ustack { depth } | ExprKind::Pystack { depth, .. } => *depth,
        ExprKind::Ternary { then, els, .. } => depth(then).max(depth(els)),
        _ => STACK_FRAMES as u8,
    }
}

struct Walk<'a> {
    frames: &'a mut Vec<Vec<u8>>,
}

impl Walk<'_> {
    fn key(&mut self, map: MapId, keys: &[Expr]) {
        for (i, key) in keys.iter().enumerate() {
            self.expr(key);
            if key.ty == Type::Stack {
                if let Some(part) = self.frames.get_mut(map.0).and_then(|m| m.get_mut(i)) {
                    *part = (*part).max(depth(key));
                }
            }
        }
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for stmt in stmts {
            match stmt {
                Stmt::SetLocal { value, .. } | Stmt::Print(value) => self.expr(value),
                Stmt::SetMap { map, keys, value, .. } => {
                    self.key(*map, keys);
                    self.expr(value);
                }
                Stmt::Aggregate { map, keys, value } => {
                    self.key(*map, keys);
                    value.iter().for_each(|v| self.expr(v));
                }
                Stmt::Delete { map, keys } => self.key(*map, keys),
                Stmt::If { arms, els } => {
                    for arm in arms {
                        self.expr(&arm.cond);
                        self.stmts(&arm.body);
                    }
                    self.stmts(els);
                }
                Stmt::Printf { args, .. } => args.iter().for_each(|a| self.expr(a)),
                Stmt::Exit | Stmt::Clear(_) | Stmt::PrintMap(_) => {}
            }
        }
    }

    fn expr(&mut self, expr: &Expr) {
        match &expr.kind {
            ExprKind::Map { map, keys } => self.key(*map, keys),
            ExprKind::ReadStr { ptr, len } => {
                self.expr(ptr);
                len.iter().for_each(|l| self.expr(l));
            }
            ExprKind::Unary { expr, .. } => self.expr(expr),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::Ternary { cond, then, els } => {
                self.expr(cond);
                self.expr(then);
                self.expr(els);
            }
            ExprKind::Builtin(_) | ExprKind::Int(_) | ExprKind::Str(_) | ExprKind::Local(_) | ExprKind::Ustack { .. } | ExprKind::Pystack { .. } => {}
        }
    }
}
