//! `lopi demo`: the whole static workflow on a built-in program, end to end: every function
//! counted and timed (entry and exit probes), then the report and one function's callers.
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = include_str!("demo.c");

pub fn run(dir: Option<PathBuf>) -> Result<()> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("lopi-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join("demo.c");
    let prog = dir.join("demo");
    let rewritten = dir.join("demo.lopi");
    let data = dir.join("demo.data");
    std::fs::write(&src, SOURCE)?;

    step(&format!("cc -O2 -o {} {}", prog.display(), src.display()));
    let status = Command::new("cc").args(["-O2", "-o"]).arg(&prog).arg(&src).status().context("running cc (is a C compiler installed?)")?;
    if !status.success() {
        bail!("cc failed with {status}");
    }

    step(&format!("lopi rewrite {} -o {} --probe entry,exit", prog.display(), rewritten.display()));
    let (summary, _) = crate::rewrite(&prog, &rewritten, &lopi_patch::Filter::default(), lopi_patch::Probes::TIME, lopi_rewrite::Recording::default(), None)?;
    crate::print(&format!("{summary}\n"))?;

    step(&format!("LOPI_OUTPUT={} {}", data.display(), rewritten.display()));
    let status = Command::new(&rewritten).env("LOPI_OUTPUT", &data).status().context("running the rewritten demo")?;
    if !status.success() {
        bail!("the rewritten demo exited with {status}");
    }

    step(&format!("lopi report {}", data.display()));
    let profile = lopi_trace::Profile::from_data(&crate::read_data(&data)?);
    crate::print(&crate::show::report_text(&profile, 10))?;
    step(&format!("lopi report {} --callers find", data.display()));
    crate::print(&crate::show::edges_text(&profile, "find", true))?;
    crate::print(&format!("\n(files kept in {})\n", dir.display()))
}

fn step(cmd: &str) {
    let _ = crate::print(&format!("\n$ {cmd}\n"));
}
