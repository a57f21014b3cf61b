//! `lopi trace` on real programs nobody here wrote: zstd (Debian's source, Debian's flags) and
//! sqlite3's shell, with scripts over their functions and libc's. Their output must be the
//! same byte for byte as without lopi, and what the scripts count must agree with lopi's plain
//! counting probe on the same run's functions.
mod common;

use common::*;
use serde_json::Value as Json;
use std::path::Path;
use std::process::Command;

/// `lopi trace --format json` of `script` on `command`: (maps, program's stdout).
fn trace(dir: &Path, script: &str, command: &[&std::ffi::OsStr]) -> (Json, Vec<u8>) {
    let maps = dir.join("maps.json");
    let mut cmd = Command::new(lopi_bin());
    cmd.args(["trace", "--format", "json", "-o"]).arg(&maps).args(["-e", script, "--"]).args(command).current_dir(dir);
    let out = run(&mut cmd, default_timeout()).unwrap();
    assert!(out.status.success(), "lopi trace -e '{script}': {}\n{}", out.describe_status(), out.stderr_str());
    let text = std::fs::read_to_string(&maps).unwrap();
    (serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap_or_else(|e| panic!("{e}: {text}")), out.stdout)
}

fn plain(command: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = run(Command::new(command[0]).args(&command[1..]), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    out.stdout
}

/// Calls per function of `command` under `lopi run --probe entry --functions GLOB`.
fn counted(dir: &Path, glob: &str, command: &[&std::ffi::OsStr]) -> std::collections::BTreeMap<String, u64> {
    let data = dir.join("count.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--functions", glob, "--"]).args(command).env("LOPI_OUTPUT", &data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let report = run(Command::new(lopi_bin()).args(["report", "--format", "json", "--top", "0"]).arg(&data), default_timeout()).unwrap();
    std::fs::remove_file(&data).unwrap();
    parse_report(&report.stdout_str()).unwrap().into_iter().filter(|e| e.calls > 0).map(|e| (e.name, e.calls)).collect()
}

#[test]
fn real_zstd_traced_compresses_the_same_and_counts_as_lopi_does() {
    let zstd = real_program("ZSTD_SRC_BIN");
    let dir = fresh_dir("real_trace_zstd");
    let input = dir.join("input");
    let data = run(Command::new(real_program("DATAGEN")).args(["-g4000000", "-s7"]), default_timeout()).unwrap();
    std::fs::write(&input, &data.stdout).unwrap();
    let command = [zstd.as_os_str(), "-3".as_ref(), "-c".as_ref(), input.as_os_str()];
    let script = "func:ZSTD_compress* { @calls[func] = count(); } \
                  func:ZSTD_compressBlock_internal:return { @blocks = count(); @ns = stats(elapsed); } \
                  func:libc:malloc { @mallocs = count(); @bytes = sum(arg0); }";
    let (got, stdout) = trace(&dir, script, &command);
    assert!(stdout == plain(&command), "zstd's compressed output differs under lopi trace");
    let maps = &got["maps"];
    // The script's counts are the plain counting probe's, function by function.
    let calls: std::collections::BTreeMap<String, u64> =
        maps["@calls"].as_object().expect("@calls").iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
    assert_eq!(calls, counted(&dir, "ZSTD_compress*", &command), "{got}");
    assert!(maps["@blocks"].as_u64().unwrap_or(0) > 0 && maps["@ns"]["count"] == maps["@blocks"], "{got}");
    assert!(maps["@mallocs"].as_u64().unwrap_or(0) > 0 && maps["@bytes"].as_u64().unwrap_or(0) > 0, "{got}");
    cleanup(&dir);
}

#[test]
fn real_sqlite3_traced_answers_the_same_and_reads_its_statements() {
    let sqlite3 = real_program("SQLITE3_SRC_BIN");
    let dir = fresh_dir("real_trace_sqlite3");
    let sql = "create table t(a, b); insert into t values (1, 'one'), (2, 'two'), (3, 'three'); \
               select b from t where a > 1 order by a; select count(*), sum(a) from t;";
    let command = [sqlite3.as_os_str(), ":memory:".as_ref(), sql.as_ref()];
    let script = "func:sqlite3_prepare_v2 { @sql[str(arg1, 24)] = count(); } func:sqlite3_step:return { @steps[retval] = count(); } \
                  func:sqlite3VdbeExec { @exec = count(); }";
    let (got, stdout) = trace(&dir, script, &command);
    assert_eq!(String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&plain(&command)));
    assert_eq!(String::from_utf8_lossy(&stdout), "two\nthree\n3|6\n");
    let maps = &got["maps"];
    // The shell prepares each statement from its text (the first 24 bytes here).
    let statements: Vec<&String> = maps["@sql"].as_object().expect("@sql").keys().collect();
    for want in ["create table t(a, b); ins", "insert into t values (1, ", "select b from t where a ", "select count(*), sum(a) "] {
        assert!(statements.iter().any(|s| s.starts_with(&want[..want.len().min(24)])), "no statement {want:?} in {statements:?}");
    }
    // SQLITE_ROW (100) for each row: the 2 + 1 the queries return, and the schema row sqlite
    // reads itself (its `SELECT*FROM "main".sqlite_master`, prepared twice, above); SQLITE_DONE
    // (101) at least once per statement.
    assert_eq!(maps["@steps"]["100"], 4, "{got}");
    assert_eq!(maps["@sql"]["SELECT*FROM\"main\".sqlite"], 2, "{got}");
    assert!(maps["@steps"]["101"].as_u64().unwrap_or(0) >= 4 && maps["@exec"].as_u64().unwrap_or(0) >= 7, "{got}");
    cleanup(&dir);
}

/// The dynamic loader is a library a script may name (ldd lists it without `=>`): its
/// `_dl_fini` runs once, at exit.
#[test]
fn the_dynamic_loader_is_named_in_scripts() {
    let dir = fresh_dir("real_trace_ldso");
    let command = ["/bin/true".as_ref()];
    let (got, _) = trace(&dir, "func:ld-linux-x86-64.so.2:_dl_fini { @fini = count(); }", &command);
    assert_eq!(got["maps"]["@fini"].as_u64(), Some(1), "{got}");
    cleanup(&dir);
}
