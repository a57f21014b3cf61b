//! System calls from code no probe covers (machine code a program writes at run time), which
//! `lopi run --probe syscall --catch-unprobed` catches with Syscall User Dispatch: fixtures/syscalls/unprobed.c
//! counts, errors and logs as `strace -f` sees it, its threads' and its raw fork child's calls
//! included (with `--catch-unprobed`); without it, lopi leaves out exactly the calls its directive
//! `lopi-syscalls-unprobed` lists; a program with a SIGSYS handler of its own (raised SIGSYS,
//! a seccomp filter's traps) behaves as it does alone.
mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Calls that never return (`strace -c` counts a call when it returns), and `rt_sigreturn`
/// (what strace counts of it is a matter of definition; syscalls_e2e checks the fixture's
/// exact count), as in process_tree_e2e.
const NOT_COMPARED: [&str; 3] = ["exit_group", "exit", "rt_sigreturn"];

/// How often the barrier and the joins wait depends on how the threads are scheduled.
const SCHEDULED: [&str; 1] = ["futex"];

/// The flag that turns the catch on.
const CATCH: &str = "--catch-unprobed";

const CONFIGS: [(&str, &[&str]); 2] = [("O2-pie", &["-O2", "-fPIE", "-pie"]), ("O0-nopie", &["-O0", "-fno-pie", "-no-pie"])];

/// The `name=N` pairs of the fixture's `// lopi-KEY: ...` line.
fn directive(key: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(fixtures_dir().join("syscalls/unprobed.c")).expect("fixtures/syscalls/unprobed.c");
    let line = text.lines().find_map(|l| l.strip_prefix(&format!("// lopi-{key}: "))).unwrap_or_else(|| panic!("unprobed.c has no lopi-{key} line"));
    line.split_whitespace()
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("bad pair {w:?}"));
            (k.to_string(), v.parse().unwrap_or_else(|_| panic!("bad count {w:?}")))
        })
        .collect()
}

struct Built {
    dir: PathBuf,
    prog: PathBuf,
    original: Output,
}

fn build(config: &str, flags: &[&str]) -> Built {
    let dir = fresh_dir(&format!("unprobed-{config}"));
    let prog = dir.join("unprobed");
    let src = fixtures_dir().join("syscalls/unprobed.c");
    compile(Command::new("cc").args(flags).args(["-g", "-Wall", "-pthread"]).arg(&src).arg("-o").arg(&prog)).unwrap_or_else(|e| panic!("{e}"));
    let original = run(Command::new(&prog).current_dir(&dir), default_timeout()).expect("run unprobed");
    assert!(original.status.success(), "unprobed ({config}) fails on its own: {}\n{}", original.describe_status(), original.stderr_str());
    Built { dir, prog, original }
}

fn strace_counts(built: &Built) -> BTreeMap<String, u64> {
    let table = built.dir.join("strace-c.txt");
    let traced = run(Command::new(require("strace", "strace")).args(["-f", "-c", "-o"]).arg(&table).arg(&built.prog).current_dir(&built.dir), default_timeout()).expect("strace");
    assert!(traced.status.success() && traced.stdout == built.original.stdout, "unprobed under strace: {}\n{}", traced.describe_status(), traced.stderr_str());
    let counts = strace_table(&std::fs::read_to_string(&table).unwrap_or_default());
    assert!(!counts.is_empty(), "strace wrote no table");
    counts
}

/// `lopi run -q --probe syscall [extra] -- unprobed`, its record at `data`.
fn lopi_run(built: &Built, extra: &[&str], data: &Path) -> Output {
    run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "syscall"]).args(extra).arg("--").arg(&built.prog).current_dir(&built.dir).env("LOPI_OUTPUT", data), default_timeout()).expect("lopi run")
}

/// Differences in status and stdout between the program alone and under lopi.
fn same_run(label: &str, original: &Output, probed: &Output, problems: &mut Vec<String>) {
    if probed.status.code() != original.status.code() || probed.status.signal() != original.status.signal() {
        problems.push(format!("{label}: {} where the program alone ended with {}\n{}", probed.describe_status(), original.describe_status(), probed.stderr_str()));
    }
    if probed.stdout != original.stdout {
        problems.push(format!("{label}: stdout differs\n{}", diff("alone", &original.stdout_str(), label, &probed.stdout_str())));
    }
}

/// Both tables, name by name, for a failure message.
fn tables(strace: &BTreeMap<String, u64>, lopi: &BTreeMap<String, u64>) -> String {
    let mut text = format!("{:<20} {:>10} {:>10}\n", "syscall", "strace -c", "lopi");
    for name in strace.keys().chain(lopi.keys()).collect::<std::collections::BTreeSet<_>>() {
        let n = |m: &BTreeMap<String, u64>| m.get(name).map_or("-".to_string(), u64::to_string);
        text += &format!("{name:<20} {:>10} {:>10}\n", n(strace), n(lopi));
    }
    text
}

/// Names whose lopi count is not strace's less `fewer` (what lopi is not to see).
fn mismatches(strace: &BTreeMap<String, u64>, lopi: &BTreeMap<String, u64>, fewer: &BTreeMap<String, u64>) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = strace.keys().chain(lopi.keys()).collect();
    let count = |m: &BTreeMap<String, u64>, name: &str| m.get(name).copied().unwrap_or(0);
    names
        .into_iter()
        .filter(|n| !NOT_COMPARED.contains(&n.as_str()) && !SCHEDULED.contains(&n.as_str()))
        .filter(|n| count(lopi, n) + count(fewer, n) != count(strace, n))
        .map(|n| match count(fewer, n) {
            0 => format!("{n}: strace -f -c {}, lopi {}", count(strace, n), count(lopi, n)),
            k => format!("{n}: strace -f -c {}, lopi {} (expected {k} fewer)", count(strace, n), count(lopi, n)),
        })
        .collect()
}

/// The report's calls per name at the sites named `[unprobed code]` (by function or module).
fn unprobed_sites(json: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for site in json["sites"].as_array().into_iter().flatten() {
        if site["function"] == "[unprobed code]" || site["module"] == "[unprobed code]" {
            *calls.entry(site["name"].as_str().unwrap_or("").to_string()).or_default() += site["calls"].as_u64().unwrap_or(0);
        }
    }
    calls
}

#[test]
fn calls_from_code_built_at_run_time_count_as_strace_counts_them() {
    let unprobed = directive("syscalls-unprobed");
    let mut problems = Vec::new();
    for (config, flags) in CONFIGS {
        let built = build(config, flags);
        let strace = strace_counts(&built);
        let data = built.dir.join("caught.lopi");
        let label = format!("unprobed ({config}) under lopi run --probe syscall");
        same_run(&label, &built.original, &lopi_run(&built, &[CATCH], &data), &mut problems);
        assert!(data.exists(), "{label}: no record\n{}", problems.join("\n\n"));
        let json = syscall_report(&data);
        let seen = by_syscall(&json["syscalls"], "calls");
        let wrong = mismatches(&strace, &seen, &BTreeMap::new());
        if !wrong.is_empty() {
            problems.push(format!("{label}: counts differ from strace -f -c's:\n  {}\n{}", wrong.join("\n  "), tables(&strace, &seen)));
        }
        let errors = by_syscall(&json["syscalls"], "errors");
        if errors.get("close") != Some(&1) {
            problems.push(format!("{label}: close(-1) from the built code is 1 error, lopi reports {:?}", errors.get("close")));
        }
        // Each call the built code makes is at the one site `[unprobed code]`.
        let sites = unprobed_sites(&json);
        let want: BTreeMap<String, u64> = unprobed.iter().filter(|(n, _)| !NOT_COMPARED.contains(&n.as_str())).map(|(n, &c)| (n.clone(), c)).collect();
        let got: BTreeMap<String, u64> = sites.into_iter().filter(|(n, _)| !NOT_COMPARED.contains(&n.as_str())).collect();
        if got != want {
            problems.push(format!("{label}: the `[unprobed code]` sites count {got:?}, the fixture makes {want:?} there"));
        }
        cleanup(&built.dir);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn without_the_catch_exactly_the_unprobed_calls_go_uncounted() {
    let unprobed = directive("syscalls-unprobed");
    let (config, flags) = CONFIGS[0];
    let built = build(config, flags);
    let strace = strace_counts(&built);
    let data = built.dir.join("uncaught.lopi");
    let mut problems = Vec::new();
    let label = format!("unprobed ({config}) under lopi run --probe syscall");
    same_run(&label, &built.original, &lopi_run(&built, &[], &data), &mut problems);
    assert!(data.exists(), "{label}: no record\n{}", problems.join("\n\n"));
    let json = syscall_report(&data);
    let seen = by_syscall(&json["syscalls"], "calls");
    let wrong = mismatches(&strace, &seen, &unprobed);
    if !wrong.is_empty() {
        problems.push(format!("{label}: lopi should miss exactly the fixture's lopi-syscalls-unprobed calls {unprobed:?}:\n  {}\n{}", wrong.join("\n  "), tables(&strace, &seen)));
    }
    // The probed calls are still counted: main's libc getppid.
    if seen.get("getppid") != Some(&1) {
        problems.push(format!("{label}: getppid {:?}, expected the 1 made through libc", seen.get("getppid")));
    }
    let sites = unprobed_sites(&json);
    if !sites.is_empty() {
        problems.push(format!("{label}: `[unprobed code]` sites though nothing is caught: {sites:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    cleanup(&built.dir);
}

/// The log's lines of the calls the built code makes, with who made them: `main` (the first
/// line's pid), `child` (what main's `fork()` returned), the named threads (`names`: tid ->
/// name), pids in the lines replaced the same way (the program's parent: `parent`), each with
/// how many times it occurs.
fn who_made_what(log: &str, names: &BTreeMap<u32, String>) -> BTreeMap<String, usize> {
    let lines = strace_lines(log);
    let main = lines.first().map(|(pid, _)| *pid).expect("an empty log");
    let result_of = |pid: u32, call: &str| lines.iter().find(|(p, l)| *p == pid && l.starts_with(call)).and_then(|(_, l)| l.rsplit_once(" = ")?.1.parse::<u32>().ok());
    let mut roles: BTreeMap<u32, String> = names.clone();
    roles.insert(main, "main".into());
    if let Some(child) = result_of(main, "fork()") {
        roles.insert(child, "child".into());
    }
    if let Some(parent) = result_of(main, "getppid()") {
        roles.insert(parent, "parent".into());
    }
    let pid_word = regex::Regex::new(r"\b\d+\b").unwrap();
    let mut seen = BTreeMap::new();
    for (pid, line) in &lines {
        let name = line.split('(').next().unwrap_or("");
        if !["getppid", "write", "close", "fork", "tgkill", "exit_group"].contains(&name) {
            continue;
        }
        // Only these name pids (a write's byte count might equal one).
        let line = match name {
            "getppid" | "fork" | "tgkill" => pid_word.replace_all(line, |c: &regex::Captures| c[0].parse::<u32>().ok().and_then(|n| roles.get(&n)).cloned().unwrap_or_else(|| c[0].to_string())).into_owned(),
            _ => line.clone(),
        };
        let who = roles.get(pid).cloned().unwrap_or_else(|| pid.to_string());
        *seen.entry(format!("{who}: {line}")).or_default() += 1;
    }
    seen
}

fn show(counts: &BTreeMap<String, usize>) -> String {
    counts.iter().map(|(l, n)| format!("{n:>4}  {l}")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_log_has_the_unprobed_calls_of_each_thread_and_process() {
    let (config, flags) = CONFIGS[0];
    let built = build(config, flags);
    let strace_log = built.dir.join("strace.log");
    let traced = run(Command::new(require("strace", "strace")).args(["-f", "-o"]).arg(&strace_log).arg(&built.prog).current_dir(&built.dir), default_timeout()).expect("strace");
    assert!(traced.status.success(), "{}", traced.stderr_str());
    let log = built.dir.join("lopi.log");
    let data = built.dir.join("log.lopi");
    let out = lopi_run(&built, &[CATCH, "--log", log.to_str().unwrap()], &data);
    let mut problems = Vec::new();
    same_run("unprobed under lopi run --log", &built.original, &out, &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // strace names the threads by their prctl(PR_SET_NAME) lines, lopi's report by tid.
    let strace_text = std::fs::read_to_string(&strace_log).unwrap();
    let named = regex::Regex::new(r#"^prctl\(PR_SET_NAME, "(jit\d)"\)"#).unwrap();
    let strace_names: BTreeMap<u32, String> = strace_lines(&strace_text).into_iter().filter_map(|(pid, l)| Some((pid, named.captures(&l)?[1].to_string()))).collect();
    let report = syscall_report(&data);
    let lopi_names: BTreeMap<u32, String> = report["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("jit")))
        .map(|t| (t["tid"].as_u64().unwrap() as u32, t["name"].as_str().unwrap().to_string()))
        .collect();
    let want = who_made_what(&strace_text, &strace_names);
    let lopi_text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("no log at {}: {e}", log.display()));
    let got = who_made_what(&lopi_text, &lopi_names);
    // The fixture's own: the threads' 100 getppid each, the child's 10 (answered by main).
    for (line, n) in [("jit1: getppid() = parent", 100), ("jit2: getppid() = parent", 100), ("child: getppid() = main", 10), ("main: close(-1) = -1 EBADF (Bad file descriptor)", 1)] {
        assert_eq!(want.get(line), Some(&n), "strace's log is not as the fixture says ({line}):\n{}", show(&want));
    }
    assert!(got == want, "lopi's --log and strace -f -o disagree on who made which calls:\n{}", diff("strace -f -o", &show(&want), "lopi --log", &show(&got)));
    cleanup(&built.dir);
}

/// A program with a SIGSYS handler of its own, and system calls from code it builds at run
/// time (`raised`: SIGSYS raised, blocked, ignored, then its default action; `seccomp`: a
/// filter that traps getpgid, answered by the handler).
const OWN_SIGSYS: &str = r#"
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* mov rax, rdi; mov rdi, rsi; mov rsi, rdx; syscall; ret */
static const unsigned char CODE[] = {0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x0f, 0x05, 0xc3};
static long (*jit)(long nr, long a, long b);
static pid_t parent;
static volatile sig_atomic_t runs, wrong, traps;

static int jit_getppid(int n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += jit(SYS_getppid, 0, 0) != parent;
    return bad;
}

/* Makes calls from the built code with SIGSYS blocked (no SA_NODEFER). */
static void on_raised(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    runs++;
    wrong += sig != SIGSYS || si->si_code != SI_TKILL || si->si_pid != getpid();
    wrong += jit_getppid(2);
}

/* getpgid answered in user space, as a sandbox does. */
static void on_trap(int sig, siginfo_t *si, void *ucv) {
    ucontext_t *uc = ucv;
    runs++;
    wrong += sig != SIGSYS || si->si_code != 1 /* SYS_SECCOMP */ || si->si_syscall != SYS_getpgid;
    wrong += jit_getppid(2);
    uc->uc_mcontext.gregs[REG_RAX] = 4242 + traps++;
}

static void handle(void (*handler)(int, siginfo_t *, void *)) {
    struct sigaction sa = {.sa_sigaction = handler, .sa_flags = SA_SIGINFO}, now;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSYS, &sa, NULL);
    sigaction(SIGSYS, NULL, &now);
    printf("handler read back: %s\n", now.sa_sigaction == handler && (now.sa_flags & SA_SIGINFO) ? "the program's" : "ANOTHER");
}

static int raised(void) {
    handle(on_raised);
    int bad = jit_getppid(50);
    printf("50 calls from built code: %d wrong, handler ran %d times\n", bad, runs);
    for (int i = 0; i < 3; i++)
        raise(SIGSYS);
    printf("raised 3 times: handler ran %d times, %d wrong\n", runs, wrong);
    sigset_t sys, pending;
    sigemptyset(&sys);
    sigaddset(&sys, SIGSYS);
    sigprocmask(SIG_BLOCK, &sys, NULL);
    raise(SIGSYS);
    bad += jit_getppid(10);
    sigpending(&pending);
    printf("blocked: pending %d, handler ran %d times\n", sigismember(&pending, SIGSYS), runs);
    sigprocmask(SIG_UNBLOCK, &sys, NULL);
    printf("unblocked: handler ran %d times, %d wrong\n", runs, wrong + bad);
    signal(SIGSYS, SIG_IGN);
    raise(SIGSYS);
    bad += jit_getppid(10);
    printf("ignored: handler ran %d times, %d wrong\n", runs, wrong + bad);
    fflush(stdout);
    signal(SIGSYS, SIG_DFL);
    raise(SIGSYS);
    printf("still running after SIGSYS's default action\n");
    return 1;
}

static int seccomp_trap(void) {
    handle(on_trap);
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpgid, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("seccomp");
        return 2;
    }
    long by_libc = getpgid(0);
    long by_code = jit(SYS_getpgid, 0, 0);
    int bad = jit_getppid(20);
    printf("getpgid through libc %ld, from built code %ld\n", by_libc, by_code);
    printf("handler ran %d times, %d wrong\n", runs, wrong + bad);
    return wrong + bad != 0;
}

int main(int argc, char **argv) {
    parent = getppid();
    unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED)
        return 2;
    memcpy(code, CODE, sizeof CODE);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0)
        return 2;
    jit = (long (*)(long, long, long))code;
    return argc > 1 && strcmp(argv[1], "seccomp") == 0 ? seccomp_trap() : raised();
}
"#;

/// OWN_SIGSYS `mode` alone, then under lopi with and without the catch: the same output and
/// ending. `ends` is how it ends alone.
fn own_sigsys_handler(mode: &str, ends: &str) {
    let dir = fresh_dir(&format!("unprobed-sigsys-{mode}"));
    let prog = build_c(&dir, "own_sigsys", OWN_SIGSYS, &["-O2", "-Wall"]);
    let original = run(Command::new(&prog).arg(mode).current_dir(&dir), default_timeout()).expect("run");
    assert_eq!(original.describe_status(), ends, "own_sigsys {mode} alone:\n{}{}", original.stdout_str(), original.stderr_str());
    let mut problems = Vec::new();
    for extra in [&[CATCH][..], &[][..]] {
        let data = dir.join("own.lopi");
        let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "syscall"]).args(extra).arg("--").arg(&prog).arg(mode).current_dir(&dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
        same_run(&format!("own_sigsys {mode} under lopi run --probe syscall {}", extra.join(" ")), &original, &out, &mut problems);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    cleanup(&dir);
}

/// SIGSYS raised by the program reaches its handler (which makes calls from the built code
/// itself), is held while blocked, dropped while ignored, and its default action ends the
/// program; the catch's own SIGSYS never reaches the handler.
#[test]
fn a_program_s_own_sigsys_handler_gets_its_signals_and_no_other() {
    own_sigsys_handler("raised", "killed by signal 31");
}

/// A seccomp filter's SIGSYS (SECCOMP_RET_TRAP: how sandboxes answer a call in user space)
/// reaches the program's handler, for a call through libc's probed site and one from the
/// built code, and the result the handler sets is what the call returns.
#[test]
fn a_seccomp_filter_s_traps_reach_the_program_s_handler() {
    own_sigsys_handler("seccomp", "exit code 0");
}

/// A running program that calls `getppid` from machine code it wrote, and from a SIGUSR1
/// handler it raises every 1,000 calls, until `stop` exists; then prints its totals.
const JIT_LOOP: &str = r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
typedef long (*call0)(long nr);
static call0 jit;
static volatile long in_handler;
static void on_usr1(int sig) { (void)sig; in_handler += jit(110) > 0; }
int main(void) {
    /* mov rax, rdi; syscall; ret */
    static const unsigned char code[] = {0x48, 0x89, 0xf8, 0x0f, 0x05, 0xc3};
    void *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(p, code, sizeof code);
    mprotect(p, 4096, PROT_READ | PROT_EXEC);
    jit = (call0)p;
    signal(SIGUSR1, on_usr1);
    long calls = 0, wrong = 0;
    printf("ready\n");
    fflush(stdout);
    while (access("stop", F_OK) != 0) {
        wrong += jit(110) != getppid();
        if (++calls % 1000 == 0) {
            raise(SIGUSR1);
            usleep(1000);
        }
    }
    sigset_t mask;
    sigprocmask(SIG_BLOCK, NULL, &mask);
    printf("wrong %ld, handler calls %ld of %ld, SIGSYS blocked %d\n", wrong, in_handler, calls / 1000, sigismember(&mask, SIGSYS));
    return 0;
}
"#;

/// `lopi attach` to a program making calls from machine code it wrote (and from a signal
/// handler), then its detach: the calls are counted at `[unprobed code]` while attached, and
/// the program goes on and ends as it would have (a dispatch SIGSYS that came while lopi held a
/// thread killed it at the release, the signal's action put back).
#[test]
fn attach_and_detach_leave_a_program_calling_from_its_own_code_running() {
    use std::io::{BufRead, BufReader};
    let dir = fresh_dir("unprobed-attach");
    let prog = build_c(&dir, "jit_loop", JIT_LOOP, &["-O2"]);
    let mut child = Command::new(&prog).current_dir(&dir).stdout(std::process::Stdio::piped()).spawn().expect("start jit_loop");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    assert_eq!(line, "ready\n");
    let data = dir.join("attach.lopi");
    let attached = run(Command::new(lopi_bin()).args(["attach", &child.id().to_string(), "--probe", "syscall", CATCH, "--duration", "1s"]).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi attach");
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(dir.join("stop"), b"").expect("stop file");
    let status = child.wait().expect("wait jit_loop");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("jit_loop's output");
    assert!(attached.status.success(), "lopi attach: {}\n{}", attached.describe_status(), attached.stderr_str());
    assert!(status.success(), "jit_loop after the detach: {status:?}; lopi said:\n{}", attached.stderr_str());
    assert!(rest.starts_with("wrong 0, handler calls ") && rest.ends_with(", SIGSYS blocked 0\n"), "jit_loop printed {rest:?}");
    let (handled, raised) = rest["wrong 0, handler calls ".len()..].split_once(" of ").expect("totals");
    assert_eq!(handled, raised.split(',').next().unwrap_or(""), "every SIGUSR1 handler's call answered: {rest:?}");
    let caught = unprobed_sites(&syscall_report(&data));
    assert!(caught.get("getppid").copied().unwrap_or(0) > 1000, "while attached, lopi caught {caught:?} at [unprobed code]");
    cleanup(&dir);
}

/// Three `vfork`s made from machine code the program wrote (the child ends with `exit` from it
/// too), each followed by ten `getppid` calls from that code in the parent.
const JIT_VFORK: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
typedef long (*call1)(long nr, long arg);
int main(void) {
    /* mov rax, rdi; mov rdi, rsi; syscall; ret */
    static const unsigned char code[] = {0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x0f, 0x05, 0xc3};
    void *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(p, code, sizeof code);
    mprotect(p, 4096, PROT_READ | PROT_EXEC);
    call1 jit = (call1)p;
    long answered = 0;
    for (int k = 0; k < 3; k++) {
        long pid = jit(58, 0);
        if (pid == 0)
            jit(60, 0);
        for (int i = 0; i < 10; i++)
            answered += jit(110, 0) == getppid();
        int status;
        waitpid(pid, &status, 0);
    }
    printf("%ld of 30 answered\n", answered);
    return 0;
}
"#;

/// A `vfork` from unprobed code is made by a stub of its call site (the handler cannot make it:
/// the child would run on its stack), which blocks calls again after it: the parent's calls
/// from its own code right after it are caught, as strace sees them (they were not while the
/// thread ran on with calls let through, its next probed call far away).
#[test]
fn calls_after_a_vfork_from_unprobed_code_are_caught() {
    let dir = fresh_dir("unprobed-vfork");
    let prog = build_c(&dir, "jit_vfork", JIT_VFORK, &["-O2"]);
    let data = dir.join("vfork.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "syscall", CATCH, "--"]).arg(&prog).current_dir(&dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
    assert!(out.status.success() && out.stdout_str() == "30 of 30 answered\n", "jit_vfork under lopi: {}\n{}{}", out.describe_status(), out.stdout_str(), out.stderr_str());
    let table = dir.join("strace.txt");
    run(Command::new(require("strace", "strace")).args(["-f", "-c", "-o"]).arg(&table).arg(&prog).current_dir(&dir), default_timeout()).expect("strace");
    let strace = strace_table(&std::fs::read_to_string(&table).unwrap_or_default());
    let lopi = by_syscall(&syscall_report(&data)["syscalls"], "calls");
    for name in ["vfork", "getppid"] {
        assert_eq!(lopi.get(name), strace.get(name), "{name}: lopi {:?}, strace -f -c {:?}\n{}", lopi.get(name), strace.get(name), tables(&strace, &lopi));
    }
    cleanup(&dir);
}
