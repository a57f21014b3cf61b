//! An interpreter of `int` expressions over the IR, with the semantics the code generator
//! promises: two's complement wrapping, `x / 0 == x % 0 == 0` with a fault counted,
//! `i64::MIN / -1 == i64::MIN`, shift counts modulo 64, `>>` arithmetic, `&&` `||` `?:`
//! evaluating only what they need.
use lopi_script::ir::{BinOp, Builtin, Expr, ExprKind, UnOp};

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
            match op {
                BinOp::Add => l.wrapping_add(r),
                BinOp::Sub => l.wrapping_sub(r),
                BinOp::Mul => l.wrapping_mul(r),
                BinOp::Div | BinOp::Rem if r == 0 => {
                    env.faults += 1;
                    0
                }
                BinOp::Div => l.wrapping_div(r),
                BinOp::Rem => l.wrapping_rem(r),
                // `wrapping_sh*` take the count modulo the width; `>>` of an i64 is arithmetic.
                BinOp::Shl => l.wrapping_shl(r as u32),
                BinOp::Shr => l.wrapping_shr(r as u32),
                BinOp::Lt => i64::from(l < r),
                BinOp::Le => i64::from(l <= r),
                BinOp::Gt => i64::from(l > r),
                BinOp::Ge => i64::from(l >= r),
                BinOp::Eq => i64::from(l == r),
                BinOp::Ne => i64::from(l != r),
                BinOp::BitAnd => l & r,
                BinOp::BitXor => l ^ r,
                BinOp::BitOr => l | r,
                BinOp::And | BinOp::Or => unreachable!("handled above"),
            }
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
