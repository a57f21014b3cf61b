//! The parallelism profile `lopi run` records beside the probes: how many of the program's
//! threads are ready to run (state `R` in `/proc/PID/task/TID/stat`: running or runnable),
//! sampled every millisecond from lopi's own thread, so the program runs no code for it. It
//! is appended to the data file when the program ends (`LOPIPAR1`, see `lopi-rt-abi`).
use anyhow::{Context, Result};
use lopi_trace::Parallelism;
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_millis(1);

pub struct Sampler {
    pid: i32,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Parallelism>,
}

impl Sampler {
    pub fn start(pid: i32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // SIGTERM and SIGHUP are for lopi's main thread, whose wait they interrupt.
            let mut ending = nix::sys::signal::SigSet::empty();
            ending.add(nix::sys::signal::Signal::SIGTERM);
            ending.add(nix::sys::signal::Signal::SIGHUP);
            let _ = ending.thread_block();
            sample(pid, &flag)
        });
        Sampler { pid, stop, thread }
    }

    /// Stops sampling (the program has ended) and appends the profile to the data file.
    pub fn finish(self, data: &str) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let profile = self.thread.join().unwrap_or_default();
        if profile.samples() == 0 {
            return Ok(());
        }
        append(data, &profile.to_record(self.pid as u32))
    }
}

fn sample(pid: i32, stop: &AtomicBool) -> Parallelism {
    let mut counts: Vec<u64> = Vec::new();
    let task = format!("/proc/{pid}/task");
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Ok(entries) = std::fs::read_dir(&task) else { break };
        let ready = entries.flatten().filter(|e| is_ready(&e.path().join("stat"))).count();
        if counts.len() <= ready {
            counts.resize(ready + 1, 0);
        }
        counts[ready] += 1;
        next += INTERVAL;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Parallelism { interval_ns: INTERVAL.as_nanos() as u64, counts }
}

/// State `R`: the field after the command name, which ends at the last `)`.
fn is_ready(stat: &std::path::Path) -> bool {
    std::fs::read(stat).ok().and_then(|s| s.iter().rposition(|&b| b == b')').and_then(|at| s.get(at + 2).copied())) == Some(b'R')
}

/// Appends `record` to the data file at `path`, under the lock its writers take (another
/// process of the program may still be appending).
pub(crate) fn append(path: &str, record: &[u8]) -> Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path).with_context(|| format!("opening {path}"))?;
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).context("locking the data file")?;
    let end = file.seek(SeekFrom::End(0))?;
    file.seek(SeekFrom::Start(end.next_multiple_of(lopi_rt_abi::PAGE_SIZE)))?;
    file.write_all(record).with_context(|| format!("appending to {path}"))
}
