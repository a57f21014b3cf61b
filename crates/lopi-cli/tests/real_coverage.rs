//! `lopi coverage` against gcov on a real program nobody here wrote: zstd from Debian's source
//! with Debian's flags (-O2 -g), rewritten with `--probe coverage`, and the same source and
//! flags built with `--coverage` (both by tests/real/prepare.sh); each runs
//! tests/real/zstd-battery.sh. Of the lines both report, at least 98.5% must agree (README,
//! "Coverage against gcov", sorts the rest into the kinds binary coverage at -O2 cannot avoid).
mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A source line: its path relative to the source tree, and its number.
type SourceLine = (String, u64);

#[test]
fn real_zstd_coverage_agrees_with_gcov() {
    let plain = real_program("ZSTD_SRC_BIN");
    let gcov_build = real_program("ZSTD_GCOV_BIN");
    let datagen = real_program("DATAGEN");
    let tree = |program: &Path| program.parent().and_then(Path::parent).unwrap().to_path_buf();
    let dir = fresh_dir("real_coverage");

    let rewritten = dir.join("zstd");
    let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", "coverage", "-o"]).arg(&rewritten).arg(&plain), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let data = dir.join("zstd.lopi");
    battery(&rewritten, &datagen, &dir, Some(&data));
    let lopi = lopi_lines(&data, &tree(&plain));

    for stale in gcda_files(&tree(&gcov_build)) {
        std::fs::remove_file(stale).unwrap();
    }
    battery(&gcov_build, &datagen, &dir, None);
    let gcov = gcov_lines(&tree(&gcov_build));

    let both: Vec<&SourceLine> = lopi.keys().filter(|l| gcov.contains_key(*l)).collect();
    let differ: Vec<&&SourceLine> = both.iter().filter(|l| lopi[**l] != gcov[**l]).collect();
    let agree = 100.0 * (both.len() - differ.len()) as f64 / both.len().max(1) as f64;
    println!("lines both report: {}, agree {agree:.2}% ({} differ); lopi alone {}, gcov alone {}", both.len(), differ.len(), lopi.len() - both.len(), gcov.len() - both.len());
    for l in differ.iter().take(20) {
        println!("  {}:{}: lopi {}, gcov {}", l.0, l.1, lopi[**l], gcov[**l]);
    }
    assert!(both.len() > 10_000, "only {} lines both report", both.len());
    // 98.96% when this was written: the battery's error cases run code GCC merged across
    // `EXM_THROW`s (cross-jumping), which gcov, instrumenting before that, tells apart.
    assert!(agree >= 98.5, "lopi and gcov agree on {agree:.2}% of {} lines", both.len());
    cleanup(&dir);
}

/// Runs zstd-battery.sh on `zstd`, recording into `data` if given.
fn battery(zstd: &Path, datagen: &Path, dir: &Path, data: Option<&Path>) {
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("tests/real/zstd-battery.sh")).arg(zstd).arg(datagen).arg(dir.join("scratch"));
    cmd.env_remove("LOPI_OUTPUT");
    if let Some(data) = data {
        cmd.env("LOPI_OUTPUT", data);
    }
    let out = run(&mut cmd, Duration::from_secs(1200)).unwrap();
    assert!(out.status.success(), "zstd-battery.sh on {}: {}", zstd.display(), out.stderr_str());
}

/// lopi's verdict per line of the files under `tree`.
fn lopi_lines(data: &Path, tree: &Path) -> HashMap<SourceLine, bool> {
    let out = run(Command::new(lopi_bin()).args(["coverage", "--format", "json"]).arg(data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    let mut lines = HashMap::new();
    for file in json["files"].as_array().unwrap() {
        let Some(path) = relative(Path::new(file["path"].as_str().unwrap()), tree) else { continue };
        for (field, ran) in [("missed_lines", false), ("covered_lines", true)] {
            for l in file[field].as_array().unwrap() {
                *lines.entry((path.clone(), l.as_u64().unwrap())).or_insert(false) |= ran;
            }
        }
    }
    lines
}

/// gcov's verdict per line of the files under `tree`, from the counts its run left there.
fn gcov_lines(tree: &Path) -> HashMap<SourceLine, bool> {
    let mut lines = HashMap::new();
    for gcda in gcda_files(tree) {
        let out = Command::new("gcov").args(["-t", "-j"]).arg(&gcda).current_dir(gcda.parent().unwrap()).output().expect("gcov");
        assert!(out.status.success(), "gcov {}: {}", gcda.display(), String::from_utf8_lossy(&out.stderr));
        let json: Json = serde_json::from_slice(&out.stdout).unwrap();
        let cwd = Path::new(json["current_working_directory"].as_str().unwrap());
        for file in json["files"].as_array().unwrap() {
            let Some(path) = relative(&cwd.join(file["file"].as_str().unwrap()), tree) else { continue };
            for l in file["lines"].as_array().unwrap() {
                // Counters of code threads run at once can go wrong, negative even (gcov's updates
                // are not atomic): any but zero says the line ran.
                *lines.entry((path.clone(), l["line_number"].as_u64().unwrap())).or_insert(false) |= l["count"].as_i64().unwrap() != 0;
            }
        }
    }
    lines
}

fn gcda_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(gcda_files(&path));
        } else if path.extension().is_some_and(|e| e == "gcda") {
            out.push(path);
        }
    }
    out
}

/// `path` with `.` and `..` resolved, relative to `tree`; `None` outside it.
fn relative(path: &Path, tree: &Path) -> Option<String> {
    let mut normal = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            c => normal.push(c),
        }
    }
    normal.strip_prefix(tree).ok().map(|p| p.display().to_string())
}
