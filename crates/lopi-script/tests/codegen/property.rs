//! Random integer expressions, compiled and run, against the interpreter in `interp.rs`: the
//! value, the faults counted and the `pid` helper calls made (which `&&`, `||` and `?:` skip)
//! must all agree. Deterministic (fixed seed), so a failure names its expression.
use crate::common::Rng;
use crate::harness::{printed_int, Script};
use crate::interp::{self, Env};
use lopi_script::ir::Stmt;

const LITERALS: &[&str] = &["0", "1", "2", "3", "7", "63", "64", "65", "-1", "-64", "9223372036854775807", "-9223372036854775808", "0x8000000000000000", "0xffffffffffffffff", "1_000_003"];
const BINARY: &[&str] = &["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "<", "<=", ">", ">=", "==", "!=", "&&", "||"];
const UNARY: &[&str] = &["-", "~", "!"];
/// Argument values: edges, and `arg5` is always 0 (a divisor the checker cannot refuse).
const ARGS: &[i64] = &[0, 1, -1, 2, 63, 64, i64::MIN, i64::MAX, -7, 1 << 40];

fn leaf(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=4 => LITERALS[rng.below(LITERALS.len())].to_string(),
        5 => format!("{:#x}", rng.next()),
        6 => "pid".to_string(),
        _ => format!("arg{}", rng.below(6)),
    }
}

/// An expression of at most `depth` levels; a quarter of the binary operators are written
/// without parentheses, so that precedence shapes the tree too.
fn expr(rng: &mut Rng, depth: usize) -> String {
    if depth == 0 || rng.below(5) == 0 {
        return leaf(rng);
    }
    match rng.below(10) {
        0..=5 => {
            let op = BINARY[rng.below(BINARY.len())];
            let lhs = expr(rng, depth - 1);
            let mut rhs = expr(rng, depth - 1);
            // A literal 0 divisor is refused by the checker, and a bare `0 + x` would make one.
            if matches!(op, "/" | "%") {
                if rhs == "0" {
                    rhs = "arg5".to_string();
                } else if rhs.contains(' ') && !rhs.starts_with('(') {
                    rhs = format!("({rhs})");
                }
            }
            match rng.below(4) {
                0 => format!("{lhs} {op} {rhs}"),
                _ => format!("({lhs} {op} {rhs})"),
            }
        }
        6 | 7 => format!("({} {})", UNARY[rng.below(UNARY.len())], expr(rng, depth - 1)),
        _ => format!("({} ? {} : {})", expr(rng, depth - 1), expr(rng, depth - 1), expr(rng, depth - 1)),
    }
}

#[test]
fn random_expressions_match_the_interpreter() {
    let mut rng = Rng(0x5eed_c0de_0001);
    for case in 0..400 {
        let text = expr(&mut rng, 1 + case % 6);
        let mut args = [0; 6];
        args[..5].iter_mut().for_each(|a| *a = ARGS[rng.below(ARGS.len())]);
        let script = Script::new(&format!("func:foo {{ printf(\"%d\", {text}); }}"));
        let Stmt::Printf { args: exprs, .. } = &script.program.probes[0].body[0] else { panic!("{text}") };
        let (ctx, rt) = script.run_args(args);
        let mut env = Env { args, pid: rt.pid as i64, faults: 0, pid_reads: 0 };
        let expected = interp::eval(&exprs[0], &mut env);
        let pid_reads = rt.calls.iter().filter(|c| *c == "builtin 0").count() as u64;
        assert_eq!((printed_int(&rt), ctx.faults, pid_reads), (expected, env.faults, env.pid_reads), "case {case}: {text} with {args:?}");
    }
}
