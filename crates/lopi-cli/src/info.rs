//! `lopi info`: a program's functions and how each would be probed, or why not.
use crate::cli::Select;
use crate::files::{debug_file, parse, read};
use crate::output::{print, print_json, Format};
use crate::planning::plan;
use crate::{blocks, progress, show, syscalls};
use anyhow::Result;
use lopi_cache::{Lookup, PlanCache};
use lopi_patch::Place;
use std::path::Path;

/// Plans `prog` as `select` asks and shows the outcome.
pub(crate) fn run(prog: &Path, select: &Select, format: Format, cache: Option<&PlanCache>) -> Result<()> {
    let file = read(prog)?;
    let debug = debug_file(prog, &file);
    let mut module = parse(prog, &file, debug.as_ref())?;

    let bar = progress::Bar::new(&format!("planning {}", progress::file_name(prog)), true);
    let probes = select.probes()?;
    let (selection, lookup) = plan(&file, debug.as_ref(), &mut module, &select.filter()?, probes, cache, &bar);
    drop(bar);
    note(&lookup);
    if probes.has(Place::Blocks) {
        return match format {
            Format::Json => print_json(&blocks::info_json(&module, &selection.blocks)),
            Format::Text => print(&blocks::info_text(&selection.blocks)),
        };
    }
    let summary = show::Summary::new(&module, &selection.outcomes, &selection.timing);
    match format {
        Format::Json => {
            let mut info = show::info_json(prog, &module, &selection, &summary);
            if probes.probes_system_calls() {
                info["syscalls"] = syscalls::info_json(&module, &selection.syscalls);
            }
            print_json(&info)
        }
        Format::Text if probes.has(Place::Entries) || probes.has(Place::LockFunctions) => print(&show::info_text(&module, &selection, &summary)),
        Format::Text => Ok(()),
    }?;
    if probes.probes_system_calls() && format == Format::Text {
        print(&syscalls::info_text(&module, &selection.syscalls))?;
    }
    Ok(())
}

fn note(lookup: &Lookup) {
    if let (_, Some(text)) = progress::lookup_text(lookup) {
        eprintln!("lopi: note: {text}");
    }
}
