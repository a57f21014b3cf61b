//! `usdt:` points: SystemTap's static markers (`<sys/sdt.h>`) probed at their `nop`, in a
//! fixture built at -O0 and -O2, PIE and not: each marker fires as often as the program counts
//! it, its arguments (registers, constants, frame and indexed memory, `symbol(%rip)`) are the
//! values the program passed, a guarded marker fires because lopi raises its semaphore (and
//! lowers it again when `-p` detaches), and a marker no probe fits at is skipped with its
//! reason. On Debian's python3.11, `python:function__entry` and `function__return` count what
//! `sys.setprofile` counts.
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// `work(n)` fires `myprov:tick` n times with `(i * 7) % 5` and prints how often each value
/// came; `kinds` passes six arguments of every size and signedness and prints them as it
/// passed them; `guarded` fires only while its semaphore is raised and the program prints how
/// often it ran; `tight` is a `nop` just before a branch target (no probe fits). With `w`,
/// it prints the guarded semaphore each time it changes.
const PROGRAM: &str = r#"#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Every marker of a file with semaphores has one; only `guarded` is read by the code. */
#define SEMAPHORE(name) unsigned short myprov_##name##_semaphore __attribute__((section(".probes")))
SEMAPHORE(tick);
SEMAPHORE(kinds);
SEMAPHORE(guarded);
SEMAPHORE(constant);
SEMAPHORE(tight);

long counter = 40;
long table[8] = {10, 11, 12, 13, 14, 15, 16, 17};
static int ticks[5];
volatile int guarded_seen;

__attribute__((noinline)) static long work(int n, long *p) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        int k = (i * 7) % 5;
        DTRACE_PROBE2(myprov, tick, k, p);
        ticks[k]++;
        sum += p[i % 8];
        if (myprov_guarded_semaphore) {
            DTRACE_PROBE1(myprov, guarded, i);
            guarded_seen++;
        }
    }
    return sum;
}

__attribute__((noinline)) static void kinds(int i, signed char c, short s, unsigned u) {
    DTRACE_PROBE6(myprov, kinds, c, s, i, counter, table[i & 7], u);
    counter += i;
}

/* Prints the guarded marker's semaphore each time it changes, calling `work` meanwhile, until
   it has gone up and down again (lopi trace -p attached and detached) or 20 s passed. */
static int watch(void) {
    int last = 0, changes = 0;
    for (int i = 0; i < 4000 && changes < 2; i++) {
        int now = *(volatile unsigned short *)&myprov_guarded_semaphore;
        if (now != last) {
            printf("semaphore %d\n", now);
            fflush(stdout);
            last = now;
            changes++;
        }
        work(1, table);
        usleep(5000);
    }
    return changes == 2 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0] == 'w')
        return watch();
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    if (argc > 2)
        DTRACE_PROBE(myprov, tight);
    long sum = work(n, table);
    for (int i = 0; i < 3; i++) {
        kinds(i - 1, (signed char)(-3 * i), (short)(-300 + i), 4000000000u + i);
        printf("kinds %d %d %d %ld %ld %u\n", (signed char)(-3 * i), (short)(-300 + i), i - 1, counter - (i - 1), table[(i - 1) & 7], 4000000000u + i);
    }
    DTRACE_PROBE2(myprov, constant, 5, -7);
    for (int k = 0; k < 5; k++)
        printf("tick %d %d\n", k, ticks[k]);
    printf("guarded %d sum %ld\n", guarded_seen, sum);
    return 0;
}
"#;

const BUILDS: [(&str, &[&str]); 4] = [("O0-no-pie", &["-O0", "-no-pie"]), ("O2-no-pie", &["-O2", "-no-pie"]), ("O0-pie", &["-O0", "-pie", "-fPIE"]), ("O2-pie", &["-O2", "-pie", "-fPIE"])];

const SCRIPT: &str = r#"usdt:PROG:myprov:tick { @ticks[arg0] = count(); }
usdt:PROG:myprov:kinds { printf("kinds %d %d %d %d %d %u\n", arg0, arg1, arg2, arg3, arg4, arg5); }
usdt:PROG:guarded { @guarded = count(); }
usdt:PROG:myprov:constant { printf("constant %d %d\n", arg0, arg1); }"#;

fn build(dir: &Path, name: &str, flags: &[&str]) -> std::path::PathBuf {
    require_package("systemtap-sdt-dev");
    build_c(dir, name, PROGRAM, flags)
}

/// `@map[key]: value` lines of `text`, by key.
fn map_entries(text: &str, map: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{map}[")))
        .filter_map(|l| l.split_once("]: "))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

#[test]
fn markers_fire_with_their_arguments_in_every_build() {
    let dir = fresh_dir("trace-usdt");
    let mut specs = String::new();
    for (name, flags) in BUILDS {
        let prog = build(&dir, &format!("prog-{name}"), flags);
        let info = run(Command::new(lopi_bin()).args(["info", "--usdt", "--format", "json"]).arg(&prog), default_timeout()).unwrap();
        assert!(info.status.success(), "{}", info.stderr_str());
        let info: Json = serde_json::from_str(&info.stdout_str()).unwrap();
        let markers = info["markers"].as_array().unwrap();
        let mut probed: Vec<&str> = markers.iter().filter(|m| m["probed"] == true).map(|m| m["name"].as_str().unwrap()).collect();
        probed.sort_unstable();
        assert_eq!((markers.len(), probed), (5, vec!["constant", "guarded", "kinds", "tick"]), "{name}: {info}");
        let tight = markers.iter().find(|m| m["name"] == "tight").unwrap();
        assert!(tight["refusal"].as_str().unwrap().contains("no probe fits"), "{tight}");
        specs += &markers.iter().map(|m| m["args"].as_str().unwrap().to_string() + " ").collect::<String>();

        // Without lopi nothing raises the semaphore: the guarded marker never runs.
        let plain = run(Command::new(&prog).arg("1003"), default_timeout()).unwrap();
        assert!(plain.stdout_str().contains("guarded 0 "), "{}", plain.stdout_str());

        let out_file = dir.join(format!("{name}.out"));
        let script = SCRIPT.replace("PROG", &prog.to_string_lossy());
        let out = run(Command::new(lopi_bin()).args(["trace", "-o"]).arg(&out_file).args(["-e", &script, "--"]).arg(&prog).arg("1003"), default_timeout()).unwrap();
        assert!(out.status.success(), "{name}: {}", out.stderr_str());
        let (stdout, traced) = (out.stdout_str(), std::fs::read_to_string(&out_file).unwrap());
        // The program's own counts and values, as the probes saw them.
        let ticks: BTreeMap<String, u64> = stdout.lines().filter_map(|l| l.strip_prefix("tick ")?.split_once(' ')).map(|(k, n)| (k.to_string(), n.parse().unwrap())).collect();
        assert_eq!(ticks.values().sum::<u64>(), 1003, "{stdout}");
        assert_eq!(map_entries(&traced, "@ticks"), ticks, "{name}:\n{traced}");
        let kinds = |text: &str| text.lines().filter(|l| l.starts_with("kinds ")).map(String::from).collect::<Vec<_>>();
        assert_eq!(kinds(&traced), kinds(&stdout), "{name}:\n{traced}");
        assert_eq!(kinds(&stdout).len(), 3);
        assert!(traced.contains("constant 5 -7\n"), "{name}:\n{traced}");
        assert!(stdout.contains("guarded 1003 ") && traced.contains("@guarded: 1003\n"), "{name}: the semaphore was raised:\n{stdout}\n{traced}");

        // Named alone, the marker no probe fits at refuses the script, saying why; among
        // others it is skipped, said so.
        let tight = run(Command::new(lopi_bin()).args(["trace", "-e", &format!("usdt:{}:tight {{ @t = count(); }}", prog.display()), "--"]).arg(&prog), default_timeout()).unwrap();
        assert!(!tight.status.success() && tight.stderr_str().contains("cannot run in") && tight.stderr_str().contains("no probe fits"), "{}", tight.stderr_str());
        let all = run(Command::new(lopi_bin()).args(["trace", "-o"]).arg(&out_file).args(["-e", &format!("usdt:{}:myprov:* {{ @[probe] = count(); }}", prog.display()), "--"]).arg(&prog).arg("7"), default_timeout()).unwrap();
        assert!(all.status.success() && all.stderr_str().contains("1 of its 5 markers cannot be probed, and never fire: myprov:tight"), "{}", all.stderr_str());
    }
    // Every kind of specifier came up: registers, constants, frame memory, a symbol and an
    // indexed operand.
    for kind in ["@%e", "@%r", "@$5", "(%rbp)", "@counter(%rip)", ",8)"] {
        assert!(specs.contains(kind), "no {kind} among {specs}");
    }
    cleanup(&dir);
}

#[test]
fn attaching_raises_the_semaphore_and_detaching_lowers_it() {
    let dir = fresh_dir("trace-usdt-attach");
    let prog = build(&dir, "prog", &["-O2"]);
    let mut child = Command::new(&prog).arg("w").stdout(std::process::Stdio::piped()).spawn().expect("starting the fixture");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let script = format!("usdt:{}:myprov:guarded {{ @guarded = count(); }}", prog.display());
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", &script, "--duration", "500ms", "-p"]).arg(child.id().to_string()), default_timeout()).unwrap();
    let status = child.wait().unwrap();
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(printed, "semaphore 1\nsemaphore 0\n", "{}", out.stderr_str());
    assert!(status.success());
    // About one call every 5 ms for 500 ms.
    let fired: u64 = out.stdout_str().lines().find_map(|l| l.strip_prefix("@guarded: ")).map_or(0, |n| n.parse().unwrap());
    assert!((10..=150).contains(&fired), "{}", out.stdout_str());
    cleanup(&dir);
}

/// Calls into each other, a method and a generator; at the end, the counts `sys.setprofile`
/// saw of this file's functions' returns.
const PYTHON: &str = r#"import sys, collections
counts = collections.Counter()
def profile(frame, event, arg):
    if event == sys.argv[1] and frame.f_code.co_filename == __file__:
        counts[frame.f_code.co_name] += 1

def leaf(x):
    return x + 1

def mid(n):
    return sum(leaf(i) for i in range(n))

class K:
    def meth(self, v):
        return mid(v)

def gen(n):
    for i in range(n):
        yield i

def main():
    k = K()
    return sum(k.meth(j) for j in range(30)) + sum(gen(5))

sys.setprofile(profile)
main()
sys.setprofile(None)
for name, n in sorted(counts.items()):
    print(f"{__file__} {name} {n}")
"#;

/// Debian's python3.11 has SystemTap markers. While a profile function is set (`sys.setprofile`,
/// as in the workload), 3.11 runs every call through its tracing path, where `function__entry`
/// fires at each Python call and `function__return` at each return (a generator's every resume
/// and yield too), as setprofile's `call` and `return` events. (Without one, `function__entry`
/// fires only where the interpreter starts a frame from C, not for the calls 3.11 inlines in its
/// eval loop: CPython issue #98894; bpftrace's uprobes count the same.) Each marker's counts,
/// keyed by its file and function strings, equal setprofile's on the same run.
fn python_marker_counts_as_setprofile(marker: &str, event: &str) {
    let python = require_file("/usr/bin/python3.11", "python3.11");
    let python = python.as_path();
    let file = std::fs::read(python).unwrap_or_default();
    assert!(String::from_utf8_lossy(&file).contains(marker), "{} has no {marker} marker (Debian's has)", python.display());
    // A short path: the interpreter names the file by its absolute path, which must fit in
    // a string (64 bytes).
    let dir = std::env::temp_dir().join(format!("lopi-usdt-{}-{event}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script_file = dir.join("work.py");
    std::fs::write(&script_file, PYTHON).unwrap();
    let plain = run(Command::new(python).arg(&script_file).arg(event), default_timeout()).unwrap();
    let want: BTreeMap<String, u64> = plain.stdout_str().lines().filter_map(|l| l.rsplit_once(' ')).map(|(k, n)| (k.replace(' ', ", "), n.parse().unwrap())).collect();
    assert!(want.len() >= 5 && want.values().sum::<u64>() > 400, "{want:?}");
    let script = format!("usdt:{}:python:{marker} /str(arg0) == \"{}\"/ {{ @[str(arg0), str(arg1)] = count(); }}", python.display(), script_file.display());
    let out_file = dir.join("out.txt");
    let out = run(Command::new(lopi_bin()).args(["trace", "-o"]).arg(&out_file).args(["-e", &script, "--"]).arg(python).arg(&script_file).arg(event), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let traced = std::fs::read_to_string(&out_file).unwrap();
    // Besides, what setprofile does not see: the module's and the class body's, run outside
    // its window, and those of the profile function itself.
    let mut got = map_entries(&traced, "@");
    let file = script_file.display();
    for unseen in ["<module>", "K", "profile"].iter().map(|f| format!("{file}, {f}")) {
        got.remove(&unseen);
    }
    assert_eq!(got, want, "{marker} against setprofile's {event} events: {traced}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn python_function_entries_are_counted_as_setprofile_counts_calls() {
    python_marker_counts_as_setprofile("function__entry", "call");
}

#[test]
fn python_function_returns_are_counted_as_setprofile_counts_them() {
    python_marker_counts_as_setprofile("function__return", "return");
}

/// Throws and catches of three kinds, counted by the program itself.
const THROWING: &str = r#"#include <cstdio>
#include <cstdlib>
#include <stdexcept>
static int throws, catches;
__attribute__((noinline)) void risky(int i) {
    if (i % 3 == 0) { throws++; throw std::runtime_error("three"); }
    if (i % 7 == 0) { throws++; throw i; }
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    for (int i = 0; i < n; i++) {
        try { risky(i); } catch (const std::exception &) { catches++; } catch (int) { catches++; }
    }
    printf("throws %d catches %d\n", throws, catches);
}
"#;

/// libstdc++'s markers (`libstdcxx:throw` and `catch`, in the library, not the program) count a
/// C++ program's throws and catches exactly, named by the library's path or its name.
#[test]
fn libstdcxx_markers_count_every_throw_and_catch() {
    let dir = fresh_dir("trace-usdt-libstdcxx");
    let source = dir.join("throwing.cpp");
    std::fs::write(&source, THROWING).unwrap();
    let prog = dir.join("throwing");
    let built = run(Command::new("c++").args(["-O2", "-o"]).arg(&prog).arg(&source), default_timeout()).unwrap();
    assert!(built.status.success(), "c++: {}", built.stderr_str());
    let plain = run(Command::new(&prog).arg("1000"), default_timeout()).unwrap();
    let counts = plain.stdout_str().trim().to_string();
    let (throws, catches) = counts.strip_prefix("throws ").and_then(|t| t.split_once(" catches ")).unwrap_or_else(|| panic!("{counts}"));
    let library = run(Command::new("sh").arg("-c").arg(format!("ldd {} | awk '/libstdc/ {{print $3}}'", prog.display())), default_timeout()).unwrap().stdout_str().trim().to_string();
    assert!(library.contains("libstdc++"), "ldd names no libstdc++: {library:?}");
    for lib in [library.as_str(), "libstdc++"] {
        let script = format!("usdt:{lib}:libstdcxx:throw {{ @throws = count(); }} usdt:{lib}:libstdcxx:catch {{ @catches = count(); }}");
        let out_file = dir.join("out.txt");
        let out = run(Command::new(lopi_bin()).args(["trace", "-o"]).arg(&out_file).args(["-e", &script, "--"]).arg(&prog).arg("1000"), default_timeout()).unwrap();
        assert!(out.status.success(), "usdt:{lib}: {}", out.stderr_str());
        assert_eq!(out.stdout_str().trim(), counts, "the program behaves as without probes");
        let traced = std::fs::read_to_string(&out_file).unwrap();
        assert!(traced.contains(&format!("@throws: {throws}\n")) && traced.contains(&format!("@catches: {catches}\n")), "usdt:{lib}: {counts}, lopi trace:\n{traced}");
    }
    cleanup(&dir);
}
