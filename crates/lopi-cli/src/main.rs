//! The `lopi` command: argument parsing, files, and output. The libraries do the work.
#![deny(unsafe_code)]

mod blocks;
mod breakdown;
mod coverage;
mod demo;
mod ends;
mod exports;
mod handler;
mod live;
mod locks;
mod names;
mod parallelism;
mod progress;
mod rewrite;
mod scale;
mod scaling;
mod show;
mod syscalls;
mod threads;
mod trace;
mod whatif;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use exports::{ExportFormat, ProfileArg, WeightArg};
use lopi_cache::{Lookup, ModuleFile, PlanCache};
use lopi_elf::ElfModule;
use lopi_patch::{Filter, Probes, Selection};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(name = "lopi", version, about = "Low-perturbation instrumentation of x86-64 Linux programs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Plan every module anew and keep no plan (as LOPI_CACHE=off); see `lopi cache`.
    #[arg(long, global = true)]
    no_cache: bool,
}

#[derive(Subcommand)]
enum Command {
    /// List the functions of PROG and how each would be probed, or why not.
    Info {
        prog: PathBuf,
        #[command(flatten)]
        select: Select,
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
        budget: Budget,
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
    },
    /// Run PROG with probes spliced in at its entry point (no rewritten file); the record
    /// reads with `lopi report` as for a rewritten program.
    Run {
        #[command(flatten)]
        select: LiveSelect,
        /// Also record every entry and exit with a timestamp (implies --probe entry,exit).
        #[arg(long)]
        trace: bool,
        #[command(flatten)]
        budget: Budget,
        /// Print nothing; lopi exits as the program did (same code or signal).
        #[arg(short, long)]
        quiet: bool,
        /// The program's argv[0] (default: PROG as given), as `exec -a` does: for programs that
        /// behave by the name they are called by (a wrapper passes its own `$0`).
        #[arg(long, value_name = "NAME")]
        arg0: Option<std::ffi::OsString>,
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
        budget: Budget,
        /// Detach after this long (10s, 500ms, 2m) [default: on Ctrl-C].
        #[arg(long, value_parser = live::parse_duration)]
        duration: Option<std::time::Duration>,
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
        /// The script's file (or use -e).
        #[arg(required_unless_present = "expr", conflicts_with = "expr", value_name = "SCRIPT")]
        file: Option<PathBuf>,
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

#[derive(clap::Args)]
struct Select {
    /// Probe only functions whose name matches (glob; repeatable).
    #[arg(long = "functions", value_name = "GLOB")]
    include: Vec<String>,
    /// Do not probe functions whose name matches (glob; repeatable).
    #[arg(long = "exclude", value_name = "GLOB")]
    exclude: Vec<String>,
    /// Where probes go: `entry` counts calls; `entry,exit` also times them (per thread,
    /// with calling contexts); `syscall` counts and times every system call the code makes;
    /// `locks` times every lock, semaphore, condition-variable and barrier call in libc (see
    /// `lopi report --locks`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "entry")]
    probe: Vec<Probe>,
}

/// `--functions`/`--exclude` for a live process: `GLOB` names functions of the main
/// executable, `LIB:GLOB` functions of a loaded library (`libc.so.6:malloc`, `libc:str*`).
#[derive(clap::Args)]
struct LiveSelect {
    /// Probe only functions whose name matches: GLOB in the executable, LIB:GLOB in a
    /// loaded library (repeatable) [default: every function of the executable].
    #[arg(long = "functions", value_name = "[LIB:]GLOB")]
    include: Vec<String>,
    /// Do not probe functions whose name matches ([LIB:]GLOB; repeatable).
    #[arg(long = "exclude", value_name = "[LIB:]GLOB")]
    exclude: Vec<String>,
    /// Where probes go: `entry` counts calls; `entry,exit` also times them; `syscall` counts
    /// and times every system call, in the executable and every loaded library.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "entry")]
    probe: Vec<Probe>,
    /// Compile this C file (`lopi handler-header` prints the lopi.h it includes) into the
    /// probes: its lopi_enter and lopi_leave run at every selected function's entry and
    /// return (timed), lopi_syscall_enter and lopi_syscall_leave around every system call.
    #[arg(long, value_name = "FILE.c")]
    handler: Option<PathBuf>,
}

impl LiveSelect {
    fn probes(self, trace: bool, budget: Budget, cache: Option<PlanCache>) -> Result<live::Probes> {
        let mut probes = probe_set(&self.probe)?;
        probes.exits |= trace;
        probes.entries |= trace;
        let script = match &self.handler {
            Some(path) => {
                let spec = lopi_image::script::ScriptSpec::handler(handler::build(path)?);
                probes = spec.add_probes(probes);
                Some(std::sync::Arc::new(spec))
            }
            None => None,
        };
        let budget_ppm = budget.ppm(probes.exits)?;
        Ok(live::Probes { include: self.include, exclude: self.exclude, probes, trace, budget_ppm, cache, script, count_only: Vec::new(), record: None })
    }
}

/// `--probe` as a set.
fn probe_set(probe: &[Probe]) -> Result<Probes> {
    let probes = Probes {
        entries: probe.contains(&Probe::Entry),
        exits: probe.contains(&Probe::Exit),
        syscalls: probe.contains(&Probe::Syscall),
        locks: probe.contains(&Probe::Locks),
        blocks: probe.contains(&Probe::Block),
        coverage: probe.contains(&Probe::Coverage),
    };
    if probes.blocks && probe.iter().any(|&p| p != Probe::Block) {
        bail!("--probe block counts every block of the selected functions; it does not combine with other probes yet (the entry block counts the calls)");
    }
    if probes.coverage && probe.iter().any(|&p| p != Probe::Coverage) {
        bail!("--probe coverage records which blocks of the selected functions ran; it does not combine with other probes");
    }
    if probes.exits && !probes.entries {
        bail!("--probe exit needs `entry`: exits are timed against their entries (use --probe entry,exit)");
    }
    Ok(probes)
}

/// `--budget`: how much timing may slow the program down.
#[derive(clap::Args, Clone, Copy)]
struct Budget {
    /// Keep timing's cost within this share of the run time (5%, 2.5): the probes measure which
    /// timed functions are so short and frequent that timing them costs more, and switch those
    /// to counting as the program runs (their time then shows in their callers' self time;
    /// `lopi report` lists what was switched and when). `LOPI_BUDGET` in the program's
    /// environment overrides it.
    #[arg(long, value_name = "PERCENT", value_parser = parse_budget)]
    budget: Option<u32>,
}

impl Budget {
    fn ppm(self, timing: bool) -> Result<u32> {
        match self.budget {
            Some(_) if !timing => bail!("--budget limits the cost of timing: use it with --probe entry,exit"),
            budget => Ok(budget.unwrap_or(0)),
        }
    }
}

/// A share of the run time in percent (`5%`, `2.5`), as parts per million.
fn parse_budget(text: &str) -> Result<u32, String> {
    let number = text.strip_suffix('%').unwrap_or(text).trim();
    match number.parse::<f64>() {
        Ok(p) if p > 0.0 && p < 100.0 => Ok((p * 10_000.0).round().max(1.0) as u32),
        _ => Err(format!("{text:?} is not a percentage between 0 and 100 (such as 5%)")),
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Probe {
    Entry,
    Exit,
    Syscall,
    Locks,
    /// Every basic block of the selected functions: executions counted.
    Block,
    /// Whether each basic block of the selected functions ran: a one-byte mark per set of
    /// blocks that run together (`lopi coverage`).
    Coverage,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

impl Select {
    fn filter(&self) -> Result<Filter> {
        let compile = |globs: &[String]| -> Result<Vec<glob::Pattern>> {
            globs.iter().map(|g| glob::Pattern::new(g).with_context(|| format!("bad glob {g:?}"))).collect()
        };
        Ok(Filter { include: compile(&self.include)?, exclude: compile(&self.exclude)? })
    }

    fn probes(&self) -> Result<Probes> {
        probe_set(&self.probe)
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(err) = run(cli) {
        match err.downcast_ref::<trace::Refused>() {
            // Diagnostics say `error:` themselves, rustc's way.
            Some(refused) => eprintln!("{refused}"),
            None => eprintln!("lopi: error: {}", one_line(&err)),
        }
        std::process::exit(1);
    }
}

/// An error and its causes on one line, each said once: a cause whose text its context
/// already holds is left out (a `thiserror` message that shows its source, then the source),
/// and a context that a cause repeats with more is replaced by it.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if parts.iter().any(|p| p.contains(&text)) {
            continue;
        }
        match parts.last_mut() {
            Some(last) if text.starts_with(last.as_str()) => *last = text,
            _ => parts.push(text),
        }
    }
    parts.join(": ")
}

fn run(cli: Cli) -> Result<()> {
    let cache = progress::plan_cache(cli.no_cache);
    match cli.command {
        Command::Info { prog, select, format } => {
            let file = read(&prog)?;
            let debug = debug_file(&prog, &file);
            let mut module = parse(&prog, &file, debug.as_ref())?;

            let bar = progress::Bar::new(&format!("planning {}", progress::file_name(&prog)), true);
            let probes = select.probes()?;
            let (selection, lookup) = plan(&file, debug.as_ref(), &mut module, &select.filter()?, probes, cache.as_ref(), &bar);
            drop(bar);
            note(&lookup);
            if probes.blocks || probes.coverage {
                return match format {
                    Format::Json => print_json(&blocks::info_json(&module, &selection.blocks)),
                    Format::Text => print(&blocks::info_text(&selection.blocks)),
                };
            }
            let summary = show::Summary::new(&module, &selection.outcomes, &selection.timing);
            match format {
                Format::Json => {
                    let mut info = show::info_json(&prog, &module, &selection, &summary);
                    if probes.syscalls || probes.locks {
                        info["syscalls"] = syscalls::info_json(&module, &selection.syscalls);
                    }
                    print_json(&info)
                }
                Format::Text if probes.entries || probes.locks => print(&show::info_text(&module, &selection, &summary)),
                Format::Text => Ok(()),
            }?;
            if (probes.syscalls || probes.locks) && format == Format::Text {
                print(&syscalls::info_text(&module, &selection.syscalls))?;
            }
            Ok(())
        }
        Command::Rewrite { prog, output, select, trace, budget, script, script_expr, handler } => {
            let mut probes = select.probes()?;
            probes.entries |= trace;
            probes.exits |= trace;
            let recording = lopi_rewrite::Recording { trace, budget_ppm: budget.ppm(probes.exits)? };
            let script = match (script, script_expr) {
                (Some(path), _) => Some((std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?, path.display().to_string())),
                (None, Some(text)) => Some((text, "--script-expr".to_string())),
                (None, None) => None,
            };
            let script = match handler {
                Some(path) => Some(rewrite::Script::Handler(Box::new(handler::build(&path)?))),
                None => script.map(|(text, name)| rewrite::Script::Text(text, name)),
            };
            let (summary, lookup) = rewrite::rewrite(&prog, &output, &select.filter()?, probes, recording, script, cache.as_ref())?;
            let (from, note_text) = progress::lookup_text(&lookup);
            eprintln!("lopi: wrote {}: {summary}{from}", output.display());
            if let Some(text) = note_text {
                eprintln!("lopi: note: {text}");
            }
            Ok(())
        }
        Command::Coverage { data, format, output } => coverage::run(&read_data(&data)?, format, output.as_deref()),
        Command::Report { data, format, top, callers, callees, syscalls, locks, threads, breakdown, blocks, script, budget } => {
            if script {
                return trace::report(&data, format == Format::Json);
            }
            let file = read_data(&data)?;
            if let Some(func) = blocks {
                let modules = lopi_trace::ModuleBlocks::from_data(&file);
                return match format {
                    Format::Json => print_json(&blocks::report_json(&modules, &func)?),
                    Format::Text => print(&blocks::report_text(&modules, &func)?),
                };
            }
            if breakdown {
                let report = lopi_trace::Threads::from_data(&file);
                if !report.threads.iter().any(|t| t.cpu.is_some()) {
                    bail!("{} has no thread CPU times: run the program with --probe syscall,locks (its threads' exit and exit_group calls record them)", data.display());
                }
                return match format {
                    Format::Json => print_json(&breakdown::report_json(&file, &report)),
                    Format::Text => print(&breakdown::report_text(&file, &report)),
                };
            }
            if threads {
                let report = lopi_trace::Threads::from_data(&file);
                if report.threads.is_empty() {
                    bail!("{} has no thread data: run the program with --probe locks", data.display());
                }
                return match format {
                    Format::Json => print_json(&threads::report_json(&file, &report)),
                    Format::Text => print(&threads::report_text(&file, &report)),
                };
            }
            if locks {
                let report = lopi_trace::Locks::from_data(&file);
                // A module with lock probes records the process's memory map at its start: with
                // one, the program simply took no lock (dash), and the report says so.
                if report.locks.is_empty() && file.maps.is_empty() {
                    bail!("{} has no lock data: record the program with --probe locks (lopi run, rewrite or attach)", data.display());
                }
                return match format {
                    Format::Json => print_json(&locks::report_json(&file, &report)),
                    Format::Text => print(&locks::report_text(&file, &report, top)),
                };
            }
            if syscalls {
                let Some(report) = lopi_trace::Syscalls::from_data(&file) else {
                    bail!("{} has no system-call data: record the program with --probe syscall (lopi run, rewrite or attach)", data.display());
                };
                return match format {
                    Format::Json => print_json(&report),
                    Format::Text => print(&syscalls::report_text(&report, top)),
                };
            }
            let profile = lopi_trace::Profile::from_data(&file);
            if budget {
                let Some(text) = show::budget_text(&profile) else {
                    bail!("{} has no budget data: record the program with --probe entry,exit --budget 5% (lopi run, rewrite or attach)", data.display());
                };
                return match format {
                    Format::Json => print_json(&show::budget_json(&profile)),
                    Format::Text => print(&text),
                };
            }
            if let Some((name, is_callers)) = callers.map(|c| (c, true)).or(callees.map(|c| (c, false))) {
                if profile.timing.is_none() {
                    bail!("{} has no timing data: record the program with --probe entry,exit (lopi run, rewrite or attach)", data.display());
                }
                if !profile.functions.iter().any(|f| f.name == name) {
                    bail!("no function named {name:?} in {}", data.display());
                }
                let edges: Vec<_> = profile
                    .edges
                    .iter()
                    .filter(|e| if is_callers { e.callee == name } else { e.caller.as_deref() == Some(name.as_str()) })
                    .collect();
                return match format {
                    Format::Json => print_json(&edges),
                    Format::Text => print(&show::edges_text(&profile, &name, is_callers)),
                };
            }
            match format {
                Format::Json => print_json(&profile),
                Format::Text => {
                    print(&show::report_text(&profile, top))?;
                    if !lopi_trace::Locks::from_data(&file).locks.is_empty() {
                        print(&format!("note: lock calls were recorded: see `lopi report {0} --locks` and `--threads`\n", data.display()))?;
                    }
                    Ok(())
                }
            }
        }
        Command::Flamegraph { data, output, weight, title } => exports::flamegraph(&data, &output, weight, title),
        Command::Export { data, format, output, weight, profile } => exports::export(&data, &output, format, weight, profile),
        Command::Run { select, trace, budget, quiet, arg0, command } => {
            live::run(&select.probes(trace, budget, cache)?, &command, arg0, quiet)
        }
        Command::Attach { pid, select, trace, budget, duration } => live::attach(&select.probes(trace, budget, cache)?, pid, duration),
        Command::HandlerHeader => print(handler::HEADER),
        Command::Cache { clear } => show_cache(cache.as_ref(), clear),
        Command::Demo { which, dir } => demo::run(which, dir),
        Command::Trace { file, expr, format, output, max_entries, pid, duration, record, command } => {
            let (source, source_name) = match (expr, file) {
                (Some(text), _) => (text, "-e".to_string()),
                (None, Some(path)) => (std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?, path.display().to_string()),
                (None, None) => bail!("lopi trace needs a script: a file, or -e 'PROGRAM'"),
            };
            trace::run(trace::Request { source, source_name, json: format == Format::Json, output, max_entries, pid, duration, record, command, cache })
        }
        Command::Whatif { kernel, proxy_wait, cpus, runs, format, command } => {
            whatif::run(whatif::Request { kernel, proxy_wait, cpus, runs, json: format == Format::Json, command })
        }
        Command::Scale { cpus, runs, output, breakdown, format, command } => {
            scale::run(scale::Request { cpus, runs, breakdown, chart: output, json: format == Format::Json, command })
        }
    }
}

/// Writes to stdout; a reader that went away (`lopi info x | head`) ends the output quietly.
pub(crate) fn print(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    print(&(serde_json::to_string_pretty(value)? + "\n"))
}

/// Reads a data file through a mapping: thread chunks reserve room for their trees and
/// traces that mostly stays sparse, and only the used parts are ever touched. What is damaged
/// is said on stderr, one line each, and the rest is read; a file without one whole module
/// record is an error.
#[allow(unsafe_code)]
pub(crate) fn read_data(path: &Path) -> Result<lopi_trace::DataFile> {
    let name = path.display();
    let file = std::fs::File::open(path).with_context(|| format!("reading {name}"))?;
    if file.metadata()?.len() == 0 {
        bail!("{name} is empty, not a lopi data file");
    }
    // SAFETY: the mapping is read-only and private to this process. A program still running
    // may write counters into the file meanwhile; the parser treats every byte as untrusted
    // and copies what it keeps, so changing bytes can only change the numbers read.
    let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {name}"))?;
    let data = lopi_trace::DataFile::parse(&map).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    if data.records.is_empty() {
        if let Some(first) = data.damage.first() {
            let more = match data.damage.len() {
                1 => String::new(),
                n => format!(" (and {} more damaged parts)", n - 1),
            };
            bail!("{name} is damaged and holds no whole module record: {first}{more}; record the run again");
        }
        if data.truncated {
            bail!("{name} holds no whole module record: its process died while registering it; record the run again");
        }
        bail!("{name} holds no module record: its process ended before lopi's runtime started; record the run again");
    }
    const SHOWN: usize = 5;
    for damage in data.damage.iter().take(SHOWN) {
        eprintln!("lopi: warning: {name}: {damage}; skipped, the rest is read");
    }
    if data.damage.len() > SHOWN {
        eprintln!("lopi: warning: {name}: {} more damaged parts skipped", data.damage.len() - SHOWN);
    }
    Ok(data)
}

pub(crate) fn read(path: &Path) -> Result<ModuleFile> {
    lopi_cache::read_file(path).with_context(|| format!("reading {}", path.display()))
}

/// The planner's selection for `module`, read from `file`: from the plan cache when it holds
/// one for the same inputs, else planned (and cached).
/// The module's selection, from the plan cache or planned (the module is analysed either way).
pub(crate) fn plan(
    file: &ModuleFile,
    debug: Option<&lopi_elf::DebugFile>,
    module: &mut ElfModule<'_>,
    filter: &Filter,
    probes: Probes,
    cache: Option<&PlanCache>,
    bar: &progress::Bar,
) -> (Selection, Lookup) {
    let key = file.id.map(|id| lopi_cache::plan_key(id, file, debug, filter, probes));
    lopi_cache::selection(cache, key.as_ref(), module, |module| {
        let analysis = lopi_patch::analyse_with(module, bar);
        let selection = lopi_patch::select_with(module, &analysis, filter, probes, bar);
        (analysis.fragments, selection)
    })
}

fn note(lookup: &Lookup) {
    if let (_, Some(text)) = progress::lookup_text(lookup) {
        eprintln!("lopi: note: {text}");
    }
}

/// `lopi cache [--clear]`.
fn show_cache(cache: Option<&PlanCache>, clear: bool) -> Result<()> {
    let Some(cache) = cache else {
        eprintln!("lopi: the plan cache is off ({}=off or --no-cache)", progress::CACHE_ENV);
        return Ok(());
    };
    let store = cache.store();
    let dir = store.dir().display();
    if clear {
        let removed = store.clear().with_context(|| format!("clearing {dir}"))?;
        eprintln!("lopi: removed {} from {dir}", entries(removed));
        return Ok(());
    }
    let listed = match store.entries() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        other => other.with_context(|| format!("reading {dir}"))?,
    };
    let bytes: u64 = listed.iter().map(|(_, len)| len).sum();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    print(&format!(
        "{dir}: {} (plans and laid-out images), {:.1} MiB of at most {:.0} MiB (the least recently used go first)\n",
        entries(listed.len()),
        mib(bytes),
        mib(lopi_cache::DEFAULT_LIMIT)
    ))
}

fn entries(n: usize) -> String {
    format!("{n} {}", if n == 1 { "entry" } else { "entries" })
}

/// The separate debug file of `path`, if it has one.
pub(crate) fn debug_file(path: &Path, data: &[u8]) -> Option<lopi_elf::DebugFile> {
    lopi_elf::DebugFile::find(path, data, &lopi_elf::debug_dir())
}

/// Parses `path` for planning, with the symbols of its separate debug file if it has one.
pub(crate) fn parse<'d>(path: &Path, data: &'d [u8], debug: Option<&lopi_elf::DebugFile>) -> Result<ElfModule<'d>> {
    ElfModule::parse_with_debug(data, debug).with_context(|| format!("{}", path.display()))
}

/// Rewrites `prog` into `output`; returns the summary line and where the plan came from.
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// An error whose message shows its source, as `thiserror`'s `{source}` does.
    #[derive(Debug)]
    struct Start(std::io::Error);

    impl std::fmt::Display for Start {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "starting prog: {}", self.0)
        }
    }

    impl std::error::Error for Start {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_are_said_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let inner = anyhow::Error::new(Start(io()));
        assert_eq!(one_line(&inner), "starting prog: entity not found", "a message that shows its source");
        assert_eq!(one_line(&inner.context("starting prog")), "starting prog: entity not found", "a context the message repeats");
        let plain = anyhow::Error::new(io()).context("reading f").context("installing probes");
        assert_eq!(one_line(&plain), "installing probes: reading f: entity not found", "distinct causes stay");
    }
}
