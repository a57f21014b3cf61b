//! `lopi trace`: a probe script (lopi-script) compiled into the program's probe image and run
//! by the program's own threads. lopi prints what the probes print while the program runs
//! (from each thread's output ring in the data file), runs `begin`, `interval:` and `end`
//! itself, and prints the maps when the program ends, or when a probe calls `exit()`.
mod probed;
mod python;
mod resolve;
mod session;
mod usdt;

pub use probed::check_probes;
pub use resolve::{instruction_points, needed_libraries, Functions};

use crate::live::{self, Probes};
use anyhow::{anyhow, bail, Context, Result};
use lopi_image::script::ScriptSpec;
use lopi_patch::Probes as ProbeSet;
use lopi_script::ir::{Point, Program};
use session::{Phase, Session};
use crate::names::Namer;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of each thread's output ring.
pub const RING_LEN: u64 = 1 << 20;
/// How often the rings are read while the program runs.
const POLL: Duration = Duration::from_millis(20);

/// What `lopi trace` was asked.
pub struct Request {
    /// The script's text, and the name diagnostics give it (`-e` or the file's path).
    pub source: String,
    pub source_name: String,
    pub json: bool,
    /// Where lopi's output goes instead of stdout.
    pub output: Option<PathBuf>,
    /// Most keys per map (default: lopi-script's).
    pub max_entries: Option<u32>,
    /// A running process to trace instead of a command, for `duration` (else until Ctrl-C).
    pub pid: Option<i32>,
    pub duration: Option<Duration>,
    /// Where to keep the record; `None`: a temporary file, removed at the end.
    pub record: Option<PathBuf>,
    pub command: Vec<OsString>,
    pub cache: Option<lopi_cache::PlanCache>,
}

/// A script the checker refused: its diagnostics, rendered.
#[derive(Debug)]
pub struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The program's path as `exec` would find it.
pub(crate) fn find_program(program: &OsString) -> Result<PathBuf> {
    let given = Path::new(program);
    if given.components().count() > 1 {
        return Ok(given.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(given))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| anyhow!("cannot start {}: no such program in PATH (give its path)", given.display()))
}

/// A script checked against the functions `names` (its points must name some), with its
/// options; refused, with the reason, when a point is of a kind not built yet.
pub fn compile_script(source: &str, source_name: &str, max_entries: Option<u32>, ring_len: u64, resolver: resolve::Functions<'_>) -> Result<ScriptSpec> {
    let mut program = lopi_script::compile_front(source, &resolver).map_err(|d| Refused(d.render(source, source_name).trim_end().to_string()))?;
    if let Some(entries) = max_entries {
        program.set_max_entries(entries);
    }
    // A library named by path, as the process maps it: planning and hooks compare the text.
    // The program named as a library is the program; a library glibc emptied into libc is libc.
    for point in program.probes.iter_mut().flat_map(|p| &mut p.points) {
        if let Point::FuncEntry { lib: Some(l), glob } | Point::FuncReturn { lib: Some(l), glob } = point {
            if let Some(libc) = resolver.moved_to_libc(l, glob) {
                eprintln!("lopi: `{l}:{glob}` is in {libc}: glibc 2.34 moved {l}'s functions there (bpftrace 0.17 finds none in {l})");
                *l = libc;
            }
        }
        if let Point::FuncEntry { lib, .. } | Point::FuncReturn { lib, .. } | Point::FuncOffset { lib, .. } = point {
            *lib = lib.take().filter(|l| !resolver.is_program(l)).map(|l| resolve::canonical_library(&l));
        }
    }
    let mut rates = program.probes.iter().flat_map(|p| &p.points).filter_map(|p| if let Point::Profile { ns } = p { Some(*ns) } else { None });
    if let Some(first) = rates.next() {
        if rates.any(|ns| ns != first) {
            bail!("a script's `profile:` points sample at one rate: each of them fires at every sample");
        }
    }
    for point in program.probes.iter().flat_map(|p| &p.points) {
        let supported = matches!(
            point,
            Point::FuncEntry { .. } | Point::FuncReturn { .. } | Point::SyscallEntry { .. } | Point::SyscallReturn { .. } | Point::Lock(_) | Point::ThreadStart | Point::ThreadExit | Point::Addr(_) | Point::FuncOffset { .. } | Point::Usdt { .. } | Point::Begin | Point::End | Point::Interval { .. } | Point::Profile { .. }
        );
        if !supported {
            bail!("`{point}`: lopi trace runs func:[LIB:]GLOB[:return], func:NAME+OFF, addr:, usdt:, syscall:GLOB[:return], lock:EVENT, thread:start|exit, begin, end and interval: points so far; this kind of point is not built yet");
        }
    }
    Ok(ScriptSpec::new(program, source, max_entries, ring_len))
}

/// The globs of the script's points in the program itself, and of the probes it only counts
/// with.
fn all_globs(spec: &ScriptSpec) -> Vec<&str> {
    let points = spec.program.probes.iter().flat_map(|p| &p.points).filter_map(|point| match point {
        Point::FuncEntry { lib: None, glob } | Point::FuncReturn { lib: None, glob } => Some(glob.as_str()),
        _ => None,
    });
    points.chain(spec.counted.iter().flat_map(|c| c.probes.iter().flatten().map(String::as_str))).collect()
}

/// The functions the script names, as `--functions` takes them (`LIB:GLOB` in a library).
pub fn function_globs(spec: &ScriptSpec) -> Vec<String> {
    let escape = |glob: &str| if glob::Pattern::new(glob).is_ok() { glob.to_string() } else { glob::Pattern::escape(glob) };
    let in_libraries = spec.program.probes.iter().flat_map(|p| &p.points).filter_map(|point| match point {
        Point::FuncEntry { lib: Some(lib), glob } | Point::FuncReturn { lib: Some(lib), glob } => Some(format!("{lib}:{}", escape(glob))),
        _ => None,
    });
    let mut globs: Vec<String> = all_globs(spec).into_iter().map(escape).chain(in_libraries).collect();
    globs.sort();
    globs.dedup();
    globs
}

/// Every function name of `module`, aliases too (points may name either).
pub fn all_names<'m>(module: &'m lopi_elf::ElfModule<'_>) -> Vec<&'m str> {
    module.functions.iter().flat_map(|f| std::iter::once(f.name.as_str()).chain(f.aliases.iter().map(String::as_str))).collect()
}

/// The functions (by name) of `module` the script only counts calls of: counted, not timed.
pub fn count_only(spec: &ScriptSpec, module: &lopi_elf::ElfModule<'_>) -> Vec<String> {
    module.functions.iter().filter(|f| probed::counted_by_probes(spec, f) && !probed::named_by_points(spec, None, f)).map(|f| f.name.clone()).collect()
}

/// `lopi trace SCRIPT -- PROG ARGS` or `lopi trace SCRIPT -p PID`: exits as the program did.
pub fn run(request: Request) -> Result<()> {
    match trace(request)? {
        Some(ended) => live::exit_like(ended.status, &ended.blocked),
        None => Ok(()),
    }
}

/// How a program lopi started ended: its status, and the signals lopi blocked while it ran
/// (for [`live::exit_like`]).
pub struct Ended {
    pub status: std::process::ExitStatus,
    pub blocked: nix::sys::signal::SigSet,
}

/// Traces the program or process of `request`; how the program ended, if lopi started it.
pub fn trace(request: Request) -> Result<Option<Ended>> {
    let _records = TemporaryRecords(request.record.is_none().then(|| format!("lopi-trace-{}.", std::process::id())));
    // bpftrace's `elapsed` counts from its start.
    let started = session::monotonic_ns();
    let path = match (request.pid, request.command.first()) {
        (Some(pid), _) => {
            lopi_live::preflight(pid)?;
            std::fs::read_link(format!("/proc/{pid}/exe")).with_context(|| format!("finding the program of process {pid} (/proc/{pid}/exe)"))?
        }
        (None, Some(program)) => find_program(program)?,
        (None, None) => bail!("lopi trace needs a program to run or a process: lopi trace SCRIPT -- PROG ARGS, or lopi trace SCRIPT -p PID"),
    };
    // Through the process's root, as its loader saw the file.
    let readable = request.pid.map_or_else(|| path.clone(), |pid| PathBuf::from(format!("/proc/{pid}/exe")));
    let file = lopi_cache::read_file(&readable).with_context(|| format!("reading {}", path.display()))?;
    let debug = lopi_elf::DebugFile::find(&path, &file, &lopi_elf::debug_dir());
    let mut module = lopi_elf::ElfModule::parse_with_debug(&file, debug.as_ref()).with_context(|| format!("{}", path.display()))?;
    let analysis = lopi_patch::analyse(&mut module);
    let names = all_names(&module);
    let libraries = match request.pid {
        Some(pid) => resolve::mapped_libraries(pid),
        None => resolve::needed_libraries(&path),
    };
    let mut spec = compile_script(&request.source, &request.source_name, request.max_entries, RING_LEN, resolve::Functions::new(names, libraries.clone()).of_program(&path))?;
    spec.point_addrs = resolve::instruction_points(&spec.program, &module)?;
    spec.start_ns = started;
    let library_file = |lib: &str| resolve::library_file(&libraries, lib);
    let (markers, semaphores) = usdt::sites(&spec.program, &module, &analysis, &path, |lib| resolve::names_program(lib, &path), library_file)?;
    spec.markers = markers;
    python::check(&spec.program, &module, &path, &libraries)?;
    let spec = Arc::new(spec);
    let probe_set = spec.add_probes(ProbeSet::TIME);
    let probes = Probes {
        include: function_globs(&spec),
        count_only: count_only(&spec, &module),
        exclude: Vec::new(),
        probes: probe_set,
        // System-call points see the calls of code no probe covers too, as the kernel's
        // tracepoints do (thread points probe system calls only for clone and exit).
        recording: lopi_image::Recording { catch_unprobed: spec.probes_system_calls(), ..Default::default() },
        cache: request.cache.clone(),
        script: Some(spec.clone()),
        record: Some(request.record.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("lopi-trace-{}.%p{RECORD_SUFFIX}", std::process::id())))),
        // A script's functions are its program's.
        follow: false,
    };
    let keep = request.record.is_some();
    let out: Box<dyn Write> = match &request.output {
        Some(path) => Box::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?),
        // A program lopi starts writes to lopi's stdout: when that is a file or a pipe, lopi's
        // lines would go into the program's output, so they go to stderr.
        None if request.pid.is_none() && !std::io::stdout().is_terminal() => Box::new(std::io::stderr()),
        None => Box::new(std::io::stdout()),
    };
    let libraries: Vec<&str> = spec.program.probes.iter().flat_map(|p| &p.points).filter_map(|p| match p {
        Point::FuncEntry { lib: Some(lib), .. } | Point::FuncReturn { lib: Some(lib), .. } => Some(lib.as_str()),
        _ => None,
    }).collect();
    let exe = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    // Before the program runs its own code (or, attached, goes on): a point that cannot run
    // anywhere it names is refused.
    // Once every point is accepted, the guarded markers' semaphores are raised.
    let check = |installation: &lopi_live::Installation, pid: i32| -> Result<()> {
        for m in &installation.modules {
            if Path::new(&m.path) == exe {
                check_probes(&spec, None, &module.functions, &m.outcomes, &m.timing, &m.path)?;
            } else if let Some(lib) = libraries.iter().find(|l| lopi_live::library_named(&m.path, l)) {
                check_probes(&spec, Some(lib), &resolve::functions(Path::new(&m.path)).unwrap_or_default(), &m.outcomes, &m.timing, &m.path)?;
            }
        }
        match installation.modules.iter().find(|m| Path::new(&m.path) == exe) {
            Some(m) => semaphores.adjust(pid, m.bias, 1).with_context(|| format!("raising the semaphores of the markers in process {pid}")),
            None => Ok(()),
        }
    };
    let start = |installation: &lopi_live::Installation, output: &str, pid: i32| -> Result<(Symbols, std::fs::File)> {
        let installed = installation.modules.iter().find(|m| Path::new(&m.path) == exe);
        // Made empty if no module got a probe (a script of begin/end/interval only).
        let data = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(output).with_context(|| format!("opening {output}"))?;
        let mut symbols = Symbols::new(&module, installed.map_or(0, |m| m.bias));
        // Addresses elsewhere (libraries the program loaded) by their files.
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            symbols.others = Some((pid as u32, RefCell::new(Namer::new(&[lopi_trace::ProcessMaps { pid: pid as u32, text }]))));
        }
        Ok((symbols, data))
    };
    if let Some(pid) = request.pid {
        let attached = live::attach_start(&probes, pid, true, &check, false)?;
        let (symbols, data) = start(&attached.installation, &attached.output, pid)?;
        let mut session = Session::new(&spec, data, true, &symbols, out, request.json);
        session.cpid = pid as u32;
        session.run_host(Phase::Begin, |p| *p == Point::Begin)?;
        let mut intervals = Intervals::new(&spec.program);
        match request.duration {
            Some(d) => eprintln!("lopi: tracing process {pid} for {:.1} s, or until Ctrl-C", d.as_secs_f64()),
            None => eprintln!("lopi: tracing process {pid} until Ctrl-C"),
        }
        let ended = attached.wait(request.duration, Duration::from_millis(1), || {
            intervals.tick(&mut session)?;
            Ok(session.exited)
        })?;
        if ended == live::Ended::Detach {
            attached.detach(false)?;
            if let Some(m) = attached.installation.modules.iter().find(|m| Path::new(&m.path) == exe) {
                semaphores.adjust(pid, m.bias, -1).with_context(|| format!("lowering the semaphores of the markers in process {pid}"))?;
            }
        }
        finish(&mut session)?;
        tidy(&attached.output, keep)?;
        return Ok(None);
    }
    let mut launched = live::launch(&probes, &request.command, None, true, &check)?;
    let (symbols, data) = start(&launched.installation, &launched.output, launched.child.id() as i32)?;
    let mut session = Session::new(&spec, data, true, &symbols, out, request.json);
    session.cpid = launched.child.id();
    session.run_host(Phase::Begin, |p| *p == Point::Begin)?;
    let mut intervals = Intervals::new(&spec.program);
    let status = loop {
        if let Some(status) = launched.child.try_wait().context("waiting for the program")? {
            break status;
        }
        intervals.tick(&mut session)?;
        std::thread::sleep(intervals.next_wait());
    };
    launched.finish();
    finish(&mut session)?;
    tidy(&launched.output, keep)?;
    Ok(Some(Ended { status, blocked: launched.blocked }))
}

/// `lopi report DATA --script`: what a rewritten program's script (`lopi rewrite --script`)
/// left in its record: its output as its threads wrote it, then its `begin` and `end`
/// probes, run now, and its maps. The record is only read.
pub fn report(path: &Path, json: bool) -> Result<()> {
    let file = crate::files::read_data(path)?;
    let Some((record, script)) = file.records.iter().find_map(|r| Some((r, r.meta.script.as_ref()?))) else {
        bail!("{} has no probe script's output (made by lopi rewrite --script or lopi trace)", path.display());
    };
    // Its probed functions, and those its instruction points are in.
    let points = record.meta.blocks().filter(|&(_, _, action)| action == lopi_trace::MetaAction::Probe).map(|(_, b, _)| b.function.as_str());
    let names = record.meta.functions().map(|(_, f, _)| f.name.as_str()).chain(points).collect();
    let spec = compile_script(&script.source, "the record's script", script.max_entries, script.ring_len, resolve::Functions::checked(names))?;
    let mut symbols = Symbols::of(record.meta.functions().map(|(_, f, _)| (f.addr, f.size, f.name.clone())), record.load_bias);
    if !file.maps.is_empty() {
        symbols.others = Some((record.pid, RefCell::new(Namer::new(&file.maps))));
    }
    let data = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut session = Session::new(&spec, data, false, &symbols, Box::new(std::io::stdout()), json);
    session.run_host(Phase::Begin, |p| *p == Point::Begin)?;
    finish(&mut session)
}

const RECORD_SUFFIX: &str = ".lopi";

/// The records a trace made in the temporary directory (those whose names start with the
/// prefix it holds, `lopi-trace-LOPIPID.`: the program's, and those of children it forked),
/// removed however the trace ends: after an error too, and a child's that lopi never read.
struct TemporaryRecords(Option<String>);

impl Drop for TemporaryRecords {
    fn drop(&mut self) {
        let Some(prefix) = &self.0 else { return };
        let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else { return };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(prefix.as_str()) && name.ends_with(RECORD_SUFFIX) {
                std::fs::remove_file(entry.path()).ok();
            }
        }
    }
}

/// Removes the record unless asked to keep it (an empty one, made for a program no probe went
/// into, always).
fn tidy(output: &str, keep: bool) -> Result<()> {
    match std::fs::metadata(output) {
        Ok(m) if m.len() == 0 || !keep => std::fs::remove_file(output).with_context(|| format!("removing {output}")),
        _ => Ok(()),
    }
}

/// Once the program has ended (or lopi let go of it): what it printed last, the `end` probes,
/// the maps, what was lost.
fn finish(session: &mut Session<'_>) -> Result<()> {
    if !session.exited {
        session.poll()?;
        session.run_host(Phase::Ended, |p| *p == Point::End)?;
        session.print_maps()?;
    }
    session.report_losses();
    Ok(())
}

/// The script's `interval:` points and when each runs next.
struct Intervals {
    started: Instant,
    /// (period in ns, next time from `started`).
    due: Vec<(u64, Duration)>,
}

impl Intervals {
    fn new(program: &Program) -> Intervals {
        Intervals { started: Instant::now(), due: interval_points(program).into_iter().map(|ns| (ns, Duration::from_nanos(ns))).collect() }
    }

    /// Prints what the threads wrote, then runs the intervals that are due; the maps are
    /// printed at once when a probe calls `exit()`.
    fn tick(&mut self, session: &mut Session<'_>) -> Result<()> {
        if session.exited {
            return Ok(());
        }
        session.poll()?;
        for (period, due) in &mut self.due {
            if self.started.elapsed() >= *due && !session.exited {
                let ns = *period;
                session.run_host(Phase::Running, |p| *p == Point::Interval { ns })?;
                *due += Duration::from_nanos(ns);
            }
        }
        if session.exited {
            session.print_maps()?;
        }
        Ok(())
    }

    /// How long to sleep before the next tick.
    fn next_wait(&self) -> Duration {
        let next = self.due.iter().map(|(_, due)| due.saturating_sub(self.started.elapsed())).min().unwrap_or(POLL);
        next.clamp(Duration::from_millis(1), POLL)
    }
}

/// The periods of the script's `interval:` points, without repeats.
fn interval_points(program: &Program) -> Vec<u64> {
    let mut periods: Vec<u64> = program.probes.iter().flat_map(|p| &p.points).filter_map(|p| if let Point::Interval { ns } = p { Some(*ns) } else { None }).collect();
    periods.sort_unstable();
    periods.dedup();
    periods
}

/// Names run-time code addresses of the main executable, and knows its functions' aliases;
/// other addresses as [`Namer`] names them, in the process whose map it has.
pub struct Symbols {
    /// (start, end, name), sorted.
    functions: Vec<(u64, u64, String)>,
    /// Other names of a function, by its name.
    pub aliases: HashMap<String, Vec<String>>,
    others: Option<(u32, RefCell<Namer>)>,
}

impl Symbols {
    fn new(module: &lopi_elf::ElfModule<'_>, bias: u64) -> Symbols {
        let mut symbols = Symbols::of(module.functions.iter().map(|f| (f.addr.0, f.size, f.name.clone())), bias);
        symbols.aliases = module.functions.iter().filter(|f| !f.aliases.is_empty()).map(|f| (f.name.clone(), f.aliases.clone())).collect();
        symbols
    }

    /// From (module address, size, name) of each function.
    fn of(functions: impl Iterator<Item = (u64, u64, String)>, bias: u64) -> Symbols {
        let mut functions: Vec<(u64, u64, String)> = functions.map(|(addr, size, name)| (addr.wrapping_add(bias), addr.wrapping_add(bias) + size.max(1), name)).collect();
        functions.sort();
        Symbols { functions, aliases: HashMap::new(), others: None }
    }

    /// The symbol `addr` is in, without the offset (`usym()`, as bpftrace names it).
    pub fn symbol(&self, addr: u64) -> String {
        lopi_script::output::symbol(&self.name(addr)).to_string()
    }

    pub fn name(&self, addr: u64) -> String {
        let i = self.functions.partition_point(|f| f.0 <= addr);
        match i.checked_sub(1).map(|i| &self.functions[i]) {
            Some((start, end, name)) if addr < *end && addr == *start => name.clone(),
            Some((start, end, name)) if addr < *end => format!("{name}+{}", addr - start),
            _ => self.others.as_ref().map_or_else(|| format!("{addr:#x}"), |(pid, namer)| namer.borrow_mut().describe(*pid, addr)),
        }
    }
}
