//! Shared helpers for the lopi CLI end-to-end tests, one job a module: where things are
//! (here), fixture directives (`fixture`), running processes with a watchdog (`process`),
//! building programs (`build`), a small line diff for failure messages (`diff`), reading
//! lopi's reports (`reports`), independent oracles (`oracles`), other tools (`tools`) and a
//! real OpenTelemetry Collector (`otel`).
//! Each test binary uses what it needs of them: every helper is re-exported here, so tests
//! call `common::xyz`.
#![allow(dead_code)]

mod build;
mod diff;
mod fixture;
mod oracles;
mod otel;
mod process;
mod reports;
mod strace;
pub mod tools;

// Each test binary uses what it needs of the helpers.
#[allow(unused_imports)]
pub use build::*;
#[allow(unused_imports)]
pub use diff::*;
#[allow(unused_imports)]
pub use fixture::*;
#[allow(unused_imports)]
pub use oracles::*;
#[allow(unused_imports)]
pub use otel::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use reports::*;
#[allow(unused_imports)]
pub use strace::*;
#[allow(unused_imports)]
pub use tools::{require, require_file, require_package};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------------------
// Locations
// ---------------------------------------------------------------------------

/// Path of the `lopi` binary under test. `LOPI_BIN` (run time) overrides;
/// otherwise the binary cargo built for this test (`CARGO_BIN_EXE_lopi`);
/// otherwise target/{release,debug}/lopi of the workspace.
pub fn lopi_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOPI_BIN") {
        return PathBuf::from(p);
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_lopi") {
        return PathBuf::from(p);
    }
    let ws = workspace_root();
    for profile in ["release", "debug"] {
        let p = ws.join("target").join(profile).join("lopi");
        if p.is_file() {
            return p;
        }
    }
    panic!("lopi binary not found (set LOPI_BIN or build the `lopi` bin target)");
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

pub fn fixtures_dir() -> PathBuf {
    workspace_root().join("fixtures")
}

/// A fresh, unique directory under cargo's per-test temp dir.
pub fn fresh_dir(label: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let safe: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fixtures_e2e")
        .join(format!("{}-{}-{}", std::process::id(), n, safe));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Remove a temp dir unless the user asked to keep them (LOPI_KEEP_TMP).
pub fn cleanup(dir: &Path) {
    if std::env::var_os("LOPI_KEEP_TMP").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
