//! `--probe entry:mark`: which functions ran. Rewritten and under `lopi run`, at -O0, -O2 PIE
//! and -O3 with CET, with threads, a signal handler and a longjmp: `lopi coverage` says a
//! function ran exactly when the program called it (the program's own choice of calls is the
//! oracle), and its lcov function records agree with gcov's. A mark that fired takes its
//! probe out: the function's entry is its original code again while the program still runs.
mod common;

use common::{build_c, cleanup, compile, fresh_dir, lopi_bin, run};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Four threads call the functions `f0`..`f13` the mask names; a signal handler calls `f15`;
/// `jumper` leaves by longjmp; `f14` and `never_called` never run.
const PROGRAM: &str = r#"
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
static volatile long sink;
/* One function a line: gcov tells functions apart by their lines. */
#define F(n) __attribute__((noinline)) long f##n(long x) { return x * (n + 3) + n; }
F(0)
F(1)
F(2)
F(3)
F(4)
F(5)
F(6)
F(7)
F(8)
F(9)
F(10)
F(11)
F(12)
F(13)
F(14)
F(15)
static long (*table[15])(long) = {f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14};
static jmp_buf back;
__attribute__((noinline)) void jumper(long x) { if (x) longjmp(back, 1); }
__attribute__((noinline)) void never_called(void) { sink++; }
static void on_usr1(int sig) { sink += f15(sig); }
static void *worker(void *arg) {
    long mask = (long)arg, sum = 0;
    for (long r = 0; r < 20000; r++)
        for (int i = 0; i < 14; i++)
            if (mask & (1L << i)) sum += table[i](r);
    return (void *)sum;
}
int main(int argc, char **argv) {
    long mask = argc > 1 ? strtol(argv[1], 0, 0) : 0x3fff;
    signal(SIGUSR1, on_usr1);
    raise(SIGUSR1);
    if (!setjmp(back)) jumper(1);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, (void *)mask);
    long total = sink;
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
    if (argc > 2) never_called();
    printf("%ld\n", total);
    return 0;
}
"#;

/// The functions of PROGRAM that run with `mask`, among those it defines.
fn expected(mask: u32) -> BTreeMap<String, bool> {
    let mut out: BTreeMap<String, bool> = (0..16).map(|i| (format!("f{i}"), i == 15 || (i < 14 && mask & (1 << i) != 0))).collect();
    for (name, ran) in [("main", true), ("worker", true), ("jumper", true), ("on_usr1", true), ("never_called", false)] {
        out.insert(name.into(), ran);
    }
    out
}

/// `lopi coverage --format json` of `data`: every marked function of `prog` and whether it ran.
fn functions_ran(data: &Path, prog: &Path) -> BTreeMap<String, bool> {
    let out = run(Command::new(lopi_bin()).args(["coverage", "--format", "json"]).arg(data), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    let module = json["modules"].as_array().unwrap().iter().find(|m| Path::new(m["source"].as_str().unwrap()) == prog).unwrap_or_else(|| panic!("{json}"));
    module["functions"].as_array().unwrap().iter().map(|f| (f["name"].as_str().unwrap().to_string(), f["ran"].as_bool().unwrap())).collect()
}

#[test]
fn marks_say_which_functions_ran_rewritten_and_live() {
    let dir = fresh_dir("functions_ran");
    let builds: [(&str, &[&str]); 3] = [("O0", &["-g", "-O0", "-no-pie", "-pthread"]), ("O2-pie", &["-g", "-O2", "-fPIE", "-pie", "-pthread"]), ("O3-cet", &["-g", "-O3", "-fcf-protection=full", "-pthread"])];
    let mask = 0b10_1101_0110_0101u32;
    for (label, flags) in builds {
        let prog = build_c(&dir, &format!("ran-{label}"), PROGRAM, flags);
        let native = run(Command::new(&prog).arg(mask.to_string()), common::default_timeout()).unwrap();
        assert!(native.status.success());
        let rewritten = dir.join(format!("ran-{label}.marked"));
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "entry:mark", "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        for mode in ["rewritten", "lopi run"] {
            let data = dir.join(format!("{label}-{}.lopi", mode.replace(' ', "-")));
            let mut cmd = if mode == "lopi run" {
                let mut c = Command::new(lopi_bin());
                c.args(["run", "-q", "--probe", "entry:mark", "--"]).arg(&prog);
                c
            } else {
                Command::new(&rewritten)
            };
            let out = run(cmd.arg(mask.to_string()).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
            assert!(out.status.success(), "{label} {mode}: {}", out.stderr_str());
            assert_eq!(out.stdout_str(), native.stdout_str(), "{label} {mode}: output differs");
            let ran = functions_ran(&data, &prog);
            for (name, want) in expected(mask) {
                assert_eq!(ran.get(&name), Some(&want), "{label} {mode}: {name} (all: {ran:?})");
            }
            // A marked record has no call counts to report, and says where its marks are.
            let report = run(Command::new(lopi_bin()).arg("report").arg(&data), common::default_timeout()).unwrap();
            assert!(!report.status.success() && report.stderr_str().contains("lopi coverage"), "{}", report.stderr_str());
        }
    }
    cleanup(&dir);
}

/// gcov's functions of `src` (built with --coverage into `dir`, run with `args`) and whether each ran.
fn gcov_functions(dir: &Path, src: &Path, args: &[&str]) -> BTreeMap<String, bool> {
    let prog = dir.join("gcov_build");
    compile(Command::new("cc").args(["-g", "-O0", "-no-pie", "-pthread", "--coverage", "-o"]).arg(&prog).arg(src).current_dir(dir)).unwrap();
    assert!(Command::new(&prog).args(args).current_dir(dir).stdout(std::process::Stdio::null()).status().unwrap().success());
    let notes = dir.join(format!("gcov_build-{}", src.file_stem().unwrap().to_string_lossy()));
    let out = Command::new("gcov").arg("-f").arg("-n").arg("-o").arg(&notes).arg(src).current_dir(dir).output().expect("gcov");
    // "Function 'f3'" then "Lines executed:100.00% of 1".
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("Function '").and_then(|l| l.strip_suffix('\'')) else { continue };
        let executed = lines.next().unwrap_or_default();
        out.insert(name.to_string(), !executed.starts_with("Lines executed:0.00%"));
    }
    assert!(!out.is_empty(), "gcov said: {text}");
    out
}

#[test]
fn lcov_function_records_agree_with_gcov() {
    let dir = fresh_dir("functions_ran_lcov");
    let prog = build_c(&dir, "ran", PROGRAM, &["-g", "-O0", "-no-pie", "-pthread"]);
    let data = dir.join("ran.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "entry:mark", "--"]).arg(&prog).arg("0x1234").env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let lcov = run(Command::new(lopi_bin()).args(["coverage", "--format", "lcov"]).arg(&data), common::default_timeout()).unwrap();
    assert!(lcov.status.success(), "{}", lcov.stderr_str());
    let text = lcov.stdout_str();
    let record = text.split("end_of_record").find(|r| r.contains("ran.c\n")).unwrap_or_else(|| panic!("{text}"));
    let lopi: BTreeMap<String, bool> = record.lines().filter_map(|l| l.strip_prefix("FNDA:")).map(|l| l.split_once(',').unwrap()).map(|(hits, name)| (name.to_string(), hits != "0")).collect();
    let gcov = gcov_functions(&dir, &dir.join("ran.c"), &["0x1234"]);
    assert_eq!(lopi, gcov, "lopi's lcov against gcov");
    let named: BTreeSet<&str> = record.lines().filter_map(|l| l.strip_prefix("FN:")).filter_map(|l| l.split_once(',')).map(|(_, n)| n).collect();
    assert_eq!(named.len(), lopi.len(), "{record}");
    cleanup(&dir);
}

/// A hot loop over `step`, then its result, pid and `step`'s address, and a wait for its
/// input to end. `step` starts a cache line: a jump across two stays (see `restorable`).
const HOT: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline, aligned(64))) long step(long i) { return i % 7 ? i + 1 : i / 7; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000, s = 0;
    for (long i = 0; i < n; i++) s += step(i);
    printf("%ld %d %p\n", s, getpid(), (void *)step);
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}
"#;

#[test]
fn a_mark_that_fired_takes_its_probe_out() {
    let dir = fresh_dir("functions_ran_retire");
    let prog = build_c(&dir, "hot", HOT, &["-O2"]);
    let rewritten = dir.join("hot.marked");
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "entry:mark", "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let bytes = std::fs::read(&prog).unwrap();
    let module = lopi_elf::ElfModule::parse(&bytes).unwrap();
    let step = module.functions.iter().find(|f| f.name == "step").unwrap();
    for (mode, mapped) in [("rewritten", &rewritten), ("lopi run", &prog)] {
        let data = dir.join(format!("hot-{}.lopi", mode.replace(' ', "-")));
        let mut cmd = if mode == "lopi run" {
            let mut c = Command::new(lopi_bin());
            c.args(["run", "-q", "--probe", "entry:mark", "--"]).arg(&prog);
            c
        } else {
            Command::new(&rewritten)
        };
        let inside = common::patched_after_work(cmd.env("LOPI_OUTPUT", &data), mapped, &prog, step.size, mode);
        assert!(inside.is_empty(), "{mode}: step still patched at offsets {inside:x?}");
        assert_eq!(functions_ran(&data, &prog).get("step"), Some(&true), "{mode}");
    }
    cleanup(&dir);
}
