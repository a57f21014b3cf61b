//! Every named address of a file (functions and data, from `.symtab`, `.dynsym`, its
//! separate debug file, or else its MiniDebugInfo), for naming run-time addresses through a process's memory map: a
//! lock in static storage (`cache_lock`, `_rtld_global+2568`), a call's return address.
use crate::debug_file::{DebugData, DebugFile};
use object::read::elf::{ElfFile64, ProgramHeader as _};
use object::{LittleEndian as LE, Object, ObjectSymbol, ReadRef, SymbolKind};

/// A symbol's name with the offset into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolAt {
    pub name: String,
    pub offset: u64,
    pub function: bool,
}

/// The loadable segments and symbols of one file.
#[derive(Default)]
pub struct SymbolTable {
    /// (file offset, vaddr, file size) of each `PT_LOAD`.
    loads: Vec<(u64, u64, u64)>,
    /// (address, size, name, is a function), by address.
    symbols: Vec<(u64, u64, String, bool)>,
}

impl SymbolTable {
    /// The table of the ELF file `data` read from `path` (with its debug file's symbols when
    /// one is found); an empty one for anything that does not parse.
    pub fn of(data: &[u8], path: &std::path::Path) -> SymbolTable {
        let Ok(file) = ElfFile64::<LE, &[u8]>::parse(data) else { return SymbolTable::default() };
        let mut table = SymbolTable::default();
        if let Ok(headers) = file.elf_program_headers().iter().try_fold(Vec::new(), |mut v, p| {
            if p.p_type(LE) == object::elf::PT_LOAD {
                v.push((p.p_offset(LE), p.p_vaddr(LE), p.p_filesz(LE)));
            }
            Ok::<_, ()>(v)
        }) {
            table.loads = headers;
        }
        table.add(&file);
        if let Some(debug) = DebugFile::find(path, data, &crate::debug_dir()) {
            match debug.data() {
                DebugData::File(cache) => table.add_from(cache),
                DebugData::Bytes(bytes) => table.add_from(bytes),
            }
        } else if let Some(mini) = crate::mini_debuginfo::embedded_elf(data) {
            table.add_from(mini.as_slice());
        }
        table.symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        table.symbols.dedup_by(|a, b| a.0 == b.0 && a.2 == b.2);
        table
    }

    fn add_from<'d, R: ReadRef<'d>>(&mut self, data: R) {
        if let Ok(file) = ElfFile64::<LE, R>::parse(data) {
            self.add(&file);
        }
    }

    fn add<'d, R: ReadRef<'d>>(&mut self, file: &ElfFile64<'d, LE, R>) {
        for s in file.symbols().chain(file.dynamic_symbols()) {
            // An import's address, when it has one, is its PLT entry's: not its code.
            if s.is_undefined() {
                continue;
            }
            let function = match s.kind() {
                SymbolKind::Text => true,
                SymbolKind::Data | SymbolKind::Tls => false,
                _ => continue,
            };
            if let Ok(name) = s.name() {
                if !name.is_empty() && s.address() != 0 {
                    self.symbols.push((s.address(), s.size(), name.to_string(), function));
                }
            }
        }
    }

    /// The address the file's byte at `offset` is loaded at (its link-time address).
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        self.loads.iter().find(|&&(off, _, size)| offset >= off && offset < off + size).map(|&(off, vaddr, _)| vaddr + (offset - off))
    }

    /// The symbol covering link-time address `addr` (the closest one below it when sizes
    /// are unknown, for functions only).
    pub fn lookup(&self, addr: u64) -> Option<SymbolAt> {
        let end = self.symbols.partition_point(|s| s.0 <= addr);
        let below = &self.symbols[..end];
        let within = below.iter().rev().take(64).find(|s| addr < s.0 + s.1.max(1));
        let (start, _, name, function) = within.or_else(|| below.last().filter(|s| s.3 && s.1 == 0))?;
        Some(SymbolAt { name: name.clone(), offset: addr - start, function: *function })
    }

    /// The link-time address of the symbol named `name`, if exactly one address has that name
    /// (two `static` variables of one name in two files are not told apart).
    pub fn address_of(&self, name: &str) -> Option<u64> {
        let mut found = self.symbols.iter().filter(|s| s.2 == name).map(|s| s.0);
        let first = found.next()?;
        found.all(|a| a == first).then_some(first)
    }
}
