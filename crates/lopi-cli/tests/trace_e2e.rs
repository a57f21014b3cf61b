//! `lopi trace`: probe scripts compiled into a fixture and run by its threads, each checked
//! against exact results the fixture's own structure fixes (call counts, sums of arguments and
//! return values, histogram buckets, keys), the fixture's output unchanged.
mod common;

use common::{build_c, cleanup, fresh_dir, lopi_bin, run, Output};
use serde_json::{json, Value as Json};
use std::path::Path;
use std::process::Command;

/// Four threads call `step(i, name)` for i in 0..1000 with names cycling alpha, beta,
/// gamma from the thread's index; main then computes fib(15), sleeps five times 2 ms in
/// `slow`, calls top -> middle -> leaf once, and tailer, which tail-calls twice.
const FIXTURE: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static const char *names[] = {"alpha", "beta", "gamma"};
__attribute__((noinline)) long step(long i, const char *name) { __asm__ volatile(""); return 2 * i + (long)strlen(name); }
/* Without sibling-call optimisation GCC keeps both recursive calls of fib (it would turn one
   into a loop) and calls usleep from slow rather than jumping to it. */
#define CALLS __attribute__((noinline, optimize("no-optimize-sibling-calls")))
CALLS long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
CALLS void slow(int us) { usleep(us); }
__attribute__((noinline)) long leaf(long x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) long middle(long x) { return leaf(x) * 2 + 1; }
__attribute__((noinline)) long top(long x) { return middle(x) + 1; }
__attribute__((noinline)) long twice(long x) { __asm__ volatile(""); return 2 * x; }
__attribute__((noinline)) long tailer(long x) { return twice(x + 1); }
static void *worker(void *arg) {
    long id = (long)arg, sum = 0;
    for (long i = 0; i < 1000; i++) sum += step(i, names[(i + id) % 3]);
    return (void *)sum;
}
int main(void) {
    pthread_t t[4];
    long total = 0;
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
    long f = fib(15);
    for (int i = 0; i < 5; i++) slow(2000);
    printf("steps %ld fib %ld top %ld\n", total, f, top(41) + tailer(-1));
    return 0;
}
"#;

const FIXTURE_OUTPUT: &str = "steps 4014667 fib 610 top 86\n";

fn fixture(dir: &Path) -> std::path::PathBuf {
    build_c(dir, "scripted", FIXTURE, &["-O2", "-pthread"])
}

/// Runs `lopi trace -e SCRIPT --format json -o FILE -- prog`: (maps JSON, lopi's output file
/// without the maps line, the run's output).
fn trace(dir: &Path, prog: &Path, script: &str, extra: &[&str]) -> (Json, String, Output) {
    let file = dir.join("trace.out");
    let records = || -> Vec<_> { std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "lopi")).map(|e| e.path()).collect() };
    let before = records();
    let out = run(
        Command::new(lopi_bin()).arg("trace").arg("-e").arg(script).args(["--format", "json", "-o"]).arg(&file).args(extra).arg("--").arg(prog).current_dir(dir),
        common::default_timeout(),
    )
    .expect("running lopi trace");
    assert!(out.status.success(), "lopi trace -e '{script}' failed: {}\n{}", out.describe_status(), out.stderr_str());
    let kept = extra.contains(&"--record");
    assert!(kept || records() == before, "lopi trace left its record behind: {:?}", records());
    assert_eq!(out.stdout_str(), FIXTURE_OUTPUT, "the program's output changed under '{script}'");
    let text = std::fs::read_to_string(&file).expect("lopi trace's output");
    let (printed, maps) = text.trim_end().rsplit_once('\n').unwrap_or(("", text.trim_end()));
    let json = serde_json::from_str(maps).unwrap_or_else(|e| panic!("maps of '{script}' are not JSON ({e}): {text}"));
    (json, printed.to_string(), out)
}

#[test]
fn scripts_give_exact_counts_sums_and_buckets() {
    let dir = fresh_dir("trace_exact");
    let prog = fixture(&dir);
    let buckets = |list: &[(i64, i64, u64)]| json!({ "buckets": list.iter().map(|&(lo, hi, count)| json!({"lo": lo, "hi": hi, "count": count})).collect::<Vec<_>>() });
    let cases: Vec<(&str, Json)> = vec![
        ("func:step { @n = count(); }", json!({"@n": 4000})),
        ("func:step { @by[str(arg1)] = count(); }", json!({"@by": {"alpha": 1334, "beta": 1333, "gamma": 1333}})),
        ("func:step:return { @s = sum(retval); }", json!({"@s": 4014667})),
        ("func:step /arg0 < 10/ { @small = count(); }", json!({"@small": 40})),
        ("func:step /arg0 >= 990 && str(arg1) == \"beta\"/ { @late = count(); }", json!({"@late": 13})),
        ("func:fib { @calls = count(); @most = max(arg0); @least = min(arg0); }", json!({"@calls": 1973, "@most": 15, "@least": 0})),
        // fib(15) makes F(14) = 377 calls of fib(0), the only ones returning 0.
        ("func:fib:return /retval == 0/ { @zero = count(); } func:fib:return { @top = max(retval); }", json!({"@zero": 377, "@top": 610})),
        ("func:leaf { @h = hist(arg0); }", json!({"@h": buckets(&[(32, 64, 1)])})),
        ("func:step { @l = lhist(arg0, 0, 1000, 250); }", json!({"@l": buckets(&[(0, 250, 1000), (250, 500, 1000), (500, 750, 1000), (750, 1000, 1000)])})),
        (
            "func:step { @a = avg(arg0); @st = stats(arg0); }",
            json!({"@a": 499, "@st": {"count": 4000, "sum": 1998000, "avg": 499, "min": 0, "max": 999}}),
        ),
        ("func:step { @t[tid] = count(); } func:step /tid == pid/ { @main = count(); }", json!({})),
        ("func:step /arg0 < 2/ { @k[str(arg1), arg0] = count(); }", json!({"@k": {"alpha,0": 2, "alpha,1": 1, "beta,0": 1, "beta,1": 2, "gamma,0": 1, "gamma,1": 1}})),
        ("func:step { @a = count(); } func:s* { @b = count(); }", json!({"@a": 4000, "@b": 4005})),
        // Only counting: filled from the plain counting probes' counts; fib, covered twice,
        // counts twice, as two probes firing would.
        ("func:step,func:fib { @c[func] = count(); } func:fib { @c[func] = count(); }", json!({"@c": {"step": 4000, "fib": 3946}})),
        ("func:fib /arg0 == 10/ { @n = count(); exit(); }", json!({"@n": 1})),
        ("func:top { @c[comm] = count(); @f[func] = count(); }", json!({"@c": {"scripted": 1}, "@f": {"top": 1}})),
        ("func:leaf,func:middle { @p[probe] = sum(arg0); }", json!({"@p": {"func:leaf": 41, "func:middle": 41}})),
    ];
    for (script, want) in cases {
        let (got, _, _) = trace(&dir, &prog, script, &[]);
        let maps = &got["maps"];
        if script.contains("@t[tid]") {
            // Four worker threads, 1000 calls each; none on the main thread.
            let per_thread: Vec<u64> = maps["@t"].as_object().expect("@t").values().map(|v| v.as_u64().unwrap()).collect();
            assert_eq!(per_thread, vec![1000; 4], "{got}");
            assert!(maps.get("@main").is_none(), "{got}");
            continue;
        }
        assert_eq!(maps, &want, "'{script}'");
    }
    cleanup(&dir);
}

#[test]
fn elapsed_stacks_and_printf() {
    let dir = fresh_dir("trace_elapsed");
    let prog = fixture(&dir);
    let (got, _, _) = trace(&dir, &prog, "func:slow:return { @least = min(elapsed); @most = max(elapsed); @n = count(); }", &[]);
    let maps = &got["maps"];
    assert_eq!(maps["@n"], 5, "{got}");
    let (least, most) = (maps["@least"].as_i64().unwrap(), maps["@most"].as_i64().unwrap());
    // usleep(2000) sleeps at least 2 ms; a loaded machine may add a lot.
    assert!(least >= 2_000_000 && most < 2_000_000_000 && least <= most, "{got}");

    // With middle and top timed too (a probe that does more than count their calls), their
    // frames are on the shadow stack.
    let (got, _, _) = trace(&dir, &prog, "func:leaf { @s[ustack(3)] = count(); } func:middle,func:top { @other[arg0] = count(); }", &[]);
    let stacks = got["maps"]["@s"].as_object().expect("@s");
    assert_eq!(stacks.len(), 1, "{got}");
    let frames: Vec<&str> = stacks.keys().next().unwrap().split(';').collect();
    assert!(frames.len() == 3 && frames[0] == "leaf" && frames[1].starts_with("middle+") && frames[2].starts_with("top+"), "{frames:?} in {got}");
    // main's caller is libc's: named by its symbol or as libc.so.6+0x..., not by a run-time address.
    let (got, _, _) = trace(&dir, &prog, "func:main { @m[ustack(2)] = count(); }", &[]);
    let stack = got["maps"]["@m"].as_object().and_then(|m| m.keys().next().cloned()).unwrap_or_default();
    assert!(stack.starts_with("main;") && !stack.contains(";0x"), "{got}");

    let (_, printed, _) = trace(&dir, &prog, "func:step /arg0 == 7/ { printf(\"%s %d %5d|%-3x|\\n\", str(arg1), arg0, tid == pid, 255); }", &[]);
    let mut lines: Vec<&str> = printed.lines().collect();
    lines.sort();
    assert_eq!(lines, ["alpha 7     0|ff |", "beta 7     0|ff |", "beta 7     0|ff |", "gamma 7     0|ff |"], "{printed}");
    cleanup(&dir);
}

#[test]
fn losses_are_counted_and_bad_scripts_refused() {
    let dir = fresh_dir("trace_losses");
    let prog = fixture(&dir);
    // A pointer that is no pointer: empty strings and counted faults, the program unharmed.
    let (got, _, out) = trace(&dir, &prog, "func:step { @b[str(arg0)] = count(); }", &[]);
    assert_eq!(got["maps"]["@b"], json!({"": 4000}), "{got}");
    assert!(out.stderr_str().contains("faults"), "{}", out.stderr_str());
    // At most 10 keys per thread: the rest of each thread's 1000 are dropped and said so.
    let (got, _, out) = trace(&dir, &prog, "func:step { @k[arg0] = count(); }", &["--max-entries", "10"]);
    let kept: u64 = got["maps"]["@k"].as_object().expect("@k").values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(kept, 40, "{got}");
    assert!(out.stderr_str().contains("3960 updates dropped"), "{}", out.stderr_str());
    // tailer leaves by jumping to twice: its return is not run with twice's value, but said.
    let (got, _, out) = trace(&dir, &prog, "func:tailer:return { @n = count(); } func:twice:return { @t = count(); }", &[]);
    assert_eq!(got["maps"], json!({"@t": 1}), "{got}");
    assert!(out.stderr_str().contains("1 returns not seen by :return probes"), "{}", out.stderr_str());

    for (script, message) in [
        ("func:no_such_function { @n = count(); }", "no function is named `no_such_function`"),
        ("func:step { @n = count(; }", "expected"),
        ("func:step { @n = count(); @n = sum(arg0); }", "@n"),
    ] {
        let out = run(Command::new(lopi_bin()).args(["trace", "-e", script, "--"]).arg(&prog), common::default_timeout()).unwrap();
        assert!(!out.status.success(), "'{script}' was accepted");
        assert!(out.stderr_str().contains(message) && out.stderr_str().contains("-e:1:"), "'{script}': {}", out.stderr_str());
    }
    cleanup(&dir);
}

/// Positional parameters, as bpftrace takes them: the words after the script (after its file,
/// or all of them with -e), a number as a number, a word through `str($N)`, `$#` their count.
#[test]
fn positional_parameters_are_the_words_after_the_script() {
    let dir = fresh_dir("trace_params");
    let prog = fixture(&dir);
    let script = dir.join("params.bt");
    std::fs::write(&script, "func:step /arg0 < $1/ { @small[str($2)] = count(); } END { printf(\"%d params\\n\", $#); }").unwrap();
    let out_file = dir.join("out.json");
    let out = run(Command::new(lopi_bin()).args(["trace", "--format", "json", "-o"]).arg(&out_file).arg(&script).args(["10", "below", "--"]).arg(&prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(text.starts_with("2 params\n"), "{text}");
    let got: Json = serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {text}"));
    // step(i) for i below 1000 in each of four threads.
    assert_eq!(got["maps"]["@small"], json!({"below": 40}), "{got}");
    cleanup(&dir);
}

/// Calls `tick(i)` 25 times, 10 ms apart.
const TICKER: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long tick(long i) { long s = 0; for (long j = 0; j < i; j++) s += j * j; return s; }
int main(void) { long s = 0; for (int i = 0; i < 25; i++) { s += tick(i); usleep(10000); } printf("sum %ld\n", s); return 0; }
"#;

#[test]
fn begin_interval_and_end_run_in_lopi() {
    let dir = fresh_dir("trace_host");
    let prog = build_c(&dir, "ticker", TICKER, &["-O2"]);
    let file = dir.join("out.txt");
    let script = "begin { printf(\"start\\n\"); @b = 7; } func:tick { @n = count(); @all = count(); @k[arg0 % 2] = count(); } \
                  interval:50ms { printf(\"tick %d\\n\", @b); print(@n); clear(@n); } \
                  end { printf(\"end %d\\n\", @b + 1); @b = 9; delete(@k[1]); }";
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", script, "-o"]).arg(&file).arg("--").arg(&prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(out.stdout_str(), "sum 27600\n");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"start"), "{text}");
    let ticks = lines.iter().filter(|l| l.starts_with("tick ")).count();
    assert!(ticks >= 2 && lines.iter().filter(|l| l.starts_with("tick ")).all(|l| *l == "tick 7"), "{text}");
    // Every call counted once: in an interval's print before its clear, or at the end.
    let counted: u64 = lines.iter().filter_map(|l| l.strip_prefix("@n: ")).map(|n| n.parse::<u64>().unwrap()).sum();
    assert_eq!(counted, 25, "{text}");
    let end = lines.iter().position(|l| *l == "end 8").unwrap_or_else(|| panic!("no end line: {text}"));
    assert!(lines[end..].contains(&"@all: 25") && lines[end..].contains(&"@b: 9"), "{text}");
    // delete in end: the odd key is gone, the even one stays (13 of 0..25).
    assert!(lines[end..].contains(&"@k[0]: 13") && !text.contains("@k[1]"), "{text}");
    cleanup(&dir);
}

/// Calls `tick(i)` every millisecond until killed, printing nothing.
const FOREVER: &str = r#"
#include <unistd.h>
volatile long sink;
__attribute__((noinline)) long tick(long i) { long s = 0; for (long j = 0; j < i % 100; j++) s += j * j; return s; }
int main(void) { for (long i = 0;; i++) { sink += tick(i); usleep(1000); } }
"#;

#[test]
fn a_running_process_is_traced_and_given_back_unchanged() {
    let dir = fresh_dir("trace_attach");
    let prog = build_c(&dir, "forever", FOREVER, &["-O2"]);
    let mut child = Command::new(&prog).stdin(std::process::Stdio::null()).spawn().expect("starting the fixture");
    let pid = child.id() as i32;
    std::thread::sleep(std::time::Duration::from_millis(200));
    let file = dir.join("out.json");
    let script = "begin { @b = 1; } func:tick { @n = count(); @most = max(arg0); } interval:100ms { @ticks = count(); }";
    let out = run(
        Command::new(lopi_bin()).args(["trace", "-e", script, "--format", "json", "--duration", "500ms", "-o"]).arg(&file).arg("-p").arg(pid.to_string()),
        common::default_timeout(),
    )
    .unwrap();
    let alive = child.try_wait().unwrap().is_none();
    let restored = common::code_matches_file(pid, &prog);
    child.kill().ok();
    child.wait().ok();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert!(alive, "the process died under lopi trace -p: {}", out.stderr_str());
    restored.unwrap_or_else(|e| panic!("after lopi trace -p: {e}\n{}", out.stderr_str()));
    let got: Json = serde_json::from_str(std::fs::read_to_string(&file).unwrap().trim()).unwrap();
    let maps = &got["maps"];
    // About 500 calls in 500 ms (usleep(1000) sleeps longer on a busy machine), arguments
    // counting up from where the process was.
    let n = maps["@n"].as_u64().unwrap_or(0);
    assert!((50..=600).contains(&n) && maps["@most"].as_i64().unwrap_or(0) > n as i64, "{got}");
    assert!(maps["@b"] == 1 && (3..=6).contains(&maps["@ticks"].as_u64().unwrap_or(0)), "{got}");
    assert!(out.stderr_str().contains("sites restored"), "{}", out.stderr_str());
    cleanup(&dir);
}

#[test]
fn a_rewritten_program_keeps_its_script_output_for_lopi_report() {
    let dir = fresh_dir("trace_static");
    let prog = fixture(&dir);
    let rewritten = dir.join("scripted.rw");
    let script = "begin { @b = 5; } func:step { @by[str(arg1)] = count(); } func:step:return { @s = sum(retval); } \
                  func:fib /arg0 == 14/ { printf(\"fib(%d)\\n\", arg0); } end { printf(\"end %d\\n\", @b); delete(@by[\"beta\"]); }";
    let out = run(Command::new(lopi_bin()).arg("rewrite").arg(&prog).arg("-o").arg(&rewritten).args(["--script-expr", script]), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let data = dir.join("rw.lopi");
    let ran = run(Command::new(&rewritten).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
    assert_eq!(ran.stdout_str(), FIXTURE_OUTPUT, "{}", ran.stderr_str());
    let before = std::fs::read(&data).unwrap();
    let report = |format: &str| {
        let out = run(Command::new(lopi_bin()).args(["report", "--script", "--format", format]).arg(&data), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        out.stdout_str()
    };
    let text = report("json");
    let (printed, maps) = text.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(printed, "fib(14)\nend 5", "{text}");
    let maps: Json = serde_json::from_str(maps).unwrap();
    assert_eq!(maps["maps"], json!({"@b": 5, "@by": {"alpha": 1334, "gamma": 1333}, "@s": 4014667}), "{text}");
    // Read twice, the same: reading changes nothing in the record.
    assert_eq!(report("json"), text);
    assert!(std::fs::read(&data).unwrap() == before, "lopi report --script changed the record");
    // lopi trace keeps its record when asked, and it reads the same way.
    let kept = dir.join("kept.lopi");
    let (live, _, _) = trace(&dir, &prog, "func:step { @by[str(arg1)] = count(); } func:step:return { @s = sum(retval); }", &["--record", kept.to_str().unwrap()]);
    let out = run(Command::new(lopi_bin()).args(["report", "--script", "--format", "json"]).arg(&kept), common::default_timeout()).unwrap();
    assert_eq!(serde_json::from_str::<Json>(out.stdout_str().trim()).unwrap(), live, "{}", out.stderr_str());
    std::fs::remove_file(&kept).unwrap();
    // interval: needs lopi running beside the program.
    let out = run(Command::new(lopi_bin()).arg("rewrite").arg(&prog).arg("-o").arg(dir.join("x")).args(["--script-expr", "interval:1s { exit(); }"]), common::default_timeout()).unwrap();
    assert!(!out.status.success() && out.stderr_str().contains("use lopi trace"), "{}", out.stderr_str());
    cleanup(&dir);
}

/// malloc(1) .. malloc(1000), each freed (the pointer escapes, so GCC keeps the calls).
const MALLOCS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
char *volatile keep;
int main(void) { long s = 0; for (int i = 1; i <= 1000; i++) { char *p = malloc(i); keep = p; p[0] = 1; s += p[0]; free(keep); } printf("s %ld\n", s); return 0; }
"#;

#[test]
fn library_functions_are_probed_by_name() {
    let dir = fresh_dir("trace_library");
    let prog = build_c(&dir, "mallocs", MALLOCS, &["-O2"]);
    let file = dir.join("out.json");
    // printf's own buffer is a malloc of 1024 or more: the predicate leaves it out.
    let script = "func:libc:malloc /arg0 <= 1000/ { @n = count(); @bytes = sum(arg0); @big = max(arg0); } func:libc:free /arg0 != 0/ { @frees = count(); } func:main { @main = count(); }";
    let (out, got) = trace_maps(&prog, script, &file);
    assert_eq!(out.stdout_str(), "s 1000\n");
    let maps = &got["maps"];
    assert!(maps["@n"] == 1000 && maps["@bytes"] == 500500 && maps["@big"] == 1000 && maps["@main"] == 1, "{got}");
    let frees = maps["@frees"].as_u64().unwrap_or(0);
    assert!((1000..=1010).contains(&frees), "{got}");
    assert!(out.stderr_str().contains("libc.so"), "{}", out.stderr_str());
    // A library's functions are checked against the library the program loads.
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", "func:libc:no_such_function { @n = count(); }", "--"]).arg(&prog), common::default_timeout()).unwrap();
    assert!(!out.status.success() && out.stderr_str().contains("no function is named `no_such_function` in `libc`"), "{}", out.stderr_str());
    cleanup(&dir);
}

#[test]
fn system_calls_are_probed_in_libc() {
    let dir = fresh_dir("trace_syscalls");
    let prog = build_c(&dir, "ticker", TICKER, &["-O2"]);
    let file = dir.join("out.json");
    // usleep is clock_nanosleep; the program's one printf is one write of "sum 27600\n".
    let script = "syscall:clock_nanosleep { @sleeps = count(); @flags = max(arg1); } syscall:clock_nanosleep:return { @least = min(elapsed); @ok = sum(retval == 0); } \
                  syscall:write /arg0 == 1/ { @bytes = sum(arg2); } syscall:write:return { @written = sum(retval); } \
                  syscall:exit_group { @code = max(arg0 + 1); }";
    let (out, got) = trace_maps(&prog, script, &file);
    assert_eq!(out.stdout_str(), "sum 27600\n");
    let maps = &got["maps"];
    assert!(maps["@sleeps"] == 25 && maps["@ok"] == 25 && maps["@flags"] == 0, "{got}");
    assert!(maps["@least"].as_i64().unwrap_or(0) >= 10_000_000, "usleep(10000) slept less than 10 ms: {got}");
    assert!(maps["@bytes"] == 10 && maps["@written"] == 10 && maps["@code"] == 1, "{got}");
    // `probe` names the call a glob's point fired for.
    let script = "syscall:* { @calls[probe] = count(); } syscall:clock_nanosleep:return { @r[probe] = count(); }";
    let (_, got) = trace_maps(&prog, script, &file);
    let maps = &got["maps"];
    assert!(maps["@calls"]["syscall:clock_nanosleep"] == 25 && maps["@calls"]["syscall:write"] == 1, "{got}");
    assert_eq!(maps["@r"], json!({"syscall:clock_nanosleep:return": 25}), "{got}");
    cleanup(&dir);
}

/// `lopi trace --format json -o file -e script -- prog`, which must succeed: how it ran, and
/// lopi's maps.
fn trace_maps(prog: &Path, script: &str, file: &Path) -> (Output, Json) {
    let out = run(Command::new(lopi_bin()).args(["trace", "--format", "json", "-e", script, "-o"]).arg(file).arg("--").arg(prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{script}: {}", out.stderr_str());
    let maps = std::fs::read_to_string(file).unwrap();
    let json = serde_json::from_str(maps.trim()).unwrap_or_else(|e| panic!("{script}: not JSON ({e}): {maps}"));
    (out, json)
}

/// Two threads take one mutex 1,000 times each, holding it for a 100 us sleep every 100th
/// time; main then takes another once.
const LOCKER: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER, other = PTHREAD_MUTEX_INITIALIZER;
static long shared;
static void *w(void *a) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&m);
        shared++;
        if (i % 100 == 0) usleep(100);
        pthread_mutex_unlock(&m);
    }
    return a;
}
int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, w, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    pthread_mutex_lock(&other);
    pthread_mutex_unlock(&other);
    printf("%ld %lu %lu\n", shared, (unsigned long)&m, (unsigned long)&other);
    return 0;
}
"#;

#[test]
fn lock_events_are_probed_in_libc() {
    let dir = fresh_dir("trace_locks");
    let prog = build_c(&dir, "locker", LOCKER, &["-O2", "-pthread"]);
    let file = dir.join("out.json");
    let script = "lock:acquire { @acquire[arg0] = count(); } lock:acquired { @acquired[arg0] = count(); @ok[arg0] = sum(retval == 0); @wait[arg0] = sum(elapsed); } \
                  lock:release { @release[arg0] = count(); } lock:release /elapsed >= 100000/ { @long[arg0] = count(); } \
                  lock:contended { @contended[arg0] = count(); } lock:acquired { @by[func, probe] = count(); }";
    let (out, got) = trace_maps(&prog, script, &file);
    let printed: Vec<String> = out.stdout_str().split_whitespace().map(str::to_string).collect();
    assert_eq!(printed[0], "2000");
    let (m, other) = (printed[1].as_str(), printed[2].as_str());
    let maps = &got["maps"];
    for (map, lock, want) in [("@acquire", m, 2000), ("@acquired", m, 2000), ("@ok", m, 2000), ("@release", m, 2000), ("@acquire", other, 1), ("@acquired", other, 1), ("@release", other, 1)] {
        assert_eq!(maps[map][lock], want, "{map}[{lock}]: {got}");
    }
    // Every 100th hold sleeps 100 us; others may be preempted on a busy machine.
    let long = maps["@long"][m].as_i64().unwrap_or(0);
    assert!((20..=2000).contains(&long), "{long} holds of 100 us or more: {got}");
    assert!(maps["@long"][other].is_null(), "{got}");
    // Contention is timing's: its count and waits only add up.
    let contended = maps["@contended"][m].as_i64().unwrap_or(0);
    assert!(contended <= 2000 && maps["@wait"][m].as_i64().unwrap_or(-1) >= 0, "{got}");
    // The program's 2,001 acquisitions, and libc's own of its locks (one in glibc 2.36).
    assert!(maps["@by"]["pthread_mutex_lock,lock:acquired"].as_i64().unwrap_or(0) >= 2001, "{got}");
    cleanup(&dir);
}

/// Five threads, then a forked child: a start per thread (in it), an exit per thread, for
/// main's `exit_group` and for the child's.
const SPAWNER: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>
static void *w(void *a) { usleep(1000); return a; }
int main(void) {
    pthread_t t[5];
    for (int i = 0; i < 5; i++) pthread_create(&t[i], 0, w, 0);
    for (int i = 0; i < 5; i++) pthread_join(t[i], 0);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, 0, 0);
    printf("%d\n", getpid());
    return 0;
}
"#;

#[test]
fn thread_starts_and_exits_are_probed() {
    let dir = fresh_dir("trace_threads");
    let prog = build_c(&dir, "spawner", SPAWNER, &["-O2", "-pthread"]);
    let file = dir.join("out.json");
    let script = "thread:start { @starts = count(); @start_tids[tid] = count(); @main_pid[pid] = count(); @names[probe] = count(); } \
                  thread:exit { @exits[pid] = count(); @exit_tids[tid] = count(); }";
    let (out, got) = trace_maps(&prog, script, &file);
    let pid = out.stdout_str().trim().to_string();
    let maps = &got["maps"];
    assert_eq!(maps["@starts"], 5, "{got}");
    assert_eq!(maps["@main_pid"], json!({ pid.as_str(): 5 }), "{got}");
    assert_eq!(maps["@names"], json!({"thread:start": 5}), "{got}");
    // Each started thread ended once, in the same thread.
    let starts = maps["@start_tids"].as_object().unwrap();
    assert!(starts.len() == 5 && starts.keys().all(|tid| maps["@exit_tids"][tid] == 1), "{got}");
    // The five threads and main in the process, the child's one thread in its own.
    let exits = maps["@exits"].as_object().unwrap();
    assert_eq!(exits.len(), 2, "{got}");
    assert_eq!(maps["@exits"][&pid], 6, "{got}");
    cleanup(&dir);
}

/// A loop of known trip count in a function called with known arguments.
const LOOPER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long n) {
    long s = 0;
    for (long i = 0; i < n; i++)
        s += i * 3;
    return s;
}
int main(int argc, char **argv) {
    long total = 0;
    for (long k = 1; k <= 10; k++)
        total += work(k * 100);
    printf("%ld\n", total);
    return 0;
}
"#;

/// The blocks of `func` as `lopi info --probe block` lists them: their starts (file addresses),
/// and whether a 5-byte jump fits there (what an instruction's probe needs).
fn blocks_of(prog: &Path, func: &str) -> Vec<(u64, bool)> {
    let out = run(Command::new(lopi_bin()).args(["info", "--probe", "block", "--format", "json", "--functions", func]).arg(prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    let function = json["functions"].as_array().unwrap().iter().find(|f| f["name"] == func).unwrap_or_else(|| panic!("{func} in {json}"));
    let hex = |v: &Json| v.as_u64().or_else(|| v.as_str().and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())).unwrap();
    function["blocks"].as_array().unwrap().iter().map(|b| (hex(&b["start"]), b["probe"] == "jmp32")).collect()
}

#[test]
fn instruction_points_fire_where_they_are() {
    let dir = fresh_dir("trace_addr");
    let file = dir.join("out.json");
    for flags in [&["-O0", "-fcf-protection=none"][..], &["-O2", "-fcf-protection=none", "-no-pie"]] {
        let prog = build_c(&dir, "looper", LOOPER, flags);
        let blocks = blocks_of(&prog, "work");
        let entry = blocks[0].0;
        // A point at every block after the first where a jump fits: one of them is the loop's.
        let points: Vec<String> = blocks[1..].iter().filter(|(_, fits)| *fits).map(|(start, _)| format!("func:work+{:#x} {{ @hits[{start}] = count(); }}", start - entry)).collect();
        let script = format!("{} func:work+0 {{ @args = sum(arg0); @calls = count(); @in[func, probe] = count(); }} addr:{entry:#x} {{ @same = count(); }}", points.join(" "));
        let (out, got) = trace_maps(&prog, &script, &file);
        assert_eq!(out.stdout_str(), format!("{}\n", (1..=10u64).map(|k| 3 * (k * 100) * (k * 100 - 1) / 2).sum::<u64>()), "{flags:?}");
        let maps = &got["maps"];
        assert_eq!(maps["@calls"], 10, "{flags:?}: {got}");
        assert_eq!(maps["@same"], 10, "{flags:?}: {got}");
        assert_eq!(maps["@args"], 5500, "{flags:?}: {got}");
        assert_eq!(maps["@in"]["work,func:work+0x0"], 10, "{flags:?}: {got}");
        // Some block inside runs once per round of the loop: 100 + 200 + ... + 1000 times.
        let hits: Vec<i64> = maps["@hits"].as_object().map(|m| m.values().filter_map(Json::as_i64).collect()).unwrap_or_default();
        assert!(hits.contains(&5500), "{flags:?}: no block of the loop ran 5,500 times: {got}");
    }
    // Inside an instruction, outside any function, past a function's end: refused, with the reason.
    let prog = build_c(&dir, "looper", LOOPER, &["-O0", "-fcf-protection=none"]);
    let entry = blocks_of(&prog, "work")[0].0;
    for (script, says) in [
        // -O0: push %rbp (1 byte), then mov %rsp,%rbp (3): its second byte.
        (format!("addr:{:#x} {{ }}", entry + 2), "is not where an instruction of work starts"),
        ("addr:0x10 { }".to_string(), "no function's code holds 0x10"),
        ("func:work+0x100000 { }".to_string(), "work is"),
    ] {
        let out = run(Command::new(lopi_bin()).args(["trace", "-e", &script, "--"]).arg(&prog), common::default_timeout()).unwrap();
        assert!(!out.status.success() && out.stderr_str().contains(says), "{script}: {}", out.stderr_str());
    }
    // A rewritten copy keeps them, and its record gives the same.
    let rewritten = dir.join("looper.rw");
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--script-expr", "func:work+0 { @args = sum(arg0); }", "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let data = dir.join("rw.lopi");
    let out = run(Command::new(&rewritten).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
    assert!(out.status.success());
    let out = run(Command::new(lopi_bin()).args(["report", "--script", "--format", "json"]).arg(&data), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert!(out.stdout_str().contains("\"@args\":5500"), "{}", out.stdout_str());
    cleanup(&dir);
}

/// `F` has a 5-byte entry and a `ret` that a branch reaches, packed between two 150-byte
/// functions (no padding within 127 bytes): its exits cannot be probed. main calls F(0..31).
const PACKED: &str = r#"
#include <stdio.h>
__asm__(".text\n.p2align 4\n"
        ".globl pad_before\n.type pad_before,@function\npad_before:\n mov %edi, %eax\n .rept 50\n add $1, %eax\n .endr\n ret\n.size pad_before, .-pad_before\n"
        ".globl F\n.type F,@function\nF:\n mov %edi, %eax\n lea (%rax,%rax,2), %eax\n test %edi, %edi\n js 1f\n add $1, %eax\n1: ret\n.size F, .-F\n"
        ".globl pad_after\n.type pad_after,@function\npad_after:\n mov %edi, %eax\n .rept 50\n add $1, %eax\n .endr\n ret\n.size pad_after, .-pad_after\n");
int F(int), pad_before(int), pad_after(int);
int main(void) { long sum = 0; for (int i = 0; i < 31; i++) sum += F(i); printf("sum %ld %d\n", sum, pad_before(0) + pad_after(0)); return 0; }
"#;

/// An entry point runs on a function whose exits cannot be probed (it is counted, its entry
/// runs the script first), live and rewritten; a `:return` point on it is refused before the
/// program runs, naming the function and why.
#[test]
fn entry_points_run_where_exits_cannot_be_probed() {
    let dir = fresh_dir("trace_packed");
    let prog = build_c(&dir, "packed", PACKED, &["-O2"]);
    let info = run(Command::new(lopi_bin()).args(["info", "--probe", "entry,exit"]).arg(&prog), common::default_timeout()).unwrap();
    let line = info.stdout_str().lines().find(|l| l.contains(" F ")).map(str::to_string).unwrap_or_default();
    assert!(line.contains("counted only, exit-too-short") || line.contains("counted only, exit-no-bounce-space"), "F's exits should have no room: {}", info.stdout_str());
    let script = "func:F { @[arg0 % 3] = count(); }";
    let (out, got) = trace_maps(&prog, script, &dir.join("out.json"));
    assert_eq!(out.stdout_str(), "sum 1426 100\n");
    let want = json!({"0": 11, "1": 10, "2": 10});
    assert_eq!(got["maps"]["@"], want, "{got}\n{}", out.stderr_str());
    let rewritten = dir.join("packed.rw");
    let out = run(Command::new(lopi_bin()).arg("rewrite").arg(&prog).arg("-o").arg(&rewritten).args(["--script-expr", script]), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let data = dir.join("rw.lopi");
    let ran = run(Command::new(&rewritten).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
    assert_eq!(ran.stdout_str(), "sum 1426 100\n", "{}", ran.stderr_str());
    let out = run(Command::new(lopi_bin()).args(["report", "--script", "--format", "json"]).arg(&data), common::default_timeout()).unwrap();
    let maps: Json = serde_json::from_str(out.stdout_str().trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout_str()));
    assert_eq!(maps["maps"]["@"], want, "{maps}");
    for command in ["trace", "rewrite"] {
        let mut cmd = Command::new(lopi_bin());
        match command {
            "trace" => cmd.args(["trace", "-e", "func:F:return { @n = count(); }", "--"]).arg(&prog),
            _ => cmd.arg("rewrite").arg(&prog).arg("-o").arg(dir.join("refused.rw")).args(["--script-expr", "func:F:return { @n = count(); }"]),
        };
        let out = run(&mut cmd, common::default_timeout()).unwrap();
        let err = out.stderr_str();
        assert!(!out.status.success() && out.stdout.is_empty(), "lopi {command}: a :return point on F was accepted ({}): {err}\nstdout: {}", out.describe_status(), out.stdout_str());
        assert!(err.contains("`func:F:return` cannot run in ") && err.contains(": F (its returns cannot all be probed, exit-") && err.lines().count() == 1, "lopi {command}: {err}");
    }
    assert!(!dir.join("refused.rw").exists(), "lopi rewrite wrote a refused program");
    cleanup(&dir);
}
