//! Landing pads of a real C++ program, checked against the compiler's own assembly (same
//! number of pads) and objdump's disassembly: every pad must start an instruction inside a
//! known function or fragment, and every function with a `catch` or a destructor to run must
//! have one.
use lopi_elf::{ElfModule, Svma};
use object::{Object as _, ObjectSection as _};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <cstdio>
#include <stdexcept>
#include <string>

struct Guard {
    const char *name;
    explicit Guard(const char *n) : name(n) {}
    ~Guard() { std::printf("leave %s\n", name); }
};

__attribute__((noinline)) void may_throw(int x) {
    if (x > 2) throw std::runtime_error("too big");
}

extern "C" __attribute__((noinline)) int with_catch(int x) {
    try { may_throw(x); return 0; }
    catch (const std::runtime_error &) { return 1; }
}

extern "C" __attribute__((noinline)) int with_cleanup(int x) {
    Guard g("cleanup");
    may_throw(x);
    return x;
}

extern "C" __attribute__((noinline)) int with_both(int x) {
    Guard outer("outer");
    try {
        Guard inner("inner");
        may_throw(x);
        std::string s(x, 'a');
        may_throw(int(s.size()));
    } catch (const std::exception &) {
        return -1;
    } catch (...) {
        return -2;
    }
    return x;
}

int main(int argc, char **) {
    int r = with_catch(argc + 3) + with_both(argc + 2);
    try { r += with_cleanup(argc + 5); } catch (...) { r += 10; }
    return r == 10 ? 0 : 1;
}
"#;

/// Functions that must have a landing pad of their own (or in their `.cold` part).
const WITH_PADS: [&str; 4] = ["with_catch", "with_cleanup", "with_both", "main"];

/// Tests run in parallel: each build gets its own directory.
fn build(name: &str, flags: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("landing_pads").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("eh.cc");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join(format!("eh{}", flags.concat()));
    let ok = Command::new("c++").args(flags).arg("-o").arg(&exe).arg(&src).status().expect("c++ must be installed").success();
    assert!(ok, "c++ {flags:?} failed");
    let ran = Command::new(&exe).output().unwrap();
    assert!(ran.status.success(), "{exe:?} did not catch its exceptions");
    exe
}

/// Distinct landing pads in GCC's assembly for the program: the third field of each call-site
/// record (`.uleb128 .L13-.LFB1226`; `0` means none). `None` if the compiler is not GCC.
fn compiler_pad_count(src: &Path, flags: &[&str]) -> Option<usize> {
    let out = Command::new("c++").args(flags).args(["-S", "-o", "-"]).arg(src).output().unwrap();
    assert!(out.status.success(), "c++ -S {flags:?} failed");
    let asm = String::from_utf8_lossy(&out.stdout);
    let mut pads = BTreeSet::new();
    let mut fields = None;
    for line in asm.lines().map(str::trim) {
        if line.starts_with(".LLSDACSB") {
            fields = Some(0);
        } else if line.starts_with(".LLSDACSE") {
            fields = None;
        } else if let (Some(n), Some(value)) = (fields.as_mut(), line.strip_prefix(".uleb128")) {
            if *n % 4 == 2 && value.trim() != "0" {
                pads.insert(value.trim().split('-').next().unwrap_or_default().to_string());
            }
            *n += 1;
        }
    }
    asm.contains(".LLSDACSB").then_some(pads.len())
}

/// objdump's linear sweep: instruction starts, and the symbol each one belongs to.
fn disassemble(exe: &Path) -> BTreeMap<u64, String> {
    let out = Command::new("objdump").args(["-d", "-w", "--no-show-raw-insn"]).arg(exe).output().expect("objdump must be installed");
    assert!(out.status.success());
    let mut insns = BTreeMap::new();
    let mut symbol = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "0000000000001189 <with_catch>:" and "    1189:\tendbr64"
        if let Some((addr, name)) = line.split_once(" <") {
            if u64::from_str_radix(addr, 16).is_ok() {
                symbol = name.trim_end_matches(">:").to_string();
            }
        } else if let Some((addr, _)) = line.trim_start().split_once(":\t") {
            if let Ok(addr) = u64::from_str_radix(addr, 16) {
                insns.insert(addr, symbol.clone());
            }
        }
    }
    insns
}

fn check(flags: &[&str]) -> usize {
    let exe = build("pads", flags);
    let data = std::fs::read(&exe).unwrap();
    let module = ElfModule::parse(&data).unwrap();
    let pads = &module.landing_pads;
    assert!(pads.windows(2).all(|w| w[0] < w[1]), "{flags:?}: pads not sorted and unique");

    let insns = disassemble(&exe);
    let ranges: Vec<(u64, u64)> = module
        .functions
        .iter()
        .map(|f| (f.addr.0, f.size))
        .chain(module.fragments.iter().map(|&(a, size)| (a.0, size)))
        .collect();
    let mut owners = BTreeSet::new();
    for &Svma(pad) in pads {
        let owner = insns.get(&pad).unwrap_or_else(|| panic!("{flags:?}: pad {pad:#x} is not an instruction start"));
        assert!(ranges.iter().any(|&(a, size)| pad >= a && pad < a + size), "{flags:?}: pad {pad:#x} ({owner}) outside every function");
        owners.insert(owner.trim_end_matches(".cold").to_string());
    }
    for name in WITH_PADS {
        assert!(owners.contains(name), "{flags:?}: no landing pad in {name} (pads in {owners:?})");
    }
    if let Some(expected) = compiler_pad_count(&exe.with_file_name("eh.cc"), flags) {
        assert_eq!(pads.len(), expected, "{flags:?}: the compiler's call-site tables have {expected} pads");
    }
    pads.len()
}

#[test]
fn landing_pads_of_a_cxx_program() {
    for flags in [&["-O0"][..], &["-O2"], &["-O2", "-no-pie"]] {
        let n = check(flags);
        eprintln!("{flags:?}: {n} landing pads");
    }
}

/// Damaged exception tables (and the FDEs pointing at them) must not make parsing panic.
#[test]
fn mutated_exception_tables_never_panic() {
    let data = std::fs::read(build("mutated", &["-O2"])).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let spans: Vec<(usize, usize)> = [".gcc_except_table", ".eh_frame"]
        .iter()
        .map(|name| {
            let (offset, size) = file.section_by_name(name).unwrap().file_range().unwrap();
            (offset as usize, size as usize)
        })
        .collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for case in 0..2000 {
        let mut bytes = data.clone();
        let (offset, size) = spans[case % 2];
        for _ in 0..1 + next() % 8 {
            bytes[offset + (next() as usize) % size] = next() as u8;
        }
        let result = std::panic::catch_unwind(|| ElfModule::parse(&bytes).map(|m| m.landing_pads.len()));
        assert!(result.is_ok(), "case {case} panicked");
    }
}
