//! `lopi run` and `lopi attach`: probes spliced into a running process (lopi-live).
use crate::continuous::{Continuous, PushArgs};
use crate::syscall_log::LogArg;
use crate::show::Summary;
use anyhow::{bail, Context, Result};
use crate::progress::{self, Bar};
use lopi_cache::PlanCache;
use lopi_live::{Installation, ModuleRequest, Plan, Spec, Target};
use lopi_patch::{Filter, Place, Probes as ProbeSet};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to probe, as given on the command line.
pub struct Probes {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub probes: ProbeSet,
    /// What the probes record besides counts (trace, budget, sampled time).
    pub recording: lopi_image::Recording,
    pub cache: Option<PlanCache>,
    /// A probe script for the main executable (`lopi trace`).
    pub script: Option<std::sync::Arc<lopi_image::script::ScriptSpec>>,
    /// Functions of the main executable counted, not timed (a script only counts them).
    pub count_only: Vec<String>,
    /// The data file (`%p`: the pid), instead of `LOPI_OUTPUT` or `NAME.PID.lopi`.
    pub record: Option<PathBuf>,
    /// `lopi run` follows the program's forks and execs (`--no-follow`: not).
    pub follow: bool,
}

impl Probes {
    /// `GLOB` goes to the main executable, `LIB:GLOB` to the loaded library `LIB`.
    pub(crate) fn spec(&self, output: &str) -> Result<Spec> {
        let mut modules: BTreeMap<Option<String>, Filter> = BTreeMap::new();
        let split = |arg: &str| -> (Option<String>, String) {
            match arg.split_once(':') {
                Some((lib, glob)) if !lib.is_empty() => (Some(lib.to_string()), glob.to_string()),
                _ => (None, arg.to_string()),
            }
        };
        for arg in &self.include {
            let (lib, glob) = split(arg);
            let pattern = glob::Pattern::new(&glob).with_context(|| format!("bad glob {glob:?}"))?;
            modules.entry(lib).or_default().include.push(pattern);
        }
        // A script names its functions itself (none: only lopi's own begin/end/interval).
        let names_functions = self.script.as_ref().is_some_and(|s| s.handler.is_none());
        if self.include.is_empty() && !names_functions && (self.probes.has(Place::Entries) || self.probes.has(Place::Blocks)) {
            modules.insert(None, Filter::default());
        }
        // The modules of a script's instruction points (USDT markers may be a library's).
        if let Some(script) = &self.script {
            let libraries = script.markers.values().flatten().map(|m| m.library.clone());
            let executable = (!script.point_addrs.is_empty()).then_some(None);
            for library in libraries.chain(executable) {
                modules.entry(library).or_insert_with(Filter::nothing);
            }
        }
        for arg in &self.exclude {
            let (lib, glob) = split(arg);
            let pattern = glob::Pattern::new(&glob).with_context(|| format!("bad glob {glob:?}"))?;
            if let Some(filter) = modules.get_mut(&lib) {
                filter.exclude.push(pattern);
            }
        }
        let mut env = vec![(lopi_rt_abi::OUTPUT_ENV.to_string(), output.to_string())];
        if self.follow {
            // Measured once here, not in each module of each process of the tree.
            env.push((lopi_rt_abi::TSC_HZ_ENV.to_string(), lopi_live::tsc_hz().to_string()));
        }
        for knob in ["LOPI_NODES", "LOPI_DEPTH", "LOPI_TRACE_EVENTS", "LOPI_BUDGET", "LOPI_WHATIF"] {
            if let Ok(value) = std::env::var(knob) {
                env.push((knob.to_string(), value));
            }
        }
        Ok(Spec {
            modules: modules
                .into_iter()
                .map(|(library, filter)| {
                    let count_only = if library.is_none() { self.count_only.clone() } else { Vec::new() };
                    ModuleRequest { library, filter, probes: self.probes, count_only, scripted: self.script.is_some() }
                })
                .collect(),
            everywhere: self.probes.without(Place::Entries).without(Place::Blocks),
            recording: self.recording,
            env,
            cache: self.cache.clone(),
            script: self.script.clone(),
            probed_already: None,
        })
    }
}

/// Where the record goes: `record` if given, else `LOPI_OUTPUT` (as in static mode, `%p` is
/// the pid in either), else `NAME.PID.lopi` in the current directory; absolute, since the
/// target has its own cwd.
fn output_path(record: Option<&Path>, exe_name: &str, pid: i32) -> String {
    let given = record.map(|p| p.display().to_string()).or_else(|| std::env::var(lopi_rt_abi::OUTPUT_ENV).ok()).filter(|p| !p.is_empty());
    let path = match given {
        Some(p) => PathBuf::from(p.replace("%p", &pid.to_string())),
        None => PathBuf::from(format!("{exe_name}.{pid}{}", lopi_rt_abi::DATA_SUFFIX)),
    };
    crate::files::absolute(&path).display().to_string()
}

fn exe_name(pid: i32) -> String {
    lopi_live::procfs::exe(pid)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "lopi".into())
}

fn describe(installation: &Installation, plan: &Plan) -> String {
    let mut out = String::new();
    let mut notes = String::new();
    for m in &installation.modules {
        let summary = Summary::from_outcomes(m.functions, &m.outcomes, &m.timing);
        let syscalls = (!m.syscalls.is_empty()).then(|| crate::syscalls::Summary::new(&m.syscalls).to_string());
        let mut text = match (summary.selected, syscalls) {
            (0, Some(syscalls)) => syscalls,
            (_, Some(syscalls)) => format!("{summary}; {syscalls}"),
            (_, None) => summary.to_string(),
        };
        if !m.blocks.is_empty() {
            // Only blocks are probed: the functions' entries are not.
            text = crate::blocks::summary(&m.blocks);
        }
        out += &format!("lopi:   {}: {text}", m.path);
        if m.exit_sites > 0 {
            out += &format!(", {} exit sites", m.exit_sites);
        }
        if let Some(planned) = plan.modules.iter().find(|p| p.path == m.path) {
            let (from, note) = progress::lookup_text(&planned.lookup);
            out += from;
            if let Some(note) = note {
                notes += &format!("lopi: note: {}: {note}\n", m.path);
            }
        }
        out += "\n";
    }
    out + &notes
}

/// A program launched with probes in it, running free (or, followed, under lopi's eye).
pub struct Launched {
    pub child: std::process::Child,
    /// The followed tree of processes, when the program is followed.
    tree: Option<lopi_live::Tree>,
    /// The data file.
    pub output: String,
    pub installation: Installation,
    sampler: Option<crate::parallelism::Sampler>,
    /// SIGINT and SIGQUIT, blocked in lopi: the terminal's Ctrl-C is for the program.
    pub blocked: SigSet,
}

/// What a caller checks of the probes installed in a process (its pid) before it runs on (a
/// script's points that cannot run are refused), and does to it then (a script raises the
/// semaphores of the markers it probes).
pub type Check<'a> = &'a dyn Fn(&Installation, i32) -> Result<()>;

/// Launches PROG, installs the probes where every library is loaded and none of their
/// constructors has run (see [`lopi_live::Target::at_exec`]) and lets it run (without ptrace, or
/// followed: see [`crate::follow`]), once `check` accepts them (else the program is killed
/// before it ran any of its own code).
pub fn launch(probes: &Probes, command: &[OsString], arg0: Option<OsString>, quiet: bool, check: Check<'_>) -> Result<Launched> {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = command.split_first() else { bail!("lopi needs a program to run: -- PROG ARGS") };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    if let Some(name) = arg0 {
        cmd.arg0(name);
    }
    let started = Instant::now();
    let (mut target, mut child) = lopi_live::launch(cmd, probes.follow, probes.recording.syscall_log)?;
    let pid = target.pid();
    let output = output_path(probes.record.as_deref(), &exe_name(pid), pid);
    let mut spec = probes.spec(&output)?;
    if probes.follow {
        // A library asked for that the program loads later (dlopen) gets its probes then.
        spec.probed_already = Some(Vec::new());
    }
    let installed = Instant::now();
    let bar = Bar::new(&format!("planning {}", progress::file_name(program.as_ref())), !quiet);
    let planned = lopi_live::plan(pid, &spec, target.entry(), &bar);
    drop(bar);
    let mut plan = None;
    let installation = match planned.and_then(|p| target.install(plan.insert(p))) {
        Ok(i) => i,
        Err(e) => {
            refuse(target, &mut child);
            return Err(e).context(format!("installing probes in {}", program.to_string_lossy()));
        }
    };
    if let Err(e) = check(&installation, pid) {
        refuse(target, &mut child);
        return Err(e);
    }
    let install_ms = lopi_live::millis(installed);
    let tree = if probes.follow {
        Some(lopi_live::Tree::new(target, command.iter().map(|a| a.to_string_lossy().into_owned()).collect()))
    } else {
        target.release();
        None
    };
    // Records for the multiprocessor breakdown get its parallelism profile.
    let sampler = probes.probes.probes_system_calls().then(|| crate::parallelism::Sampler::start(pid));
    if !quiet {
        eprintln!("lopi: recording pid {pid} to {output}");
        if let Some(plan) = &plan {
            eprint!("{}", describe(&installation, plan));
        }
        for library in spec.modules.iter().filter_map(|m| m.library.as_deref()) {
            if !installation.modules.iter().any(|m| lopi_live::library_named(&m.path, library)) {
                eprintln!("lopi: {library} is not loaded yet: its probes go in when the program loads it");
            }
        }
        eprintln!(
            "lopi: {} sites installed in {install_ms:.1} ms ({:.1} ms from launch to the program's entry)",
            installation.sites(),
            (installed - started).as_secs_f64() * 1e3
        );
    }
    let mut blocked = SigSet::empty();
    blocked.add(Signal::SIGINT);
    blocked.add(Signal::SIGQUIT);
    blocked.thread_block().context("blocking SIGINT")?;
    Ok(Launched { child, tree, output, installation, sampler, blocked })
}

/// Kills a launched program that must not run, before lopi lets go of it: released first, it
/// would run (and print) until the kill reached it.
fn refuse(target: lopi_live::Target, child: &mut std::process::Child) {
    let _ = child.kill();
    drop(target);
    let _ = child.wait();
}

impl Launched {
    /// Waits until the program (followed: every process of its tree) has ended.
    pub fn wait(&mut self, probes: &Probes, quiet: bool) -> Result<std::process::ExitStatus> {
        match &mut self.tree {
            Some(tree) => match crate::follow::follow(tree, probes, &self.output, quiet, crate::follow::Until::AllEnded)? {
                crate::follow::Stopped::Done(status) => Ok(status),
                crate::follow::Stopped::Detach => bail!("lopi run stopped following its program"),
            },
            None => self.child.wait().context("waiting for the program"),
        }
    }

    /// Once the program has ended: records its end (its threads' calls still open end there;
    /// a followed tree's processes are recorded as they end) and adds the parallelism profile,
    /// if one was sampled.
    pub fn finish(&mut self) {
        if self.tree.is_none() {
            let ended = crate::ends::record(&self.output, self.child.id() as i32, lopi_rt_abi::END_EXITED, (0, 0));
            if let Err(e) = ended {
                eprintln!("lopi: recording the program's end: {e:#}");
            }
        }
        if let Some(Err(e)) = self.sampler.take().map(|s| s.finish(&self.output)) {
            eprintln!("lopi: {}", crate::output::one_line(&e));
        }
    }
}

/// `lopi run -- PROG ARGS`: launches PROG with the probes in (its profile pushed as it runs,
/// with `--push`) and exits with its status.
pub(crate) fn run(probes: &Probes, command: &[OsString], arg0: Option<OsString>, quiet: bool, push: &PushArgs, log: &LogArg) -> Result<()> {
    let mut launched = launch(probes, command, arg0, quiet, &|_, _| Ok(()))?;
    let pushing = match Continuous::start(push, &launched.output, quiet) {
        Ok(p) => p,
        Err(e) => {
            let _ = launched.child.kill();
            return Err(e);
        }
    };
    let status = launched.wait(probes, quiet)?;
    launched.finish();
    if let Some(p) = pushing {
        p.finish();
    }
    log.write(&launched.output, quiet)?;
    if !quiet {
        eprintln!("lopi: the program {status}; see `lopi report {}`", launched.output);
    }
    exit_like(status, &launched.blocked)
}

/// Ends lopi the way the program ended: same exit code, or killed by the same signal, so
/// that scripts and test harnesses see no difference.
pub fn exit_like(status: std::process::ExitStatus, blocked: &SigSet) -> ! {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal().and_then(|s| Signal::try_from(s).ok()) {
        let _ = blocked.thread_unblock();
        // Twice: Rust's runtime handles SIGSEGV/SIGBUS (stack overflow checks); its handler
        // restores the default action and returns for a signal that was not a fault.
        let _ = nix::sys::signal::raise(signal);
        let _ = nix::sys::signal::raise(signal);
        std::process::exit(128 + signal as i32);
    }
    std::process::exit(status.code().unwrap_or(1));
}

/// A running process with probes spliced in.
pub struct Attached {
    pub pid: i32,
    /// The data file.
    pub output: String,
    pub installation: std::sync::Arc<Installation>,
    /// `lopi attach -f`: the process's tree, followed from now on.
    tree: Option<lopi_live::Tree>,
    /// Ctrl-C, SIGTERM and SIGHUP, blocked and read here: they mean "detach".
    signals: SignalFd,
    /// When the probes went live.
    since: Instant,
}

/// Why a wait for an attached process ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited,
    /// --duration, a signal, or the caller's `stop`.
    Detach,
}

/// Installs the probes in process `pid` and lets it run on, once `check` accepts them (else
/// they are taken out again before it does); `followed`: still traced, its tree followed (see
/// [`lopi_live::Tree::attached`]).
pub fn attach_start(probes: &Probes, pid: i32, quiet: bool, check: Check<'_>, followed: bool) -> Result<Attached> {
    // Ctrl-C, SIGTERM and SIGHUP mean "detach", read from a signalfd; blocked first, so
    // that one arriving mid-install waits until the probes are in.
    let mut mask = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        mask.add(s);
    }
    mask.thread_block().context("blocking signals")?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).context("signalfd")?;

    let output = output_path(probes.record.as_deref(), &exe_name(pid), pid);
    let spec = probes.spec(&output)?;
    lopi_live::preflight(pid)?;
    // Planning needs no pause: the process runs on meanwhile.
    let bar = Bar::new(&format!("planning process {pid}"), !quiet);
    let planned = lopi_live::plan(pid, &spec, None, &bar);
    drop(bar);
    let mut plan = planned.with_context(|| format!("planning probes for process {pid}"))?;
    if probes.recording.sample_hz != 0 && lopi_live::procfs::handles_signal(pid, lopi_rt_abi::SAMPLE_SIGNAL) {
        bail!("process {pid} handles SIGURG, the signal of sampled time's timers: attach with --time exact");
    }
    let started = Instant::now();
    let mut target = if followed { Target::attach_followed(pid)? } else { Target::attach(pid)? };
    let stopped_ms = lopi_live::millis(started);
    let threads = target.thread_count();
    let installation = target.install(&mut plan).with_context(|| format!("installing probes in process {pid}"))?;
    if let Err(e) = check(&installation, pid) {
        let removed = target.remove(&installation);
        target.release();
        removed.context("taking the probes out again")?;
        return Err(e);
    }
    let installation = std::sync::Arc::new(installation);
    let tree = if followed {
        let mut tree = lopi_live::Tree::attached(target, installation.clone());
        if probes.recording.syscall_log {
            tree.log_startups();
        }
        Some(tree)
    } else {
        target.release();
        None
    };
    let pause_ms = lopi_live::millis(started);
    if !quiet {
        eprintln!("lopi: recording to {output}");
        eprint!("{}", describe(&installation, &plan));
        eprintln!(
            "lopi: attached to {pid} ({threads} threads): {} sites; process paused {pause_ms:.1} ms ({stopped_ms:.1} ms to stop its threads; planned beforehand in {:.1} ms)",
            installation.sites(),
            plan.took.as_secs_f64() * 1e3
        );
    }
    Ok(Attached { pid, output, installation, tree, signals, since: Instant::now() })
}

impl Attached {
    /// Whether the process has exited, or it is time to detach: after `duration`, on a
    /// signal, or when `stop` says so (checked every `poll`).
    pub fn wait(&self, duration: Option<Duration>, poll: Duration, mut stop: impl FnMut() -> Result<bool>) -> Result<Ended> {
        let running = Instant::now();
        loop {
            if self.exited() {
                return Ok(Ended::Exited);
            }
            if duration.is_some_and(|d| running.elapsed() >= d) || matches!(self.signals.read_signal(), Ok(Some(_))) || stop()? {
                return Ok(Ended::Detach);
            }
            std::thread::sleep(poll);
        }
    }

    /// True once the process has exited, its end then recorded.
    pub(crate) fn exited(&self) -> bool {
        self.exited_pid(self.pid)
    }

    /// True once process `pid` (this one, or a fork of it that carries its probes) has
    /// exited, its end then recorded.
    pub(crate) fn exited_pid(&self, pid: i32) -> bool {
        if alive(pid) {
            return false;
        }
        self.record_end(pid, lopi_rt_abi::END_EXITED, (0, 0));
        true
    }

    /// Records that the recording of process `pid` ended now, `how` (`END_*`), with the
    /// `munmap`s lopi made in it to detach (calls, ticks).
    fn record_end(&self, pid: i32, how: u32, unmaps: (u64, u64)) {
        if let Err(e) = crate::ends::record(&self.output, pid, how, unmaps) {
            eprintln!("lopi: recording the end of process {pid}: {e:#}");
        }
    }

    /// Takes every probe out again; the record stays valid either way.
    pub fn detach(&self, quiet: bool) -> Result<()> {
        self.detach_pid(self.pid, quiet)
    }

    /// Takes every probe out of process `pid`: this one, or a fork of it, which carries the
    /// same probes at the same addresses.
    pub(crate) fn detach_pid(&self, pid: i32, quiet: bool) -> Result<()> {
        let detaching = Instant::now();
        let mut target = match Target::attach(pid) {
            Ok(t) => t,
            Err(lopi_live::LiveError::NoSuchProcess(_) | lopi_live::LiveError::TargetExited(_)) => {
                self.record_end(pid, lopi_rt_abi::END_EXITED, (0, 0));
                if !quiet {
                    eprintln!("lopi: process {pid} exited; see `lopi report {}`", self.output);
                }
                return Ok(());
            }
            Err(e) => return Err(e).context("re-attaching to take the probes out (they stay in; the record stays valid)"),
        };
        let removal = target.remove(&self.installation).context("taking the probes out")?;
        // With every thread held and no probe left: calls still open end here.
        self.record_end(pid, lopi_rt_abi::END_DETACHED, (removal.unmaps, removal.unmap_ticks));
        target.release();
        let detach_ms = lopi_live::millis(detaching);
        if !quiet {
            eprintln!(
                "lopi: detached after {:.1} s: {} sites restored, process paused {detach_ms:.1} ms{}{}",
                self.since.elapsed().as_secs_f64(),
                removal.restored_sites,
                if removal.waited_threads > 0 { format!(", waited for {} threads inside probes", removal.waited_threads) } else { String::new() },
                if removal.kept_mappings > 0 { ", lopi's code left mapped (a thread stayed inside it)".to_string() } else { String::new() },
            );
        }
        if let Some(why) = &removal.kept_thread_state {
            eprintln!("lopi: note: threads' timing state stays mapped in the process ({why})");
        }
        if removal.changed_sites > 0 {
            eprintln!("lopi: warning: {} sites were changed by someone else meanwhile and were left as they are", removal.changed_sites);
        }
        Ok(())
    }
}

/// `lopi attach PID`: installs the probes, lets the process run until Ctrl-C, `--duration`
/// or its exit (its profile pushed meanwhile, with `--push`), then takes every probe out
/// again. `probes.follow` (`-f`): its process tree is followed meanwhile (see
/// [`crate::follow::attached`]).
pub(crate) fn attach(probes: &Probes, pid: i32, duration: Option<Duration>, push: &PushArgs, log: &LogArg) -> Result<()> {
    let mut attached = attach_start(probes, pid, false, &|_, _| Ok(()), probes.follow)?;
    let pushing = match Continuous::start(push, &attached.output, false) {
        Ok(p) => p,
        Err(e) => {
            attached.detach(true)?;
            return Err(e);
        }
    };
    match duration {
        Some(d) => eprintln!("lopi: detaching in {:.1} s, or on Ctrl-C", d.as_secs_f64()),
        None => eprintln!("lopi: detaching on Ctrl-C"),
    }
    if let Some(mut tree) = attached.tree.take() {
        crate::follow::attached(&mut tree, probes, &attached.output, duration)?;
        if let Some(p) = pushing {
            p.finish();
        }
        log.write(&attached.output, false)?;
        eprintln!("lopi: see `lopi report {}`", attached.output);
        return Ok(());
    }
    // Forks it makes meanwhile (a server's workers) carry its probes: they come out of them
    // too when lopi lets go, or when the process exits.
    let mut forks = crate::forks::Forks::new(pid);
    let ended = attached.wait(duration, Duration::from_millis(20), || {
        forks.refresh();
        Ok(false)
    })?;
    let forks = forks.running();
    if ended == Ended::Detach {
        attached.detach(false)?;
    }
    for &fork in &forks {
        attached.detach_pid(fork, true).with_context(|| format!("taking the probes out of {pid}'s fork {fork}"))?;
    }
    if !forks.is_empty() {
        eprintln!("lopi: {} forks of {pid} carried its probes (their records are in its data file): taken out of them too", forks.len());
    }
    if let Some(p) = pushing {
        p.finish();
    }
    log.write(&attached.output, false)?;
    match ended {
        Ended::Exited => eprintln!("lopi: process {pid} exited; see `lopi report {}`", attached.output),
        Ended::Detach => eprintln!("lopi: see `lopi report {}`", attached.output),
    }
    Ok(())
}

/// True while `pid` exists and is not a zombie.
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rfind(')').and_then(|i| stat.get(i + 2..i + 3)).is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// `10s`, `500ms`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("bad duration {text:?} (try 10s, 500ms, 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("bad duration unit {unit:?} (try 10s, 500ms, 2m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("bad duration {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
    }

    #[test]
    fn library_patterns_go_to_their_library() {
        let probes = Probes { include: vec!["libc.so.6:malloc".into(), "work_*".into()], exclude: vec![], probes: ProbeSet::COUNT, recording: lopi_image::Recording::default(), cache: None, script: None, count_only: Vec::new(), record: None, follow: false };
        let spec = probes.spec("/tmp/x").unwrap();
        assert_eq!(spec.modules.len(), 2);
        assert_eq!(spec.modules[0].library, None);
        assert_eq!(spec.modules[1].library.as_deref(), Some("libc.so.6"));
        let only_lib = Probes { include: vec!["libc:free".into()], exclude: vec![], probes: ProbeSet::COUNT, recording: lopi_image::Recording::default(), cache: None, script: None, count_only: Vec::new(), record: None, follow: false };
        assert_eq!(only_lib.spec("/tmp/x").unwrap().modules.len(), 1);
    }
}
