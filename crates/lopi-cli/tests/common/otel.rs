//! A real OpenTelemetry Collector for the OTLP tests: built from its Go modules once per
//! machine by `tests/otel/build-collector.sh` (OTLP receiver, file exporter), started on
//! 127.0.0.1 at a free port with the profiles feature gate on, and what its file exporter
//! wrote read back as OTLP JSON, one request a line. Nothing is mocked: when the collector
//! cannot be built or started, the test fails and says why.

use super::{run, workspace_root};
use serde_json::Value as Json;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The collector binary, built now if this machine has none yet.
pub fn collector_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = workspace_root().join("crates/lopi-cli/tests/otel/build-collector.sh");
        let started = Instant::now();
        let out = run(Command::new("bash").arg(&script), Duration::from_secs(1800)).expect("run build-collector.sh");
        let stderr = out.stderr_str();
        if !out.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("cannot build the OpenTelemetry Collector the OTLP tests push to ({}): {}\n{}", out.describe_status(), script.display(), tail.join("\n"));
        }
        if stderr.contains("built ") {
            eprintln!("note: built the test collector in {:.0} s", started.elapsed().as_secs_f64());
        }
        PathBuf::from(out.stdout_str().trim())
    })
    .clone()
}

/// Which pipeline the collector has: profiles (the tests' collector), or only traces (one
/// that has no profiles endpoint).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Pipeline {
    Profiles,
    TracesOnly,
}

/// A running collector, killed when dropped.
pub struct Collector {
    child: Child,
    /// Its OTLP/HTTP address, `http://127.0.0.1:PORT`.
    pub url: String,
    port: u16,
    dir: PathBuf,
    pipeline: Pipeline,
    /// Its certificate and key (PEM), when it listens for https.
    tls: Option<(PathBuf, PathBuf)>,
    /// The files it wrote into, one per start, in order.
    outputs: Vec<PathBuf>,
    log: PathBuf,
}

impl Collector {
    /// Starts a collector writing into `dir`; waits until it listens.
    pub fn start(dir: &Path, pipeline: Pipeline) -> Collector {
        Self::start_with(dir, pipeline, None)
    }

    /// Starts a collector that takes https only, with the certificate and key (PEM) `tls`.
    pub fn start_tls(dir: &Path, cert: &Path, key: &Path) -> Collector {
        Self::start_with(dir, Pipeline::Profiles, Some((cert.to_path_buf(), key.to_path_buf())))
    }

    fn start_with(dir: &Path, pipeline: Pipeline, tls: Option<(PathBuf, PathBuf)>) -> Collector {
        let mut last_log = String::new();
        let scheme = if tls.is_some() { "https" } else { "http" };
        // Another process may take the free port before the collector does: a few tries.
        for attempt in 0..3 {
            let port = free_port();
            let (child, output, log) = spawn(dir, port, pipeline, tls.as_ref(), &attempt.to_string());
            let url = format!("{scheme}://127.0.0.1:{port}");
            let mut collector = Collector { child, url, port, dir: dir.to_path_buf(), pipeline, tls: tls.clone(), outputs: vec![output], log };
            if collector.wait_listening(port) {
                return collector;
            }
            last_log = collector.log_text();
        }
        panic!("the collector did not start listening; its last log:\n{last_log}");
    }

    /// Stops the collector (its address then refuses connections).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again at the same address, writing into a new file.
    pub fn restart(&mut self) {
        self.stop();
        let (child, output, log) = spawn(&self.dir, self.port, self.pipeline, self.tls.as_ref(), &format!("restart-{}", self.outputs.len()));
        self.child = child;
        self.outputs.push(output);
        self.log = log;
        assert!(self.wait_listening(self.port), "the collector did not start again at port {}; its log:\n{}", self.port, self.log_text());
    }

    fn wait_listening(&mut self, port: u16) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The requests the collector wrote (OTLP JSON), in every start's file, once there are at
    /// least `n`: waits up to 30 s for them.
    pub fn received(&self, n: usize) -> Vec<Json> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text: String = self.outputs.iter().map(|o| std::fs::read_to_string(o).unwrap_or_default()).collect();
            // A line is whole once its newline is written.
            let lines: Vec<&str> = text.split_inclusive('\n').filter(|l| l.ends_with('\n') && !l.trim().is_empty()).collect();
            if lines.len() >= n {
                return lines.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("the collector wrote a line that is not JSON ({e}): {l}"))).collect();
            }
            if Instant::now() > deadline {
                panic!("the collector wrote {} requests of the {n} expected in 30 s; its log:\n{}", lines.len(), self.log_text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A collector process listening at `port`, writing into `dir` (files named by `tag`): the
/// process, its output file and its log.
fn spawn(dir: &Path, port: u16, pipeline: Pipeline, tls: Option<&(PathBuf, PathBuf)>, tag: &str) -> (Child, PathBuf, PathBuf) {
    let bin = collector_bin();
    let output = dir.join(format!("received-{tag}.jsonl"));
    let log = dir.join(format!("collector-{tag}.log"));
    let config = dir.join(format!("collector-{tag}.yaml"));
    std::fs::write(&config, config_text(port, &output, pipeline, tls)).expect("write the collector's config");
    let log_file = std::fs::File::create(&log).expect("create the collector's log");
    let child = Command::new(&bin)
        .arg(format!("--config=file:{}", config.display()))
        .arg("--feature-gates=service.profilesSupport")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the collector {}: {e}", bin.display()));
    (child, output, log)
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a free port on 127.0.0.1");
    listener.local_addr().expect("its address").port()
}

fn config_text(port: u16, output: &Path, pipeline: Pipeline, tls: Option<&(PathBuf, PathBuf)>) -> String {
    let signal = match pipeline {
        Pipeline::Profiles => "profiles",
        Pipeline::TracesOnly => "traces",
    };
    let tls = match tls {
        Some((cert, key)) => format!("\n        tls:\n          cert_file: {}\n          key_file: {}", cert.display(), key.display()),
        None => String::new(),
    };
    format!(
        "receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}{tls}
exporters:
  file:
    path: {}
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    {signal}:
      receivers: [otlp]
      exporters: [file]
",
        output.display()
    )
}
