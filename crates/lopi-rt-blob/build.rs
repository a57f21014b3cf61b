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
    let abi = root.join("crates/lopi-rt-abi/src");
    let script = manifest.join("blob.ld");
    // The directory, so that every runtime module (not only lib.rs) triggers a rebuild.
    let src_dir = root.join("runtime/lopi-rt/src");
    for p in [&src_dir, &abi, &script] {
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
        .args(["--undefined=lopi_rt_init", "--undefined=lopi_enter_stub", "--undefined=lopi_exit_stub"])
        .args(["--undefined=lopi_syscall_enter_stub", "--undefined=lopi_syscall_exit_stub"])
        .args(["--undefined=lopi_lock_enter_stub", "--undefined=lopi_lock_exit_stub", "--undefined=lopi_retire_stub", "--undefined=lopi_script_helpers"])
        .args(["--undefined=lopi_point_stub", "--undefined=lopi_signal_wrapper"])
        .args(["--undefined=LOPI_DELTAS", "-e", "lopi_rt_init", "-T"])
        .arg(&script)
        .arg(&lib)
        .arg("-o")
        .arg(&elf));
    reject_vector_registers(&elf);
    let (blob, symbols) = flatten(&elf);
    std::fs::write(out.join("lopi_rt.bin"), &blob).unwrap();
    let [init, enter, exit, syscall_enter, syscall_exit, lock_enter, lock_exit, retire, script_helpers, delta, point, signal_wrapper] = symbols;
    std::fs::write(
        out.join("blob.rs"),
        format!(
            "/// Offset of `lopi_rt_init` in the blob.\npub const INIT_OFFSET: usize = {init};\n\
             /// Offset of the entry probe stub (`push <function address>; call` it).\npub const ENTER_STUB_OFFSET: usize = {enter};\n\
             /// Offset of the exit probe stub (`call` it right before a `ret` or tail jump).\npub const EXIT_STUB_OFFSET: usize = {exit};\n\
             /// Offsets of the system-call probe stubs (`push <site counter>; call` them right\n\
             /// before and right after a `syscall`, below the red zone).\n\
             pub const SYSCALL_ENTER_STUB_OFFSET: usize = {syscall_enter};\npub const SYSCALL_EXIT_STUB_OFFSET: usize = {syscall_exit};\n\
             /// Offsets of the lock-operation probe stubs (as the entry and exit stubs).\n\
             pub const LOCK_ENTER_STUB_OFFSET: usize = {lock_enter};\npub const LOCK_EXIT_STUB_OFFSET: usize = {lock_exit};\n\
             /// Offset of the stub a coverage probe calls to take itself out (`rdi` = its record,\n\
             /// `rsi` = its site, below the red zone).\npub const RETIRE_STUB_OFFSET: usize = {retire};\n\
             /// Offset of the probe-script helpers' jump table: one `jmp` per helper, 8 bytes apart,\n\
             /// in `lopi_rt_abi::script::Helpers` order.\npub const SCRIPT_HELPERS_OFFSET: usize = {script_helpers};\n\
             /// Offset of the stub an instruction's probe calls (`push <counter>; call`, below the\n\
             /// red zone).\npub const POINT_STUB_OFFSET: usize = {point};\n\
             /// Offset of two i64 the installer sets to (runtime variables - their address) and\n\
             /// (counter array - the second one's address).\npub const DELTAS_OFFSET: usize = {delta};\n\
             /// Offset of the wrapper Syscall User Dispatch puts in place of the program's signal\n\
             /// handlers (`lopi_rt_abi::dispatch`), which a detach takes out.\npub const SIGNAL_WRAPPER_OFFSET: usize = {signal_wrapper};\n"
        ),
    )
    .unwrap();
}

/// The probe stubs save only general registers: code they reach must not touch vector or
/// x87 registers, which hold live values (arguments, return values) at probe sites. Init
/// code may (it is an ordinary call from the loader).
fn reject_vector_registers(elf: &Path) {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn", "-M", "intel"]).arg(elf).output().expect("running objdump");
    assert!(out.status.success(), "objdump failed on the runtime blob");
    let text = String::from_utf8_lossy(&out.stdout);
    // Function name -> its instruction lines.
    let mut functions: std::collections::HashMap<String, Vec<&str>> = Default::default();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")).map(|(_, n)| n) {
            current = name.to_string();
        } else if line.starts_with(' ') {
            functions.entry(current.clone()).or_default().push(line);
        }
    }
    let mut todo: Vec<String> =
        ["lopi_enter_stub", "lopi_exit_stub", "lopi_syscall_enter_stub", "lopi_syscall_exit_stub", "lopi_lock_enter_stub", "lopi_lock_exit_stub", "lopi_retire_stub", "lopi_script_helpers", "lopi_point_stub"]
            .map(String::from)
            .into();
    let mut seen = std::collections::HashSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        for line in functions.get(&name).map(Vec::as_slice).unwrap_or_default() {
            if let Some(bad) = ["xmm", "ymm", "zmm", " st(", "mm0"].iter().find(|r| line.contains(*r)) {
                panic!("{name}, reached from a probe stub, uses {bad} registers, which the stubs do not save: {line}");
            }
            if line.contains("\tcall ") || line.contains("\tjmp ") {
                if let Some(target) = line.rsplit_once('<').and_then(|(_, t)| t.split(['>', '+']).next()) {
                    todo.push(target.to_string());
                }
            }
        }
    }
}

/// Returns the loaded image from address 0 and the offsets of the exported symbols,
/// rejecting anything that would need relocation or writes.
fn flatten(path: &Path) -> (Vec<u8>, [u64; 12]) {
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
    let symbol = |name: &str| {
        file.symbols().find(|s| s.name() == Ok(name)).map(|s| s.address()).unwrap_or_else(|| panic!("{name} not found in the runtime blob"))
    };
    let names = ["lopi_rt_init", "lopi_enter_stub", "lopi_exit_stub", "lopi_syscall_enter_stub", "lopi_syscall_exit_stub", "lopi_lock_enter_stub", "lopi_lock_exit_stub", "lopi_retire_stub", "lopi_script_helpers", "LOPI_DELTAS", "lopi_point_stub", "lopi_signal_wrapper"];
    (image, names.map(symbol))
}
