//! Code addresses the file itself hands out, outside its instructions: the entry point,
//! `DT_INIT`/`DT_FINI`, symbols, dynamic relocations (`R_X86_64_RELATIVE` addends, `S + A` of
//! the others) and 8-byte words in loaded data (`.init_array`, function-pointer tables, and
//! for non-PIC files any stored pointer). A code address named there may be called from
//! anywhere, so it is a function entry.
use crate::{ElfModule, Svma};
use object::elf;
use object::read::elf::{FileHeader as _, Rela as _, SectionHeader as _, SectionTable, Sym as _};
use object::LittleEndian as LE;
use std::collections::BTreeSet;

impl ElfModule<'_> {
    /// Which of `candidates` the file refers to other than from code (see the module docs).
    /// Over-reporting is safe: it only keeps a candidate a function.
    pub fn referenced_from_data(&self, candidates: &BTreeSet<u64>) -> BTreeSet<u64> {
        let mut found = BTreeSet::new();
        let mut check = |addr: u64| {
            if candidates.contains(&addr) {
                found.insert(addr);
            }
        };
        check(self.entry.0);
        for d in &self.dynamic {
            if d.tag == u64::from(elf::DT_INIT) || d.tag == u64::from(elf::DT_FINI) {
                check(d.value);
            }
        }
        self.data_words(&mut check);
        if let Ok(sections) = elf::FileHeader64::<LE>::parse(self.data).and_then(|h| h.sections(LE, self.data)) {
            symbols_and_relocations(self.data, &sections, &mut check);
        }
        found
    }

    /// Every aligned 8-byte word of the loaded file bytes outside the code sections.
    fn data_words(&self, check: &mut impl FnMut(u64)) {
        for s in &self.segments {
            let Some(bytes) = self.bytes_from(s.vaddr).and_then(|b| b.get(..s.filesz as usize)) else { continue };
            let skip = s.vaddr.0.wrapping_neg() % 8;
            let mut addr = s.vaddr.0 + skip;
            for word in bytes.get(skip as usize..).unwrap_or(&[]).chunks_exact(8) {
                if self.code_section_of(Svma(addr)).is_none() {
                    check(u64::from_le_bytes(word.try_into().unwrap_or([0; 8])));
                }
                addr += 8;
            }
        }
    }
}

/// Values of every symbol (any type) and of every allocated `SHT_RELA` relocation.
fn symbols_and_relocations(data: &[u8], sections: &SectionTable<'_, elf::FileHeader64<LE>>, check: &mut impl FnMut(u64)) {
    for kind in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        if let Ok(table) = sections.symbols(LE, data, kind) {
            table.iter().filter(|s| s.st_shndx(LE) != elf::SHN_UNDEF).for_each(|s| check(s.st_value(LE)));
        }
    }
    for section in sections.iter() {
        if section.sh_type(LE) != elf::SHT_RELA || section.sh_flags(LE) & u64::from(elf::SHF_ALLOC) == 0 {
            continue;
        }
        let Ok(Some((relas, link))) = section.rela(LE, data) else { continue };
        let symbols = sections.symbol_table_by_index(LE, data, link).ok();
        for rela in relas {
            let sym = rela.r_sym(LE, false);
            let base = match (sym, &symbols) {
                (0, _) => 0,
                (n, Some(table)) => table
                    .symbol(object::SymbolIndex(n as usize))
                    .ok()
                    .filter(|s| s.st_shndx(LE) != elf::SHN_UNDEF)
                    .map_or(0, |s| s.st_value(LE)),
                (_, None) => 0,
            };
            check(base.wrapping_add(rela.r_addend(LE) as u64));
        }
    }
}
