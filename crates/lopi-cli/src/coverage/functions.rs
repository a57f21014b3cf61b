//! `lopi coverage` of a record made with `--probe entry:mark`: which functions ran. lcov gets
//! each function at the source line of its entry (`FN`/`FNDA`, for genhtml's function table);
//! drcov, a list of basic blocks, needs `--probe coverage`.
use super::Format;
use anyhow::{bail, Result};
use lopi_trace::{FunctionsRan, ModuleFunctions};
use std::fmt::Write as _;
use std::path::Path;

pub(super) fn run(ran: &FunctionsRan, format: Format, output: Option<&Path>) -> Result<()> {
    let text = match format {
        Format::Text => text(ran),
        Format::Json => serde_json::to_string_pretty(ran)? + "\n",
        Format::Lcov => lcov(ran)?,
        Format::Drcov => bail!("drcov lists the basic blocks that ran: record the program with --probe coverage"),
    };
    super::write_out(&text, output)
}

fn ran_count(m: &ModuleFunctions) -> usize {
    m.functions.iter().filter(|f| f.ran).count()
}

fn text(ran: &FunctionsRan) -> String {
    let mut out = String::new();
    for m in &ran.modules {
        let n = ran_count(m);
        let _ = writeln!(out, "{}: {} functions marked, {n} ran ({:.1}%)", m.source, m.functions.len(), 100.0 * n as f64 / m.functions.len().max(1) as f64);
        out.push_str("RAN  FUNCTION\n");
        for f in &m.functions {
            let _ = writeln!(out, "{:<4} {}", if f.ran { "yes" } else { "no" }, f.name);
        }
    }
    out
}

/// lcov's tracefile: per source file, its marked functions at the line of their entry.
fn lcov(ran: &FunctionsRan) -> Result<String> {
    let mut files: std::collections::BTreeMap<String, Vec<(u32, &str, bool)>> = Default::default();
    for m in &ran.modules {
        let (file, debug) = super::read_with_debug(&m.source)?;
        let entries: Vec<(u64, u64)> = m.functions.iter().map(|f| (f.addr, f.addr + 1)).collect();
        let Some(lines) = lopi_elf::lines::lines_of(debug.as_deref().unwrap_or(&file), &entries) else { continue };
        for (f, lines) in m.functions.iter().zip(lines) {
            if let Some(line) = lines.first() {
                files.entry(line.file.clone()).or_default().push((line.line, &f.name, f.ran));
            }
        }
    }
    if files.is_empty() {
        bail!("no source lines: the recorded files have no DWARF line tables (build with -g, or install their -dbgsym packages)");
    }
    let mut out = String::from("TN:\n");
    for (file, functions) in files {
        let _ = writeln!(out, "SF:{file}");
        for (line, name, _) in &functions {
            let _ = writeln!(out, "FN:{line},{name}");
        }
        for (_, name, ran) in &functions {
            let _ = writeln!(out, "FNDA:{},{name}", u8::from(*ran));
        }
        let _ = writeln!(out, "FNF:{}\nFNH:{}\nend_of_record", functions.len(), functions.iter().filter(|f| f.2).count());
    }
    Ok(out)
}
