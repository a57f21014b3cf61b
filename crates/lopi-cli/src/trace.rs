//! `lopi trace`: a probe script (lopi-script) compiled into the program's probe image and run
//! by the program's own threads. lopi prints what the probes print while the program runs
//! (from each thread's output ring in the data file) and the maps when it ends, or when a
//! probe calls `exit()`.
use crate::live::{self, Probes};
use anyhow::{anyhow, bail, Context, Result};
use lopi_image::script::{area_layout, AreaLayout, ScriptSpec};
use lopi_patch::Probes as ProbeSet;
use lopi_rt_abi::script::{record, RING_TAIL};
use lopi_script::ir::{ConvKind, Piece, Point, Program};
use lopi_script::output::{self, Arg, MergedMap};
use lopi_trace::script_areas::{self, OutputRecord};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of each thread's output ring.
const RING_LEN: u64 = 1 << 20;

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

/// Resolves a script's points against the program's functions.
struct Functions<'a> {
    names: Vec<&'a str>,
}

impl lopi_script::Resolver for Functions<'_> {
    fn functions_matching(&self, lib: Option<&str>, glob: &str) -> usize {
        match lib {
            None => self.names.iter().filter(|n| lopi_script::glob_match(glob, n)).count(),
            Some(_) => 0,
        }
    }

    fn syscall_known(&self, name: &str) -> bool {
        (0..1024).any(|nr| lopi_trace::syscall_name(nr) == name)
    }

    fn syscalls_matching(&self, glob: &str) -> usize {
        (0..1024).filter(|&nr| lopi_script::glob_match(glob, &lopi_trace::syscall_name(nr))).count()
    }
}

/// The program's path as `exec` would find it.
fn find_program(program: &OsString) -> Result<PathBuf> {
    let given = Path::new(program);
    if given.components().count() > 1 {
        return Ok(given.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(given))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| anyhow!("{}: not found in PATH", given.display()))
}

/// The checked program, its points in the program (refused otherwise, with the reason).
fn check(request: &Request, module: &lopi_elf::ElfModule<'_>) -> Result<Program> {
    let resolver = Functions { names: module.functions.iter().map(|f| f.name.as_str()).collect() };
    let mut program = lopi_script::compile_front(&request.source, &resolver).map_err(|d| Refused(d.render(&request.source, &request.source_name).trim_end().to_string()))?;
    if let Some(entries) = request.max_entries {
        program.set_max_entries(entries);
    }
    for point in program.probes.iter().flat_map(|p| &p.points) {
        if !matches!(point, Point::FuncEntry { lib: None, .. } | Point::FuncReturn { lib: None, .. }) {
            bail!("`{point}`: lopi trace runs func:GLOB and func:GLOB:return points of the program itself so far; this kind of point is not built yet");
        }
    }
    Ok(program)
}

/// The functions the script's points name, as the planner's filter takes them.
fn function_globs(program: &Program) -> Vec<String> {
    let mut globs: Vec<String> = program
        .probes
        .iter()
        .flat_map(|p| &p.points)
        .filter_map(|point| match point {
            Point::FuncEntry { glob, .. } | Point::FuncReturn { glob, .. } => {
                Some(if glob::Pattern::new(glob).is_ok() { glob.clone() } else { glob::Pattern::escape(glob) })
            }
            _ => None,
        })
        .collect();
    globs.sort();
    globs.dedup();
    globs
}

/// `lopi trace SCRIPT -- PROG ARGS`.
pub fn run(request: Request) -> Result<()> {
    let Some(program_arg) = request.command.first() else { bail!("lopi trace needs a program to run: lopi trace SCRIPT -- PROG ARGS") };
    let path = find_program(program_arg)?;
    let file = lopi_cache::read_file(&path).with_context(|| format!("reading {}", path.display()))?;
    let debug = lopi_elf::DebugFile::find(&path, &file, &lopi_elf::debug_dir());
    let mut module = lopi_elf::ElfModule::parse_with_debug(&file, debug.as_ref()).with_context(|| format!("{}", path.display()))?;
    lopi_patch::analyse(&mut module);
    let program = check(&request, &module)?;
    let spec = Arc::new(ScriptSpec::new(program, &request.source, RING_LEN));
    let probes = Probes {
        include: function_globs(&spec.program),
        exclude: Vec::new(),
        probes: ProbeSet { entries: true, exits: true, ..ProbeSet::default() },
        trace: false,
        budget_ppm: 0,
        cache: request.cache.clone(),
        script: Some(spec.clone()),
    };
    let mut out: Box<dyn Write> = match &request.output {
        Some(path) => Box::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?),
        None => Box::new(std::io::stdout()),
    };
    let mut launched = live::launch(&probes, &request.command, None, true)?;
    let installed = launched.installation.modules.first();
    let bias = installed.map_or(0, |m| m.bias);
    report_probes(&spec.program, &module, installed);
    let symbols = Symbols::new(&module, bias);
    let mut printer = Printer { spec: &spec, area: area_layout(&spec), tails: HashMap::new(), symbols: &symbols, exited: false };
    let data = std::fs::OpenOptions::new().read(true).write(true).open(&launched.output).with_context(|| format!("opening {}", launched.output))?;
    let status = loop {
        if let Some(status) = launched.child.try_wait().context("waiting for the program")? {
            break status;
        }
        if !printer.exited {
            printer.poll(&data, &mut out)?;
            if printer.exited {
                printer.print_maps(&data, request.json, &mut out)?;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    launched.finish_sampling();
    if !printer.exited {
        printer.poll(&data, &mut out)?;
        printer.print_maps(&data, request.json, &mut out)?;
    }
    printer.report_losses(&data);
    out.flush().ok();
    live::exit_like(status, &launched.blocked)
}

/// Says on stderr how many functions the probes are in, and which named ones could not be.
fn report_probes(program: &Program, module: &lopi_elf::ElfModule<'_>, installed: Option<&lopi_live::InstalledModule>) {
    let globs: Vec<&str> = program
        .probes
        .iter()
        .flat_map(|p| &p.points)
        .filter_map(|point| match point {
            Point::FuncEntry { glob, .. } | Point::FuncReturn { glob, .. } => Some(glob.as_str()),
            _ => None,
        })
        .collect();
    let named = |name: &str| globs.iter().any(|g| lopi_script::glob_match(g, name));
    let Some(installed) = installed else { return };
    let mut probed = 0;
    let mut refused = Vec::new();
    for ((f, timing), outcome) in module.functions.iter().zip(&installed.timing).zip(&installed.outcomes) {
        if !named(&f.name) {
            continue;
        }
        match (timing, outcome) {
            (lopi_patch::TimingOutcome::Timed, _) => probed += 1,
            (lopi_patch::TimingOutcome::Untimed(why), _) => refused.push(format!("{} ({}: {why})", f.name, why.key())),
            (_, lopi_patch::Outcome::Skipped(why)) => refused.push(format!("{} ({}: {why})", f.name, why.key())),
            _ => refused.push(format!("{} (not probed)", f.name)),
        }
    }
    eprintln!("lopi: tracing {probed} function{} of {}; Ctrl-C ends the program", if probed == 1 { "" } else { "s" }, installed.path);
    if !refused.is_empty() {
        eprintln!("lopi: {} function{} the script names cannot be probed, their probes never run: {}", refused.len(), if refused.len() == 1 { "" } else { "s" }, refused.join(", "));
    }
}

/// Names run-time code addresses of the main executable.
struct Symbols {
    /// (start, end, name), sorted.
    functions: Vec<(u64, u64, String)>,
}

impl Symbols {
    fn new(module: &lopi_elf::ElfModule<'_>, bias: u64) -> Symbols {
        let mut functions: Vec<(u64, u64, String)> =
            module.functions.iter().map(|f| (f.addr.0.wrapping_add(bias), f.addr.0.wrapping_add(bias) + f.size.max(1), f.name.clone())).collect();
        functions.sort();
        Symbols { functions }
    }

    fn name(&self, addr: u64) -> String {
        let i = self.functions.partition_point(|f| f.0 <= addr);
        match i.checked_sub(1).map(|i| &self.functions[i]) {
            Some((start, end, name)) if addr < *end && addr == *start => name.clone(),
            Some((start, end, name)) if addr < *end => format!("{name}+{}", addr - start),
            _ => format!("{addr:#x}"),
        }
    }
}

/// Prints the areas' output records and maps.
struct Printer<'s> {
    spec: &'s ScriptSpec,
    area: AreaLayout,
    /// Per area (its file offset): how far its ring was read.
    tails: HashMap<u64, u64>,
    symbols: &'s Symbols,
    /// A probe called `exit()`: nothing more is printed.
    exited: bool,
}

/// A read-only view of the data file as it is now.
#[allow(unsafe_code)]
fn map(data: &std::fs::File) -> Result<Option<memmap2::Mmap>> {
    if data.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: read-only and private to this process; the program appends and writes its areas
    // meanwhile, and every byte read is checked (script_areas trusts nothing).
    Ok(Some(unsafe { memmap2::Mmap::map(data) }.context("mapping the data file")?))
}

impl Printer<'_> {
    /// Prints the records written since the last poll, in time order across threads, and
    /// hands the rings' space back.
    fn poll(&mut self, data: &std::fs::File, out: &mut dyn Write) -> Result<()> {
        let Some(bytes) = map(data)? else { return Ok(()) };
        let mut records: Vec<OutputRecord> = Vec::new();
        for area in script_areas::areas(&bytes, self.spec.id) {
            let tail = self.tails.get(&area.offset).copied().unwrap_or(area.header.ring_tail);
            let (new_tail, mut taken) = area.records(self.area.ring_offset, self.area.ring_len, tail);
            if new_tail != tail {
                data.write_all_at(&new_tail.to_le_bytes(), area.offset + RING_TAIL as u64).context("handing a ring's space back")?;
                self.tails.insert(area.offset, new_tail);
            }
            records.append(&mut taken);
        }
        records.sort_by_key(|r| r.tsc);
        for r in records {
            match r.kind {
                record::PRINTF => out.write_all(&self.printf(&r)?)?,
                record::PRINT_MAP => {
                    let maps = self.merged(&bytes)?;
                    if let Some(m) = maps.iter().find(|m| m.map == &self.spec.program.maps[r.what as usize]) {
                        out.write_all(output::text_map(m, &|a| self.symbols.name(a)).as_bytes())?;
                    }
                }
                record::PRINT_VALUE => out.write_all(self.value(&r).as_bytes())?,
                record::EXIT => {
                    self.exited = true;
                    break;
                }
                _ => {}
            }
        }
        out.flush()?;
        Ok(())
    }

    fn printf(&self, r: &OutputRecord) -> Result<Vec<u8>> {
        let program = &self.spec.program;
        let Some(format) = program.formats.get(r.what as usize) else { return Ok(Vec::new()) };
        let mut args = Vec::new();
        let mut at = 0;
        for piece in &format.pieces {
            let Piece::Conv(conv) = piece else { continue };
            let (arg, len) = match conv.kind {
                ConvKind::Str => (Arg::Str(r.payload.get(at..at + program.str_size).unwrap_or_default().to_vec()), program.str_size),
                _ => (Arg::Int(r.payload.get(at..at + 8).map_or(0, |w| i64::from_le_bytes(w.try_into().unwrap_or([0; 8])))), 8),
            };
            args.push(arg);
            at += len.next_multiple_of(8);
        }
        output::printf(program, format, &args).map_err(|e| anyhow!("printf: {e}"))
    }

    fn value(&self, r: &OutputRecord) -> String {
        let word = |at: usize| r.payload.get(at..at + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        match r.what {
            0 => format!("{}\n", word(0) as i64),
            1 => format!("{}\n", String::from_utf8_lossy(r.payload.split(|&b| b == 0).next().unwrap_or_default())),
            _ => {
                let frames = (word(0) as usize).min(lopi_rt_abi::script::STACK_FRAMES);
                let mut text = String::from("\n");
                for i in 0..frames {
                    text += &format!("        {}\n", self.symbols.name(word(8 + 8 * i)));
                }
                text + "\n"
            }
        }
    }

    /// Every map, merged over every thread's table.
    fn merged<'p>(&'p self, bytes: &[u8]) -> Result<Vec<MergedMap<'p>>> {
        let program = &self.spec.program;
        let areas = script_areas::areas(bytes, self.spec.id);
        program
            .maps
            .iter()
            .zip(&self.area.tables)
            .map(|(map, shape)| {
                let len = lopi_rt_abi::script_map::table_size(shape.key_size as usize, shape.slot_size as usize, shape.max_entries);
                let tables: Vec<&[u8]> = areas.iter().map(|a| a.table(shape, len)).collect();
                let entries: Vec<(&[u8], &[u8])> = tables.iter().flat_map(|t| lopi_rt_abi::script_map::entries(t)).collect();
                output::merge(map, program.str_size, entries).map_err(|e| anyhow!("reading map @{}: {e}", map.name))
            })
            .collect()
    }

    fn print_maps(&self, data: &std::fs::File, json: bool, out: &mut dyn Write) -> Result<()> {
        let Some(bytes) = map(data)? else { return Ok(()) };
        let maps = self.merged(&bytes)?;
        let symbolize = |a: u64| self.symbols.name(a);
        let text = if json { output::json(&maps, &symbolize) + "\n" } else { output::text(&maps, &symbolize) };
        out.write_all(text.as_bytes())?;
        Ok(())
    }

    /// Says on stderr what was lost: map updates refused by full maps, output records
    /// dropped by full rings, and faults of the script.
    fn report_losses(&self, data: &std::fs::File) {
        let Ok(Some(bytes)) = map(data) else { return };
        let areas = script_areas::areas(&bytes, self.spec.id);
        let (faults, ring_drops) = areas.iter().fold((0, 0), |(f, d), a| (f + a.header.faults, d + a.header.ring_drops));
        for (map, shape) in self.spec.program.maps.iter().zip(&self.area.tables) {
            let len = lopi_rt_abi::script_map::table_size(shape.key_size as usize, shape.slot_size as usize, shape.max_entries);
            let drops: u64 = areas.iter().map(|a| lopi_rt_abi::script_map::drops(a.table(shape, len))).sum();
            if drops > 0 {
                eprintln!("lopi: @{}: {drops} updates dropped: the map was full ({} keys per thread; --max-entries raises it)", map.name, shape.max_entries);
            }
        }
        if ring_drops > 0 {
            eprintln!("lopi: {ring_drops} printf/print records dropped: a thread's output ring was full");
        }
        if faults > 0 {
            eprintln!("lopi: {faults} faults in the script's probes (unreadable memory, division by zero): those reads gave empty values");
        }
    }
}
