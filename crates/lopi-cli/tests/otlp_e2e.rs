//! `lopi push` and `lopi export --format otlp` against a real OpenTelemetry Collector (built
//! from its Go modules by tests/otel/build-collector.sh, OTLP receiver and file exporter):
//! a C program recorded with `lopi run --probe entry,exit` (and once with locks and system
//! calls) is pushed, and what the collector wrote must give every function the calls `lopi
//! report --format json` gives on the same data file, under the resource attributes asked for.
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Two workers and main call `add` (a mutex) with values from `fib` (recursive) and `leaf`;
/// main writes nothing twenty times (a system call each).
const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long total;
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long fib(int n) { return n < 2 ? leaf(n) : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void add(long v) { pthread_mutex_lock(&lock); total += v; pthread_mutex_unlock(&lock); }
static void *worker(void *arg) { for (int i = 0; i < 50; i++) add(fib(10)); return arg; }
int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, 0);
    for (int i = 0; i < 20; i++) { add(leaf(i)); write(1, "", 0); }
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    printf("%ld\n", total);
    return 0;
}
"#;

struct Recorded {
    dir: PathBuf,
    prog: PathBuf,
    data: PathBuf,
}

/// The program recorded by `lopi run --probe PROBES`.
fn record(label: &str, probes: &str) -> Recorded {
    let dir = fresh_dir(&format!("otlp-{label}"));
    let prog = build_c(&dir, "otlp_prog", PROGRAM, &["-O2", "-g", "-pthread"]);
    let data = dir.join("run.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", probes, "--"]).arg(&prog).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
    assert!(out.status.success(), "lopi run --probe {probes}: {}\n{}", out.describe_status(), out.stderr_str());
    assert_eq!(out.stdout_str().trim(), "25990", "the program's output");
    Recorded { dir, prog, data }
}

fn lopi(args: &[&str]) -> Output {
    run(Command::new(lopi_bin()).args(args), default_timeout()).expect("run lopi")
}

/// `lopi report --format json`: calls per (module, function), those that were called.
fn report_calls(data: &Path) -> BTreeMap<(String, String), i64> {
    let out = lopi(&["report", "--format", "json", "--top", "0", &data.display().to_string()]);
    assert!(out.status.success(), "lopi report: {}", out.stderr_str());
    let entries = parse_report(&out.stdout_str()).expect("report JSON");
    let mut calls = BTreeMap::new();
    for e in entries.into_iter().filter(|e| e.calls > 0) {
        *calls.entry((e.module, e.name)).or_default() += e.calls as i64;
    }
    calls
}

/// A number of OTLP JSON: int64s are strings there.
fn int(v: &Json) -> i64 {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or(0)
}

/// What one request the collector wrote says, its dictionary's references resolved.
#[derive(Debug, Default)]
struct Resource {
    attributes: BTreeMap<String, String>,
    /// Per profile ("calls/count"), the values summed per leaf frame: (module, function),
    /// module "" for a frame of none (a system call, a lock).
    profiles: BTreeMap<String, BTreeMap<(String, String), i64>>,
}

fn resources(request: &Json) -> Vec<Resource> {
    let d = &request["dictionary"];
    let table = |name: &str, i: &Json| d[name].get(int(i) as usize).cloned().unwrap_or(Json::Null);
    let string = |i: &Json| table("stringTable", i).as_str().unwrap_or("").to_string();
    // A key or value is given as text or by string index.
    let key = |a: &Json| a.get("key").and_then(Json::as_str).map_or_else(|| string(&a["keyStrindex"]), str::to_string);
    let value = |v: &Json| match (v.get("stringValue"), v.get("stringValueStrindex"), v.get("intValue")) {
        (Some(s), _, _) => s.as_str().unwrap_or("").to_string(),
        (_, Some(i), _) => string(i),
        (_, _, Some(n)) => int(n).to_string(),
        _ => panic!("an attribute value lopi does not write: {v}"),
    };
    let leaf = |stack: &Json| {
        let location = table("locationTable", &table("stackTable", stack)["locationIndices"][0]);
        let function = table("functionTable", &location["lines"][0]["functionIndex"]);
        let mapping = table("mappingTable", &location["mappingIndex"]);
        (string(&mapping["filenameStrindex"]), string(&function["nameStrindex"]))
    };
    let mut out = Vec::new();
    for r in request["resourceProfiles"].as_array().expect("resourceProfiles") {
        let mut resource = Resource::default();
        for a in r["resource"]["attributes"].as_array().into_iter().flatten() {
            resource.attributes.insert(key(a), value(&a["value"]));
        }
        for p in r["scopeProfiles"].as_array().into_iter().flatten().flat_map(|s| s["profiles"].as_array().into_iter().flatten()) {
            let kind = format!("{}/{}", string(&p["sampleType"]["typeStrindex"]), string(&p["sampleType"]["unitStrindex"]));
            let sums = resource.profiles.entry(kind).or_default();
            for s in p["samples"].as_array().into_iter().flatten() {
                let values: i64 = s["values"].as_array().into_iter().flatten().map(int).sum();
                *sums.entry(leaf(&s["stackIndex"])).or_default() += values;
            }
        }
        out.push(resource);
    }
    out
}

/// Calls per (module, function) of the frames that are the program's functions, over every
/// process.
fn calls_of(resources: &[Resource]) -> BTreeMap<(String, String), i64> {
    let mut calls = BTreeMap::new();
    for r in resources {
        for (frame, n) in r.profiles.get("calls/count").into_iter().flatten() {
            if !frame.0.is_empty() {
                *calls.entry(frame.clone()).or_default() += n;
            }
        }
    }
    calls
}

fn readelf_build_id(prog: &Path) -> String {
    let out = run(Command::new(require("readelf", "binutils")).arg("-n").arg(prog), default_timeout()).expect("readelf");
    let text = out.stdout_str();
    let line = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).unwrap_or_else(|| panic!("no build-id in readelf -n:\n{text}"));
    line.trim().to_string()
}

#[test]
fn pushed_calls_equal_the_report() {
    let r = record("push", "entry,exit");
    let collector = Collector::start(&r.dir, Pipeline::Profiles);
    let data = r.data.display().to_string();
    let out = lopi(&["push", &data, &collector.url, "--service", "otlp-e2e", "--label", "env=test", "--label", "team=perf"]);
    assert!(out.status.success(), "lopi push: {}\n{}\ncollector log:\n{}", out.describe_status(), out.stderr_str(), collector.log_text());
    assert!(out.stderr_str().contains("lopi: pushed "), "{}", out.stderr_str());

    let received = resources(&collector.received(1)[0]);
    assert_eq!(received.len(), 1, "one process, one resource");
    let expected = report_calls(&r.data);
    assert!(expected.len() >= 5, "the report has the program's functions: {expected:?}");
    assert_eq!(calls_of(&received), expected, "calls per function: the collector's (left), lopi report's (right)");

    let attributes = &received[0].attributes;
    let prog = r.prog.display().to_string();
    for (key, value) in [
        ("service.name", "otlp-e2e"),
        ("env", "test"),
        ("team", "perf"),
        ("process.executable.name", "otlp_prog"),
        ("process.executable.path", prog.as_str()),
        ("process.executable.build_id.gnu", readelf_build_id(&r.prog).as_str()),
    ] {
        assert_eq!(attributes.get(key).map(String::as_str), Some(value), "resource attribute {key} in {attributes:?}");
    }
    assert!(attributes.get("process.pid").is_some_and(|p| p.parse::<u32>().is_ok()), "{attributes:?}");
    assert!(attributes.contains_key("host.name"), "{attributes:?}");
    let kinds: Vec<&String> = received[0].profiles.keys().collect();
    assert_eq!(kinds, ["calls/count", "wall/nanoseconds"]);
    cleanup(&r.dir);
}

#[test]
fn locks_and_system_calls_reach_the_collector() {
    let r = record("locks", "entry,exit,locks,syscall");
    let collector = Collector::start(&r.dir, Pipeline::Profiles);
    let out = lopi(&["push", &r.data.display().to_string(), &collector.url]);
    assert!(out.status.success(), "lopi push: {}\n{}", out.describe_status(), out.stderr_str());
    let received = resources(&collector.received(1)[0]);
    assert_eq!(calls_of(&received), report_calls(&r.data), "calls per function: the collector's (left), lopi report's (right)");
    let profiles = &received[0].profiles;
    assert_eq!(received[0].attributes.get("service.name").map(String::as_str), Some("otlp_prog"), "the executable's name by default");

    // Every mutex_lock acquires: 2 workers × 50 and main's 20.
    let acquisitions: i64 = profiles["acquisitions/count"].iter().filter(|(f, _)| f.1 == "pthread_mutex_lock(lock)").map(|(_, n)| n).sum();
    assert_eq!(acquisitions, 120, "{:?}", profiles["acquisitions/count"]);
    assert!(profiles.contains_key("hold/nanoseconds"), "{:?}", profiles.keys());

    // The system calls' counts are lopi report --syscalls'.
    let report = by_syscall(&syscall_report(&r.data)["syscalls"], "calls");
    let pushed: BTreeMap<String, u64> =
        profiles["syscalls/count"].iter().map(|((_, name), n)| (name.strip_prefix("[syscall] ").unwrap_or(name).to_string(), *n as u64)).collect();
    assert_eq!(pushed, report, "system calls: the collector's (left), lopi report --syscalls' (right)");
    assert_eq!(pushed.get("write"), Some(&21), "20 empty writes and printf's");
    // Each has its time but exit and exit_group, which do not return, and those made only
    // before the probes went live (counted through ptrace).
    let startup_only: Vec<String> = syscall_report(&r.data)["syscalls"].as_array().unwrap().iter().filter(|s| s["calls"] == s["startup"]).map(|s| s["name"].as_str().unwrap().to_string()).collect();
    let timed: Vec<&str> = profiles["syscall_time/nanoseconds"].keys().map(|(_, name)| name.strip_prefix("[syscall] ").unwrap_or(name)).collect();
    let returning: Vec<&str> = pushed.keys().map(String::as_str).filter(|n| !n.starts_with("exit") && !startup_only.iter().any(|s| s == n)).collect();
    assert_eq!(timed, returning, "system calls with a time: {:?}", profiles["syscall_time/nanoseconds"]);
    cleanup(&r.dir);
}

/// The file `lopi export --format otlp` writes decodes, and the collector takes it as it
/// takes a push.
#[test]
fn the_exported_file_is_a_request_the_collector_takes() {
    let r = record("export", "entry,exit");
    let file = r.dir.join("run.otlp");
    let out = lopi(&["export", &r.data.display().to_string(), "--format", "otlp", "-o", &file.display().to_string(), "--label", "env=file"]);
    assert!(out.status.success(), "lopi export: {}", out.stderr_str());
    let bytes = std::fs::read(&file).expect("the exported file");
    let request = <lopi_trace::otlp::proto::ExportProfilesServiceRequest as prost::Message>::decode(bytes.as_slice()).expect("an ExportProfilesServiceRequest");
    assert_eq!(request.resource_profiles.len(), 1);

    let collector = Collector::start(&r.dir, Pipeline::Profiles);
    let endpoint = format!("{}/v1development/profiles", collector.url);
    let response = ureq::post(&endpoint).header("Content-Type", "application/x-protobuf").send(&bytes[..]);
    assert!(response.is_ok_and(|r| r.status() == 200), "the collector refused the exported file; its log:\n{}", collector.log_text());
    let received = resources(&collector.received(1)[0]);
    assert_eq!(calls_of(&received), report_calls(&r.data));
    assert_eq!(received[0].attributes.get("env").map(String::as_str), Some("file"));
    cleanup(&r.dir);
}

/// With nothing listening, a push fails after its retries, quickly, and says so; a
/// collector without a profiles pipeline refuses, and the message says what it lacks.
#[test]
fn a_push_nobody_takes_is_an_error_that_says_why() {
    let r = record("refused", "entry,exit");
    let data = r.data.display().to_string();
    let nobody = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a free port");
        format!("http://127.0.0.1:{}", listener.local_addr().expect("address").port())
    };
    let started = Instant::now();
    let out = lopi(&["push", &data, &nobody]);
    let message = out.stderr_str();
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(message.contains("no OTLP collector took the profiles") && message.contains("4 tries") && message.contains("connection refused"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(20), "retries took {:?}", started.elapsed());

    let traces_only = Collector::start(&r.dir, Pipeline::TracesOnly);
    let out = lopi(&["push", &data, &traces_only.url]);
    let message = out.stderr_str();
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(message.contains("refused the profiles: HTTP 404") && message.contains("service.profilesSupport"), "{message}");
    cleanup(&r.dir);
}

/// A server answering one client's requests, a line each, until `quit`: `handle` hashes the
/// request (`hash`) and writes the answer; it prints how many it served.
const SERVER: &str = r#"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((noinline)) unsigned long hash(const char *s, size_t n) {
    unsigned long h = 1469598103934665603ul;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ul;
    return h;
}
__attribute__((noinline)) int handle(int fd, const char *line) {
    char out[32];
    int k = snprintf(out, sizeof out, "%lu\n", hash(line, strlen(line)));
    return write(fd, out, k) == k;
}
int main(int argc, char **argv) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1)) { perror("listen"); return 1; }
    int c = accept(s, 0, 0);
    FILE *in = fdopen(c, "r");
    char line[256];
    long served = 0;
    while (fgets(line, sizeof line, in) && strncmp(line, "quit", 4)) {
        if (!handle(c, line)) break;
        served++;
    }
    printf("served %ld\n", served);
    return 0;
}
"#;

/// Sends requests to the server at `port` for `load`, a line each, reading each answer, then
/// `quit`: how many were answered.
fn load_client(port: u16, load: Duration) -> u64 {
    use std::io::{BufRead, BufReader, Write};
    let deadline = Instant::now() + Duration::from_secs(30);
    let stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("the server never listened at {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let mut writer = stream.try_clone().expect("socket");
    let mut reader = BufReader::new(stream);
    let (started, mut answered, mut answer) = (Instant::now(), 0u64, String::new());
    while started.elapsed() < load {
        writeln!(writer, "request {answered}").expect("send a request");
        answer.clear();
        reader.read_line(&mut answer).expect("read an answer");
        assert!(answer.trim().parse::<u64>().is_ok(), "answer {answer:?}");
        answered += 1;
        // A server under a steady load, not a busy loop: about 2,000 requests a second.
        if answered % 20 == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    writeln!(writer, "quit").expect("send quit");
    answered
}

/// `lopi run --push --every 5s` of a server under a client's load for a minute, with the
/// collector stopped for 15 s in the middle: the windows made while it was away wait and go
/// once it is back, and every window reaches it; their calls add up to the final data file's
/// (lopi report's), and `handle`'s to the requests the client had answered.
#[test]
fn a_minute_of_windows_adds_up_with_the_collector_away() {
    let dir = fresh_dir("otlp-windows");
    let server = build_c(&dir, "server", SERVER, &["-O2", "-g"]);
    let data = dir.join("server.lopi");
    let mut collector = Collector::start(&dir, Pipeline::Profiles);
    let port = std::net::TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).expect("a free port").port();
    let lopi_run = Command::new(lopi_bin())
        .args(["run", "--probe", "entry,exit", "--push", &collector.url, "--every", "5s", "--service", "windows-e2e", "--label", "env=test", "--"])
        .arg(&server)
        .arg(port.to_string())
        .env("LOPI_OUTPUT", &data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lopi run");
    let client = std::thread::spawn(move || load_client(port, Duration::from_secs(60)));
    std::thread::sleep(Duration::from_secs(20));
    collector.stop();
    std::thread::sleep(Duration::from_secs(15));
    collector.restart();
    let answered = client.join().expect("the load client");
    let out = lopi_run.wait_with_output().expect("lopi run");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "lopi run: {:?}\n{stderr}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("served {answered}"), "{stderr}");
    assert!(stderr.contains("is away") && stderr.contains("the collector is back"), "{stderr}");

    let windows: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("lopi: pushed ")?.split(" of ").next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `pushed N of M windows` line:\n{stderr}"));
    assert!(stderr.contains(&format!("pushed {windows} of {windows} windows")), "every window delivered:\n{stderr}");
    assert!((12..=13).contains(&windows), "a window every 5 s of a minute, and the last: {windows}\n{stderr}");
    let requests = collector.received(windows as usize);
    assert_eq!(requests.len() as u64, windows, "the collector got each window once");

    let mut summed: BTreeMap<(String, String), i64> = BTreeMap::new();
    for request in &requests {
        let resources = resources(request);
        for r in &resources {
            assert_eq!(r.attributes.get("service.name").map(String::as_str), Some("windows-e2e"));
            assert_eq!(r.attributes.get("env").map(String::as_str), Some("test"));
        }
        for (frame, calls) in calls_of(&resources) {
            *summed.entry(frame).or_default() += calls;
        }
    }
    let expected = report_calls(&data);
    assert_eq!(summed, expected, "calls per function: the windows' sums (left), lopi report's (right)");
    let handled = expected.iter().find(|((_, f), _)| f == "handle").map(|(_, &n)| n);
    assert_eq!(handled, Some(answered as i64), "handle ran once per request answered");
    assert!(!dir.join("server.lopi.queue").exists(), "the emptied queue is removed");
    cleanup(&dir);
}

/// Calls `work` (which calls `leaf` a thousand times) every millisecond for argv[1] seconds.
const BUSY: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long work(int n) { long s = 0; for (int i = 0; i < n; i++) s += leaf(i); return s; }
int main(int argc, char **argv) {
    long total = 0;
    time_t end = time(0) + atoi(argv[1]);
    while (time(0) < end) { total += work(1000); usleep(1000); }
    printf("%ld\n", total);
    return 0;
}
"#;

/// `lopi agent --match` with two matching processes running and a third started after it
/// (and one that does not match): it attaches to the three, pushes each one's windows (the
/// third's last when it exits, the others' when the agent is stopped), and each process's
/// windows add up to its data file's calls (kept with --keep).
#[test]
fn the_agent_pushes_every_matching_process() {
    let dir = fresh_dir("otlp-agent");
    let busy = build_c(&dir, "agent_busy", BUSY, &["-O2", "-g"]);
    let other = dir.join("other_busy");
    std::fs::copy(&busy, &other).expect("copy");
    let collector = Collector::start(&dir, Pipeline::Profiles);
    let start = |prog: &Path, secs: &str| Command::new(prog).arg(secs).stdout(std::process::Stdio::null()).spawn().expect("start a process");
    let mut early = [start(&busy, "12"), start(&busy, "12")];
    let mut unmatched = start(&other, "6");
    let data_dir = dir.join("agent-data");
    let pattern = format!("^{}$", busy.display());
    let agent = Command::new(lopi_bin())
        .args(["agent", "--match", &pattern, "--push", &collector.url, "--every", "1s", "--poll", "200ms", "--keep", "--probe", "entry,exit", "--label", "role=agent-e2e", "--dir"])
        .arg(&data_dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lopi agent");
    std::thread::sleep(Duration::from_secs(2));
    let mut late = start(&busy, "3");
    assert!(late.wait().expect("the late process").success());
    std::thread::sleep(Duration::from_secs(1));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.id() as i32), nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the agent");
    let out = agent.wait_with_output().expect("lopi agent");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "lopi agent: {:?}\n{stderr}", out.status);
    for p in early.iter_mut().chain([&mut unmatched]) {
        assert!(p.wait().expect("a process").success(), "a process the agent let go of ended well:\n{stderr}");
    }

    let pids: Vec<u32> = early.iter().chain([&late]).map(|c| c.id()).collect();
    assert!(stderr.contains("attached to 3 processes") && stderr.contains("its own CPU use"), "{stderr}");
    assert!(stderr.contains(&format!("{} ({}) exited; pushed", pids[2], busy.display())), "the late one's exit:\n{stderr}");
    assert!(!stderr.contains(&format!("{}", unmatched.id())), "the unmatched process is left alone:\n{stderr}");
    let windows: usize = stderr.lines().filter_map(|l| l.split("; pushed ").nth(1)?.split(" of ").next()?.parse::<usize>().ok()).sum();
    let requests = collector.received(windows);
    for pid in pids {
        let mut summed: BTreeMap<(String, String), i64> = BTreeMap::new();
        for request in &requests {
            let of_pid: Vec<Resource> = resources(request).into_iter().filter(|r| r.attributes.get("process.pid") == Some(&pid.to_string())).collect();
            for r in &of_pid {
                assert_eq!(r.attributes.get("role").map(String::as_str), Some("agent-e2e"));
            }
            for (frame, calls) in calls_of(&of_pid) {
                *summed.entry(frame).or_default() += calls;
            }
        }
        let data = data_dir.join(format!("agent_busy.{pid}.lopi"));
        let expected = report_calls(&data);
        assert!(expected.keys().any(|(_, f)| f == "work"), "process {pid} was recorded: {expected:?}");
        assert_eq!(summed, expected, "process {pid}: calls per function, its windows' sums (left), lopi report's (right)");
    }
    cleanup(&dir);
}

/// Basic-block counts reach the collector as a profile of their own: per function, the
/// executions of its blocks are `lopi report --blocks`'.
#[test]
fn block_counts_reach_the_collector() {
    let r = record("blocks", "block");
    let collector = Collector::start(&r.dir, Pipeline::Profiles);
    let out = lopi(&["push", &r.data.display().to_string(), &collector.url]);
    assert!(out.status.success(), "lopi push: {}\n{}", out.describe_status(), out.stderr_str());
    let received = resources(&collector.received(1)[0]);
    let blocks = &received[0].profiles["block_executions/count"];
    for function in ["fib", "leaf", "add", "worker"] {
        let report = lopi(&["report", "--blocks", function, "--format", "json", &r.data.display().to_string()]);
        assert!(report.status.success(), "lopi report --blocks {function}: {}", report.stderr_str());
        let json: Json = serde_json::from_str(&report.stdout_str()).expect("report JSON");
        let expected: i64 = json.as_array().into_iter().flatten().flat_map(|m| m["blocks"].as_array().into_iter().flatten()).map(|b| b["count"].as_i64().unwrap_or(0)).sum();
        let pushed: i64 = blocks.iter().filter(|((_, f), _)| f == function).map(|(_, n)| n).sum();
        assert!(expected > 0, "{function}'s blocks ran");
        assert_eq!(pushed, expected, "{function}: block executions pushed (left), lopi report --blocks' (right)");
    }
    cleanup(&r.dir);
}

/// A collector that takes https only, with a certificate of its own: `lopi push` reaches it
/// with `--cacert`, and without refuses to trust it, saying so.
#[test]
fn a_push_over_https_with_the_collectors_own_certificate() {
    let r = record("https", "entry,exit");
    // A certificate authority of the test's, and the collector's certificate it signed.
    let (ca, ca_key, cert, key, csr) = ["ca.crt", "ca.key", "collector.crt", "collector.key", "collector.csr"].map(|f| r.dir.join(f).display().to_string()).into();
    let san = r.dir.join("san.ext");
    std::fs::write(&san, "subjectAltName=IP:127.0.0.1\n").expect("write san.ext");
    let openssl = require("openssl", "openssl");
    let steps: [Vec<&str>; 3] = [
        vec!["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=lopi test CA", "-keyout", &ca_key, "-out", &ca],
        vec!["req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", &key, "-out", &csr],
        vec!["x509", "-req", "-in", &csr, "-CA", &ca, "-CAkey", &ca_key, "-CAcreateserial", "-days", "2", "-out", &cert, "-extfile", san.to_str().unwrap()],
    ];
    for step in steps {
        let made = run(Command::new(&openssl).args(&step).current_dir(&r.dir), default_timeout()).expect("openssl");
        assert!(made.status.success(), "openssl {step:?}: {}", made.stderr_str());
    }
    let (cert, key) = (PathBuf::from(cert), PathBuf::from(key));
    let collector = Collector::start_tls(&r.dir, &cert, &key);
    let data = r.data.display().to_string();
    let untrusted = lopi(&["push", &data, &collector.url]);
    let refusal = untrusted.stderr_str();
    assert_eq!(untrusted.status.code(), Some(1), "a certificate no public root vouches for: {refusal}");
    assert!(refusal.contains("certificate") && refusal.contains("--cacert") && !refusal.contains("tries"), "refused at once, saying why: {refusal}");
    let out = lopi(&["push", &data, &collector.url, "--cacert", &ca, "--header", "X-Scope-OrgID: tenant-1"]);
    assert!(out.status.success(), "lopi push over https: {}\n{}\ncollector log:\n{}", out.describe_status(), out.stderr_str(), collector.log_text());
    assert_eq!(calls_of(&resources(&collector.received(1)[0])), report_calls(&r.data));
    cleanup(&r.dir);
}

/// `--header` goes with every request: what a plain HTTP server received.
#[test]
fn headers_go_with_the_push() {
    use std::io::{BufRead, BufReader, Read, Write};
    let r = record("headers", "entry");
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a free port");
    let url = format!("http://127.0.0.1:{}", listener.local_addr().expect("address").port());
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("lopi's connection");
        let mut reader = BufReader::new(stream.try_clone().expect("socket"));
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("a header line");
            if line.trim().is_empty() {
                break;
            }
            head.push(line.trim().to_string());
        }
        let length: usize = head.iter().find_map(|h| h.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))).unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("the body");
        (&stream).write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").expect("answer");
        (head, body)
    });
    let out = lopi(&["push", &r.data.display().to_string(), &url, "--header", "Authorization: Basic dXNlcjpwYXNz", "--header", "X-Scope-OrgID:tenant-1"]);
    assert!(out.status.success(), "lopi push: {}", out.stderr_str());
    let (head, body) = server.join().expect("the server");
    assert_eq!(head[0], "POST /v1development/profiles HTTP/1.1");
    for expected in ["authorization: Basic dXNlcjpwYXNz", "x-scope-orgid: tenant-1", "content-type: application/x-protobuf"] {
        assert!(head.iter().any(|h| h.eq_ignore_ascii_case(expected)), "no {expected:?} in {head:?}");
    }
    assert!(<lopi_trace::otlp::proto::ExportProfilesServiceRequest as prost::Message>::decode(body.as_slice()).is_ok(), "the body is the request");
    cleanup(&r.dir);
}

/// `lopi attach PID --push --every 1s --duration`: a running process's windows, the last when
/// lopi detaches, add up to the data file's calls.
#[test]
fn an_attached_process_is_pushed_until_lopi_detaches() {
    let dir = fresh_dir("otlp-attach");
    let busy = build_c(&dir, "attach_busy", BUSY, &["-O2", "-g"]);
    let collector = Collector::start(&dir, Pipeline::Profiles);
    let mut process = Command::new(&busy).arg("8").stdout(std::process::Stdio::null()).spawn().expect("start the process");
    std::thread::sleep(Duration::from_millis(300));
    let data = dir.join("attached.lopi");
    let out = run(
        Command::new(lopi_bin())
            .args(["attach", &process.id().to_string(), "--probe", "entry,exit", "--push", &collector.url, "--every", "1s", "--duration", "3s", "--label", "how=attach"])
            .env("LOPI_OUTPUT", &data),
        default_timeout(),
    )
    .expect("lopi attach");
    let stderr = out.stderr_str();
    assert!(out.status.success(), "lopi attach: {}\n{stderr}", out.describe_status());
    assert!(process.wait().expect("the process").success(), "the process ran on after lopi detached");
    let windows: usize = stderr.lines().find_map(|l| l.strip_prefix("lopi: pushed ")?.split(" of ").next()?.parse().ok()).unwrap_or_else(|| panic!("{stderr}"));
    assert!((3..=5).contains(&windows), "a window a second for 3 s, and the last: {windows}\n{stderr}");
    let mut summed: BTreeMap<(String, String), i64> = BTreeMap::new();
    for request in collector.received(windows) {
        let resources = resources(&request);
        assert!(resources.iter().all(|r| r.attributes.get("how").map(String::as_str) == Some("attach")));
        for (frame, calls) in calls_of(&resources) {
            *summed.entry(frame).or_default() += calls;
        }
    }
    let expected = report_calls(&data);
    assert!(expected.keys().any(|(_, f)| f == "work"), "{expected:?}");
    assert_eq!(summed, expected, "calls per function: the windows' sums (left), lopi report's (right)");
    cleanup(&dir);
}

/// A server that forks its workers after starting (as prefork servers do): after 1 s, two
/// forks run `work` as the parent does, for argv[1] seconds each.
const FORKING: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long work(int n) { long s = 0; for (int i = 0; i < n; i++) s += leaf(i); return s; }
static long loop(int secs) { long total = 0; time_t end = time(0) + secs; while (time(0) < end) { total += work(1000); usleep(1000); } return total; }
int main(int argc, char **argv) {
    int secs = atoi(argv[1]);
    sleep(1);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) if ((kids[i] = fork()) == 0) return loop(secs) > 0 ? 0 : 1;
    long total = loop(secs);
    int status, bad = 0;
    for (int i = 0; i < 2; i++) bad += waitpid(kids[i], &status, 0) != kids[i] || status != 0;
    printf("%ld %d\n", total, bad);
    return bad;
}
"#;

/// `lopi agent` attached to a server that then forks its workers: the forks carry the
/// server's probes and record into its data file, so the agent takes them as its own rather
/// than attaching to them, pushes their calls with the server's windows, and takes the probes
/// out of every one of them when it stops.
#[test]
fn the_agent_takes_a_servers_forks_as_its_own() {
    let dir = fresh_dir("otlp-agent-forks");
    let server = build_c(&dir, "forking", FORKING, &["-O2", "-g"]);
    let collector = Collector::start(&dir, Pipeline::Profiles);
    let mut process = Command::new(&server).arg("4").stdout(std::process::Stdio::piped()).spawn().expect("start the server");
    let data_dir = dir.join("agent-data");
    let agent = Command::new(lopi_bin())
        .args(["agent", "--match", &format!("^{}$", server.display()), "--push", &collector.url, "--every", "1s", "--poll", "200ms", "--keep", "--probe", "entry,exit", "--dir"])
        .arg(&data_dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lopi agent");
    // The forks start after 1 s; the agent stops while they run.
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.id() as i32), nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the agent");
    let out = agent.wait_with_output().expect("lopi agent");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "lopi agent: {:?}\n{stderr}", out.status);
    let status = process.wait().expect("the server");
    let mut printed = String::new();
    std::io::Read::read_to_string(process.stdout.as_mut().expect("stdout"), &mut printed).expect("the server's output");
    assert!(status.success() && printed.trim().ends_with(" 0"), "the server and its forks ran on and ended well: {status:?} {printed:?}\n{stderr}");
    let pid = process.id();
    assert_eq!(stderr.matches(&format!("is a fork of {pid}, with its probes")).count(), 2, "{stderr}");
    assert!(stderr.contains("attached to 1 processes") && !stderr.contains("not attaching"), "{stderr}");
    assert!(!stderr.contains("lopi agent: detaching from"), "the probes came out of every fork: {stderr}");
    let windows: usize = stderr.lines().filter_map(|l| l.split("; pushed ").nth(1)?.split(" of ").next()?.parse::<usize>().ok()).sum();
    let mut summed: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut pids = std::collections::BTreeSet::new();
    for request in collector.received(windows) {
        let resources = resources(&request);
        pids.extend(resources.iter().filter_map(|r| r.attributes.get("process.pid").cloned()));
        for (frame, calls) in calls_of(&resources) {
            *summed.entry(frame).or_default() += calls;
        }
    }
    assert_eq!(pids.len(), 3, "the server and its two forks pushed: {pids:?}");
    assert_eq!(summed, report_calls(&data_dir.join(format!("forking.{pid}.lopi"))), "calls per function: the windows' sums (left), lopi report's (right)");
    cleanup(&dir);
}
