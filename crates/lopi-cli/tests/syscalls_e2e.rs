//! `--probe syscall` end to end on `fixtures/syscalls/*.c`: each fixture is built in two
//! configurations, run plain, under `lopi run --probe syscall` (every `syscall` of the
//! program, libc and ld.so) and rewritten with `--probe syscall` (the program's own sites);
//! output and exit must be the original's, and `lopi report --syscalls --format json` must
//! give exactly the calls, errors and per-thread calls the fixture's directives state.
mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fixture's `lopi-*` directives (see fixtures/syscalls/README.md).
#[derive(Default)]
struct Expect {
    calls: BTreeMap<String, u64>,
    live_calls: Option<BTreeMap<String, u64>>,
    errors: BTreeMap<String, u64>,
    threads: BTreeMap<String, BTreeMap<String, u64>>,
    cflags: Vec<String>,
    /// `lopi run`'s options besides `--probe syscall` (`lopi-run-args`).
    run_args: Vec<String>,
}

fn pairs(text: &str) -> BTreeMap<String, u64> {
    text.split_whitespace()
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("bad pair {w:?}"));
            (k.to_string(), v.parse().unwrap_or_else(|_| panic!("bad count {w:?}")))
        })
        .collect()
}

fn expect(path: &Path) -> Expect {
    let mut e = Expect::default();
    for line in std::fs::read_to_string(path).expect("fixture").lines() {
        let Some((key, val)) = line.trim().strip_prefix("// lopi-").and_then(|l| l.split_once(": ")) else { continue };
        match key {
            "syscalls" => e.calls = pairs(val),
            "syscalls-live" => e.live_calls = Some(pairs(val)),
            "syscall-errors" => e.errors = pairs(val),
            "syscalls-thread" => {
                let (name, rest) = val.split_once(": ").expect("thread directive");
                e.threads.insert(name.to_string(), pairs(rest));
            }
            "cflags" => e.cflags = val.split_whitespace().map(String::from).collect(),
            "run-args" => e.run_args = val.split_whitespace().map(String::from).collect(),
            _ => {}
        }
    }
    e
}

const CONFIGS: [(&str, &[&str]); 2] = [("O2-pie-cet", &["-O2", "-fPIE", "-pie", "-fcf-protection=full"]), ("O0-nopie", &["-O0", "-fno-pie", "-no-pie"])];

struct Built {
    dir: PathBuf,
    prog: PathBuf,
    original: Output,
}

fn build(file: &str, config: &str, flags: &[&str], e: &Expect) -> Built {
    let dir = fresh_dir(&format!("syscalls-{file}-{config}"));
    let src = fixtures_dir().join("syscalls").join(file);
    let prog = dir.join(file.trim_end_matches(".c"));
    let mut cc = Command::new("cc");
    cc.args(flags).args(["-g", "-Wall"]).args(&e.cflags).arg(&src).arg("-o").arg(&prog);
    compile(&mut cc).unwrap_or_else(|e| panic!("{e}"));
    let original = run(Command::new(&prog).current_dir(&dir), default_timeout()).expect("run original");
    assert!(!original.timed_out, "{file} ({config}) timed out");
    Built { dir, prog, original }
}

/// The report's calls and errors per system call name, in total and per thread name.
struct Seen {
    calls: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    threads: BTreeMap<String, BTreeMap<String, u64>>,
}

fn report(data: &Path) -> Seen {
    let json = syscall_report(data);
    let mut threads = BTreeMap::new();
    for t in json["threads"].as_array().into_iter().flatten() {
        let name = if t["tid"] == t["pid"] { "main".to_string() } else { t["name"].as_str().unwrap_or("").to_string() };
        let entry: &mut BTreeMap<String, u64> = threads.entry(name).or_default();
        for (k, v) in by_syscall(&t["syscalls"], "calls") {
            *entry.entry(k).or_default() += v;
        }
    }
    Seen { calls: by_syscall(&json["syscalls"], "calls"), errors: by_syscall(&json["syscalls"], "errors"), threads }
}

/// Differences between what the fixture states and what lopi saw.
fn compare(what: &str, want: &BTreeMap<String, u64>, seen: &BTreeMap<String, u64>, problems: &mut Vec<String>) {
    for (name, &n) in want {
        let got = seen.get(name).copied().unwrap_or(0);
        if got != n {
            problems.push(format!("{what} {name}: expected {n}, lopi reports {got}"));
        }
    }
}

fn same_run(label: &str, original: &Output, probed: &Output, problems: &mut Vec<String>) {
    if probed.status.code() != original.status.code() || probed.status.signal() != original.status.signal() {
        problems.push(format!("{label}: {} where the original ended with {}\n{}", probed.describe_status(), original.describe_status(), probed.stderr_str()));
    }
    if probed.stdout != original.stdout {
        problems.push(format!("{label}: stdout differs\n{}", diff("original", &original.stdout_str(), label, &probed.stdout_str())));
    }
}

use std::os::unix::process::ExitStatusExt;

fn check_fixture(file: &str) {
    let src = fixtures_dir().join("syscalls").join(file);
    let e = expect(&src);
    let mut problems = Vec::new();
    for (config, flags) in CONFIGS {
        let built = build(file, config, flags, &e);
        // Live: every module's sites.
        let data = built.dir.join("live.lopi");
        let live = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "syscall"]).args(&e.run_args).arg("--").arg(&built.prog).current_dir(&built.dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
        let label = format!("{file} ({config}) under lopi run");
        same_run(&label, &built.original, &live, &mut problems);
        let seen = report(&data);
        compare(&format!("{label}: calls of"), e.live_calls.as_ref().unwrap_or(&e.calls), &seen.calls, &mut problems);
        compare(&format!("{label}: errors of"), &e.errors, &seen.errors, &mut problems);
        for (thread, want) in &e.threads {
            compare(&format!("{label}: thread {thread}: calls of"), want, seen.threads.get(thread).unwrap_or(&BTreeMap::new()), &mut problems);
        }
        // Static: the program's own sites (inline `syscall`s), the rest untouched.
        let rewritten = built.dir.join("rewritten");
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "syscall"]).arg(&built.prog).arg("-o").arg(&rewritten), default_timeout()).expect("lopi rewrite");
        assert!(out.status.success(), "{file} ({config}): lopi rewrite failed: {}", out.stderr_str());
        let data = built.dir.join("static.lopi");
        let ran = run(Command::new(&rewritten).current_dir(&built.dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("run rewritten");
        same_run(&format!("{file} ({config}) rewritten"), &built.original, &ran, &mut problems);
        cleanup(&built.dir);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

macro_rules! fixture_tests {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(#[test] fn $name() { check_fixture($file); })*

        #[test]
        fn every_syscall_fixture_has_a_test() {
            let covered = [$($file),*, "blocking.c"];
            for entry in std::fs::read_dir(fixtures_dir().join("syscalls")).expect("fixtures/syscalls") {
                let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
                assert!(!name.ends_with(".c") || covered.contains(&name.as_str()), "fixtures/syscalls/{name} has no test");
            }
        }
    };
}

fixture_tests! {
    counts => "counts.c",
    clone => "clone.c",
    vfork => "vfork.c",
    fork => "fork.c",
    execve => "execve.c",
    exit => "exit.c",
    signals => "signals.c",
    redzone => "redzone.c",
    flags => "flags.c",
    vdso => "vdso.c",
    sigkill => "sigkill.c",
    unprobed => "unprobed.c",
}

/// The program's own `syscall` instructions, rewritten: exact counts without libc's.
#[test]
fn inline_syscalls_of_a_rewritten_program_count_exactly() {
    let e = expect(&fixtures_dir().join("syscalls/counts.c"));
    let built = build("counts.c", "O2-static", &["-O2"], &e);
    let rewritten = built.dir.join("rewritten");
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "syscall"]).arg(&built.prog).arg("-o").arg(&rewritten), default_timeout()).expect("lopi rewrite");
    assert!(out.status.success(), "{}", out.stderr_str());
    let data = built.dir.join("static.lopi");
    let ran = run(Command::new(&rewritten).current_dir(&built.dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("run");
    assert!(ran.status.success(), "{}", ran.stderr_str());
    let seen = report(&data);
    // counts.c makes its geteuid calls with an inline `syscall`; the rest go through libc.
    assert_eq!(seen.calls.get("geteuid").copied(), e.calls.get("geteuid").copied(), "{:?}", seen.calls);
    assert!(seen.calls.keys().all(|k| k == "geteuid"), "only the program's own sites are probed: {:?}", seen.calls);
    cleanup(&built.dir);
}

/// Attaching while threads wait in system calls (read, futex, nanosleep): their sites are
/// probed all the same (the threads return through the trampolines), and detaching while
/// they still wait sends them back to the original code; the program ends normally either way.
#[test]
fn attach_and_detach_around_threads_waiting_in_system_calls() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let built = build("blocking.c", "O2", &["-O2"], &expect(&fixtures_dir().join("syscalls/blocking.c")));
    // Released after 3 s: detach at 1 s leaves them waiting; at 5 s they returned meanwhile.
    for (duration, returns_while_attached) in [("1s", false), ("5s", true)] {
        let mut child = Command::new(&built.prog).arg("3").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start blocking");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = lines.next().expect("a ready line").expect("read");
        assert!(ready.starts_with("ready "), "{ready}");
        let data = built.dir.join(format!("attach-{duration}.lopi"));
        let out = run(Command::new(lopi_bin()).args(["attach", &child.id().to_string(), "--probe", "syscall", "--duration", duration]).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi attach");
        let err = out.stderr_str();
        assert!(out.status.success(), "lopi attach: {err}");
        let status = child.wait().expect("wait");
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(status.success() && rest == ["released"], "after detaching at {duration}: {status:?}, output {rest:?}\n{err}");
        // Every site went in: none was given up for a thread inside it.
        let installed = |text: &str| text.lines().find_map(|l| l.split_once(" sites;").and_then(|(a, _)| a.rsplit(' ').next()?.parse::<u64>().ok()));
        // Each module's summary line: "N syscall sites found, M probed (...)".
        let probed = |l: &str| l.split_once(" syscall sites found, ")?.1.split_once(" probed")?.0.parse::<u64>().ok();
        let sites: u64 = err.lines().filter_map(probed).sum();
        assert!(err.contains("[vdso]: ") && err.contains("libc.so.6: "), "{err}");
        let found = |l: &str| l.split_once(" syscall sites found, ")?.0.rsplit(' ').next()?.parse::<u64>().ok();
        assert!(err.lines().all(|l| found(l) == probed(l)), "a site was given up:\n{err}");
        assert_eq!(installed(&err), Some(sites), "{err}");
        if returns_while_attached {
            let seen = report(&data);
            assert!(seen.calls.get("write").copied().unwrap_or(0) >= 1, "the releaser's write under the probes: {:?}", seen.calls);
        }
    }
    cleanup(&built.dir);
}

/// With entry and exit probes too, a system call is a leaf of the calling context it was
/// made from: folded stacks show `make_calls;[syscall] getppid` (libc's wrapper is not
/// timed) and `make_calls;inline_geteuid;[syscall] geteuid`, with the fixture's counts.
#[test]
fn system_calls_are_leaves_of_their_calling_context() {
    let e = expect(&fixtures_dir().join("syscalls/counts.c"));
    let built = build("counts.c", "O2-contexts", &["-O2"], &e);
    let data = built.dir.join("contexts.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "entry,exit,syscall", "--"]).arg(&built.prog).current_dir(&built.dir).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
    assert!(out.status.success() && out.stdout == built.original.stdout, "{}", out.stderr_str());
    let folded = built.dir.join("stacks.txt");
    let export = run(Command::new(lopi_bin()).args(["export", "--format", "folded", "--weight", "calls", "-o"]).arg(&folded).arg(&data), default_timeout()).expect("lopi export");
    assert!(export.status.success(), "{}", export.stderr_str());
    let text = std::fs::read_to_string(&folded).expect("folded stacks");
    let calls_under = |path: &str| -> u64 {
        text.lines().filter_map(|l| l.rsplit_once(' ')).filter(|(stack, _)| stack.ends_with(path)).map(|(_, n)| n.parse::<u64>().unwrap_or(0)).sum()
    };
    for (path, name) in [("make_calls;[syscall] getppid", "getppid"), ("make_calls;[syscall] getpgid", "getpgid"), ("make_calls;[syscall] getsid", "getsid"), ("make_calls;inline_geteuid;[syscall] geteuid", "geteuid")] {
        assert_eq!(calls_under(path), e.calls[name], "{path}:\n{text}");
    }
    let seen = report(&data);
    assert_eq!(seen.errors.get("getsid"), e.errors.get("getsid"), "{:?}", seen.errors);
    cleanup(&built.dir);
}

/// Static mode for libc's system calls: a rewritten copy of libc.so.6 on `LD_LIBRARY_PATH`.
#[test]
fn a_rewritten_libc_counts_the_calls_made_through_it() {
    let e = expect(&fixtures_dir().join("syscalls/counts.c"));
    let built = build("counts.c", "O2-libc", &["-O2"], &e);
    let libdir = built.dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "syscall", "/lib/x86_64-linux-gnu/libc.so.6", "-o"]).arg(libdir.join("libc.so.6")), default_timeout()).expect("lopi rewrite");
    assert!(out.status.success(), "{}", out.stderr_str());
    let data = built.dir.join("libc.lopi");
    let ran = run(Command::new(&built.prog).current_dir(&built.dir).env("LD_LIBRARY_PATH", &libdir).env("LOPI_OUTPUT", &data), default_timeout()).expect("run");
    assert!(ran.status.success() && ran.stdout == built.original.stdout, "{}", ran.stderr_str());
    let seen = report(&data);
    // Through libc: every call but the program's own inline geteuid.
    for name in ["getppid", "getpgid", "getsid"] {
        assert_eq!(seen.calls.get(name), e.calls.get(name), "{name}: {:?}", seen.calls);
    }
    assert_eq!(seen.calls.get("geteuid"), None, "{:?}", seen.calls);
    assert_eq!(seen.errors.get("getsid"), e.errors.get("getsid"));
    cleanup(&built.dir);
}
