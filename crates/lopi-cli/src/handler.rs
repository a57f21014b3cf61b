//! C handlers (`--handler FILE.c`): the file compiled by the system's C compiler without
//! libc, linked by `ld` with a script that puts its data first and its code at the distance
//! the probe image gives them (`lopi_image::handler::text_offset`), and read back into a
//! `lopi_image::handler::Handler`. The compiler's messages reach the user as it wrote them.
use anyhow::{bail, Context, Result};
use lopi_image::handler::{text_offset, Handler, CALLBACKS};
use object::{Object, ObjectSection, ObjectSymbol};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `lopi handler-header`: the header handlers include.
pub const HEADER: &str = include_str!("lopi.h");

/// memcpy and company, which the compiler may call for copies and fills; without loop
/// idioms, or they would call themselves.
const SUPPORT: &str = r#"
#include <stddef.h>
#define LOPI_SUPPORT __attribute__((weak, optimize("no-tree-loop-distribute-patterns")))
LOPI_SUPPORT void *memcpy(void *d, const void *s, size_t n) { char *a = d; const char *b = s; while (n--) *a++ = *b++; return d; }
LOPI_SUPPORT void *memmove(void *d, const void *s, size_t n) {
    char *a = d; const char *b = s;
    if (a < b) while (n--) *a++ = *b++; else while (n--) a[n] = b[n];
    return d;
}
LOPI_SUPPORT void *memset(void *d, int c, size_t n) { char *a = d; while (n--) *a++ = (char)c; return d; }
LOPI_SUPPORT int memcmp(const void *x, const void *y, size_t n) {
    const unsigned char *a = x, *b = y;
    for (; n; n--, a++, b++) if (*a != *b) return *a - *b;
    return 0;
}
"#;

/// Flags of every compilation: position-independent, no libc, no vector registers (the
/// probes save only the general ones), no stack protector (its canary is libc's TLS).
const CFLAGS: &[&str] = &[
    "-O2",
    "-std=gnu11",
    "-ffreestanding",
    "-fPIE",
    "-fvisibility=hidden",
    "-fno-stack-protector",
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-fno-exceptions",
    "-mgeneral-regs-only",
    "-fcf-protection=none",
    "-fno-plt",
    "-Wall",
];

/// The handler in `source`, compiled with `cc` (or `$CC`) and linked for a probe image.
pub fn build(source: &Path) -> Result<Handler> {
    let text = std::fs::read(source).with_context(|| format!("reading {}", source.display()))?;
    let dir = BuildDir::new()?;
    let include = dir.path().join("include");
    std::fs::create_dir(&include)?;
    std::fs::write(include.join("lopi.h"), HEADER)?;
    let support = dir.path().join("lopi_support.c");
    std::fs::write(&support, SUPPORT)?;
    let objects = [compile(source, &include, &dir.path().join("handler.o"))?, compile(&support, &include, &dir.path().join("support.o"))?];
    // First at an arbitrary distance, to learn the data's size; then at the image's.
    let probe = link(&objects, dir.path(), 1 << 30)?;
    let data_len = lopi_rt_abi::page_align(data_end(&probe)?);
    let linked = link(&objects, dir.path(), text_offset(data_len))?;
    let mut handler = read(&linked, data_len).with_context(|| format!("{}: linking the handler", source.display()))?;
    let mut id = 0xcbf2_9ce4_8422_2325u64;
    for b in text.iter().chain(&handler.text).chain(&handler.data) {
        id = (id ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    handler.id = id;
    Ok(handler)
}

/// A directory of its own for the build, removed with it.
struct BuildDir(PathBuf);

impl BuildDir {
    fn new() -> Result<BuildDir> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!("lopi-handler-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(BuildDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for BuildDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compile(source: &Path, include: &Path, out: &Path) -> Result<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&cc)
        .args(["-c", "-DLOPI_EXPECT_ABI=1"])
        .args(CFLAGS)
        .arg("-I")
        .arg(include)
        .arg(source)
        .arg("-o")
        .arg(out)
        .output()
        .with_context(|| format!("running the C compiler ({cc}); set CC to another"))?;
    // lopi's own lopi.h is named as the user's would be.
    let messages = String::from_utf8_lossy(&output.stderr).replace(&format!("{}/", include.display()), "");
    if !output.status.success() {
        let hint = if messages.contains("SSE") { "\nnote: handlers are compiled for the integer registers only (the probes save no others): no floating point" } else { "" };
        bail!("{}: the C compiler refused the handler:\n{}{hint}", source.display(), messages.trim_end());
    }
    if !messages.trim().is_empty() {
        eprintln!("{}", messages.trim_end());
    }
    Ok(out.to_path_buf())
}

/// Links `objects` with their data at 0 and their code at `text_at`.
fn link(objects: &[PathBuf], dir: &Path, text_at: u64) -> Result<Vec<u8>> {
    let script = dir.join("handler.ld");
    std::fs::write(
        &script,
        format!(
            "SECTIONS {{\n  . = 0;\n  .data : {{ *(.data .data.* .data.rel.ro .data.rel.ro.* .got .got.plt) }}\n  \
             .bss : {{ *(.bss .bss.* COMMON) }}\n  . = {text_at:#x};\n  .text : {{ *(.text .text.*) }}\n  \
             .rodata : {{ *(.rodata .rodata.*) }}\n  .dynamic : {{ *(.dynamic) }}\n  .dynsym : {{ *(.dynsym) }}\n  \
             .dynstr : {{ *(.dynstr) }}\n  .hash : {{ *(.hash) }}\n  .gnu.hash : {{ *(.gnu.hash) }}\n  \
             .rela.dyn : {{ *(.rela.*) }}\n  /DISCARD/ : {{ *(.eh_frame*) *(.note*) *(.comment) *(.debug*) }}\n}}\n"
        ),
    )?;
    let out = dir.join("handler.elf");
    let output = Command::new("ld")
        .args(["-pie", "--no-dynamic-linker", "-z", "norelro", "-z", "noexecstack", "--no-warn-rwx-segments", "-e", "0", "-T"])
        .arg(&script)
        .args(objects)
        .arg("-o")
        .arg(&out)
        .output()
        .context("running the linker (ld, from binutils)")?;
    if !output.status.success() {
        let messages = String::from_utf8_lossy(&output.stderr);
        let hint = if messages.contains("undefined reference") {
            "\nnote: a handler runs without libc: lopi.h has lopi_printf, lopi_write, lopi_snprintf, lopi_tid, lopi_now_ns and the string helpers"
        } else {
            ""
        };
        bail!("linking the handler failed:\n{}{hint}", messages.trim_end());
    }
    Ok(std::fs::read(&out)?)
}

/// Where the linked handler's data ends.
fn data_end(elf: &[u8]) -> Result<u64> {
    let file = object::File::parse(elf)?;
    Ok(file.sections().filter(|s| matches!(s.name(), Ok(".data" | ".bss"))).map(|s| s.address() + s.size()).max().unwrap_or(0))
}

/// The handler's parts from its linked ELF, data `data_len` bytes long.
fn read(elf: &[u8], data_len: u64) -> Result<Handler> {
    let file = object::File::parse(elf)?;
    let text_at = text_offset(data_len);
    let mut text = Vec::new();
    let mut data = Vec::new();
    for section in file.sections() {
        let name = section.name().unwrap_or("");
        let (size, at) = (section.size(), section.address());
        if size == 0 {
            continue;
        }
        match name {
            ".tdata" | ".tbss" => bail!("the handler has thread-local variables, which handlers cannot have (key state by lopi_tid())"),
            ".init_array" | ".fini_array" | ".ctors" | ".dtors" => bail!("the handler has constructors or destructors, which are not run: use lopi_init"),
            ".text" | ".rodata" => {
                let end = (at + size - text_at) as usize;
                text.resize(text.len().max(end), 0xcc);
                text[(at - text_at) as usize..end].copy_from_slice(section.data()?);
            }
            ".data" => {
                data.resize(data.len().max((at + size) as usize), 0);
                data[at as usize..(at + size) as usize].copy_from_slice(section.data()?);
            }
            _ => {}
        }
    }
    let symbol = |name: &str| file.symbols().find(|s| s.name() == Ok(name) && s.is_definition()).map(|s| s.address() - text_at);
    let callbacks = CALLBACKS.map(symbol);
    if callbacks.iter().all(Option::is_none) {
        bail!("the handler defines none of {}", CALLBACKS.join(", "));
    }
    let mut relocs = Vec::new();
    for (slot, reloc) in file.dynamic_relocations().into_iter().flatten() {
        let relative = matches!(reloc.flags(), object::RelocationFlags::Elf { r_type } if r_type == object::elf::R_X86_64_RELATIVE);
        if !relative || slot + 8 > data_len {
            bail!("the handler needs a relocation lopi cannot apply at {slot:#x} ({:?})", reloc.flags());
        }
        relocs.push((slot, reloc.addend() as u64));
    }
    Ok(Handler { text, data, data_len, callbacks, init: symbol("lopi_init"), relocs, id: 0 })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_names_every_callback() {
        for name in lopi_image::handler::CALLBACKS.iter().chain(&["lopi_init"]) {
            assert!(super::HEADER.contains(&format!("void {name}(")), "{name}");
        }
    }
}
