//! Strings and output: `str()` through `read_str`, comparisons, string constants, `printf`'s
//! argument array and `print`.
use crate::harness::{s, Runtime, Script, Value};

/// A runtime whose traced memory holds "hello\0world" at 0x1000 and 100 'a's at 0x2000.
fn with_memory(script: &Script) -> Runtime {
    let mut rt = script.runtime();
    rt.memory.push((0x1000, b"hello\0world".to_vec()));
    rt.memory.push((0x2000, vec![b'a'; 100]));
    rt
}

#[test]
fn str_reads_through_the_helper() {
    let script = Script::new("func:foo { printf(\"%s|%s|%s|%s|%s|%s\", str(arg0), str(arg0, 3), str(arg0 + 6), str(arg1), str(arg0, -1), str(arg2, 1000)); }");
    let mut rt = with_memory(&script);
    let mut ctx = crate::harness::ctx([0x1000, 0xdead, 0x2000, 0, 0, 0]);
    script.run(0, &mut ctx, &mut rt);
    // At most str_size - 1 bytes, as bpftrace: its 64-byte strings hold 63 and their NUL.
    let long = "a".repeat(script.program.str_size - 1);
    assert_eq!(rt.printfs[0].args, [s("hello"), s("hel"), s("world"), s(""), s(""), s(&long)]);
    // The bad pointer is the helper's fault to count.
    assert_eq!(ctx.faults, 1);
    assert_eq!(rt.calls.iter().filter(|c| *c == "read_str").count(), 6);
}

#[test]
fn read_strings_are_keys_and_values() {
    let script = Script::named("string_eq");
    let mut rt = with_memory(&script);
    for _ in 0..2 {
        script.run(0, &mut crate::harness::ctx([0x1000, 0, 0, 0, 0, 0]), &mut rt);
    }
    assert_eq!(rt.words("by_name", &[crate::harness::K::Str("hello")]), Some(vec![2]));
    let script = Script::named("str_len");
    let mut rt = with_memory(&script);
    script.run(0, &mut crate::harness::ctx([0x2000, 0, 0, 0, 0, 0]), &mut rt);
    assert_eq!(rt.slot("s", &[crate::harness::K::Int(4243)]), Some(&rt.str_bytes(&"a".repeat(16))[..]));
}

#[test]
fn string_comparisons() {
    let cases: &[(&str, i64)] = &[
        ("comm == \"sqlite3\"", 1),
        ("comm != \"sqlite3\"", 0),
        ("comm == \"sqlite\"", 0),
        ("comm == \"sqlite3 \"", 0),
        ("\"\" == \"\"", 1),
        ("\"abc\" != \"abd\"", 1),
        ("func == \"foo\" && probe == \"func:foo\"", 1),
        ("(arg0 ? comm : \"x\") == \"x\"", 1),
    ];
    for &(expr, expected) in cases {
        let script = Script::new(&format!("func:foo {{ printf(\"%d\", {expr}); }}"));
        let (_, rt) = script.run_args([0; 6]);
        assert_eq!(crate::harness::printed_int(&rt), expected, "{expr}");
    }
}

#[test]
fn long_constants_are_cut_to_the_string_size() {
    let size = lopi_script::limits::DEFAULT_STR_SIZE;
    let (long, longer) = ("b".repeat(size), "b".repeat(size + 10));
    let script = Script::new(&format!("func:foo {{ $s = \"{longer}\"; printf(\"%s %d\", $s, $s == \"{long}\"); }}"));
    let (_, rt) = script.run_args([0; 6]);
    assert_eq!(rt.printfs[0].args, [s(&long), Value::Int(1)]);
}

#[test]
fn string_ternaries() {
    let script = Script::named("ternary_str");
    let (_, rt) = script.run_args([0; 6]);
    assert_eq!(rt.printfs[0].args, [s("big")]);
    let script = Script::new("func:foo { $s = arg0 ? comm : str(arg1); @m[arg0 ? func : \"none\"] = count(); printf(\"%s\", $s); }");
    let mut rt = with_memory(&script);
    script.run(0, &mut crate::harness::ctx([0, 0x1000, 0, 0, 0, 0]), &mut rt);
    script.run(0, &mut crate::harness::ctx([1, 0x1000, 0, 0, 0, 0]), &mut rt);
    let printed: Vec<Value> = rt.printfs.iter().map(|p| p.args[0].clone()).collect();
    assert_eq!(printed, [s("hello"), s("sqlite3")]);
    assert_eq!((rt.len("m"), rt.words("m", &[crate::harness::K::Str("none")])), (2, Some(vec![1])));
}

#[test]
fn printf_gets_one_word_per_conversion() {
    let script = Script::named("printf_flags");
    let (_, rt) = script.run_args([0; 6]);
    let args = [s("sqlite3"), Value::Int(255), Value::Int(-3), Value::Int(4), Value::Int(255), Value::Int(5), Value::Int(65), Value::Int(7), s("abcdef")];
    assert_eq!(rt.printfs.len(), 1);
    assert_eq!((rt.printfs[0].format, &rt.printfs[0].args[..]), (0, &args[..]));
    let script = Script::new("begin { printf(\"none\\n\"); printf(\"%d\\n\", 1); } end { printf(\"%s %s\", \"a\", \"b\"); }");
    let (_, mut rt) = script.run_args([0; 6]);
    script.run(1, &mut crate::harness::ctx([0; 6]), &mut rt);
    let formats: Vec<(u64, usize)> = rt.printfs.iter().map(|p| (p.format, p.args.len())).collect();
    assert_eq!(formats, [(0, 0), (1, 1), (2, 2)]);
    assert_eq!(rt.printfs[2].args, [s("a"), s("b")]);
}

#[test]
fn print_passes_a_typed_value() {
    let script = Script::named("print_expr");
    let (_, rt) = script.run_args([0; 6]);
    assert_eq!(rt.printed, [Value::Int(3), s("x"), s("sqlite3")]);
    let script = Script::new("func:foo { print(-arg0); print(ustack(2)); print(@m[1]); @m[1] = \"v\"; print(@m[1]); }");
    let (_, rt) = script.run_args([9, 0, 0, 0, 0, 0]);
    // `-arg0` keeps the unsigned type of bpftrace's uint64 `arg0`.
    assert_eq!(rt.printed, [Value::Uint(9u64.wrapping_neg()), Value::Stack(vec![0x40_1000, 0x40_2000]), s(""), s("v")]);
}

/// Sizes that are not multiples of 8 take the byte-wise copies and compares, and pack keys
/// unaligned; 0 leaves every string empty.
#[test]
fn any_string_size_works() {
    let src = "func:foo { $s = str(arg0); @m[$s, arg1] = count(); printf(\"%s %d %d\", $s, $s == str(arg0), comm == \"sqlite\"); }";
    for size in [0, 1, 13, 64, 200] {
        let mut program = crate::common::compile(src);
        program.str_size = size;
        let script = Script::of(program).unwrap();
        let mut rt = with_memory(&script);
        let mut ctx = crate::harness::ctx([0x2000, 5, 0, 0, 0, 0]);
        script.run(0, &mut ctx, &mut rt);
        let text = "a".repeat(size.saturating_sub(1).min(100));
        // Both sides are cut to str_size: "sqlite3" and "sqlite" agree on their first 6 bytes.
        let same = i64::from(size <= 6);
        assert_eq!(rt.printfs[0].args, [s(&text), Value::Int(1), Value::Int(same)], "str_size {size}");
        assert_eq!(rt.words("m", &[crate::harness::K::Str(&text), crate::harness::K::Int(5)]), Some(vec![1]), "str_size {size}");
    }
}
