//! `lopi report`: the view its flags choose, each view's check that the data file holds what
//! it shows, and its text or JSON.
use crate::files::read_data;
use crate::output::{print, print_json, Format};
use crate::processes::ProcessSelect;
use crate::{blocks, breakdown, show, trace};
use anyhow::{anyhow, bail, Result};
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
    Processes,
}

/// Where a view is shown from: the data file, its path (notes name it) and `--top`.
pub(crate) struct Source<'a> {
    pub(crate) file: &'a DataFile,
    pub(crate) path: &'a Path,
    pub(crate) top: usize,
}

/// A view `lopi report` shows: read from the data file (`lopi_trace::View`), as text or JSON.
/// Each view's impl is in its own file, beside its text. (Its JSON is printed, not returned: a
/// view's struct keeps its fields' order, a `serde_json::Value` would sort them.)
pub(crate) trait Shown: lopi_trace::View {
    fn text(&self, from: &Source<'_>) -> String;
    fn json(&self, from: &Source<'_>) -> Result<()>;
}

/// Shows `view` of the processes `select` chooses in the data file at `data`.
pub(crate) fn run(data: &Path, view: View, select: &ProcessSelect, format: Format, top: usize) -> Result<()> {
    let read = || -> Result<DataFile> {
        let mut file = read_data(data)?;
        select.apply(&mut file)?;
        Ok(file)
    };
    match view {
        // It reads the file itself.
        View::Script => trace::report(data, format == Format::Json),
        View::Blocks(func) => blocks_view(&read()?, &func, format),
        View::Breakdown => show::<breakdown::ThreadTimes>(data, read()?, format, top),
        View::Threads => show::<lopi_trace::Threads>(data, read()?, format, top),
        View::Locks => show::<lopi_trace::Locks>(data, read()?, format, top),
        View::Syscalls => show::<lopi_trace::Syscalls>(data, read()?, format, top),
        View::Budget => show::<show::Budget>(data, read()?, format, top),
        View::Processes => show::<lopi_trace::Processes>(data, read()?, format, top),
        View::Callers(name) => edges_view(data, &read()?, name, true, format),
        View::Callees(name) => edges_view(data, &read()?, name, false, format),
        View::Functions => show::<lopi_trace::Profile>(data, read()?, format, top),
    }
}

/// Reads view `V` of `file`, the data file at `path`, and prints it.
fn show<V: Shown>(path: &Path, file: DataFile, format: Format, top: usize) -> Result<()> {
    let view = V::read(&file).map_err(|missing| anyhow!("{} {missing}", path.display()))?;
    let from = Source { file: &file, path, top };
    match format {
        Format::Json => view.json(&from),
        Format::Text => print(&view.text(&from)),
    }
}

fn blocks_view(file: &DataFile, func: &str, format: Format) -> Result<()> {
    let modules = lopi_trace::ModuleBlocks::from_data(file);
    match format {
        Format::Json => print_json(&blocks::report_json(&modules, func)?),
        Format::Text => print(&blocks::report_text(&modules, func)?),
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
