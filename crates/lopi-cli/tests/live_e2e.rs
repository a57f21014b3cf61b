//! End-to-end tests of live splicing (`lopi attach PID`, `lopi run`) on running programs
//! from `fixtures/live/`: probes go in while threads run, data matches the workload, and
//! detaching leaves the process's code byte-for-byte as in the file, its memory bounded
//! and its output right. (`fixtures_e2e.rs` and `timing_e2e.rs` run every fixture under
//! `lopi run` too, with exact counts and call graphs.)
//!
//! Knobs: LOPI_BIN, LOPI_KEEP_TMP, LOPI_LIVE_CYCLES (attach/detach cycles, default 100).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Builds `fixtures/live/FILE` with `-O2 -pthread` (plus `flags`) into `dir`.
fn build(file: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    let out = dir.join(file.trim_end_matches(".c"));
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-pthread"]).args(flags).arg(fixtures_dir().join("live").join(file)).arg("-o").arg(&out);
    compile(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
    out
}

/// A fixture running in the background; killed if the test fails.
struct Running {
    child: Child,
}

impl Running {
    fn start(prog: &Path, args: &[&str]) -> Running {
        let child = Command::new(prog).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start fixture");
        // Let its threads get going.
        std::thread::sleep(Duration::from_millis(300));
        Running { child }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill").args([&format!("-{sig}"), &self.pid().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{sig} {}", self.pid());
    }

    /// Waits for the program to end; its stdout and whether it exited 0.
    fn finish(mut self, within: Duration) -> (String, bool) {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                return (out, status.success());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("process {} did not end within {within:?}", self.pid());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lopi(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(lopi_bin());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd, Duration::from_secs(120)).expect("run lopi")
}

fn attach(pid: i32, extra: &[&str], data: &Path) -> Output {
    let pid = pid.to_string();
    let mut args = vec!["attach", pid.as_str()];
    args.extend_from_slice(extra);
    let out = lopi(&args, &[("LOPI_OUTPUT", data)]);
    assert!(out.status.success(), "lopi attach {pid} {extra:?} failed: {}\n{}", out.describe_status(), out.stderr_str());
    assert!(!out.stderr_str().contains("panicked"), "{}", out.stderr_str());
    out
}

/// Calls per function in a data file (`lopi report --format json`).
fn calls(data: &Path) -> BTreeMap<String, u64> {
    let out = lopi(&["report", data.to_str().unwrap(), "--format", "json"], &[]);
    assert!(out.status.success(), "lopi report: {}", out.stderr_str());
    parse_report(&out.stdout_str()).unwrap().into_iter().map(|e| (e.name, e.calls)).collect()
}

/// (mappings, VmRSS in KiB) of a process.
fn footprint(pid: i32) -> (usize, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap().lines().count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    (maps, rss)
}

#[test]
fn attach_counts_and_times_a_running_multithreaded_program_and_restores_it() {
    let dir = fresh_dir("live-attach");
    let prog = build("busy.c", &dir, &[]);
    let busy = Running::start(&prog, &["60", "3"]);
    let pid = busy.pid();
    code_matches_file(pid, &prog).unwrap();

    // Entry counts.
    let data = dir.join("entry.lopi");
    let out = attach(pid, &["--duration", "1s"], &data);
    let err = out.stderr_str();
    assert!(err.contains("sites; process paused"), "{err}");
    assert!(err.contains("sites restored"), "{err}");
    code_matches_file(pid, &prog).unwrap_or_else(|e| panic!("after detach: {e}\n{err}"));
    let c = calls(&data);
    let (square, add, fib, round) = (c["square"], c["add"], c["fib"], c["one_round"]);
    assert!(round > 1000, "one_round {round}: {c:?}");
    // The same program rewritten (static mode), from start to end, gives the exact
    // proportions (GCC turns part of fib's recursion into a loop, so they are not the
    // source's); rounds in flight at attach and detach make the attached ones approximate.
    let whole = dir.join("whole.lopi");
    let rewritten = dir.join("busy.rewritten");
    let rw = lopi(&["rewrite", prog.to_str().unwrap(), "-o", rewritten.to_str().unwrap()], &[]);
    assert!(rw.status.success(), "{}", rw.stderr_str());
    let out = run(Command::new(&rewritten).args(["0.3", "1"]).env("LOPI_OUTPUT", &whole), Duration::from_secs(60)).unwrap();
    assert!(out.status.success() && out.stdout_str() == "ok\n", "{}", out.stderr_str());
    let w = calls(&whole);
    assert_eq!(w["square"], w["add"], "{w:?}");
    let fib_per_round = w["fib"] as f64 / w["one_round"] as f64;
    let near = |got: f64, want: f64| (got - want).abs() <= 0.02 * want;
    assert!(near(square as f64, add as f64), "square {square} add {add}");
    assert!(near(fib as f64 / round as f64, fib_per_round), "fib per one_round: attached {}, whole run {fib_per_round}", fib as f64 / round as f64);

    // Timing: the same workload, with calling contexts.
    let timed = dir.join("timed.lopi");
    attach(pid, &["--duration", "1s", "--probe", "entry,exit"], &timed);
    code_matches_file(pid, &prog).unwrap();
    let report = lopi(&["report", timed.to_str().unwrap(), "--format", "json"], &[]);
    let j: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let edges = j["edges"].as_array().expect("edges");
    let edge = |caller: &str, callee: &str| {
        edges.iter().find(|e| e["caller"] == caller && e["callee"] == callee).and_then(|e| e["calls"].as_u64()).unwrap_or(0)
    };
    let rounds = edge("worker", "one_round");
    assert!(rounds == 0, "worker was running before the attach: its frame is not open, got {rounds}");
    let (to_sum, to_fib) = (edge("one_round", "sum_squares"), edge("one_round", "fib"));
    assert!(to_sum > 100 && to_fib.abs_diff(to_sum) <= 8, "one_round -> sum_squares {to_sum}, -> fib {to_fib}");
    let nested = edge("fib", "fib") as f64 / to_fib as f64;
    assert!(near(nested, fib_per_round - 1.0), "fib -> fib per one_round -> fib: {nested}, whole run {}", fib_per_round - 1.0);
    assert!(edge("short_lived", "sum_squares") > 0, "threads created while attached are timed: {edges:?}");
    let threads = j["timing"]["threads"].as_array().map_or(0, Vec::len);
    assert!(threads >= 4, "{threads} timed threads");

    busy.signal("TERM");
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "program output after detach: {stdout:?}");
    cleanup(&dir);
}

#[test]
fn attach_detach_cycles_leave_no_trace() {
    let cycles: usize = std::env::var("LOPI_LIVE_CYCLES").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let dir = fresh_dir("live-cycles");
    let prog = build("busy.c", &dir, &["-fPIE", "-pie", "-fcf-protection=full"]);
    let busy = Running::start(&prog, &["600", "3"]);
    let pid = busy.pid();
    let mut baseline = None;
    let started = Instant::now();
    for cycle in 0..cycles {
        let data = dir.join("cycle.lopi");
        let _ = std::fs::remove_file(&data);
        let probe = if cycle % 2 == 0 { "entry" } else { "entry,exit" };
        let out = attach(pid, &["--duration", "30ms", "--probe", probe], &data);
        code_matches_file(pid, &prog).unwrap_or_else(|e| panic!("cycle {cycle}: {e}\n{}", out.stderr_str()));
        assert!(calls(&data).get("one_round").is_some_and(|&n| n > 0), "cycle {cycle}: no calls recorded");
        // Memory settles after a few cycles (the kernel's private copies of patched code
        // pages, glibc's thread caches); after that nothing may grow.
        if cycle == 9 {
            baseline = Some(footprint(pid));
        }
    }
    let (maps0, rss0) = baseline.unwrap_or_else(|| footprint(pid));
    let (maps1, rss1) = footprint(pid);
    eprintln!("{cycles} cycles in {:.1} s; mappings {maps0} -> {maps1}, VmRSS {rss0} -> {rss1} KiB", started.elapsed().as_secs_f64());
    assert!(maps1 <= maps0 + 2, "mappings grew from {maps0} to {maps1}");
    assert!(rss1 <= rss0 + 4096, "VmRSS grew from {rss0} to {rss1} KiB");
    busy.signal("TERM");
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "program output after {cycles} cycles: {stdout:?}");
    cleanup(&dir);
}

/// System-call probes alone also keep per-thread state, found through `fs:0x38`: detaching
/// must clear those words, or the next attach's probes follow them into the unmapped chunks
/// (the program died of SIGSEGV at the second attach).
#[test]
fn system_call_probes_attach_again_after_a_detach() {
    let dir = fresh_dir("live-syscall-cycles");
    let prog = build("busy.c", &dir, &[]);
    let busy = Running::start(&prog, &["600", "3"]);
    for cycle in 0..3 {
        let data = dir.join(format!("cycle{cycle}.lopi"));
        attach(busy.pid(), &["--duration", "200ms", "--probe", "syscall"], &data);
        code_matches_file(busy.pid(), &prog).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
    }
    busy.signal("TERM");
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "program output after 3 attaches: {stdout:?}");
    cleanup(&dir);
}

/// Sampled time (`--time sampled`) arms a CPU-time timer per thread, whose signal (SIGURG) goes
/// to the runtime's handler: a detach must delete the timers and put the signal's action back
/// before it unmaps the handler (the program died of the timer's signal, then SIGPROF, 1 ms after
/// the first detach). Three attaches, then the program runs on and ends as it would, with the
/// signal neither caught nor ignored.
#[test]
fn sampled_time_attaches_again_after_a_detach_and_leaves_its_signal_alone() {
    let dir = fresh_dir("live-sampled-cycles");
    let prog = build("busy.c", &dir, &[]);
    let busy = Running::start(&prog, &["600", "3"]);
    for cycle in 0..3 {
        let data = dir.join(format!("cycle{cycle}.lopi"));
        attach(busy.pid(), &["--duration", "300ms", "--probe", "entry,exit", "--time", "sampled"], &data);
        code_matches_file(busy.pid(), &prog).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        let text = lopi(&["report", data.to_str().unwrap()], &[]).stdout_str();
        assert!(text.contains("time: sampled, "), "cycle {cycle}: {text}");
    }
    std::thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(format!("/proc/{}/status", busy.pid())).expect("the program still runs");
    let mask = |field: &str| status.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(u64::MAX);
    let signal = 1u64 << (lopi_rt_abi::SAMPLE_SIGNAL - 1);
    assert!(mask("SigCgt:") & signal == 0 && mask("SigIgn:") & signal == 0, "SIGURG after the detaches:\n{status}");
    busy.signal("TERM");
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "program output after 3 sampled attaches: {stdout:?}");
    cleanup(&dir);
}

#[test]
fn thread_waiting_inside_entry_bytes_keeps_that_function_unpatched() {
    let dir = fresh_dir("live-blocker");
    let prog = build("blocker.c", &dir, &[]);
    let running = Running::start(&prog, &[]);
    let data = dir.join("blocker.lopi");
    let out = attach(running.pid(), &["--duration", "300ms"], &data);
    assert!(out.stderr_str().contains("thread-inside: 1"), "{}", out.stderr_str());
    code_matches_file(running.pid(), &prog).unwrap();
    let c = calls(&data);
    assert!(!c.contains_key("blocker"), "blocker must not be probed: {c:?}");
    assert!(c.get("busy_step").is_some_and(|&n| n > 0), "{c:?}");
    running.signal("USR1");
    let (stdout, ok) = running.finish(Duration::from_secs(10));
    assert!(ok && stdout == "ok\n", "{stdout:?}");
    cleanup(&dir);
}

#[test]
fn library_functions_by_name() {
    let dir = fresh_dir("live-libc");
    let prog = build("busy.c", &dir, &[]);
    let busy = Running::start(&prog, &["60", "1"]);
    let data = dir.join("libc.lopi");
    let out = attach(busy.pid(), &["--duration", "500ms", "--functions", "libc.so.6:pthread_create", "--functions", "libc:pthread_join"], &data);
    assert!(out.stderr_str().contains("libc.so.6"), "{}", out.stderr_str());
    let c = calls(&data);
    let (created, joined) = (c.get("pthread_create").copied().unwrap_or(0), c.get("pthread_join").copied().unwrap_or(0));
    assert!(created > 10 && created.abs_diff(joined) <= 1, "pthread_create {created}, pthread_join {joined}: {c:?}");
    assert!(!c.contains_key("one_round"), "only the library was asked for: {c:?}");

    // Errors a user can act on.
    let bad = lopi(&["attach", &busy.pid().to_string(), "--functions", "libnosuch:f"], &[("LOPI_OUTPUT", &data)]);
    assert!(!bad.status.success() && bad.stderr_str().contains("no library named \"libnosuch\""), "{}", bad.stderr_str());
    code_matches_file(busy.pid(), &prog).unwrap();

    busy.signal("TERM");
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "{stdout:?}");
    cleanup(&dir);
}

/// A library is named by its `DT_SONAME`, the name `ldd` prints, as well as by its file's
/// name: `libfix.so.7` is the file `libfix.so.1.2.3`, as cmake's libjsoncpp.so.25 is the file
/// libjsoncpp.so.1.9.5.
#[test]
fn library_named_by_its_soname() {
    let dir = fresh_dir("live-soname");
    let lib = dir.join("libfix.so.1.2.3");
    compile(Command::new("cc").args(["-O2", "-fPIC", "-shared", "-Wl,-soname,libfix.so.7"]).arg(fixtures_dir().join("libfix.c")).arg("-o").arg(&lib)).unwrap();
    std::os::unix::fs::symlink("libfix.so.1.2.3", dir.join("libfix.so.7")).unwrap();
    let prog = dir.join("libfix_main");
    compile(Command::new("cc").args(["-O2"]).arg(fixtures_dir().join("libfix_main.c")).arg(&lib).arg("-Wl,-rpath").arg(&dir).arg("-o").arg(&prog)).unwrap();
    let data = dir.join("soname.lopi");
    let out = lopi(&["run", "-q", "--functions", "libfix.so.7:fix_fib", "--", prog.to_str().unwrap()], &[("LOPI_OUTPUT", &data)]);
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(calls(&data).get("fix_fib"), Some(&1973));
    cleanup(&dir);
}

#[test]
fn run_counts_library_calls_exactly() {
    let dir = fresh_dir("live-run-lib");
    let src = dir.join("getpid5.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <unistd.h>\nint main(void) { long s = 0; for (int i = 0; i < 5; i++) s += getpid() > 0; printf(\"%ld\\n\", s); return 3; }\n",
    )
    .unwrap();
    let prog = dir.join("getpid5");
    compile(Command::new("cc").args(["-O2"]).arg(&src).arg("-o").arg(&prog)).unwrap();
    let data = dir.join("run.lopi");
    let out = lopi(&["run", "-q", "--functions", "libc:getpid", "--", prog.to_str().unwrap()], &[("LOPI_OUTPUT", &data)]);
    assert_eq!(out.status.code(), Some(3), "lopi run exits as the program did: {}", out.stderr_str());
    assert_eq!(out.stdout_str(), "5\n");
    assert_eq!(out.stderr_str(), "", "-q prints nothing");
    let c = calls(&data);
    assert_eq!(c.get("__getpid").or(c.get("getpid")), Some(&5), "{c:?}");

    // --arg0: the program sees the name it is called by, as with `exec -a`.
    let name = lopi(&["run", "-q", "--arg0", "some-name", "--", "sh", "-c", "echo $0"], &[("LOPI_OUTPUT", &dir.join("sh.lopi"))]);
    assert_eq!(name.stdout_str(), "some-name\n", "{}", name.stderr_str());
    cleanup(&dir);
}

#[test]
fn target_exit_or_kill_while_attached_leaves_a_usable_record() {
    let dir = fresh_dir("live-exit");
    let prog = build("busy.c", &dir, &[]);

    // The target is killed while lopi waits: lopi notices and ends; the record reads.
    let busy = Running::start(&prog, &["60", "2"]);
    let data = dir.join("killed.lopi");
    let pid = busy.pid();
    let lopi_attach = Command::new(lopi_bin())
        .args(["attach", &pid.to_string(), "--probe", "entry,exit", "--duration", "60s"])
        .env("LOPI_OUTPUT", &data)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    busy.signal("KILL");
    let started = Instant::now();
    let out = lopi_attach.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("exited"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "lopi took {:?} to notice", started.elapsed());
    assert!(calls(&data).get("one_round").is_some_and(|&n| n > 0));
    drop(busy);

    // lopi is killed while attached: the target runs on, probes and all, and its record
    // stays readable.
    let busy = Running::start(&prog, &["2", "2"]);
    let data = dir.join("lopi-killed.lopi");
    let mut lopi_attach = Command::new(lopi_bin())
        .args(["attach", &busy.pid().to_string(), "--duration", "60s"])
        .env("LOPI_OUTPUT", &data)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    lopi_attach.kill().unwrap();
    lopi_attach.wait().unwrap();
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "{stdout:?}");
    assert!(calls(&data).get("one_round").is_some_and(|&n| n > 0));
    cleanup(&dir);
}

#[test]
fn attach_errors_say_what_to_do() {
    let no_such = lopi(&["attach", "99999999"], &[]);
    assert!(!no_such.status.success() && no_such.stderr_str().contains("no process with pid 99999999"), "{}", no_such.stderr_str());

    let dir = fresh_dir("live-errors");
    let prog = build("busy.c", &dir, &[]);
    let busy = Running::start(&prog, &["60", "1"]);
    let pid = busy.pid();

    // Already traced (here by this test).
    nix::sys::ptrace::seize(nix::unistd::Pid::from_raw(pid), nix::sys::ptrace::Options::empty()).expect("seize");
    let traced = lopi(&["attach", &pid.to_string()], &[]);
    let err = traced.stderr_str();
    assert!(!traced.status.success() && err.contains("already traced by pid") && err.contains("detach that tool first"), "{err}");
    let tracee = nix::unistd::Pid::from_raw(pid);
    nix::sys::ptrace::interrupt(tracee).expect("interrupt");
    nix::sys::wait::waitpid(tracee, Some(nix::sys::wait::WaitPidFlag::__WALL)).expect("wait");
    nix::sys::ptrace::detach(tracee, None).expect("detach");

    // Not allowed: another user may not trace root's process.
    if nix::unistd::geteuid().is_root() {
        let copy = std::env::temp_dir().join(format!("lopi-live-test-{}", std::process::id()));
        std::fs::copy(lopi_bin(), &copy).unwrap();
        let out = run(
            Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&copy).args(["attach", &pid.to_string()]),
            Duration::from_secs(30),
        )
        .unwrap();
        let _ = std::fs::remove_file(&copy);
        let err = out.stderr_str();
        assert!(!out.status.success() && err.contains("not allowed to trace pid") && err.contains("CAP_SYS_PTRACE"), "{err}");
    } else {
        eprintln!("note: not root, the permission test needs to switch users; skipped");
    }

    busy.signal("TERM");
    let (stdout, ok) = busy.finish(Duration::from_secs(20));
    assert!(ok && stdout == "ok\n", "the program runs on after refused attaches: {stdout:?}");
    cleanup(&dir);
}
