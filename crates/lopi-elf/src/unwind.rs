//! `.eh_frame` as the planner asks it: which FDEs exist, and where the canonical frame address
//! (CFA) is at a given instruction. The CFA tells a real exit from a jump inside a function:
//! a `ret` or tail jump leaves with the stack as it was at the entry (CFA = `rsp+8`), while a
//! jump through a table with a frame still set up (CFA = `rsp+N`, `rbp+16`) stays inside.
use crate::{malformed, ElfError, Svma};
use gimli::{CfaRule, UnwindSection};
use object::elf;
use object::read::elf::{SectionHeader as _, SectionTable};
use object::LittleEndian as LE;

/// Where the canonical frame address is, relative to a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cfa {
    /// `rsp + n`: `n` = 8 right at an entry or an exit.
    Rsp(i64),
    /// Any other rule (a frame pointer, an expression).
    Other,
}

/// One FDE: the code it covers, where it sits in `.eh_frame`, and facts read at its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fde {
    pub start: u64,
    pub len: u64,
    /// Offset of the FDE in the section.
    offset: usize,
    /// The CFA at the FDE's first byte is `rsp+8`: a fresh call frame.
    pub is_entry: bool,
    /// Address of the FDE's LSDA (C++ exception tables), if it has one.
    pub lsda: Option<u64>,
}

/// The module's FDEs, sorted by start address.
#[derive(Default)]
pub(crate) struct FrameTable {
    /// File range of `.eh_frame`.
    section: std::ops::Range<usize>,
    section_addr: u64,
    text_addr: Option<u64>,
    got_addr: Option<u64>,
    pub fdes: Vec<Fde>,
}

impl FrameTable {
    /// Reads every FDE; a malformed entry ends the walk (what was read is still valid). No
    /// `.eh_frame` gives an empty table.
    pub fn read(
        data: &[u8],
        sections: &SectionTable<'_, elf::FileHeader64<LE>>,
        bytes_from: impl Fn(u64) -> Option<u64>,
    ) -> Result<FrameTable, ElfError> {
        let Some((_, section)) = sections.section_by_name(LE, b".eh_frame") else { return Ok(FrameTable::default()) };
        if section.sh_type(LE) == elf::SHT_NOBITS {
            return Ok(FrameTable::default());
        }
        let (offset, size) = section.file_range(LE).ok_or_else(|| malformed(".eh_frame range"))?;
        let range = offset as usize..offset.checked_add(size).ok_or_else(|| malformed(".eh_frame range"))? as usize;
        if data.get(range.clone()).is_none() {
            return Err(malformed(".eh_frame outside the file"));
        }
        let mut table = FrameTable {
            section: range,
            section_addr: section.sh_addr(LE),
            text_addr: sections.section_by_name(LE, b".text").map(|(_, s)| s.sh_addr(LE)),
            got_addr: sections.section_by_name(LE, b".got").map(|(_, s)| s.sh_addr(LE)),
            fdes: Vec::new(),
        };
        let eh_frame = table.eh_frame(data);
        let bases = table.bases();
        let mut ctx = gimli::UnwindContext::new();
        let mut entries = eh_frame.entries(&bases);
        while let Ok(Some(entry)) = entries.next() {
            let gimli::CieOrFde::Fde(partial) = entry else { continue };
            let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else { continue };
            let start = fde.initial_address();
            if start == 0 || fde.len() == 0 || start.checked_add(fde.len()).is_none() {
                continue;
            }
            let is_entry = match fde.unwind_info_for_address(&eh_frame, &bases, &mut ctx, start) {
                Ok(row) => cfa_of(row.cfa()) == Cfa::Rsp(8),
                Err(_) => false,
            };
            let lsda = match fde.lsda() {
                Some(gimli::Pointer::Direct(addr)) => Some(addr),
                // The FDE holds the address of a pointer to the LSDA; the file has its link-time value.
                Some(gimli::Pointer::Indirect(addr)) => bytes_from(addr),
                None => None,
            };
            table.fdes.push(Fde { start, len: fde.len(), offset: fde.offset(), is_entry, lsda });
        }
        table.fdes.sort_by_key(|f| f.start);
        table.fdes.dedup_by_key(|f| f.start);
        Ok(table)
    }

    fn eh_frame<'d>(&self, data: &'d [u8]) -> gimli::EhFrame<gimli::EndianSlice<'d, gimli::LittleEndian>> {
        gimli::EhFrame::new(data.get(self.section.clone()).unwrap_or(&[]), gimli::LittleEndian)
    }

    fn bases(&self) -> gimli::BaseAddresses {
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(self.section_addr);
        if let Some(text) = self.text_addr {
            bases = bases.set_text(text);
        }
        if let Some(got) = self.got_addr {
            bases = bases.set_got(got);
        }
        bases
    }

    /// The FDE covering `addr`.
    pub fn covering(&self, addr: u64) -> Option<&Fde> {
        let i = self.fdes.partition_point(|f| f.start <= addr);
        let fde = self.fdes.get(i.checked_sub(1)?)?;
        (addr < fde.start + fde.len).then_some(fde)
    }

    /// The CFA rule in effect at `addr`; `None` when no FDE covers it or it does not parse.
    pub fn cfa_at(&self, data: &[u8], addr: Svma) -> Option<Cfa> {
        let fde = self.covering(addr.0)?;
        let eh_frame = self.eh_frame(data);
        let bases = self.bases();
        let parsed = eh_frame
            .fde_from_offset(&bases, gimli::EhFrameOffset(fde.offset), gimli::EhFrame::cie_from_offset)
            .ok()?;
        let mut ctx = gimli::UnwindContext::new();
        let row = parsed.unwind_info_for_address(&eh_frame, &bases, &mut ctx, addr.0).ok()?;
        Some(cfa_of(row.cfa()))
    }
}

fn cfa_of(rule: &CfaRule<usize>) -> Cfa {
    match rule {
        CfaRule::RegisterAndOffset { register, offset } if *register == gimli::X86_64::RSP => Cfa::Rsp(*offset),
        _ => Cfa::Other,
    }
}
