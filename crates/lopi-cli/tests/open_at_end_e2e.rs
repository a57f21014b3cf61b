//! Waits, holds, system calls and timed calls still going on when a process ends, or when
//! lopi detaches (issue 26, item 4), on `fixtures/locks/open_at_exit.c`: three threads asleep
//! in `pthread_cond_wait`, one blocked in `read`, one holding a mutex (asleep in `pause`), one
//! blocked on that mutex, while main sleeps, then calls `exit(0)`. Every view must count them,
//! marked open, with their time up to the end: at least the time the fixture measured from
//! the moment every thread waited to its `exit` call, and not much more.
mod common;

use common::*;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long main sleeps once every thread waits.
const SLEEP_MS: &str = "1000";
/// How much longer than the fixture's own measure a wait may be: it began a little before
/// (the fixture saw every thread waiting), and its end is the `exit_group` after the fixture's
/// last clock read, or the moment lopi saw the process gone.
const LATER_NS: f64 = 300e6;

fn build(label: &str) -> (PathBuf, PathBuf) {
    let dir = fresh_dir(&format!("open-at-end-{label}"));
    let prog = dir.join("open_at_exit");
    let src = fixtures_dir().join("locks/open_at_exit.c");
    compile(Command::new("cc").args(["-O2", "-g", "-pthread"]).arg(&src).arg("-o").arg(&prog)).unwrap_or_else(|e| panic!("{e}"));
    (dir, prog)
}

/// Runs the fixture under `lopi run --probe PROBES`: the data file and the time from the
/// moment every thread waited to main's `exit` call, as the fixture measured it.
fn record(dir: &Path, prog: &Path, probes: &str) -> (PathBuf, f64) {
    let data = dir.join(format!("{}.lopi", probes.replace(',', "-")));
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", probes, "--"]).arg(prog).arg(SLEEP_MS).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
    assert!(out.status.success() && out.stdout_str() == "6 threads waiting\n", "under lopi run --probe {probes}: {}\n{}", out.describe_status(), out.stderr_str());
    (data, waiting_ns(&out.stderr_str()))
}

fn waiting_ns(stderr: &str) -> f64 {
    stderr.lines().find_map(|l| l.strip_prefix("measured waiting_ns=")?.parse().ok()).unwrap_or_else(|| panic!("no measured line in {stderr}"))
}

fn report(data: &Path, args: &[&str]) -> Json {
    let out = run(Command::new(lopi_bin()).arg("report").args(args).args(["--format", "json"]).arg(data), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report {args:?}: {}", out.stderr_str());
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

fn text(data: &Path, args: &[&str]) -> String {
    let out = run(Command::new(lopi_bin()).arg("report").args(args).arg(data), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report {args:?}: {}", out.stderr_str());
    out.stdout_str()
}

fn ns(v: &Json, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// A time that ran from before the fixture's `waiting` mark to the end.
fn check_open_time(what: &str, got: f64, waiting: f64, problems: &mut Vec<String>) {
    if got < waiting || got > waiting + LATER_NS {
        problems.push(format!("{what}: {:.3} ms, expected {:.3} ms or a little more", got / 1e6, waiting / 1e6));
    }
}

fn lock<'a>(report: &'a Json, name: &str) -> &'a Json {
    report["locks"].as_array().into_iter().flatten().find(|l| l["name"] == name).unwrap_or_else(|| panic!("no lock {name} in {report}"))
}

/// `--probe locks`: the condition waits, the held mutex and the wait for it, in the lock
/// report, the thread report and the block profile.
#[test]
fn lock_waits_and_holds_open_at_exit() {
    let (dir, prog) = build("locks");
    let (data, waiting) = record(&dir, &prog, "locks");
    let locks = report(&data, &["--locks"]);
    let mut problems = Vec::new();
    let cond = lock(&locks, "queue_cond");
    if (cond["waits"].as_u64(), cond["open_waits"].as_u64(), cond["acquisitions"].as_u64()) != (Some(3), Some(3), Some(0)) {
        problems.push(format!("queue_cond: 3 waits, all open, none acquired, expected: {cond}"));
    }
    for t in cond["threads"].as_array().into_iter().flatten() {
        check_open_time(&format!("queue_cond wait of thread {}", t["tid"]), ns(t, "wait_ns"), waiting, &mut problems);
    }
    if cond["threads"].as_array().map(Vec::len) != Some(3) {
        problems.push(format!("queue_cond: 3 waiting threads expected: {cond}"));
    }
    let held = lock(&locks, "held_lock");
    if (held["acquisitions"].as_u64(), held["open_holds"].as_u64(), held["open_waits"].as_u64()) != (Some(1), Some(1), Some(1)) {
        problems.push(format!("held_lock: 1 acquisition, held and waited for at the end, expected: {held}"));
    }
    check_open_time("held_lock's hold", ns(held, "hold_ns"), waiting, &mut problems);
    check_open_time("held_lock's wait", ns(held, "wait_ns"), waiting, &mut problems);
    check_open_time("held_lock's wait blocked in futex", ns(held, "blocked_ns"), waiting, &mut problems);
    let shown = text(&data, &["--locks"]);
    for mark in ["queue_cond (0x", "[3 waiting at the end]", "[1 waiting, 1 held at the end]"] {
        if !shown.contains(mark) {
            problems.push(format!("the lock report lacks {mark:?}:\n{shown}"));
        }
    }
    let threads = report(&data, &["--threads"]);
    for t in threads["threads"].as_array().into_iter().flatten() {
        let routine = t["start_routine"].as_str().unwrap_or("");
        let waits = matches!(routine, "sleeper_main" | "contender_main");
        if waits {
            check_open_time(&format!("{routine} {}: lock wait", t["tid"]), ns(t, "lock_wait_ns"), waiting, &mut problems);
        }
        if !routine.is_empty() && (t["end_seen"] != "exit_group" || t["open_calls"].as_u64() == Some(0)) {
            problems.push(format!("{routine}: ended by the exit_group with calls open expected: {t}"));
        }
    }
    if Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        let pb = dir.join("block.pb");
        let out = run(Command::new(lopi_bin()).args(["export", "--format", "pprof", "--profile", "block", "-o"]).arg(&pb).arg(&data), default_timeout()).expect("lopi export");
        assert!(out.status.success(), "lopi export --profile block: {}", out.stderr_str());
        let raw = run(Command::new("go").args(["tool", "pprof", "-raw"]).arg(&pb), default_timeout()).expect("go tool pprof");
        // `      0 1003108573     0     0: 53 57` then `  open:[1] pid:[..] tid:[..]`.
        let lines: Vec<String> = raw.stdout_str().lines().map(str::to_string).collect();
        let open_delays: Vec<f64> = lines
            .windows(2)
            .filter(|w| w[1].contains("open:[1]"))
            .filter_map(|w| w[0].split_whitespace().nth(1)?.parse().ok())
            .filter(|&d: &f64| d > 0.0)
            .collect();
        if open_delays.len() != 4 {
            problems.push(format!("block profile: 4 open waits (3 condition waits, 1 mutex) expected:\n{}", raw.stdout_str()));
        }
        for d in open_delays {
            check_open_time("an open wait in the block profile", d, waiting, &mut problems);
        }
    } else {
        eprintln!("skipped reading the block profile back: no `go` on PATH");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

/// `--probe syscall`: the futex, read and pause calls in progress at the end.
#[test]
fn system_calls_open_at_exit() {
    let (dir, prog) = build("syscall");
    let (data, waiting) = record(&dir, &prog, "syscall");
    let calls = report(&data, &["--syscalls"]);
    let mut problems = Vec::new();
    let mut open = std::collections::BTreeMap::new();
    for t in calls["threads"].as_array().into_iter().flatten() {
        for c in t["syscalls"].as_array().into_iter().flatten().filter(|c| c["open"].as_u64().is_some()) {
            *open.entry(c["name"].as_str().unwrap_or("").to_string()).or_insert(0) += c["open"].as_u64().unwrap_or(0);
            check_open_time(&format!("thread {}: {}", t["tid"], c["name"]), ns(c, "total_ns"), waiting, &mut problems);
        }
    }
    let want: std::collections::BTreeMap<String, u64> = [("futex", 4), ("read", 1), ("pause", 1)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    if open != want {
        problems.push(format!("open system calls {open:?}, expected {want:?}"));
    }
    let shown = text(&data, &["--syscalls"]);
    if !shown.contains("futex (4 open at the end)") {
        problems.push(format!("the system-call report does not mark the open futex calls:\n{shown}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

/// `--probe entry,exit`: the fixture's functions that never return, timed to the process's end
/// (which `lopi run` records: no probe sees it).
#[test]
fn timed_calls_open_at_exit() {
    let (dir, prog) = build("timing");
    let (data, waiting) = record(&dir, &prog, "entry,exit");
    let profile = report(&data, &[]);
    let mut problems = Vec::new();
    for (name, calls) in [("wait_for_work", 3), ("read_pipe", 1), ("hold_and_sleep", 1), ("take_held", 1), ("main", 1)] {
        let Some(f) = profile["functions"].as_array().into_iter().flatten().find(|f| f["name"] == name) else {
            problems.push(format!("no {name} in the report"));
            continue;
        };
        if (f["calls"].as_u64(), f["open"].as_u64()) != (Some(calls), Some(calls)) {
            problems.push(format!("{name}: {calls} calls, all open, expected: {f}"));
        }
        check_open_time(&format!("{name}'s longest call"), ns(f, "max_ns"), waiting, &mut problems);
    }
    let shown = text(&data, &[]);
    if !shown.contains("calls had not returned when their thread's recording ended") {
        problems.push(format!("the report has no note of the open calls:\n{shown}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

/// `--breakdown` charges the open waits to BLOCKED (condition wait, read, pause) and LOCKWAIT
/// (the mutex), not to OTHER.
#[test]
fn breakdown_charges_open_waits() {
    let (dir, prog) = build("breakdown");
    let (data, _) = record(&dir, &prog, "syscall,locks");
    let breakdown = report(&data, &["--breakdown"]);
    let mut problems = Vec::new();
    let list = breakdown["threads"].as_array().cloned().unwrap_or_default();
    for t in &list {
        common::assert_parts_add_up(t);
        let name = t["name"].as_str().unwrap_or("");
        let part = match name {
            "sleeper_main" | "reader_main" | "holder_main" => "syscall_blocked_ns",
            "contender_main" => "lock_wait_ns",
            _ => continue,
        };
        if ns(t, part) < 0.95 * ns(t, "wall_ns") {
            problems.push(format!("{name}: {part} should be nearly all its wall time: {t}"));
        }
    }
    if list.iter().filter(|t| t["name"] == "sleeper_main").count() != 3 {
        problems.push(format!("three sleeper_main threads expected: {breakdown}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

/// `lopi attach` while the fixture is idle, then detach while its threads wait: their waits end
/// at the detach, marked open.
#[test]
fn detach_ends_waits_in_progress() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let (dir, prog) = build("detach");
    let mut child = Command::new(&prog).args(["3000", "usr1"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the fixture");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    let data = dir.join("attach.lopi");
    let pid = child.id().to_string();
    let lopi = std::thread::spawn({
        let data = data.clone();
        move || run(Command::new(lopi_bin()).args(["attach", &pid, "--probe", "syscall,locks", "--duration", "1500ms"]).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi attach")
    });
    // The record exists once the probes are in.
    let start = Instant::now();
    while !data.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "lopi attach made no record");
        std::thread::sleep(Duration::from_millis(5));
    }
    let signalled = Instant::now();
    assert!(Command::new("kill").args(["-USR1", &child.id().to_string()]).status().expect("kill").success());
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("6 threads waiting"));
    let waiting_from = signalled.elapsed();
    let out = lopi.join().expect("lopi attach thread");
    let detached = signalled.elapsed();
    assert!(out.status.success(), "lopi attach: {}", out.stderr_str());
    assert!(child.wait().expect("wait").success(), "the fixture after the detach");
    let threads = report(&data, &["--threads"]);
    let mut problems = Vec::new();
    let sleepers: Vec<&Json> = threads["threads"].as_array().into_iter().flatten().filter(|t| t["start_routine"] == "sleeper_main").collect();
    if sleepers.len() != 3 {
        problems.push(format!("three sleeper_main threads expected: {threads}"));
    }
    // Between the threads' waits being seen and the detach, give or take the signal's trip.
    let (low, high) = ((detached - waiting_from).as_nanos() as f64 - 200e6, detached.as_nanos() as f64);
    for t in sleepers {
        let wait = ns(t, "lock_wait_ns");
        if t["end_seen"] != "detach" || t["open_calls"].as_u64() == Some(0) || wait < low || wait > high {
            problems.push(format!("a sleeper's wait should end at the detach, {:.0}-{:.0} ms: {t}", low / 1e6, high / 1e6));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}
