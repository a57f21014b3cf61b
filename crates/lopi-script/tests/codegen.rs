//! The code generator, by running what it generates: scripts are compiled, their code mapped
//! into this process and called on a context, with Rust helpers standing in for the runtime
//! (`codegen/harness.rs`). Every run also checks the ABI: callee-saved registers given back,
//! the stack aligned at each helper call, keys of the right length, strings NUL-padded.
//!
//! Here: integer semantics, control flow, locals, builtins, `exit()` and what `compile`
//! promises about the code itself; maps, strings and stacks in their own files; the property
//! test against an interpreter in `codegen/property.rs`.
mod common;
#[path = "codegen/harness.rs"]
mod harness;
#[path = "codegen/interp.rs"]
mod interp;
#[path = "codegen/maps.rs"]
mod maps;
#[path = "codegen/property.rs"]
mod property;
#[path = "codegen/strings.rs"]
mod strings;

use common::{compile, script, SCRIPTS};
use harness::{eval, printed_int, s, Script, Value};
use lopi_script::codegen::abi::{Helpers, ScriptCtx};
use lopi_script::codegen::{self, CodegenError, MAX_FRAME};
use lopi_script::ir::{ConvKind, Expr, ExprKind, Piece, StrId, Type};

const NO_ARGS: [i64; 6] = [0; 6];

fn value(expr: &str) -> i64 {
    let (v, faults) = eval(expr, NO_ARGS);
    assert_eq!(faults, 0, "{expr}");
    v
}

#[test]
fn arithmetic_follows_precedence() {
    let cases: &[(&str, i64)] = &[
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("7 / 2", 3),
        ("-7 / 2", -3),
        ("-7 % 3", -1),
        ("7 % -3", 1),
        ("2 * 3 % 4", 2),
        ("1 << 4 + 1", 32),
        ("1 | 6 & 3 ^ 1", 3),
        ("1 + 2 < 4 == 1", 1),
        ("~0", -1),
        ("- -5", 5),
        ("!0", 1),
        ("!7", 0),
        ("0xffff_ffff_ffff_ffff", -1),
        ("1_000_000 * 1_000_000", 1_000_000_000_000),
    ];
    for &(expr, expected) in cases {
        assert_eq!(value(expr), expected, "{expr}");
    }
}

#[test]
fn overflow_wraps() {
    let cases: &[(&str, i64)] = &[
        ("0x7fffffffffffffff + 1", i64::MIN),
        ("-9223372036854775808 - 1", i64::MAX),
        ("0x7fffffffffffffff * 2", -2),
        ("-(-9223372036854775808)", i64::MIN),
        ("0x8000000000000000 * -1", i64::MIN),
    ];
    for &(expr, expected) in cases {
        assert_eq!(value(expr), expected, "{expr}");
    }
}

#[test]
fn division_by_zero_is_zero_and_a_fault() {
    assert_eq!(eval("arg0 / arg1", [5, 0, 0, 0, 0, 0]), (0, 1));
    assert_eq!(eval("arg0 % arg1", [5, 0, 0, 0, 0, 0]), (0, 1));
    assert_eq!(eval("arg0 / arg1 + arg0 % arg1 + 1", [5, 0, 0, 0, 0, 0]), (1, 2));
    // Arguments are unsigned, and so is what they divide.
    assert_eq!(eval("arg0 / arg1", [-7, 2, 0, 0, 0, 0]), (((-7i64 as u64) / 2) as i64, 0));
    assert_eq!(eval("arg0 % arg1", [-7, 2, 0, 0, 0, 0]), (1, 0));
    assert_eq!(eval("arg0 / arg1", [7, -1, 0, 0, 0, 0]), (0, 0));
    // The two cases where idiv traps, signed.
    assert_eq!(value("-9223372036854775808 / -1"), i64::MIN);
    assert_eq!(value("-9223372036854775808 % -1"), 0);
    assert_eq!(value("7 / -1"), -7);
    let script = Script::new("func:foo { $x = arg0; $x /= arg1; @m = arg0; @m %= arg1; printf(\"%d %d\", $x, @m); }");
    let (ctx, rt) = script.run_args([9, 0, 0, 0, 0, 0]);
    assert_eq!((rt.printfs[0].args.clone(), ctx.faults), (vec![Value::Int(0), Value::Int(0)], 2));
}

#[test]
fn shifts_take_their_count_modulo_64() {
    let cases: &[(&str, i64)] = &[
        ("1 << 3", 8),
        ("1 << 63", i64::MIN),
        ("1 << 64", 1),
        ("1 << 65", 2),
        ("1 << -1", i64::MIN),
        ("-16 >> 2", -4),
        ("-1 >> 63", -1),
        ("0x8000000000000000 >> 63", -1),
        ("256 >> 68", 16),
    ];
    for &(expr, expected) in cases {
        assert_eq!(value(expr), expected, "{expr}");
    }
    assert_eq!(eval("arg0 << arg1", [3, 66, 0, 0, 0, 0]).0, 12);
    // An unsigned left operand shifts right logically.
    assert_eq!(eval("arg0 >> arg1", [-64, 3, 0, 0, 0, 0]).0, ((-64i64 as u64) >> 3) as i64);
    assert_eq!(eval("-64 >> arg1", [0, 3, 0, 0, 0, 0]).0, -8);
}

#[test]
fn comparisons_are_unsigned_where_an_operand_is() {
    // bpftrace's classify: `arg0 < 0` is never true, a negative int's bits are a large uint64.
    let cases: &[(&str, [i64; 6], i64)] = &[
        ("arg0 < 0", [-3, 0, 0, 0, 0, 0], 0),
        ("arg0 > 1000", [-3, 0, 0, 0, 0, 0], 1),
        ("arg0 <= arg1", [1, -1, 0, 0, 0, 0], 1),
        ("arg0 >= arg1", [1, -1, 0, 0, 0, 0], 0),
        ("arg0 == -3", [-3, 0, 0, 0, 0, 0], 1),
        ("-1 < 1", [0; 6], 1),
    ];
    for &(expr, args, expected) in cases {
        assert_eq!(eval(expr, args), (expected, 0), "{expr} with {args:?}");
    }
    // min() and max() compare as signed whatever the values (bpftrace's do); compound
    // assignments of unsigned values divide and shift as unsigned.
    let script = Script::new("func:foo { @lo = min(arg0); @hi = max(arg0); $x = arg0; $x /= 2; @m = arg0; @m >>= 60; printf(\"%d %d\", $x, @m); }");
    let mut rt = script.runtime();
    for v in [5, -1] {
        script.run(0, &mut harness::ctx([v, 0, 0, 0, 0, 0]), &mut rt);
    }
    assert_eq!((rt.words("lo", &[]), rt.words("hi", &[])), (Some(vec![-1, 1]), Some(vec![5, 1])));
    assert_eq!(rt.printfs[1].args, [Value::Int((u64::MAX / 2) as i64), Value::Int(15)]);
}

#[test]
fn comparisons_are_signed() {
    let cases: &[(&str, i64)] = &[
        ("-1 < 1", 1),
        ("0xffffffffffffffff > 0", 0),
        ("3 <= 3", 1),
        ("3 >= 4", 0),
        ("2 == 2", 1),
        ("2 != 2", 0),
        ("-9223372036854775808 < 0x7fffffffffffffff", 1),
        ("5 > 4 > 0", 1),
    ];
    for &(expr, expected) in cases {
        assert_eq!(value(expr), expected, "{expr}");
    }
}

/// The builtin helper calls of a run, by number.
fn builtin_calls(rt: &harness::Runtime) -> Vec<String> {
    rt.calls.iter().filter(|c| c.starts_with("builtin ")).cloned().collect()
}

#[test]
fn and_or_short_circuit() {
    let cases: &[(&str, i64, &[&str])] = &[
        ("0 && pid", 0, &[]),
        ("1 || pid", 1, &[]),
        ("1 && pid", 1, &["builtin 0"]),
        ("0 || pid", 1, &["builtin 0"]),
        ("5 && 7", 1, &[]),
        ("0 || 0", 0, &[]),
        ("!(tid && 0)", 1, &["builtin 1"]),
        ("0 && pid || cpu", 1, &["builtin 2"]),
    ];
    for &(expr, expected, calls) in cases {
        let script = Script::new(&format!("func:foo {{ printf(\"%d\", {expr}); }}"));
        let (_, rt) = script.run_args(NO_ARGS);
        assert_eq!((printed_int(&rt), builtin_calls(&rt)), (expected, calls.iter().map(|c| c.to_string()).collect::<Vec<_>>()), "{expr}");
    }
    // The right side's fault does not happen either.
    assert_eq!(eval("arg0 && arg1 / arg2", NO_ARGS), (0, 0));
    assert_eq!(eval("arg0 || arg1 / arg2", [1, 0, 0, 0, 0, 0]), (1, 0));
}

#[test]
fn ternaries_evaluate_one_branch() {
    assert_eq!(eval("arg0 > 0 ? 10 : 20", [1, 0, 0, 0, 0, 0]).0, 10);
    // `arg0` is unsigned: -1 is above 0 there.
    assert_eq!(eval("arg0 > 0 ? 10 : 20", [-1, 0, 0, 0, 0, 0]).0, 10);
    assert_eq!(eval("arg0 ? arg1 ? 1 : 2 : arg2 ? 3 : 4", [0, 0, 1, 0, 0, 0]).0, 3);
    assert_eq!(eval("arg0 ? 1 : arg1 / arg0", [0, 8, 0, 0, 0, 0]), (0, 1));
    let script = Script::new("func:foo { printf(\"%d\", arg0 ? pid : tid); }");
    let (_, rt) = script.run_args([1, 0, 0, 0, 0, 0]);
    assert_eq!((printed_int(&rt), builtin_calls(&rt)), (4242, vec!["builtin 0".to_string()]));
}

#[test]
fn locals_of_every_type() {
    let src = "func:foo { $i = arg0 * 2; $s = comm; $k = ustack(2); $i += 1; $t = $s; $i <<= 1; \
               printf(\"%d %s %s\", $i, $s, $t); print($k); $s = \"x\"; print($s); }";
    let script = Script::new(src);
    let (_, rt) = script.run_args([5, 0, 0, 0, 0, 0]);
    assert_eq!(rt.printfs[0].args, [Value::Int(22), s("sqlite3"), s("sqlite3")]);
    assert_eq!(rt.printed, [Value::Stack(vec![0x40_1000, 0x40_2000]), s("x")]);
}

#[test]
fn compound_assignments_on_locals_and_maps() {
    let script = Script::new(&format!("{} end {{ printf(\"%d\", @k[1]); }}", script("compound")));
    let (ctx, mut rt) = script.run_args(NO_ARGS);
    // x: 1, 3, 2, 6, 3, 3, 3, 11, 10, 40, 20, 21, 20; @m = 20 + 1 - 1.
    assert_eq!(ctx.faults, 0);
    assert_eq!(rt.words("m", &[]), Some(vec![20]));
    assert_eq!(rt.words("k", &[harness::K::Int(1)]), Some(vec![-2]));
    script.run(1, &mut harness::ctx(NO_ARGS), &mut rt);
    assert_eq!(rt.printfs[0].args, [Value::Int(-2)]);
}

#[test]
fn if_chains_take_the_first_arm_that_holds() {
    let script = Script::named("if_chain");
    for (arg, map) in [(11, "big"), (7, "mid"), (1, "small")] {
        let (_, rt) = script.run_args([arg, 0, 0, 0, 0, 0]);
        let present: Vec<&str> = ["big", "mid", "small"].into_iter().filter(|m| rt.len(m) > 0).collect();
        assert_eq!(present, [map], "arg0 = {arg}");
    }
    let script = Script::named("definite");
    let (_, rt) = script.run_args(NO_ARGS);
    assert_eq!(printed_int(&rt), 1);
}

#[test]
fn predicates_guard_the_body() {
    let script = Script::new("func:foo /arg0 > 10 && comm == \"sqlite3\"/ { @n = count(); }");
    let mut rt = script.runtime();
    for arg in [5, 15, 20, 10] {
        script.run(0, &mut harness::ctx([arg, 0, 0, 0, 0, 0]), &mut rt);
    }
    assert_eq!(rt.words("n", &[]), Some(vec![2]));
    rt.comm = b"other".to_vec();
    script.run(0, &mut harness::ctx([50, 0, 0, 0, 0, 0]), &mut rt);
    assert_eq!(rt.words("n", &[]), Some(vec![2]));
}

#[test]
fn builtins_from_the_context_and_the_helpers() {
    let script = Script::new("func:foo { printf(\"%d %d\", arg0, arg5); printf(\"%d %d %d %d %s %s %s\", pid, tid, cpu, nsecs, comm, func, probe); }\n\
                              func:foo:return { printf(\"%d %d\", retval, elapsed); }");
    let mut ctx = ScriptCtx { args: [1, 2, 3, 4, 5, u64::MAX], retval: (-12i64) as u64, elapsed_ns: 777, ..ScriptCtx::default() };
    let mut rt = script.runtime();
    script.run(0, &mut ctx, &mut rt);
    script.run(1, &mut ctx, &mut rt);
    assert_eq!(rt.printfs[0].args, [Value::Int(1), Value::Int(-1)]);
    let helpers = [Value::Int(4242), Value::Int(4243), Value::Int(3), Value::Int(1_000_000_007), s("sqlite3"), s("foo"), s("func:foo")];
    assert_eq!(rt.printfs[1].args, helpers);
    assert_eq!(rt.printfs[2].args, [Value::Int(-12), Value::Int(777)]);
    let strs: Vec<&String> = rt.calls.iter().filter(|c| c.starts_with("builtin_str")).collect();
    assert_eq!(strs, ["builtin_str 0", "builtin_str 1", "builtin_str 2"]);
}

#[test]
fn bpftraces_builtins_elapsed_args_id_and_join() {
    // `elapsed` at an entry is the time since the trace began (a helper); `args.id` the call's
    // number from the context; `join` hands the array and the separator to its helper.
    let script = Script::new("func:foo { printf(\"%d\", elapsed); join(arg0 + 8, \"-\"); join(arg1); }\n\
                              tracepoint:raw_syscalls:sys_exit { printf(\"%d %d\", args->id, args->ret); }");
    let mut ctx = ScriptCtx { args: [0x1000, 0x2000, 0, 0, 0, 0], retval: (-2i64) as u64, nr: 257, ..ScriptCtx::default() };
    let mut rt = script.runtime();
    script.run(0, &mut ctx, &mut rt);
    script.run(1, &mut ctx, &mut rt);
    assert_eq!(rt.printfs[0].args, [Value::Int(harness::SINCE_START as i64)]);
    let sep = |text: &[u8]| script.program.strings.iter().position(|s| s == text).unwrap();
    let joins: Vec<String> = rt.calls.iter().filter(|c| c.starts_with("join") || c.starts_with("builtin")).cloned().collect();
    assert_eq!(joins, ["builtin 4".to_string(), format!("join 0x1008 {}", sep(b"-")), format!("join 0x2000 {}", sep(b" "))]);
    assert_eq!(rt.printfs[1].args, [Value::Int(257), Value::Int(-2)]);
}

#[test]
fn usym_is_its_address_and_uid_gid_cpid_come_from_the_helper() {
    let script = Script::new("func:foo { printf(\"%s %d %d %d\", usym(arg2), uid, gid, cpid); @[usym(arg2 + 1)] = count(); print(usym(arg2)); }");
    let (_, rt) = script.run_args([0, 0, 0x40_1000, 0, 0, 0]);
    assert_eq!(rt.printfs[0].args, [Value::Int(0x40_1000), Value::Int(1005), Value::Int(1006), Value::Int(1007)]);
    assert!(rt.slot("", &[harness::K::Int(0x40_1001)]).is_some());
    assert_eq!(rt.printed, [Value::Uint(0x40_1000)]);
    // `%s` of a usym is a word, not a string's bytes.
    assert_eq!(script.program.formats[0].pieces.iter().filter(|p| matches!(p, Piece::Conv(c) if c.kind == ConvKind::Sym)).count(), 1);
}

#[test]
fn exit_sets_the_flag_and_ends_the_run() {
    let script = Script::new("func:foo { @a = 1; if (arg0) { exit(); } @b = 2; }");
    let (ctx, rt) = script.run_args([1, 0, 0, 0, 0, 0]);
    assert_eq!((ctx.exit, rt.len("a"), rt.len("b")), (1, 1, 0));
    let (ctx, rt) = script.run_args(NO_ARGS);
    assert_eq!((ctx.exit, rt.len("b")), (0, 1));
}

#[test]
fn frames_past_a_page_run() {
    let locals: String = (0..6).map(|i| format!("$s{i} = ustack({}); ", i + 1)).collect();
    let script = Script::new(&format!("func:foo {{ {locals} print($s5); print($s0); }}"));
    let (_, rt) = script.run_args(NO_ARGS);
    assert_eq!(rt.printed, [Value::Stack(vec![0x40_1000, 0x40_2000, 0x40_3000]), Value::Stack(vec![0x40_1000])]);
}

/// Nesting near the parser's limit: a spill per level of the sum, a live buffer per level of the
/// string ternaries.
#[test]
fn deep_nesting_runs() {
    let sum = (0..50).fold("arg1".to_string(), |inner, _| format!("(arg0 + {inner})"));
    assert_eq!(eval(&sum, [2, 1, 0, 0, 0, 0]).0, 101);
    let strs = (0..30).fold("comm".to_string(), |inner, i| format!("(arg0 == {i} ? \"s{i}\" : {inner})"));
    let script = Script::new(&format!("func:foo {{ printf(\"%s\", {strs}); }}"));
    let (_, rt) = script.run_args([29, 0, 0, 0, 0, 0]);
    assert_eq!(rt.printfs[0].args, [s("s29")]);
    let (_, rt) = script.run_args([30, 0, 0, 0, 0, 0]);
    assert_eq!(rt.printfs[0].args, [s("sqlite3")]);
}

#[test]
fn every_valid_script_compiles_and_runs() {
    for (name, src) in SCRIPTS {
        let script = Script::new(src);
        assert_eq!(script.compiled.probes.len(), script.program.probes.len(), "{name}");
        let mut rt = script.runtime();
        rt.memory.push((0x1000, b"some text\0".to_vec()));
        for probe in 0..script.program.probes.len() {
            for args in [NO_ARGS, [0x1000, 1, 2, 3, 4, 5], [-1, i64::MIN, i64::MAX, 0, 7, 0]] {
                script.run(probe, &mut harness::ctx(args), &mut rt);
            }
        }
    }
}

const FAR: Helpers = Helpers {
    builtin: 0x7000_0000,
    builtin_str: 0x7000_0010,
    map_slot: 0x7000_0020,
    map_lookup: 0x7000_0030,
    map_delete: 0x7000_0040,
    map_clear: 0x7000_0050,
    read_str: 0x7000_0060,
    ustack: 0x7000_0070,
    printf: 0x7000_0080,
    print_map: 0x7000_0090,
    print_value: 0x7000_00a0,
    pystack: 0x7000_00b0,
    join: 0x7000_00c0,
};

/// `helpers` moved by `delta`.
fn moved(helpers: Helpers, delta: u64) -> Helpers {
    let m = |a: u64| a + delta;
    Helpers {
        builtin: m(helpers.builtin),
        builtin_str: m(helpers.builtin_str),
        map_slot: m(helpers.map_slot),
        map_lookup: m(helpers.map_lookup),
        map_delete: m(helpers.map_delete),
        map_clear: m(helpers.map_clear),
        read_str: m(helpers.read_str),
        ustack: m(helpers.ustack),
        printf: m(helpers.printf),
        print_map: m(helpers.print_map),
        print_value: m(helpers.print_value),
        pystack: m(helpers.pystack),
        join: m(helpers.join),
    }
}

#[test]
fn code_is_position_independent_but_for_helper_calls() {
    for (name, src) in SCRIPTS {
        let program = compile(src);
        let at = 0x4000_0000;
        let here = codegen::compile(&program, &FAR, at).unwrap();
        let there = codegen::compile(&program, &moved(FAR, 0x12_3000), at + 0x12_3000).unwrap();
        assert_eq!(here, there, "{name}");
        assert!(here.probes.windows(2).all(|w| w[0] < w[1]), "{name}");
    }
}

#[test]
fn helpers_out_of_reach_are_refused() {
    let program = compile("func:foo { @n[tid] = count(); }");
    let error = codegen::compile(&program, &FAR, 0x7f00_0000_0000).unwrap_err();
    assert!(matches!(error, CodegenError::HelperOutOfReach { helper: "builtin", .. }), "{error}");
    // Helpers the code does not call may be anywhere.
    let program = compile("func:foo { exit(); }");
    assert!(codegen::compile(&program, &FAR, 0x7f00_0000_0000).is_ok());
}

#[test]
fn frames_are_bounded() {
    let locals: String = (0..20).map(|i| format!("$s{i} = comm; ")).collect();
    let mut program = compile(&format!("func:foo {{ {locals} }}"));
    program.str_size = 4096;
    let error = codegen::compile(&program, &FAR, 0x4000_0000).unwrap_err();
    assert!(matches!(error, CodegenError::FrameTooLarge { probe: 0, bytes } if bytes > MAX_FRAME), "{error}");
    program.str_size = MAX_FRAME + 1;
    assert!(matches!(codegen::compile(&program, &FAR, 0x4000_0000), Err(CodegenError::TooLarge { .. })));
}

#[test]
fn ill_typed_programs_are_refused_not_compiled() {
    let mut program = compile("func:foo /arg0/ { }");
    program.strings.push(b"x".to_vec());
    program.probes[0].predicate = Some(Expr { ty: Type::Int, kind: ExprKind::Str(StrId(0)) });
    assert!(matches!(codegen::compile(&program, &FAR, 0x4000_0000), Err(CodegenError::Unchecked(_))));
}

/// A map read by the assignment that first sets it (`@n = @n + 1`, bpftrace's counter idiom)
/// is an integer that reads 0 before it is set.
#[test]
fn a_map_can_count_itself_up_from_zero() {
    let script = Script::new("begin { @depth[1] = @depth[1] + 1; @depth[1] = @depth[1] + 1; @start[1, @depth[1]] = 7; }");
    let (ctx, rt) = script.run_args(NO_ARGS);
    assert_eq!(ctx.faults, 0);
    assert_eq!(rt.words("depth", &[harness::K::Int(1)]), Some(vec![2]));
    assert_eq!(rt.words("start", &[harness::K::Int(1), harness::K::Int(2)]), Some(vec![7]));
}
