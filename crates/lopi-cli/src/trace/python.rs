//! `pystack`: the program must be a CPython whose frames the runtime can walk (3.11), with its
//! state in the executable or in a libpython it loads; the runtime finds `_PyRuntime` there
//! itself, through the loader's list of objects.
use anyhow::{bail, Result};
use lopi_rt_abi::python::PY_VERSION_MAJOR_MINOR;
use lopi_script::ir::Program;
use std::path::{Path, PathBuf};

/// Refuses a script using `pystack` on a program that is not CPython 3.11, saying why.
pub fn check(program: &Program, module: &lopi_elf::ElfModule<'_>, path: &Path, libraries: &[PathBuf]) -> Result<()> {
    if !program.needs().pystack {
        return Ok(());
    }
    let symbols = lopi_elf::SymbolTable::of(module.data(), path);
    let Some(version) = symbols.address_of("Py_Version") else {
        let libpython = format!("libpython{}.{}", PY_VERSION_MAJOR_MINOR >> 8, PY_VERSION_MAJOR_MINOR & 0xff);
        if libraries.iter().any(|l| l.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&libpython))) {
            return Ok(());
        }
        bail!("`pystack` reads CPython 3.11's frames, and {} is no Python interpreter: it has no `Py_Version` and loads no {libpython}", path.display());
    };
    let hex = module.bytes_from(lopi_elf::Svma(version)).and_then(|b| b.get(..4)).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    match hex {
        Some(hex) if u64::from(hex >> 16) == PY_VERSION_MAJOR_MINOR => Ok(()),
        Some(hex) => bail!("`pystack` reads CPython 3.11's frames; {} is Python {}.{}", path.display(), hex >> 24, (hex >> 16) & 0xff),
        None => bail!("`pystack`: cannot read {}'s `Py_Version`", path.display()),
    }
}
