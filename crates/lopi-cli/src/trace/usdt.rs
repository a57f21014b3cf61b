//! A script's `usdt:` points: the program's SystemTap markers they name, each an instruction
//! point at its `nop` with its arguments where its note says (`lopi_elf::usdt`), and the
//! semaphores of guarded markers, raised in the process while it is traced so that the
//! program's `if (PROV_NAME_ENABLED())` lets the marker fire.
use anyhow::{bail, Context, Result};
use lopi_elf::usdt::UsdtMarker;
use lopi_elf::usdt_args::{Location, UsdtArg};
use lopi_elf::{ElfModule, SymbolTable};
use lopi_image::script::MarkerSite;
use lopi_rt_abi::script::{site_arg, SiteArg};
use lopi_script::ir::{Point, Program};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The markers of the file at `path` (none if it cannot be read).
pub fn file_markers(path: &Path) -> Vec<UsdtMarker> {
    lopi_cache::read_file(path).map(|file| lopi_elf::usdt::markers(&file)).unwrap_or_default()
}

/// Whether `marker` is one a point names: `name` (a glob), of a provider matching `provider`.
pub fn matches(marker: &UsdtMarker, provider: Option<&str>, name: &str) -> bool {
    provider.is_none_or(|p| lopi_script::glob_match(p, &marker.provider)) && lopi_script::glob_match(name, &marker.name)
}

/// The `usdt:` points' markers, by point index, and the semaphores to raise: in the program
/// (`module`, read from `path`) when a point names it (`is_program`), else in the library file
/// `library_file` finds for the point's name. A marker that cannot be probed is left out, and
/// said why on stderr; a point left with none is refused with the reasons.
pub fn sites(
    program: &Program,
    module: &ElfModule<'_>,
    analysis: &lopi_patch::Analysis,
    path: &Path,
    is_program: impl Fn(&str) -> bool,
    library_file: impl Fn(&str) -> Option<PathBuf>,
) -> Result<(BTreeMap<usize, Vec<MarkerSite>>, Semaphores)> {
    let mut out = BTreeMap::new();
    let mut semaphores = Semaphores::default();
    let points = program.probes.iter().flat_map(|p| &p.points).enumerate();
    for (n, point) in points {
        let Point::Usdt { lib, provider, name } = point else { continue };
        let wanted = |m: &&UsdtMarker| matches(m, provider.as_deref(), name);
        let (sites, skipped, file) = if is_program(lib) {
            let (sites, skipped) = marker_sites(point, None, module, analysis, path, wanted, Some(&mut semaphores));
            (sites, skipped, path.to_path_buf())
        } else {
            let Some(file) = library_file(lib) else { bail!("`{point}`: the program loads no library {lib} (at start)") };
            let data = lopi_cache::read_file(&file).with_context(|| format!("reading {}", file.display()))?;
            let debug = lopi_elf::DebugFile::find(&file, &data, &lopi_elf::debug_dir());
            let mut library = ElfModule::parse_with_debug(&data, debug.as_ref()).with_context(|| format!("{}", file.display()))?;
            let analysis = lopi_patch::analyse(&mut library);
            let canonical = super::resolve::canonical_library(lib);
            let (sites, skipped) = marker_sites(point, Some(canonical), &library, &analysis, &file, wanted, None);
            (sites, skipped, file)
        };
        if sites.is_empty() {
            bail!("`{point}` cannot run in {}: {}", file.display(), if skipped.is_empty() { "it has no such marker".to_string() } else { skipped.join("; ") });
        }
        if !skipped.is_empty() {
            eprintln!("lopi: `{point}`: {} of its {} markers cannot be probed, and never fire: {}", skipped.len(), skipped.len() + sites.len(), skipped.join("; "));
        }
        out.insert(n, sites);
    }
    Ok((out, semaphores))
}

/// The markers of `module` (the main executable, or the library `library`) that `wanted`
/// takes and that can be probed, and why the others cannot. A guarded marker's semaphore goes
/// into `semaphores`; without it (a library's, which lopi does not raise yet) the marker is
/// left out.
fn marker_sites(
    point: &Point,
    library: Option<String>,
    module: &ElfModule<'_>,
    analysis: &lopi_patch::Analysis,
    path: &Path,
    wanted: impl Fn(&&UsdtMarker) -> bool,
    mut semaphores: Option<&mut Semaphores>,
) -> (Vec<MarkerSite>, Vec<String>) {
    let (mut sites, mut skipped) = (Vec::new(), Vec::new());
    let mut symbols = None;
    for marker in lopi_elf::usdt::markers(module.data()).iter().filter(wanted) {
        let at = format!("{} at {:#x}", marker.full_name(), marker.addr);
        let args = marker.args.as_ref().map_err(Clone::clone).and_then(|args| {
            let fixed = module.kind == lopi_elf::ModuleKind::Executable;
            args.iter().map(|a| site_arg(a, fixed, || symbols.get_or_insert_with(|| SymbolTable::of(module.data(), path)))).collect::<Result<Vec<_>, String>>()
        });
        let args = match args {
            Ok(args) => args,
            Err(why) => {
                skipped.push(format!("{at}: {why}"));
                continue;
            }
        };
        if let Err(why) = lopi_patch::point_fits(module, analysis, marker.addr) {
            skipped.push(format!("{at}: {why}"));
            continue;
        }
        match semaphores.as_deref_mut() {
            Some(semaphores) => {
                if let Some(note) = semaphores.add(module, marker) {
                    eprintln!("lopi: note: `{point}`: {note}");
                }
            }
            None if marker.semaphore != 0 => {
                skipped.push(format!("{at}: it is guarded by a semaphore, which lopi raises in the program only, not yet in a library"));
                continue;
            }
            None => {}
        }
        sites.push(MarkerSite { library: library.clone(), addr: marker.addr, args });
    }
    (sites, skipped)
}

/// Where one argument is, for the runtime; a symbol (`counter(%rip)`) by its address in the
/// module, which `symbols` looks up (added to a register only in a program loaded where it
/// was linked, `fixed`: a non-PIE one).
fn site_arg<'t>(arg: &UsdtArg, fixed: bool, symbols: impl FnOnce() -> &'t SymbolTable) -> Result<SiteArg, String> {
    let base = SiteArg { size: arg.size, signed: u8::from(arg.signed), base: site_arg::NO_REG, index: site_arg::NO_REG, ..SiteArg::default() };
    Ok(match &arg.location {
        Location::Constant(value) => SiteArg { kind: site_arg::CONSTANT, value: *value, ..base },
        Location::Register(reg) => SiteArg { kind: site_arg::REGISTER, base: reg.number, high_byte: u8::from(reg.high_byte), ..base },
        Location::Memory { symbol, disp, base: reg, index } => {
            let mut arg = SiteArg {
                kind: site_arg::MEMORY,
                base: reg.map_or(site_arg::NO_REG, |r| r.number),
                index: index.map_or(site_arg::NO_REG, |(r, _)| r.number),
                scale: index.map_or(0, |(_, scale)| scale),
                value: *disp,
                ..base
            };
            if let Some(name) = symbol {
                let addr = symbols().address_of(name).ok_or_else(|| format!("its argument `{name}` is a symbol the file does not name"))?;
                arg.value = arg.value.wrapping_add(addr as i64);
                match reg {
                    None => arg.base = site_arg::IMAGE,
                    Some(_) if fixed => {}
                    Some(_) => return Err(format!("its argument `{name}` plus a register is an absolute address in a file that moves")),
                }
            }
            arg
        }
    })
}

/// The semaphores (module addresses, each once) of the probed markers that have one.
#[derive(Default)]
pub struct Semaphores(Vec<u64>);

impl Semaphores {
    /// Adds `marker`'s semaphore, if it has one; one that is in no writable part of the file
    /// cannot be raised, and the note says so (the marker then fires only when the program
    /// runs it unguarded).
    fn add(&mut self, module: &ElfModule<'_>, marker: &UsdtMarker) -> Option<String> {
        const PF_W: u32 = 2;
        let at = marker.semaphore;
        if at == 0 || self.0.contains(&at) {
            return None;
        }
        if !module.segments.iter().any(|s| s.flags & PF_W != 0 && (s.vaddr.0..s.vaddr.0 + s.memsz).contains(&at)) {
            return Some(format!("{} at {:#x}: its semaphore's address {at:#x} is in no writable part of the file, so lopi cannot raise it (the marker fires only when the program runs it unguarded)", marker.full_name(), marker.addr));
        }
        self.0.push(at);
        None
    }

    /// Adds `delta` to each semaphore in process `pid`, whose program is loaded at `bias`.
    pub fn adjust(&self, pid: i32, bias: u64, delta: i16) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let memory = lopi_live::procfs::Memory::open(pid)?;
        for &semaphore in &self.0 {
            let at = semaphore.wrapping_add(bias);
            let bytes: [u8; 2] = memory.read(at, 2)?.try_into().map_err(|_| anyhow::anyhow!("reading the semaphore at {at:#x}: short read"))?;
            let value = u16::from_le_bytes(bytes).wrapping_add_signed(delta);
            memory.write(at, &value.to_le_bytes())?;
        }
        Ok(())
    }
}
