//! Reading the files lopi is given: programs (with their separate debug files) and data
//! files.
use anyhow::{bail, Context, Result};
use lopi_cache::ModuleFile;
use lopi_elf::ElfModule;
use std::path::{Path, PathBuf};

/// Reads a data file through a mapping: thread chunks reserve room for their trees and
/// traces that mostly stays sparse, and only the used parts are ever touched. What is damaged
/// is said on stderr, one line each, and the rest is read; a file without one whole module
/// record is an error.
pub(crate) fn read_data(path: &Path) -> Result<lopi_trace::DataFile> {
    let data = read_data_quietly(path)?;
    let name = path.display();
    const SHOWN: usize = 5;
    for damage in data.damage.iter().take(SHOWN) {
        eprintln!("lopi: warning: {name}: {damage}; skipped, the rest is read");
    }
    if data.damage.len() > SHOWN {
        eprintln!("lopi: warning: {name}: {} more damaged parts skipped", data.damage.len() - SHOWN);
    }
    Ok(data)
}

/// [`read_data`] without the warnings of damaged parts: for a data file read while its
/// program writes it, where a part being appended reads as damage until it is whole.
#[allow(unsafe_code)]
pub(crate) fn read_data_quietly(path: &Path) -> Result<lopi_trace::DataFile> {
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
    Ok(data)
}

pub(crate) fn read(path: &Path) -> Result<ModuleFile> {
    lopi_cache::read_file(path).with_context(|| format!("reading {}", path.display()))
}

/// The separate debug file of `path`, if it has one.
pub(crate) fn debug_file(path: &Path, data: &[u8]) -> Option<lopi_elf::DebugFile> {
    lopi_elf::DebugFile::find(path, data, &lopi_elf::debug_dir())
}

/// Parses `path` for planning, with the symbols of its separate debug file if it has one.
pub(crate) fn parse<'d>(path: &Path, data: &'d [u8], debug: Option<&lopi_elf::DebugFile>) -> Result<ElfModule<'d>> {
    ElfModule::parse_with_debug(data, debug).with_context(|| format!("{}", path.display()))
}

/// `p` as an absolute path (as given if it cannot be made one).
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
