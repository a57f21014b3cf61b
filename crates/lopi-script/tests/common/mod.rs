//! What the script tests share: a resolver over a small made-up program, the valid scripts
//! (also the seeds of the robustness test), and helpers that say what went wrong.
#![allow(dead_code)]

use lopi_script::{compile_front, glob_match, ir::Program, Resolver};

/// Functions of the main program.
const MAIN: &[&str] = &["main", "foo", "bar", "baz", "sqlite3_step", "sqlite3_prepare_v2", "sqlite3_close", "compute"];
/// Loaded libraries: path and functions.
const LIBS: &[(&str, &[&str])] = &[
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", &["malloc", "free", "calloc", "pthread_mutex_lock"]),
    ("/usr/lib/x86_64-linux-gnu/libz.so.1", &["inflate", "deflate"]),
];
const SYSCALLS: &[&str] = &["read", "write", "open", "openat", "stat", "close", "mmap", "futex", "clone", "exit_group", "execve", "execveat"];

/// Knows [`MAIN`], [`LIBS`] (by path or file name) and [`SYSCALLS`].
pub struct TestResolver;

impl Resolver for TestResolver {
    fn functions_matching(&self, lib: Option<&str>, glob: &str) -> usize {
        let names: &[&str] = match lib {
            None => MAIN,
            Some(lib) => LIBS.iter().find(|(path, _)| *path == lib || path.rsplit('/').next() == Some(lib)).map_or(&[], |(_, f)| f),
        };
        names.iter().filter(|n| glob_match(glob, n)).count()
    }

    fn syscall_known(&self, name: &str) -> bool {
        SYSCALLS.contains(&name)
    }

    fn syscalls_matching(&self, glob: &str) -> Vec<String> {
        SYSCALLS.iter().filter(|n| glob_match(glob, n)).map(|n| n.to_string()).collect()
    }

    /// The program (`./prog`) has `myprov:tick` and `myprov:tock`; `./python`, CPython's
    /// `python:function__entry` and `python:function__return`.
    fn markers_matching(&self, lib: &str, provider: Option<&str>, name: &str) -> usize {
        let (of, names): (&str, &[&str]) = match lib {
            "./prog" => ("myprov", &["tick", "tock"]),
            "./python" => ("python", &["function__entry", "function__return"]),
            _ => return 0,
        };
        if provider.is_some_and(|p| !glob_match(p, of)) { 0 } else { names.iter().filter(|n| glob_match(name, n)).count() }
    }
}

/// The program of `src`, or a panic showing its diagnostics.
pub fn compile(src: &str) -> Program {
    compile_front(src, &TestResolver).unwrap_or_else(|d| panic!("{}\n{}", src, d.render(src, "test.lp")))
}

/// Every error of `src` as (message, line, column).
pub fn errors(src: &str) -> Vec<(String, usize, usize)> {
    match compile_front(src, &TestResolver) {
        Ok(_) => panic!("expected an error from {src}"),
        Err(d) => d.errors.into_iter().map(|e| (e.message, e.line, e.column)).collect(),
    }
}

/// Valid scripts, by name.
pub const SCRIPTS: &[(&str, &str)] = &[
    ("hello", "begin { printf(\"hello %s, pid %d\\n\", comm, pid); exit(); }"),
    ("count_calls", "func:sqlite3_* { @calls[func] = count(); }"),
    (
        "latency",
        "func:sqlite3_step { @start[tid] = nsecs; }\n\
         func:sqlite3_step:return /@start[tid]/ { @lat = hist(nsecs - @start[tid]); delete(@start[tid]); }",
    ),
    ("elapsed", "func:sqlite3_step:return { @us[comm] = avg(elapsed / 1000); }"),
    ("libc_malloc", "func:libc.so.6:malloc { @bytes[comm] = sum(arg0); }"),
    ("libz_path_return", "func:/usr/lib/x86_64-linux-gnu/libz.so.1:inflate:return { @r[retval] = count(); }"),
    ("explicit_entry", "func:main:entry { printf(\"%d\\n\", arg1); }"),
    ("lib_kinds", "func:libc.so.6:free:entry, func:libc.so.6:malloc:return { @n = count() }"),
    ("offset", "func:main+0x10 { @hits = count(); printf(\"%x\\n\", arg0); }"),
    ("offset_decimal", "func:foo+12 { @x = arg2 }"),
    ("addr", "addr:0x401000 { @pc = count(); }"),
    ("syscall_read", "syscall:read { @fds[arg0] = count(); }"),
    ("syscall_errors", "syscall:*:return /retval < 0/ { @errors[probe] = count(); }"),
    ("syscall_glob", "syscall:[rw]* { @rw = count() }"),
    ("syscall_lhist", "syscall:openat:return { @fd = lhist(retval, 0, 100, 10); }"),
    ("locks", "lock:acquire, lock:release { @ops[probe] = count(); }"),
    ("lock_all", "lock:* { @locks = count(); }"),
    ("lock_events", "lock:contended { @c[tid] = count(); } lock:acquired { @a = count(); }"),
    ("interval_print", "interval:500ms { print(@calls); clear(@calls); }\nfunc:foo { @calls = count(); }"),
    ("interval_units", "interval:1s { exit(); } interval:100ms {} interval:2000us { } interval:1000000ns {}"),
    ("threads", "thread:start { @threads = count(); } thread:exit { @exited[tid] = nsecs; }"),
    ("begin_end", "begin { @start = nsecs; }\nend { printf(\"ran %d ns\\n\", nsecs - @start); print(@start); }"),
    ("precedence", "begin { $x = 1 + 2 * 3; $y = $x && 0 || 1; }"),
    (
        "all_binops",
        "begin { $a = 7; $b = $a * 2 / 3 % 4 + 5 - 6 << 1 >> 1; $c = $a < $b; $c = $a <= $b; $c = $a > $b;\n\
         $c = $a >= $b; $c = $a == $b; $c = $a != $b; $c = $a & $b ^ $c | 1; }",
    ),
    ("unary", "begin { $a = -5; $b = ~$a; $c = !$b; @u = - - $c }"),
    ("ternary_str", "begin { $s = pid > 100 ? \"big\" : \"small\"; printf(\"%s\\n\", $s); }"),
    ("string_eq", "func:foo /comm == \"sqlite3\"/ { @by_name[str(arg0)] = count(); }"),
    ("str_len", "func:foo { @s[tid] = str(arg0, 16); }"),
    ("ustack_keys", "func:foo { @stacks[ustack()] = count(); @deep[ustack(8)] = count(); }"),
    ("stack_local", "func:foo { $s = ustack(5); @m[$s, tid] = count(); print($s); }"),
    (
        "if_chain",
        "func:foo { if (arg0 > 10) { @big = count(); } else if (arg0 > 5) { @mid = count(); } else { @small = count(); } }",
    ),
    ("definite", "begin { if (pid) { $x = 1; } else { $x = 2; } printf(\"%d\\n\", $x); }"),
    (
        "compound",
        "begin { $x = 1; $x += 2; $x -= 1; $x *= 3; $x /= 2; $x %= 5; $x &= 7; $x |= 8; $x ^= 1; $x <<= 2; $x >>= 1;\n\
         $x++; $x--; @m += $x; @m++; @m--; @k[1] -= 2; }",
    ),
    (
        "aggregations",
        "func:foo { @c = count(); @s = sum(arg0); @a = avg(arg0); @mn = min(arg0); @mx = max(arg0);\n\
         @st = stats(arg0); @h = hist(arg0); @l = lhist(arg0, -100, 100, 20); }",
    ),
    ("multi_key", "func:foo { @m[pid, tid, comm, cpu] = count(); }"),
    ("delete_clear", "func:foo { @m[arg0, 1] = 1; delete(@m[arg0, 1]); } end { clear(@m); }"),
    ("print_expr", "begin { print(1 + 2); print(\"x\"); print(comm); }"),
    ("printf_flags", "begin { printf(\"%-10s|%08x|%5d|%ld|%X|%u|%c|%i|%.3s|%%\\n\", comm, 255, -3, 4, 255, 5, 65, 7, \"abcdef\"); }"),
    ("comments", "// leading comment\nbegin /* inline */ { /* x */ @x = 1; // trailing\n }\n/* tail */"),
    ("no_trailing_semi", "begin { $a = 1; @b = $a }"),
    ("predicate_complex", "func:foo /pid == 42 && (arg0 / 2) > 10 || !tid/ { exit() }"),
    (
        "read_before_assign",
        "func:foo:return /@start[tid] != 0/ { @lat = hist(nsecs - @start[tid]); }\nfunc:foo { @start[tid] = nsecs; }",
    ),
    ("shared_func", "func:foo, func:bar { @calls[func, probe] = count(); }"),
    ("shared_return", "func:foo:return, syscall:read:return { @r = sum(retval); }"),
    ("strings", "begin { printf(\"tab\\there \\\"q\\\" \\\\ \\x41\\n\"); $s = \"abc\"; @names[$s] = 1; @names[\"abc\"] = 2; }"),
    ("literals", "begin { @x = 0xff_ff + 1_000_000; @mask = 0xffff_ffff_ffff_ffff; }"),
    ("anonymous_map", "func:foo { @[comm] = count(); }"),
    ("func_return_name", "func:ba*:return { @r[func] = count() }"),
    ("lib_glob", "func:libz.so.1:*flate { @z[func] = count(); }"),
    ("string_map_values", "func:foo { @last[tid] = comm; @who = \"nobody\"; if (@last[tid] == @who) { exit(); } }"),
    ("stray_semicolons", "begin { ; $a = 1;; ; } end { }"),
    (
        "tracepoint_args",
        "#!/usr/bin/env bpftrace\ntracepoint:syscalls:sys_enter_open, tracepoint:syscalls:sys_enter_openat { @name[tid] = args->filename; }\n\
         tracepoint:syscalls:sys_exit_open* /@name[tid]/ { time(\"%H:%M:%S \"); printf(\"%s %d\\n\", str(@name[tid]), args.ret / 1e0); delete(@name[tid]); }",
    ),
];

/// The script named `name` in [`SCRIPTS`].
pub fn script(name: &str) -> &'static str {
    SCRIPTS.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no script {name}")).1
}

/// xorshift64*, as in lopi-cache's robustness tests: the fixed-seed randomness of the
/// robustness and property tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}
