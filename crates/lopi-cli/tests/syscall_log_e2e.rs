//! `lopi run --probe syscall --log FILE` (issue 30): the strace-like log. Each call the
//! program makes once its probes are in reads as `strace -f -o` writes it: the same name,
//! decoded arguments (paths, flags, modes, the first 32 bytes of data) and result (errno
//! names), in order, for every process of the tree, and so does each program's start-up
//! (its execve, the dynamic loader's calls), which lopi logs through ptrace before the probes
//! are in.
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const PROGRAM: &str = r#"
#include <fcntl.h>
#include <unistd.h>

int main(void) {
    char buf[64];
    int fd = open("input.txt", O_RDONLY | O_CLOEXEC);
    ssize_t n = read(fd, buf, 5);
    close(fd);
    write(1, buf, n);
    write(1, "\n\"quoted\"\t\\\n", 12);
    access("no/such/file", R_OK);
    int out = open("out.bin", O_WRONLY | O_CREAT | O_TRUNC, 0640);
    unsigned char bytes[40];
    for (int i = 0; i < 40; i++)
        bytes[i] = (unsigned char)(i * 7);
    write(out, bytes, sizeof bytes);
    close(out);
    openat(AT_FDCWD, "no-dir/x", O_RDONLY | O_DIRECTORY);
    return 3;
}
"#;

/// The log's lines without their pids and padding, from the first that names `from` on.
fn calls_from(log: &str, from: &str) -> Vec<String> {
    let lines: Vec<String> = log.lines().filter(|l| !l.contains("+++") && !l.contains("---")).map(|l| unpadded(l.split_once(' ').map_or(l, |(_, rest)| rest).trim_start())).collect();
    let first = lines.iter().position(|l| l.contains(from)).unwrap_or_else(|| panic!("no call names {from}:\n{log}"));
    lines[first..].to_vec()
}

fn lopi_log(dir: &Path, command: &[&str]) -> (String, Output) {
    let log = dir.join("lopi.log");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "syscall", "--log"]).arg(&log).arg("--").args(command).current_dir(dir).env("LOPI_OUTPUT", dir.join("run.lopi")), default_timeout()).expect("lopi run");
    (std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("no log at {}: {e}", log.display())), out)
}

#[test]
fn each_call_reads_as_strace_writes_it() {
    let dir = fresh_dir("syscall-log");
    std::fs::write(dir.join("input.txt"), "hello world").unwrap();
    let prog = build_c(&dir, "calls", PROGRAM, &["-O2"]);
    let prog = prog.to_str().unwrap();
    let strace_log = dir.join("strace.log");
    let traced = run(Command::new(require("strace", "strace")).args(["-f", "-o"]).arg(&strace_log).arg(prog).current_dir(&dir), default_timeout()).expect("strace");
    let (log, ran) = lopi_log(&dir, &[prog]);
    assert_eq!((ran.status.code(), &ran.stdout), (traced.status.code(), &traced.stdout), "lopi run changed the program's output or status");
    let want = calls_from(&std::fs::read_to_string(&strace_log).unwrap(), "\"input.txt\"");
    let got = calls_from(&log, "\"input.txt\"");
    assert_eq!(got, want, "\n{}", diff("strace -f", &want.join("\n"), "lopi --log", &got.join("\n")));
    // What the lines hold: the data read, binary data cut at 32 bytes, errno names, modes.
    for expected in [
        r#"read(3, "hello", 5) = 5"#,
        r#"access("no/such/file", R_OK) = -1 ENOENT (No such file or directory)"#,
        r#"openat(AT_FDCWD, "out.bin", O_WRONLY|O_CREAT|O_TRUNC, 0640) = 3"#,
        r#"write(3, "\0\7\16\25\34#*18?FMT[bipw~\205\214\223\232\241\250\257\266\275\304\313\322\331"..., 40) = 40"#,
        "exit_group(3) = ?",
    ] {
        assert!(got.iter().any(|l| l == expected), "no `{expected}` in:\n{}", got.join("\n"));
    }
    cleanup(&dir);
}

#[test]
fn the_log_follows_the_process_tree() {
    let dir = fresh_dir("syscall-log-tree");
    std::fs::write(dir.join("input.txt"), "one\n").unwrap();
    let (log, ran) = lopi_log(&dir, &["sh", "-c", "cat input.txt /nonexistent; echo done"]);
    assert_eq!(ran.stdout, b"one\ndone\n");
    let log = log.lines().map(unpadded).collect::<Vec<_>>().join("\n");
    let pid_of = |needle: &str| log.lines().find(|l| l.contains(needle)).and_then(|l| l.split_whitespace().next()).unwrap_or_else(|| panic!("no `{needle}` in:\n{log}")).to_string();
    let cat = pid_of(r#"openat(AT_FDCWD, "input.txt", O_RDONLY) = 3"#);
    assert_eq!(pid_of(r#"openat(AT_FDCWD, "/nonexistent", O_RDONLY) = -1 ENOENT (No such file or directory)"#), cat);
    assert_ne!(pid_of(r#"write(1, "done\n", 5) = 5"#), cat, "sh's write is sh's, not cat's");
    // dash starts cat with vfork: the child's execve, made on its parent's suspended state,
    // is the child's.
    let execve = log.lines().find(|l| l.contains(r#"execve("/usr/bin/cat", ["cat", "input.txt", "/nonexistent"], "#)).unwrap_or_else(|| panic!("no execve of cat in:\n{log}"));
    assert!(execve.starts_with(&format!("{cat} ")) && execve.ends_with(" = 0"), "{execve}");
    // Lines are in the order the calls ended: sh reaps cat after cat's last call.
    let at = |needle: &str| log.lines().position(|l| l.contains(needle)).unwrap();
    assert!(at("exit_group(1) = ?") < at("wait4("), "{log}");
    cleanup(&dir);
}

#[test]
fn a_plan_cached_without_the_log_is_not_used_for_it() {
    // A run without --log caches images whose probes do not log: a --log run must not load them.
    let dir = fresh_dir("syscall-log-cache");
    std::fs::write(dir.join("input.txt"), "hello world").unwrap();
    let prog = build_c(&dir, "calls", PROGRAM, &["-O2"]);
    let lopi = |log: Option<&Path>| {
        let mut cmd = Command::new(lopi_bin());
        cmd.args(["run", "-q", "--probe", "syscall"]).current_dir(&dir).env("XDG_CACHE_HOME", dir.join("cache")).env("LOPI_OUTPUT", dir.join("run.lopi"));
        if let Some(log) = log {
            cmd.arg("--log").arg(log);
        }
        let out = run(cmd.arg("--").arg(&prog), default_timeout()).expect("lopi run");
        assert_eq!(out.status.code(), Some(3), "{}", out.stderr_str());
    };
    lopi(None);
    let log = dir.join("lopi.log");
    lopi(Some(&log));
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.lines().map(unpadded).any(|l| l.ends_with(r#"read(3, "hello", 5) = 5"#)), "no read of input.txt in:\n{log}");
    cleanup(&dir);
}

#[test]
fn a_log_needs_system_call_probes() {
    let out = run(Command::new(lopi_bin()).args(["run", "--probe", "entry", "--log", "/tmp/never.log", "--", "true"]), default_timeout()).expect("lopi run");
    assert!(!out.status.success());
    assert!(out.stderr_str().contains("--log writes the system calls the probes see: use it with --probe syscall"), "{}", out.stderr_str());
    assert!(!Path::new("/tmp/never.log").exists());
}

#[test]
fn an_attached_tree_is_logged_too() {
    let dir = fresh_dir("syscall-log-attach");
    std::fs::write(dir.join("input.txt"), "one\n").unwrap();
    let mut looping = Command::new("bash").args(["-c", "while :; do cat input.txt > /dev/null; sleep 0.1; done"]).current_dir(&dir).spawn().expect("bash");
    // Let bash reach its loop: an attach during its start-up finds libc not yet loaded.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = dir.join("attach.log");
    let out = run(Command::new(lopi_bin()).args(["attach", "-f", &looping.id().to_string(), "--probe", "syscall", "--duration", "1s", "--log"]).arg(&log).current_dir(&dir).env("LOPI_OUTPUT", dir.join("attach.lopi")), default_timeout()).expect("lopi attach");
    let _ = looping.kill();
    let _ = looping.wait();
    assert!(out.status.success(), "{}", out.stderr_str());
    let log = std::fs::read_to_string(&log).unwrap().lines().map(unpadded).collect::<Vec<_>>();
    let cats: Vec<&str> = log.iter().filter(|l| l.ends_with(r#"openat(AT_FDCWD, "input.txt", O_RDONLY) = 3"#)).map(|l| l.split_whitespace().next().unwrap()).collect();
    assert!(cats.len() >= 3, "cat ran about 8 times in the second: {}", log.join("\n"));
    // The first cat may have been forked before bash had its probes: its execve is not seen.
    for (i, cat) in cats.iter().enumerate() {
        assert_ne!(cat.parse::<u32>().unwrap(), looping.id(), "cat's calls are its own");
        if i == 0 {
            continue;
        }
        // A pid shorter than strace's 5 columns is padded: `123   execve(`.
        let execve = |l: &str| l.split_whitespace().next() == Some(cat) && l.contains(r#" execve("/usr/bin/cat", ["cat", "input.txt"], "#) && l.ends_with(" = 0");
        assert!(log.iter().map(String::as_str).any(execve), "no execve of cat {cat}");
    }
    cleanup(&dir);
}

/// Each process's lines in an `strace -f -o` log (or `lopi --log`'s), in order
/// ([`strace_lines`]).
fn by_process(log: &str) -> Vec<(String, Vec<String>)> {
    let mut processes: Vec<(String, Vec<String>)> = Vec::new();
    for (pid, line) in strace_lines(log) {
        let pid = pid.to_string();
        match processes.iter_mut().find(|(p, _)| *p == pid) {
            Some((_, lines)) => lines.push(line),
            None => processes.push((pid, vec![line])),
        }
    }
    processes
}

/// What must be the same in both logs of a start-up call made by process `pid`: the whole line
/// of an openat, access or execve, else its name and result; addresses (ASLR), the process's
/// own pid and strace's `/* N vars */` aside.
fn comparable(line: &str, pid: &str) -> String {
    let hex = regex::Regex::new("0x[0-9a-f]+").unwrap();
    let line = regex::Regex::new(r" /\* \d+ vars \*/").unwrap().replace(line, "");
    let (call, result) = line.rsplit_once(" = ").unwrap_or((&line, ""));
    let result = if result == pid { "PID" } else { result };
    let name = call.split('(').next().unwrap_or(call);
    let shown = if matches!(name, "openat" | "access" | "execve") { call } else { name };
    hex.replace_all(&format!("{shown} = {result}"), "0x?").into_owned()
}

#[test]
fn each_program_starts_as_strace_sees_it() {
    let dir = fresh_dir("syscall-log-startup");
    std::fs::write(dir.join("input.txt"), "one\n").unwrap();
    let command = ["sh", "-c", "cat input.txt"];
    let strace_log = dir.join("strace.log");
    let traced = run(Command::new(require("strace", "strace")).args(["-f", "-o"]).arg(&strace_log).args(command).current_dir(&dir), default_timeout()).expect("strace");
    let (log, ran) = lopi_log(&dir, &command);
    assert_eq!((ran.status.code(), &ran.stdout), (traced.status.code(), &traced.stdout));
    let (got, want) = (by_process(&log), by_process(&std::fs::read_to_string(&strace_log).unwrap()));
    assert_eq!(got.len(), want.len(), "processes:\n{log}");
    // How many calls each program made before its probes went live.
    let out = run(Command::new(lopi_bin()).arg("report").arg(dir.join("run.lopi")).args(["--processes", "--format", "json"]), default_timeout()).expect("lopi report");
    let tree: serde_json::Value = serde_json::from_str(&out.stdout_str()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout_str()));
    let rows = tree["processes"].as_array().unwrap();
    for ((pid, lines), (strace_pid, strace_lines)) in got.iter().zip(&want) {
        let execves = |lines: &[String]| lines.iter().filter(|l| l.starts_with("execve(")).count();
        assert_eq!((execves(lines), execves(strace_lines)), (1, 1), "one execve for each program:\n{}", lines.join("\n"));
        let row = rows.iter().find(|r| r["pid"].as_u64().is_some_and(|p| p.to_string() == *pid)).unwrap_or_else(|| panic!("no process {pid} in {rows:?}"));
        // The root's count holds its execve, which lopi's child made; cat's was sh's probes'.
        let loader = row["startup_calls"].as_u64().unwrap() as usize - usize::from(row["parent"].as_u64() == Some(0));
        // From the execve to the first call after the entry point, the probes'.
        let window = |lines: &[String], pid: &str| {
            let at = lines.iter().position(|l| l.starts_with("execve(")).unwrap();
            lines.iter().skip(at).take(loader + 2).map(|l| comparable(l, pid)).collect::<Vec<_>>()
        };
        let (got, want) = (window(lines, pid), window(strace_lines, strace_pid));
        assert!(loader > 10 && got.len() == loader + 2, "{pid}: {loader} start-up calls:\n{}", lines.join("\n"));
        assert_eq!(got, want, "\n{}", diff("strace -f", &want.join("\n"), "lopi --log", &got.join("\n")));
    }
    // What the start-up lines hold, whole: paths, flags, errno names, argv.
    let lines = got[0].1.clone();
    for expected in [
        r#"execve("/usr/bin/sh", ["sh", "-c", "cat input.txt"], "#,
        r#"access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory)"#,
        r#"openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3"#,
    ] {
        assert!(lines.iter().any(|l| l.starts_with(expected)), "no `{expected}` in:\n{}", lines.join("\n"));
    }
    assert!(lines[0].starts_with("execve(") && lines[1].starts_with("brk(NULL) = 0x"), "{}", lines.join("\n"));
    cleanup(&dir);
}
