//! Valid scripts through parse and check, with what their programs must say: points, map
//! signatures, types of nodes, the shape precedence gives, formats, needs.
mod common;

use common::{compile, script, SCRIPTS};
use lopi_script::ir::{
    AggKind, BinOp, Builtin, ConvKind, Expr, ExprKind, LockEvent, Map, Piece, Point, Program, Spelling, Stmt, Type, UnOp, ValueKind,
};
use lopi_script::limits::DEFAULT_MAX_ENTRIES;

fn named(name: &str) -> Program {
    compile(script(name))
}

fn map<'p>(program: &'p Program, name: &str) -> &'p Map {
    program.maps.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no map @{name}"))
}

fn agg(kind: AggKind) -> ValueKind {
    ValueKind::Agg(kind)
}

fn entry(glob: &str) -> Point {
    Point::FuncEntry { lib: None, glob: glob.into() }
}

fn syscall(glob: &str, ret: bool) -> Point {
    let (glob, spelling) = (glob.to_string(), Spelling::Lopi);
    if ret { Point::SyscallReturn { glob, spelling } } else { Point::SyscallEntry { glob, spelling } }
}

/// The value of statement `i` of probe `p`.
fn value(program: &Program, p: usize, i: usize) -> &Expr {
    match &program.probes[p].body[i] {
        Stmt::SetLocal { value, .. } | Stmt::SetMap { value, .. } | Stmt::Print(value) => value,
        Stmt::Aggregate { value: Some(value), .. } => value,
        other => panic!("no value in {other:?}"),
    }
}

/// An S-expression of `e`, for the shape of trees.
fn shape(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(v) => v.to_string(),
        ExprKind::Local(id) => format!("${}", id.0),
        ExprKind::Builtin(b) => b.name(),
        ExprKind::Binary { op, lhs, rhs } => format!("({} {} {})", op.symbol(), shape(lhs), shape(rhs)),
        ExprKind::Unary { op, expr } => format!("({op:?} {})", shape(expr)),
        ExprKind::Map { map, keys } => format!("@{}[{}]", map.0, keys.iter().map(shape).collect::<Vec<_>>().join(",")),
        other => format!("{other:?}"),
    }
}

#[test]
fn every_script_compiles() {
    for (name, src) in SCRIPTS {
        let program = compile(src);
        assert!(!program.probes.is_empty(), "{name}");
        for probe in &program.probes {
            for point in &probe.points {
                assert!(!point.to_string().is_empty());
            }
        }
    }
}

#[test]
fn hello_prints_with_a_parsed_format() {
    let p = named("hello");
    assert_eq!(p.probes[0].points, [Point::Begin]);
    let Stmt::Printf { format, args } = &p.probes[0].body[0] else { panic!() };
    let pieces = &p.format(*format).pieces;
    assert_eq!(pieces.len(), 5);
    assert!(matches!(pieces[0], Piece::Text(id) if p.string(id) == b"hello "));
    assert!(matches!(pieces[1], Piece::Conv(c) if c.kind == ConvKind::Str));
    assert!(matches!(pieces[3], Piece::Conv(c) if c.kind == ConvKind::Signed));
    assert!(matches!(pieces[4], Piece::Text(id) if p.string(id) == b"\n"));
    assert_eq!(args.iter().map(|a| a.ty).collect::<Vec<_>>(), [Type::Str, Type::Uint]);
    assert_eq!(p.probes[0].body[1], Stmt::Exit);
    assert!(p.needs().exit);
}

#[test]
fn count_by_function() {
    let p = named("count_calls");
    assert_eq!(p.probes[0].points, [entry("sqlite3_*")]);
    let m = map(&p, "calls");
    assert_eq!((m.keys.as_slice(), m.value, m.max_entries), (&[Type::Str][..], agg(AggKind::Count), DEFAULT_MAX_ENTRIES));
    assert!(matches!(&p.probes[0].body[0], Stmt::Aggregate { value: None, keys, .. } if keys[0].kind == ExprKind::Builtin(Builtin::Func)));
}

#[test]
fn latency_pairs_entry_and_return() {
    let p = named("latency");
    assert_eq!(p.probes[1].points, [Point::FuncReturn { lib: None, glob: "sqlite3_step".into() }]);
    let start = map(&p, "start");
    assert_eq!((start.keys.as_slice(), start.value), (&[Type::Uint][..], ValueKind::Plain(Type::Uint)));
    let lat = map(&p, "lat");
    assert_eq!((lat.keys.len(), lat.value), (0, agg(AggKind::Hist)));
    let predicate = p.probes[1].predicate.as_ref().unwrap();
    assert_eq!((predicate.ty, shape(predicate)), (Type::Uint, "@0[tid]".to_string()));
    assert_eq!(shape(value(&p, 1, 0)), "(- nsecs @0[tid])");
    assert!(matches!(&p.probes[1].body[1], Stmt::Delete { keys, .. } if keys.len() == 1));
}

#[test]
fn read_before_assign_in_source_order() {
    let p = named("read_before_assign");
    let start = map(&p, "start");
    assert_eq!((start.keys.as_slice(), start.value), (&[Type::Uint][..], ValueKind::Plain(Type::Uint)));
    assert_eq!(map(&p, "lat").value, agg(AggKind::Hist));
}

#[test]
fn elapsed_and_retval_need_return_probes() {
    let p = named("elapsed");
    assert_eq!(map(&p, "us").value, agg(AggKind::Avg));
    let needs = p.needs();
    assert!(needs.elapsed() && !needs.retval() && needs.args() == 0);
    let p = named("libz_path_return");
    let lib = Some("/usr/lib/x86_64-linux-gnu/libz.so.1".to_string());
    assert_eq!(p.probes[0].points, [Point::FuncReturn { lib, glob: "inflate".into() }]);
    assert!(p.needs().retval());
    let p = named("shared_return");
    assert_eq!(p.probes[0].points, [Point::FuncReturn { lib: None, glob: "foo".into() }, syscall("read", true)]);
    assert_eq!(map(&p, "r").value, agg(AggKind::Sum { unsigned: true }));
}

#[test]
fn library_functions() {
    let p = named("libc_malloc");
    assert_eq!(p.probes[0].points, [Point::FuncEntry { lib: Some("libc.so.6".into()), glob: "malloc".into() }]);
    assert_eq!(p.needs().args(), 0b1);
    let p = named("lib_kinds");
    let lib = Some("libc.so.6".to_string());
    let expected = [Point::FuncEntry { lib: lib.clone(), glob: "free".into() }, Point::FuncReturn { lib, glob: "malloc".into() }];
    assert_eq!(p.probes[0].points, expected);
    let p = named("lib_glob");
    assert_eq!(p.probes[0].points, [Point::FuncEntry { lib: Some("libz.so.1".into()), glob: "*flate".into() }]);
}

#[test]
fn explicit_entry_and_args_mask() {
    let p = named("explicit_entry");
    assert_eq!(p.probes[0].points, [entry("main")]);
    assert_eq!(p.needs().args(), 0b10);
}

#[test]
fn offsets_and_addresses() {
    let p = named("offset");
    assert_eq!(p.probes[0].points, [Point::FuncOffset { lib: None, name: "main".into(), offset: 0x10 }]);
    assert_eq!(p.probes[0].points[0].to_string(), "func:main+0x10");
    let p = named("offset_decimal");
    assert_eq!(p.probes[0].points, [Point::FuncOffset { lib: None, name: "foo".into(), offset: 12 }]);
    assert_eq!(map(&p, "x").value, ValueKind::Plain(Type::Uint));
    let p = named("addr");
    assert_eq!(p.probes[0].points, [Point::Addr(0x401000)]);
}

#[test]
fn usdt_markers_give_their_arguments() {
    let p = compile("usdt:./prog:myprov:t*ck { @[arg0, arg1] = count(); }");
    assert_eq!(p.probes[0].points, [Point::Usdt { lib: "./prog".into(), provider: Some("myprov".into()), name: "t*ck".into() }]);
    assert_eq!(p.probes[0].points[0].to_string(), "usdt:./prog:myprov:t*ck");
    assert_eq!(p.needs().args(), 0b11);
    assert_eq!(compile("usdt:./prog:tock { }").probes[0].points[0].to_string(), "usdt:./prog:tock");
}

#[test]
fn syscalls() {
    let p = named("syscall_read");
    assert_eq!(p.probes[0].points, [syscall("read", false)]);
    assert_eq!(map(&p, "fds").keys, [Type::Uint]);
    let p = named("syscall_errors");
    // It reads `probe`: a point per call, named as the call.
    let calls = ["read", "write", "open", "openat", "stat", "close", "mmap", "futex", "clone", "exit_group", "execve", "execveat"];
    assert_eq!(p.probes[0].points, calls.map(|c| syscall(c, true)));
    assert_eq!(p.probes[0].points[4].to_string(), "syscall:stat:return");
    assert_eq!(map(&p, "errors").keys, [Type::Str]);
    assert_eq!(shape(p.probes[0].predicate.as_ref().unwrap()), "(< retval 0)");
    let p = named("syscall_glob");
    assert_eq!(p.probes[0].points, [syscall("[rw]*", false)]);
    let p = named("syscall_lhist");
    assert_eq!(map(&p, "fd").value, agg(AggKind::Lhist { min: 0, max: 100, step: 10 }));
}

#[test]
fn lock_points() {
    let p = named("locks");
    assert_eq!(p.probes[0].points, [Point::Lock(LockEvent::Acquire), Point::Lock(LockEvent::Release)]);
    let p = named("lock_all");
    assert_eq!(p.probes[0].points, LockEvent::ALL.map(Point::Lock));
    assert_eq!(p.probes[0].points[3].to_string(), "lock:contended");
    let p = named("lock_events");
    assert_eq!((p.probes[0].points[0].clone(), p.probes[1].points[0].clone()), (Point::Lock(LockEvent::Contended), Point::Lock(LockEvent::Acquired)));
}

#[test]
fn intervals_and_printing_whole_maps() {
    let p = named("interval_print");
    assert_eq!(p.probes[0].points, [Point::Interval { ns: 500_000_000 }]);
    assert_eq!(p.probes[0].body.len(), 2);
    assert!(matches!(p.probes[0].body[0], Stmt::PrintMap { map: id, top: 0, div: 1 } if p.map(id).name == "calls"));
    assert!(matches!(p.probes[0].body[1], Stmt::Clear(_)));
    assert_eq!(map(&p, "calls").value, agg(AggKind::Count));
    let p = named("interval_units");
    let ns: Vec<Point> = [1_000_000_000, 100_000_000, 2_000_000, 1_000_000].into_iter().map(|ns| Point::Interval { ns }).collect();
    assert_eq!(p.probes.iter().map(|pr| pr.points[0].clone()).collect::<Vec<_>>(), ns);
    assert_eq!(p.probes[1].points[0].to_string(), "interval:100ms");
    assert!(p.probes[1].body.is_empty());
}

#[test]
fn thread_points_begin_and_end() {
    let p = named("threads");
    assert_eq!((p.probes[0].points[0].clone(), p.probes[1].points[0].clone()), (Point::ThreadStart, Point::ThreadExit));
    let p = named("begin_end");
    assert_eq!(p.probes[1].points, [Point::End]);
    assert!(matches!(&p.probes[1].body[0], Stmt::Printf { args, .. } if shape(&args[0]) == "(- nsecs @0[])"));
    assert!(matches!(p.probes[1].body[1], Stmt::PrintMap { .. }));
}

#[test]
fn precedence_follows_c() {
    let p = named("precedence");
    assert_eq!(shape(value(&p, 0, 0)), "(+ 1 (* 2 3))");
    assert_eq!(shape(value(&p, 0, 1)), "(|| (&& $0 0) 1)");
    let p = named("all_binops");
    assert_eq!(shape(value(&p, 0, 1)), "(>> (<< (- (+ (% (/ (* $0 2) 3) 4) 5) 6) 1) 1)");
    assert_eq!(shape(value(&p, 0, 8)), "(| (^ (& $0 $1) $2) 1)");
    assert!(p.probes[0].locals.iter().all(|l| l.ty == Type::Int));
    let ops: Vec<BinOp> = (2..8).map(|i| match &value(&p, 0, i).kind {
        ExprKind::Binary { op, .. } => *op,
        other => panic!("{other:?}"),
    }).collect();
    assert_eq!(ops, [BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge, BinOp::Eq, BinOp::Ne]);
}

#[test]
fn unary_operators() {
    let p = named("unary");
    assert_eq!(shape(value(&p, 0, 0)), "(Neg 5)");
    assert_eq!(shape(value(&p, 0, 1)), "(BitNot $0)");
    assert_eq!(shape(value(&p, 0, 2)), "(Not $1)");
    assert!(matches!(&value(&p, 0, 3).kind, ExprKind::Unary { op: UnOp::Neg, expr } if matches!(expr.kind, ExprKind::Unary { .. })));
}

#[test]
fn strings_ternaries_and_comparisons() {
    let p = named("ternary_str");
    assert_eq!(p.probes[0].locals[0].ty, Type::Str);
    let v = value(&p, 0, 0);
    assert!(matches!(&v.kind, ExprKind::Ternary { then, .. } if then.ty == Type::Str) && v.ty == Type::Str);
    let p = named("string_eq");
    let predicate = p.probes[0].predicate.as_ref().unwrap();
    assert!(matches!(&predicate.kind, ExprKind::Binary { op: BinOp::Eq, lhs, rhs } if lhs.ty == Type::Str && rhs.ty == Type::Str));
    assert_eq!(map(&p, "by_name").keys, [Type::Str]);
    assert!(p.needs().user_strings);
    let p = named("str_len");
    assert_eq!(map(&p, "s").value, ValueKind::Plain(Type::Str));
    assert!(matches!(&value(&p, 0, 0).kind, ExprKind::ReadStr { len: Some(_), .. }));
    let p = named("string_map_values");
    assert_eq!(map(&p, "last").value, ValueKind::Plain(Type::Str));
    assert_eq!(map(&p, "who").keys.len(), 0);
}

#[test]
fn stacks_as_keys_and_locals() {
    let p = named("ustack_keys");
    assert_eq!(map(&p, "stacks").keys, [Type::Stack]);
    assert!(matches!(&p.probes[0].body[1], Stmt::Aggregate { keys, .. } if keys[0].kind == ExprKind::Ustack { depth: 8 }));
    assert_eq!(p.needs().ustack, Some(127));
    let p = named("stack_local");
    assert_eq!(p.probes[0].locals[0].ty, Type::Stack);
    assert_eq!(map(&p, "m").keys, [Type::Stack, Type::Uint]);
    assert!(matches!(&p.probes[0].body[2], Stmt::Print(e) if e.ty == Type::Stack));
}

#[test]
fn stacks_without_brackets_are_whole_depth() {
    let p = compile("func:foo { @u[ustack] = count(); @p[pystack] = count(); print(pystack(3)); }");
    assert!(matches!(&p.probes[0].body[0], Stmt::Aggregate { keys, .. } if keys[0].kind == ExprKind::Ustack { depth: 127 }));
    assert!(matches!(&p.probes[0].body[1], Stmt::Aggregate { keys, .. } if keys[0].kind == ExprKind::Pystack { depth: 127, gil_held: false }));
    assert!(matches!(&p.probes[0].body[2], Stmt::Print(e) if e.kind == ExprKind::Pystack { depth: 3, gil_held: false }));
    assert!(p.needs().pystack);
    // At CPython's own markers the interpreter holds the GIL: its frames are read directly.
    let p = compile("usdt:./python:python:function__return { @[pystack(1)] = count(); } profile:hz:99 { @s[pystack(1)] = count(); }");
    assert!(matches!(&p.probes[0].body[0], Stmt::Aggregate { keys, .. } if keys[0].kind == ExprKind::Pystack { depth: 1, gil_held: true }));
    assert!(matches!(&p.probes[1].body[0], Stmt::Aggregate { keys, .. } if keys[0].kind == ExprKind::Pystack { depth: 1, gil_held: false }));
    assert!(!named("ustack_keys").needs().pystack);
}

#[test]
fn if_chains_are_flat() {
    let p = named("if_chain");
    let Stmt::If { arms, els } = &p.probes[0].body[0] else { panic!() };
    assert_eq!((arms.len(), els.len()), (2, 1));
    assert_eq!(shape(&arms[1].cond), "(> arg0 5)");
    let p = named("definite");
    assert_eq!(p.probes[0].locals.len(), 1);
}

#[test]
fn compound_assignments() {
    let p = named("compound");
    let ops: Vec<Option<BinOp>> = p.probes[0].body[..13].iter().map(|s| match s {
        Stmt::SetLocal { op, .. } => *op,
        other => panic!("{other:?}"),
    }).collect();
    use BinOp::*;
    let expected = [None, Some(Add), Some(Sub), Some(Mul), Some(Div), Some(Rem), Some(BitAnd), Some(BitOr), Some(BitXor), Some(Shl), Some(Shr), Some(Add), Some(Sub)];
    assert_eq!(ops, expected);
    assert!(matches!(&p.probes[0].body[11], Stmt::SetLocal { value, .. } if value.kind == ExprKind::Int(1)));
    assert_eq!(map(&p, "m").value, ValueKind::Plain(Type::Int));
    assert!(matches!(&p.probes[0].body[16], Stmt::SetMap { op: Some(Sub), keys, .. } if keys.len() == 1));
}

#[test]
fn every_aggregation() {
    let p = named("aggregations");
    let kinds: Vec<ValueKind> = p.maps.iter().map(|m| m.value).collect();
    let expected = [AggKind::Count, AggKind::Sum { unsigned: true }, AggKind::Avg, AggKind::Min, AggKind::Max, AggKind::Stats, AggKind::Hist, AggKind::Lhist { min: -100, max: 100, step: 20 }];
    assert_eq!(kinds, expected.map(agg));
    assert_eq!(agg(expected[7]).to_string(), "lhist(.., -100, 100, 20)");
}

#[test]
fn keys_deletes_and_clears() {
    let p = named("multi_key");
    assert_eq!(map(&p, "m").keys, [Type::Uint, Type::Uint, Type::Str, Type::Uint]);
    let p = named("delete_clear");
    assert_eq!(map(&p, "m").keys, [Type::Uint, Type::Int]);
    assert!(matches!(&p.probes[0].body[1], Stmt::Delete { keys, .. } if keys.len() == 2));
    assert!(matches!(p.probes[1].body[0], Stmt::Clear(_)));
}

#[test]
fn print_of_values() {
    let p = named("print_expr");
    let types: Vec<Type> = (0..3).map(|i| value(&p, 0, i).ty).collect();
    assert_eq!(types, [Type::Int, Type::Str, Type::Str]);
}

#[test]
fn printf_conversions_keep_their_flags() {
    let p = named("printf_flags");
    let Stmt::Printf { format, args } = &p.probes[0].body[0] else { panic!() };
    let convs: Vec<_> = p.format(*format).pieces.iter().filter_map(|piece| match piece {
        Piece::Conv(c) => Some(*c),
        Piece::Text(_) | Piece::Time(_) => None,
    }).collect();
    assert_eq!(convs.len(), args.len());
    assert!(convs[0].left && convs[0].width == Some(10) && convs[0].kind == ConvKind::Str);
    assert!(convs[1].zero && convs[1].width == Some(8) && convs[1].kind == ConvKind::Hex);
    assert_eq!(convs.iter().map(|c| c.kind).collect::<Vec<_>>()[2..8], [ConvKind::Signed, ConvKind::Signed, ConvKind::HexUpper, ConvKind::Unsigned, ConvKind::Char, ConvKind::Signed]);
    assert_eq!(convs[8].precision, Some(3));
    assert!(matches!(p.format(*format).pieces.last(), Some(Piece::Text(id)) if p.string(*id) == b"|%\n"));
}

#[test]
fn comments_semicolons_and_separators() {
    assert_eq!(named("comments").maps.len(), 1);
    assert_eq!(named("no_trailing_semi").probes[0].body.len(), 2);
    assert_eq!(named("stray_semicolons").probes[0].body.len(), 1);
}

#[test]
fn predicates_divide_inside_parentheses() {
    let p = named("predicate_complex");
    assert_eq!(shape(p.probes[0].predicate.as_ref().unwrap()), "(|| (&& (== pid 42) (> (/ arg0 2) 10)) (Not tid))");
}

#[test]
fn shared_bodies_check_every_point() {
    let p = named("shared_func");
    assert_eq!(p.probes[0].points, [entry("foo"), entry("bar")]);
    assert_eq!(map(&p, "calls").keys, [Type::Str, Type::Str]);
    let p = named("func_return_name");
    assert_eq!(p.probes[0].points, [Point::FuncReturn { lib: None, glob: "ba*".into() }]);
}

#[test]
fn strings_are_interned_with_their_escapes() {
    let p = named("strings");
    assert_eq!(p.strings.iter().filter(|s| s.as_slice() == b"abc").count(), 1);
    assert!(p.strings.iter().any(|s| s.as_slice() == b"tab\there \"q\" \\ A\n"));
    assert_eq!(map(&p, "names").value, ValueKind::Plain(Type::Int));
}

#[test]
fn literals_with_separators_and_masks() {
    let p = named("literals");
    assert_eq!(shape(value(&p, 0, 0)), "(+ 65535 1000000)");
    assert_eq!(value(&p, 0, 1).kind, ExprKind::Int(-1));
}

#[test]
fn anonymous_map() {
    let p = named("anonymous_map");
    assert_eq!((p.maps[0].name.as_str(), p.maps[0].keys.as_slice()), ("", &[Type::Str][..]));
}

#[test]
fn max_entries_can_be_set() {
    let mut p = named("latency");
    p.set_max_entries(100);
    assert!(p.maps.iter().all(|m| m.max_entries == 100));
}

#[test]
fn nesting_just_within_the_limits() {
    let parens = format!("begin {{ $x = {}1{}; }}", "(".repeat(60), ")".repeat(60));
    assert_eq!(compile(&parens).probes[0].body.len(), 1);
    let ifs = format!("begin {{ {} $x = 1; {} }}", "if (1) {".repeat(64), "}".repeat(64));
    assert_eq!(compile(&ifs).probes[0].locals.len(), 1);
    let chain = format!("func:foo {{ if (arg0 == 0) {{ @x = 0 }} {} }}", (1..500).map(|i| format!("else if (arg0 == {i}) {{ @x = {i} }}")).collect::<String>());
    let p = compile(&chain);
    assert!(matches!(&p.probes[0].body[0], Stmt::If { arms, .. } if arms.len() == 500));
}

#[test]
fn unicode_in_strings_and_comments() {
    let p = compile("// caf\u{e9}\nbegin { printf(\"\u{e9}t\u{e9} %d\\n\", 1); }");
    assert!(p.strings.iter().any(|s| s.as_slice() == "\u{e9}t\u{e9} ".as_bytes()));
}

#[test]
fn unroll_writes_its_block_out() {
    let p = compile("begin { $i = 0; unroll (3) { $i++; @sq[$i] = $i * $i; } unroll(2) { unroll(2) { @n = count(); } } }");
    // `$i = 0`, three `$i++` and three map stores, then four counts.
    assert_eq!(p.probes[0].body.len(), 1 + 6 + 4);
}

#[test]
fn ints_have_bpftraces_signedness() {
    let types = |src: &str| -> Vec<Type> { compile(src).probes[0].locals.iter().map(|l| l.ty).collect() };
    // Literals are signed; the context's values unsigned; an operation unsigned when an operand
    // is (a shift when its left one is); `!` unsigned; `-` and `~` keep the operand's.
    let got = types("func:foo { $a = arg0 < 0; $b = 1 - 2; $c = !1; $d = -arg0; $e = 1 << arg0; $f = arg0 >> 1; $g = ~pid; $h = -5; }");
    assert_eq!(got, [Type::Uint, Type::Int, Type::Uint, Type::Uint, Type::Int, Type::Uint, Type::Uint, Type::Int]);
    // A system call's result is the kernel's signed `long`, a function's `rax` unsigned.
    assert_eq!(types("syscall:read:return { $r = retval; }"), [Type::Int]);
    assert_eq!(types("tracepoint:syscalls:sys_exit_read { $r = args->ret; }"), [Type::Int]);
    assert_eq!(types("func:foo:return { $r = retval; }"), [Type::Uint]);
    assert_eq!(types("func:foo:return, syscall:read:return { $r = retval; }"), [Type::Uint]);
    // A `?:` has its first branch's sign; a local, a key or a map value keeps its first one.
    assert_eq!(types("func:foo { $t = arg0 ? -1 : arg1; $u = arg0 ? arg1 : -1; $x = 1; $x = arg0; }"), [Type::Int, Type::Uint, Type::Int]);
    let p = compile("func:foo { @m[1] = 1; @m[arg0] = arg1; @s = sum(arg0); @s = sum(-1); }");
    assert_eq!((map(&p, "m").keys.as_slice(), map(&p, "m").value), (&[Type::Int][..], ValueKind::Plain(Type::Int)));
    assert_eq!(map(&p, "s").value, agg(AggKind::Sum { unsigned: true }));
}
