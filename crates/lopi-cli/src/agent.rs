//! `lopi agent --push URL --match REGEX`: one lopi per host. It reads `/proc` every `--poll`
//! for processes whose executable's path matches, attaches to each (the probes of `lopi
//! attach`), pushes each one's windows as `lopi attach --push` does, and when a process exits
//! sends its last window. On Ctrl-C, SIGTERM or SIGHUP it takes every probe out of the
//! processes still running, sends their last windows and says how much CPU it used itself.
//!
//! Polling, not the kernel's process-events connector: that needs a netlink socket bound with
//! `CAP_NET_ADMIN` and still leaves the exec-to-attach race; a process that lives for less
//! than a poll is not seen.
use crate::continuous::{Continuous, PushArgs};
use crate::forks;
use crate::live::{self, Attached, Probes};
use anyhow::{bail, Context, Result};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use regex::RegexSet;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the agent says what it does and what it costs.
const STATUS_EVERY: Duration = Duration::from_secs(600);

/// What `lopi agent` takes besides the probes and `--push`.
pub(crate) struct Request {
    pub(crate) matches: Vec<String>,
    pub(crate) poll: Duration,
    pub(crate) dir: PathBuf,
    pub(crate) keep: bool,
}

/// A process the agent attached to, and its forks that carry its probes (a server's workers:
/// their records go to its data file, as the probes they inherited write them).
struct Watched {
    attached: Attached,
    pushing: Option<Continuous>,
    exe: String,
    forks: BTreeSet<i32>,
}

impl Watched {
    /// Records the ends of forks that exited; true once the process and all its forks have.
    fn ended(&mut self) -> bool {
        let attached = &self.attached;
        self.forks.retain(|&pid| !attached.exited_pid(pid));
        self.forks.is_empty() && self.attached.exited()
    }
}

/// A process, across pid reuse: its pid and start time (`/proc/PID/stat`'s field 22).
type ProcessId = (i32, u64);

pub(crate) fn run(mut probes: Probes, push: &PushArgs, request: Request) -> Result<()> {
    let Some(url) = &push.push else { bail!("lopi agent pushes what it records: give --push URL (an OpenTelemetry Collector, http://127.0.0.1:4318)") };
    let patterns = RegexSet::new(&request.matches).context("--match")?;
    std::fs::create_dir_all(&request.dir).with_context(|| format!("making {}", request.dir.display()))?;
    let dir = crate::files::absolute(&request.dir);
    let mut mask = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        mask.add(s);
    }
    mask.thread_block().context("blocking signals")?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).context("signalfd")?;
    eprintln!("lopi agent: watching executables matching {}; pushing to {url}; data in {}", request.matches.join(", "), dir.display());

    let started = Instant::now();
    let mut watched: BTreeMap<i32, Watched> = BTreeMap::new();
    let mut passed: HashSet<ProcessId> = HashSet::new();
    let mut attached_in_all = 0usize;
    let mut next_status = started + STATUS_EVERY;
    loop {
        if matches!(signals.read_signal(), Ok(Some(_))) {
            break;
        }
        adopt_forks(&mut watched);
        let ended: Vec<i32> = watched.iter_mut().filter_map(|(&pid, w)| w.ended().then_some(pid)).collect();
        for pid in ended {
            let w = watched.remove(&pid).expect("watched");
            let exe = w.exe.clone();
            let pushed = finish(w, request.keep);
            eprintln!("lopi agent: {pid} ({exe}) exited; {pushed}");
        }
        for (pid, exe) in new_matches(&patterns, &watched, &passed) {
            let id = (pid, forks::start_time(pid).unwrap_or(0));
            let name = Path::new(&exe).file_name().map_or("lopi".into(), |n| n.to_string_lossy().into_owned());
            let data = dir.join(format!("{name}.{pid}{}", lopi_rt_abi::DATA_SUFFIX));
            probes.record = Some(data.clone());
            match attach(&probes, pid, push, &data) {
                Ok((attached, pushing)) => {
                    eprintln!("lopi agent: attached to {pid} ({exe}): {} sites", attached.installation.sites());
                    attached_in_all += 1;
                    watched.insert(pid, Watched { attached, pushing, exe, forks: BTreeSet::new() });
                }
                Err(e) => {
                    eprintln!("lopi agent: not attaching to {pid} ({exe}): {}", crate::output::one_line(&e));
                    passed.insert(id);
                }
            }
        }
        // A pid that went away frees its place among the passed.
        passed.retain(|&(pid, start)| forks::start_time(pid) == Some(start));
        if Instant::now() >= next_status {
            eprintln!("lopi agent: {} processes watched ({attached_in_all} in all); {}", watched.len(), cpu_use(started));
            next_status += STATUS_EVERY;
        }
        std::thread::sleep(request.poll);
    }
    eprintln!("lopi agent: stopping: detaching from {} processes", watched.len());
    for (pid, w) in std::mem::take(&mut watched) {
        for p in std::iter::once(pid).chain(w.forks.iter().copied()) {
            if let Err(e) = w.attached.detach_pid(p, true) {
                eprintln!("lopi agent: detaching from {p}: {}", crate::output::one_line(&e));
            }
        }
        let pushed = finish(w, request.keep);
        eprintln!("lopi agent: detached from {pid}; {pushed}");
    }
    eprintln!("lopi agent: attached to {attached_in_all} processes; {}", cpu_use(started));
    Ok(())
}

fn attach(probes: &Probes, pid: i32, push: &PushArgs, data: &Path) -> Result<(Attached, Option<Continuous>)> {
    let attached = live::attach_start(probes, pid, true, &|_, _| Ok(()), false)?;
    match Continuous::start(&push.for_process(data), &attached.output, true) {
        Ok(pushing) => Ok((attached, pushing)),
        Err(e) => {
            attached.detach(true)?;
            Err(e)
        }
    }
}

/// The last window of a process the agent let go of; its data file removed once every
/// window reached the collector, unless `keep`. What was pushed, said.
fn finish(w: Watched, keep: bool) -> String {
    let Some(pushing) = w.pushing else { return String::new() };
    let d = pushing.finish();
    if d.whole && !keep {
        let _ = std::fs::remove_file(&w.attached.output);
    }
    let kept = match d.whole && !keep {
        true => String::new(),
        false => format!(" (data in {})", w.attached.output),
    };
    format!("pushed {} of {} windows{kept}", d.sent, d.windows)
}

/// Takes each process forked from a watched one (or from one of its forks) that still runs
/// that program as that one's fork: it carries the probes it inherited.
fn adopt_forks(watched: &mut BTreeMap<i32, Watched>) {
    for pid in forks::processes() {
        if watched.contains_key(&pid) || watched.values().any(|w| w.forks.contains(&pid)) {
            continue;
        }
        let Some(parent) = forks::parent_of(pid) else { continue };
        let Some((&root, w)) = watched.iter_mut().find(|(&p, w)| p == parent || w.forks.contains(&parent)) else { continue };
        if forks::carries_probes_of(pid, w.attached.pid) {
            eprintln!("lopi agent: {pid} is a fork of {root}, with its probes (its records go to {root}'s)");
            w.forks.insert(pid);
        }
    }
}

/// Matching processes the agent neither watches nor passed over: (pid, executable path).
fn new_matches(patterns: &RegexSet, watched: &BTreeMap<i32, Watched>, passed: &HashSet<ProcessId>) -> Vec<(i32, String)> {
    let own = std::process::id() as i32;
    let mut found = Vec::new();
    for pid in forks::processes() {
        if pid == own || watched.contains_key(&pid) || watched.values().any(|w| w.forks.contains(&pid)) {
            continue;
        }
        // Kernel threads and processes of other users lopi may not read have no path here.
        let Ok(exe) = lopi_live::procfs::exe(pid) else { continue };
        let exe = exe.to_string_lossy().into_owned();
        if patterns.is_match(&exe) && !passed.contains(&(pid, forks::start_time(pid).unwrap_or(0))) {
            found.push((pid, exe));
        }
    }
    found.sort();
    found
}

/// The agent's own CPU time since `started`, as a share of one CPU.
fn cpu_use(started: Instant) -> String {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let fields: Vec<u64> = s.rsplit_once(')')?.1.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
            Some(fields.iter().sum::<u64>() as f64 / ticks)
        })
        .unwrap_or(0.0);
    let wall = started.elapsed().as_secs_f64();
    format!("its own CPU use: {cpu:.2} s in {wall:.1} s ({:.2}% of one CPU)", 100.0 * cpu / wall.max(1e-9))
}
