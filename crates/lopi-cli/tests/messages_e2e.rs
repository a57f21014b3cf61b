//! lopi's error messages, exactly: one line, what happened and what to do, each cause said
//! once, advice that names the right command and option.
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// Runs `lopi ARGS`; checks it failed with status 1 and returns its stderr's last line, after
/// checking that it is the only error line.
fn error_line(args: &[&str]) -> String {
    let out = run(Command::new(lopi_bin()).args(args), default_timeout()).unwrap();
    let err = out.stderr_str();
    assert_eq!(out.status.code(), Some(1), "`lopi {}`: {err}", args.join(" "));
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "`lopi {}`: one error line:\n{err}", args.join(" "));
    err.lines().last().unwrap().to_string()
}

fn record(data: &Path, probes: &str, prog: &Path) {
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", probes, "--"]).arg(prog).env("LOPI_OUTPUT", data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
}

#[test]
fn programs_that_cannot_start() {
    let dir = fresh_dir("messages-start");
    let missing = "lopi-no-such-program";
    let want = format!("lopi: error: cannot start {missing}: no such program in PATH (give its path)");
    assert_eq!(error_line(&["run", "--", missing]), want);
    assert_eq!(error_line(&["trace", "-e", "func:main { @n = count(); }", "--", missing]), want);
    assert_eq!(error_line(&["scale", "--runs", "1", "--", missing]), want);
    assert_eq!(
        error_line(&["whatif", "--kernel", "giant-lock", "--runs", "1", "--", missing]),
        format!("lopi: error: {missing} under lopi run failed (exit status 1): cannot start {missing}: no such program in PATH (give its path)")
    );
    let path = dir.join("absent");
    assert_eq!(error_line(&["run", "--", path.to_str().unwrap()]), format!("lopi: error: cannot start {}: no such file", path.display()));
    let text = dir.join("text");
    std::fs::write(&text, "not a program\n").unwrap();
    for file in [text.as_path(), dir.as_path()] {
        assert_eq!(
            error_line(&["run", "--", file.to_str().unwrap()]),
            format!("lopi: error: cannot start {}: permission denied (a directory, or a file without execute permission: chmod +x)", file.display())
        );
    }
    cleanup(&dir);
}

#[test]
fn processes_that_do_not_exist() {
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    let pid = (pid_max + 1).to_string();
    let want = format!("lopi: error: no process with pid {pid}");
    assert_eq!(error_line(&["trace", "-p", &pid, "-e", "func:main { @n = count(); }"]), want);
    assert_eq!(error_line(&["attach", &pid]), want);
}

#[test]
fn advice_names_what_a_record_lacks() {
    let dir = fresh_dir("messages-advice");
    let prog = build_c(&dir, "prog", "#include <stdio.h>\n__attribute__((noinline)) int f(int x) { return x * 3; }\nint main(int c, char **v) { printf(\"%d\\n\", f(c)); return 0; }\n", &["-O1"]);
    let counted = dir.join("counted.lopi");
    record(&counted, "entry", &prog);
    let timed = dir.join("timed.lopi");
    record(&timed, "entry,exit", &prog);
    let out = dir.join("out");
    let (counted_name, timed_name, out_name) = (counted.to_str().unwrap(), timed.to_str().unwrap(), out.to_str().unwrap());
    let no_locks = |data: &str| format!("lopi: error: {data} has no lock waits for this profile: record the program with --probe locks (lopi run or attach)");
    for (data, profile) in [(counted_name, "mutex"), (timed_name, "mutex"), (timed_name, "block")] {
        assert_eq!(error_line(&["export", data, "--format", "pprof", "--profile", profile, "-o", out_name]), no_locks(data), "{data} {profile}");
    }
    assert_eq!(
        error_line(&["export", timed_name, "--format", "chrome", "-o", out_name]),
        format!("lopi: error: {timed_name} has no trace events: record the program with --trace (lopi run, rewrite or attach)")
    );
    let no_timing = format!("lopi: error: {counted_name} has no timing data: record the program with --probe entry,exit (lopi run, rewrite or attach)");
    assert_eq!(error_line(&["export", counted_name, "--format", "folded", "-o", out_name]), no_timing);
    assert_eq!(error_line(&["flamegraph", counted_name, "-o", out_name]), no_timing);
    assert_eq!(error_line(&["report", counted_name, "--callers", "f"]), no_timing);
    assert_eq!(
        error_line(&["report", counted_name, "--syscalls"]),
        format!("lopi: error: {counted_name} has no system-call data: record the program with --probe syscall (lopi run, rewrite or attach)")
    );
    cleanup(&dir);
}

/// A program recorded with lock probes that takes no lock (dash): `--locks` says so and
/// succeeds; it once said to record it with --probe locks, which it was.
#[test]
fn a_program_that_takes_no_lock() {
    let dir = fresh_dir("messages-no-lock");
    let data = dir.join("dash.lopi");
    let dash = require("dash", "dash");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "locks", "--"]).arg(&dash).args(["-c", "exit 0"]).env("LOPI_OUTPUT", &data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let report = run(Command::new(lopi_bin()).args(["report", "--locks"]).arg(&data), default_timeout()).unwrap();
    assert!(report.status.success(), "{}", report.stderr_str());
    assert_eq!(report.stdout_str().trim(), "no lock calls: the program took no lock while lock probes were in place");
    cleanup(&dir);
}
