//! What a program uses, for the planner: which context values its probes read (return
//! values need return probes, `elapsed` needs the entries too), whether it walks stacks or
//! reads the traced program's memory.
use crate::ir::{Builtin, Expr, ExprKind, Program, Stmt};
use std::collections::BTreeSet;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Every builtin read anywhere.
    pub builtins: BTreeSet<Builtin>,
    /// Deepest `ustack(n)`; `None` when no stack is taken.
    pub ustack: Option<u8>,
    /// Some `pystack` reads the Python interpreter's frames.
    pub pystack: bool,
    /// Some `str()` reads the traced program's memory.
    pub user_strings: bool,
    /// Some probe calls `exit()`.
    pub exit: bool,
}

impl Needs {
    pub fn retval(&self) -> bool {
        self.builtins.contains(&Builtin::Retval)
    }

    pub fn elapsed(&self) -> bool {
        self.builtins.contains(&Builtin::Elapsed)
    }

    /// Bit `n` set when `argN` is read.
    pub fn args(&self) -> u8 {
        self.builtins.iter().fold(0, |mask, b| match b {
            Builtin::Arg(n) => mask | 1 << n,
            _ => mask,
        })
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for stmt in stmts {
            match stmt {
                Stmt::SetLocal { value, .. } | Stmt::Print(value) => self.expr(value),
                Stmt::SetMap { keys, value, .. } => {
                    keys.iter().for_each(|k| self.expr(k));
                    self.expr(value);
                }
                Stmt::Aggregate { keys, value, .. } => keys.iter().chain(value).for_each(|e| self.expr(e)),
                Stmt::Delete { keys, .. } => keys.iter().for_each(|k| self.expr(k)),
                Stmt::If { arms, els } => {
                    for arm in arms {
                        self.expr(&arm.cond);
                        self.stmts(&arm.body);
                    }
                    self.stmts(els);
                }
                Stmt::Printf { args, .. } => args.iter().for_each(|a| self.expr(a)),
                Stmt::Exit => self.exit = true,
                Stmt::Join { array, .. } => {
                    self.user_strings = true;
                    self.expr(array);
                }
                Stmt::Clear(_) | Stmt::PrintMap { .. } => {}
            }
        }
    }

    fn expr(&mut self, expr: &Expr) {
        match &expr.kind {
            ExprKind::Builtin(b) => {
                self.builtins.insert(*b);
            }
            ExprKind::Ustack { depth } => self.ustack = self.ustack.max(Some(*depth)),
            ExprKind::Pystack { .. } => self.pystack = true,
            ExprKind::ReadStr { ptr, len } => {
                self.user_strings = true;
                self.expr(ptr);
                len.iter().for_each(|l| self.expr(l));
            }
            ExprKind::Map { keys, .. } => keys.iter().for_each(|k| self.expr(k)),
            ExprKind::Unary { expr, .. } | ExprKind::Usym(expr) => self.expr(expr),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::Ternary { cond, then, els } => {
                self.expr(cond);
                self.expr(then);
                self.expr(els);
            }
            ExprKind::Int(_) | ExprKind::Str(_) | ExprKind::Local(_) => {}
        }
    }
}

impl Program {
    /// What the program's probes use.
    pub fn needs(&self) -> Needs {
        let mut needs = Needs::default();
        for probe in &self.probes {
            probe.predicate.iter().for_each(|p| needs.expr(p));
            needs.stmts(&probe.body);
        }
        needs
    }
}
