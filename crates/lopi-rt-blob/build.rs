//! Builds `runtime/lopi-rt` into a flat blob that the rewriter copies into images.
//!
//! Cargo cannot build a `no_std`, `panic=abort` staticlib inside this workspace without a
//! separate target, so we call rustc and ld directly. The result must be relocation-free and
//! read-only: it is copied into an executable segment at an address only known at load time.
use object::{Object, ObjectSection, ObjectSymbol};
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed with {status}");
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..");
    let src = root.join("runtime/lopi-rt/src/lib.rs");
    let abi = root.join("crates/lopi-rt-abi/src/lib.rs");
    let script = manifest.join("blob.ld");
    for p in [&src, &abi, &script] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let lib = out.join("liblopi_rt.a");
    run(Command::new(&rustc)
        .args(["--edition", "2021", "--crate-type", "staticlib", "--crate-name", "lopi_rt"])
        .args(["-C", "panic=abort", "-C", "opt-level=s", "-C", "relocation-model=pie"])
        .args(["-C", "lto=fat", "-C", "codegen-units=1", "-C", "debuginfo=0"])
        .args(["-C", "overflow-checks=off", "-C", "debug-assertions=off"])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .arg(&src)
        .arg("-o")
        .arg(&lib));
    let elf = out.join("lopi_rt.elf");
    run(Command::new("ld")
        .args(["-pie", "--no-dynamic-linker", "-z", "norelro", "-z", "noexecstack", "--gc-sections"])
        .args(["--undefined=lopi_rt_init", "-e", "lopi_rt_init", "-T"])
        .arg(&script)
        .arg(&lib)
        .arg("-o")
        .arg(&elf));
    let (blob, entry) = flatten(&elf);
    std::fs::write(out.join("lopi_rt.bin"), &blob).unwrap();
    std::fs::write(
        out.join("blob.rs"),
        format!("/// Offset of `lopi_rt_init` in the blob.\npub const INIT_OFFSET: usize = {entry};\n"),
    )
    .unwrap();
}

/// Returns the loaded image from address 0 and the entry offset, rejecting anything that
/// would need relocation or writes.
fn flatten(path: &Path) -> (Vec<u8>, u64) {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let mut image = Vec::new();
    for section in file.sections() {
        let name = section.name().unwrap_or("");
        let size = section.size();
        if size == 0 {
            continue;
        }
        match name {
            ".text" | ".rodata" => {}
            ".data.rel.ro" | ".got" | ".data" | ".bss" => {
                panic!("runtime blob has a {name} section ({size} bytes): it must be relocation-free and read-only")
            }
            _ if name.starts_with(".rela") => panic!("runtime blob needs relocations ({name}, {size} bytes)"),
            // `ld -pie` always emits an empty dynamic symbol table and .dynamic; the blob
            // does not use them.
            _ => continue,
        }
        let end = (section.address() + size) as usize;
        if image.len() < end {
            image.resize(end, 0xcc);
        }
        let bytes = section.data().unwrap();
        image[section.address() as usize..end].copy_from_slice(bytes);
    }
    let entry = file
        .symbols()
        .find(|s| s.name() == Ok("lopi_rt_init"))
        .map(|s| s.address())
        .expect("lopi_rt_init not found in the runtime blob");
    (image, entry)
}
