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

mod common;

use common::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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
// One configuration of one fixture
// ---------------------------------------------------------------------------

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

/// Collects the commands run for one case, so a failure can print a repro.
struct Case {
    label: String,
    dir: PathBuf,
    repro: Vec<String>,
}

impl Case {
    /// Runs the rewritten program `rw` in `cwd` (LOPI_OUTPUT = `data`, or unset) and
    /// panics with the case's details unless it succeeds.
    fn run_rewritten_ok(&mut self, rw: &Path, cwd: &Path, data: Option<&Path>) -> Output {
        let mut cmd = Command::new(rw);
        cmd.current_dir(cwd);
        match data {
            Some(d) => cmd.env("LOPI_OUTPUT", d),
            None => cmd.env_remove("LOPI_OUTPUT"),
        };
        let out = self.run(&mut cmd, "rewritten program").unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success(), "{}", self.fail(format!("rewritten program: {}", out.describe_status())));
        out
    }

    fn new(label: String) -> Case {
        let dir = fresh_dir(&label);
        Case {
            label,
            dir,
            repro: Vec::new(),
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> String {
        let mut s = format!("=== [{}] {}\n", self.label, what.to_string().trim_end());
        let _ = writeln!(s, "  temp dir kept: {}", self.dir.display());
        let _ = writeln!(s, "  repro:");
        for r in &self.repro {
            let _ = writeln!(s, "    {r}");
        }
        s
    }

    fn compile(&mut self, cmd: &mut Command) -> Result<(), String> {
        self.repro.push(render_cmd(cmd));
        compile(cmd).map_err(|e| self.fail(e))
    }

    fn run(&mut self, cmd: &mut Command, what: &str) -> Result<Output, String> {
        self.repro.push(render_cmd(cmd));
        run(cmd, default_timeout()).map_err(|e| self.fail(format!("cannot run {what}: {e}")))
    }

    /// `lopi rewrite IN -o OUT` must succeed and leave IN unchanged.
    fn rewrite(&mut self, input: &Path, output: &Path, extra: &[&str]) -> Result<(), String> {
        let before = std::fs::read(input)
            .map_err(|e| self.fail(format!("read {}: {e}", input.display())))?;
        if let Some(p) = output.parent() {
            std::fs::create_dir_all(p).unwrap();
        }
        let mut cmd = Command::new(lopi_bin());
        cmd.arg("rewrite")
            .arg(input)
            .arg("-o")
            .arg(output)
            .args(extra);
        let out = self.run(&mut cmd, "lopi rewrite")?;
        if !out.status.success() {
            return Err(self.fail(format!(
                "lopi rewrite {} failed: {}\nstderr:\n{}",
                input.display(),
                out.describe_status(),
                out.stderr_str()
            )));
        }
        if out.stderr_str().contains("panicked") {
            return Err(self.fail(format!(
                "lopi rewrite printed a panic:\n{}",
                out.stderr_str()
            )));
        }
        let after = std::fs::read(input)
            .map_err(|e| self.fail(format!("read {}: {e}", input.display())))?;
        if before != after {
            return Err(self.fail(format!(
                "lopi rewrite modified its input {}",
                input.display()
            )));
        }
        if !output.is_file() {
            return Err(self.fail(format!(
                "lopi rewrite exited 0 but wrote no {}",
                output.display()
            )));
        }
        Ok(())
    }

    /// Runs `lopi SUB PATH --format json`; its stdout, or a failure.
    fn lopi_json(&mut self, sub: &str, path: &Path) -> Result<String, String> {
        let mut cmd = Command::new(lopi_bin());
        cmd.arg(sub).arg(path).args(["--format", "json"]);
        let out = self.run(&mut cmd, &format!("lopi {sub}"))?;
        if !out.status.success() {
            return Err(self.fail(format!(
                "lopi {sub} failed: {}\nstderr:\n{}",
                out.describe_status(),
                out.stderr_str()
            )));
        }
        Ok(out.stdout_str())
    }

    fn report(&mut self, data: &Path) -> Result<Vec<ReportEntry>, String> {
        if !data.exists() {
            return Err(self.fail(format!(
                "rewritten program wrote no data file {}",
                data.display()
            )));
        }
        let stdout = self.lopi_json("report", data)?;
        let entries = parse_report(&stdout)
            .map_err(|e| self.fail(format!("bad report JSON: {e}\n{}", truncate(&stdout, 4000))))?;
        for w in entries.windows(2) {
            if w[0].calls < w[1].calls {
                return Err(self.fail(format!(
                    "report not sorted by calls desc: {} ({}) before {} ({})",
                    w[0].name, w[0].calls, w[1].name, w[1].calls
                )));
            }
        }
        Ok(entries)
    }

    fn info(&mut self, module: &Path) -> Result<Info, String> {
        let stdout = self.lopi_json("info", module)?;
        let info = parse_info(&stdout)
            .map_err(|e| self.fail(format!("bad info JSON: {e}\n{}", truncate(&stdout, 4000))))?;
        check_info_summary(&info).map_err(|e| self.fail(e))?;
        Ok(info)
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n... ({} bytes total)", &s[..end], s.len())
    }
}

/// Compare expected counts with the report. `present`: the module is
/// rewritten, so each name must appear with exactly the expected count;
/// otherwise the names must not be counted at all.
fn check_counts(
    problems: &mut Vec<String>,
    entries: &[ReportEntry],
    expect: &[(String, u64)],
    present: bool,
    lib_module: bool,
    info: Option<&Info>,
    may_skip: &[String],
) {
    for (name, want) in expect {
        let hits: Vec<&ReportEntry> = entries.iter().filter(|e| &e.name == name).collect();
        let got: u64 = hits.iter().map(|e| e.calls).sum();
        if !present {
            if got != 0 {
                problems.push(format!(
                    "{name}: module not rewritten, yet the report counts {got} calls"
                ));
            }
            continue;
        }
        if hits.is_empty() {
            let status = info.and_then(|i| i.functions.get(name));
            let why = status
                .map(|(st, d)| format!(" (lopi info: status={st} {d})"))
                .unwrap_or_else(|| " (not listed by lopi info either)".into());
            let msg = format!("{name}: missing from report, expected {want} calls{why}");
            if may_skip.contains(name) && status.is_some_and(|(st, _)| st == "skipped") {
                eprintln!("note: {msg} (allowed by lopi-may-skip)");
            } else {
                problems.push(msg);
            }
            continue;
        }
        if got != *want {
            let detail: Vec<String> = hits
                .iter()
                .map(|e| format!("{}@{} in {}: {}", e.name, e.addr, e.module, e.calls))
                .collect();
            problems.push(format!(
                "{name}: expected {want} calls, report says {got} [{}]",
                detail.join("; ")
            ));
        }
        if lib_module {
            for e in &hits {
                if !e.module.ends_with("libfix.so") {
                    problems.push(format!(
                        "{name}: expected module .../libfix.so, report says {:?}",
                        e.module
                    ));
                }
            }
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
    let expect = if variant == Variant::Live { fx.expect_live.as_ref().unwrap_or(&fx.expect) } else { &fx.expect };
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
fn run_fixture(file: &str) {
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
// Further behaviour of the rewritten program
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

fn count_of(entries: &[ReportEntry], name: &str) -> Option<u64> {
    let hits: Vec<_> = entries.iter().filter(|e| e.name == name).collect();
    if hits.is_empty() {
        None
    } else {
        Some(hits.iter().map(|e| e.calls).sum())
    }
}

const O2_PIE: Config = Config {
    opt: "-O2",
    pie: true,
    cet: false,
};

/// Two runs with the same LOPI_OUTPUT: records are appended and summed.
#[test]
fn data_file_appends_across_runs() {
    let (mut case, _orig, rw) = build_and_rewrite("recursion.c", O2_PIE, &[]);
    let data = case.dir.join("shared.lopi");
    for _ in 0..2 {
        let dir = case.dir.clone();
        case.run_rewritten_ok(&rw, &dir, Some(&data));
    }
    let entries = case.report(&data).unwrap_or_else(|e| panic!("{e}"));
    for (name, want) in [("fib", 2 * 21891), ("add", 2 * 10945), ("main", 2)] {
        assert_eq!(
            count_of(&entries, name),
            Some(want),
            "{}",
            case.fail(format!("{name} after two runs"))
        );
    }
    cleanup(&case.dir);
}

/// Without LOPI_OUTPUT the data goes to ./<progname>.<pid>.lopi.
#[test]
fn default_data_file_name() {
    let (mut case, _orig, rw) = build_and_rewrite("recursion.c", O2_PIE, &[]);
    let cwd = case.dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = case.run_rewritten_ok(&rw, &cwd, None);
    let expected = cwd.join(format!("prog.{}.lopi", out.pid));
    let listing: Vec<String> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        expected.is_file(),
        "{}",
        case.fail(format!(
            "expected data file {}, cwd has {listing:?}",
            expected.display()
        ))
    );
    let entries = case.report(&expected).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        count_of(&entries, "fib"),
        Some(21891),
        "{}",
        case.fail("fib count")
    );
    cleanup(&case.dir);
}

/// --functions / --exclude select what gets probed.
#[test]
fn function_filters() {
    let (mut case, _orig, rw) = build_and_rewrite(
        "tailcall.c",
        O2_PIE,
        &[
            "--functions",
            "is_*",
            "--functions",
            "tail_a",
            "--exclude",
            "is_odd",
        ],
    );
    let data = case.dir.join("data.lopi");
    let dir = case.dir.clone();
    case.run_rewritten_ok(&rw, &dir, Some(&data));
    let entries = case.report(&data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        count_of(&entries, "is_even"),
        Some(5014),
        "{}",
        case.fail("is_even")
    );
    assert_eq!(
        count_of(&entries, "tail_a"),
        Some(300),
        "{}",
        case.fail("tail_a")
    );
    for name in ["is_odd", "tail_b", "main"] {
        assert_eq!(
            count_of(&entries, name),
            None,
            "{}",
            case.fail(format!("{name} must not be probed"))
        );
    }
    cleanup(&case.dir);
}

// ---------------------------------------------------------------------------
// Bad inputs
// ---------------------------------------------------------------------------

/// `lopi rewrite INPUT -o OUT` must fail cleanly: non-zero exit (not a
/// signal), exactly one line on stderr, no panic, INPUT unchanged, and a
/// pre-existing OUT left untouched.
fn expect_clean_failure(
    case: &mut Case,
    input: &Path,
    want_code: Option<i32>,
) -> Result<(), String> {
    let before = std::fs::read(input).ok();
    let out_path = case.dir.join(format!(
        "{}.out",
        input.file_name().unwrap().to_string_lossy()
    ));
    let sentinel = b"pre-existing output file: must be left untouched\n";
    std::fs::write(&out_path, sentinel).unwrap();
    let mut cmd = Command::new(lopi_bin());
    cmd.arg("rewrite").arg(input).arg("-o").arg(&out_path);
    let out = case.run(&mut cmd, "lopi rewrite")?;
    let stderr = out.stderr_str();
    let mut problems = Vec::new();
    match out.status.code() {
        None => problems.push(format!("lopi rewrite was {}", out.describe_status())),
        Some(0) => problems.push("lopi rewrite exited 0 on a bad input".to_string()),
        Some(c) => {
            if let Some(w) = want_code {
                if c != w {
                    problems.push(format!("exit code {c}, expected {w}"));
                }
            }
        }
    }
    if stderr.contains("panicked") {
        problems.push("stderr shows a panic".to_string());
    }
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    if lines.len() != 1 || lines[0].trim().is_empty() {
        problems.push(format!(
            "stderr must be exactly one non-empty line, got {} lines",
            lines.len()
        ));
    }
    if std::fs::read(input).ok() != before {
        problems.push("the input file was modified".to_string());
    }
    match std::fs::read(&out_path) {
        Ok(b) if b == sentinel => {}
        Ok(_) => problems.push("the pre-existing -o file was modified".to_string()),
        Err(e) => problems.push(format!("the pre-existing -o file is gone: {e}")),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(case.fail(format!("{}\nstderr:\n{stderr}", problems.join("\n"))))
    }
}

/// A real PIE fixture to derive broken inputs from.
fn sample_elf(case: &mut Case) -> Vec<u8> {
    let fx = Fixture::load("recursion.c");
    let exe = case.dir.join("sample");
    let mut cmd = Command::new(fx.compiler());
    cmd.args(O2_PIE.prog_flags())
        .arg(&fx.path)
        .arg("-o")
        .arg(&exe);
    case.compile(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
    std::fs::read(&exe).unwrap()
}

#[test]
fn rewrite_rejects_bad_inputs() {
    let mut case = Case::new("bad-inputs".into());
    let elf = sample_elf(&mut case);
    let mut inputs: Vec<(&str, Vec<u8>)> = vec![
        (
            "not_elf.txt",
            b"#!/bin/sh\necho this is not an ELF file\n".to_vec(),
        ),
        ("empty", Vec::new()),
        ("truncated_header", elf[..40].to_vec()),
        ("truncated_64", elf[..64].to_vec()),
        ("truncated_half", elf[..elf.len() / 2].to_vec()),
    ];
    let mut aarch64 = elf.clone();
    aarch64[18..20].copy_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
    inputs.push(("other_arch_aarch64", aarch64));
    let mut i386 = elf.clone();
    i386[18..20].copy_from_slice(&3u16.to_le_bytes()); // EM_386
    inputs.push(("other_arch_i386", i386));
    let mut class32 = elf.clone();
    class32[4] = 1; // ELFCLASS32 header bytes on a 64-bit body
    inputs.push(("elfclass32", class32));
    let mut big_endian = elf.clone();
    big_endian[5] = 2; // ELFDATA2MSB
    inputs.push(("big_endian", big_endian));
    let mut relocatable = elf.clone();
    relocatable[16..18].copy_from_slice(&1u16.to_le_bytes()); // ET_REL
    inputs.push(("et_rel", relocatable));

    let mut failures = Vec::new();
    for (name, bytes) in &inputs {
        let p = case.dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        if let Err(e) = expect_clean_failure(&mut case, &p, None) {
            failures.push(format!("input {name}: {e}"));
        }
    }
    let missing = case.dir.join("does_not_exist");
    if let Err(e) = expect_clean_failure(&mut case, &missing, None) {
        failures.push(format!("missing input: {e}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    cleanup(&case.dir);
}

#[test]
fn rewrite_refuses_static_executables() {
    let mut case = Case::new("static".into());
    let fx = Fixture::load("recursion.c");
    let exe = case.dir.join("static_prog");
    let mut cmd = Command::new(fx.compiler());
    cmd.args(["-O2", "-static"])
        .arg(&fx.path)
        .arg("-o")
        .arg(&exe);
    if let Err(e) = case.compile(&mut cmd) {
        // No static libc on this machine: nothing to test.
        eprintln!("skipping: cannot link a static executable here:\n{e}");
        return;
    }
    let r = expect_clean_failure(&mut case, &exe, Some(1));
    assert!(r.is_ok(), "{}", r.unwrap_err());
    cleanup(&case.dir);
}

/// The input is never modified, even when OUT is the same directory and
/// the rewrite succeeds (checked in every matrix case too); here: OUT
/// already exists and is overwritten with a valid ELF, and `lopi info`
/// reports coverage.
#[test]
fn rewrite_overwrites_existing_output_and_info_reports_coverage() {
    let (mut case, orig, rw) = build_and_rewrite("jumptable.c", O2_PIE, &[]);
    std::fs::write(&rw, b"stale").unwrap();
    case.rewrite(&orig, &rw, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let bytes = std::fs::read(&rw).unwrap();
    assert!(
        bytes.starts_with(b"\x7fELF"),
        "{}",
        case.fail("output is not an ELF file")
    );
    let info = case.info(&orig).unwrap_or_else(|e| panic!("{e}"));
    let cov = check_info_summary(&info).unwrap();
    assert!(
        cov > 0.0,
        "{}",
        case.fail(format!("coverage_percent is {cov}"))
    );
    for name in ["dispatch", "op_add", "classify"] {
        let st = info.functions.get(name).map(|(s, _)| s.as_str());
        assert_eq!(
            st,
            Some("probed"),
            "{}",
            case.fail(format!("lopi info status of {name}"))
        );
    }
    cleanup(&case.dir);
}

/// Self-test of the count checker (independent of lopi).
#[test]
fn count_checker_self_test() {
    let e = |name: &str, module: &str, calls: u64| ReportEntry {
        name: name.into(),
        module: module.into(),
        addr: "0x0".into(),
        calls,
    };
    let entries = vec![
        e("fib", "/a/prog", 5),
        e("dup", "/a/prog", 2),
        e("dup", "/b/libfix.so", 3),
        e("zero", "/a/prog", 0),
    ];
    let exp = |v: &[(&str, u64)]| {
        v.iter()
            .map(|(n, c)| (n.to_string(), *c))
            .collect::<Vec<_>>()
    };
    let mut p = Vec::new();
    check_counts(
        &mut p,
        &entries,
        &exp(&[("fib", 5), ("dup", 5), ("zero", 0)]),
        true,
        false,
        None,
        &[],
    );
    assert!(p.is_empty(), "{p:?}");
    check_counts(
        &mut p,
        &entries,
        &exp(&[("fib", 6), ("missing", 0)]),
        true,
        false,
        None,
        &[],
    );
    assert_eq!(p.len(), 2, "{p:?}");
    p.clear();
    check_counts(&mut p, &entries, &exp(&[("dup", 5)]), true, true, None, &[]);
    assert_eq!(p.len(), 1, "module check: {p:?}");
    p.clear();
    check_counts(
        &mut p,
        &entries,
        &exp(&[("zero", 7), ("missing", 1)]),
        false,
        false,
        None,
        &[],
    );
    assert!(p.is_empty(), "{p:?}");
    check_counts(&mut p, &entries, &exp(&[("fib", 5)]), false, false, None, &[]);
    assert_eq!(p.len(), 1, "{p:?}");
}
