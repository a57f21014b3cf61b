//! What to install, worked out while the process runs: which functions of which loaded
//! modules, and each module's probe image laid out at a free address near its code. Only
//! the checks that need the threads held (where they stand, the code bytes) and the writes
//! happen while the process is paused.
use crate::procfs::{self, Mapping};
use crate::error::{permission_hint, LiveError};
use crate::placement;
use crate::spec::{load_bias, module_path, EnvBlock, ModuleRequest, Spec};
use lopi_elf::{ElfModule, Svma};
use lopi_image::{ModuleNames, ProbeImage, Recording, Request};
use lopi_cache::{Key, Lookup, ModuleFile, PlanCache};
use lopi_patch::{Filter, Progress, Selection};
use lopi_rt_abi::{page_align, PAGE_SIZE};
use std::time::{Duration, Instant};

/// Room below a module besides `BELOW_PER_CODE_BYTE` times its code, for the first layout
/// (runtime, metadata).
const BELOW_ROOM: u64 = 1 << 20;
/// Bytes of image room below a module per byte of its code: a coverage image of every block
/// (zstd: 1 MB of code, 30,000 trampolines and the metadata of 40,000 blocks) takes about 5.
/// An image that fits goes there, at the same place in every process: it is cached.
const BELOW_PER_CODE_BYTE: u64 = 8;
/// The runtime's environment room is a multiple of this.
const ENV_ROOM: usize = 512;

/// Every module's image, placed.
pub struct Plan {
    pub pid: i32,
    pub(crate) exe: String,
    pub(crate) env: Vec<(String, String)>,
    pub modules: Vec<ModulePlan>,
    /// How long planning took (the process was not paused for it).
    pub took: Duration,
}

/// One module's probes.
pub struct ModulePlan {
    pub path: String,
    pub(crate) bias: u64,
    /// Run-time address and length of the image's mapping.
    pub(crate) start: u64,
    pub(crate) len: u64,
    /// The run-time range of the module's code, which the image must be within reach of.
    pub(crate) code: (u64, u64),
    pub(crate) functions: usize,
    /// Whether the plan came from the plan cache.
    pub lookup: Lookup,
    pub(crate) image: ProbeImage,
    data: ModuleFile,
    /// Where its symbols come from, if not from itself.
    debug: Option<lopi_elf::DebugFile>,
    /// `None` when the image itself came from the cache (fetched again if a site must go).
    selection: Option<Selection>,
    /// The functions and fragments the selection was made for (named from the debug file,
    /// cold fragments moved off the function list).
    analysed: Option<Analysed>,
    source: Source,
    shape: Shape,
}

/// A module's functions and fragments as planned.
type Analysed = (Vec<lopi_elf::Function>, Vec<(Svma, u64)>);

/// Where a module's selection comes from.
struct Source {
    request: ModuleRequest,
    /// Where `lopi run` stopped the program (a module address): its function is counted only.
    entry: Option<u64>,
    cache: Option<PlanCache>,
    key: Option<Key>,
}

impl Source {
    /// The module's selection, from the cache or planned; either way `module` is analysed
    /// (its cold fragments moved off the function list) as the selection expects.
    fn selection(&self, module: &mut ElfModule<'_>, progress: &dyn Progress) -> (Selection, Lookup) {
        let (mut selection, lookup) = lopi_cache::selection(self.cache.as_ref(), self.key.as_ref(), module, |module| {
            let analysis = lopi_patch::analyse_with(module, progress);
            let selection = lopi_patch::select_with(module, &analysis, &self.request.filter, self.request.probes, progress);
            (analysis.fragments, selection)
        });
        let at_entry = |f: &lopi_elf::Function| self.entry.is_some_and(|e| f.addr.0 <= e && e < f.addr.0 + f.size.max(1));
        if let Some(f) = module.functions.iter().position(at_entry) {
            selection.count_only(f, lopi_patch::Refusal::EntryPoint);
        }
        for (f, function) in module.functions.iter().enumerate() {
            if self.request.count_only.contains(&function.name) {
                selection.count_only(f, lopi_patch::Refusal::ScriptCounts);
            }
        }
        (selection, lookup)
    }
}

/// What laying out a module's image takes besides its selection.
struct Shape {
    names: ModuleNames,
    recording: Recording,
    script: Option<std::sync::Arc<lopi_image::script::ScriptSpec>>,
    /// How the script's points name this module (`None`: the main executable).
    library: Option<String>,
    env_len: usize,
    bias: u64,
}

impl Shape {
    /// Lays `selection` out at run-time address `start`.
    fn build(&self, module: &ElfModule<'_>, selection: &Selection, start: u64) -> Result<ProbeImage, LiveError> {
        let request = Request {
            names: &self.names,
            recording: self.recording,
            at: start.wrapping_sub(self.bias),
            entry_room: 16,
            header_room: self.env_len,
            fork_handlers: false,
            script: self.script.as_deref().map(|spec| lopi_image::ScriptRequest { spec, library: self.library.as_deref() }),
        };
        lopi_image::build(module, selection.clone(), &request).map_err(|e| LiveError::Module(format!("{}: {e}", self.names.module)))
    }
}

/// Plans `spec` for process `pid`. `entry`: where `lopi run` stopped the program, whose
/// function (`_start`) is then counted, not timed, as in a rewritten file.
pub fn plan(pid: i32, spec: &Spec, entry: Option<u64>, progress: &dyn Progress) -> Result<Plan, LiveError> {
    let started = Instant::now();
    let unreadable = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::PermissionDenied => LiveError::PermissionDenied { pid, hint: permission_hint() },
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess(pid),
        _ => LiveError::Io { what: format!("reading /proc/{pid}"), source: e },
    };
    let maps = procfs::maps(pid).map_err(unreadable)?;
    let exe = procfs::exe(pid).map_err(unreadable)?.display().to_string();
    let mut busy = placement::occupied(&maps, procfs::start_brk(pid));
    // Rounded, so that the room does not change with the digits of a pid in LOPI_OUTPUT.
    let env_len = EnvBlock::new(&spec.env).len().next_multiple_of(ENV_ROOM);
    let mut modules = Vec::new();
    for (request, path) in requests(spec, &maps, &exe)? {
        let mapped: Vec<&Mapping> = maps.iter().filter(|m| m.path == path).collect();
        // Through the process's root when it has its own (a container), as its loader saw it.
        let (data, debug) = if path == VDSO {
            (vdso(pid, &mapped)?, None)
        } else {
            let in_root = format!("/proc/{pid}/root{path}");
            let (file, data) = match lopi_cache::map_file(in_root.as_ref()) {
                Ok(data) => (in_root, data),
                Err(_) => (path.clone(), lopi_cache::map_file(path.as_ref()).map_err(LiveError::io(format!("reading {path}")))?),
            };
            let debug = lopi_elf::DebugFile::find(file.as_ref(), &data, &lopi_elf::debug_dir());
            (data, debug)
        };
        // Without a bias, the parser says best what is wrong with the file, if anything.
        let bias = load_bias(&data, &mapped).ok_or_else(|| {
            parse(&data, &path, debug.as_ref()).err().unwrap_or_else(|| LiveError::Module(format!("{path}: cannot tell where it is loaded")))
        })?;
        let code = mapped.iter().filter(|m| m.executable).fold((u64::MAX, 0), |(lo, hi), m| (lo.min(m.start), hi.max(m.end)));
        if code.0 >= code.1 {
            return Err(LiveError::Module(format!("{path}: no executable mapping")));
        }
        // The program's entry point, as a module address.
        let entry = entry.filter(|_| request.library.is_none()).map(|entry| entry.wrapping_sub(bias));
        let key = data.id.map(|id| lopi_cache::plan_key(id, &data, debug.as_ref(), &request.filter, request.probes));
        // The vDSO is no file: nothing to key a plan by (and it is planned in a millisecond).
        let cache = spec.cache.clone().filter(|_| path != VDSO);
        let source = Source { request: request.clone(), entry, cache, key };
        let names = ModuleNames { module: path.clone(), source: path.clone() };
        // The script goes into the images of the modules its points name functions of.
        let script = spec.script.clone().filter(|_| request.scripted);
        let script_id = script.as_ref().map(|s| s.id);
        let shape = Shape { names, recording: spec.recording, script, library: request.library.clone(), env_len, bias };
        // Laid out first below the module, with room for an image eight times the size of its
        // code (images are smaller): used there when the space is free, which spares a
        // second layout; else placed in the nearest hole and laid out again. The image
        // below the module is the same in every process of the program: it is cached too.
        let low = mapped.iter().map(|m| m.start).min().unwrap_or(code.0);
        let below = low.checked_sub(page_align(BELOW_PER_CODE_BYTE * (code.1 - code.0) + BELOW_ROOM));
        // Everything the image's bytes depend on: a --log image's probes log each call, another's do not.
        let image_key = source.key.as_ref().zip(below).map(|(key, at)| {
            let at = at.wrapping_sub(bias);
            key.clone().with("image", format!("at {at:#x} path {path} trace {} log {} budget {} sample {} env {env_len} entry {entry:x?} script {script_id:x?}", spec.recording.trace, spec.recording.syscall_log, spec.recording.budget_ppm, spec.recording.sample_hz))
        });
        let (stored, unusable) = stored_image(spec.cache.as_ref(), image_key.as_ref());
        let stored = stored.zip(below).map(|(image, at)| (at, page_align(image.bytes.len() as u64) + PAGE_SIZE, image));
        let (start, len, image, mut lookup, selection, analysed) = match stored.filter(|&(at, len, _)| placement::fits(&busy, code, at, len)) {
            Some((at, len, image)) => (at, len, image, Lookup::Hit, None, None),
            None => {
                let mut module = parse(&data, &path, debug.as_ref())?;
                let (mut selection, lookup) = source.selection(&mut module, progress);
                // A script's instruction points in this module.
                let points = shape.script.as_ref().map(|s| s.instruction_points(request.library.as_deref())).unwrap_or_default();
                if !points.is_empty() {
                    let analysis = lopi_patch::analyse(&mut module);
                    selection.add_points(&module, &analysis, &points).map_err(|e| LiveError::Module(format!("{path}: {e}")))?;
                }
                let (start, len, image) = lay_out(&module, &selection, &shape, &busy, code, below)?;
                let analysed = (module.functions, module.fragments);
                (start, len, image, lookup, Some(selection), Some(analysed))
            }
        };
        if let (Some(why), Lookup::Hit | Lookup::Stored) = (unusable, &lookup) {
            lookup = Lookup::Replaced(why);
        }
        if let (Some(cache), Some(key), Some(_), true) = (&spec.cache, &image_key, &selection, Some(start) == below) {
            let stored = image.to_bytes().map_err(|e| e.to_string()).and_then(|b| cache.store().put(key, &b).map_err(|e| e.to_string()));
            if let (Err(why), Lookup::Hit | Lookup::Stored) = (stored, &lookup) {
                lookup = Lookup::NotStored(why);
            }
        }
        if image.plan.probes.is_empty() && !request.probes.has(lopi_patch::Place::Entries) {
            // Only system calls, locks or blocks were asked for, and it has none.
            continue;
        }
        busy.push((start, start + len + PAGE_SIZE));
        busy.sort_unstable();
        let functions = image.plan.outcomes.len();
        modules.push(ModulePlan { path, bias, start, len, code, functions, lookup, image, data, debug, selection, analysed, source, shape });
    }
    Ok(Plan { pid, exe, env: spec.env.clone(), modules, took: started.elapsed() })
}

/// The kernel's vDSO as `/proc/PID/maps` names it: an ELF image in memory, no file.
const VDSO: &str = "[vdso]";

/// The process's vDSO, read from its memory: its `clock_gettime` enters the kernel with its
/// own `syscall` for clocks it cannot read in user space (CPU-time clocks).
fn vdso(pid: i32, mapped: &[&Mapping]) -> Result<ModuleFile, LiveError> {
    let (start, end) = mapped.iter().fold((u64::MAX, 0), |(lo, hi), m| (lo.min(m.start), hi.max(m.end)));
    let len = usize::try_from(end.saturating_sub(start)).unwrap_or(0);
    let bytes = procfs::Memory::open(pid).and_then(|mem| mem.read(start, len)).map_err(LiveError::io(format!("reading the vDSO of process {pid}")))?;
    Ok(ModuleFile::from_bytes(bytes))
}

/// The modules to probe and their paths: those asked for, and with `everywhere` probes every
/// other file the process runs code from, and the vDSO, for those probes only.
fn requests(spec: &Spec, maps: &[Mapping], exe: &str) -> Result<Vec<(ModuleRequest, String)>, LiveError> {
    let mut out = Vec::new();
    let probed = |path: &str| spec.probed_already.as_ref().is_some_and(|done| done.iter().any(|p| p == path));
    for request in &spec.modules {
        let mut request = request.clone();
        request.probes = request.probes.union(spec.everywhere);
        match module_path(maps, exe, request.library.as_deref()) {
            Ok(path) if probed(&path) => {}
            Ok(path) => out.push((request, path)),
            Err(_) if spec.probed_already.is_some() => {}
            Err(e) => return Err(e),
        }
    }
    if !spec.everywhere.is_empty() {
        let mut others: Vec<&str> = maps
            .iter()
            .filter(|m| m.executable && (m.path.starts_with('/') || m.path == VDSO) && out.iter().all(|(_, p)| *p != m.path) && !probed(&m.path))
            .map(|m| m.path.as_str())
            .collect();
        others.sort_unstable();
        others.dedup();
        for path in others {
            let library = (path != exe).then(|| path.to_string());
            let probes = spec.everywhere;
            // A script with probes of system calls, lock or thread events goes wherever those
            // are probed.
            let scripted = spec.script.as_ref().is_some_and(|s| s.probes_libc());
            out.push((ModuleRequest { library, filter: Filter::default(), probes, count_only: Vec::new(), scripted }, path.to_string()));
        }
    }
    Ok(out)
}

/// Parses a module for planning, with the symbols of its separate debug file if it has one.
fn parse<'d>(data: &'d [u8], path: &str, debug: Option<&lopi_elf::DebugFile>) -> Result<ElfModule<'d>, LiveError> {
    ElfModule::parse_with_debug(data, debug).map_err(|e| LiveError::Module(format!("{path}: {e}")))
}

/// The image stored under `key`, and why a stored one could not be used.
fn stored_image(cache: Option<&PlanCache>, key: Option<&Key>) -> (Option<ProbeImage>, Option<String>) {
    let (Some(cache), Some(key)) = (cache, key) else { return (None, None) };
    match cache.store().get(key) {
        Ok(None) => (None, None),
        Ok(Some(bytes)) => match ProbeImage::from_bytes(&bytes) {
            Ok(image) => (Some(image), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) => (None, Some(e.to_string())),
    }
}

/// Lays `selection` out below the module at `below` if it fits there, else in the nearest
/// hole: its start, the length to map, the image.
fn lay_out(
    module: &ElfModule<'_>,
    selection: &Selection,
    shape: &Shape,
    busy: &[(u64, u64)],
    code: (u64, u64),
    below: Option<u64>,
) -> Result<(u64, u64, ProbeImage), LiveError> {
    let first_at = below.unwrap_or_else(|| shape.bias.wrapping_add(page_align(module.end_of_image().0)));
    let first = shape.build(module, selection, first_at)?;
    // Laying out at another address (or again, without a site) can only change jump
    // encodings a little.
    let len = page_align(first.bytes.len() as u64) + PAGE_SIZE;
    match below.filter(|&at| placement::fits(busy, code, at, len)) {
        Some(at) => Ok((at, len, first)),
        None => place(module, selection, shape, busy, code, len),
    }
}

/// Lays `selection` out in the hole of `busy` nearest the module's code that holds `len`
/// bytes: its start, the length to map, the image.
fn place(module: &ElfModule<'_>, selection: &Selection, shape: &Shape, busy: &[(u64, u64)], code: (u64, u64), len: u64) -> Result<(u64, u64, ProbeImage), LiveError> {
    let start = placement::find_hole(busy, code, len)
        .ok_or_else(|| LiveError::Module(format!("{}: no free {len} bytes of address space within ±2 GiB of its code", shape.names.module)))?;
    let image = shape.build(module, selection, start)?;
    if image.bytes.len() as u64 > len {
        return Err(LiveError::Module(format!("{}: the probe image grew when placed", shape.names.module)));
    }
    Ok((start, len, image))
}

/// The module parsed for a planned image's selection and that selection: the one it was
/// planned with (on the function list it indexes), or, for an image from the cache, its
/// analysis again.
fn planned_selection<'d>(
    data: &'d [u8],
    path: &str,
    debug: Option<&lopi_elf::DebugFile>,
    selection: Option<Selection>,
    analysed: &Option<Analysed>,
    source: &Source,
) -> Result<(ElfModule<'d>, Selection), LiveError> {
    let mut module = parse(data, path, debug)?;
    let selection = match (selection, analysed) {
        (Some(selection), Some((functions, fragments))) => {
            module.functions = functions.clone();
            module.fragments = fragments.clone();
            selection
        }
        _ => source.selection(&mut module, &()).0,
    };
    Ok((module, selection))
}

impl ModulePlan {
    /// Gives up the site at `site` (a thread is stopped inside it) and lays out again.
    pub(crate) fn withdraw(&mut self, site: Svma) -> Result<(), LiveError> {
        let (module, mut selection) = planned_selection(&self.data, &self.path, self.debug.as_ref(), self.selection.take(), &self.analysed, &self.source)?;
        if !selection.withdraw(site) {
            return Err(LiveError::Module(format!("{}: a thread is inside the site at {:#x}", self.path, site.0)));
        }
        self.image = self.shape.build(&module, &selection, self.start)?;
        self.selection = Some(selection);
        Ok(())
    }

    /// Whether the image's place is still free in the process whose mappings are `busy`.
    pub(crate) fn fits(&self, busy: &[(u64, u64)]) -> bool {
        placement::fits(busy, self.code, self.start, self.len)
    }

    /// Places the image again, in the hole of `busy` nearest the module's code, and lays it
    /// out there: the process mapped memory where it was to go since it was planned (the
    /// runtime of a module installed before maps its data file where the kernel finds room,
    /// which may be there).
    pub(crate) fn place_again(&mut self, busy: &[(u64, u64)]) -> Result<(), LiveError> {
        let (module, selection) = planned_selection(&self.data, &self.path, self.debug.as_ref(), self.selection.take(), &self.analysed, &self.source)?;
        (self.start, self.len, self.image) = place(&module, &selection, &self.shape, busy, self.code, self.len)?;
        self.selection = Some(selection);
        Ok(())
    }
}
