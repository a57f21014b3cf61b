//! `lopi attach -f PID` (issue 30): the attached process's children are followed as `lopi run`
//! follows its program's, each program they execute probed at its exec; `lopi report
//! --processes` lists them. A parent, attached to while it waits for a file, forks and
//! executes a C child (a known number of `getppid` calls) and `sh -c 'echo hi'` in turn.
//! Without `-f` the executed programs are not probed and no ptrace stays; a detach while the
//! tree runs lets every process of it finish as it would have.
mod common;

use common::*;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Says it is ready (`argv[1].ready`: its libraries loaded, before which an attach without
/// `-f` would leave libc unprobed), waits for `argv[1]` to exist, then runs `argv[3]` rounds: an even round forks and executes
/// `argv[2]` (as `child 7 SLEEP_US`, SLEEP_US being `argv[4]`), an odd one `sh -c 'echo hi'`,
/// and prints how each ended.
const PARENT: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    char ready[4096];
    snprintf(ready, sizeof ready, "%s.ready", argv[1]);
    close(creat(ready, 0644));
    while (access(argv[1], F_OK) != 0) usleep(5000);
    int rounds = atoi(argv[3]);
    for (int i = 0; i < rounds; i++) {
        pid_t p = fork();
        if (p == 0) {
            if (i % 2) execl("/bin/sh", "sh", "-c", "echo hi", (char *)0);
            else execl(argv[2], "child", "7", argv[4], (char *)0);
            _exit(127);
        }
        int st;
        if (waitpid(p, &st, 0) != p) return 1;
        if (WIFEXITED(st)) printf("round %d: exit %d\n", i, WEXITSTATUS(st));
        else printf("round %d: signal %d\n", i, WTERMSIG(st));
        fflush(stdout);
    }
    return 0;
}
"#;

/// `argv[1]` getppid calls, a sleep of `argv[2]` microseconds, exit 3.
const CHILD: &str = r#"#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    for (int i = 0; i < n; i++) getppid();
    usleep(atoi(argv[2]));
    return 3;
}
"#;

const GETPPIDS: u64 = 7;

/// What the parent prints after `rounds` rounds.
fn expected_output(rounds: usize) -> String {
    (0..rounds).map(|i| if i % 2 == 1 { format!("hi\nround {i}: exit 0\n") } else { format!("round {i}: exit 3\n") }).collect()
}

struct Fixture {
    dir: PathBuf,
    parent: PathBuf,
    child: PathBuf,
}

fn fixture(label: &str) -> Fixture {
    let dir = fresh_dir(label);
    let parent = build_c(&dir, "parent", PARENT, &["-O2"]);
    let child = build_c(&dir, "child", CHILD, &["-O2"]);
    Fixture { dir, parent, child }
}

/// The parent, started and waiting for its go file; killed if the test fails.
struct Parent {
    process: Child,
    go: PathBuf,
}

impl Parent {
    fn start(f: &Fixture, rounds: usize, child_sleep_us: u32) -> Parent {
        let go = f.dir.join("go");
        let ready = f.dir.join("go.ready");
        let _ = std::fs::remove_file(&go);
        let _ = std::fs::remove_file(&ready);
        let process = Command::new(&f.parent)
            .arg(&go)
            .arg(&f.child)
            .args([rounds.to_string(), child_sleep_us.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the parent");
        let start = Instant::now();
        while !ready.exists() {
            assert!(start.elapsed() < default_timeout(), "the parent did not get ready");
            std::thread::sleep(Duration::from_millis(5));
        }
        Parent { process, go }
    }

    fn pid(&self) -> i32 {
        self.process.id() as i32
    }

    fn go(&self) {
        std::fs::write(&self.go, "").expect("writing the go file");
    }

    /// Its output and whether it exited 0, once it has ended.
    fn finish(&mut self, within: Duration) -> (String, bool) {
        let status = wait_within(&mut self.process, within, "the parent");
        let mut out = String::new();
        self.process.stdout.take().expect("parent stdout").read_to_string(&mut out).expect("reading the parent's output");
        (out, status.success())
    }
}

impl Drop for Parent {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn wait_within(child: &mut Child, within: Duration, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("{what} did not end within {within:?}");
}

/// `lopi attach PID ARGS`, recording to `data`, once it says the probes are in (its stderr's
/// "detaching" line); the rest of its stderr comes through `Attach::finish`.
struct Attach {
    lopi: Child,
    stderr: mpsc::Receiver<String>,
    said: String,
}

impl Attach {
    fn start(pid: i32, args: &[&str], data: &Path) -> Attach {
        let _ = std::fs::remove_file(data);
        let mut lopi = Command::new(lopi_bin())
            .arg("attach")
            .arg(pid.to_string())
            .args(args)
            .env("LOPI_OUTPUT", data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting lopi attach");
        let (lines, stderr) = mpsc::channel();
        let pipe = lopi.stderr.take().expect("lopi stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut said = String::new();
        loop {
            match stderr.recv_timeout(default_timeout()) {
                Ok(line) => {
                    said += &line;
                    said.push('\n');
                    if line.starts_with("lopi: detaching") {
                        break;
                    }
                }
                Err(_) => {
                    let _ = lopi.kill();
                    panic!("lopi attach {pid} {args:?} did not attach:\n{said}");
                }
            }
        }
        Attach { lopi, stderr, said }
    }

    fn pid(&self) -> i32 {
        self.lopi.id() as i32
    }

    /// Waits for lopi to end: it must exit 0; all it said.
    fn finish(mut self) -> String {
        let status = wait_within(&mut self.lopi, default_timeout(), "lopi attach");
        self.said.extend(self.stderr.iter().map(|l| l + "\n"));
        assert!(status.success(), "lopi attach: {}\n{}", describe_status(&status), self.said);
        assert!(!self.said.contains("panicked"), "{}", self.said);
        self.said
    }
}

/// The pid of the process tracing `pid` (0: none).
fn tracer_of(pid: i32) -> i32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn report(data: &Path, args: &[&str]) -> serde_json::Value {
    let out = run(Command::new(lopi_bin()).arg("report").arg(data).args(args).args(["--format", "json"]), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report {args:?}: {}", out.stderr_str());
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("lopi report {args:?}: {e}\n{}", out.stdout_str()))
}

fn getppids(syscalls: &serde_json::Value) -> u64 {
    by_syscall(&syscalls["syscalls"], "calls").get("getppid").copied().unwrap_or(0)
}

/// With `-f`, the programs the parent executes are probed: the C child's getppid calls are
/// counted exactly, and the tree lists each child with how it ended; the parent's output and
/// status are its own. lopi detaches when the parent exits.
#[test]
fn followed_children_are_probed_and_listed() {
    const ROUNDS: usize = 4;
    let f = fixture("attach-follow");
    let data = f.dir.join("tree.lopi");
    let mut parent = Parent::start(&f, ROUNDS, 20_000);
    let attach = Attach::start(parent.pid(), &["-f", "--probe", "syscall"], &data);
    assert_eq!(tracer_of(parent.pid()), attach.pid(), "with -f the parent stays traced by lopi");
    parent.go();
    let (out, ok) = parent.finish(default_timeout());
    let said = attach.finish();
    assert!(ok && out == expected_output(ROUNDS), "the parent's output or status changed under lopi attach -f:\n{out}\n{said}");
    assert!(said.contains(&format!("followed {ROUNDS} more programs: {ROUNDS} probed")), "{said}");

    let children = report(&data, &["--syscalls", "--comm", "child"]);
    assert_eq!(getppids(&children), GETPPIDS * ROUNDS.div_ceil(2) as u64, "the executed children's getppid calls: {children}");
    let tree = report(&data, &["--processes"]);
    let rows = tree["processes"].as_array().expect("processes");
    let root = rows.iter().find(|r| r["pid"] == parent.pid()).unwrap_or_else(|| panic!("the parent is not in the tree: {rows:?}"));
    assert_eq!(root["ended"], "exit 0", "{root}");
    let children: Vec<_> = rows.iter().filter(|r| r["parent"] == parent.pid()).collect();
    assert_eq!(children.len(), ROUNDS, "the parent's children in the tree: {rows:?}");
    for program in ["child", "sh"] {
        let ran: Vec<_> = children.iter().filter(|r| r["program"] == program).collect();
        assert_eq!(ran.len(), ROUNDS / 2, "{program} in the tree: {rows:?}");
        let ended = if program == "child" { "exit 3" } else { "exit 0" };
        assert!(ran.iter().all(|r| r["ended"] == ended), "{program} should have ended with {ended}: {ran:?}");
    }
    assert!(children.iter().any(|r| r["command"] == serde_json::json!(["sh", "-c", "echo hi"])), "sh's command line: {rows:?}");
    cleanup(&f.dir);
}

/// Without `-f` nothing changes: the parent is not left traced, its forks carry its probes
/// until they execute, and the programs they execute run without probes.
#[test]
fn without_follow_executed_programs_are_not_probed() {
    const ROUNDS: usize = 4;
    let f = fixture("attach-nofollow");
    let data = f.dir.join("plain.lopi");
    let mut parent = Parent::start(&f, ROUNDS, 20_000);
    let attach = Attach::start(parent.pid(), &["--probe", "syscall"], &data);
    assert_eq!(tracer_of(parent.pid()), 0, "without -f no ptrace stays");
    parent.go();
    let (out, ok) = parent.finish(default_timeout());
    let said = attach.finish();
    assert!(ok && out == expected_output(ROUNDS), "the parent's output or status changed under lopi attach:\n{out}\n{said}");
    let all = report(&data, &["--syscalls"]);
    assert_eq!(getppids(&all), 0, "the executed children were probed without -f: {all}\n{said}");
    assert!(by_syscall(&all["syscalls"], "calls").get("wait4").copied().unwrap_or(0) >= ROUNDS as u64, "the parent's own calls are counted: {all}\n{said}");
    cleanup(&f.dir);
}

/// A detach while the tree runs (`--duration`, and Ctrl-C) takes the probes out of every
/// process still running and lets them go: the parent and the rest of its children finish as
/// they would have, none killed by a SIGTRAP or anything else, and nothing stays traced.
#[test]
fn a_detach_while_the_tree_runs_lets_every_process_finish() {
    const ROUNDS: usize = 40;
    let f = fixture("attach-follow-detach");
    // Each of these lands the detach elsewhere: in a child, between fork and exec, in a wait.
    for (attempt, detach) in ["--duration=200ms", "--duration=350ms", "--duration=530ms", "SIGINT"].into_iter().enumerate() {
        let data = f.dir.join(format!("detach{attempt}.lopi"));
        let mut parent = Parent::start(&f, ROUNDS, 50_000);
        let args: &[&str] = if detach == "SIGINT" { &["-f", "--probe", "syscall"] } else { &["-f", "--probe", "syscall", detach] };
        let attach = Attach::start(parent.pid(), args, &data);
        parent.go();
        if detach == "SIGINT" {
            std::thread::sleep(Duration::from_millis(400));
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(attach.pid()), nix::sys::signal::Signal::SIGINT).expect("kill -INT lopi");
        }
        let said = attach.finish();
        assert!(said.contains("detached from the tree"), "{detach}: {said}");
        assert_eq!(tracer_of(parent.pid()), 0, "{detach}: the parent is still traced after the detach");
        let (out, ok) = parent.finish(default_timeout());
        assert!(ok && out == expected_output(ROUNDS), "{detach}: the parent or a child did not finish as it would have:\n{out}\n{said}");
        let tree = report(&data, &["--processes"]);
        let root = tree["processes"].as_array().and_then(|rows| rows.iter().find(|r| r["pid"] == parent.pid()).cloned());
        assert_eq!(root.map(|r| r["ended"].clone()), Some(serde_json::json!("detached")), "{detach}: {tree}");
    }
    cleanup(&f.dir);
}
