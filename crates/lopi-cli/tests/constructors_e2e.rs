//! `lopi run` puts the probes in at ld.so's rendezvous, when every library is loaded and
//! relocated and none of their constructors has run (issue 30): a library constructor's system
//! calls and function calls are seen by the probes, not only counted through ptrace on the way
//! to the entry point.
mod common;

use common::*;
use std::process::Command;

const LIBRARY: &str = r#"
#include <unistd.h>
__attribute__((constructor)) static void lib_early(void) {
    for (int i = 0; i < 7; i++)
        getppid();
}
int lib_fn(void) { return 1; }
"#;

const PROGRAM: &str = r#"
#include <unistd.h>
int lib_fn(void);
int main(void) {
    getppid();
    return lib_fn() + 2;
}
"#;

fn lopi(dir: &std::path::Path, args: &[&str], data: &str) -> Output {
    let out = run(Command::new(lopi_bin()).args(["run", "-q"]).args(args).arg("--").arg(dir.join("prog")).current_dir(dir).env("LOPI_OUTPUT", dir.join(data)), default_timeout()).expect("lopi run");
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr_str());
    out
}

#[test]
fn library_constructors_run_with_the_probes_in() {
    let dir = fresh_dir("constructors");
    std::fs::write(dir.join("early.c"), LIBRARY).unwrap();
    std::fs::write(dir.join("prog.c"), PROGRAM).unwrap();
    compile(Command::new("cc").args(["-O2", "-shared", "-fPIC", "-o", "libearly.so", "early.c"]).current_dir(&dir)).expect("the library builds");
    compile(Command::new("cc").args(["-O2", "-o", "prog", "prog.c", "-L.", "-learly"]).arg(format!("-Wl,-rpath,{}", dir.display())).current_dir(&dir)).expect("the program builds");
    // The system calls: the constructor's 7 getppid and main's 1 are the probes', none made
    // on the way to where the probes went in.
    lopi(&dir, &["--probe", "syscall"], "calls.lopi");
    let calls = by_syscall(&syscall_report(&dir.join("calls.lopi"))["syscalls"], "calls");
    assert_eq!(calls.get("getppid"), Some(&8), "{calls:?}");
    let startup = syscall_report(&dir.join("calls.lopi"))["startup"].clone();
    assert!(startup.as_array().is_none_or(|s| s.iter().all(|c| c["name"] != "getppid")), "getppid counted through ptrace: {startup}");
    // The functions: the library's constructor is timed as any call.
    lopi(&dir, &["--probe", "entry,exit", "--functions", "libearly.so:*"], "functions.lopi");
    let report = run(Command::new(lopi_bin()).args(["report", "--format", "json"]).arg(dir.join("functions.lopi")), default_timeout()).expect("lopi report");
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).expect("json");
    let constructor = json["functions"].as_array().and_then(|f| f.iter().find(|f| f["name"] == "lib_early")).unwrap_or_else(|| panic!("no lib_early in {json}"));
    assert_eq!(constructor["calls"], 1, "{constructor}");
    cleanup(&dir);
}
