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
}

impl crate::walk::Visit for Needs {
    fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Exit => self.exit = true,
            Stmt::Join { .. } => self.user_strings = true,
            _ => {}
        }
    }

    fn expr(&mut self, expr: &Expr) {
        match &expr.kind {
            ExprKind::Builtin(b) => {
                self.builtins.insert(*b);
            }
            ExprKind::Ustack { depth } => self.ustack = self.ustack.max(Some(*depth)),
            ExprKind::Pystack { .. } => self.pystack = true,
            ExprKind::ReadStr { .. } => self.user_strings = true,
            _ => {}
        }
    }
}

impl Program {
    /// What the program's probes use.
    pub fn needs(&self) -> Needs {
        let mut needs = Needs::default();
        for probe in &self.probes {
            crate::walk::probe(&mut needs, probe);
        }
        needs
    }
}
