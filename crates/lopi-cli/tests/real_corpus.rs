//! The probe-everything corpus's CI subset (`bench/corpus/corpus.py --ci`): Debian programs
//! (a shell, text tools, compressors with threads, crypto with hand-written assembly, an
//! interpreter, a database, a server under load) under every probe kind, over every function
//! of the program and of every library it loads, live, rewritten and attached to. Each run's
//! output and exit status must be the native run's, its record must read back, and the
//! oracles (gdb's system calls from the entry point, perf uprobes' call and block counts) must
//! equal lopi's. The harness installs what it needs (apt-get, as root).
mod common;

use common::*;
use std::process::Command;

#[test]
fn corpus_ci_subset() {
    let out = fresh_dir("corpus-ci");
    let status = Command::new("python3")
        .arg(workspace_root().join("bench/corpus/corpus.py"))
        .args(["--ci", "--out"])
        .arg(&out)
        .arg("--work")
        .arg(out.join("work"))
        .env("LOPI", lopi_bin())
        .status()
        .expect("running python3 bench/corpus/corpus.py (python3 is needed by the corpus harness)");
    let table = std::fs::read_to_string(out.join("corpus-ci.md")).unwrap_or_default();
    assert!(status.success(), "the corpus's CI subset failed ({status}); its table (failed runs' work directories kept in {}):\n{table}", out.join("work").display());
    cleanup(&out);
}
