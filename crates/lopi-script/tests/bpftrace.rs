//! bpftrace's own spellings inside bodies and around them: the fields of system-call
//! tracepoints (`args.NAME`, `args->NAME`), `time()`, `1e6` literals and an executable
//! script's `#!` line, which bpftrace's tools (opensnoop.bt, killsnoop.bt, bashreadline.bt,
//! gethostlatency.bt) use as they are.
mod common;

use common::{compile, errors};
use lopi_script::ir::{Builtin, Expr, ExprKind, Piece, Point, Program, Spelling, Stmt, Type};
use lopi_script::output::printf;

/// The builtins the statements of probe `p` read, in order, as `name`s.
fn reads(program: &Program, p: usize) -> Vec<String> {
    fn walk(e: &Expr, out: &mut Vec<String>) {
        match &e.kind {
            ExprKind::Builtin(b) => out.push(b.name()),
            ExprKind::ReadStr { ptr, .. } => walk(ptr, out),
            ExprKind::Binary { lhs, rhs, .. } => {
                walk(lhs, out);
                walk(rhs, out);
            }
            ExprKind::Map { keys, .. } => keys.iter().for_each(|k| walk(k, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for stmt in &program.probes[p].body {
        match stmt {
            Stmt::SetLocal { value, .. } => walk(value, &mut out),
            Stmt::SetMap { keys, value, .. } => {
                keys.iter().for_each(|k| walk(k, &mut out));
                walk(value, &mut out);
            }
            Stmt::Aggregate { keys, value, .. } => {
                keys.iter().for_each(|k| walk(k, &mut out));
                value.iter().for_each(|v| walk(v, &mut out));
            }
            Stmt::Printf { args, .. } => args.iter().for_each(|a| walk(a, &mut out)),
            _ => {}
        }
    }
    out
}

fn entry(call: &str) -> Point {
    Point::SyscallEntry { glob: call.into(), spelling: Spelling::Tracepoint }
}

#[test]
fn args_are_the_calls_arguments_and_result() {
    // opensnoop.bt: `filename` is open's first argument and openat's second, so the probe is
    // compiled once for each; `ret` is the result at both exits.
    let p = compile(
        "tracepoint:syscalls:sys_enter_open, tracepoint:syscalls:sys_enter_openat { @filename[tid] = args->filename; }\n\
         tracepoint:syscalls:sys_exit_open, tracepoint:syscalls:sys_exit_openat /@filename[tid]/ { $ret = args->ret; delete(@filename[tid]); }",
    );
    assert_eq!(p.probes.len(), 3);
    assert_eq!((p.probes[0].points.clone(), reads(&p, 0)), (vec![entry("open")], vec!["tid".to_string(), "arg0".into()]));
    assert_eq!((p.probes[1].points.clone(), reads(&p, 1)), (vec![entry("openat")], vec!["tid".to_string(), "arg1".into()]));
    assert_eq!(p.probes[2].points, ["open", "openat"].map(|glob| Point::SyscallReturn { glob: glob.into(), spelling: Spelling::Tracepoint }));
    assert_eq!(reads(&p, 2), ["retval"]);
    // `args.NAME` is `args->NAME`; the kill tracepoint's fields by their kernel names.
    let p = compile("tracepoint:syscalls:sys_enter_read { @[args.fd] = sum(args->count); }");
    assert_eq!(reads(&p, 0), ["arg0", "arg2"]);
    let p = compile("tracepoint:raw_syscalls:sys_exit /args->ret < 0/ { @errors = count(); }");
    assert!(matches!(&p.probes[0].predicate, Some(Expr { kind: ExprKind::Binary { lhs, .. }, .. }) if matches!(lhs.kind, ExprKind::Builtin(Builtin::Retval))));
}

#[test]
fn a_glob_splits_only_where_its_calls_differ() {
    // read and write both have `fd` first: the glob stays one point.
    let p = compile("tracepoint:syscalls:sys_enter_[rw]* { @[args.fd] = count(); }");
    assert_eq!((p.probes.len(), p.probes[0].points.clone()), (1, vec![entry("[rw]*")]));
    // open and openat do not: one probe per call the glob matches.
    let p = compile("tracepoint:syscalls:sys_enter_open* { @[str(args.filename)] = count(); }");
    let points: Vec<_> = p.probes.iter().map(|probe| probe.points.clone()).collect();
    assert_eq!(points, [vec![entry("open")], vec![entry("openat")]]);
    assert_eq!((reads(&p, 0), reads(&p, 1)), (vec!["arg0".to_string()], vec!["arg1".to_string()]));
    // A probe without `args` keeps its glob whatever the calls' arguments.
    assert_eq!(compile("tracepoint:syscalls:sys_enter_open* { @ = count(); }").probes[0].points, [entry("open*")]);
    // The tracepoints' own names of calls x86-64 names otherwise (statsnoop.bt's newstat).
    let p = compile("tracepoint:syscalls:sys_enter_newstat { printf(\"%s\\n\", str(args->filename)); }");
    assert_eq!((p.probes[0].points.clone(), reads(&p, 0)), (vec![entry("stat")], vec!["arg0".to_string()]));
}

#[test]
fn fields_that_are_not_there_are_refused_where_written() {
    let first = |src: &str| errors(src).remove(0);
    let msg = |m: &str, line, column| (m.to_string(), line, column);
    assert_eq!(first("tracepoint:syscalls:sys_enter_openat { @x = args->path; }"), msg("`openat` has no argument `path`; its arguments are dfd, filename, flags, mode", 1, 51));
    assert_eq!(first("tracepoint:syscalls:sys_exit_read { @x = args.fd; }"), msg("at a system call's exit `args` has only `ret`, not `fd`", 1, 47));
    assert_eq!(first("uprobe:foo { @x = args->ret; }"), msg("`func:foo` has no `args`: they are the fields of a system call's tracepoint (use arg0..arg5, retval)", 1, 25));
    assert_eq!(first("tracepoint:syscalls:sys_enter_* { @x = args.fd; }"), msg("`clone` has no argument `fd`; its arguments are clone_flags, newsp, parent_tidptr, child_tidptr, tls (`*` matches `clone`)", 1, 45));
    assert_eq!(first("tracepoint:syscalls:sys_enter_read { @x = args; }"), msg("`args` holds a tracepoint's fields: write `args.NAME` or `args->NAME`", 1, 43));
    assert_eq!(first("tracepoint:syscalls:sys_enter_read { @x = args->1; }"), msg("expected a field name after `args`, found integer `1`", 1, 49));
}

#[test]
fn time_prints_the_time_of_day() {
    let p = compile("BEGIN { time(\"%H:%M:%S  \"); time(); printf(\"%d\\n\", 1e6); }");
    let formats: Vec<&[Piece]> = p.formats.iter().map(|f| &f.pieces[..]).collect();
    assert!(matches!(formats[0], [Piece::Time(id)] if p.string(*id) == b"%H:%M:%S  "));
    assert!(matches!(formats[1], [Piece::Time(id)] if p.string(*id) == b"%H:%M:%S\n"));
    assert!(matches!(&p.probes[0].body[0], Stmt::Printf { args, .. } if args.is_empty()));
    assert!(matches!(&p.probes[0].body[2], Stmt::Printf { args, .. } if matches!(args[0].kind, ExprKind::Int(1_000_000))));
    let text = String::from_utf8(printf(&p, &p.formats[0], &[]).unwrap()).unwrap();
    let digits: Vec<bool> = text.bytes().map(|b| b.is_ascii_digit()).collect();
    assert_eq!((text.len(), &text[2..3], &text[5..6], &text[8..]), (10, ":", ":", "  "), "{text}");
    assert!(digits[..8].iter().enumerate().all(|(i, &d)| d == (i % 3 != 2)), "{text}");
    assert_eq!(errors("BEGIN { time(1); }")[0].0, "expected a string literal, the format of `time`, found integer `1`");
}

#[test]
fn an_executable_scripts_first_line_is_skipped() {
    let p = compile("#!/usr/bin/env bpftrace\n/* opensnoop */\nBEGIN\n{\n\t@x = 2e3;\n}\n");
    assert!(matches!(&p.probes[0].body[0], Stmt::SetMap { value, .. } if matches!(value.kind, ExprKind::Int(2000))));
}

#[test]
fn probe_names_the_call_in_the_scripts_spelling() {
    let names = |src: &str| -> Vec<String> { compile(src).probes.iter().flat_map(|p| &p.points).map(|p| p.to_string()).collect() };
    // A glob read by `probe` is a point per call, each named as bpftrace names its tracepoint.
    let all = names("tracepoint:syscalls:sys_enter_* { @[probe] = count(); }");
    assert_eq!(all.len(), 12);
    assert!(all.contains(&"tracepoint:syscalls:sys_enter_read".to_string()), "{all:?}");
    assert!(all.contains(&"tracepoint:syscalls:sys_enter_newstat".to_string()), "{all:?}");
    assert_eq!(names("tracepoint:syscalls:sys_exit_open* { @[probe] = count(); }"), ["tracepoint:syscalls:sys_exit_open", "tracepoint:syscalls:sys_exit_openat"]);
    assert_eq!(names("syscall:open* { @[probe] = count(); }"), ["syscall:open", "syscall:openat"]);
    assert_eq!(names("syscall:open*:return /probe == \"x\"/ { }"), ["syscall:open:return", "syscall:openat:return"]);
    // raw_syscalls is one tracepoint; a probe not reading `probe` keeps its glob.
    assert_eq!(names("tracepoint:raw_syscalls:sys_exit { @[probe] = count(); }"), ["tracepoint:raw_syscalls:sys_exit"]);
    assert_eq!(names("tracepoint:syscalls:sys_enter_open* { @ = count(); }"), ["tracepoint:syscalls:sys_enter_open*"]);
}

#[test]
fn syscount_reads_the_call_number_and_prints_the_top() {
    // syscount.bt: `args->id` is the call's number, signed as the kernel's `long id`.
    let p = compile(
        "tracepoint:raw_syscalls:sys_enter { @syscall[args->id] = count(); @process[comm] = count(); }\n\
         END { print(@syscall, 10); clear(@syscall); print(@process, 10, 1000); }",
    );
    assert_eq!(reads(&p, 0), ["args.id", "comm"]);
    assert_eq!(p.maps[0].keys, [Type::Int]);
    let prints: Vec<(u32, u32)> = p.probes[1].body.iter().filter_map(|s| if let Stmt::PrintMap { top, div, .. } = s { Some((*top, *div)) } else { None }).collect();
    assert_eq!(prints, [(10, 1), (10, 1000)]);
    let first = |src: &str| errors(src).remove(0).0;
    assert!(first("BEGIN { @m = 1; print(@m, -1); }").contains("integer literals from 0 to 4294967295"));
    assert!(first("BEGIN { @m = 1; print(@m, pid); }").contains("integer literals"));
    assert!(first("BEGIN { @m = 1; print(@m, 1, 2, 3); }").contains("at most a top and a divisor"));
    assert!(first("BEGIN { print(1, 2); }").contains("takes no more arguments"));
}

#[test]
fn elapsed_is_the_calls_time_at_lopis_returns_and_bpftraces_elsewhere() {
    // lopi's own return points and lock events: the call's time, the wait, the hold.
    for src in ["func:foo:return { @ = sum(elapsed); }", "syscall:read:return { @ = sum(elapsed); }", "lock:acquired, lock:release { @ = sum(elapsed); }"] {
        assert!(matches!(&compile(src).probes[0].body[0], Stmt::Aggregate { value: Some(Expr { kind: ExprKind::Builtin(Builtin::Elapsed), .. }), .. }), "{src}");
    }
    // Everywhere else, and at points written as bpftrace writes them (sslsnoop.bt's uretprobes):
    // the time since the trace began.
    for src in ["uretprobe:foo { $t = elapsed; }", "func:foo { $t = elapsed; }", "tracepoint:syscalls:sys_exit_read { $t = elapsed; }", "BEGIN { $t = elapsed; }", "end { $t = elapsed; }", "lock:acquire { $t = elapsed; }"] {
        let p = compile(src);
        assert!(matches!(&p.probes[0].body[0], Stmt::SetLocal { value: Expr { kind: ExprKind::Builtin(Builtin::SinceStart), .. }, .. }), "{src}");
        assert!(!p.needs().elapsed(), "{src}: no call time needed");
    }
}

#[test]
fn execsnoop_joins_the_arguments_on_one_line() {
    let p = compile(
        "tracepoint:syscalls:sys_enter_exec* { printf(\"%-10u %-5d \", elapsed / 1e6, pid); join(args->argv); }\n\
         tracepoint:syscalls:sys_enter_execve { join(args->envp, \",\"); }",
    );
    // execve's argv is its second argument, execveat's its third: a probe for each.
    let joins: Vec<(String, Vec<u8>)> = p
        .probes
        .iter()
        .flat_map(|probe| &probe.body)
        .filter_map(|s| match s {
            Stmt::Join { array: Expr { kind: ExprKind::Builtin(b), .. }, sep } => Some((b.name(), p.string(*sep).to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(joins, [("arg1".to_string(), b" ".to_vec()), ("arg2".to_string(), b" ".to_vec()), ("arg2".to_string(), b",".to_vec())]);
    assert!(p.needs().user_strings);
    let first = |src: &str| errors(src).remove(0).0;
    assert_eq!(first("BEGIN { $x = join(0); }"), "`join` is a statement, not a value");
}
