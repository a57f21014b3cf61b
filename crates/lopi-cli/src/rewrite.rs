//! `lopi rewrite`: a copy of a program with probes in it, and its probe script if given.
use crate::cli::{Select, Timing};
use crate::files::{absolute, debug_file, parse, read};
use crate::planning::plan;
use crate::{blocks, handler, progress, show, syscalls, trace};
use anyhow::{bail, Context, Result};
use lopi_cache::{Lookup, PlanCache};
use lopi_patch::{Filter, Place, Probes};
use std::path::{Path, PathBuf};

/// What `lopi rewrite` was asked.
pub(crate) struct Request {
    pub(crate) prog: PathBuf,
    pub(crate) output: PathBuf,
    pub(crate) select: Select,
    pub(crate) trace: bool,
    pub(crate) timing: Timing,
    /// A probe script's file, or its text (`--script-expr`).
    pub(crate) script: Option<PathBuf>,
    pub(crate) script_expr: Option<String>,
    /// A C handler's file.
    pub(crate) handler: Option<PathBuf>,
    pub(crate) cache: Option<PlanCache>,
}

/// `lopi rewrite`: writes the copy and says what it holds.
pub(crate) fn run(request: Request) -> Result<()> {
    let Request { prog, output, select, trace, timing, script, script_expr, handler, cache } = request;
    let mut probes = select.probes()?;
    if trace {
        probes = probes.union(Probes::TIME);
    }
    let recording = timing.recording(trace, probes, script.is_some() || script_expr.is_some() || handler.is_some())?;
    let script = match (script, script_expr) {
        (Some(path), _) => Some((std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?, path.display().to_string())),
        (None, Some(text)) => Some((text, "--script-expr".to_string())),
        (None, None) => None,
    };
    let script = match handler {
        Some(path) => Some(Script::Handler(Box::new(handler::build(&path)?))),
        None => script.map(|(text, name)| Script::Text(text, name)),
    };
    let (summary, lookup) = rewrite(&prog, &output, &select.filter()?, probes, recording, script, cache.as_ref())?;
    let (from, note_text) = progress::lookup_text(&lookup);
    eprintln!("lopi: wrote {}: {summary}{from}", output.display());
    if let Some(text) = note_text {
        eprintln!("lopi: note: {text}");
    }
    Ok(())
}

/// What `lopi rewrite` compiles into the copy besides its probes.
pub(crate) enum Script {
    /// A probe script's text and the name its diagnostics give it: it decides the functions.
    Text(String, String),
    /// A C handler: its callbacks run at the selected functions, timed.
    Handler(Box<lopi_image::handler::Handler>),
}

/// Rewrites `prog` into `output`, with `script` compiled in if given; returns the summary
/// line and where the plan came from.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rewrite(
    prog: &Path,
    output: &Path,
    filter: &Filter,
    probes: Probes,
    recording: lopi_rewrite::Recording,
    script: Option<Script>,
    cache: Option<&PlanCache>,
) -> Result<(String, Lookup)> {
    use std::os::unix::fs::PermissionsExt;
    let file = read(prog)?;
    if same_file(prog, output) {
        bail!("refusing to overwrite the input {}; choose another -o", prog.display());
    }
    let debug = debug_file(prog, &file);
    let mut module = parse(prog, &file, debug.as_ref())?;
    let handler = matches!(script, Some(Script::Handler(_)));
    let script = match script {
        Some(Script::Handler(h)) => {
            let spec = lopi_image::script::ScriptSpec::handler(*h);
            if spec.probes_libc() {
                bail!("system calls, lock functions and threads' starts and ends are libc's, which a rewritten file does not probe: lopi_syscall_*, lopi_lock_* and lopi_thread_* callbacks need lopi run or attach --handler");
            }
            Some(spec)
        }
        Some(Script::Text(source, name)) => {
            let spec = trace::compile_script(&source, &name, None, trace::RING_LEN, trace::Functions::new(trace::all_names(&module), trace::needed_libraries(prog)).of_program(prog))?;
            if spec.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, lopi_script::ir::Point::FuncEntry { lib: Some(_), .. } | lopi_script::ir::Point::FuncReturn { lib: Some(_), .. })) {
                bail!("a rewritten file probes its own functions only: func:LIB:GLOB points need lopi trace");
            }
            if spec.probes_libc() {
                bail!("system calls and lock functions are libc's, which a rewritten file does not probe: syscall:, lock: and thread: points need lopi trace");
            }
            if spec.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, lopi_script::ir::Point::Usdt { .. })) {
                bail!("usdt: points need lopi trace (it raises the markers' semaphores in the process)");
            }
            let mut spec = spec;
            spec.point_addrs = trace::instruction_points(&spec.program, &module)?;
            if spec.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, lopi_script::ir::Point::Interval { .. })) {
                bail!("interval: probes need lopi to run while the program runs: use lopi trace");
            }
            Some(spec)
        }
        None => None,
    };
    let (filter, probes) = match &script {
        Some(_) if handler => (filter.clone(), Probes::TIME),
        Some(spec) => {
            let include: Vec<glob::Pattern> = trace::function_globs(spec).iter().map(|g| glob::Pattern::new(g)).collect::<Result<_, _>>()?;
            // A script of instruction points, begin and end probes times no function.
            let filter = if include.is_empty() { Filter::nothing() } else { Filter { include, exclude: Vec::new() } };
            (filter, Probes::TIME)
        }
        None => (filter.clone(), probes),
    };
    let bar = progress::Bar::new(&format!("rewriting {}", progress::file_name(prog)), true);
    let (mut selection, lookup) = plan(&file, debug.as_ref(), &mut module, &filter, probes, cache, &bar);
    if let Some(points) = script.as_ref().map(|s| s.instruction_points(None)).filter(|p| !p.is_empty()) {
        let analysis = lopi_patch::analyse(&mut module);
        selection.add_points(&module, &analysis, &points).with_context(|| format!("{}", prog.display()))?;
    }
    if let Some(spec) = &script {
        let counted = trace::count_only(spec, &module);
        for (f, function) in module.functions.iter().enumerate() {
            if counted.contains(&function.name) {
                selection.count_only(f, lopi_patch::Refusal::ScriptCounts);
            }
        }
    }
    bar.step("laying out and writing");
    let names = lopi_rewrite::ModuleNames {
        module: absolute(output).display().to_string(),
        source: absolute(prog).display().to_string(),
    };
    let rewritten = lopi_rewrite::rewrite_with_script(&module, selection, &names, recording, script.as_ref()).with_context(|| format!("{}", prog.display()))?;
    if let Some(spec) = script.as_ref().filter(|_| !handler) {
        trace::check_probes(spec, None, &module.functions, &rewritten.plan.outcomes, &rewritten.plan.timing, &output.display().to_string())?;
    }
    let mode = std::fs::metadata(prog)?.permissions().mode() & 0o7777;
    lopi_rewrite::write_atomically(output, &rewritten.image, mode).with_context(|| format!("writing {}", output.display()))?;
    let mut summary = if probes.has(Place::Entries) || probes.has(Place::LockFunctions) { show::Summary::new(&module, &rewritten.plan.outcomes, &rewritten.plan.timing).to_string() } else { String::new() };
    if probes.has(Place::Blocks) {
        summary = blocks::summary(&rewritten.plan.blocks);
    }
    if probes.probes_system_calls() {
        let syscalls = syscalls::Summary::new(&rewritten.plan.syscalls);
        summary = if summary.is_empty() { syscalls.to_string() } else { format!("{summary}; {syscalls}") };
    }
    Ok((summary, lookup))
}

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

