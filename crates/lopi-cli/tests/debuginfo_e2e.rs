//! Debug information as distributions ship it:
//! - DWARF in compressed sections (`gcc -gz`: zlib; `-gz=zlib-gnu`: `.zdebug_*`; zstd, from
//!   `gcc -gz=zstd` or `objcopy --compress-debug-sections=zstd` where the toolchain has it;
//!   a stripped file's separate debug file kept compressed, as Debian's -dbgsym packages
//!   are): `lopi coverage` gives the uncompressed build's lines and functions.
//! - MiniDebugInfo (`.gnu_debugdata`, built as Fedora's find-debuginfo does): the stripped
//!   file is named as the unstripped one, in `lopi info` and in a recorded run's report.
//!
//! `LOPI_DEBUG_DIR` points into each test's own directory: /usr/lib/debug is never read.
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A program whose functions have branches, so that coverage has lines that ran and lines
/// that did not.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int classify(int x) {
    if (x % 3 == 0)
        return x / 3;
    if (x % 5 == 0)
        return -x;
    return x + 1;
}
__attribute__((noinline)) long never(long x) {
    return x * 1000 + 7;
}
int main(int argc, char **argv) {
    long sum = 0;
    for (int i = 0; i < (argc > 1 ? atoi(argv[1]) : 50); i++)
        sum += classify(i);
    if (argc > 5)
        sum = never(sum);
    printf("%ld\n", sum);
    return 0;
}
"#;

fn must(cmd: &mut Command) -> Output {
    let line = render_cmd(cmd);
    let out = run(cmd, default_timeout()).unwrap_or_else(|e| panic!("cannot run `{line}`: {e}"));
    assert!(out.status.success(), "`{line}` failed ({}):\n{}{}", out.describe_status(), out.stdout_str(), out.stderr_str());
    out
}

fn lopi(debug_dir: &Path) -> Command {
    let mut cmd = Command::new(lopi_bin());
    cmd.env("LOPI_DEBUG_DIR", debug_dir);
    cmd
}

/// Whether `cmd` succeeds (a toolchain feature probe).
fn works(cmd: &mut Command) -> bool {
    run(cmd, default_timeout()).is_ok_and(|o| o.status.success())
}

/// Whether `section` of `file` is compressed (`C` among its flags, or a `.zdebug_` name).
fn compressed(file: &Path, section: &str) -> bool {
    let out = must(Command::new("readelf").arg("-W").arg("-S").arg(file)).stdout_str();
    let zname = section.replacen(".debug_", ".zdebug_", 1);
    out.lines().any(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let Some(at) = fields.iter().position(|f| *f == section || *f == zname) else { return false };
        fields[at] == zname || fields.get(at + 6).is_some_and(|flags| flags.contains('C'))
    })
}

/// `lopi coverage --format json` of `prog` run under `--probe block`: its files (lines that
/// ran and did not) and each function's blocks and covered blocks.
fn coverage(prog: &Path, debug_dir: &Path) -> (Json, BTreeMap<String, (u64, u64)>) {
    let data = prog.with_extension("cov.lopi");
    let _ = std::fs::remove_file(&data);
    must(lopi(debug_dir).args(["run", "-q", "--probe", "block", "--"]).arg(prog).env("LOPI_OUTPUT", &data));
    let out = must(lopi(debug_dir).args(["coverage", "--format", "json"]).arg(&data));
    let json: Json = serde_json::from_str(&out.stdout_str()).expect("coverage JSON");
    let functions = json["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| (f["name"].as_str().unwrap().to_string(), (f["blocks"].as_u64().unwrap(), f["covered"].as_u64().unwrap())))
        .collect();
    (json["files"].clone(), functions)
}

#[test]
fn coverage_reads_compressed_debug_sections() {
    let dir = fresh_dir("debuginfo-compressed");
    let nowhere = dir.join("no-debug-dir");
    // Every build from one source file: the lines name it.
    let plain = build_c(&dir, "plain", PROGRAM, &["-g", "-O1"]);
    let source = dir.join("plain.c");
    let build = |name: &str, flags: &[&str]| {
        let prog = dir.join(name);
        compile(Command::new("cc").args(["-g", "-O1"]).args(flags).arg("-o").arg(&prog).arg(&source)).unwrap();
        prog
    };
    let (want_files, want_functions) = coverage(&plain, &nowhere);
    let lines = |files: &Json| files.as_array().map_or(0, |f| f.iter().map(|f| f["lines"].as_u64().unwrap()).sum::<u64>());
    assert!(lines(&want_files) >= 8, "the uncompressed build has lines: {want_files}");
    assert!(want_functions.contains_key("classify") && want_functions.contains_key("never"), "{want_functions:?}");

    let mut cases: Vec<(&str, PathBuf)> = vec![("gcc -gz (zlib)", build("zlib", &["-gz"])), ("gcc -gz=zlib-gnu (.zdebug_*)", build("zlibgnu", &["-gz=zlib-gnu"]))];
    let zstd = dir.join("zstd");
    if works(Command::new("cc").args(["-g", "-O1", "-gz=zstd", "-o"]).arg(&zstd).arg(&source)) {
        cases.push(("gcc -gz=zstd", zstd));
    } else if works(Command::new("objcopy").arg("--compress-debug-sections=zstd").arg(&plain).arg(&zstd)) {
        cases.push(("objcopy --compress-debug-sections=zstd", zstd));
    } else {
        eprintln!("note: neither gcc nor objcopy here compresses with zstd: that case is not run");
    }
    // Stripped, its debug file kept compressed (Debian's dh_strip), found by .gnu_debuglink.
    let debug = dir.join("split.debug");
    must(Command::new("objcopy").args(["--only-keep-debug", "--compress-debug-sections=zlib"]).arg(&plain).arg(&debug));
    let stripped = dir.join("split.stripped");
    must(Command::new("strip").arg("-o").arg(&stripped).arg(&plain));
    let split = dir.join("split");
    must(Command::new("objcopy").arg(format!("--add-gnu-debuglink={}", debug.display())).arg(&stripped).arg(&split));
    assert!(compressed(&debug, ".debug_line") && compressed(&debug, ".debug_info"), "the debug file is compressed");
    cases.push(("stripped, separate debug file compressed with zlib", split));

    for (label, prog) in &cases {
        if !label.starts_with("stripped") {
            assert!(compressed(prog, ".debug_line"), "{label}: .debug_line is compressed");
        }
        let (files, functions) = coverage(prog, &nowhere);
        assert_eq!(files, want_files, "{label}: lines differ from the uncompressed build's");
        assert_eq!(functions, want_functions, "{label}: functions differ from the uncompressed build's");
    }
    cleanup(&dir);
}

/// Names and calls per function of a `lopi run --probe entry` of `prog`.
fn named_calls(prog: &Path, debug_dir: &Path) -> BTreeMap<String, u64> {
    let data = prog.with_extension("run.lopi");
    let _ = std::fs::remove_file(&data);
    must(lopi(debug_dir).args(["run", "-q", "--"]).arg(prog).env("LOPI_OUTPUT", &data));
    let report: Json = serde_json::from_str(&must(lopi(debug_dir).arg("report").arg(&data).args(["--format", "json"])).stdout_str()).expect("report JSON");
    report["functions"].as_array().unwrap().iter().map(|f| (f["name"].as_str().unwrap().to_string(), f["calls"].as_u64().unwrap())).collect()
}

/// address -> name of every function `lopi info` lists, and its JSON.
fn info_names(prog: &Path, debug_dir: &Path) -> (BTreeMap<String, String>, Json) {
    let json: Json = serde_json::from_str(&must(lopi(debug_dir).arg("info").arg(prog).args(["--format", "json"])).stdout_str()).expect("info JSON");
    let names = json["functions"].as_array().unwrap().iter().map(|f| (f["addr"].as_str().unwrap().to_string(), f["name"].as_str().unwrap().to_string())).collect();
    (names, json)
}

/// Adds a MiniDebugInfo to a stripped copy of `prog` as Fedora's find-debuginfo does: the
/// debug file's function symbols that `.dynsym` lacks, in a copy of it without debug
/// sections, xz-compressed into `.gnu_debugdata`.
fn with_mini_debuginfo(prog: &Path, out: &Path) {
    let dir = prog.parent().unwrap();
    let debug = dir.join("mini.full.debug");
    must(Command::new("objcopy").arg("--only-keep-debug").arg(prog).arg(&debug));
    let dynamic = must(Command::new("nm").args(["-D", "--format=posix", "--defined-only"]).arg(prog)).stdout_str();
    let dynamic: Vec<&str> = dynamic.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let all = must(Command::new("nm").args(["--format=sysv", "--defined-only"]).arg(&debug)).stdout_str();
    let keep: Vec<&str> = all
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split('|').map(str::trim).collect();
            (fields.len() > 3 && fields[3].contains("FUNC") && !dynamic.contains(&fields[0])).then_some(fields[0])
        })
        .collect();
    assert!(keep.contains(&"checked_double"), "the fixture's static functions are kept: {keep:?}");
    let keep_file = dir.join("mini.keep");
    std::fs::write(&keep_file, keep.join("\n") + "\n").unwrap();
    let mini = dir.join("mini.debuginfo");
    must(Command::new("objcopy").args(["-S", "--remove-section", ".gdb_index", "--remove-section", ".comment"]).arg(format!("--keep-symbols={}", keep_file.display())).arg(&debug).arg(&mini));
    let _ = std::fs::remove_file(mini.with_extension("debuginfo.xz"));
    must(Command::new(require("xz", "xz-utils")).arg(&mini));
    let stripped = dir.join("mini.stripped");
    must(Command::new("strip").arg("-o").arg(&stripped).arg(prog));
    must(Command::new("objcopy").arg(format!("--add-section=.gnu_debugdata={}.xz", mini.display())).arg(&stripped).arg(out));
}

#[test]
fn mini_debuginfo_names_stripped_functions() {
    let dir = fresh_dir("debuginfo-mini");
    let nowhere = dir.join("no-debug-dir");
    let prog = dir.join("prog");
    compile(Command::new("cc").args(["-g", "-O2"]).arg("-o").arg(&prog).arg(fixtures_dir().join("names/cold_parts.c"))).unwrap();
    let fedora = dir.join("fedora");
    with_mini_debuginfo(&prog, &fedora);
    let (want, _) = info_names(&prog, &nowhere);
    let (stripped, _) = info_names(&dir.join("mini.stripped"), &nowhere);
    assert!(!stripped.values().any(|n| n == "checked_double"), "the stripped file alone has no such name: {stripped:?}");

    let (got, json) = info_names(&fedora, &nowhere);
    assert_eq!(json["mini_debuginfo"], Json::Bool(true), "lopi info says where the names came from");
    assert_eq!(got, want, "names differ from the unstripped build's");
    let text = must(lopi(&nowhere).arg("info").arg(&fedora)).stdout_str();
    assert!(text.starts_with("symbols: .gnu_debugdata (MiniDebugInfo)\n"), "{text}");

    let calls = named_calls(&fedora, &nowhere);
    assert_eq!(calls, named_calls(&prog, &nowhere), "a run's report names and counts as the unstripped build's");
    for (name, n) in [("checked_double", 103), ("scaled", 40), ("helper", 40), ("complain", 26)] {
        assert_eq!(calls.get(name), Some(&n), "{name}: {calls:?}");
    }
    cleanup(&dir);
}
