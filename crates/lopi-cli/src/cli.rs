//! The command line: each command's flags (clap), and what they turn into.
use crate::continuous::PushArgs;
use crate::exports::{ExportFormat, ProfileArg, WeightArg};
use crate::otlp::ResourceArgs;
use crate::push::ConnectArgs;
use crate::output::Format;
use crate::report::View;
use crate::probe_arg::{self, probe_set, Probe};
use crate::{coverage, demo, handler, live, whatif};
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use lopi_cache::PlanCache;
use lopi_image::Recording;
use lopi_patch::{Filter, Measure, Place, Probes};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "lopi", version, about = "Low-perturbation instrumentation of x86-64 Linux programs")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Plan every module anew and keep no plan (as LOPI_CACHE=off); see `lopi cache`.
    #[arg(long, global = true)]
    pub(crate) no_cache: bool,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// List the functions of PROG and how each would be probed, or why not.
    Info {
        prog: PathBuf,
        #[command(flatten)]
        select: Select,
        /// List PROG's SystemTap static markers (USDT) instead: where each is, its semaphore,
        /// its arguments, and whether a `usdt:` point of `lopi trace` can probe it.
        #[arg(long)]
        usdt: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Write a copy of PROG whose functions are counted (and timed, with exit probes).
    Rewrite {
        prog: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        select: Select,
        /// Compile this probe script (`lopi trace`'s language) into the copy; it decides which
        /// functions are probed. Its output stays in the record: `lopi report DATA --script`
        /// prints it and runs its `begin` and `end` probes (`interval:` needs lopi trace).
        #[arg(long, value_name = "FILE", conflicts_with = "script_expr")]
        script: Option<PathBuf>,
        /// The same, given as text.
        #[arg(long, value_name = "PROGRAM")]
        script_expr: Option<String>,
        /// Compile this C file (`lopi handler-header` prints the lopi.h it includes) into the
        /// copy: its lopi_enter and lopi_leave run at every selected function's entry and return.
        #[arg(long, value_name = "FILE.c", conflicts_with_all = ["script", "script_expr"])]
        handler: Option<PathBuf>,
        /// Also record every entry and exit with a timestamp (implies --probe entry,exit);
        /// `lopi export --format chrome` turns it into a timeline.
        #[arg(long)]
        trace: bool,
        #[command(flatten)]
        timing: Timing,
    },
    /// Which blocks and source lines ran, from a record made with --probe block: per function
    /// and per source file (lines from DWARF, the file's or its debug file's).
    Coverage {
        data: PathBuf,
        #[arg(long, value_enum, default_value_t = coverage::Format::Text)]
        format: coverage::Format,
        /// Write to FILE instead of standard output (drcov, which is binary, needs it).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Show the functions recorded in a data file, most called first.
    Report {
        data: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Rows in the text table (0 = all).
        #[arg(long, default_value_t = 30)]
        top: usize,
        #[command(flatten)]
        views: ReportViews,
        #[command(flatten)]
        select: crate::processes::ProcessSelect,
    },
    /// Draw a flame graph (SVG) of the timed call paths in a data file.
    Flamegraph {
        data: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// What a frame's width shows.
        #[arg(long, value_enum, default_value_t = WeightArg::Time)]
        weight: WeightArg,
        /// The graph's title [default: the data file and the weight].
        #[arg(long)]
        title: Option<String>,
    },
    /// Write the timed profile of a data file for other tools.
    Export {
        data: PathBuf,
        #[arg(long, value_enum)]
        format: ExportFormat,
        #[arg(short, long)]
        output: PathBuf,
        /// What a folded stack counts (--format folded only) [default: time].
        #[arg(long, value_enum)]
        weight: Option<WeightArg>,
        /// Which profile --format pprof writes: the timed calls, or (recorded with --probe
        /// locks) Go's mutex or block profile of the lock waits.
        #[arg(long, value_enum, default_value_t = ProfileArg::Cpu)]
        profile: ProfileArg,
        #[command(flatten)]
        resource: ResourceArgs,
    },
    /// Send the timed profile of a data file to an OpenTelemetry Collector (OTLP/HTTP,
    /// protobuf): the request `lopi export --format otlp` writes, posted to
    /// URL/v1development/profiles.
    Push {
        data: PathBuf,
        /// The collector's OTLP/HTTP address (http://127.0.0.1:4318, or https://).
        url: String,
        #[command(flatten)]
        resource: ResourceArgs,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Run PROG with probes spliced in before its libraries' constructors run (no rewritten file); the record
    /// reads with `lopi report` as for a rewritten program.
    Run {
        #[command(flatten)]
        select: LiveSelect,
        /// Also record every entry and exit with a timestamp (implies --probe entry,exit).
        #[arg(long)]
        trace: bool,
        #[command(flatten)]
        timing: Timing,
        /// Print nothing; lopi exits as the program did (same code or signal).
        #[arg(short, long)]
        quiet: bool,
        /// Probe only PROG's own process (and its forks until they exec): programs it
        /// executes run without probes and without ptrace [default: the whole tree is followed].
        #[arg(long)]
        no_follow: bool,
        /// The program's argv[0] (default: PROG as given), as `exec -a` does: for programs that
        /// behave by the name they are called by (a wrapper passes its own `$0`).
        #[arg(long, value_name = "NAME")]
        arg0: Option<std::ffi::OsString>,
        #[command(flatten)]
        push: PushArgs,
        #[command(flatten)]
        log: crate::syscall_log::LogArg,
        /// The program and its arguments (after `--`).
        #[arg(trailing_var_arg = true, required = true, value_name = "PROG ARGS")]
        command: Vec<std::ffi::OsString>,
    },
    /// Splice probes into a running process; take them all out again on Ctrl-C, after
    /// --duration, or when it exits.
    Attach {
        pid: i32,
        #[command(flatten)]
        select: LiveSelect,
        /// Also record every entry and exit with a timestamp (implies --probe entry,exit).
        #[arg(long)]
        trace: bool,
        #[command(flatten)]
        timing: Timing,
        /// Detach after this long (10s, 500ms, 2m) [default: on Ctrl-C].
        #[arg(long, value_parser = live::parse_duration)]
        duration: Option<std::time::Duration>,
        /// Follow the process's children from now on, as `strace -f -p` does: every program a
        /// descendant executes gets the same probes, recording into the same data file, and
        /// `lopi report --processes` shows them. The process stays traced until lopi detaches
        /// (also when it exits).
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        push: PushArgs,
        #[command(flatten)]
        log: crate::syscall_log::LogArg,
    },
    /// Watch this host: attach to every running and newly started process whose executable's
    /// path matches --match, push each one's profile to an OpenTelemetry Collector as it runs
    /// (--push, --every), and on Ctrl-C or SIGTERM take every probe out again.
    Agent {
        /// A regular expression the executable's path must match (repeatable: any of them).
        #[arg(long = "match", value_name = "REGEX", required = true)]
        matches: Vec<String>,
        /// How often /proc is read for new processes (a process that lives less is missed).
        #[arg(long, value_name = "DURATION", value_parser = live::parse_duration, default_value = "1s")]
        poll: std::time::Duration,
        /// Where the processes' data files go.
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// Keep a process's data file once all its windows reached the collector [default:
        /// removed then].
        #[arg(long)]
        keep: bool,
        #[command(flatten)]
        select: LiveSelect,
        #[command(flatten)]
        timing: Timing,
        #[command(flatten)]
        push: PushArgs,
    },
    /// Print the lopi.h that C handlers (`--handler FILE.c`) include: the event they get,
    /// the callbacks they may define, and helpers that need no libc.
    HandlerHeader,
    /// Show where plans are cached (so that a program is planned once), or clear the cache.
    Cache {
        /// Remove every entry (cached plans and laid-out images).
        #[arg(long)]
        clear: bool,
    },
    /// Run PROG with a probe script compiled into it (bpftrace's language: `func:NAME`,
    /// `func:NAME:return`, predicates, maps, aggregations, printf); print what the script
    /// prints as it runs, and its maps at the end.
    Trace {
        /// The script's file (or use -e), then its positional parameters (`$1`, `$2`, ..;
        /// `$#` is their count): with -e, all of these are parameters.
        #[arg(required_unless_present = "expr", value_name = "SCRIPT [PARAMS]")]
        args: Vec<String>,
        /// The script itself.
        #[arg(short = 'e', long = "expr", value_name = "PROGRAM")]
        expr: Option<String>,
        /// How the maps are printed at the end (`json`: {"maps": {...}}).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Write lopi's output (printf lines and maps) to FILE; the program's own output stays
        /// where it is. Without it: stdout when that is a terminal (or with -p), else stderr, so
        /// that a program's redirected stdout holds only its own output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Most keys a map holds per thread (updates beyond are dropped and counted).
        #[arg(long, value_name = "N")]
        max_entries: Option<u32>,
        /// Trace this running process (its probes are taken out again at the end).
        #[arg(short, long, conflicts_with = "command")]
        pid: Option<i32>,
        /// With -p: stop after this long (10s, 500ms, 2m), else on Ctrl-C.
        #[arg(long, value_parser = live::parse_duration, requires = "pid")]
        duration: Option<std::time::Duration>,
        /// Keep the record in FILE (`%p`: the pid), readable afterwards with `lopi report`
        /// (`--script` for the script's maps); without it, lopi removes its record at the end.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
        /// The program and its arguments (after `--`).
        #[arg(last = true, required_unless_present = "pid", value_name = "PROG ARGS")]
        command: Vec<std::ffi::OsString>,
    },
    /// Profile a Python program (Debian's python3.11) by its Python functions: each thread is
    /// sampled in proportion to its CPU time and the sample's Python frames are read from the
    /// interpreter; per function, the share of samples it ran in (self) or was on the stack
    /// for (inclusive), and with --calls its exact calls.
    Pyprofile {
        /// Samples per second of each thread's CPU time.
        #[arg(long, default_value_t = 199)]
        hz: u32,
        /// Count each function's calls too (its returns, at python3.11's function__return
        /// marker): exact, at 0.1-0.4 us a call (cProfile: 0.2-0.3 us).
        #[arg(long)]
        calls: bool,
        /// Put the C function each sample ran in under its Python frames (flame graph and
        /// folded stacks).
        #[arg(long)]
        native: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Rows of the table (0 = all).
        #[arg(long, default_value_t = 30)]
        top: usize,
        /// Write the table to FILE (else stdout when it is a terminal, else stderr).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Draw a flame graph of the samples (SVG).
        #[arg(long, value_name = "FILE")]
        flamegraph: Option<PathBuf>,
        /// Write the samples as folded stacks (root first), for inferno, speedscope and others.
        #[arg(long, value_name = "FILE")]
        folded: Option<PathBuf>,
        /// Most distinct stacks kept per thread (more are dropped and counted).
        #[arg(long, value_name = "N")]
        max_entries: Option<u32>,
        /// Profile this running Python process instead (its probes are taken out at the end).
        #[arg(short, long, conflicts_with = "command")]
        pid: Option<i32>,
        /// With -p: stop after this long (10s, 500ms, 2m), else on Ctrl-C.
        #[arg(long, value_parser = live::parse_duration, requires = "pid")]
        duration: Option<std::time::Duration>,
        /// The interpreter and its arguments (after `--`).
        #[arg(last = true, required_unless_present = "pid", value_name = "PROG ARGS")]
        command: Vec<std::ffi::OsString>,
    },
    /// Run PROG natively and under an emulated kernel (a giant lock around every system call,
    /// one lock per subsystem, or an application kernel whose proxy threads on one CPU make
    /// every thread's system calls), on one CPU and on N, each recorded with --probe
    /// syscall,locks: time in user, kernel and spinning, speedup, the null system call.
    Whatif {
        #[arg(long, value_enum)]
        kernel: whatif::Kernel,
        /// How app-kernel's proxies and their callers wait for each other (the null system
        /// call is measured both ways).
        #[arg(long, value_enum, default_value_t = whatif::ProxyWait::Spin)]
        proxy_wait: whatif::ProxyWait,
        /// CPUs of the parallel runs [default: all the CPUs lopi may use].
        #[arg(long)]
        cpus: Option<u32>,
        /// Recorded runs per kernel and CPU count; the median counts.
        #[arg(long, default_value_t = 3)]
        runs: u32,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// The program and its arguments (after `--`); `{cpus}` becomes the CPU count.
        #[arg(trailing_var_arg = true, required = true, value_name = "PROG ARGS")]
        command: Vec<std::ffi::OsString>,
    },
    /// Build a small built-in C program, rewrite it, run it and show its report (`mp`: the
    /// thesis's multiprocessor benchmark through `lopi scale`).
    Demo {
        /// `profile`: count and time a little program's functions; `mp`: the thesis's
        /// multiprocessor benchmark (threads looping between user work and a CPU-bound system
        /// call, 64:36) built, calibrated and run through `lopi scale`.
        #[arg(value_enum, default_value_t = demo::Which::Profile)]
        which: demo::Which,
        /// Keep the demo's files here instead of a temporary directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run PROG, uninstrumented, pinned to 1, 2, ... CPUs: wall time, speedup, efficiency, the
    /// Karp-Flatt serial fraction, a Universal Scalability Law fit; `{cpus}` in the arguments
    /// becomes the CPU count of the run (`-p {cpus}`).
    Scale {
        /// CPU counts to run on [default: 1, 2, 4, ... and all the CPUs lopi may use].
        #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
        cpus: Vec<u32>,
        /// Runs per CPU count (after one warm-up run); the median counts.
        #[arg(long, default_value_t = 5)]
        runs: u32,
        /// Draw the speedup chart (SVG) into this file.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Also record up to three runs on the most CPUs (`lopi run --probe syscall,locks`):
        /// the median serial fraction their breakdowns imply gives Amdahl's bound.
        #[arg(long)]
        breakdown: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// The program and its arguments (after `--`).
        #[arg(trailing_var_arg = true, required = true, value_name = "PROG ARGS")]
        command: Vec<std::ffi::OsString>,
    },
}

/// `lopi report`'s view flags, at most one of them (each conflicts with the others).
#[derive(clap::Args)]
pub(crate) struct ReportViews {
    /// Show who calls FUNC (timed data only).
    #[arg(long, value_name = "FUNC", conflicts_with = "callees")]
    callers: Option<String>,
    /// Show whom FUNC calls (timed data only).
    #[arg(long, value_name = "FUNC")]
    callees: Option<String>,
    /// Show the system calls (recorded with --probe syscall), as `strace -c` does: per
    /// call, per thread, and the busiest call sites.
    #[arg(long, conflicts_with_all = ["callers", "callees"])]
    syscalls: bool,
    /// Show the locks (recorded with --probe locks): per lock, its acquisitions, contention,
    /// wait (blocked in futex or not) and hold times, then its busiest call sites.
    #[arg(long, conflicts_with_all = ["callers", "callees", "syscalls"])]
    locks: bool,
    /// Show the threads (recorded with --probe locks): start routine, creator, start and
    /// end, time waiting for locks, joins and system calls, thread calls made.
    #[arg(long, conflicts_with_all = ["callers", "callees", "syscalls", "locks"])]
    threads: bool,
    /// Show where each thread's wall time went (recorded with --probe syscall,locks): user,
    /// kernel, blocked in system calls, lock wait (spinning, blocked), the rest; the serial
    /// fraction and Amdahl's bound.
    #[arg(long, conflicts_with_all = ["callers", "callees", "syscalls", "locks", "threads"])]
    breakdown: bool,
    /// Show FUNC's code block by block with each block's executions (recorded with
    /// --probe block).
    #[arg(long, value_name = "FUNC", conflicts_with_all = ["callers", "callees", "syscalls", "locks", "threads", "breakdown"])]
    blocks: Option<String>,
    /// Show what the probe script of a program rewritten with --script left: its output,
    /// then its begin and end probes (run now) and its maps.
    #[arg(long, conflicts_with_all = ["callers", "callees", "syscalls", "locks", "threads", "breakdown", "blocks"])]
    script: bool,
    /// Show what the perturbation budget (--budget) did: each thread's budget and what
    /// timing cost it, then every function switched to counting, when and at what call rate.
    #[arg(long, conflicts_with_all = ["callers", "callees", "syscalls", "locks", "threads", "breakdown", "blocks", "script"])]
    budget: bool,
    /// Show the processes `lopi run` or `lopi attach -f` followed: each one's parent, wall time, how it ended,
    /// its command line, and the system calls made before its probes went live.
    #[arg(long, conflicts_with_all = ["callers", "callees", "syscalls", "locks", "threads", "breakdown", "blocks", "script", "budget"])]
    processes: bool,
}

impl ReportViews {
    /// The view the flags choose (clap lets through at most one); none: the functions.
    pub(crate) fn view(self) -> View {
        if self.script {
            View::Script
        } else if let Some(func) = self.blocks {
            View::Blocks(func)
        } else if self.breakdown {
            View::Breakdown
        } else if self.threads {
            View::Threads
        } else if self.locks {
            View::Locks
        } else if self.syscalls {
            View::Syscalls
        } else if self.budget {
            View::Budget
        } else if self.processes {
            View::Processes
        } else if let Some(func) = self.callers {
            View::Callers(func)
        } else if let Some(func) = self.callees {
            View::Callees(func)
        } else {
            View::Functions
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct Select {
    /// Probe only functions whose name matches (glob; repeatable).
    #[arg(long = "functions", value_name = "GLOB")]
    include: Vec<String>,
    /// Do not probe functions whose name matches (glob; repeatable).
    #[arg(long = "exclude", value_name = "GLOB")]
    exclude: Vec<String>,
    /// Where probes go: `entry` counts calls; `entry,exit` also times them (per thread,
    /// with calling contexts); `syscall` counts and times every system call the code makes;
    /// `locks` times every lock, semaphore, condition-variable and barrier call in libc (see
    /// `lopi report --locks`); `block` counts every basic block, `coverage` marks those that
    /// ran; `entry:mark` marks the functions that ran (`lopi coverage`). PLACE:MEASURE spells
    /// any of them: entry:count, entry:time, entry:mark, block:count, block:mark.
    #[arg(long, value_delimiter = ',', default_value = "entry", value_parser = probe_arg::parse)]
    probe: Vec<Probe>,
}

/// `--functions`/`--exclude` for a live process: `GLOB` names functions of the main
/// executable, `LIB:GLOB` functions of a loaded library (`libc.so.6:malloc`, `libc:str*`).
#[derive(clap::Args)]
pub(crate) struct LiveSelect {
    /// Probe only functions whose name matches: GLOB in the executable, LIB:GLOB in a
    /// loaded library (repeatable) [default: every function of the executable].
    #[arg(long = "functions", value_name = "[LIB:]GLOB")]
    include: Vec<String>,
    /// Do not probe functions whose name matches ([LIB:]GLOB; repeatable).
    #[arg(long = "exclude", value_name = "[LIB:]GLOB")]
    exclude: Vec<String>,
    /// Where probes go: `entry` counts calls; `entry,exit` also times them; `syscall` counts
    /// and times every system call, in the executable and every loaded library; `locks`,
    /// `block`, `coverage` and `entry:mark` as for `lopi rewrite` (PLACE:MEASURE spells any).
    #[arg(long, value_delimiter = ',', default_value = "entry", value_parser = probe_arg::parse)]
    probe: Vec<Probe>,
    /// Compile this C file (`lopi handler-header` prints the lopi.h it includes) into the
    /// probes: its lopi_enter and lopi_leave run at every selected function's entry and
    /// return (timed), lopi_syscall_enter and lopi_syscall_leave around every system call.
    #[arg(long, value_name = "FILE.c")]
    handler: Option<PathBuf>,
    /// With --probe syscall, also catch the system calls of code no probe covers (JIT code,
    /// code a program writes at run time) with Syscall User Dispatch (Linux 5.11), counted
    /// at `[unprobed code]`. Off by default: the kernel's check costs every system call of
    /// the program about 25 ns, and each caught call a signal (about 1 us; 50 us when lopi
    /// follows the tree, whose tracer sees each signal: --no-follow).
    #[arg(long)]
    catch_unprobed: bool,
}

impl LiveSelect {
    pub(crate) fn probes(self, trace: bool, timing: Timing, cache: Option<PlanCache>) -> Result<live::Probes> {
        let mut probes = probe_set(&self.probe)?;
        if trace {
            probes = probes.union(Probes::TIME);
        }
        let script = match &self.handler {
            Some(path) => {
                let spec = lopi_image::script::ScriptSpec::handler(handler::build(path)?);
                probes = spec.add_probes(probes);
                Some(std::sync::Arc::new(spec))
            }
            None => None,
        };
        let recording = timing.recording(trace, probes, script.is_some())?;
        // Lock probes probe the `syscall`s of the lock functions alone: the rest of the
        // program's calls are not theirs to catch.
        let recording = lopi_image::Recording { catch_unprobed: probes.has(Place::Syscalls) && self.catch_unprobed, ..recording };
        Ok(live::Probes { include: self.include, exclude: self.exclude, probes, recording, cache, script, count_only: Vec::new(), record: None, follow: false })
    }
}

/// `--budget` and `--time`: how much timing may slow the program down, and how it measures.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct Timing {
    /// Keep timing's cost within this share of each thread's CPU time (5%, 2.5): the probes measure which
    /// timed functions are so short and frequent that timing them costs more, and switch those
    /// to counting as the program runs (their time then shows in their callers' self time;
    /// `lopi report` lists what was switched and when). `LOPI_BUDGET` in the program's
    /// environment overrides it.
    #[arg(long, value_name = "PERCENT", value_parser = parse_budget)]
    budget: Option<u32>,
    /// How --probe entry,exit times calls: `exact` reads the clock at every entry and exit;
    /// `sampled` keeps every call's count and calling context exact and attributes each
    /// thread's CPU time by sampling it (--sample-hz), at a fraction of exact timing's cost.
    #[arg(long, value_enum, default_value_t = TimeMode::Exact)]
    time: TimeMode,
    /// Samples per second of each thread's CPU time, with --time sampled.
    #[arg(long, value_name = "HZ", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    sample_hz: u32,
    /// The budget when none is given and exact timing is on (a continuous push's).
    #[arg(skip)]
    default_budget: Option<u32>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum TimeMode {
    Exact,
    Sampled,
}

impl Timing {
    /// A continuous push (`--push`) keeps exact timing's cost bounded by default.
    pub(crate) fn pushing(self, push: bool) -> Timing {
        Timing { default_budget: push.then_some(crate::continuous::PUSH_BUDGET_PPM), ..self }
    }

    /// What the probes record, checked against the probes chosen (`scripted`: a probe script
    /// or C handler runs in them).
    pub(crate) fn recording(self, trace: bool, probes: Probes, scripted: bool) -> Result<Recording> {
        let timed = probes.is(Place::Entries, Measure::Time);
        let budget = self.budget.or(self.default_budget.filter(|_| timed && self.time == TimeMode::Exact && !trace && !scripted));
        if self.budget.is_some() && !timed {
            bail!("--budget limits the cost of timing: use it with --probe entry,exit");
        }
        let sample_hz = match self.time {
            TimeMode::Exact => 0,
            TimeMode::Sampled => {
                let clash = [
                    (!timed, "it times calls: use it with --probe entry,exit"),
                    (self.budget.is_some(), "it needs no --budget: its cost does not grow with the calls timed"),
                    (trace, "a trace's timestamps need exact time"),
                    (probes.probes_system_calls(), "system-call and lock probes time waits, which CPU-time samples do not see: use --time exact"),
                    (scripted, "scripts and handlers read exact durations: use --time exact"),
                ];
                if let Some((_, why)) = clash.iter().find(|(bad, _)| *bad) {
                    bail!("--time sampled: {why}");
                }
                self.sample_hz
            }
        };
        Ok(Recording { trace, budget_ppm: budget.unwrap_or(0), sample_hz, syscall_log: false, catch_unprobed: false })
    }
}

/// A share of CPU time in percent (`5%`, `2.5`), as parts per million.
fn parse_budget(text: &str) -> Result<u32, String> {
    let number = text.strip_suffix('%').unwrap_or(text).trim();
    match number.parse::<f64>() {
        Ok(p) if p > 0.0 && p < 100.0 => Ok((p * 10_000.0).round().max(1.0) as u32),
        _ => Err(format!("{text:?} is not a percentage between 0 and 100 (such as 5%)")),
    }
}

impl Select {
    pub(crate) fn filter(&self) -> Result<Filter> {
        let compile = |globs: &[String]| -> Result<Vec<glob::Pattern>> {
            globs.iter().map(|g| glob::Pattern::new(g).with_context(|| format!("bad glob {g:?}"))).collect()
        };
        Ok(Filter { include: compile(&self.include)?, exclude: compile(&self.exclude)? })
    }

    pub(crate) fn probes(&self) -> Result<Probes> {
        probe_set(&self.probe)
    }
}
