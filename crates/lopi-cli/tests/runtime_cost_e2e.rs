//! lopi's own system calls inside the program (issue 26 item 10). Its runtime (registering
//! records, thread chunks, calibration) and a live installer (the calls it injects, the
//! `munmap`s of a detach) make system calls in the program's processes that are not the
//! program's: `lopi report` must count them exactly, per call, and apart from the program's.
//!
//! The program (fixtures/runtime/own_calls.c) makes the same system calls in every run, so
//! what a recording adds to a native run's calls is lopi's. Oracles: `strace -f -c` for
//! rewritten programs; for `lopi run` and `lopi attach`, which ptrace the program (strace
//! cannot), the kernel's `raw_syscalls:sys_enter` tracepoint filtered by the program's name,
//! in a tracefs instance of the test's own. `futex` is left out of the comparisons: whether
//! a thread's join waits depends on when the thread ends.
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const FUTEX: u64 = 202;

/// The fixture, built into `dir` under a name of its own (the tracepoint's filter is the
/// program's name, at most 15 characters).
fn build(dir: &Path) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!("ownc{}x{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::Relaxed));
    let prog = dir.join(name);
    let src = fixtures_dir().join("runtime/own_calls.c");
    compile(Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&prog).arg(&src)).unwrap_or_else(|e| panic!("{e}"));
    prog
}

/// Calls per name in `strace -c`'s table.
fn strace_table(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = *fields.last()?;
            let numeric = fields.first()?.parse::<f64>().is_ok();
            (numeric && fields.len() >= 5 && name != "total").then(|| (name.to_string(), fields[3].parse().unwrap_or(0)))
        })
        .collect()
}

/// `cmd` under `strace -f -c`: its output and its calls per name.
fn under_strace(cmd: &mut Command, log: &Path) -> (Output, BTreeMap<String, u64>) {
    let strace = require("strace", "strace");
    let mut traced = Command::new(strace);
    traced.args(["-f", "-c", "-o"]).arg(log).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            traced.env(k, v);
        }
    }
    let out = run(&mut traced, default_timeout()).expect("strace");
    assert!(out.status.success(), "under strace: {}\n{}", out.describe_status(), out.stderr_str());
    (out, strace_table(&std::fs::read_to_string(log).expect("strace's table")))
}

/// `lopi report --format json` of `data`.
fn report_json(data: &Path) -> Json {
    let out = run(Command::new(lopi_bin()).args(["report", "--format", "json"]).arg(data), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report: {}", out.stderr_str());
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// The runtime's calls in a report's `runtime_syscalls`, by `key` ("name" or "nr").
fn runtime_calls(own: &Json, key: &str) -> BTreeMap<String, u64> {
    own["by_call"].as_array().into_iter().flatten().map(|c| (c[key].to_string().trim_matches('"').to_string(), c["calls"].as_u64().unwrap_or(0))).collect()
}

/// Per key: the calls `with` has beyond `without` (negative: fewer), `futex` (`skip`) left out.
fn added(with: &BTreeMap<String, u64>, without: &BTreeMap<String, u64>, skip: &str) -> BTreeMap<String, i64> {
    with.keys()
        .chain(without.keys())
        .filter(|k| k.as_str() != skip)
        .map(|k| (k.clone(), with.get(k).copied().unwrap_or(0) as i64 - without.get(k).copied().unwrap_or(0) as i64))
        .filter(|(_, n)| *n != 0)
        .collect()
}

fn as_signed(counts: &BTreeMap<String, u64>, skip: &str) -> BTreeMap<String, i64> {
    counts.iter().filter(|(k, _)| k.as_str() != skip).map(|(k, &n)| (k.clone(), n as i64)).collect()
}

/// The program rewritten with `probes`, its data file in `dir`.
fn rewrite(prog: &Path, probes: &str, dir: &Path) -> PathBuf {
    let rewritten = dir.join(format!("{}.rw", prog.file_name().unwrap().to_string_lossy()));
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", probes]).arg(prog).arg("-o").arg(&rewritten), default_timeout()).expect("lopi rewrite");
    assert!(out.status.success(), "lopi rewrite: {}", out.stderr_str());
    rewritten
}

/// Rewritten with `--probe entry,exit` and run under strace: what it adds to the native run's
/// calls, name by name, is what the report says lopi's runtime made. Its `clock_gettime`s are
/// the threads' CPU clocks only (one as each thread's chunk starts, which the vDSO does not
/// serve): none to calibrate or to read the time.
#[test]
fn rewritten_runtime_calls_equal_what_strace_counts_beyond_the_program() {
    let dir = fresh_dir("runtime-cost-rewritten");
    let prog = build(&dir);
    let rewritten = rewrite(&prog, "entry,exit", &dir);
    for (mode, threads) in [("single", 1), ("full", 4)] {
        let (native, plain) = under_strace(Command::new(&prog).arg(mode), &dir.join("native.strace"));
        let data = dir.join(format!("{mode}.lopi"));
        let _ = std::fs::remove_file(&data);
        let (probed, counted) = under_strace(Command::new(&rewritten).arg(mode).env("LOPI_OUTPUT", &data), &dir.join("probed.strace"));
        assert_eq!(probed.stdout_str(), native.stdout_str(), "{mode}: the rewritten program's output");
        let report = report_json(&data);
        let own = &report["runtime_syscalls"];
        let lopis = added(&counted, &plain, "futex");
        eprintln!("{mode}: strace counts {lopis:?} beyond the program's; the report {}", own["calls"]);
        assert_eq!(as_signed(&runtime_calls(own, "name"), "futex"), lopis, "{mode}: the runtime's calls by name (report) against strace's beyond the native run");
        assert_eq!(runtime_calls(own, "name").get("futex"), None, "{mode}: the runtime makes no futex call");
        let clocks = lopis.get("clock_gettime").copied().unwrap_or(0);
        assert_eq!(clocks, threads, "{mode}: the runtime's clock_gettime calls: one CPU-clock read per thread chunk");
        assert!(mode != "single" || clocks <= 2, "single: {clocks} clock_gettime calls");
        assert!(own["ns"].as_f64().is_some_and(|ns| ns > 0.0), "{mode}: their time: {own}");
        // The text report says it in one line.
        let text = run(Command::new(lopi_bin()).arg("report").arg(&data), default_timeout()).expect("lopi report");
        let line = format!("note: lopi's runtime made {} system calls in the program's processes (", own["calls"]);
        assert!(text.stdout_str().contains(&line), "{mode}: {line:?} in\n{}", text.stdout_str());
    }
    cleanup(&dir);
}

/// A tracefs instance counting the system calls of the processes named `comm` (the kernel's
/// `raw_syscalls:sys_enter`), by number; removed when dropped.
struct KernelCount {
    instance: PathBuf,
}

impl KernelCount {
    fn start(comm: &str) -> KernelCount {
        let root = Path::new("/sys/kernel/tracing");
        if !root.join("instances").is_dir() {
            let mounted = Command::new("mount").args(["-t", "tracefs", "nodev"]).arg(root).status().is_ok_and(|s| s.success());
            assert!(mounted, "tracefs is not mounted at {} and could not be (run as root: mount -t tracefs nodev {0})", root.display());
        }
        let instance = root.join("instances").join(format!("lopi-{comm}"));
        let _ = std::fs::remove_dir(&instance);
        std::fs::create_dir(&instance).unwrap_or_else(|e| panic!("creating the tracefs instance {}: {e} (run as root)", instance.display()));
        let count = KernelCount { instance };
        let event = count.instance.join("events/raw_syscalls/sys_enter");
        std::fs::write(count.instance.join("buffer_size_kb"), "8192").expect("tracefs buffer size");
        std::fs::write(event.join("filter"), format!("comm == \"{comm}\"")).expect("tracefs filter");
        std::fs::write(event.join("enable"), "1").expect("enabling raw_syscalls:sys_enter");
        std::fs::write(count.instance.join("tracing_on"), "1").expect("tracing_on");
        count
    }

    /// Calls by number since the start (or the last `take`), all of them (none lost).
    fn take(&self) -> BTreeMap<String, u64> {
        std::fs::write(self.instance.join("tracing_on"), "0").expect("tracing_on");
        let text = std::fs::read_to_string(self.instance.join("trace")).expect("the trace");
        // "# entries-in-buffer/entries-written: 157/157   #P:2"
        let kept = text.lines().find_map(|l| l.strip_prefix("# entries-in-buffer/entries-written: ")).expect("the trace's header");
        let (held, written) = kept.split_whitespace().next().and_then(|k| k.split_once('/')).expect("entries");
        assert_eq!(held, written, "the trace buffer lost events");
        let mut counts = BTreeMap::new();
        for nr in text.lines().filter_map(|l| l.split_once("sys_enter: NR ")).filter_map(|(_, rest)| rest.split_whitespace().next()) {
            *counts.entry(nr.to_string()).or_default() += 1;
        }
        std::fs::write(self.instance.join("trace"), "").expect("clearing the trace");
        std::fs::write(self.instance.join("tracing_on"), "1").expect("tracing_on");
        counts
    }
}

impl Drop for KernelCount {
    fn drop(&mut self) {
        let _ = std::fs::write(self.instance.join("events/raw_syscalls/sys_enter/enable"), "0");
        let _ = std::fs::remove_dir(&self.instance);
    }
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = run(cmd, default_timeout()).expect(what);
    assert!(out.status.success(), "{what}: {}\n{}", out.describe_status(), out.stderr_str());
    out
}

/// Under `lopi run` the installer's injected calls (the image's `mmap`, two `mprotect`s) and
/// the runtime's are lopi's: the kernel counts exactly those beyond the native run's.
#[test]
fn lopi_run_calls_equal_what_the_kernel_counts_beyond_the_program() {
    let dir = fresh_dir("runtime-cost-run");
    let prog = build(&dir);
    let kernel = KernelCount::start(&prog.file_name().unwrap().to_string_lossy());
    let native = run_ok(Command::new(&prog).arg("full"), "the program");
    let plain = kernel.take();
    let data = dir.join("run.lopi");
    let live = run_ok(Command::new(lopi_bin()).args(["run", "-q", "--probe", "entry,exit", "--"]).arg(&prog).arg("full").env("LOPI_OUTPUT", &data), "lopi run");
    let counted = kernel.take();
    assert_eq!(live.stdout_str(), native.stdout_str(), "the program's output under lopi run");
    let own = &report_json(&data)["runtime_syscalls"];
    let lopis = added(&counted, &plain, &FUTEX.to_string());
    let reported = as_signed(&runtime_calls(own, "nr"), &FUTEX.to_string());
    eprintln!("the kernel counts {lopis:?} beyond the program's; the report {reported:?}");
    assert_eq!(reported, lopis, "the calls lopi made under lopi run, by number (report against the kernel)");
    for (nr, what, least) in [("9", "mmap", 1), ("10", "mprotect", 2)] {
        assert!(reported.get(nr).is_some_and(|&n| n >= least), "the installer's {what} calls are counted: {reported:?}");
    }
    cleanup(&dir);
}

/// `lopi attach` and its detach: the injected calls, the runtime's, and the `munmap`s that
/// take lopi's mappings out (kept in the record of the process's end) are all counted.
#[test]
fn attach_and_detach_calls_are_counted_too() {
    let dir = fresh_dir("runtime-cost-attach");
    let prog = build(&dir);
    let kernel = KernelCount::start(&prog.file_name().unwrap().to_string_lossy());
    let waiting = |data: Option<&Path>| {
        let child = Command::new(&prog).arg("wait").stdout(Stdio::piped()).spawn().expect("starting the program");
        let pid = child.id() as i32;
        std::thread::sleep(Duration::from_millis(100));
        if let Some(data) = data {
            let pid = pid.to_string();
            run_ok(Command::new(lopi_bin()).args(["attach", &pid, "--duration", "300ms", "--probe", "entry,exit"]).env("LOPI_OUTPUT", data), "lopi attach");
        }
        run_ok(Command::new("kill").args(["-USR1", &pid.to_string()]), "kill -USR1");
        let out = child.wait_with_output().expect("the program");
        assert!(out.status.success(), "the program: {:?}", out.status);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let native = waiting(None);
    let plain = kernel.take();
    let data = dir.join("attach.lopi");
    let attached = waiting(Some(&data));
    let counted = kernel.take();
    assert_eq!(attached, native, "the program's output after an attach");
    let own = &report_json(&data)["runtime_syscalls"];
    let lopis = added(&counted, &plain, &FUTEX.to_string());
    let reported = as_signed(&runtime_calls(own, "nr"), &FUTEX.to_string());
    eprintln!("the kernel counts {lopis:?} beyond the program's; the report {reported:?}");
    assert_eq!(reported, lopis, "the calls lopi made in an attached process, by number (report against the kernel)");
    assert!(reported.get("11").is_some_and(|&n| n >= 2), "the detach's munmap calls are counted: {reported:?}");
    cleanup(&dir);
}

/// With the program's own `syscall` instructions probed, `--syscalls` shows the program's
/// calls in its tables (5 getpid per process, as the source makes) and the runtime's in a
/// section of their own: the runtime's getpid, open, flock, ... are in no table of the
/// program's.
#[test]
fn the_syscalls_view_keeps_the_runtimes_calls_apart() {
    let dir = fresh_dir("runtime-cost-syscalls");
    let prog = build(&dir);
    let rewritten = rewrite(&prog, "entry,exit,syscall", &dir);
    let (native, plain) = under_strace(Command::new(&prog).arg("full"), &dir.join("native.strace"));
    let data = dir.join("syscalls.lopi");
    let (probed, counted) = under_strace(Command::new(&rewritten).arg("full").env("LOPI_OUTPUT", &data), &dir.join("probed.strace"));
    assert_eq!(probed.stdout_str(), native.stdout_str(), "the rewritten program's output");
    let report = syscall_report(&data);
    let program = by_syscall(&report["syscalls"], "calls");
    assert_eq!(program, BTreeMap::from([("getpid".to_string(), 10)]), "the program's own system calls (its only syscall instructions: 5 getpid in each of 2 processes)");
    let own = runtime_calls(&report["runtime_syscalls"], "name");
    assert!(own.get("getpid").is_some_and(|&n| n >= 1) && own.contains_key("flock") && own.contains_key("open"), "the runtime's own calls: {own:?}");
    assert_eq!(as_signed(&own, "futex"), added(&counted, &plain, "futex"), "the runtime's calls by name (report) against strace's beyond the native run");
    let text = run_ok(Command::new(lopi_bin()).args(["report", "--syscalls"]).arg(&data), "lopi report --syscalls").stdout_str();
    let (tables, runtime) = text.split_once("\nlopi's runtime: ").unwrap_or_else(|| panic!("no section of the runtime's calls in\n{text}"));
    let named = |part: &str, name: &str| part.lines().any(|l| l.split_whitespace().last() == Some(name));
    for name in ["flock", "open", "pwrite64", "readlink"] {
        assert!(!named(tables, name), "{name} in the program's tables:\n{tables}");
        assert!(named(runtime, name), "{name} not in the runtime's section:\n{runtime}");
    }
    cleanup(&dir);
}

/// Under an emulated application kernel (`LOPI_WHATIF=app-kernel`) each thread's calls are
/// made by a proxy thread the runtime starts: the proxy's own calls (its `clone`, affinity,
/// name, waits) are lopi's, the calls it makes for the program (its getpid) are the program's.
#[test]
fn an_application_kernels_forwarded_calls_stay_the_programs() {
    let dir = fresh_dir("runtime-cost-appkernel");
    let prog = build(&dir);
    let rewritten = rewrite(&prog, "entry,exit,syscall", &dir);
    let (native, plain) = under_strace(Command::new(&prog).arg("full"), &dir.join("native.strace"));
    let data = dir.join("appkernel.lopi");
    let (probed, counted) =
        under_strace(Command::new(&rewritten).arg("full").env("LOPI_OUTPUT", &data).env("LOPI_WHATIF", "app-kernel"), &dir.join("probed.strace"));
    assert_eq!(probed.stdout_str(), native.stdout_str(), "the program's output under the application kernel");
    let report = syscall_report(&data);
    assert_eq!(by_syscall(&report["syscalls"], "calls"), BTreeMap::from([("getpid".to_string(), 10)]), "the program's own calls, made by its proxies");
    let own = runtime_calls(&report["runtime_syscalls"], "name");
    assert!(own.get("clone").is_some_and(|&n| n >= 2), "a proxy for each process's thread that calls: {own:?}");
    assert_eq!(as_signed(&own, "futex"), added(&counted, &plain, "futex"), "the runtime's calls by name (report) against strace's beyond the native run");
    cleanup(&dir);
}
