//! An interpreter of `int` expressions over the IR, with the semantics the code generator
//! promises: the operators as `lopi_script::host::int_op` computes them (which lopi's own
//! probes run by), unsigned where an operand is, `&&` `||` `?:` evaluating only what they need.
use lopi_script::ir::{BinOp, Builtin, Expr, ExprKind, Type, UnOp};

pub struct Env {
    pub args: [i64; 6],
    pub pid: i64,
    /// Faults counted so far.
    pub faults: u64,
    /// `pid` reads so far: calls of the `builtin` helper.
    pub pid_reads: u64,
}

pub fn eval(expr: &Expr, env: &mut Env) -> i64 {
    match &expr.kind {
        ExprKind::Int(v) => *v,
        ExprKind::Builtin(Builtin::Arg(n)) => env.args[usize::from(*n)],
        ExprKind::Builtin(Builtin::Pid) => {
            env.pid_reads += 1;
            env.pid
        }
        ExprKind::Unary { op, expr } => {
            let v = eval(expr, env);
            match op {
                UnOp::Neg => v.wrapping_neg(),
                UnOp::BitNot => !v,
                UnOp::Not => i64::from(v == 0),
            }
        }
        ExprKind::Binary { op: BinOp::And, lhs, rhs } => i64::from(eval(lhs, env) != 0 && eval(rhs, env) != 0),
        ExprKind::Binary { op: BinOp::Or, lhs, rhs } => i64::from(eval(lhs, env) != 0 || eval(rhs, env) != 0),
        ExprKind::Binary { op, lhs, rhs } => {
            let (l, r) = (eval(lhs, env), eval(rhs, env));
            lopi_script::host::int_op(*op, l, r, Type::unsigned_op(*op, lhs.ty, rhs.ty)).unwrap_or_else(|| {
                env.faults += 1;
                0
            })
        }
        ExprKind::Ternary { cond, then, els } => {
            if eval(cond, env) != 0 {
                eval(then, env)
            } else {
                eval(els, env)
            }
        }
        other => panic!("not an int expression of the generator: {other:?}"),
    }
}
