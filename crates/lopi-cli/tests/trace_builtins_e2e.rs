//! bpftrace's builtins as bpftrace's tools use them, in a fixture whose calls are known: `probe`
//! at system-call points in the script's spelling, `args.id` and `print(@m, top, div)`
//! (syscount.bt), unsigned `arg0` and `retval` (classify.bt), `join` and `elapsed`
//! (execsnoop.bt), `usym`, `uid` and a `libpthread` point (threadsnoop.bt).
mod common;

use common::{build_c, cleanup, fresh_dir, lopi_bin, run, Output};
use serde_json::{json, Value as Json};
use std::path::Path;
use std::process::Command;

/// classify(-3..7): 3 return -1 (4294967295 in the 64-bit `rax`: an `int`), 1 returns 0, 6
/// return 1; 5 getppid calls; 2 threads starting in `worker`; then, given an argument, it
/// becomes `/bin/true joined args`.
const FIXTURE: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((noipa)) int classify(int x) { return x < 0 ? -1 : x > 0; }
static void *worker(void *arg) { return arg; }
int main(int argc, char **argv) {
    long s = 0;
    for (int i = -3; i < 7; i++) s += classify(i);
    for (int i = 0; i < 5; i++) s += getppid() > 0;
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("s %ld\n", s);
    fflush(stdout);
    if (argc > 1) execl("/bin/true", "/bin/true", "joined", "args", (char *)NULL);
    return 0;
}
"#;

/// `lopi trace --format json -o FILE -e SCRIPT -- prog [args]`: lopi's lines (printed, and the
/// `{"maps"}` of each `print`), the maps at the end, and the run.
fn trace(dir: &Path, prog: &Path, script: &str, args: &[&str]) -> (Vec<String>, Json, Output) {
    let file = dir.join("trace.out");
    let out = run(
        Command::new(lopi_bin()).args(["trace", "--format", "json", "-o"]).arg(&file).args(["-e", script, "--"]).arg(prog).args(args).current_dir(dir),
        common::default_timeout(),
    )
    .expect("running lopi trace");
    assert!(out.status.success(), "lopi trace -e '{script}' failed: {}\n{}", out.describe_status(), out.stderr_str());
    assert_eq!(out.stdout_str(), "s 8\n", "the program's output changed under '{script}'");
    let text = std::fs::read_to_string(&file).expect("lopi trace's output");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let maps = serde_json::from_str(&lines.pop().unwrap_or_default()).unwrap_or_else(|e| panic!("no maps at the end ({e}): {text}"));
    (lines, maps, out)
}

#[test]
fn builtins_of_bpftraces_tools() {
    let dir = fresh_dir("trace_builtins");
    let prog = build_c(&dir, "builtins", FIXTURE, &["-O2", "-pthread"]);
    let path = prog.to_string_lossy();

    // syscalls_by_probe.bt and syscount.bt: `probe` names the call as the point was written;
    // `args.id` is its number (getppid is 110); `print(@m, top, div)` a line of JSON.
    let script = "tracepoint:syscalls:sys_enter_getpp* { @t[probe] = count(); } syscall:getpp* { @l[probe] = count(); }
                  tracepoint:raw_syscalls:sys_enter /args->id == 110/ { @id[args->id] = count(); @raw[probe] = count(); }
                  tracepoint:raw_syscalls:sys_enter { @all[args->id] = count(); }
                  END { print(@id, 1); print(@all, 1, 5); clear(@all); }";
    let (lines, maps, _) = trace(&dir, &prog, script, &[]);
    let want = json!({"@t": {"tracepoint:syscalls:sys_enter_getppid": 5}, "@l": {"syscall:getppid": 5}, "@id": {"110": 5},
                      "@raw": {"tracepoint:raw_syscalls:sys_enter": 5}});
    assert_eq!(maps["maps"], want);
    assert_eq!(lines[0], r#"{"maps":{"@id":{"110":5}}}"#);
    // The most frequent call, its count divided by 5: the 5 getppid calls are not it.
    let top: Json = serde_json::from_str(&lines[1]).unwrap();
    let all = top["maps"]["@all"].as_object().unwrap_or_else(|| panic!("{top}"));
    assert!(all.len() == 1 && !all.contains_key("110"), "{top}");

    // classify.bt: `arg0` and `retval` are unsigned, a 32-bit -1 is 4294967295.
    let script = format!(
        "uprobe:{path}:classify {{ @sign[arg0 < 0 ? \"negative\" : (arg0 == 0 ? \"zero\" : \"positive\")] = count(); @big = sum(arg0 > 1000); }}
         uretprobe:{path}:classify {{ @[retval] = count(); }}"
    );
    let (_, maps, _) = trace(&dir, &prog, &script, &[]);
    assert_eq!(maps["maps"], json!({"@": {"0": 1, "1": 6, "4294967295": 3}, "@sign": {"positive": 9, "zero": 1}, "@big": 3}));

    // execsnoop.bt and threadsnoop.bt: `join` of execve's argv (the exec the program makes
    // itself), `elapsed` since the trace began, `usym` of the thread's start routine at a
    // `libpthread` point, which glibc 2.34 has in libc.
    let script = "BEGIN { printf(\"uid %d gid %d\\n\", uid, gid); }
                  tracepoint:syscalls:sys_enter_execve { printf(\"%d \", elapsed > 0 && elapsed < 60000000000); join(args->argv); join(args->argv, \",\"); }
                  uprobe:libpthread:pthread_create { printf(\"%s\\n\", usym(arg2)); @t[usym(arg2)] = count(); }";
    let (lines, maps, out) = trace(&dir, &prog, script, &["exec"]);
    let ids = format!("uid {} gid {}", nix::unistd::getuid(), nix::unistd::getgid());
    assert_eq!(lines, [ids.as_str(), "worker", "worker", "1 /bin/true joined args", "/bin/true,joined,args"], "{}", out.stderr_str());
    assert_eq!(maps["maps"], json!({"@t": {"worker": 2}}));
    assert!(out.stderr_str().contains("`libpthread:pthread_create` is in libc.so.6"), "{}", out.stderr_str());
    cleanup(&dir);
}
