//! What the snapshot tests of `lopi-patch` (plans) and `lopi-image` (images) share: the
//! fixtures they build at test time with the system's compiler, addresses written relative to
//! their function, and the comparison with a checked-in snapshot file that prints a unified
//! diff on a difference. A dev-dependency only; it knows no lopi type, so that the crates
//! under test can use it without a second copy of themselves.
//!
//! A snapshot depends on the compiler's code: its header records the `--version` line of each
//! tool it was made with, and a machine with other tools compares nothing and says so.
//! `LOPI_UPDATE_SNAPSHOTS=1` writes the snapshots anew.
mod diff;

pub use diff::unified;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that makes [`Snapshot::check`] write instead of compare.
pub const UPDATE_ENV: &str = "LOPI_UPDATE_SNAPSHOTS";

/// The repository's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Builds `fixtures/SOURCE` into `dir/NAME` with `cc` (`c++` for a `.cpp` file), the flags of
/// its `lopi-cflags` and `lopi-ldflags` directives, and `flags`.
pub fn build(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let path = fixtures_dir().join(source);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let directive = |key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix("//")?.trim().strip_prefix(key)?.strip_prefix(':'))
            .flat_map(|v| v.split_whitespace().map(String::from).collect::<Vec<_>>())
            .collect()
    };
    let out = dir.join(name);
    let mut cmd = Command::new(compiler_of(source));
    cmd.args(flags).args(directive("lopi-cflags")).arg("-o").arg(&out).arg(&path).args(directive("lopi-ldflags"));
    let result = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(result.status.success(), "{cmd:?} failed ({}):\n{}", result.status, String::from_utf8_lossy(&result.stderr));
    out
}

/// The compiler [`build`] uses for `source`.
pub fn compiler_of(source: &str) -> &'static str {
    if source.ends_with(".cpp") {
        "c++"
    } else {
        "cc"
    }
}

/// The first line `TOOL --version` prints (`cc (Debian 12.2.0-14+deb12u1) 12.2.0`).
pub fn version_line(tool: &str) -> String {
    let out = Command::new(tool).arg("--version").output().unwrap_or_else(|e| panic!("running {tool} --version: {e}"));
    String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().trim().to_string()
}

/// The C library the compiler links with (`libc.so.6`); a snapshot of it depends on
/// [`version_line`]`("ldd")`, not on the compiler.
pub fn system_libc() -> PathBuf {
    let out = Command::new("cc").arg("-print-file-name=libc.so.6").output().unwrap_or_else(|e| panic!("running cc -print-file-name: {e}"));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Addresses as `+0xOFF` from the start of the function that holds them.
pub struct Places {
    /// Function starts, ascending.
    starts: Vec<u64>,
}

impl Places {
    /// `starts`: the functions' addresses, ascending.
    pub fn new(starts: Vec<u64>) -> Places {
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "function starts out of order");
        Places { starts }
    }

    /// The index in `starts` of the last function that starts at or before `addr` (code after
    /// a function's end, its padding or a part placed after it, counts as its own), and the
    /// offset from its start.
    pub fn owner(&self, addr: u64) -> Option<(usize, u64)> {
        let index = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        Some((index, addr - self.starts[index]))
    }

    /// `addr` relative to function `index`: `+0x1c`, or `-0x8` before its start.
    pub fn rel(&self, index: usize, addr: u64) -> String {
        let start = self.starts[index];
        match addr.checked_sub(start) {
            Some(off) => format!("+{off:#x}"),
            None => format!("-{:#x}", start - addr),
        }
    }
}

/// One snapshot file, `DIR/NAME.txt`.
pub struct Snapshot<'a> {
    pub dir: &'a Path,
    pub name: &'a str,
    /// What it shows, its first line.
    pub title: &'a str,
    /// The `--version` lines of the tools whose output it depends on (see [`version_line`]).
    pub made_with: Vec<String>,
}

const MADE_WITH: &str = "# made with: ";

impl Snapshot<'_> {
    /// Compares `body` with the file: panics with a unified diff when they differ, or when the
    /// file is missing. Compares nothing, and says so on stderr, when the file was made with
    /// other tools. With [`UPDATE_ENV`] set, writes the file instead.
    pub fn check(&self, body: &str) {
        let path = self.dir.join(format!("{}.txt", self.name));
        let mut text = format!("# {}\n", self.title);
        for line in &self.made_with {
            text.push_str(&format!("{MADE_WITH}{line}\n"));
        }
        text.push_str(&format!("# {UPDATE_ENV}=1 cargo test rewrites this file\n\n{body}"));
        let old = std::fs::read_to_string(&path).ok();
        if std::env::var_os(UPDATE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
            if old.as_deref() != Some(text.as_str()) {
                std::fs::create_dir_all(self.dir).unwrap_or_else(|e| panic!("creating {}: {e}", self.dir.display()));
                std::fs::write(&path, &text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
                say(&format!("snapshot {}: written", path.display()));
            }
            return;
        }
        let Some(old) = old else {
            panic!("no snapshot {}: {UPDATE_ENV}=1 cargo test makes it", path.display());
        };
        let old_tools: Vec<&str> = old.lines().filter_map(|l| l.strip_prefix(MADE_WITH)).collect();
        if old_tools != self.made_with {
            say(&format!(
                "snapshot {}: not compared, made with `{}`, this machine has `{}` ({UPDATE_ENV}=1 makes it anew)",
                path.display(),
                old_tools.join("`, `"),
                self.made_with.join("`, `")
            ));
            return;
        }
        if old != text {
            panic!(
                "snapshot {} differs from what the code makes now ({UPDATE_ENV}=1 cargo test rewrites it if the change is meant):\n{}",
                path.display(),
                unified(&old, &text, "snapshot", "now")
            );
        }
    }
}

/// A line on the test's stderr that the test harness does not capture: a skipped comparison
/// must not pass in silence.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
