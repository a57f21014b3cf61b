//! End-to-end tests: build the C/C++ fixtures of `fixtures/` across a
//! matrix of compiler configurations, rewrite them with `lopi rewrite`,
//! check that the rewritten program behaves exactly like the original
//! (stdout, stderr, exit code or terminating signal) and that
//! `lopi report --format json` shows the entry counts each fixture states in
//! its `// lopi-expect:` line.  Also checks error handling of
//! `lopi rewrite` on bad inputs.
//!
//! Matrix: {-O0, -O2, -O3} x {-fPIE -pie, -fno-pie -no-pie} x
//! {-fcf-protection=full, -fcf-protection=none}.
//!
//! Environment knobs (all optional):
//!   LOPI_BIN=path          lopi binary to test (default: the one cargo built)
//!   LOPI_E2E_FILTER=str    only configurations whose name contains `str`
//!                          (e.g. "O2-pie-cet", "nopie", "O0")
//!   LOPI_KEEP_TMP=1        keep temp dirs of passing configurations too
//!   LOPI_TEST_TIMEOUT=secs watchdog for each process (default 120)
//!
//! Directives understood in fixture sources (one per line, in comments):
//!   lopi-expect: name=count ...      counts of the program's functions
//!   lopi-expect-lib: name=count ...  counts of libfix.so's functions
//!   lopi-exit: N | lopi-signal: N    how the original terminates
//!   lopi-cflags: ... / lopi-ldflags: ...
//!   lopi-lib: x.c | lopi-dlopen: x.c build x.c as libfix.so (linked / dlopened)
//!   lopi-kind: shared                library source, not a program
//!   lopi-may-skip: name ...          may be skipped if `lopi info` gives a reason
//!
//! Here: the configurations, the list of fixture tests and the helpers the other tests
//! share. In fixtures_e2e/: matrix.rs runs a fixture over the matrix (case.rs is one case
//! with its repro, counts.rs the count checker), behaviour.rs checks further behaviour of a
//! rewritten program (data files, function filters), bad_inputs.rs error handling.

mod common;

#[path = "fixtures_e2e/bad_inputs.rs"]
mod bad_inputs;
#[path = "fixtures_e2e/behaviour.rs"]
mod behaviour;
#[path = "fixtures_e2e/case.rs"]
mod case;
#[path = "fixtures_e2e/counts.rs"]
mod counts;
#[path = "fixtures_e2e/matrix.rs"]
mod matrix;

use case::Case;
use common::*;
use matrix::run_fixture;
use std::path::{Path, PathBuf};
use std::process::Command;

// ---------------------------------------------------------------------------
// Configurations
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Config {
    opt: &'static str,
    pie: bool,
    cet: bool,
}

impl Config {
    fn name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.opt.trim_start_matches('-'),
            if self.pie { "pie" } else { "nopie" },
            if self.cet { "cet" } else { "nocet" }
        )
    }

    /// Flags for the program (compile + link).
    fn prog_flags(&self) -> Vec<&'static str> {
        let mut v = vec![self.opt];
        if self.pie {
            v.extend(["-fPIE", "-pie"]);
        } else {
            v.extend(["-fno-pie", "-no-pie"]);
        }
        v.push(if self.cet {
            "-fcf-protection=full"
        } else {
            "-fcf-protection=none"
        });
        v
    }

    /// Flags for a shared library (always PIC).
    fn lib_flags(&self) -> Vec<&'static str> {
        vec![
            self.opt,
            "-fPIC",
            "-shared",
            if self.cet {
                "-fcf-protection=full"
            } else {
                "-fcf-protection=none"
            },
        ]
    }
}

fn all_configs() -> Vec<Config> {
    let mut v = Vec::new();
    for opt in ["-O0", "-O2", "-O3"] {
        for pie in [true, false] {
            for cet in [false, true] {
                v.push(Config { opt, pie, cet });
            }
        }
    }
    v
}

fn selected_configs() -> Vec<Config> {
    let filter = std::env::var("LOPI_E2E_FILTER").unwrap_or_default();
    all_configs()
        .into_iter()
        .filter(|c| c.name().contains(&filter))
        .collect()
}

// ---------------------------------------------------------------------------
// The fixtures
// ---------------------------------------------------------------------------

macro_rules! fixture_tests {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $name() {
                run_fixture($file);
            }
        )*
        const LISTED_FIXTURES: &[&str] = &[$($file),*];
    };
}

fixture_tests! {
    fixture_recursion => "recursion.c",
    fixture_tailcall => "tailcall.c",
    fixture_call_first => "call_first.c",
    fixture_jumptable => "jumptable.c",
    fixture_setjmp => "setjmp.c",
    fixture_signals => "signals.c",
    fixture_exceptions => "exceptions.cpp",
    fixture_ctors => "ctors.cpp",
    fixture_threads => "threads.c",
    fixture_fork => "fork.c",
    fixture_exec_self => "exec_self.c",
    fixture_exit_noatexit => "exit_noatexit.c",
    fixture_sigkill => "sigkill.c",
    fixture_crash_segv => "crash_segv.c",
    fixture_crash_abort => "crash_abort.c",
    fixture_tiny => "tiny.c",
    fixture_tiny_packed => "tiny_packed.c",
    fixture_entry_loop => "entry_loop.c",
    fixture_regs_preserved => "regs_preserved.c",
    fixture_threads_signals => "threads_signals.c",
    fixture_libfix_main => "libfix_main.c",
    fixture_dlopen_main => "dlopen_main.c",
    fixture_own_address => "own_address.c",
    fixture_legacy_init => "legacy_init.c",
}

/// Every program fixture in fixtures/ must have a test above.
#[test]
fn every_fixture_has_a_test() {
    let mut missing = Vec::new();
    for f in all_fixture_files() {
        let fx = Fixture::load(&f);
        if fx.shared {
            continue;
        }
        assert!(
            !fx.expect.is_empty(),
            "{f}: program fixture without a lopi-expect line"
        );
        if !LISTED_FIXTURES.contains(&f.as_str()) {
            missing.push(f);
        }
    }
    assert!(
        missing.is_empty(),
        "fixtures without a test in fixtures_e2e.rs: {missing:?}"
    );
}

// ---------------------------------------------------------------------------
// Building and rewriting one fixture
// ---------------------------------------------------------------------------

/// The compiler command that builds fixture program `fx` with `cfg` into `out` (whose
/// directory it creates); callers add link flags.
fn program_compile(fx: &Fixture, cfg: Config, out: &Path) -> Command {
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mut cmd = Command::new(fx.compiler());
    cmd.args(cfg.prog_flags()).args(&fx.cflags).arg(&fx.path).arg("-o").arg(out);
    cmd
}

/// Build one fixture with one configuration and rewrite it; returns
/// (case, original, rewritten).
fn build_and_rewrite(file: &str, cfg: Config, extra: &[&str]) -> (Case, PathBuf, PathBuf) {
    let fx = Fixture::load(file);
    let mut case = Case::new(format!("{file} {} {}", cfg.name(), extra.join(" ")));
    let orig = case.dir.join("orig").join("prog");
    let mut cmd = program_compile(&fx, cfg, &orig);
    cmd.args(&fx.ldflags);
    case.compile(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
    let rw = case.dir.join("rw").join("prog");
    case.rewrite(&orig, &rw, extra)
        .unwrap_or_else(|e| panic!("{e}"));
    (case, orig, rw)
}

const O2_PIE: Config = Config {
    opt: "-O2",
    pie: true,
    cet: false,
};
