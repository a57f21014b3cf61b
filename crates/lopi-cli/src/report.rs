//! `lopi report`: the view its flags choose, each view's check that the data file holds what
//! it shows, and its text or JSON.
use crate::files::read_data;
use crate::output::{print, print_json, Format};
use crate::{blocks, breakdown, locks, show, syscalls, threads, trace};
use anyhow::{bail, Result};
use lopi_trace::DataFile;
use std::path::Path;

/// What `lopi report` shows: one view (`cli::ReportViews` chooses it from the flags).
pub(crate) enum View {
    /// The functions, most called first (no view flag).
    Functions,
    /// `--callers FUNC`.
    Callers(String),
    /// `--callees FUNC`.
    Callees(String),
    Syscalls,
    Locks,
    Threads,
    Breakdown,
    /// `--blocks FUNC`.
    Blocks(String),
    Script,
    Budget,
}

/// Shows `view` of the data file at `data`.
pub(crate) fn run(data: &Path, view: View, format: Format, top: usize) -> Result<()> {
    let file = || read_data(data);
    match view {
        // It reads the file itself.
        View::Script => trace::report(data, format == Format::Json),
        View::Blocks(func) => blocks_view(&file()?, &func, format),
        View::Breakdown => breakdown_view(data, &file()?, format),
        View::Threads => threads_view(data, &file()?, format),
        View::Locks => locks_view(data, &file()?, format, top),
        View::Syscalls => syscalls_view(data, &file()?, format, top),
        View::Budget => budget_view(data, &file()?, format),
        View::Callers(name) => edges_view(data, &file()?, name, true, format),
        View::Callees(name) => edges_view(data, &file()?, name, false, format),
        View::Functions => functions_view(data, &file()?, format, top),
    }
}

fn blocks_view(file: &DataFile, func: &str, format: Format) -> Result<()> {
    let modules = lopi_trace::ModuleBlocks::from_data(file);
    match format {
        Format::Json => print_json(&blocks::report_json(&modules, func)?),
        Format::Text => print(&blocks::report_text(&modules, func)?),
    }
}

fn breakdown_view(data: &Path, file: &DataFile, format: Format) -> Result<()> {
    let report = lopi_trace::Threads::from_data(file);
    if !report.threads.iter().any(|t| t.cpu.is_some()) {
        bail!("{} has no thread CPU times: run the program with --probe syscall,locks (its threads' exit and exit_group calls record them)", data.display());
    }
    match format {
        Format::Json => print_json(&breakdown::report_json(file, &report)),
        Format::Text => print(&breakdown::report_text(file, &report)),
    }
}

fn threads_view(data: &Path, file: &DataFile, format: Format) -> Result<()> {
    let report = lopi_trace::Threads::from_data(file);
    if report.threads.is_empty() {
        bail!("{} has no thread data: run the program with --probe locks", data.display());
    }
    match format {
        Format::Json => print_json(&threads::report_json(file, &report)),
        Format::Text => print(&threads::report_text(file, &report)),
    }
}

fn locks_view(data: &Path, file: &DataFile, format: Format, top: usize) -> Result<()> {
    let report = lopi_trace::Locks::from_data(file);
    // A module with lock probes records the process's memory map at its start: with
    // one, the program simply took no lock (dash), and the report says so.
    if report.locks.is_empty() && file.maps.is_empty() {
        bail!("{} has no lock data: record the program with --probe locks (lopi run, rewrite or attach)", data.display());
    }
    match format {
        Format::Json => print_json(&locks::report_json(file, &report)),
        Format::Text => print(&locks::report_text(file, &report, top)),
    }
}

fn syscalls_view(data: &Path, file: &DataFile, format: Format, top: usize) -> Result<()> {
    let Some(report) = lopi_trace::Syscalls::from_data(file) else {
        bail!("{} has no system-call data: record the program with --probe syscall (lopi run, rewrite or attach)", data.display());
    };
    match format {
        Format::Json => print_json(&report),
        Format::Text => print(&syscalls::report_text(&report, top)),
    }
}

fn budget_view(data: &Path, file: &DataFile, format: Format) -> Result<()> {
    let profile = lopi_trace::Profile::from_data(file);
    let Some(text) = show::budget_text(&profile) else {
        bail!("{} has no budget data: record the program with --probe entry,exit --budget 5% (lopi run, rewrite or attach)", data.display());
    };
    match format {
        Format::Json => print_json(&show::budget_json(&profile)),
        Format::Text => print(&text),
    }
}

/// `--callers` (`is_callers`) or `--callees` of the function `name`.
fn edges_view(data: &Path, file: &DataFile, name: String, is_callers: bool, format: Format) -> Result<()> {
    let profile = lopi_trace::Profile::from_data(file);
    if profile.timing.is_none() {
        bail!("{} has no timing data: record the program with --probe entry,exit (lopi run, rewrite or attach)", data.display());
    }
    if !profile.functions.iter().any(|f| f.name == name) {
        bail!("no function named {name:?} in {}", data.display());
    }
    let edges: Vec<_> = profile
        .edges
        .iter()
        .filter(|e| if is_callers { e.callee == name } else { e.caller.as_deref() == Some(name.as_str()) })
        .collect();
    match format {
        Format::Json => print_json(&edges),
        Format::Text => print(&show::edges_text(&profile, &name, is_callers)),
    }
}

fn functions_view(data: &Path, file: &DataFile, format: Format, top: usize) -> Result<()> {
    let profile = lopi_trace::Profile::from_data(file);
    match format {
        Format::Json => print_json(&profile),
        Format::Text => {
            print(&show::report_text(&profile, top))?;
            if !lopi_trace::Locks::from_data(file).locks.is_empty() {
                print(&format!("note: lock calls were recorded: see `lopi report {0} --locks` and `--threads`\n", data.display()))?;
            }
            Ok(())
        }
    }
}
