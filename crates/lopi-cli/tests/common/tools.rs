//! Tools the tests run besides the compiler (oracles such as strace and valgrind, programs
//! such as pigz and python3.11, readers such as gdb and `go tool pprof`): found on PATH, or
//! installed from Debian's packages with apt-get when the tests run as root, as
//! tests/real/prepare.sh installs what the real-program suites build with. One install at a
//! time across test threads and test binaries (`flock` on one lock file), dpkg's own lock
//! waited for, the package lists updated only when an install needs them. A test that cannot
//! have its tool fails and says how to install it: it is never skipped.
//!
//! Std only: lopi-trace's unit tests include this file too (`#[path]`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// `program`'s path: from PATH, else from Debian's `package`, installed now.
pub fn require(program: &str, package: &str) -> PathBuf {
    if let Some(path) = on_path(program) {
        return path;
    }
    install(package, &format!("{program} is not installed"));
    on_path(program).unwrap_or_else(|| panic!("{program} is still not on PATH after installing Debian's {package}"))
}

/// The file `path` (Debian's own program, not another on PATH: python3.11 rather than a
/// pyenv shim), from Debian's `package`, installed now if it is not there.
pub fn require_file(path: &str, package: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if !path.is_file() {
        install(package, &format!("{} is not installed", path.display()));
        assert!(path.is_file(), "{} is still not there after installing Debian's {package}", path.display());
    }
    path
}

/// Debian's `package` (one that is not a program, such as libc6-dbg), installed now if it is
/// not yet.
pub fn require_package(package: &str) {
    if !installed(package) {
        install(package, &format!("{package} is not installed"));
    }
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Installs `package` under the lock; panics with `why` and what to do when it cannot.
fn install(package: &str, why: &str) {
    let how = format!("apt-get install {package} (as root; the tests install it themselves when they run as root)");
    if !is_root() {
        panic!("{why}: {how}");
    }
    // Checked again under the lock: another test may have installed it meanwhile.
    const SCRIPT: &str = r#"dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' && exit 0
apt="apt-get -q -y -o DPkg::Lock::Timeout=600"
$apt install --no-install-recommends "$1" || { $apt update && $apt install --no-install-recommends "$1"; }"#;
    let lock = std::env::temp_dir().join("lopi-tests-apt.lock");
    eprintln!("note: {why}: installing Debian's {package} (apt-get)");
    let out = Command::new("flock")
        .arg(&lock)
        .args(["sh", "-c", SCRIPT, "sh", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|e| panic!("{why}, and flock or apt-get cannot run ({e}): {how}"));
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
        panic!("{why}, and installing it failed ({}):\n{}\n{how}", out.status, tail.join("\n"));
    }
}
