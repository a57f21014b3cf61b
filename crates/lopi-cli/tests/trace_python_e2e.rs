//! `pystack` (issue 31): at each `profile:` sample of Debian's python3.11, the running thread's
//! Python frames, read from the interpreter's own structures. On a workload whose functions
//! take known shares of its time, 20 points apart (fixtures/python/profile_work.py), the
//! inclusive samples per function rank the top five as `cProfile`'s cumulative times do; each
//! thread's samples show its own frames; a program that is not CPython 3.11 is refused.
//! `lopi pyprofile --calls` counts calls as cProfile does.
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const WORK: &str = include_str!("../../../fixtures/python/profile_work.py");

/// Prints the five Python functions of `work.py` with the largest cumulative time under
/// cProfile, as `name:line`, most first.
const CPROFILE_TOP: &str = r#"
import cProfile, pstats, sys, os
path = sys.argv[1]
sys.argv = [path, sys.argv[2]]
prof = cProfile.Profile()
prof.enable()
exec(compile(open(path).read(), path, "exec"), {"__name__": "__main__"})
prof.disable()
stats = pstats.Stats(prof).stats
rows = [(v[3], f"{name}:{line}") for (file, line, name), v in stats.items() if file == path]
for _, key in sorted(rows, reverse=True)[:5]:
    print(key)
"#;

/// `lopi trace --format json` of `script` on python3.11 running `args`: the last line's maps.
fn trace(python: &Path, dir: &Path, script: &str, args: &[&str]) -> Json {
    let out_file = dir.join("trace.json");
    let out = run(Command::new(lopi_bin()).args(["trace", "--format", "json", "-o"]).arg(&out_file).args(["-e", script, "--"]).arg(python).args(args), default_timeout()).expect("lopi trace");
    assert!(out.status.success(), "lopi trace: {}\n{}", out.describe_status(), out.stderr_str());
    let text = std::fs::read_to_string(&out_file).expect("lopi trace's output");
    let last: Json = serde_json::from_str(text.trim_end().lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {text}"));
    last["maps"].clone()
}

/// `qualname (file:line)` frames of a stack key, innermost first.
fn frames(key: &str) -> Vec<&str> {
    key.split(';').filter(|f| !f.is_empty()).collect()
}

#[test]
fn inclusive_samples_rank_the_functions_as_cprofile_does() {
    let python = require_file("/usr/bin/python3.11", "python3.11");
    let dir = fresh_dir("trace-python");
    let work = dir.join("work.py");
    std::fs::write(&work, WORK).unwrap();
    let work_name = work.display().to_string();
    let cprofile = run(Command::new(&python).arg("-c").arg(CPROFILE_TOP).arg(&work).arg("3000"), default_timeout()).expect("cProfile");
    assert!(cprofile.status.success(), "{}", cprofile.stderr_str());
    let want: Vec<String> = cprofile.stdout_str().lines().filter(|l| !l.starts_with("total")).map(String::from).collect();

    let maps = trace(&python, &dir, "profile:hz:199 { @[pystack] = count(); @self[pystack(1)] = count(); }", &[&work_name, "3000"]);
    let stacks = maps["@"].as_object().expect("@");
    let (mut inclusive, mut samples) = (BTreeMap::<String, u64>::new(), 0);
    for (key, n) in stacks {
        let n = n.as_u64().unwrap_or(0);
        samples += n;
        let mut seen: Vec<String> = frames(key).iter().filter_map(|f| f.strip_suffix(')')?.split_once(&format!(" ({work_name}:"))).map(|(name, line)| format!("{name}:{line}")).collect();
        seen.sort();
        seen.dedup();
        for f in seen {
            *inclusive.entry(f).or_default() += n;
        }
    }
    assert!(samples > 120, "{samples} samples for more than a second of CPU at 199 Hz: {maps}");
    let mut ranked: Vec<(u64, String)> = inclusive.into_iter().map(|(f, n)| (n, f)).collect();
    ranked.sort_by(|a, b| b.cmp(a));
    let mut got: Vec<String> = ranked.iter().take(5).map(|(_, f)| f.clone()).collect();
    // `<module>` and `main` take the whole run in both: their order is a tie.
    let (mut want_set, mut got_set) = (want.clone(), got.clone());
    want_set.sort();
    got_set.sort();
    assert_eq!(got_set, want_set, "lopi's top five by inclusive samples {ranked:?}; cProfile's {want:?}");
    got.retain(|f| !f.starts_with("<module>") && !f.starts_with("main:"));
    let want_rest: Vec<&String> = want.iter().filter(|f| !f.starts_with("<module>") && !f.starts_with("main:")).collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), want_rest, "the order below main: {ranked:?}");
    // The innermost frame is the function running: classify, tokenize, parse, render and
    // checksum each run their own loop.
    let top_self = maps["@self"].as_object().expect("@self");
    let running: Vec<&str> = top_self.keys().filter_map(|k| frames(k).first().copied()).collect();
    for f in ["tokenize", "render", "checksum"] {
        assert!(running.iter().any(|r| r.starts_with(&format!("{f} ({work_name}:"))), "no sample in {f}: {top_self:?}");
    }
    cleanup(&dir);
}

const THREADS: &str = r#"
import threading

def in_worker(n):
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1000003
    return x

def in_main(n):
    x = 0
    for i in range(n):
        x = (x * 17 + i) % 999983
    return x

t = threading.Thread(target=lambda: [in_worker(200000) for _ in range(50)])
t.start()
for _ in range(50):
    in_main(200000)
t.join()
"#;

/// Each thread's samples walk its own frames: a worker's stacks hold `in_worker` under the
/// thread's bootstrap, never under the main thread's `in_main`.
#[test]
fn each_thread_samples_its_own_frames() {
    let python = require_file("/usr/bin/python3.11", "python3.11");
    let dir = fresh_dir("trace-python-threads");
    let work = dir.join("threads.py");
    std::fs::write(&work, THREADS).unwrap();
    let maps = trace(&python, &dir, "profile:hz:199 { @[pystack] = count(); }", &[&work.display().to_string()]);
    let stacks = maps["@"].as_object().expect("@");
    let (mut worker, mut main) = (0, 0);
    for (key, n) in stacks {
        let names: Vec<&str> = frames(key).iter().map(|f| f.split(' ').next().unwrap_or_default()).collect();
        let n = n.as_u64().unwrap_or(0);
        assert!(!(names.contains(&"in_worker") && names.contains(&"in_main")), "one stack with both threads' frames: {key}");
        if names.first() == Some(&"in_worker") {
            assert!(names.iter().any(|f| f.starts_with("Thread.")), "the worker's stack does not reach its thread's start: {key}");
            worker += n;
        }
        if names.first() == Some(&"in_main") {
            assert_eq!(names.last(), Some(&"<module>"), "{key}");
            main += n;
        }
    }
    assert!(worker > 40 && main > 40, "{worker} samples in the worker, {main} in main: {stacks:?}");
    cleanup(&dir);
}

/// `pystack` on a program that is no CPython 3.11 is refused before it runs, saying why.
#[test]
fn pystack_on_another_program_is_refused() {
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", "profile:hz:99 { @[pystack] = count(); }", "--", "true"]), default_timeout()).expect("lopi trace");
    assert!(!out.status.success() && out.stderr_str().contains("is no Python interpreter"), "{}", out.stderr_str());
}

const CALLS: &str = r#"
import sys

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def numbers(k):
    for i in range(k):
        yield i

class Shape:
    def area(self):
        return 0

class Square(Shape):
    def __init__(self, side):
        self.side = side
    def area(self):
        return self.side * self.side

def main():
    total = fib(15) + sum(numbers(10))
    total += sum(Square(i).area() for i in range(300))
    print("total", total)
    sys.exit(3)

main()
"#;

/// Per function of the workload file, cProfile's calls (total, recursive ones too), as
/// `name:line calls` lines.
const CPROFILE_CALLS: &str = r#"
import cProfile, pstats, sys
path = sys.argv[1]
sys.argv = [path]
prof = cProfile.Profile()
prof.enable()
try:
    exec(compile(open(path).read(), path, "exec"), {"__name__": "__main__"})
except SystemExit:
    pass
prof.disable()
for (file, line, name), v in pstats.Stats(prof).stats.items():
    if file == path:
        print(f"{name}:{line} {v[1]}")
"#;

/// `lopi pyprofile --calls` counts each Python function's calls as cProfile does (recursion,
/// a generator's resumptions, methods of two classes of the same name, a generator
/// expression), exits as the program did, and draws its flame graph.
#[test]
fn pyprofile_counts_calls_as_cprofile_does() {
    let python = require_file("/usr/bin/python3.11", "python3.11");
    let dir = fresh_dir("pyprofile-calls");
    let work = dir.join("calls.py");
    std::fs::write(&work, CALLS).unwrap();
    let work_name = work.display().to_string();
    let cprofile = run(Command::new(&python).arg("-c").arg(CPROFILE_CALLS).arg(&work), default_timeout()).expect("cProfile");
    assert!(cprofile.status.success(), "{}", cprofile.stderr_str());
    let want: BTreeMap<String, u64> = cprofile.stdout_str().lines().filter(|l| !l.starts_with("total ")).filter_map(|l| l.rsplit_once(' ')).map(|(f, n)| (f.to_string(), n.parse().unwrap())).collect();
    assert_eq!(want.get("fib:4"), Some(&1973), "{want:?}");

    let (json, svg) = (dir.join("profile.json"), dir.join("profile.svg"));
    let out = run(
        Command::new(lopi_bin()).args(["pyprofile", "--calls", "--format", "json", "-o"]).arg(&json).arg("--flamegraph").arg(&svg).arg("--").arg(&python).arg(&work),
        default_timeout(),
    )
    .expect("lopi pyprofile");
    assert_eq!(out.status.code(), Some(3), "the program's exit status: {}\n{}", out.describe_status(), out.stderr_str());
    let profile: Json = serde_json::from_str(&std::fs::read_to_string(&json).expect("the profile")).expect("JSON");
    let got: BTreeMap<String, u64> = profile["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter_map(|f| {
            let name = f["function"].as_str()?.strip_suffix(')')?;
            let (name, line) = name.split_once(&format!(" ({work_name}:"))?;
            // cProfile names a function by its name, lopi by its qualified name.
            let short = name.rsplit('.').next().unwrap_or(name);
            Some((format!("{short}:{line}"), f["calls"].as_u64()?))
        })
        .filter(|(f, _)| !f.starts_with("<module>"))
        .fold(BTreeMap::new(), |mut m, (f, n)| {
            *m.entry(f).or_default() += n;
            m
        });
    let want: BTreeMap<String, u64> = want.into_iter().filter(|(f, _)| !f.starts_with("<module>")).collect();
    assert_eq!(got, want, "lopi pyprofile's calls against cProfile's");
    let svg = std::fs::read_to_string(&svg).expect("the flame graph");
    assert!(svg.starts_with("<?xml") && svg.contains("<svg") && svg.contains("at 199 Hz"), "{}", &svg[..svg.len().min(300)]);
    cleanup(&dir);
}

const SERVER: &str = r#"
import sys, time

def handle(n):
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1000003
    return x

def serve():
    print("ready", flush=True)
    end = time.time() + 4
    n = 0
    while time.time() < end:
        handle(20000)
        n += 1
    print("served", n, flush=True)

serve()
"#;

/// `lopi pyprofile -p PID --duration 1s` profiles a running interpreter and leaves it as it
/// was: the profile timer deleted and `SIGPROF`'s action put back at the detach (a timer left
/// behind would kill it with its next signal), so it goes on serving and exits 0.
#[test]
fn pyprofile_attaches_to_a_running_interpreter_and_leaves_it_running() {
    use std::io::{BufRead, BufReader};
    let python = require_file("/usr/bin/python3.11", "python3.11");
    let dir = fresh_dir("pyprofile-attach");
    let work = dir.join("server.py");
    std::fs::write(&work, SERVER).unwrap();
    let mut server = Command::new(&python).arg(&work).stdout(std::process::Stdio::piped()).spawn().expect("python3.11");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    let json = dir.join("profile.json");
    let pid = server.id().to_string();
    let out = run(Command::new(lopi_bin()).args(["pyprofile", "--calls", "--format", "json", "-o"]).arg(&json).args(["-p", &pid, "--duration", "1s"]), default_timeout()).expect("lopi pyprofile");
    assert!(out.status.success(), "{}\n{}", out.describe_status(), out.stderr_str());
    let status = server.wait().expect("the server's end");
    let served = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(status.success() && served.starts_with("served "), "the server after the detach: {status:?} {served:?}\n{}", out.stderr_str());
    let profile: Json = serde_json::from_str(&std::fs::read_to_string(&json).expect("the profile")).expect("JSON");
    let handle = profile["functions"].as_array().expect("functions").iter().find(|f| f["function"].as_str().is_some_and(|n| n.starts_with("handle ("))).cloned().unwrap_or_default();
    assert!(profile["samples"].as_u64().unwrap_or(0) > 50, "{profile}");
    assert!(handle["self_percent"].as_f64().unwrap_or(0.0) > 80.0 && handle["calls"].as_u64().unwrap_or(0) > 50, "{profile}");
    cleanup(&dir);
}
