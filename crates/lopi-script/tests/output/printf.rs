//! `printf` against C: the expected strings were printed by glibc's `printf` for the same
//! format and argument (a C program, kept out of the test so that it needs no compiler).
use super::common::compile;
use lopi_script::ir::Stmt;
use lopi_script::output::{printf, Arg, OutputError};

/// Formats `format` (script syntax) with `args` through the checked program's format.
fn run(format: &str, args: &[Arg]) -> Result<Vec<u8>, OutputError> {
    let placeholders: String = args.iter().map(|a| if matches!(a, Arg::Str(_)) { ", \"\"" } else { ", 0" }).collect();
    let program = compile(&format!("begin {{ printf(\"{format}\"{placeholders}); }}"));
    let Stmt::Printf { format, .. } = &program.probes[0].body[0] else { panic!("no printf in {format}") };
    printf(&program, program.format(*format), args)
}

/// (format, arguments, glibc's output).
fn cases() -> Vec<(&'static str, Vec<Arg>, &'static str)> {
    vec![
        ("[%ld]", vec![Arg::Int(42)], "[42]"),
        ("[%ld]", vec![Arg::Int(-42)], "[-42]"),
        ("[%li]", vec![Arg::Int(0)], "[0]"),
        ("[%5ld]", vec![Arg::Int(42)], "[   42]"),
        ("[%-5ld]", vec![Arg::Int(42)], "[42   ]"),
        ("[%05ld]", vec![Arg::Int(-42)], "[-0042]"),
        ("[%+ld]", vec![Arg::Int(42)], "[+42]"),
        ("[%+ld]", vec![Arg::Int(-42)], "[-42]"),
        ("[% ld]", vec![Arg::Int(42)], "[ 42]"),
        ("[% ld]", vec![Arg::Int(-42)], "[-42]"),
        ("[%+ ld]", vec![Arg::Int(7)], "[+7]"),
        ("[% 05ld]", vec![Arg::Int(7)], "[ 0007]"),
        ("[%.3ld]", vec![Arg::Int(7)], "[007]"),
        ("[%.3ld]", vec![Arg::Int(-7)], "[-007]"),
        ("[%8.3ld]", vec![Arg::Int(-7)], "[    -007]"),
        ("[%08.3ld]", vec![Arg::Int(-7)], "[    -007]"),
        ("[%-8.3ld|]", vec![Arg::Int(7)], "[007     |]"),
        ("[%.0ld]", vec![Arg::Int(0)], "[]"),
        ("[%5.0ld]", vec![Arg::Int(0)], "[     ]"),
        ("[%+.0ld]", vec![Arg::Int(0)], "[+]"),
        ("[%ld]", vec![Arg::Int(-9223372036854775808)], "[-9223372036854775808]"),
        ("[%ld]", vec![Arg::Int(9223372036854775807)], "[9223372036854775807]"),
        ("[%-+6ld]", vec![Arg::Int(5)], "[+5    ]"),
        ("[%-06ld]", vec![Arg::Int(5)], "[5     ]"),
        ("[%lu]", vec![Arg::Int(-1)], "[18446744073709551615]"),
        ("[%lu]", vec![Arg::Int(3)], "[3]"),
        ("[%+lu]", vec![Arg::Int(3)], "[3]"),
        ("[% lu]", vec![Arg::Int(3)], "[3]"),
        ("[%08lu]", vec![Arg::Int(123)], "[00000123]"),
        ("[%lx]", vec![Arg::Int(255)], "[ff]"),
        ("[%lX]", vec![Arg::Int(255)], "[FF]"),
        ("[%#lx]", vec![Arg::Int(255)], "[0xff]"),
        ("[%#lX]", vec![Arg::Int(255)], "[0XFF]"),
        ("[%#lx]", vec![Arg::Int(0)], "[0]"),
        ("[%#.0lx]", vec![Arg::Int(0)], "[]"),
        ("[%#08lx]", vec![Arg::Int(255)], "[0x0000ff]"),
        ("[%#8lx]", vec![Arg::Int(255)], "[    0xff]"),
        ("[%-#8lx]", vec![Arg::Int(255)], "[0xff    ]"),
        ("[%.4lx]", vec![Arg::Int(10)], "[000a]"),
        ("[%#.4lx]", vec![Arg::Int(10)], "[0x000a]"),
        ("[%lx]", vec![Arg::Int(-1)], "[ffffffffffffffff]"),
        ("[%016lx]", vec![Arg::Int(57005)], "[000000000000dead]"),
        ("[%+lx]", vec![Arg::Int(1)], "[1]"),
        ("[%s]", vec![Arg::Str(b"hello".to_vec())], "[hello]"),
        ("[%8s]", vec![Arg::Str(b"hi".to_vec())], "[      hi]"),
        ("[%-8s]", vec![Arg::Str(b"hi".to_vec())], "[hi      ]"),
        ("[%08s]", vec![Arg::Str(b"hi".to_vec())], "[      hi]"),
        ("[%.2s]", vec![Arg::Str(b"hello".to_vec())], "[he]"),
        ("[%5.2s]", vec![Arg::Str(b"hello".to_vec())], "[   he]"),
        ("[%.0s]", vec![Arg::Str(b"hello".to_vec())], "[]"),
        ("[%.9s]", vec![Arg::Str(b"hello".to_vec())], "[hello]"),
        ("[%c]", vec![Arg::Int(65)], "[A]"),
        ("[%3c]", vec![Arg::Int(65)], "[  A]"),
        ("[%-3c]", vec![Arg::Int(65)], "[A  ]"),
        ("[%03c]", vec![Arg::Int(65)], "[  A]"),
        ("[%c]", vec![Arg::Int(321)], "[A]"),
    ]
}

#[test]
fn conversions_match_c() {
    for (format, args, expected) in cases() {
        let got = run(format, &args).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), expected, "{format}");
    }
}

#[test]
fn text_and_conversions_interleave() {
    let args = [Arg::Str(b"bash\0\0junk".to_vec()), Arg::Int(42), Arg::Int(255)];
    assert_eq!(run("%s: pid %d, mask %#x, 100%%\\n", &args).unwrap(), b"bash: pid 42, mask 0xff, 100%\n");
    assert_eq!(run("no conversions", &[]).unwrap(), b"no conversions");
    let bytes = run("%s", &[Arg::Str(vec![0xff, b'a'])]).unwrap();
    assert_eq!(bytes, [0xff, b'a'], "bytes of the traced program pass as they are");
}

#[test]
fn wrong_arguments_are_errors() {
    let program = compile("begin { printf(\"%d %s\", 1, \"x\"); }");
    let Stmt::Printf { format, .. } = &program.probes[0].body[0] else { panic!() };
    let format = program.format(*format);
    assert_eq!(printf(&program, format, &[Arg::Int(1)]), Err(OutputError::ArgCount { expected: 2, found: 1 }));
    assert_eq!(printf(&program, format, &[Arg::Int(1), Arg::Int(2)]), Err(OutputError::ArgType { index: 1 }));
    assert_eq!(printf(&program, format, &[Arg::Str(Vec::new()), Arg::Str(Vec::new())]), Err(OutputError::ArgType { index: 0 }));
}
