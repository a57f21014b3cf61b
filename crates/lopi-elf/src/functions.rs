//! Function discovery: symbols first, then `.eh_frame` FDEs for what symbols miss; the FDEs'
//! LSDAs give the exception landing pads.
//!
//! An FDE start is a function entry only if the canonical frame address there is `rsp+8`
//! (the return address was just pushed). That rejects `.cold`/`.part` fragments, which
//! start in the middle of their parent's frame, in stripped binaries too.
use crate::unwind::{Fde, FrameTable};
use crate::{CodeSection, ElfError, ElfModule, Svma};
use object::elf;
use object::read::elf::{SectionTable, Sym as _};
use object::LittleEndian as LE;
use std::collections::BTreeMap;

/// Where a function was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FunctionSource {
    Symtab,
    Dynsym,
    EhFrame,
}

/// A function entry point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Function {
    pub name: String,
    pub addr: Svma,
    /// Bytes of code; 0 when unknown.
    pub size: u64,
    pub source: FunctionSource,
    /// Other symbol names for the same address.
    pub aliases: Vec<String>,
}

pub(crate) fn discover(
    module: &mut ElfModule<'_>,
    sections: &SectionTable<'_, elf::FileHeader64<LE>>,
) -> Result<(), ElfError> {
    let data = module.data;
    let frames = FrameTable::read(data, sections, |addr| {
        module.bytes_from(Svma(addr)).and_then(|b| b.first_chunk()).map(|b| u64::from_le_bytes(*b))
    })
    .unwrap_or_default();
    let fdes: BTreeMap<u64, Fde> = frames.fdes.iter().map(|f| (f.start, *f)).collect();
    let in_code = |code: &[CodeSection], addr: u64| code.iter().any(|s| addr >= s.addr.0 && addr < s.addr.0 + s.size);

    let mut by_addr: BTreeMap<u64, Function> = BTreeMap::new();
    let mut fragments: BTreeMap<u64, u64> = BTreeMap::new();
    for (kind, source) in [(elf::SHT_SYMTAB, FunctionSource::Symtab), (elf::SHT_DYNSYM, FunctionSource::Dynsym)] {
        let table = match sections.symbols(LE, data, kind) {
            Ok(t) => t,
            Err(_) => continue,
        };
        if kind == elf::SHT_SYMTAB && !table.is_empty() {
            module.has_symtab = true;
        }
        for sym in table.iter() {
            let st_type = sym.st_type();
            if (st_type != elf::STT_FUNC && st_type != elf::STT_GNU_IFUNC) || sym.st_shndx(LE) == elf::SHN_UNDEF {
                continue;
            }
            let addr = sym.st_value(LE);
            if addr == 0 || !in_code(&module.code_sections, addr) {
                continue;
            }
            let name = match table.symbol_name(LE, sym) {
                Ok(n) => String::from_utf8_lossy(n).into_owned(),
                Err(_) => continue,
            };
            let fde = fdes.get(&addr).copied();
            let size = match sym.st_size(LE) {
                0 => fde.map_or(0, |f| f.len),
                n => n,
            };
            let size = if addr.checked_add(size).is_some() { size } else { 0 };
            if name.contains(".cold") || fde.is_some_and(|f| !f.is_entry) {
                fragments.insert(addr, size);
                continue;
            }
            match by_addr.get_mut(&addr) {
                Some(f) => {
                    f.size = f.size.max(size);
                    if f.name != name && !f.aliases.contains(&name) {
                        // Prefer a global name as the primary one.
                        if sym.st_bind() == elf::STB_GLOBAL && f.source == FunctionSource::Symtab && f.name.starts_with('.') {
                            let old = std::mem::replace(&mut f.name, name);
                            f.aliases.push(old);
                        } else {
                            f.aliases.push(name);
                        }
                    }
                }
                None => {
                    by_addr.insert(addr, Function { name, addr: Svma(addr), size, source, aliases: Vec::new() });
                }
            }
        }
    }

    // FDEs cover what symbols miss (stripped files keep .eh_frame).
    let symbol_ranges: Vec<(u64, u64)> = by_addr.values().map(|f| (f.addr.0, f.addr.0 + f.size)).collect();
    let covered = |addr: u64| {
        let i = symbol_ranges.partition_point(|&(start, _)| start <= addr);
        i > 0 && addr < symbol_ranges[i - 1].1
    };
    for (&addr, fde) in &fdes {
        if by_addr.contains_key(&addr) || fragments.contains_key(&addr) || !in_code(&module.code_sections, addr) {
            continue;
        }
        if !fde.is_entry || covered(addr) {
            fragments.insert(addr, fde.len);
            continue;
        }
        by_addr.insert(
            addr,
            Function { name: format!("sub_{addr:x}"), addr: Svma(addr), size: fde.len, source: FunctionSource::EhFrame, aliases: Vec::new() },
        );
    }
    module.functions = by_addr.into_values().collect();
    module.fragments = fragments.into_iter().map(|(a, l)| (Svma(a), l)).collect();
    // Pads are not checked against their FDE's range: an explicit LPStart (Clang's basic-block
    // sections) may put them in another section.
    let mut pads: Vec<Svma> = fdes
        .iter()
        .filter_map(|(&start, fde)| {
            let lsda = fde.lsda?;
            Some(crate::lsda::landing_pads(module.bytes_from(Svma(lsda))?, lsda, start))
        })
        .flatten()
        .map(Svma)
        .collect();
    pads.sort_unstable();
    pads.dedup();
    module.landing_pads = pads;
    module.frames = frames;
    Ok(())
}
