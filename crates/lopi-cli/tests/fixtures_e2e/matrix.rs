//! The matrix: each fixture built in every selected configuration, run, rewritten (program,
//! library or both) or run under `lopi run`, run again and compared with the original run,
//! and its counts checked against the fixture's directives.

use super::case::Case;
use super::counts::check_counts;
use super::{program_compile, selected_configs, Config};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Which modules are rewritten (programs without a library: always Main).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Main,
    Lib,
    Both,
    /// The original program under `lopi run` (probes spliced in at its entry point).
    Live,
}

impl Variant {
    fn main(self) -> bool {
        self != Variant::Lib
    }
    fn lib(self) -> bool {
        matches!(self, Variant::Lib | Variant::Both)
    }
    fn label(self) -> &'static str {
        match self {
            Variant::Main => "rewrite-main",
            Variant::Lib => "rewrite-lib",
            Variant::Both => "rewrite-main+lib",
            Variant::Live => "live-run",
        }
    }
}

/// Build, run, rewrite, run again, compare, report: one configuration of
/// one fixture (all variants for library fixtures: the builds are shared).
/// Returns one message per failing variant.
fn run_case(fx: &Fixture, cfg: Config) -> Vec<String> {
    let variants: &[Variant] = if fx.lib.is_some() {
        &[Variant::Main, Variant::Lib, Variant::Both, Variant::Live]
    } else {
        &[Variant::Main, Variant::Live]
    };
    let mut case = Case::new(format!("{} {}", fx.file, cfg.name()));
    let dir = case.dir.clone();
    let built = match build_and_run_original(&mut case, fx, cfg) {
        Ok(b) => b,
        Err(e) => return vec![e],
    };
    let mut failures = Vec::new();
    // Rewrite each module once; a failed rewrite fails every variant using it.
    let rw = dir.join("rw").join("prog");
    let lib_rw_dir = dir.join("lib_rw");
    let mut main_rw: Option<Result<(), String>> = None;
    let mut lib_rw: Option<Result<(), String>> = None;
    for &variant in variants {
        let uses_lib = variant.lib() && fx.lib.is_some();
        if variant.main() && variant != Variant::Live && main_rw.is_none() {
            main_rw = Some(case.rewrite(&built.orig, &rw, &[]));
        }
        if uses_lib && lib_rw.is_none() {
            lib_rw = Some(case.rewrite(
                &built.lib_orig_dir.join("libfix.so"),
                &lib_rw_dir.join("libfix.so"),
                &[],
            ));
        }
        let label = if fx.lib.is_some() {
            format!("{} {} {}", fx.file, cfg.name(), variant.label())
        } else {
            case.label.clone()
        };
        let rewrite_err = [(variant.main() && variant != Variant::Live, &main_rw), (uses_lib, &lib_rw)]
            .into_iter()
            .find_map(|(used, r)| {
                if used {
                    r.as_ref().and_then(|r| r.as_ref().err())
                } else {
                    None
                }
            });
        if let Some(e) = rewrite_err {
            failures.push(e.replacen(&format!("[{}]", case.label), &format!("[{label}]"), 1));
            continue;
        }
        let mut vcase = Case {
            label,
            dir: dir.clone(),
            repro: case.repro.clone(),
        };
        let prog = if variant.main() {
            rw.clone()
        } else {
            built.orig.clone()
        };
        let lib_dir = if variant.lib() {
            lib_rw_dir.clone()
        } else {
            built.lib_orig_dir.clone()
        };
        if let Err(e) = check_variant(&mut vcase, fx, variant, &built, &prog, &lib_dir) {
            failures.push(e);
        }
    }
    if failures.is_empty() {
        cleanup(&dir);
    }
    failures
}

struct Built {
    orig: PathBuf,
    lib_orig_dir: PathBuf,
    run_dir: PathBuf,
    want: Output,
}

fn build_and_run_original(case: &mut Case, fx: &Fixture, cfg: Config) -> Result<Built, String> {
    let dir = case.dir.clone();
    let lib_orig_dir = dir.join("lib_orig");
    if let Some(lib) = &fx.lib {
        std::fs::create_dir_all(&lib_orig_dir).unwrap();
        let lib_fx = Fixture::load(lib);
        let mut cmd = Command::new(lib_fx.compiler());
        cmd.args(cfg.lib_flags())
            .args(&lib_fx.cflags)
            .arg(&lib_fx.path)
            .arg("-o")
            .arg(lib_orig_dir.join("libfix.so"))
            .args(&lib_fx.ldflags);
        case.compile(&mut cmd)?;
    }
    let orig = dir.join("orig").join("prog");
    let mut cmd = program_compile(fx, cfg, &orig);
    if fx.lib.is_some() && !fx.dlopen {
        cmd.arg(format!("-L{}", lib_orig_dir.display()))
            .arg("-lfix");
    }
    cmd.args(&fx.ldflags);
    case.compile(&mut cmd)?;

    let run_dir = dir.join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let mut cmd = Command::new(&orig);
    cmd.current_dir(&run_dir).env_remove("LOPI_OUTPUT");
    if fx.lib.is_some() {
        cmd.env("LD_LIBRARY_PATH", &lib_orig_dir);
    }
    let want = case.run(&mut cmd, "original program")?;
    let status_ok = match (fx.exit, fx.signal) {
        (Some(c), _) => want.status.code() == Some(c),
        (None, Some(s)) => std::os::unix::process::ExitStatusExt::signal(&want.status) == Some(s),
        (None, None) => want.status.success(),
    };
    if !status_ok {
        return Err(case.fail(format!(
            "fixture bug: the ORIGINAL program ended with {} (expected exit {:?} / signal {:?})\nstdout:\n{}\nstderr:\n{}",
            want.describe_status(),
            fx.exit,
            fx.signal,
            want.stdout_str(),
            want.stderr_str()
        )));
    }
    Ok(Built {
        orig,
        lib_orig_dir,
        run_dir,
        want,
    })
}

/// Run the rewritten setup of one variant, compare with the original run
/// and check the counts.
fn check_variant(
    case: &mut Case,
    fx: &Fixture,
    variant: Variant,
    built: &Built,
    prog: &Path,
    lib_dir: &Path,
) -> Result<(), String> {
    let data = case.dir.join(format!("data-{}.lopi", variant.label()));
    let mut cmd = if variant == Variant::Live {
        let mut c = Command::new(lopi_bin());
        c.args(["run", "-q", "--"]).arg(&built.orig);
        c
    } else {
        Command::new(prog)
    };
    cmd.current_dir(&built.run_dir).env("LOPI_OUTPUT", &data);
    if fx.lib.is_some() {
        cmd.env("LD_LIBRARY_PATH", lib_dir);
    }
    let got = case.run(&mut cmd, "rewritten program")?;
    let want = &built.want;

    let mut problems = Vec::new();
    if got.status != want.status || got.timed_out {
        problems.push(format!(
            "status differs: original {}, rewritten {}",
            want.describe_status(),
            got.describe_status()
        ));
    }
    if got.stdout != want.stdout {
        problems.push(format!(
            "stdout differs:\n{}",
            diff(
                "original",
                &want.stdout_str(),
                "rewritten",
                &got.stdout_str()
            )
        ));
    }
    if got.stderr != want.stderr {
        problems.push(format!(
            "stderr differs:\n{}",
            diff(
                "original",
                &want.stderr_str(),
                "rewritten",
                &got.stderr_str()
            )
        ));
    }
    if !problems.is_empty() {
        return Err(case.fail(problems.join("\n")));
    }

    // lopi info on the rewritten inputs (coverage_percent etc.)
    let main_info = if variant.main() {
        Some(case.info(&built.orig)?)
    } else {
        None
    };
    let lib_info = if variant.lib() && fx.lib.is_some() {
        Some(case.info(&built.lib_orig_dir.join("libfix.so"))?)
    } else {
        None
    };

    let entries = case.report(&data)?;
    let expect = &fx.expect;
    check_counts(
        &mut problems,
        &entries,
        expect,
        variant.main(),
        false,
        main_info.as_ref(),
        &fx.may_skip,
    );
    if fx.lib.is_some() && variant != Variant::Live {
        check_counts(
            &mut problems,
            &entries,
            &fx.expect_lib,
            variant.lib(),
            true,
            lib_info.as_ref(),
            &fx.may_skip,
        );
    }
    if !problems.is_empty() {
        return Err(case.fail(format!("wrong counts:\n  {}", problems.join("\n  "))));
    }
    Ok(())
}

/// Run every selected configuration of a fixture, in parallel, and fail
/// with all problems at once.
pub fn run_fixture(file: &str) {
    let fx = Fixture::load(file);
    assert!(!fx.shared, "{file} is a library source, not a program");
    assert!(
        !fx.expect.is_empty() || !fx.expect_lib.is_empty(),
        "{file}: no lopi-expect line"
    );
    let jobs = selected_configs();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::<String>::new());
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&cfg) = jobs.get(i) else { break };
                let f = run_case(&fx, cfg);
                failures.lock().unwrap().extend(f);
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    let per_cfg = if fx.lib.is_some() { 4 } else { 2 };
    let total = jobs.len() * per_cfg;
    eprintln!("{file}: {}/{total} cases passed", total - failures.len());
    if !failures.is_empty() {
        let names: Vec<&str> = failures.iter().filter_map(|f| f.lines().next()).collect();
        panic!(
            "{file}: {} of {total} cases failed:\n{}\n\n{}",
            failures.len(),
            names.join("\n"),
            failures.join("\n")
        );
    }
}
