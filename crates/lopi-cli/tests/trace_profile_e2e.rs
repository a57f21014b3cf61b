//! `profile:hz:N` points of `lopi trace` (issue 31): a timer on the process's CPU time samples
//! the running thread in the program itself. On a program that spins for a second of CPU time
//! in `hot` (ten times `cold`'s work), the samples number what the rate and the program's own
//! CPU time say, `comm` names it, and `ustack(1)`, the interrupted instruction, is in `hot` for
//! most of them.
mod common;

use common::*;
use serde_json::Value as Json;
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <time.h>
__attribute__((noinline)) long hot(long x) { for (int i = 0; i < 1000; i++) x = x * 6364136223846793005L + 1442695040888963407L; return x; }
__attribute__((noinline)) long cold(long x) { for (int i = 0; i < 100; i++) x = x * 3 + 1; return x; }
int main(void) {
    long s = 0;
    clock_t end = clock() + CLOCKS_PER_SEC;
    while (clock() < end) { s += hot(s); s += cold(s); }
    fprintf(stderr, "cpu_ms=%ld %ld\n", (long)(clock() * 1000 / CLOCKS_PER_SEC), s & 1);
    return 0;
}
"#;

#[test]
fn samples_follow_the_cpu_time_and_land_in_the_hot_function() {
    let dir = fresh_dir("trace-profile");
    let prog = build_c(&dir, "spinner", PROGRAM, &["-O2", "-fno-omit-frame-pointer"]);
    let out_file = dir.join("trace.json");
    let script = "profile:hz:199 { @n = count(); @comm[comm] = count(); @top[ustack(1)] = count(); }";
    let out = run(Command::new(lopi_bin()).args(["trace", "--format", "json", "-o"]).arg(&out_file).args(["-e", script, "--"]).arg(&prog), default_timeout()).expect("lopi trace");
    let stderr = out.stderr_str();
    assert!(out.status.success(), "lopi trace: {}\n{stderr}", out.describe_status());
    let cpu_ms: f64 = stderr.lines().find_map(|l| l.strip_prefix("cpu_ms=")?.split(' ').next()?.parse().ok()).unwrap_or_else(|| panic!("{stderr}"));
    let text = std::fs::read_to_string(&out_file).expect("lopi trace's output");
    let maps: Json = serde_json::from_str(text.trim_end().lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {text}"));
    let maps = &maps["maps"];
    let n = maps["@n"].as_f64().unwrap_or(0.0);
    let missed: f64 = stderr.lines().find_map(|l| l.strip_prefix("lopi: ")?.split(" profile: samples not taken").next()?.parse().ok()).unwrap_or(0.0);
    let expected = 199.0 * cpu_ms / 1000.0;
    assert!((n + missed - expected).abs() <= 0.25 * expected, "{n} samples (+{missed} missed) for {cpu_ms} ms of CPU at 199 Hz: {expected:.0} expected\n{text}");
    assert_eq!(maps["@comm"]["spinner"].as_f64(), Some(n), "{text}");
    let top = maps["@top"].as_object().expect("@top");
    let in_hot: f64 = top.iter().filter(|(k, _)| k.starts_with("hot+")).map(|(_, v)| v.as_f64().unwrap_or(0.0)).sum();
    assert!(in_hot > 0.6 * n, "{in_hot} of {n} samples in hot: {top:?}");
    cleanup(&dir);
}

/// A script's `profile:` points are refused where a rate cannot be: `profile:99`.
#[test]
fn a_profile_point_without_a_unit_is_refused() {
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", "profile:99 { @n = count(); }", "--", "true"]), default_timeout()).expect("lopi trace");
    assert!(!out.status.success() && out.stderr_str().contains("expected `profile:hz:N`"), "{}", out.stderr_str());
}
