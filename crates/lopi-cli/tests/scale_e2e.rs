//! `lopi scale` end to end: runs on 1..N CPUs with `{cpus}` replaced, the JSON's shape, the
//! USL refusal below three counts, and the errors a user can act on. No timing is asserted:
//! other tests run beside these, so speedups are only checked to be positive and consistent.
mod common;

use common::{cleanup, fresh_dir, lopi_bin, run};
use serde_json::Value as Json;
use std::path::Path;
use std::process::Command;

/// The CPUs the test may use, as lopi counts them: its affinity (`nproc`), not a cgroup quota.
fn allowed_cpus() -> usize {
    let out = Command::new("nproc").output().expect("running nproc");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("nproc's count")
}

fn scale(args: &[&str]) -> common::Output {
    run(Command::new(lopi_bin()).arg("scale").args(args), common::default_timeout()).expect("running lopi scale")
}

#[test]
fn runs_each_count_with_the_placeholder_replaced() {
    let dir = fresh_dir("scale_placeholder");
    let log = dir.join("counts.txt");
    let cpus = if allowed_cpus() >= 2 { "1,2" } else { "1" };
    let chart = dir.join("speedup.svg");
    let script = format!("echo \"$0 $(nproc)\" >> {}", log.display());
    let out = scale(&["--cpus", cpus, "--runs", "2", "--format", "json", "-o", chart.to_str().unwrap(), "--", "sh", "-c", &script, "{cpus}"]);
    assert!(out.status.success(), "lopi scale failed: {}\n{}", out.describe_status(), out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).expect("JSON");
    let counts: Vec<u64> = json["points"].as_array().unwrap().iter().map(|p| p["cpus"].as_u64().unwrap()).collect();
    let expected: Vec<u64> = cpus.split(',').map(|c| c.parse().unwrap()).collect();
    assert_eq!(counts, expected);
    assert_eq!(json["runs"], 2);
    assert_eq!(json["machine_cpus"].as_u64().unwrap() as usize, allowed_cpus());
    let first = &json["points"][0];
    assert_eq!(first["speedup"], 1.0);
    assert!(first["karp_flatt"].is_null());
    for p in json["points"].as_array().unwrap() {
        let (min, median, max) = (p["min_ns"].as_u64().unwrap(), p["wall_ns"].as_u64().unwrap(), p["max_ns"].as_u64().unwrap());
        assert!(min <= median && median <= max && min > 0, "{p}");
        assert!(p["speedup"].as_f64().unwrap() > 0.0);
    }
    assert!(json["usl"].is_null());
    assert!(json["usl_refused"].as_str().unwrap().contains("at least three CPU counts"));
    // Every run saw its CPU count in its arguments and ran on that many CPUs (`nproc` reads
    // the affinity): the warm-up on the largest count, then each count per round.
    let lines = std::fs::read_to_string(&log).unwrap();
    let mut seen: Vec<&str> = lines.lines().collect();
    let largest = expected.last().unwrap();
    assert_eq!(seen.remove(0), format!("{largest} {largest}"));
    let per_round: Vec<String> = expected.iter().map(|n| format!("{n} {n}")).collect();
    assert_eq!(seen, [per_round.clone(), per_round].concat());
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.contains("<svg") && svg.contains("measured"), "{svg}");
    cleanup(&dir);
}

#[test]
fn errors_a_user_can_act_on() {
    let too_many = (allowed_cpus() + 1).to_string();
    let out = scale(&["--cpus", &too_many, "--", "true"]);
    assert!(!out.status.success());
    assert!(out.stderr_str().contains(&format!("--cpus {too_many}: lopi may use only")), "{}", out.stderr_str());

    let out = scale(&["--cpus", "1", "--", "sh", "-c", "echo broken >&2; exit 3"]);
    assert!(!out.status.success());
    let err = out.stderr_str();
    assert!(err.contains("failed on 1 CPU") && err.contains("exit status 3") && err.contains("broken"), "{err}");

    let out = scale(&["--cpus", "1", "--", "/nonexistent/prog"]);
    assert!(!out.status.success());
    assert!(out.stderr_str().contains("lopi: error: cannot start /nonexistent/prog: no such file\n"), "{}", out.stderr_str());
}

#[test]
fn demo_mp_builds_and_scales_the_thesis_benchmark() {
    let dir = fresh_dir("scale_demo_mp");
    let out = run(Command::new(lopi_bin()).args(["demo", "mp", "--dir"]).arg(&dir), common::default_timeout()).expect("running lopi demo mp");
    assert!(out.status.success(), "lopi demo mp failed: {}\n{}", out.describe_status(), out.stderr_str());
    let text = out.stdout_str();
    assert!(text.contains("CPUS") && text.contains("SPEEDUP") && text.contains("Amdahl bound"), "{text}");
    assert!(Path::new(&dir.join("speedup.svg")).is_file());
    cleanup(&dir);
}
