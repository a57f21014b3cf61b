//! `lopi trace -- PROG` with PROG's stdout redirected: the file (or pipe) gets exactly what
//! the program writes natively, and the script's output goes to stderr, or to `-o FILE`; on a
//! terminal both go to it, as before.
mod common;

use common::*;
use std::process::Command;

/// Writes known bytes (text, a NUL, bytes past ASCII) and calls `step` ten times.
const PROGRAM: &str = r#"
#include <stdio.h>
__attribute__((noinline)) int step(int i) { return printf("line %d of the program\n", i); }
int main(void) {
    for (int i = 0; i < 10; i++) step(i);
    fwrite("\0\x01\xfe\xff end\n", 1, 9, stdout);
    return 0;
}
"#;

const SCRIPT: &str = r#"func:step { printf("step %d\n", arg0); @n = count(); }"#;

#[test]
fn a_redirected_stdout_holds_only_the_programs_output() {
    let dir = fresh_dir("trace-stdout");
    let prog = build_c(&dir, "prog", PROGRAM, &["-O1"]);
    let native = run(&mut Command::new(&prog), default_timeout()).unwrap();
    assert!(native.status.success() && native.stdout.len() > 200);

    // Redirected to a file, as `lopi trace ... -- prog > f.out`.
    let file = dir.join("f.out");
    let redirected = r#"exec "$0" trace -e "$1" -- "$2" > "$3""#;
    let out = run(Command::new("sh").args(["-c", redirected]).arg(lopi_bin()).arg(SCRIPT).arg(&prog).arg(&file), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(std::fs::read(&file).unwrap(), native.stdout, "the program's redirected output is its own");
    let err = out.stderr_str();
    assert!((0..10).all(|i| err.contains(&format!("step {i}\n"))) && err.contains("@n: 10"), "the script's output on stderr:\n{err}");

    // A pipe: the same.
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", SCRIPT, "--"]).arg(&prog), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(out.stdout, native.stdout, "a pipe gets the program's output only");
    assert!(out.stderr_str().contains("step 9\n") && out.stderr_str().contains("@n: 10"), "{}", out.stderr_str());

    // -o FILE: the script's output there, none on stderr.
    let script_out = dir.join("script.out");
    let out = run(Command::new(lopi_bin()).args(["trace", "-e", SCRIPT, "-o"]).arg(&script_out).arg("--").arg(&prog), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(out.stdout, native.stdout);
    let text = std::fs::read_to_string(&script_out).unwrap();
    assert!(text.starts_with("step 0\n") && text.contains("@n: 10"), "{text}");
    assert!(!out.stderr_str().contains("step "), "{}", out.stderr_str());

    // A terminal (script(1)'s pseudo-terminal): both on it.
    let line = format!("{} trace -e '{SCRIPT}' -- {}", lopi_bin().display(), prog.display());
    let out = run(Command::new("script").args(["-qec", &line, "/dev/null"]), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let tty = out.stdout_str();
    assert!(tty.contains("line 9 of the program") && tty.contains("step 9") && tty.contains("@n: 10"), "{tty}");
    cleanup(&dir);
}
