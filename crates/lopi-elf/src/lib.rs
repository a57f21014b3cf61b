//! The parts of an x86-64 ELF file lopi needs: loadable segments, code sections, functions
//! (from `.symtab`, a debug file's or `.gnu_debugdata`'s, `.dynsym` and `.eh_frame`), exception landing pads, the dynamic section, and SystemTap's static markers (`usdt`).
//!
//! Parsing never panics on malformed input: every failure is an [`ElfError`].
#![forbid(unsafe_code)]

mod addr;
mod debug_file;
mod functions;
pub mod lines;
mod lsda;
mod mini_debuginfo;
mod references;
mod symbols;
mod unwind;
pub mod usdt;
pub mod usdt_args;

pub use addr::{FileOffset, Svma};
pub use debug_file::{debug_dir, DebugFile, DEBUG_DIR_VAR};
pub use functions::{Function, FunctionSource};
pub use symbols::{SymbolAt, SymbolTable};
pub use unwind::Cfa;

use object::elf;
use object::read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::LittleEndian as LE;

/// Why a file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    #[error("not an x86-64 ELF file ({0})")]
    WrongArch(String),
    #[error("malformed ELF: {0}")]
    Malformed(String),
    #[error("static executables are not supported: lopi's runtime runs in glibc's threads, which only a dynamically linked program has (relink without -static; a Go program has no glibc)")]
    Static,
    #[error("unsupported ELF type {0} (only executables and shared libraries)")]
    UnsupportedType(u16),
}

fn malformed(e: impl std::fmt::Display) -> ElfError {
    ElfError::Malformed(e.to_string())
}

/// What the loader does with the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleKind {
    Executable,
    PieExecutable,
    SharedLibrary,
}

/// One `PT_LOAD` entry.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub vaddr: Svma,
    pub memsz: u64,
    pub offset: FileOffset,
    pub filesz: u64,
    pub flags: u32,
    pub align: u64,
}

impl Segment {
    /// True when the segment is mapped readable and executable, not writable.
    pub fn is_read_exec(&self) -> bool {
        self.flags & (elf::PF_R | elf::PF_W | elf::PF_X) == elf::PF_R | elf::PF_X
    }
}

/// An allocated, executable section that holds functions (`.plt*` excluded).
#[derive(Clone, Debug)]
pub struct CodeSection {
    pub name: String,
    pub addr: Svma,
    pub size: u64,
}

/// A raw program header, kept so that writers can copy the table.
#[derive(Clone, Copy, Debug)]
pub struct ProgramHeader {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

/// One entry of the dynamic section and where it sits in the file.
#[derive(Clone, Copy, Debug)]
pub struct DynamicEntry {
    pub tag: u64,
    pub value: u64,
    pub offset: FileOffset,
}

/// A parsed module. Borrows the file bytes.
///
/// Invariant: for every segment, code section, function and fragment, address + size does
/// not overflow `u64`.
pub struct ElfModule<'data> {
    data: &'data [u8],
    pub kind: ModuleKind,
    pub entry: Svma,
    pub program_headers: Vec<ProgramHeader>,
    pub segments: Vec<Segment>,
    pub code_sections: Vec<CodeSection>,
    pub dynamic: Vec<DynamicEntry>,
    /// Bytes available for the dynamic table (from `PT_DYNAMIC`), including trailing nulls.
    pub dynamic_capacity: usize,
    pub functions: Vec<Function>,
    /// Start addresses of code that is not a function entry (e.g. `.cold` parts): branch
    /// scanning resynchronises there, but they are not probed.
    pub fragments: Vec<(Svma, u64)>,
    /// C++ exception landing pads (from `.eh_frame` LSDAs), sorted: the unwinder jumps there.
    pub landing_pads: Vec<Svma>,
    /// Symbols beyond the dynamic ones: a `.symtab`, in the file, its debug file or its
    /// MiniDebugInfo.
    pub has_symtab: bool,
    /// The separate debug file whose `.symtab` named the functions.
    pub debug_file: Option<std::path::PathBuf>,
    /// The functions were named by the `.symtab` in the file's `.gnu_debugdata`.
    pub mini_debuginfo: bool,
    frames: unwind::FrameTable,
}

impl<'data> ElfModule<'data> {
    /// Parses a file on its own symbols (see [`ElfModule::parse_with_debug`]).
    pub fn parse(data: &'data [u8]) -> Result<Self, ElfError> {
        Self::parse_with_debug(data, None)
    }

    /// Parses a file, naming its functions also from `debug`, its separate debug file (see
    /// [`DebugFile::find`]).
    pub fn parse_with_debug(data: &'data [u8], debug: Option<&DebugFile>) -> Result<Self, ElfError> {
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            return Err(ElfError::NotElf);
        }
        let ident = data.get(..20).ok_or_else(|| malformed("file shorter than the ELF header"))?;
        if ident[4] != elf::ELFCLASS64 || ident[5] != elf::ELFDATA2LSB {
            return Err(ElfError::WrongArch("not 64-bit little-endian".into()));
        }
        let machine = u16::from_le_bytes([ident[18], ident[19]]);
        if machine != elf::EM_X86_64 {
            return Err(ElfError::WrongArch(format!("e_machine {machine}")));
        }
        let header = elf::FileHeader64::<LE>::parse(data).map_err(malformed)?;
        let e = LE;
        let e_type = header.e_type(e);
        let phdrs = header.program_headers(e, data).map_err(malformed)?;
        let program_headers: Vec<ProgramHeader> = phdrs
            .iter()
            .map(|p| ProgramHeader {
                p_type: p.p_type(e),
                p_flags: p.p_flags(e),
                p_offset: p.p_offset(e),
                p_vaddr: p.p_vaddr(e),
                p_paddr: p.p_paddr(e),
                p_filesz: p.p_filesz(e),
                p_memsz: p.p_memsz(e),
                p_align: p.p_align(e),
            })
            .collect();
        let segments: Vec<Segment> = program_headers
            .iter()
            .filter(|p| p.p_type == elf::PT_LOAD)
            .map(|p| Segment {
                vaddr: Svma(p.p_vaddr),
                memsz: p.p_memsz,
                offset: FileOffset(p.p_offset),
                filesz: p.p_filesz,
                flags: p.p_flags,
                align: p.p_align,
            })
            .collect();
        for s in &segments {
            let end = s.offset.0.checked_add(s.filesz).ok_or_else(|| malformed("segment size overflows"))?;
            s.vaddr.0.checked_add(s.memsz).ok_or_else(|| malformed("segment address range overflows"))?;
            if end > data.len() as u64 || s.filesz > s.memsz {
                return Err(malformed("a loadable segment lies outside the file"));
            }
        }
        let has_interp = program_headers.iter().any(|p| p.p_type == elf::PT_INTERP);
        let dyn_phdr = program_headers.iter().find(|p| p.p_type == elf::PT_DYNAMIC).copied();

        let mut dynamic = Vec::new();
        let mut dynamic_capacity = 0;
        if let Some(p) = dyn_phdr {
            let start = p.p_offset as usize;
            let bytes = data
                .get(start..start.saturating_add(p.p_filesz as usize))
                .ok_or_else(|| malformed("PT_DYNAMIC outside the file"))?;
            dynamic_capacity = bytes.len();
            for (i, chunk) in bytes.chunks_exact(16).enumerate() {
                let d: &elf::Dyn64<LE> = object::pod::from_bytes(chunk).map_err(|_| malformed("dynamic entry"))?.0;
                dynamic.push(DynamicEntry {
                    tag: d.d_tag(e),
                    value: d.d_val(e),
                    offset: FileOffset((start + i * 16) as u64),
                });
                if d.d_tag(e) == u64::from(elf::DT_NULL) {
                    break;
                }
            }
        }
        let flags_1 = dynamic.iter().find(|d| d.tag == u64::from(elf::DT_FLAGS_1)).map_or(0, |d| d.value);
        let kind = match e_type {
            elf::ET_EXEC if dyn_phdr.is_none() => return Err(ElfError::Static),
            elf::ET_EXEC => ModuleKind::Executable,
            elf::ET_DYN if dyn_phdr.is_none() => return Err(ElfError::Static),
            elf::ET_DYN if flags_1 & u64::from(elf::DF_1_PIE) != 0 && !has_interp => return Err(ElfError::Static),
            elf::ET_DYN if flags_1 & u64::from(elf::DF_1_PIE) != 0 => ModuleKind::PieExecutable,
            elf::ET_DYN if has_interp && header.e_entry(e) != 0 && !has_soname(&dynamic) => ModuleKind::PieExecutable,
            elf::ET_DYN => ModuleKind::SharedLibrary,
            other => return Err(ElfError::UnsupportedType(other)),
        };

        let sections = header.sections(e, data).map_err(malformed)?;
        let mut code_sections = Vec::new();
        for section in sections.iter() {
            let flags = section.sh_flags(e);
            if section.sh_type(e) != elf::SHT_PROGBITS
                || flags & u64::from(elf::SHF_ALLOC) == 0
                || flags & u64::from(elf::SHF_EXECINSTR) == 0
            {
                continue;
            }
            let name = sections.section_name(e, section).map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
            if name.starts_with(".plt") || name == ".init" || name == ".fini" {
                continue;
            }
            let (addr, size) = (section.sh_addr(e), section.sh_size(e));
            // Extents handed out never wrap the address space, so users may add freely.
            if addr.checked_add(size).is_none() {
                continue;
            }
            code_sections.push(CodeSection { name, addr: Svma(addr), size });
        }
        if code_sections.is_empty() && sections.is_empty() {
            // No section headers at all: every executable segment is code.
            for s in segments.iter().filter(|s| s.flags & elf::PF_X != 0) {
                code_sections.push(CodeSection { name: "<segment>".into(), addr: s.vaddr, size: s.filesz });
            }
        }

        let mut module = ElfModule {
            data,
            kind,
            entry: Svma(header.e_entry(e)),
            program_headers,
            segments,
            code_sections,
            dynamic,
            dynamic_capacity,
            functions: Vec::new(),
            fragments: Vec::new(),
            landing_pads: Vec::new(),
            has_symtab: false,
            debug_file: None,
            mini_debuginfo: false,
            frames: unwind::FrameTable::default(),
        };
        functions::discover(&mut module, &sections, debug)?;
        Ok(module)
    }

    /// The whole input file.
    pub fn data(&self) -> &'data [u8] {
        self.data
    }

    /// File offset holding the byte at `addr`, if it is backed by the file.
    pub fn offset_of(&self, addr: Svma) -> Option<FileOffset> {
        self.segments.iter().find_map(|s| {
            let rel = addr.0.checked_sub(s.vaddr.0)?;
            (rel < s.filesz).then(|| FileOffset(s.offset.0 + rel))
        })
    }

    /// File bytes from `addr` to the end of the segment that backs it.
    pub fn bytes_from(&self, addr: Svma) -> Option<&'data [u8]> {
        self.segments.iter().find_map(|s| {
            let rel = addr.0.checked_sub(s.vaddr.0)?;
            if rel >= s.filesz {
                return None;
            }
            self.data.get((s.offset.0 + rel) as usize..(s.offset.0 + s.filesz) as usize)
        })
    }

    /// Code section containing `addr`.
    pub fn code_section_of(&self, addr: Svma) -> Option<&CodeSection> {
        self.code_sections.iter().find(|s| addr >= s.addr && addr.0 < s.addr.0 + s.size)
    }

    /// True when `addr` is in a read-only, non-executable loaded segment (jump tables live there).
    pub fn is_readonly_data(&self, addr: Svma) -> bool {
        self.segments.iter().any(|s| {
            s.flags & (elf::PF_X | elf::PF_W) == 0 && addr >= s.vaddr && addr.0 < s.vaddr.0 + s.filesz
        })
    }

    /// Where the canonical frame address is at the instruction at `addr`, from `.eh_frame`;
    /// `None` when no FDE covers it.
    pub fn cfa_at(&self, addr: Svma) -> Option<Cfa> {
        self.frames.cfa_at(self.data, addr)
    }

    /// End of the highest loaded segment in memory.
    pub fn end_of_image(&self) -> Svma {
        Svma(self.segments.iter().map(|s| s.vaddr.0 + s.memsz).max().unwrap_or(0))
    }
}

fn has_soname(dynamic: &[DynamicEntry]) -> bool {
    dynamic.iter().any(|d| d.tag == u64::from(elf::DT_SONAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(matches!(ElfModule::parse(b"hello"), Err(ElfError::NotElf)));
        assert!(ElfModule::parse(b"\x7fELF").is_err());
        let mut hdr = vec![0u8; 64];
        hdr[..4].copy_from_slice(b"\x7fELF");
        hdr[4] = 2;
        hdr[5] = 1;
        hdr[18] = 183; // aarch64
        assert!(matches!(ElfModule::parse(&hdr), Err(ElfError::WrongArch(_))));
    }

    #[test]
    fn parses_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(exe).unwrap();
        let m = ElfModule::parse(&data).unwrap();
        assert!(m.functions.len() > 100);
        assert!(!m.code_sections.is_empty());
    }
}
