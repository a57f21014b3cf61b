//! Invalid scripts: each must fail with its message at its exact line and column (the first
//! error, in source order), and the rendered text must point there.
mod common;

use common::errors;

/// (script, first error, line, column).
const CASES: &[(&str, &str, usize, usize)] = &[
    // Syntax.
    ("begin { $x = 1 +; }", "expected an expression, found `;`", 1, 17),
    ("begin { @x = 1 }}", "expected a probe point, found `}`", 1, 17),
    ("func:foo { @x = 1", "expected `}`, found the end of the script", 1, 18),
    ("begin { x = 1; }", "expected a statement, found `x`", 1, 9),
    ("begin { $x == 1; }", "expected `=`, `+=`, `++` or another assignment, found `==`", 1, 12),
    ("begin { else { } }", "`else` without an `if`", 1, 9),
    ("begin {\n  printf(\"abc);\n}", "unterminated string literal", 2, 10),
    ("begin { $x = \"a\\q\"; }", "unknown escape `\\q`", 1, 16),
    ("/* never closed\nbegin { }", "unterminated comment", 1, 1),
    ("// nothing but a comment\n", "a script needs at least one probe, such as `begin { printf(\"hi\\n\"); }`", 1, 1),
    ("begin { $x = pid(); }", "`pid` is a builtin value, not a function", 1, 14),
    ("begin { $x = foo(1); }", "unknown identifier `foo`", 1, 14),
    ("func:foo { $x = arg6; }", "unknown builtin `arg6`: the arguments are arg0 to arg5", 1, 17),
    ("begin { $f = 1; printf($f); }", "the format of `printf` must be a string literal", 1, 24),
    ("begin { clear(@m[1]); }", "`clear` empties a whole map: write `clear(@m)`, or `delete(@m[k])` for one element", 1, 15),
    ("begin { $x = 99999999999999999999; }", "integer literal `99999999999999999999` does not fit in 64 bits", 1, 14),
    ("begin { $x = 0x1_0000_0000_0000_0000; }", "integer literal `0x1_0000_0000_0000_0000` does not fit in 64 bits", 1, 14),
    ("begin /8 / 2/ { }", "expected `{`, found integer `2`", 1, 12),
    // Loops.
    ("begin { while (1) { } }", "loops are not allowed: `while` could run without bound, and a probe must finish in bounded time", 1, 9),
    ("begin {\n  for ($i = 0; $i < 3; $i++) { }\n}", "loops are not allowed: `for` could run without bound, and a probe must finish in bounded time", 2, 3),
    ("begin { $a = 1; unroll(0) { } }", "`unroll` takes a literal count from 1 to 100", 1, 24),
    ("begin { unroll($n) { } }", "`unroll` takes a literal count from 1 to 100", 1, 16),
    ("begin { unroll(100) { unroll(100) { @n = count(); } } }", "nested `unroll`s would write the block out more than 1000 times", 1, 23),
    ("begin { if (1) { do { } } }", "loops are not allowed: `do` could run without bound, and a probe must finish in bounded time", 1, 18),
    // Probe points.
    ("kprobe:do_sys_open { }", "`kprobe:` points are the kernel's; lopi probes user space (func:, syscall:, lock:, thread:, addr:)", 1, 1),
    ("nosuch:do_sys_open { }", "unknown probe type `nosuch`; expected func, addr, syscall, lock, begin, end, interval or thread", 1, 1),
    ("interval:500us { }", "interval `500us` is shorter than the minimum, 1ms", 1, 10),
    ("interval:10 { }", "`10` needs a unit: s, ms, us or ns", 1, 10),
    ("interval:10m { }", "unknown unit `m`; expected s, ms, us or ns", 1, 12),
    ("func:sqlite3_stp* { }", "no function matches `sqlite3_stp*`", 1, 6),
    ("begin { }\nfunc:foo, func:nope { }", "no function is named `nope`", 2, 16),
    ("func:libc.so.6:mallocx { }", "no function is named `mallocx` in `libc.so.6`", 1, 16),
    ("usdt:./prog:myprov:tack { }", "no static marker (USDT) matches `myprov:tack` in `./prog` (`lopi info ./prog --usdt` lists them)", 1, 20),
    ("usdt:./prog:other:tick { }", "no static marker (USDT) matches `other:tick` in `./prog` (`lopi info ./prog --usdt` lists them)", 1, 19),
    ("usdt:./prog:tick { @x = retval; }", "`retval` needs a return probe (`func:F:return`, `syscall:S:return` or `lock:acquired`), and `usdt:./prog:tick` is not one", 1, 25),
    ("func:libnope.so:malloc:return { }", "no function is named `malloc` in `libnope.so`", 1, 17),
    ("func:nope+4 { }", "no function is named `nope`", 1, 6),
    ("func:foo*+4 { }", "an offset needs one function, not a glob", 1, 9),
    ("func:foo:entry:x { }", "expected `entry` or `return`, found `x`", 1, 16),
    ("func:foo[a-z { }", "unclosed `[` in a glob", 1, 9),
    ("syscall:reed { }", "unknown system call `reed`", 1, 9),
    ("syscall:zz* { }", "no system call matches `zz*`", 1, 9),
    ("lock:grab { }", "unknown lock event `grab`; expected acquire, acquired, release, contended or *", 1, 6),
    ("thread:spawn { }", "unknown thread event `spawn`; expected start or exit", 1, 8),
    ("begin:x { }", "`begin` takes no `:` part", 1, 7),
    // Builtins in the wrong probes.
    ("func:foo { $x = retval; }", "`retval` needs a return probe (`func:F:return`, `syscall:S:return` or `lock:acquired`), and `func:foo` is not one", 1, 17),
    ("func:foo:return { @x = arg0 }", "`arg0` needs a function entry, `func:F+OFF`, `addr:`, `usdt:`, system call entry or `lock:` probe, and `func:foo:return` is not one", 1, 24),
    ("begin { @x = func }", "`func` needs a `func:` or `lock:` probe, and `begin` is not one", 1, 14),
    ("func:foo, func:bar:return /arg0/ { }", "`arg0` needs a function entry, `func:F+OFF`, `addr:`, `usdt:`, system call entry or `lock:` probe, and `func:bar:return` is not one", 1, 28),
    ("lock:* { @x = elapsed; }", "`elapsed` is the call's time at some points of this probe (lopi's own return points, `lock:acquired`, `lock:release`) and the time since the trace began at the others (bpftrace's): write them as two probes", 1, 15),
    ("func:foo:return, uretprobe:bar { @x = elapsed; }", "`elapsed` is the call's time at some points of this probe (lopi's own return points, `lock:acquired`, `lock:release`) and the time since the trace began at the others (bpftrace's): write them as two probes", 1, 39),
    ("begin { join(\"x\"); }", "`join` needs the address of an array of string pointers, found str", 1, 14),
    ("begin { join(0, 1); }", "the separator of `join` must be a string literal", 1, 17),
    ("func:foo { @u = usym(arg0); }", "a map value must be an int or a str; a stack or a usym can only be a key", 1, 17),
    ("func:foo { $b = usym(arg0) == usym(arg1); }", "usyms cannot be compared; compare the addresses", 1, 17),
    ("func:foo { $b = usym(arg0) + 1; }", "`+` needs int operands, found usym", 1, 17),
    ("func:foo { printf(\"%d\", usym(arg0)); }", "`%d` needs an int, found usym", 1, 25),
    ("func:foo { $u = usym(\"x\"); }", "`usym` needs an int, an address, found str", 1, 22),
    ("func:foo { $u = usym(); }", "`usym` takes one argument, an address: `usym(arg0)`", 1, 17),
    ("lock:release { @x = retval; }", "`retval` needs a return probe (`func:F:return`, `syscall:S:return` or `lock:acquired`), and `lock:release` is not one", 1, 21),
    ("thread:start { @x = retval; }", "`retval` needs a return probe (`func:F:return`, `syscall:S:return` or `lock:acquired`), and `thread:start` is not one", 1, 21),
    // printf.
    ("begin { printf(\"%d %s\\n\", 1); }", "`%s` has no argument", 1, 20),
    ("begin { printf(\"%d\\n\", \"x\"); }", "`%d` needs an int, found str", 1, 24),
    ("begin { printf(\"%s\\n\", ustack()); }", "`%s` needs a str, found stack", 1, 24),
    ("begin {\n  printf(\"a %q\", 1);\n}", "unknown conversion `%q`; expected %d, %i, %u, %x, %X, %s, %c or %%", 2, 13),
    ("begin { printf(\"%d\\n\", 1, 2); }", "too many arguments: the format has 1 conversion", 1, 27),
    ("begin { printf(\"%5\"); }", "unfinished conversion at the end of the format", 1, 17),
    // Types.
    ("begin { $x = \"a\" + 1; }", "`+` needs int operands, found str", 1, 14),
    ("begin { $x = \"a\" < \"b\"; }", "`<` compares ints (strings compare only with `==` and `!=`), found str", 1, 14),
    ("begin { $x = 1 == \"a\"; }", "cannot compare int with str", 1, 14),
    ("begin { $a = ustack(); $b = $a == $a; }", "stacks cannot be compared", 1, 29),
    ("begin { $x = -\"a\"; }", "`-` needs an int operand, found str", 1, 15),
    ("begin /\"str\"/ { }", "a predicate must be an int, found str", 1, 8),
    ("begin { if (comm) { } }", "an `if` condition must be an int, found str", 1, 13),
    ("begin { $x = comm ? 1 : 2; }", "a `?:` condition must be an int, found str", 1, 14),
    ("begin { $x = pid ? 1 : \"a\"; }", "the branches of `?:` differ: int and str", 1, 24),
    ("begin { $x = 5 / 0; }", "division by zero", 1, 18),
    ("begin { $x = 1; $x %= 0; }", "division by zero", 1, 23),
    ("begin { $x = str(); }", "`str` takes a pointer and an optional length: `str(p)` or `str(p, n)`", 1, 14),
    ("begin { $x = str(\"a\", 2); }", "`str` needs int arguments, found str", 1, 18),
    ("begin { @m[ustack(200)] = count(); }", "the depth of `ustack(n)` must be a literal from 1 to 127", 1, 19),
    // Locals.
    ("begin { printf(\"%d\", $y); }", "`$y` is used before it is assigned", 1, 22),
    ("begin { if (pid) { $x = 1; } printf(\"%d\", $x); }", "`$x` is not assigned on every path to this use", 1, 43),
    ("begin { $x = 1 }\nend { $y = $x }", "`$x` is used before it is assigned", 2, 12),
    ("begin { $x = 1; $x = \"s\"; }", "`$x` holds int values (from its first assignment), not str", 1, 17),
    ("begin { $x = \"s\"; $x += 1; }", "`+=` needs an int local, and `$x` holds str values", 1, 19),
    ("begin { $x = $x + 1; }", "`$x` is used before it is assigned", 1, 14),
    // Maps.
    ("begin { @m = count(); }\nend { @m = 1; }", "map `@m` was first given count() values, not int", 2, 7),
    ("begin { @m = \"s\"; } end { @m += 1; }", "map `@m` was first given str values, not int", 1, 27),
    ("begin { @m[1] = 1; @m[1, 2] = 2; }", "map `@m` is used with 2 keys here, but with 1 key where it was first used", 1, 20),
    ("begin { @m[\"a\"] = 1; @m[2] = 2; }", "key 1 of `@m` is int here, but str where the map was first used", 1, 25),
    ("begin { @m = 1; } end { $y = @m[1]; }", "map `@m` is used with 1 key here, but with no key where it was first used", 1, 30),
    ("begin { @m[ustack()] = count(); } end { @m[1] = count(); }", "key 1 of `@m` is int here, but stack where the map was first used", 1, 44),
    ("begin { @m = lhist(1, 0, 100, 10); @m = lhist(1, 0, 50, 10); }", "map `@m` was first given lhist(.., 0, 100, 10) values, not lhist(.., 0, 50, 10)", 1, 36),
    ("begin { @c = count(); $x = @c; }", "map `@c` holds count() aggregations, which cannot be read in an expression; `print(@c)` shows them", 1, 28),
    ("begin { $x = @never; }", "map `@never` is never assigned", 1, 14),
    ("begin { print(@never) }", "map `@never` is never assigned", 1, 15),
    ("begin { @x = @x + 1; @x = \"text\"; }", "map `@x` was first given int values, not str", 1, 22),
    ("begin { @s = ustack(); }", "a map value must be an int or a str; a stack or a usym can only be a key", 1, 14),
    // Aggregations.
    ("begin { $x = count(); }", "an aggregation can only be assigned to a map, as in `@m = count(..)`", 1, 14),
    ("begin { @x = count() + 1; }", "`count()` is an aggregation: it can only be the whole value assigned to a map, as in `@m[k] = count(..)`", 1, 14),
    ("begin { @x += count(); }", "an aggregation is assigned with `=`, not `+=`", 1, 15),
    ("begin { @x = count(1); }", "`count()` takes no arguments", 1, 14),
    ("begin { @x = sum(); }", "`sum` takes one int argument", 1, 14),
    ("begin { @x = hist(comm); }", "`hist` needs an int, found str", 1, 19),
    ("begin { @h = lhist(1, 0, 100, 0); }", "the step of `lhist` must be positive", 1, 31),
    ("begin { @h = lhist(1, 10, 5, 1); }", "the max of `lhist` must be greater than its min", 1, 27),
    ("begin { @h = lhist(1, 0, 100000, 1); }", "`lhist` would have 100000 buckets; at most 1000 are allowed", 1, 14),
    ("begin { @h = lhist(1, pid, 10, 1); }", "the min of `lhist` must be an integer literal that fits in 64 bits", 1, 23),
    ("begin { @h = lhist(1, 0, 10); }", "`lhist` takes a value and three integer literals: `lhist(x, min, max, step)`", 1, 14),
];

#[test]
fn each_fails_where_it_should() {
    let mut wrong = Vec::new();
    for (src, message, line, column) in CASES {
        let found = errors(src).remove(0);
        if found != (message.to_string(), *line, *column) {
            wrong.push(format!("{src}\n  expected {message} at {line}:{column}\n  found    {} at {}:{}", found.0, found.1, found.2));
        }
    }
    assert!(wrong.is_empty(), "{} of {} cases differ:\n{}", wrong.len(), CASES.len(), wrong.join("\n"));
}

#[test]
fn type_errors_are_all_reported() {
    let src = "begin { $a = \"x\" + 1; $b = $c; @m = count(); }\nend { @m = 2; printf(\"%s\", 1); }";
    let found = errors(src);
    let at: Vec<(usize, usize)> = found.iter().map(|(_, l, c)| (*l, *c)).collect();
    assert_eq!(at, [(1, 14), (1, 28), (2, 7), (2, 28)], "{found:#?}");
}

#[test]
fn conflicts_note_where_the_map_was_fixed() {
    let src = "begin { @lat[1] = 1; }\nend { @lat[\"x\"] = 2; }";
    let d = lopi_script::compile_front(src, &common::TestResolver).unwrap_err();
    let note = &d.errors[0].notes[0];
    assert_eq!(note.message, "`@lat` was first used here");
    assert_eq!(note.at.map(|at| (at.line, at.column)), Some((1, 9)));
    let rendered = d.render(src, "lat.lp");
    let expected = "error: key 1 of `@lat` is str here, but int where the map was first used\n --> lat.lp:2:12\n  |\n\
                    2 | end { @lat[\"x\"] = 2; }\n  |            ^^^\nnote: `@lat` was first used here\n --> lat.lp:1:9\n  |\n\
                    1 | begin { @lat[1] = 1; }\n  |         ^^^^^^^\n\n";
    assert_eq!(rendered, expected);
}

#[test]
fn glob_errors_point_at_the_glob() {
    let src = "func:sqlite3_stp* { }";
    let d = lopi_script::compile_front(src, &common::TestResolver).unwrap_err();
    assert_eq!(d.render(src, "s.lp"), "error: no function matches `sqlite3_stp*`\n --> s.lp:1:6\n  |\n1 | func:sqlite3_stp* { }\n  |      ^^^^^^^^^^^^\n\n");
}

#[test]
fn nesting_limits() {
    let deep = format!("begin {{ $x = {}1{}; }}", "(".repeat(10_000), ")".repeat(10_000));
    assert_eq!(errors(&deep)[0], ("expression nested too deeply (more than 64 levels)".to_string(), 1, 78));
    let ifs = format!("begin {{ {} }}", "if (1) { ".repeat(10_000));
    assert_eq!(errors(&ifs)[0], ("`if` nested too deeply (more than 64 levels)".to_string(), 1, 9 + 9 * 64));
    let chain = format!("begin {{ $x = 1{}; }}", " + 1".repeat(100));
    assert_eq!(errors(&chain)[0], ("expression nested too deeply (more than 64 levels)".to_string(), 1, 16 + 4 * 63));
    let nots = format!("begin {{ $x = {}1; }}", "!".repeat(10_000));
    assert_eq!(errors(&nots)[0].0, "expression nested too deeply (more than 64 levels)");
    let keys = format!("begin {{ @a = 1; $x = {}1{}; }}", "@a[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(errors(&keys)[0].0, "expression nested too deeply (more than 64 levels)");
    let ternary = format!("begin {{ $x = {}1; }}", "1 ? 2 : ".repeat(10_000));
    assert_eq!(errors(&ternary)[0].0, "expression nested too deeply (more than 64 levels)");
}

#[test]
fn size_limits() {
    let probes = "begin { }\n".repeat(65);
    assert_eq!(errors(&probes)[0], ("too many probes: at most 64 are allowed".to_string(), 65, 1));
    let maps: String = (10..75).map(|i| format!("@m{i} = 1; ")).collect();
    assert_eq!(errors(&format!("begin {{ {maps}}}"))[0], ("too many maps: at most 64 are allowed".to_string(), 1, 9 + 10 * 64));
    let locals: String = (10..43).map(|i| format!("$l{i} = 1; ")).collect();
    assert_eq!(errors(&format!("begin {{ {locals}}}"))[0], ("too many locals in one probe: at most 32 are allowed".to_string(), 1, 9 + 10 * 32));
    assert_eq!(errors("begin { @m[1,2,3,4,5,6,7,8,9] = 1; }")[0], ("a map key has at most 8 parts; this one has 9".to_string(), 1, 9));
    let long = format!("begin {{ printf(\"{}\"); }}", "x".repeat(300));
    assert_eq!(errors(&long)[0], ("string literal is 300 bytes long; at most 256 are allowed".to_string(), 1, 16));
}
