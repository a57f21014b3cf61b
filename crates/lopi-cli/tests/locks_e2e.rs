//! `--probe locks` end to end on `fixtures/locks/*`: each fixture is built in two
//! configurations and run plain and under `lopi run --probe locks`; output and exit must be
//! the original's, and `lopi report --locks --format json` must give exactly the counts the
//! fixture's directives state (see fixtures/locks/README.md), per lock and per thread, its
//! contended acquisitions at least the proven ones, and hold times within 5% of what the
//! fixture measured itself in the same run (its `measured` lines). `lopi report --threads`
//! must name each thread the fixture creates with its start routine and creator, see its end,
//! and count the thread calls exactly.
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Fields compared exactly.
const EXACT: &[&str] = &[
    "acquisitions", "read", "write", "trylock_failed", "timeouts", "errors", "nested", "posts", "waits", "signals", "broadcasts", "serial",
];
const TIMES: &[&str] = &["hold_ns", "read_hold_ns", "write_hold_ns"];
const TOLERANCE: f64 = 0.05;

/// A directive's field: key, operator (`=`, `>=`, `~=`), value.
type Field = (String, &'static str, String);
/// The fixture's own measurements: (lock, key) -> value.
type Measured = BTreeMap<(String, String), f64>;

/// `key=N`, `key>=N`, `key~=N` fields of a directive.
fn fields(text: &str) -> Vec<Field> {
    text.split_whitespace()
        .map(|w| {
            for op in ["~=", ">=", "="] {
                if let Some((k, v)) = w.split_once(op) {
                    return (k.to_string(), op, v.to_string());
                }
            }
            panic!("bad field {w:?}")
        })
        .collect()
}

struct LockLine {
    name: String,
    fields: Vec<Field>,
}

#[derive(Default)]
struct Expect {
    locks: Vec<LockLine>,
    /// (thread name, lock name, fields)
    threads: Vec<(String, String, Vec<Field>)>,
    /// (thread name, start routine)
    lives: Vec<(String, String)>,
    thread_calls: Vec<Field>,
    flags: Vec<String>,
}

fn expect(path: &Path) -> Expect {
    let mut e = Expect::default();
    for line in std::fs::read_to_string(path).expect("fixture").lines() {
        let Some((key, val)) = line.trim().strip_prefix("// lopi-").and_then(|l| l.split_once(": ")) else { continue };
        match key {
            "locks" => {
                let (name, rest) = val.split_once(' ').expect("lock directive");
                e.locks.push(LockLine { name: name.to_string(), fields: fields(rest) });
            }
            "locks-thread" => {
                let mut parts = val.splitn(3, ' ');
                let (thread, lock, rest) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap_or(""));
                e.threads.push((thread.to_string(), lock.to_string(), fields(rest)));
            }
            "threads" => {
                let (name, start) = val.split_once(" start=").expect("threads directive");
                e.lives.push((name.to_string(), start.trim().to_string()));
            }
            "thread-calls" => e.thread_calls = fields(val),
            "cflags" | "cxxflags" => e.flags = val.split_whitespace().map(String::from).collect(),
            _ => {}
        }
    }
    e
}

/// The fixture's own hold times: `measured NAME ... hold_ns=N`, summed over processes.
fn measured(stderr: &str) -> Measured {
    let mut out = BTreeMap::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("measured ") else { continue };
        let mut words = rest.split_whitespace();
        let Some(name) = words.next() else { continue };
        for w in words {
            if let Some((k, v)) = w.split_once('=') {
                if let Ok(n) = v.parse::<f64>() {
                    *out.entry((name.to_string(), k.to_string())).or_default() += n;
                }
            }
        }
    }
    out
}

const CONFIGS: [(&str, &[&str]); 2] = [("O2-pie", &["-O2", "-fPIE", "-pie"]), ("O0-nopie", &["-O0", "-fno-pie", "-no-pie"])];

/// Builds `file` with `flags` in a fresh directory: the directory, the program, its plain run.
fn build(file: &str, e: &Expect, flags: &[&str], label: &str) -> (PathBuf, PathBuf, Output) {
    let dir = fresh_dir(&format!("locks-{file}-{label}"));
    let prog: PathBuf = dir.join(file.split('.').next().unwrap());
    let cc = if file.ends_with(".cpp") { "g++" } else { "cc" };
    let src = fixtures_dir().join("locks").join(file);
    compile(Command::new(cc).args(flags).args(["-g", "-Wall"]).args(&e.flags).arg(&src).arg("-o").arg(&prog)).unwrap_or_else(|e| panic!("{e}"));
    let original = run(Command::new(&prog).current_dir(&dir), default_timeout()).expect("run original");
    (dir, prog, original)
}

/// Static mode: the program runs with a rewritten copy of libc found through
/// `LD_LIBRARY_PATH`, as docs/locks.md says.
#[test]
fn static_mode_with_a_rewritten_libc() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let mut problems = Vec::new();
    for file in ["rwlock.c", "condvar.c"] {
        let e = expect(&fixtures_dir().join("locks").join(file));
        let (dir, prog, original) = build(file, &e, CONFIGS[0].1, "static");
        let lib = dir.join("lib");
        std::fs::create_dir_all(&lib).expect("lib dir");
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "locks"]).arg(libc).arg("-o").arg(lib.join("libc.so.6")), default_timeout()).expect("lopi rewrite");
        assert!(out.status.success(), "lopi rewrite of libc failed: {}", out.stderr_str());
        let data = dir.join("static.lopi");
        let ran = run(Command::new(&prog).current_dir(&dir).env("LD_LIBRARY_PATH", &lib).env("LOPI_OUTPUT", &data).env("LOPI_LOCKS_REPORT", "1"), default_timeout()).expect("run");
        if ran.status.code() != original.status.code() || ran.stdout != original.stdout {
            problems.push(format!("{file} with a rewritten libc: {} / {:?}\n{}", ran.describe_status(), ran.stdout_str(), ran.stderr_str()));
            continue;
        }
        let report = locks_report(&data);
        let own = measured(&ran.stderr_str());
        check_locks(&format!("{file} (static)"), &report, &e, &own, &mut problems);
        cleanup(&dir);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn check_fixture(file: &str) {
    let e = expect(&fixtures_dir().join("locks").join(file));
    let mut problems = Vec::new();
    for (config, flags) in CONFIGS {
        let (dir, prog, original) = build(file, &e, flags, config);
        let data = dir.join("live.lopi");
        let probed = run(
            Command::new(lopi_bin()).args(["run", "-q", "--probe", "locks", "--"]).arg(&prog).current_dir(&dir).env("LOPI_OUTPUT", &data).env("LOPI_LOCKS_REPORT", "1"),
            default_timeout(),
        )
        .expect("lopi run");
        let label = format!("{file} ({config})");
        if probed.status.code() != original.status.code() || probed.status.signal() != original.status.signal() || probed.stdout != original.stdout {
            problems.push(format!("{label}: under lopi run {} / stdout {:?}, originally {} / {:?}\n{}", probed.describe_status(), probed.stdout_str(), original.describe_status(), original.stdout_str(), probed.stderr_str()));
            continue;
        }
        let report = locks_report(&data);
        let own = measured(&probed.stderr_str());
        check_locks(&label, &report, &e, &own, &mut problems);
        for (thread, lock_name, want) in &e.threads {
            let lock = report["locks"].as_array().into_iter().flatten().find(|l| l["name"] == lock_name.as_str());
            let threads: Vec<&Json> = lock.and_then(|l| l["threads"].as_array()).into_iter().flatten().filter(|t| thread_name(t) == *thread).collect();
            let mut merged = serde_json::Map::new();
            for t in &threads {
                for k in EXACT {
                    let sum = merged.get(*k).and_then(Json::as_u64).unwrap_or(0) + t[*k].as_u64().unwrap_or(0);
                    merged.insert(k.to_string(), sum.into());
                }
            }
            check_fields(&format!("{label}: thread {thread}: {lock_name}"), &Json::Object(merged), want, None, &mut problems);
        }
        check_threads(&label, &report_json(&data, "--threads"), &e, &mut problems);
        cleanup(&dir);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every lock line of the fixture against the report's lock of that name.
fn check_locks(label: &str, report: &Json, e: &Expect, own: &Measured, problems: &mut Vec<String>) {
    for line in &e.locks {
        let name = &line.name;
        match report["locks"].as_array().into_iter().flatten().find(|l| l["name"] == name.as_str()) {
            Some(lock) => {
                check_fields(&format!("{label}: {name}"), lock, &line.fields, Some((name, own)), problems);
                // A C++ lock: named demangled, its symbol beside.
                if let Some((_, _, symbol)) = line.fields.iter().find(|(k, _, _)| k == "symbol") {
                    if lock["symbol"] != symbol.as_str() {
                        problems.push(format!("{label}: {name}: symbol {}, expected {symbol}", lock["symbol"]));
                    }
                }
            }
            None => problems.push(format!("{label}: no lock named {name} in the report")),
        }
    }
}

fn thread_name(t: &Json) -> String {
    if t["tid"] == t["pid"] {
        "main".to_string()
    } else {
        t["name"].as_str().unwrap_or("").to_string()
    }
}

fn check_fields(what: &str, got: &Json, want: &[Field], own: Option<(&str, &Measured)>, problems: &mut Vec<String>) {
    for (key, op, value) in want {
        let n = got[key.as_str()].as_u64().unwrap_or(0);
        match *op {
            "=" if EXACT.contains(&key.as_str()) && value.parse::<u64>().ok() != Some(n) => {
                problems.push(format!("{what}: {key} expected {value}, lopi reports {n}"));
            }
            ">=" if n < value.parse::<u64>().unwrap_or(u64::MAX) => {
                problems.push(format!("{what}: {key} expected at least {value}, lopi reports {n}"));
            }
            "~=" if TIMES.contains(&key.as_str()) => {
                let Some((name, own)) = own else { continue };
                let Some(&m) = own.get(&(name.to_string(), key.clone())) else {
                    problems.push(format!("{what}: the fixture printed no measured {key}"));
                    continue;
                };
                // Preemption stretches a hold between the fixture's clock reads and the calls
                // lopi times; how much the fixture's holds overran their nominal length says
                // how much preemption there was (CI runs the fixtures side by side on 2 CPUs).
                let nominal = value.parse::<f64>().unwrap_or(m);
                let allowed = TOLERANCE * m + 0.25 * (m - nominal).max(0.0);
                if (n as f64 - m).abs() > allowed {
                    problems.push(format!("{what}: {key} {n} ns, the fixture measured {m} ns for {nominal} ns nominal (more than {allowed:.0} ns apart)"));
                }
            }
            _ => {}
        }
    }
    // Absent failure fields mean none, for a line that states acquisitions.
    if want.iter().any(|(k, _, _)| k == "acquisitions") {
        for key in ["trylock_failed", "timeouts", "errors"] {
            let n = got[key].as_u64().unwrap_or(0);
            if n != 0 && !want.iter().any(|(k, _, _)| k == key) {
                problems.push(format!("{what}: {key} {n} where the fixture has none"));
            }
        }
    }
}

/// Each thread the fixture creates: its name, start routine, creator and end; the thread
/// calls' totals.
fn check_threads(label: &str, report: &Json, e: &Expect, problems: &mut Vec<String>) {
    let threads = report["threads"].as_array().cloned().unwrap_or_default();
    for (name, start) in &e.lives {
        let Some(t) = threads.iter().find(|t| t["name"] == name.as_str()) else {
            problems.push(format!("{label}: no thread named {name} in lopi report --threads"));
            continue;
        };
        let routine = t["start_routine"].as_str().unwrap_or("");
        // A local function of a stripped library (libstdc++'s) has no name: lopi gives file+address.
        let unnamed_local = routine.contains(".so") && routine.contains("+0x");
        if routine != start && !unnamed_local {
            problems.push(format!("{label}: thread {name}: start routine {routine:?}, expected {start}"));
        }
        if !t["created_by"].is_u64() {
            problems.push(format!("{label}: thread {name}: no creator"));
        }
        if !matches!(t["end_seen"].as_str(), Some("exit" | "exit_group")) || t["end_ns"].as_u64() < t["start_ns"].as_u64() {
            problems.push(format!("{label}: thread {name}: end {} ({}) not seen after its start {}", t["end_ns"], t["end_seen"], t["start_ns"]));
        }
    }
    for (key, _, value) in &e.thread_calls {
        let n = report["calls"][key.as_str()].as_u64();
        if n != value.parse().ok() {
            problems.push(format!("{label}: {key} calls: lopi counts {n:?}, the fixture made {value}"));
        }
    }
}

fn locks_report(data: &Path) -> Json {
    report_json(data, "--locks")
}

fn report_json(data: &Path, view: &str) -> Json {
    let out = run(Command::new(lopi_bin()).args(["report", view, "--format", "json"]).arg(data), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report {view} failed: {}", out.stderr_str());
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// A program linked against glibc's compat condition-variable functions
/// (`compat_cond.c`): its waits, signals and broadcast are each one operation of the
/// condition variable, as the program counted them, timed in the current versions the compat
/// ones tail-jump into.
#[test]
fn compat_condition_variables() {
    let e = expect(&fixtures_dir().join("locks/compat_cond.c"));
    let (dir, prog, original) = build("compat_cond.c", &e, &["-O2", "-pthread"], "O2");
    let data = dir.join("live.lopi");
    let probed = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "locks", "--"]).arg(&prog).current_dir(&dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
    assert!(probed.status.success() && probed.stdout == original.stdout, "{}", probed.stderr_str());
    let own = measured(&probed.stderr_str());
    let report = locks_report(&data);
    let conds: Vec<&Json> = report["locks"].as_array().into_iter().flatten().filter(|l| l["kind"] == "cond").collect();
    assert_eq!(conds.len(), 1, "one condition variable: {report}");
    for field in ["waits", "signals", "broadcasts"] {
        let want = own[&("turns".to_string(), field.to_string())] as u64;
        assert_eq!(conds[0][field].as_u64(), Some(want), "{field}: {}", conds[0]);
    }
    cleanup(&dir);
}

#[test]
fn mutex_hold() {
    check_fixture("mutex_hold.c");
}

#[test]
fn rwlock() {
    check_fixture("rwlock.c");
}

#[test]
fn spinlock() {
    check_fixture("spinlock.c");
}

#[test]
fn semaphore() {
    check_fixture("semaphore.c");
}

#[test]
fn condvar() {
    check_fixture("condvar.c");
}

#[test]
fn barrier() {
    check_fixture("barrier.c");
}

#[test]
fn mutex_kinds() {
    check_fixture("mutex_kinds.c");
}

#[test]
fn threads() {
    check_fixture("threads.c");
}

#[test]
fn c11_threads() {
    check_fixture("c11_threads.c");
}

#[test]
fn cxx_locks() {
    check_fixture("cxx_locks.cpp");
}

#[test]
fn fork() {
    check_fixture("fork.c");
}

/// A lock record's exports: the mutex profile, read back by `go tool pprof`, carries the
/// report's exact counts and times of the lock under its leaf frame and the waiting function
/// below it; the Chrome trace has a track per named thread with a slice per lock call (and
/// the `futex` calls inside) in their own categories.
#[test]
fn mutex_profile_and_thread_tracks() {
    let file = "mutex_hold.c";
    let e = expect(&fixtures_dir().join("locks").join(file));
    let (dir, prog, original) = build(file, &e, CONFIGS[0].1, "exports");
    let data = dir.join("traced.lopi");
    let probed = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "locks", "--trace", "--"]).arg(&prog).current_dir(&dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
    assert!(probed.status.code() == original.status.code() && probed.stdout == original.stdout, "under lopi run --trace: {}\n{}", probed.describe_status(), probed.stderr_str());
    let report = locks_report(&data);
    let lock = report["locks"].as_array().into_iter().flatten().find(|l| l["name"] == "hold_lock").expect("hold_lock in the report").clone();
    const LEAF: &str = "pthread_mutex_lock(hold_lock)";

    let pb = dir.join("mutex.pb");
    let out = run(Command::new(lopi_bin()).args(["export", "--format", "pprof", "--profile", "mutex", "-o"]).arg(&pb).arg(&data), default_timeout()).expect("lopi export");
    assert!(out.status.success(), "lopi export --profile mutex: {}", out.stderr_str());
    let raw = run(Command::new(require("go", "golang-go")).args(["tool", "pprof", "-raw"]).arg(&pb), default_timeout()).expect("go tool pprof");
    assert!(raw.status.success(), "go tool pprof -raw: {}", raw.stderr_str());
    let (types, sums, samples) = pprof_sums(&raw.stdout_str(), LEAF, "holder_main");
    assert_eq!(types, ["contentions/count", "delay/nanoseconds[dflt]", "hold/nanoseconds", "acquisitions/count"]);
    assert_eq!(sums[0], lock["contended"].as_u64().unwrap(), "contentions");
    assert_eq!(sums[3], lock["acquisitions"].as_u64().unwrap(), "acquisitions");
    // Each sample's ns are rounded on their own.
    for (i, key) in [(1, "wait_ns"), (2, "hold_ns")] {
        let want = lock[key].as_u64().unwrap();
        assert!(sums[i].abs_diff(want) <= samples, "{key}: pprof {} ns, report {want} ns", sums[i]);
    }

    let trace_file = dir.join("trace.json");
    let out = run(Command::new(lopi_bin()).args(["export", "--format", "chrome", "-o"]).arg(&trace_file).arg(&data), default_timeout()).expect("lopi export");
    assert!(out.status.success(), "lopi export --format chrome: {}", out.stderr_str());
    let trace: Json = serde_json::from_slice(&std::fs::read(&trace_file).expect("trace")).expect("trace JSON");
    let events = trace["traceEvents"].as_array().expect("events");
    let mut problems = Vec::new();
    for k in 0..4 {
        let name = format!("holder{k}");
        let Some(track) = events.iter().find(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"].as_str().is_some_and(|n| n.starts_with(&format!("{name} (")))) else {
            problems.push(format!("no track named {name}"));
            continue;
        };
        let on_track = |ev_name: &str, cat: &str| events.iter().filter(|e| e["tid"] == track["tid"] && e["ph"] == "B" && e["name"] == ev_name && e["cat"] == cat).count();
        if on_track(LEAF, "lock") != 200 {
            problems.push(format!("{name}: {} {LEAF} slices, expected 200", on_track(LEAF, "lock")));
        }
        if on_track("[syscall] futex", "syscall") == 0 {
            problems.push(format!("{name}: no futex slices"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

/// From `go tool pprof -raw`: the sample types, the sums of the samples whose leaf frame is
/// `leaf` with `caller` below it, and how many there were.
fn pprof_sums(raw: &str, leaf: &str, caller: &str) -> (Vec<String>, Vec<u64>, u64) {
    let mut lines = raw.lines();
    let types: Vec<String> = lines.by_ref().skip_while(|l| !l.starts_with("Samples:")).nth(1).unwrap_or("").split_whitespace().map(String::from).collect();
    let mut samples: Vec<(Vec<u64>, Vec<u64>)> = Vec::new();
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let mut in_locations = false;
    for line in raw.lines() {
        if line.starts_with("Locations") {
            in_locations = true;
        } else if in_locations {
            // `    12: 0x1690 M=1 name file:0:0 s=0`
            let mut words = line.split_whitespace();
            if let (Some(id), Some(_addr), Some(_m), Some(name)) = (words.next(), words.next(), words.next(), words.next()) {
                if let Ok(id) = id.trim_end_matches(':').parse() {
                    names.insert(id, name.to_string());
                }
            }
        } else if let Some((values, locs)) = line.split_once(':') {
            let values: Vec<u64> = values.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            let locs: Vec<u64> = locs.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            if values.len() == types.len() && !locs.is_empty() {
                samples.push((values, locs));
            }
        }
    }
    let mut sums = vec![0; types.len()];
    let mut count = 0;
    for (values, locs) in samples {
        let name = |i: usize| locs.get(i).and_then(|id| names.get(id)).map(String::as_str);
        if name(0) == Some(leaf) && name(1) == Some(caller) {
            count += 1;
            for (s, v) in sums.iter_mut().zip(values) {
                *s += v;
            }
        }
    }
    (types, sums, count)
}
