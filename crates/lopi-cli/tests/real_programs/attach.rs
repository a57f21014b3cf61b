//! `lopi attach` to a running program: the source-built sqlite3 shell in the middle of
//! real work, against the same workload recorded by the rewritten shell.

use super::running::run;
use super::steps::{rewrite, Report};
use super::{fresh_data, lopi, prepared, run_dir, secs, Cleanup, Mode};
use crate::common;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `lopi attach` to the source-built sqlite3 shell in the middle of real work (the same
/// query over a 50k-row table, many times): the shell's output is unchanged, its code equals
/// the file again after detach, and the attached second has the call proportions of the same
/// workload recorded from start to end by the statically rewritten shell.
#[test]
fn real_sqlite3_attach() {
    let p = prepared();
    let tag = "sqlite3-attach";
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let orig = p.path("SQLITE3_SRC_BIN");
    let db = dir.join("t.db");
    let setup = "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);\n\
        WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<50000) \
        INSERT INTO t SELECT x, printf('%08d-%d', x*7919 % 1000003, x % 97) FROM c;\n";
    // SQL as the shell's argument: run() gives commands no stdin.
    let shell = |sql: String| -> Command {
        let mut c = Command::new(&orig);
        c.arg(&db).arg(sql);
        c
    };
    let setup_run = run(&mut shell(setup.to_string()));
    assert_eq!(setup_run.code, 0, "[{tag}] setup failed");
    let query = "SELECT count(*), sum(length(b)), max(a) FROM t WHERE b LIKE '%12%' AND a % 3 <> 1;\n";
    let rounds = |n: usize| query.repeat(n);

    // The whole workload (fewer rounds) through the statically rewritten shell: the
    // proportions to expect.
    let whole = fresh_data(&dir, "whole.lopi");
    let rewritten = dir.join("sqlite3.rewritten");
    rewrite(tag, &orig, &rewritten, Mode::Timing);
    let w = run(Command::new(&rewritten).arg(&db).arg(rounds(40)).env("LOPI_OUTPUT", &whole));
    assert_eq!(w.code, 0, "[{tag}] the rewritten shell failed");

    // The original, many rounds (1500: 3-5 s, so that it cannot end while attached on a fast
    // machine), attached for one second in the middle.
    let want = run(&mut shell(rounds(1500)));
    let data = fresh_data(&dir, "attached.lopi");
    let child = shell(rounds(1500)).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let o = Command::new(lopi())
        .args(["attach", &pid.to_string(), "--probe", "entry,exit", "--duration", "1s"])
        .env("LOPI_OUTPUT", &data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    println!("[{tag}] lopi attach in {}:\n{err}", secs(t.elapsed()));
    assert!(o.status.success(), "[{tag}] lopi attach failed: {err}");
    // The shell is still running: its code must be the file's again.
    if let Err(e) = common::code_matches_file(pid as i32, &orig) {
        panic!("[{tag}] after detach: {e}");
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "[{tag}] the attached shell failed: {}", out.status);
    assert!(out.stdout == want.stdout.as_bytes(), "[{tag}] the attached shell's output differs from the original's");

    let whole = Report::load(tag, &whole, Mode::Timing);
    let attached = Report::load(tag, &data, Mode::Live);
    attached.expect_hot(tag, "sqlite3VdbeExec", 10);
    // Shares of the 8 most-called functions of the whole run, in both.
    let calls = |r: &Report| -> HashMap<String, u64> { r.functions().into_iter().map(|(name, _, n)| (name, n)).collect() };
    let (w, a) = (calls(&whole), calls(&attached));
    let mut top: Vec<(&String, &u64)> = w.iter().collect();
    top.sort_by(|x, y| y.1.cmp(x.1));
    top.truncate(8);
    let share = |m: &HashMap<String, u64>, name: &str| {
        let sum: u64 = top.iter().map(|(n, _)| m.get(*n).copied().unwrap_or(0)).sum();
        m.get(name).copied().unwrap_or(0) as f64 / sum.max(1) as f64
    };
    for (name, _) in &top {
        let (sw, sa) = (share(&w, name), share(&a, name));
        println!("[{tag}] {name}: share {sa:.4} attached, {sw:.4} whole run (rewritten file)");
        assert!((sa - sw).abs() <= 0.03 * sw + 0.002, "[{tag}] {name}: share {sa:.4} while attached, {sw:.4} over the whole run");
    }
}
