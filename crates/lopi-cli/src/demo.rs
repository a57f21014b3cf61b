//! `lopi demo`: lopi's jobs end to end on built-in programs. `profile`: the whole static
//! workflow, every function counted and timed (entry and exit probes), then the report and one
//! function's callers. `mp`: the thesis's multiprocessor benchmark (`mpbench.c`) through
//! `lopi scale`.
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("demo.c");
const MPBENCH: &str = include_str!("mpbench.c");

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Which {
    Profile,
    Mp,
}

pub fn run(which: Which, dir: Option<PathBuf>) -> Result<()> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("lopi-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    match which {
        Which::Profile => profile(&dir),
        Which::Mp => mp(&dir),
    }
}

/// Writes `source` to DIR/NAME.c and compiles it to DIR/NAME, showing the command.
fn build(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Result<PathBuf> {
    step(&format!("cc -O2 {}-o {} {}", flags.iter().map(|f| format!("{f} ")).collect::<String>(), dir.join(name).display(), dir.join(format!("{name}.c")).display()));
    compile_c(dir, name, source, flags)
}

/// Writes `source` to DIR/NAME.c and compiles it to DIR/NAME (`cc -O2 FLAGS`).
pub(crate) fn compile_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Result<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    let prog = dir.join(name);
    std::fs::write(&src, source).with_context(|| format!("writing {}", src.display()))?;
    let status = Command::new("cc").arg("-O2").args(flags).arg("-o").arg(&prog).arg(&src).status().context("running cc (is a C compiler installed?)")?;
    if !status.success() {
        bail!("cc failed with {status} building {}", src.display());
    }
    Ok(prog)
}

fn profile(dir: &Path) -> Result<()> {
    let prog = build(dir, "demo", SOURCE, &[])?;
    let rewritten = dir.join("demo.lopi");
    let data = dir.join("demo.data");

    step(&format!("lopi rewrite {} -o {} --probe entry,exit", prog.display(), rewritten.display()));
    let (summary, _) = crate::rewrite::rewrite(&prog, &rewritten, &lopi_patch::Filter::default(), lopi_patch::Probes::TIME, lopi_rewrite::Recording::default(), None, None)?;
    crate::output::print(&format!("{summary}\n"))?;

    step(&format!("LOPI_OUTPUT={} {}", data.display(), rewritten.display()));
    let status = Command::new(&rewritten).env("LOPI_OUTPUT", &data).status().context("running the rewritten demo")?;
    if !status.success() {
        bail!("the rewritten demo exited with {status}");
    }

    step(&format!("lopi report {}", data.display()));
    let profile = lopi_trace::Profile::from_data(&crate::files::read_data(&data)?);
    crate::output::print(&crate::show::report_text(&profile, 10))?;
    step(&format!("lopi report {} --callers find", data.display()));
    crate::output::print(&crate::show::edges_text(&profile, "find", true))?;
    crate::output::print(&format!("\n(files kept in {})\n", dir.display()))
}

/// The thesis's synthetic workload (Paper II), calibrated here for 1 s on one CPU at 64% user
/// time, then measured on 1, 2, ... CPUs.
fn mp(dir: &Path) -> Result<()> {
    let prog = build(dir, "mpbench", MPBENCH, &["-pthread"])?;
    step(&format!("{} --calibrate 1000 64", prog.display()));
    let out = Command::new(&prog).args(["--calibrate", "1000", "64"]).output().context("running mpbench --calibrate")?;
    let params = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let [rounds, iters] = params.split(' ').collect::<Vec<_>>()[..] else { bail!("mpbench --calibrate printed {params:?}") };
    crate::output::print(&format!("{params}\n"))?;
    let chart = dir.join("speedup.svg");
    step(&format!("lopi scale --runs 3 --breakdown -o {} -- {} {{cpus}} {rounds} {iters}", chart.display(), prog.display()));
    let command = [prog.into_os_string(), "{cpus}".into(), rounds.into(), iters.into()].to_vec();
    crate::scale::run(crate::scale::Request { cpus: Vec::new(), runs: 3, breakdown: true, chart: Some(chart), json: false, command })?;
    crate::output::print(&format!("\n(files kept in {})\n", dir.display()))
}

fn step(cmd: &str) {
    let _ = crate::output::print(&format!("\n$ {cmd}\n"));
}
