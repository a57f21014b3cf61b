//! Function discovery: symbols first (the file's, its separate debug file's, or its
//! MiniDebugInfo's), then `.eh_frame` FDEs for what symbols miss; the FDEs' LSDAs give the
//! exception landing pads.
//!
//! An FDE start is a function entry only if the canonical frame address there is `rsp+8`
//! (the return address was just pushed). That rejects `.cold`/`.part` fragments, which
//! start in the middle of their parent's frame, in stripped binaries too.
use crate::debug_file::{DebugData, DebugFile};
use crate::unwind::{Fde, FrameTable};
use crate::{CodeSection, ElfError, ElfModule, Svma};
use object::elf;
use object::read::elf::{FileHeader as _, SectionTable, Sym as _};
use object::read::ReadRef;
use object::LittleEndian as LE;
use std::collections::{BTreeMap, HashSet};

/// Where a function was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FunctionSource {
    Symtab,
    /// The `.symtab` of a separate debug file.
    DebugFile,
    /// The `.symtab` of the file's `.gnu_debugdata` (MiniDebugInfo).
    MiniDebugInfo,
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

/// Functions and fragments found so far, by address.
struct Found<'a> {
    code: &'a [CodeSection],
    fdes: &'a BTreeMap<u64, Fde>,
    by_addr: BTreeMap<u64, Function>,
    fragments: BTreeMap<u64, u64>,
    /// Functions named from `.dynsym` already.
    exported: HashSet<u64>,
}

impl Found<'_> {
    fn in_code(&self, addr: u64) -> bool {
        self.code.iter().any(|s| addr >= s.addr.0 && addr < s.addr.0 + s.size)
    }

    /// Adds the function symbols of one table; returns whether the table has any symbol.
    fn add_symbols<'d, R: ReadRef<'d>>(
        &mut self,
        sections: &SectionTable<'d, elf::FileHeader64<LE>, R>,
        data: R,
        kind: u32,
        source: FunctionSource,
    ) -> bool {
        let Ok(table) = sections.symbols(LE, data, kind) else { return false };
        for sym in table.iter() {
            let st_type = sym.st_type();
            if (st_type != elf::STT_FUNC && st_type != elf::STT_GNU_IFUNC) || sym.st_shndx(LE) == elf::SHN_UNDEF {
                continue;
            }
            let addr = sym.st_value(LE);
            if addr == 0 || !self.in_code(addr) {
                continue;
            }
            let name = match table.symbol_name(LE, sym) {
                Ok(n) => String::from_utf8_lossy(n).into_owned(),
                Err(_) => continue,
            };
            let fde = self.fdes.get(&addr).copied();
            let size = match sym.st_size(LE) {
                0 => fde.map_or(0, |f| f.len),
                n => n,
            };
            let size = if addr.checked_add(size).is_some() { size } else { 0 };
            if name.contains(".cold") || fde.is_some_and(|f| !f.is_entry) {
                self.fragments.insert(addr, size);
                continue;
            }
            match self.by_addr.get_mut(&addr) {
                // Exported names are the ones users know (`getpid`, not `__GI___getpid`): the
                // first dynamic name is the primary one, with the file's symbols or a debug file's.
                Some(f) if source == FunctionSource::Dynsym && self.exported.insert(addr) => {
                    f.size = f.size.max(size);
                    if f.name != name {
                        f.aliases.retain(|a| *a != name);
                        let old = std::mem::replace(&mut f.name, name);
                        f.aliases.push(old);
                    }
                }
                Some(f) => {
                    f.size = f.size.max(size);
                    if f.name != name && !f.aliases.contains(&name) {
                        // Prefer a global name as the primary one.
                        if sym.st_bind() == elf::STB_GLOBAL && f.source != FunctionSource::Dynsym && f.name.starts_with('.') {
                            let old = std::mem::replace(&mut f.name, name);
                            f.aliases.push(old);
                        } else {
                            f.aliases.push(name);
                        }
                    }
                }
                None => {
                    if source == FunctionSource::Dynsym {
                        self.exported.insert(addr);
                    }
                    self.by_addr.insert(addr, Function { name, addr: Svma(addr), size, source, aliases: Vec::new() });
                }
            }
        }
        !table.is_empty()
    }

    /// Adds the `.symtab` of another file (a separate debug file, a MiniDebugInfo); returns
    /// whether it had symbols. A file whose headers do not parse adds nothing.
    fn add_debug_symbols<'d, R: ReadRef<'d>>(&mut self, data: R, source: FunctionSource) -> bool {
        let Ok(header) = elf::FileHeader64::<LE>::parse(data) else { return false };
        let Ok(sections) = header.sections(LE, data) else { return false };
        self.add_symbols(&sections, data, elf::SHT_SYMTAB, source)
    }
}

pub(crate) fn discover(
    module: &mut ElfModule<'_>,
    sections: &SectionTable<'_, elf::FileHeader64<LE>>,
    debug: Option<&DebugFile>,
) -> Result<(), ElfError> {
    let data = module.data;
    let frames = FrameTable::read(data, sections, |addr| {
        module.bytes_from(Svma(addr)).and_then(|b| b.first_chunk()).map(|b| u64::from_le_bytes(*b))
    })
    .unwrap_or_default();
    let fdes: BTreeMap<u64, Fde> = frames.fdes.iter().map(|f| (f.start, *f)).collect();
    let mut found = Found { code: &module.code_sections, fdes: &fdes, by_addr: BTreeMap::new(), fragments: BTreeMap::new(), exported: HashSet::new() };
    // The file's own symbols, then a debug file's (a stripped file has none of its own), else
    // its MiniDebugInfo's (a subset of a debug file's), then the dynamic ones (exported names;
    // aliases of what the others found).
    let has_symtab = found.add_symbols(sections, data, elf::SHT_SYMTAB, FunctionSource::Symtab);
    let debug_symbols = debug.is_some_and(|d| match d.data() {
        DebugData::File(cache) => found.add_debug_symbols(cache, FunctionSource::DebugFile),
        DebugData::Bytes(bytes) => found.add_debug_symbols(bytes, FunctionSource::DebugFile),
    });
    let mini_symbols = !has_symtab
        && !debug_symbols
        && crate::mini_debuginfo::embedded_elf(data).is_some_and(|elf| found.add_debug_symbols(elf.as_slice(), FunctionSource::MiniDebugInfo));
    found.add_symbols(sections, data, elf::SHT_DYNSYM, FunctionSource::Dynsym);
    let Found { mut by_addr, mut fragments, .. } = found;
    let in_code = |code: &[CodeSection], addr: u64| code.iter().any(|s| addr >= s.addr.0 && addr < s.addr.0 + s.size);
    module.has_symtab = has_symtab || debug_symbols || mini_symbols;
    module.mini_debuginfo = mini_symbols;
    module.debug_file = debug.filter(|_| debug_symbols).map(|d| d.path.clone());

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
