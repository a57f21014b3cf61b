//! What to install, worked out while the process runs: which functions of which loaded
//! modules, and each module's probe image laid out at a free address near its code. Only
//! the checks that need the threads held (where they stand, the code bytes) and the writes
//! happen while the process is paused.
use crate::procfs::{self, Mapping};
use crate::{load_bias, module_path, placement, EnvBlock, LiveError, Spec};
use lopi_elf::{ElfModule, Svma};
use lopi_image::{ModuleNames, ProbeImage, Recording, Request};
use lopi_cache::{Lookup, ModuleFile};
use lopi_patch::{Progress, Selection};
use lopi_rt_abi::{page_align, PAGE_SIZE};
use std::time::{Duration, Instant};

/// Room below a module besides twice its code, for the first layout (runtime, metadata).
const BELOW_ROOM: u64 = 1 << 20;

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
    pub(crate) functions: usize,
    /// Whether the selection came from the plan cache.
    pub lookup: Lookup,
    pub(crate) image: ProbeImage,
    data: ModuleFile,
    selection: Selection,
    names: ModuleNames,
    recording: Recording,
    env_len: usize,
}

/// Plans `spec` for process `pid`. `entry`: where `lopi run` stopped the program, whose
/// function (`_start`) is then counted, not timed, as in a rewritten file.
pub fn plan(pid: i32, spec: &Spec, entry: Option<u64>, progress: &dyn Progress) -> Result<Plan, LiveError> {
    let started = Instant::now();
    let unreadable = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::PermissionDenied => LiveError::PermissionDenied { pid, hint: crate::permission_hint() },
        std::io::ErrorKind::NotFound => LiveError::NoSuchProcess(pid),
        _ => LiveError::Io { what: format!("reading /proc/{pid}"), source: e },
    };
    let maps = procfs::maps(pid).map_err(unreadable)?;
    let exe = procfs::exe(pid).map_err(unreadable)?.display().to_string();
    let mut busy = placement::occupied(&maps, procfs::start_brk(pid));
    let env_len = EnvBlock::new(&spec.env).len();
    let mut modules = Vec::new();
    for request in &spec.modules {
        let path = module_path(&maps, &exe, request.library.as_deref())?;
        let mapped: Vec<&Mapping> = maps.iter().filter(|m| m.path == path).collect();
        let data = lopi_cache::map_file(format!("/proc/{pid}/root{path}").as_ref())
            .or_else(|_| lopi_cache::map_file(path.as_ref()))
            .map_err(LiveError::io(format!("reading {path}")))?;
        let module = ElfModule::parse(&data).map_err(|e| LiveError::Module(format!("{path}: {e}")))?;
        let bias = load_bias(&module, &mapped).ok_or_else(|| LiveError::Module(format!("{path}: cannot tell where it is loaded")))?;
        let code = mapped.iter().filter(|m| m.executable).fold((u64::MAX, 0), |(lo, hi), m| (lo.min(m.start), hi.max(m.end)));
        if code.0 >= code.1 {
            return Err(LiveError::Module(format!("{path}: no executable mapping")));
        }
        let key = data.id.map(|id| lopi_cache::plan_key(id, &data, &request.filter, spec.timing));
        let (mut selection, lookup) = lopi_cache::selection(spec.cache.as_ref(), key.as_ref(), &module, || {
            lopi_patch::select_with(&module, &request.filter, spec.timing, progress)
        });
        if let Some(entry) = entry.filter(|_| request.library.is_none()) {
            let entry = entry.wrapping_sub(bias);
            if let Some(f) = module.functions.iter().position(|f| f.addr.0 <= entry && entry < f.addr.0 + f.size.max(1)) {
                selection.count_only(f, lopi_patch::UntimedReason::EntryPoint);
            }
        }
        let names = ModuleNames { module: path.clone(), source: path.clone() };
        let functions = module.functions.len();
        // Laid out first below the module, with room for an image twice the size of its code
        // (images are far smaller): used there when the space is free, which spares a
        // second layout; else placed in the nearest hole and laid out again.
        let low = mapped.iter().map(|m| m.start).min().unwrap_or(code.0);
        let below = low.checked_sub(page_align(2 * (code.1 - code.0) + BELOW_ROOM));
        let first_at = below.unwrap_or_else(|| bias.wrapping_add(page_align(module.end_of_image().0)));
        let first = build(&module, &selection, &names, spec.recording, env_len, first_at.wrapping_sub(bias), &path)?;
        // Laying out at another address (or again, without a site) can only change jump
        // encodings a little.
        let len = page_align(first.bytes.len() as u64) + PAGE_SIZE;
        let start = match below.filter(|&at| placement::fits(&busy, code, at, len)) {
            Some(at) => at,
            None => placement::find_hole(&busy, code, len)
                .ok_or_else(|| LiveError::Module(format!("{path}: no free address space within ±2 GiB of its code")))?,
        };
        busy.push((start, start + len + PAGE_SIZE));
        busy.sort_unstable();
        let image = if start == first_at { first } else { build(&module, &selection, &names, spec.recording, env_len, start.wrapping_sub(bias), &path)? };
        if image.bytes.len() as u64 > len {
            return Err(LiveError::Module(format!("{path}: the probe image grew when placed")));
        }
        drop(module);
        modules.push(ModulePlan { path, bias, start, len, functions, lookup, image, data, selection, names, recording: spec.recording, env_len });
    }
    Ok(Plan { pid, exe, env: spec.env.clone(), modules, took: started.elapsed() })
}

fn build(
    module: &ElfModule<'_>,
    selection: &Selection,
    names: &ModuleNames,
    recording: Recording,
    env_len: usize,
    at: u64,
    path: &str,
) -> Result<ProbeImage, LiveError> {
    let request = Request { names, recording, at, entry_room: 16, header_room: env_len, fork_handlers: false };
    lopi_image::build(module, selection.clone(), &request).map_err(|e| LiveError::Module(format!("{path}: {e}")))
}

impl ModulePlan {
    /// Gives up the site at `site` (a thread is stopped inside it) and lays out again.
    pub(crate) fn withdraw(&mut self, site: Svma) -> Result<(), LiveError> {
        if !self.selection.withdraw(site) {
            return Err(LiveError::Module(format!("{}: a thread is inside the site at {:#x}", self.path, site.0)));
        }
        let module = ElfModule::parse(&self.data).map_err(|e| LiveError::Module(format!("{}: {e}", self.path)))?;
        let at = self.start.wrapping_sub(self.bias);
        self.image = build(&module, &self.selection, &self.names, self.recording, self.env_len, at, &self.path)?;
        Ok(())
    }
}
