//! bpftrace's spellings of points (`BEGIN`, `uprobe:`, `uretprobe:`, `tracepoint:syscalls:`,
//! `tracepoint:raw_syscalls:`, `interval:ms:N`) give exactly what lopi's own spellings of the
//! same script give, in a library and in the program (named alone or by its path); kernel
//! points are refused in one line.
mod common;

use common::*;
use std::process::Command;

/// Calls `used` 14 times and libc's `getpid` 3 times, writes one line.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int used(int x) { return x * 3 + 1; }
int main(void) {
    long s = 0;
    for (int i = 0; i < 14; i++) s += used(i);
    for (int i = 0; i < 3; i++) s += getpid() > 0;
    printf("%ld\n", s);
    return 0;
}
"#;

const BPFTRACE: &str = r#"BEGIN { printf("go\n"); }
uprobe:PROG:used { @calls = count(); }
uretprobe:used { @ret = sum(retval); }
uprobe:libc.so.6:getpid { @getpid = count(); }
tracepoint:syscalls:sys_enter_write { @writes = count(); }
tracepoint:syscalls:sys_exit_write { @written = sum(retval); }
tracepoint:raw_syscalls:sys_enter { @all = count(); }
END { printf("end\n"); }"#;

const LOPI: &str = r#"begin { printf("go\n"); }
func:used { @calls = count(); }
func:used:return { @ret = sum(retval); }
func:libc.so.6:getpid { @getpid = count(); }
syscall:write { @writes = count(); }
syscall:write:return { @written = sum(retval); }
syscall:* { @all = count(); }
end { printf("end\n"); }"#;

#[test]
fn bpftrace_spellings_trace_what_lopis_do() {
    let dir = fresh_dir("trace-bpftrace");
    let prog = build_c(&dir, "prog", PROGRAM, &["-O2"]);
    let trace = |script: &str| {
        let out = run(Command::new(lopi_bin()).args(["trace", "-o"]).arg(dir.join("script.out")).args(["-e", script, "--"]).arg(&prog), default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        (out.stdout_str(), std::fs::read_to_string(dir.join("script.out")).unwrap())
    };
    // The program named by its path, as bpftrace's scripts name it.
    let (bpftrace_stdout, bpftrace) = trace(&BPFTRACE.replace("PROG", &prog.to_string_lossy()));
    let (lopi_stdout, lopi) = trace(LOPI);
    assert_eq!(bpftrace_stdout, lopi_stdout);
    assert_eq!(bpftrace, lopi, "the same script in both spellings");
    for want in ["go\n", "@calls: 14", "@ret: 287", "@getpid: 3", "@writes: 1", "end\n"] {
        assert!(bpftrace.contains(want), "{want:?} in:\n{bpftrace}");
    }
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", "kprobe:do_sys_openat2 { @n = count(); }", "--"]).arg(&prog), default_timeout()).unwrap();
    assert!(!out.status.success() && out.stderr_str().contains("the kernel's; lopi probes user space"), "{}", out.stderr_str());
    cleanup(&dir);
}
