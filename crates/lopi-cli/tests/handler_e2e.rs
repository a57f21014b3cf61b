//! C handlers (`--handler FILE.c`): callbacks compiled into the probe image and run by the
//! program's own threads, rewritten, under `lopi run` and attached; what they see equals what
//! the program did (its calls, arguments, results and system calls, counted by itself); the
//! compiler's and linker's complaints reach the user with the file's lines.
mod common;

use common::{build_c, cleanup, fresh_dir, lopi_bin, run};
use std::path::Path;
use std::process::Command;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) long add(long a, long b) { return a + b; }
__attribute__((noinline)) long nap(long us) { usleep(us); return us * 2; }
static void *worker(void *arg) {
    long s = 0;
    for (long i = 0; i < 1000; i++) s = add(s, i);
    return (void *)s;
}
int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t[16];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, 0);
    long total = 0;
    for (int i = 0; i < threads; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
    total += nap(20000);
    for (int i = 0; i < 3; i++) write(1, "ok\n", 3);
    printf("%ld\n", total);
    return 0;
}
"#;

/// Counts add's calls and sums its second argument and its results over every thread;
/// times nap; names functions through a table of pointers (relocated data) and prints when
/// main returns.
const HANDLER: &str = r#"
#include "lopi.h"
static uint64_t calls, args, results, nap_ns, nap_ret, started;
static const char *const watched[] = {"add", "nap", "main"};
void lopi_init(void) { started = 1; }
void lopi_enter(const struct lopi_event *e) {
    if (lopi_streq(e->name, watched[0])) {
        lopi_add(&calls, 1);
        lopi_add(&args, e->arg[1]);
    }
}
void lopi_leave(const struct lopi_event *e) {
    if (lopi_streq(e->name, watched[0])) lopi_add(&results, e->retval);
    if (lopi_streq(e->name, watched[1])) { nap_ns = e->elapsed_ns; nap_ret = e->retval; }
    if (lopi_streq(e->name, watched[2]))
        lopi_printf("handler: started=%lu calls=%lu args=%lu results=%lu nap_ret=%lu nap_us=%lu main=%s nr=%ld\n",
                    started, calls, args, results, nap_ret, nap_ns / 1000, e->name, (long)e->nr);
}
"#;

fn write_handler(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `lopi run -q --handler handler -- prog args`.
fn run_with_handler(handler: &Path, prog: &Path, args: &[&str]) -> common::Output {
    run(Command::new(lopi_bin()).args(["run", "-q", "--handler"]).arg(handler).arg("--").arg(prog).args(args), common::default_timeout()).unwrap()
}

/// The `key=value` fields of the handler's line in `stderr`.
fn fields(stderr: &str) -> std::collections::HashMap<String, String> {
    let line = stderr.lines().find(|l| l.starts_with("handler: ")).unwrap_or_else(|| panic!("no handler line in {stderr}"));
    line["handler: ".len()..].split_whitespace().filter_map(|f| f.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn handlers_see_every_call_rewritten_and_live() {
    let dir = fresh_dir("handler_calls");
    let handler = write_handler(&dir, "h.c", HANDLER);
    for flags in [&["-O0"][..], &["-O2", "-no-pie"], &["-O3", "-fcf-protection"]] {
        let prog = build_c(&dir, "prog", PROGRAM, &[flags, &["-pthread"]].concat());
        let rewritten = dir.join("prog.h");
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--handler"]).arg(&handler).arg("-o").arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        for mode in ["rewritten", "lopi run"] {
            let mut cmd = match mode {
                "rewritten" => Command::new(&rewritten),
                _ => {
                    let mut c = Command::new(lopi_bin());
                    c.args(["run", "-q", "--handler"]).arg(&handler).arg("--").arg(&prog);
                    c
                }
            };
            let out = run(cmd.arg("4").env("LOPI_OUTPUT", dir.join("data.lopi")), common::default_timeout()).unwrap();
            assert!(out.status.success(), "{mode} {flags:?}: {}", out.stderr_str());
            assert_eq!(out.stdout_str(), "ok\nok\nok\n2038000\n", "{mode} {flags:?}");
            let f = fields(&out.stderr_str());
            let want = [("started", "1"), ("calls", "4000"), ("args", "1998000"), ("results", &(4 * (0..1000u64).map(|i| i * (i + 1) / 2).sum::<u64>()).to_string()), ("nap_ret", "40000"), ("main", "main"), ("nr", "-1")];
            for (key, value) in want {
                assert_eq!(f[key], value, "{mode} {flags:?}: {key} ({f:?})");
            }
            let nap_us: u64 = f["nap_us"].parse().unwrap();
            assert!((20_000..2_000_000).contains(&nap_us), "{mode} {flags:?}: nap took {nap_us} us");
        }
    }
    cleanup(&dir);
}

/// System-call callbacks see every `write` the program made, with its arguments and result.
#[test]
fn handlers_see_system_calls() {
    let dir = fresh_dir("handler_syscalls");
    let prog = build_c(&dir, "prog", PROGRAM, &["-O2", "-pthread"]);
    let handler = write_handler(
        &dir,
        "s.c",
        r#"
#include "lopi.h"
static uint64_t writes, asked, written, exits;
void lopi_syscall_enter(const struct lopi_event *e) {
    if (e->nr == 1 && e->arg[0] == 1) { lopi_add(&writes, 1); lopi_add(&asked, e->arg[2]); }
    if (lopi_streq(e->name, "exit_group"))
        lopi_printf("handler: writes=%lu asked=%lu written=%lu at_site=%d\n", writes, asked, written, e->addr != 0);
}
void lopi_syscall_leave(const struct lopi_event *e) {
    if (e->nr == 1 && e->arg[0] == 1 && (int64_t)e->retval > 0) lopi_add(&written, e->retval);
}
"#,
    );
    let out = run_with_handler(&handler, &prog, &["2"]);
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(out.stdout_str(), "ok\nok\nok\n1039000\n");
    let f = fields(&out.stderr_str());
    // Three writes of "ok\n", then printf's flush of "1039000\n", all to stdout (a pipe here).
    assert_eq!((f["writes"].as_str(), f["asked"].as_str(), f["written"].as_str(), f["at_site"].as_str()), ("4", "17", "17", "1"), "{f:?}");
    // A rewritten file has no system-call probes of its own (they are libc's).
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--handler"]).arg(&handler).arg("-o").arg(dir.join("x")).arg(&prog), common::default_timeout()).unwrap();
    assert!(!out.status.success() && out.stderr_str().contains("lopi run or attach --handler"), "{}", out.stderr_str());
    cleanup(&dir);
}

/// A handler spliced into a running process, and taken out again with its probes.
#[test]
fn handlers_attach_and_detach() {
    use std::io::BufRead;
    let dir = fresh_dir("handler_attach");
    let prog = build_c(
        &dir,
        "loop",
        r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long add(long a, long b) { return a + b; }
int main(void) {
    printf("%d\n", getpid()); fflush(stdout);
    long s = 0;
    for (int r = 0; r < 60; r++) { for (long i = 0; i < 100; i++) s = add(s, 1); usleep(20000); }
    printf("%ld\n", s);
    return 0;
}
"#,
        &["-O2"],
    );
    let handler = write_handler(
        &dir,
        "a.c",
        r#"
#include "lopi.h"
static uint64_t calls;
void lopi_enter(const struct lopi_event *e) {
    if (lopi_streq(e->name, "add") && lopi_add(&calls, 1) == 0) lopi_printf("handler: first=%s arg1=%lu\n", e->name, e->arg[1]);
}
"#,
    );
    let mut child = Command::new(&prog).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid: i32 = line.trim().parse().unwrap();
    let out = run(Command::new(lopi_bin()).args(["attach", &pid.to_string(), "--duration", "300ms", "--handler"]).arg(&handler).env("LOPI_OUTPUT", dir.join("a.lopi")), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    common::code_matches_file(pid, &prog).unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success());
    assert_eq!(rest, "6000\n");
    let f = fields(&stderr);
    assert_eq!((f["first"].as_str(), f["arg1"].as_str()), ("add", "1"), "{stderr}");
    cleanup(&dir);
}

#[test]
fn the_compilers_complaints_reach_the_user() {
    let dir = fresh_dir("handler_errors");
    let prog = build_c(&dir, "prog", PROGRAM, &["-O2", "-pthread"]);
    let cases = [
        ("typo.c", "#include \"lopi.h\"\nvoid lopi_enter(const struct lopi_event *e) {\n    (void)e->nope;\n}\n", "typo.c:3:"),
        ("libc.c", "#include <stdio.h>\n#include \"lopi.h\"\nvoid lopi_enter(const struct lopi_event *e) { printf(\"%s\", e->name); }\n", "a handler runs without libc"),
        ("tls.c", "#include \"lopi.h\"\nstatic __thread int n;\nvoid lopi_enter(const struct lopi_event *e) { n += (int)e->arg[0]; }\n", "thread-local"),
        ("float.c", "#include \"lopi.h\"\nlong n;\nvoid lopi_enter(const struct lopi_event *e) { n = (long)(e->arg[0] * 1.5); }\n", "no floating point"),
        ("none.c", "#include \"lopi.h\"\nvoid enter(const struct lopi_event *e) { (void)e; }\n", "defines none of lopi_enter"),
    ];
    for (name, text, expected) in cases {
        let handler = write_handler(&dir, name, text);
        let out = run_with_handler(&handler, &prog, &[]);
        assert!(!out.status.success(), "{name}: should be refused");
        let stderr = out.stderr_str();
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    // An outdated lopi.h beside the handler is refused, not used with another layout.
    std::fs::write(dir.join("lopi.h"), "#define LOPI_HANDLER_ABI 0\n#if defined(LOPI_EXPECT_ABI) && LOPI_EXPECT_ABI != LOPI_HANDLER_ABI\n#error \"this lopi.h is for another version of lopi\"\n#endif\n").unwrap();
    let handler = write_handler(&dir, "stale.c", "#include \"lopi.h\"\nvoid lopi_enter(void *e) { (void)e; }\n");
    let out = run_with_handler(&handler, &prog, &[]);
    assert!(!out.status.success() && out.stderr_str().contains("another version of lopi"), "{}", out.stderr_str());
    cleanup(&dir);
}

/// What `lopi handler-header` prints compiles on its own, with the handlers' flags, and its
/// formatting (lopi_snprintf, without libc) writes what libc's snprintf writes.
#[test]
fn the_header_compiles_and_formats_as_libc() {
    let dir = fresh_dir("handler_header");
    let out = run(Command::new(lopi_bin()).arg("handler-header"), common::default_timeout()).unwrap();
    assert!(out.status.success());
    std::fs::write(dir.join("lopi.h"), out.stdout_str()).unwrap();
    std::fs::write(dir.join("t.c"), "#include \"lopi.h\"\nvoid lopi_enter(const struct lopi_event *e) { char b[64]; lopi_snprintf(b, sizeof b, \"%s\", e->name); }\n").unwrap();
    let status = Command::new("cc").args(["-c", "-Wall", "-Werror", "-ffreestanding", "-mgeneral-regs-only", "-o"]).arg(dir.join("t.o")).arg(dir.join("t.c")).status().unwrap();
    assert!(status.success());
    let prog = build_c(
        &dir,
        "fmt",
        &format!(
            "{}\n{}",
            out.stdout_str(),
            r#"
#include <stdio.h>
#include <string.h>
#define SAME(...) do { char a[200], b[200]; int n = lopi_snprintf(a, sizeof a, __VA_ARGS__), m = snprintf(b, sizeof b, __VA_ARGS__); \
    if (n != m || strcmp(a, b)) { printf("differ: [%s] [%s]\n", a, b); bad++; } } while (0)
int main(void) {
    int bad = 0;
    SAME("%d %i %u %x %X %o %c %s %%", -42, 7, 4000000000u, 255u, 255u, 8u, 'z', "str");
    SAME("%ld %lu %lx %lld %llu %zu", -1L, 18446744073709551615UL, 0xdeadbeefUL, -9223372036854775807LL - 1, 12345ULL, (size_t)99);
    SAME("[%5d] [%-5d] [%05d] [%-8s] [%8s] [%05d] [%3s]", 42, 42, 42, "ab", "ab", -42, "toolong");
    SAME("%p %s", (void *)0x1234, (char *)0);
    char small[4]; int n = lopi_snprintf(small, sizeof small, "%d", 123456);
    if (n != 6 || strcmp(small, "123")) { printf("truncation: %d [%s]\n", n, small); bad++; }
    printf(bad ? "bad\n" : "same\n");
    return 0;
}
"#
        ),
        &["-O2", "-w"],
    );
    let out = run(&mut Command::new(&prog), common::default_timeout()).unwrap();
    assert_eq!(out.stdout_str(), "same\n");
    cleanup(&dir);
}

/// Lock callbacks: every acquisition and release of the program's mutex, with the lock's
/// address, the wait and the hold.
#[test]
fn handlers_see_lock_events() {
    let dir = fresh_dir("handler_locks");
    let prog = build_c(
        &dir,
        "locker",
        r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static void *w(void *a) {
    for (int i = 0; i < 500; i++) { pthread_mutex_lock(&m); if (i % 50 == 0) usleep(200); pthread_mutex_unlock(&m); }
    return a;
}
int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, w, 0);
    for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    printf("%lu\n", (unsigned long)&m);
    return 0;
}
"#,
        &["-O2", "-pthread"],
    );
    let handler = write_handler(
        &dir,
        "l.c",
        r#"
#include "lopi.h"
/* Per lock (libc takes some of its own too): acquisitions, acquired, releases, long holds, contended. */
static uint64_t locks[16], counts[16][5];
static int slot(uint64_t lock) {
    for (int i = 0; i < 16; i++) {
        uint64_t seen = __atomic_load_n(&locks[i], __ATOMIC_ACQUIRE);
        if (seen == lock) return i;
        if (!seen && __atomic_compare_exchange_n(&locks[i], &seen, lock, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return i;
        if (seen == lock) return i;
    }
    return -1;
}
static void add(uint64_t lock, int what) { int i = slot(lock); if (i >= 0) lopi_add(&counts[i][what], 1); }
void lopi_lock_acquire(const struct lopi_event *e) { add(e->arg[0], 0); }
void lopi_lock_acquired(const struct lopi_event *e) { if (e->retval == 0) add(e->arg[0], 1); }
void lopi_lock_release(const struct lopi_event *e) { add(e->arg[0], 2); if (e->elapsed_ns >= 200000) add(e->arg[0], 3); }
void lopi_lock_contended(const struct lopi_event *e) { add(e->arg[0], 4); }
void lopi_syscall_enter(const struct lopi_event *e) {
    if (e->nr != 231) return;
    int top = 0;
    for (int i = 1; i < 16; i++) if (counts[i][0] > counts[top][0]) top = i;
    lopi_printf("handler: lock=%lu acquires=%lu acquired=%lu releases=%lu long=%lu contended_ok=%d\n", locks[top],
                counts[top][0], counts[top][1], counts[top][2], counts[top][3], counts[top][4] <= counts[top][0]);
}
"#,
    );
    let out = run_with_handler(&handler, &prog, &[]);
    assert!(out.status.success(), "{}", out.stderr_str());
    let f = fields(&out.stderr_str());
    assert_eq!(f["lock"], out.stdout_str().trim(), "{f:?}");
    for (key, want) in [("acquires", "1500"), ("acquired", "1500"), ("releases", "1500"), ("contended_ok", "1")] {
        assert_eq!(f[key], want, "{key}: {f:?}");
    }
    let long: u64 = f["long"].parse().unwrap();
    assert!((30..=1500).contains(&long), "{long} holds of 200 us or more: {f:?}");
    cleanup(&dir);
}
