//! Building the programs the tests run: compiler commands, C sources written by a test,
//! lopi's multiprocessor benchmark, and the real programs of tests/real/prepare.sh.

use super::{render_cmd, run, workspace_root};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Run a compiler command; Err carries the command line and diagnostics.
pub fn compile(cmd: &mut Command) -> Result<(), String> {
    let line = render_cmd(cmd);
    let out =
        run(cmd, Duration::from_secs(300)).map_err(|e| format!("cannot run `{line}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "compile failed ({}): {line}\n{}",
            out.describe_status(),
            out.stderr_str()
        ));
    }
    Ok(())
}

/// The C program `source`, written to `dir/NAME.c` and built with `cc FLAGS` into `dir/NAME`.
pub fn build_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("writing a fixture's source");
    let prog = dir.join(name);
    compile(Command::new("cc").args(flags).arg("-o").arg(&prog).arg(&src)).unwrap_or_else(|e| panic!("building {name}: {e}"));
    prog
}

/// lopi's built-in thesis benchmark (`crates/lopi-cli/src/mpbench.c`), built into `dir`.
pub fn build_mpbench(dir: &Path) -> PathBuf {
    let prog = dir.join("mpbench");
    let src = workspace_root().join("crates/lopi-cli/src/mpbench.c");
    compile(Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&prog).arg(&src)).expect("building mpbench");
    prog
}

/// `tests/real/prepare.sh`'s list of built and downloaded programs (it runs once per work
/// directory and is quick when done).
pub fn real_paths() -> &'static BTreeMap<String, PathBuf> {
    static PATHS: std::sync::OnceLock<BTreeMap<String, PathBuf>> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| {
        let root = workspace_root();
        let work = root.join("work-real");
        let out = run(Command::new("bash").arg(root.join("tests/real/prepare.sh")).arg(&work), Duration::from_secs(3600)).expect("prepare.sh");
        assert!(out.status.success(), "tests/real/prepare.sh failed:\n{}\n{}", out.stdout_str(), out.stderr_str());
        std::fs::read_to_string(work.join("paths.env"))
            .expect("paths.env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
            .collect()
    })
}

/// The path `prepare.sh` gave `key`.
pub fn real_program(key: &str) -> PathBuf {
    real_paths().get(key).unwrap_or_else(|| panic!("prepare.sh did not name {key}")).clone()
}
