//! The static installer: turns an input ELF and a selection of sites into a new ELF.
//!
//! The original bytes stay where they are; only patched code bytes, the ELF header's
//! program-header fields and one dynamic entry change. The module's probe image
//! (`lopi-image`) is appended as three segments; the init stub goes in its entry room and
//! the moved program headers in its header room.
//!
//! The init stub registers the module with the runtime, then goes on where the module would
//! have. A library's is reached through `DT_INIT` and chains to the original `DT_INIT`
//! function, if there was one. An executable's is its entry point (`e_entry`), and jumps to
//! the original one: programs linked against glibc < 2.34 (Debian's gzip) call their `_init`
//! from their own `__libc_csu_init`, by address, and nothing reads their `DT_INIT`.
#![forbid(unsafe_code)]

use lopi_elf::ElfModule;
pub use lopi_image::{ModuleNames, Recording};
use lopi_image::{ImageError, Request};
use lopi_patch::{PatchPlan, Selection};
use lopi_rt_abi::{page_align, DESCRIPTOR_MAGIC_PREFIX, PAGE_SIZE};
use std::path::Path;

mod elf {
    //! The few ELF constants we write, by their names in the ELF spec.
    pub const PT_LOAD: u32 = 1;
    pub const PT_PHDR: u32 = 6;
    pub const PF_X: u32 = 1;
    pub const PF_W: u32 = 2;
    pub const PF_R: u32 = 4;
    pub const DT_NULL: u64 = 0;
    pub const DT_INIT: u64 = 12;
    pub const PHENT_SIZE: usize = 56;
    pub const E_ENTRY: usize = 0x18;
    pub const E_PHOFF: usize = 0x20;
    pub const E_PHNUM: usize = 0x38;
    pub const E_SHOFF: usize = 0x28;
    pub const E_SHNUM: usize = 0x3c;
    pub const E_SHSTRNDX: usize = 0x3e;
    pub const SHDR_SIZE: usize = 64;
    pub const SHT_PROGBITS: u32 = 1;
    pub const SHF_WRITE: u64 = 1;
    pub const SHF_ALLOC: u64 = 2;
    pub const SHF_EXECINSTR: u64 = 4;
}

#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error("the file was already rewritten by lopi; rewrite the original instead")]
    AlreadyRewritten,
    #[error("no DT_INIT entry and no spare slot in the dynamic section to hook the runtime's init")]
    NoInitSlot,
    #[error("the rewritten image would not fit in the address space")]
    TooLarge,
    #[error("{0}")]
    Script(String),
}

impl From<ImageError> for RewriteError {
    fn from(e: ImageError) -> Self {
        match e {
            ImageError::TooLarge => RewriteError::TooLarge,
            ImageError::Script(_) => RewriteError::Script(e.to_string()),
        }
    }
}

/// A finished rewrite.
pub struct Rewritten {
    pub image: Vec<u8>,
    pub plan: PatchPlan,
}

/// `endbr64; push rdi; push rsi; push rdx; mov rcx,rdx; mov rdx,rsi; mov rsi,rdi;
/// lea rdi,[rip+desc]; call init; pop rdx; pop rsi; pop rdi; jmp chain|ret`.
const INIT_STUB_LEN: usize = 4 + 3 + 9 + 7 + 5 + 3 + 5;

/// The entry room the stubs need: the longer of the two.
const STUB_LEN: usize = if ENTRY_STUB_LEN > INIT_STUB_LEN { ENTRY_STUB_LEN } else { INIT_STUB_LEN };

/// Builds the new image. `selection` comes from [`lopi_patch::select`] on the same module.
pub fn rewrite(module: &ElfModule<'_>, selection: Selection, names: &ModuleNames, recording: Recording) -> Result<Rewritten, RewriteError> {
    rewrite_with_script(module, selection, names, recording, None)
}

/// [`rewrite`], with a probe script compiled into the image: it runs at the entries and
/// exits of the timed functions its points name.
pub fn rewrite_with_script(
    module: &ElfModule<'_>,
    selection: Selection,
    names: &ModuleNames,
    recording: Recording,
    script: Option<&lopi_image::script::ScriptSpec>,
) -> Result<Rewritten, RewriteError> {
    let input = module.data();
    if contains(input, &DESCRIPTOR_MAGIC_PREFIX) {
        return Err(RewriteError::AlreadyRewritten);
    }
    let executable = !matches!(module.kind, lopi_elf::ModuleKind::SharedLibrary);
    let init_slot = if executable { None } else { Some(find_init_slot(module)?) };
    let mut selection = selection;
    if executable {
        // The entry function runs before anything else of the program and never returns: it is
        // counted, not timed, as under `lopi run` (its frame would be every path's root).
        let entry = module.entry.0;
        if let Some(f) = module.functions.iter().position(|f| f.addr.0 <= entry && entry < f.addr.0 + f.size.max(1)) {
            selection.count_only(f, lopi_patch::Refusal::EntryPoint);
        }
    }
    // User-space addresses are below 2^47: a module ending beyond 2^46 is malformed.
    if module.end_of_image().0 > 1 << 46 || input.len() as u64 > 1 << 40 {
        return Err(RewriteError::TooLarge);
    }

    // The image follows the module in memory and in the file, from page boundaries, so each
    // segment is congruent modulo the page size.
    let rw_vaddr = page_align(module.end_of_image().0);
    let rw_offset = page_align(input.len() as u64);
    let phnum = module.program_headers.len() + 3;
    let phdrs_len = phnum * elf::PHENT_SIZE;
    let request = Request { names, recording, at: rw_vaddr, entry_room: STUB_LEN, header_room: phdrs_len, fork_handlers: true, script: script.map(|spec| lopi_image::ScriptRequest { spec, library: None }) };
    let built = lopi_image::build(module, selection, &request)?;
    let file_offset = |vaddr: u64| rw_offset + (vaddr - rw_vaddr);

    let mut image = input.to_vec();
    image.resize(rw_offset as usize, 0);
    image.extend_from_slice(&built.bytes);
    for patch in &built.plan.code_patches {
        let at = module.offset_of(patch.at).expect("the planner only patches file-backed code").0 as usize;
        image[at..at + patch.bytes.len()].copy_from_slice(&patch.bytes);
    }
    let stub = match &init_slot {
        Some(slot) => init_stub(built.entry_code, built.descriptor, built.init, slot.chain),
        None => entry_stub(built.entry_code, built.descriptor, built.init, module.entry.0),
    };
    let s = file_offset(built.entry_code) as usize;
    image[s..s + stub.len()].copy_from_slice(&stub);

    let (rw, rx, r) = (&built.rw, &built.rx, &built.r);
    let segments = [
        (elf::PF_R | elf::PF_W, file_offset(rw.start), rw.start, rw.end - rw.start),
        (elf::PF_R | elf::PF_X, file_offset(rx.start), rx.start, rx.end - rx.start),
        (elf::PF_R, file_offset(r.start), r.start, r.end - r.start),
    ];
    let r_offset = file_offset(r.start);
    let phdrs = program_headers(module, &segments, r_offset, r.start, phdrs_len as u64);
    image[r_offset as usize..r_offset as usize + phdrs.len()].copy_from_slice(&phdrs);

    image[elf::E_PHOFF..elf::E_PHOFF + 8].copy_from_slice(&r_offset.to_le_bytes());
    image[elf::E_PHNUM..elf::E_PHNUM + 2].copy_from_slice(&(phnum as u16).to_le_bytes());
    match init_slot {
        Some(slot) => {
            let slot = slot.offset as usize;
            image[slot..slot + 8].copy_from_slice(&elf::DT_INIT.to_le_bytes());
            image[slot + 8..slot + 16].copy_from_slice(&built.entry_code.to_le_bytes());
        }
        None => image[elf::E_ENTRY..elf::E_ENTRY + 8].copy_from_slice(&built.entry_code.to_le_bytes()),
    }
    let sections = [
        (".lopi.data", elf::SHF_ALLOC | elf::SHF_WRITE, rw.start, file_offset(rw.start), rw.end - rw.start, PAGE_SIZE),
        (".lopi.text", elf::SHF_ALLOC | elf::SHF_EXECINSTR, rx.start, file_offset(rx.start), rx.end - rx.start, 16),
        // As in ordinary files, no section covers the program header table.
        (".lopi.rodata", elf::SHF_ALLOC, built.descriptor, file_offset(built.descriptor), r.end - built.descriptor, 8),
    ];
    add_section_headers(&mut image, &sections);
    Ok(Rewritten { image, plan: built.plan })
}

/// Names the new segments in the section header table, so that objdump and gdb show them
/// (`strip` still cannot handle the moved program-header table; see docs/limits.md). The
/// table and a grown copy of the section-name string table are appended after the image;
/// files without section headers are left without.
fn add_section_headers(image: &mut Vec<u8>, new: &[(&str, u64, u64, u64, u64, u64)]) {
    let u16_at = |img: &[u8], at: usize| u16::from_le_bytes([img[at], img[at + 1]]) as usize;
    let u64_at = |img: &[u8], at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap_or([0; 8]));
    let shoff = u64_at(image, elf::E_SHOFF) as usize;
    let shnum = u16_at(image, elf::E_SHNUM);
    let shstrndx = u16_at(image, elf::E_SHSTRNDX);
    let table_end = shoff.checked_add(shnum * elf::SHDR_SIZE);
    if shoff == 0 || shnum == 0 || shstrndx >= shnum || table_end.is_none_or(|end| end > image.len()) {
        return;
    }
    let mut headers = image[shoff..shoff + shnum * elf::SHDR_SIZE].to_vec();
    let strtab = shstrndx * elf::SHDR_SIZE;
    let (str_off, str_len) = (u64_at(&headers, strtab + 24) as usize, u64_at(&headers, strtab + 32) as usize);
    let Some(old_names) = str_off.checked_add(str_len).and_then(|end| image.get(str_off..end)) else { return };
    let mut names = old_names.to_vec();
    for &(name, flags, addr, offset, size, align) in new {
        let mut h = [0u8; elf::SHDR_SIZE];
        h[0..4].copy_from_slice(&(names.len() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&elf::SHT_PROGBITS.to_le_bytes());
        for (at, v) in [(8, flags), (16, addr), (24, offset), (32, size), (48, align)] {
            h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        headers.extend_from_slice(&h);
        names.extend_from_slice(name.as_bytes());
        names.push(0);
    }
    let names_at = image.len().next_multiple_of(8);
    let table_at = (names_at + names.len()).next_multiple_of(8);
    headers[strtab + 24..strtab + 32].copy_from_slice(&(names_at as u64).to_le_bytes());
    headers[strtab + 32..strtab + 40].copy_from_slice(&(names.len() as u64).to_le_bytes());
    image.resize(names_at, 0);
    image.extend_from_slice(&names);
    image.resize(table_at, 0);
    image.extend_from_slice(&headers);
    image[elf::E_SHOFF..elf::E_SHOFF + 8].copy_from_slice(&(table_at as u64).to_le_bytes());
    let count = (shnum + new.len()) as u16;
    image[elf::E_SHNUM..elf::E_SHNUM + 2].copy_from_slice(&count.to_le_bytes());
}

/// Where the init hook goes: the `DT_INIT` entry (chaining to its old value) or a spare
/// `DT_NULL` with another `DT_NULL` after it to keep the table terminated.
struct InitSlot {
    offset: u64,
    chain: Option<u64>,
}

fn find_init_slot(module: &ElfModule<'_>) -> Result<InitSlot, RewriteError> {
    if let Some(d) = module.dynamic.iter().find(|d| d.tag == elf::DT_INIT) {
        return Ok(InitSlot { offset: d.offset.0, chain: Some(d.value) });
    }
    let null = module.dynamic.iter().find(|d| d.tag == elf::DT_NULL).ok_or(RewriteError::NoInitSlot)?;
    let first = module.dynamic.first().map_or(0, |d| d.offset.0);
    let next = null.offset.0 + 16;
    let spare = next + 16 <= first + module.dynamic_capacity as u64
        && module.data().get(next as usize..next as usize + 16).is_some_and(|b| b.iter().all(|&x| x == 0));
    if !spare {
        return Err(RewriteError::NoInitSlot);
    }
    Ok(InitSlot { offset: null.offset.0, chain: None })
}

fn rel32(from_end: u64, to: u64) -> [u8; 4] {
    (to.wrapping_sub(from_end) as i64 as i32).to_le_bytes()
}

/// `endbr64; push rdx; sub rsp,8; mov rsi,[rsp+16]; lea rdx,[rsp+24]; lea rcx,[rdx+rsi*8+8];
/// lea rdi,[rip+desc]; call init; add rsp,8; pop rdx; jmp entry`.
const ENTRY_STUB_LEN: usize = 4 + 1 + 4 + 5 + 5 + 5 + 7 + 5 + 4 + 1 + 5;

/// An executable's entry point: the process's first instruction after the loader's, with
/// `[rsp]` = argc, then argv and envp, and `rdx` the loader's finaliser for `_start` to
/// register. Registers the module with (argc, argv, envp), then jumps to the original entry
/// with the stack and `rdx` as they were. The pushes keep the call's stack 16-byte aligned.
fn entry_stub(at: u64, descriptor: u64, init: u64, entry: u64) -> Vec<u8> {
    let mut code = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x52, 0x48, 0x83, 0xec, 0x08];
    code.extend_from_slice(&[0x48, 0x8b, 0x74, 0x24, 0x10, 0x48, 0x8d, 0x54, 0x24, 0x18, 0x48, 0x8d, 0x4c, 0xf2, 0x08]);
    code.extend_from_slice(&[0x48, 0x8d, 0x3d]);
    code.extend_from_slice(&rel32(at + code.len() as u64 + 4, descriptor));
    code.push(0xe8);
    code.extend_from_slice(&rel32(at + code.len() as u64 + 4, init));
    code.extend_from_slice(&[0x48, 0x83, 0xc4, 0x08, 0x5a, 0xe9]);
    code.extend_from_slice(&rel32(at + code.len() as u64 + 4, entry));
    debug_assert_eq!(code.len(), ENTRY_STUB_LEN);
    code
}

/// Called as a `DT_INIT` function with (argc, argv, envp): registers the module, then
/// chains. Three pushes realign the stack to 16 bytes for the call.
fn init_stub(at: u64, descriptor: u64, init: u64, chain: Option<u64>) -> Vec<u8> {
    let mut code = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x57, 0x56, 0x52, 0x48, 0x89, 0xd1, 0x48, 0x89, 0xf2, 0x48, 0x89, 0xfe];
    code.extend_from_slice(&[0x48, 0x8d, 0x3d]);
    code.extend_from_slice(&rel32(at + code.len() as u64 + 4, descriptor));
    code.push(0xe8);
    code.extend_from_slice(&rel32(at + code.len() as u64 + 4, init));
    code.extend_from_slice(&[0x5a, 0x5e, 0x5f]);
    match chain {
        Some(target) => {
            code.push(0xe9);
            code.extend_from_slice(&rel32(at + code.len() as u64 + 4, target));
        }
        None => code.push(0xc3),
    }
    debug_assert!(code.len() <= INIT_STUB_LEN);
    code
}

/// The old table with `PT_PHDR` moved to the new location and the three new `PT_LOAD`s
/// inserted after the last old one (loaders expect `PT_LOAD`s in address order).
fn program_headers(module: &ElfModule<'_>, segments: &[(u32, u64, u64, u64)], offset: u64, vaddr: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let last_load = module.program_headers.iter().rposition(|p| p.p_type == elf::PT_LOAD).unwrap_or(0);
    let put = |out: &mut Vec<u8>, p_type: u32, flags: u32, off: u64, va: u64, filesz: u64, memsz: u64, align: u64| {
        out.extend_from_slice(&p_type.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        for v in [off, va, va, filesz, memsz, align] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    };
    for (i, p) in module.program_headers.iter().enumerate() {
        if p.p_type == elf::PT_PHDR {
            put(&mut out, p.p_type, p.p_flags, offset, vaddr, len, len, 8);
        } else {
            put(&mut out, p.p_type, p.p_flags, p.p_offset, p.p_vaddr, p.p_filesz, p.p_memsz, p.p_align);
            // p_paddr is copied as the original had it.
            let at = out.len() - 40;
            out[at..at + 8].copy_from_slice(&p.p_paddr.to_le_bytes());
        }
        if i == last_load {
            for &(flags, off, va, size) in segments {
                put(&mut out, elf::PT_LOAD, flags, off, va, size, size, PAGE_SIZE);
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Writes `bytes` to `path` so that an existing file is replaced only by a complete one:
/// a temporary file in the same directory, then `rename`. A path that is not a regular file
/// (`/dev/null`, `/dev/stdout`, a FIFO) is written into as it is: renaming over it would put a
/// regular file in a device's place.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return std::fs::OpenOptions::new().write(true).open(path)?.write_all(bytes);
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.lopi-tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
