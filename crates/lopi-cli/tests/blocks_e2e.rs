//! Basic blocks. `lopi info --probe block`: the control-flow graph lopi builds for a function
//! with a loop, a dense switch (a jump table) and early returns, at -O0 and -O2, PIE and not,
//! with and without CET: blocks that tile the function's code without overlapping, edges that
//! land on block starts, a back edge for the loop, an indirect jump through the table, and a
//! probe for most blocks. `--probe block`: every probed block's executions, rewritten and
//! live, equal callgrind's count of its first instruction, threads included.
mod common;

use common::{block_counts, build_c, callgrind_counts, cleanup, compile, fresh_dir, lopi_bin, run};
use serde_json::Value as Json;
use std::collections::{BTreeSet, HashMap};
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int classify(int x) {
    switch (x) {
    case 0: return 11;
    case 1: return x * 7 + 3;
    case 2: return 29;
    case 3: puts("three"); return 31;
    case 4: return 37;
    case 5: return x ^ 0x55;
    case 6: return 43;
    case 7: return 47;
    case 8: return 53;
    default: return -1;
    }
}
__attribute__((noinline)) long walk(const int *v, int n) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        if (v[i] < 0) return -sum;
        if (v[i] == 42) continue;
        sum += classify(v[i] % 10);
    }
    return sum;
}
int main(int argc, char **argv) {
    int v[64];
    for (int i = 0; i < 64; i++) v[i] = (i * 37 + argc) % 50;
    printf("%ld\n", walk(v, argc > 1 ? atoi(argv[1]) : 64));
    return 0;
}
"#;

fn hex(v: &Json) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn blocks_tile_functions_and_their_edges_land_on_blocks() {
    let dir = fresh_dir("blocks_graph");
    for flags in [&["-O0"][..], &["-O2"], &["-O2", "-no-pie"], &["-O3", "-fcf-protection"]] {
        let prog = build_c(&dir, &format!("blocks{}", flags.join("")), PROGRAM, flags);
        let out = run(Command::new(lopi_bin()).args(["info", "--probe", "block", "--format", "json"]).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{flags:?}: {}", out.stderr_str());
        let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
        let functions = json["functions"].as_array().unwrap();
        let function = |name: &str| functions.iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("{name} in {json}"));
        let mut probed = 0;
        let mut total = 0;
        for name in ["classify", "walk", "main"] {
            let f = function(name);
            let blocks = f["blocks"].as_array().unwrap_or_else(|| panic!("{flags:?} {name}: no graph: {f}"));
            let starts: BTreeSet<u64> = blocks.iter().map(|b| hex(&b["start"])).collect();
            assert!(starts.contains(&hex(&f["address"])), "{flags:?} {name}: the entry starts a block: {f}");
            let mut last_end = 0;
            for b in blocks {
                let (start, end) = (hex(&b["start"]), hex(&b["end"]));
                assert!(start < end && start >= last_end, "{flags:?} {name}: blocks in order, apart: {f}");
                last_end = end;
                for e in b["edges"].as_array().unwrap() {
                    if e["kind"] == "next" || e["kind"] == "jump" {
                        assert!(starts.contains(&e["to"].as_u64().unwrap()), "{flags:?} {name}: edge {e} lands on a block: {f}");
                    }
                }
                total += 1;
                probed += usize::from(b["probe"].is_string());
            }
            let back = blocks.iter().any(|b| b["edges"].as_array().unwrap().iter().any(|e| e["kind"] == "jump" && e["to"].as_u64().unwrap() <= hex(&b["start"])));
            if name == "walk" {
                assert!(back, "{flags:?}: walk's loop has a back edge: {f}");
            }
            if name == "classify" {
                assert!(blocks.len() >= 10, "{flags:?}: ten cases and a default: {f}");
                let table = blocks.iter().any(|b| b["edges"].as_array().unwrap().iter().any(|e| e["kind"] == "table"));
                assert!(table, "{flags:?}: the switch jumps through its table: {f}");
            }
        }
        // A program this small has little padding for bounces: its short blocks (`leave; ret`
        // at -O0) are the ones the blocks dominating them will have to stand for.
        assert!(probed * 10 >= total * 8, "{flags:?}: {probed} of {total} blocks get a probe: {json}");
    }
    cleanup(&dir);
}

/// Loops with known trip counts, a switch through a jump table, early returns, `continue`, and
/// two threads running the same code.
const COUNTED: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int classify(int x) {
    switch (x % 9) {
    case 0: return 11;
    case 1: return x * 7 + 3;
    case 2: return 29;
    case 3: return x / 3;
    case 4: return 37;
    case 5: return x ^ 0x55;
    case 6: return 43;
    case 7: return 47;
    default: return -1;
    }
}
__attribute__((noinline)) long walk(int n, int stop) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        if (i == stop) return -sum;
        if (i % 5 == 0) continue;
        for (int j = 0; j < i % 4; j++) sum += classify(i + j);
    }
    return sum;
}
static void *worker(void *arg) { return (void *)walk(300, (int)(long)arg); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    long total = walk(n, -1) + walk(n, n / 2);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(i * 100 + 50));
    for (int i = 0; i < 2; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
    printf("%ld\n", total);
    return 0;
}
"#;

#[test]
fn block_counts_equal_callgrinds_static_and_live() {
    let dir = fresh_dir("blocks_counts");
    for flags in [&["-O0"][..], &["-O2"], &["-O3", "-fcf-protection"]] {
        // Not PIE: callgrind's addresses are then the file's.
        let prog = build_c(&dir, &format!("counted{}", flags.join("")), COUNTED, &[flags, &["-no-pie", "-pthread"]].concat());
        let oracle = callgrind_counts(&prog, &["1000"], &dir);
        let native = run(Command::new(&prog).arg("1000"), common::default_timeout()).unwrap().stdout_str();
        let rewritten = dir.join("counted.lopi");
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "block", "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        for mode in ["static", "live", "coverage"] {
            let data = dir.join(format!("{mode}.data"));
            let _ = std::fs::remove_file(&data);
            let mut cmd = if mode == "static" {
                Command::new(&rewritten)
            } else {
                let mut c = Command::new(lopi_bin());
                c.args(["run", "-q", "--probe", if mode == "coverage" { "coverage" } else { "block" }, "--"]).arg(&prog);
                c
            };
            let out = run(cmd.arg("1000").env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
            assert!(out.status.success(), "{mode} {flags:?}: {}", out.stderr_str());
            assert_eq!(out.stdout_str(), native, "{mode} {flags:?}: the program's output");
            let mut checked = 0;
            let mut implied = 0;
            for func in ["classify", "walk", "worker", "main"] {
                for b in block_counts(&data, func) {
                    let addr = b["address"].as_u64().unwrap();
                    let want = oracle.get(&addr).copied().unwrap_or(0);
                    // A block without a probe: what the others imply of it must be true.
                    if let Some(ran) = b["ran"].as_bool().filter(|_| b["count"].is_null()) {
                        assert_eq!(ran, want > 0, "{mode} {flags:?}: {func}'s block at {addr:#x} without a probe: implied {ran}, callgrind says {want}");
                        implied += 1;
                    }
                    let Some(count) = b["count"].as_u64() else { continue };
                    if mode == "coverage" {
                        // A mark: 1 once the block ran.
                        assert_eq!(count > 0, want > 0, "{mode} {flags:?}: {func}'s block at {addr:#x} marked {count}, callgrind says {want}");
                    } else {
                        assert_eq!(count, want, "{mode} {flags:?}: {func}'s block at {addr:#x} ran {count} times, callgrind says {want}");
                    }
                    checked += 1;
                }
            }
            assert!(checked >= 10, "{mode} {flags:?}: {checked} blocks checked");
            eprintln!("{mode} {flags:?}: {checked} counted blocks and {implied} implied ones agree with callgrind");
        }
    }
    cleanup(&dir);
}

/// gcov's verdict per line of `src` (built with --coverage into `dir`, run with `args`):
/// line -> executed.
fn gcov_lines(dir: &std::path::Path, src: &std::path::Path, args: &[&str]) -> HashMap<u32, bool> {
    let prog = dir.join("gcov_build");
    compile(Command::new("cc").args(["-g", "-O0", "-no-pie", "-pthread", "--coverage", "-o"]).arg(&prog).arg(src).current_dir(dir)).unwrap();
    assert!(Command::new(&prog).args(args).current_dir(dir).stdout(std::process::Stdio::null()).status().unwrap().success());
    let notes = dir.join(format!("gcov_build-{}", src.file_stem().unwrap().to_string_lossy()));
    let out = Command::new("gcov").arg("-t").arg("-o").arg(&notes).arg(src).current_dir(dir).output().expect("gcov");
    let mut lines = HashMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = l.splitn(3, ':');
        let (Some(count), Some(line)) = (parts.next(), parts.next()) else { continue };
        let (count, line) = (count.trim().trim_end_matches('*'), line.trim().parse::<u32>().unwrap_or(0));
        if count == "#####" || count == "=====" {
            lines.insert(line, false);
        } else if count.parse::<u64>().is_ok() {
            lines.insert(line, true);
        }
    }
    lines
}

#[test]
fn coverage_agrees_with_gcov_on_every_line_both_report() {
    let dir = fresh_dir("blocks_coverage");
    let prog = build_c(&dir, "counted", COUNTED, &["-g", "-O0", "-no-pie", "-pthread"]);
    let src = dir.join("counted.c");
    let data = dir.join("cov.data");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "block", "--"]).arg(&prog).arg("1000").env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let cov = run(Command::new(lopi_bin()).args(["coverage", "--format", "json"]).arg(&data), common::default_timeout()).unwrap();
    assert!(cov.status.success(), "{}", cov.stderr_str());
    let json: Json = serde_json::from_str(&cov.stdout_str()).unwrap();
    let file = json["files"].as_array().unwrap().iter().find(|f| f["path"].as_str().unwrap().ends_with("counted.c")).unwrap_or_else(|| panic!("{json}"));
    let lopi: HashMap<u32, bool> = file["covered_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l.as_u64().unwrap() as u32, true))
        .chain(file["missed_lines"].as_array().unwrap().iter().map(|l| (l.as_u64().unwrap() as u32, false)))
        .collect();
    let gcov = gcov_lines(&dir, &src, &["1000"]);
    let both: Vec<u32> = lopi.keys().filter(|l| gcov.contains_key(l)).copied().collect();
    for l in &both {
        assert_eq!(lopi[l], gcov[l], "line {l}: lopi says {}, gcov {}", lopi[l], gcov[l]);
    }
    assert!(both.len() * 10 >= gcov.len() * 8, "lopi reports {} of gcov's {} lines: {lopi:?} vs {gcov:?}", both.len(), gcov.len());
    let lcov = run(Command::new(lopi_bin()).args(["coverage", "--format", "lcov"]).arg(&data), common::default_timeout()).unwrap();
    let text = lcov.stdout_str();
    assert!(text.starts_with("TN:\nSF:") && text.contains("\nDA:") && text.trim_end().ends_with("end_of_record"), "{text}");
    let drcov = dir.join("cov.drcov");
    let out = run(Command::new(lopi_bin()).args(["coverage", "--format", "drcov", "-o"]).arg(&drcov).arg(&data), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let bytes = std::fs::read(&drcov).unwrap();
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(400)]).into_owned();
    let bbs: usize = head.split("BB Table: ").nth(1).and_then(|t| t.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    let table = bytes.len() - (head.find("bbs\n").unwrap() + 4);
    assert!(head.starts_with("DRCOV VERSION: 2\n") && bbs > 10 && table == bbs * 8, "{head}: {table} table bytes");
    cleanup(&dir);
}

/// A hot loop that runs for a while: its coverage probes fire at once.
/// Runs a hot loop, then prints its result, its pid and where `step` is, and waits for its
/// input to end. `step` starts a cache line, so that no probe's jump spans two (those stay).
const HOT: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline, aligned(64))) long step(long i) { if (i % 7 == 0) return i / 7; if (i % 5 == 1) return i - 3; return i + 1; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000000; long s = 0;
    for (long i = 0; i < n; i++) s += step(i);
    printf("%ld %d %p\n", s, getpid(), (void *)step);
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}
"#;

/// Coverage probes that fired put their site's original code back: once the hot loop has
/// run, `step` is its original code again, in a rewritten binary and under `lopi run`, and
/// what the probes recorded stays.
#[test]
fn coverage_probes_take_themselves_out_once_they_fired() {
    let dir = fresh_dir("blocks_retire");
    let prog = build_c(&dir, "hot", HOT, &["-O2"]);
    let rewritten = dir.join("hot.cov");
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "coverage", "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let bytes = std::fs::read(&prog).unwrap();
    let module = lopi_elf::ElfModule::parse(&bytes).unwrap();
    let step = module.functions.iter().find(|f| f.name == "step").unwrap();
    for (mode, mapped) in [("rewritten", &rewritten), ("lopi run", &prog)] {
        let data = dir.join(format!("hot-{}.data", mode.replace(' ', "-")));
        let mut cmd = if mode == "lopi run" {
            let mut c = Command::new(lopi_bin());
            c.args(["run", "--probe", "coverage", "--"]).arg(&prog);
            c
        } else {
            Command::new(&rewritten)
        };
        let inside = common::patched_after_work(cmd.arg("3000000").env("LOPI_OUTPUT", &data), mapped, &prog, step.size, mode);
        assert!(inside.is_empty(), "{mode}: step still patched at offsets {inside:x?}");
        let blocks = block_counts(&data, "step");
        assert!(blocks.len() >= 3 && blocks.iter().all(|b| b["ran"] == true), "{mode}: {blocks:?}");
    }
    cleanup(&dir);
}

/// Eight threads released together into a function of many blocks, and a profiling timer whose
/// handler runs the same function on whichever thread it interrupts: probes fire and take
/// themselves out on several threads at once, and inside a handler that interrupted one.
const RACE: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
static pthread_barrier_t start;
static volatile long sink;
__attribute__((noinline)) long spread(long i) {
    switch (i % 12) {
    case 0: return i * 3;
    case 1: return i ^ 0x5a5a;
    case 2: return i + 17;
    case 3: return i / 3;
    case 4: return -i;
    case 5: return i << 2;
    case 6: return i % 7 ? i : 1;
    case 7: return i & 0xff;
    case 8: return i | 1;
    case 9: return i - 99;
    case 10: return i * i;
    default: return 5;
    }
}
static void on_prof(int sig) { (void)sig; sink += spread(sink & 15); }
static void *work(void *arg) {
    long id = (long)arg, sum = 0;
    pthread_barrier_wait(&start);
    for (long i = 0; i < 2000000; i++) sum += spread(i + id);
    return (void *)sum;
}
int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, 0);
    struct itimerval t = {{0, 200}, {0, 200}};
    setitimer(ITIMER_PROF, &t, 0);
    pthread_barrier_init(&start, 0, 8);
    pthread_t th[8];
    for (long i = 0; i < 8; i++) pthread_create(&th[i], 0, work, (void *)i);
    long total = 0;
    for (int i = 0; i < 8; i++) { void *r; pthread_join(th[i], &r); total += (long)r; }
    printf("%ld\n", total);
    return 0;
}
"#;

#[test]
fn coverage_probes_retire_under_threads_and_signals() {
    let dir = fresh_dir("blocks_race");
    let prog = build_c(&dir, "race", RACE, &["-O2", "-pthread"]);
    let native = run(&mut Command::new(&prog), common::default_timeout()).unwrap().stdout_str();
    let rewritten = dir.join("race.cov");
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "coverage", "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    for round in 0..10 {
        let data = dir.join(format!("race{round}.data"));
        let out = run(Command::new(&rewritten).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
        assert!(out.status.success(), "round {round}: {}", common::describe_status(&out.status));
        assert_eq!(out.stdout_str(), native, "round {round}");
        // Every case of the switch ran, so every block of spread did.
        let blocks = block_counts(&data, "spread");
        assert!(blocks.len() >= 12 && blocks.iter().all(|b| b["ran"] == true), "round {round}: {blocks:?}");
    }
    cleanup(&dir);
}

/// A loop of known trip count, then the program dies: killed (SIGKILL: nothing of the
/// program runs after) or crashing (SIGSEGV). What its probes recorded is already in the data
/// file, so nothing it did before is lost.
const DIES: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void rounds(int n) {
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0) sink += i;
        else sink -= 1;
    }
}
int main(int argc, char **argv) {
    rounds(300);
    printf("%ld\n", sink);
    fflush(stdout);
    if (strcmp(argv[1], "kill") == 0) kill(getpid(), SIGKILL);
    if (strcmp(argv[1], "segv") == 0) *(volatile int *)(long)argc = 0;
    return 0;
}
"#;

#[test]
fn block_records_survive_sigkill_and_crashes() {
    let dir = fresh_dir("blocks_dies");
    let prog = build_c(&dir, "dies", DIES, &["-O2", "-no-pie"]);
    let oracle = callgrind_counts(&prog, &["none"], &dir);
    for probe in ["block", "coverage"] {
        let rewritten = dir.join(format!("dies.{probe}"));
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", probe, "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        for death in ["kill", "segv"] {
            for mode in ["rewritten", "lopi run"] {
                let what = format!("--probe {probe}, {mode}, {death}");
                let data = dir.join(format!("{probe}-{death}-{}.data", mode.replace(' ', "-")));
                let mut cmd = if mode == "lopi run" {
                    let mut c = Command::new(lopi_bin());
                    c.args(["run", "-q", "--probe", probe, "--"]).arg(&prog);
                    c
                } else {
                    Command::new(&rewritten)
                };
                let out = run(cmd.arg(death).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
                assert!(!out.status.success(), "{what}: the program should have died");
                assert_eq!(out.stdout_str(), "14650\n", "{what}: the program's output");
                let blocks = block_counts(&data, "rounds");
                let mut checked = 0;
                for b in &blocks {
                    let want = oracle.get(&b["address"].as_u64().unwrap()).copied().unwrap_or(0);
                    match (b["count"].as_u64(), b["ran"].as_bool()) {
                        (Some(count), _) if probe == "block" => assert_eq!(count, want, "{what}: {b}"),
                        (Some(mark), _) => assert_eq!(mark > 0, want > 0, "{what}: {b}"),
                        (None, Some(ran)) => assert_eq!(ran, want > 0, "{what}: {b}"),
                        (None, None) => continue,
                    }
                    checked += 1;
                }
                assert!(checked >= 3, "{what}: {blocks:?}");
                assert!(blocks.iter().any(|b| b["count"].as_u64() == Some(300) || probe == "coverage"), "{what}: no block counted 300 rounds: {blocks:?}");
            }
        }
    }
    cleanup(&dir);
}
