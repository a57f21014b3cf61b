//! `--probe syscall` on real programs nobody here wrote: zstd (Debian's and source-built),
//! sqlite3 (Debian's shell with its libsqlite3, and source-built) and pigz with two threads,
//! each under `lopi run --probe syscall` (every module's sites) and rewritten with
//! `--probe syscall` (its own sites). Their output must be the original's, and lopi's counts
//! must equal strace's (`strace -f`), the dynamic loader's start-up included (lopi run counts
//! it through ptrace).
mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Calls per name in an `strace -f -o` log. Interrupted calls strace splits in two lines
/// count once.
fn strace_counts(log: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in log.lines() {
        let rest = line.split_once(' ').map_or(line, |(_, rest)| rest).trim_start();
        if rest.starts_with("<...") || rest.starts_with("---") || rest.starts_with("+++") {
            continue;
        }
        if let Some((name, _)) = rest.split_once('(') {
            *counts.entry(name.to_string()).or_default() += 1;
        }
    }
    counts
}

struct Case {
    dir: PathBuf,
    /// What the program does, run in `dir` by `sh -c`, with `$PROG` the program.
    script: String,
    /// System calls whose counts lopi and strace must agree on.
    compare: &'static [&'static str],
}

impl Case {
    fn command(&self, prog: &Path, prefix: &[&str]) -> Command {
        let mut cmd = Command::new("sh");
        let wrapped = if prefix.is_empty() { "\"$PROG\" \"$@\"".to_string() } else { format!("{} \"$PROG\" \"$@\"", prefix.join(" ")) };
        cmd.arg("-c").arg(self.script.replace("PROG_RUN", &wrapped)).current_dir(&self.dir).env("PROG", prog);
        cmd
    }

    /// Runs the script plain, under strace, under `lopi run`, and rewritten; returns problems.
    fn check(&self, label: &str, prog: &Path, outputs: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        let reset = || {
            for o in outputs {
                let _ = std::fs::remove_file(self.dir.join(o));
            }
        };
        let snapshot = || outputs.iter().map(|o| std::fs::read(self.dir.join(o)).unwrap_or_default()).collect::<Vec<_>>();
        reset();
        let original = run(&mut self.command(prog, &[]), default_timeout()).expect("run");
        assert!(original.status.success(), "{label}: the original failed: {}", original.stderr_str());
        let want = snapshot();
        let differs = |what: &str, out: &Output| {
            (out.status.code() != original.status.code() || out.stdout != original.stdout || snapshot() != want)
                .then(|| format!("{label} {what}: output or status differ ({})\n{}", out.describe_status(), out.stderr_str()))
        };
        // strace: the oracle.
        reset();
        let log = self.dir.join("strace.log");
        let _ = std::fs::remove_file(&log);
        let strace = require("strace", "strace");
        let traced = run(&mut self.command(prog, &[strace.to_str().unwrap(), "-f", "-qq", "-A", "-o", log.to_str().unwrap()]), default_timeout()).expect("strace");
        problems.extend(differs("under strace", &traced));
        let strace = strace_counts(&std::fs::read_to_string(&log).unwrap_or_default());
        // lopi run: every module.
        reset();
        let data = self.dir.join("live.lopi");
        let _ = std::fs::remove_file(&data);
        let lopi = lopi_bin();
        let live = run(self.command(prog, &[lopi.to_str().unwrap(), "run", "-q", "--probe", "syscall", "--"]).env("LOPI_OUTPUT", &data), default_timeout()).expect("lopi run");
        problems.extend(differs("under lopi run --probe syscall", &live));
        let seen = by_syscall(&syscall_report(&data)["syscalls"], "calls");
        for name in self.compare {
            let (a, b) = (strace.get(*name).copied().unwrap_or(0), seen.get(*name).copied().unwrap_or(0));
            eprintln!("{label}: {name}: strace {a}, lopi {b}");
            if a != b || a == 0 {
                problems.push(format!("{label}: {name}: strace {a}, lopi {b} (lopi saw {seen:?})"));
            }
        }
        // Rewritten: the program's own sites.
        reset();
        let rewritten = self.dir.join("rewritten");
        let out = run(Command::new(&lopi).args(["rewrite", "--probe", "syscall"]).arg(prog).arg("-o").arg(&rewritten), default_timeout()).expect("lopi rewrite");
        assert!(out.status.success(), "{label}: lopi rewrite: {}", out.stderr_str());
        let data = self.dir.join("static.lopi");
        let ran = run(self.command(&rewritten, &[]).env("LOPI_OUTPUT", &data), default_timeout()).expect("rewritten");
        problems.extend(differs("rewritten with --probe syscall", &ran));
        problems
    }
}

/// Many small files: syscall-heavy, deterministic.
fn small_files(dir: &Path, n: usize) {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    for i in 0..n {
        let text: String = (0..200 + i % 300).map(|j| format!("{} line {j} of file {i}\n", ["alpha", "beta", "gamma"][j % 3])).collect();
        std::fs::write(input.join(format!("f{i:04}.txt")), text).unwrap();
    }
}

fn zstd(key: &str) {
    let dir = fresh_dir(&format!("real-syscalls-{key}"));
    small_files(&dir, 300);
    let case = Case {
        dir: dir.clone(),
        script: "rm -rf out && mkdir out && PROG_RUN -q -r in --output-dir-flat out && PROG_RUN -q -d -r out -c | cksum > sums".into(),
        compare: &["write", "read", "openat"],
    };
    let problems = case.check(key, &real_program(key), &["sums"]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

#[test]
fn real_syscalls_zstd_debian() {
    zstd("DEB_ZSTD");
}

#[test]
fn real_syscalls_zstd_source_built() {
    zstd("ZSTD_SRC_BIN");
}

fn sqlite3(key: &str, library: Option<&str>) {
    let dir = fresh_dir(&format!("real-syscalls-{key}"));
    let inserts: String = (0..200).map(|i| format!("INSERT INTO t VALUES({i}, 'row {i}');\n")).collect();
    std::fs::write(dir.join("work.sql"), format!("PRAGMA synchronous=FULL;\nCREATE TABLE t(a, b);\n{inserts}SELECT count(*), sum(a) FROM t;\n")).unwrap();
    let preload = library.map(|lib| format!("LD_LIBRARY_PATH={} ", real_program(lib).parent().unwrap().display())).unwrap_or_default();
    let case = Case {
        dir: dir.clone(),
        script: format!("rm -f db db-journal && {preload}PROG_RUN db < work.sql > result"),
        compare: &["pwrite64", "fdatasync", "unlink"],
    };
    let problems = case.check(key, &real_program(key), &["result"]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}

#[test]
fn real_syscalls_sqlite3_debian() {
    sqlite3("DEB_SQLITE3", Some("DEB_LIBSQLITE3"));
}

#[test]
fn real_syscalls_sqlite3_source_built() {
    sqlite3("SQLITE3_SRC_BIN", None);
}

/// pigz compresses with two threads: system calls from several threads at once.
#[test]
fn real_syscalls_pigz_two_threads() {
    let pigz = require_file("/usr/bin/pigz", "pigz");
    let dir = fresh_dir("real-syscalls-pigz");
    let text: String = (0..400_000).map(|i| format!("{i} {}\n", i * 7919 % 10007)).collect();
    std::fs::write(dir.join("input"), text).unwrap();
    let case = Case { dir: dir.clone(), script: "PROG_RUN -p 2 -b 128 -c input > input.gz && PROG_RUN -d -c input.gz | cksum > sums".into(), compare: &["write", "read"] };
    let problems = case.check("pigz", &pigz, &["input.gz", "sums"]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    cleanup(&dir);
}
