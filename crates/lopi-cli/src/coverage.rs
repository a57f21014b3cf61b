//! `lopi coverage DATA`: which blocks and source lines ran, from a record made with `--probe
//! block`. A block ran when its probe counted it, or when a probed block that implies it ran
//! (see lopi-patch's `implied.rs`); a block without a probe that nothing decides is "not known"
//! and counts for neither side. Lines come from the DWARF line tables of the file or of its
//! separate debug file. Formats: text, JSON, lcov (`.info`, for genhtml) and drcov (for
//! Lighthouse, bncov). A record made with `--probe entry:mark` gets its functions instead
//! (`functions.rs`).
mod functions;

use anyhow::{bail, Context, Result};
use lopi_elf::lines::Line;
use lopi_trace::{DataFile, ModuleBlocks};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Lcov,
    Drcov,
}

/// One module's blocks with what is known of each, and their source lines.
struct Module {
    source: String,
    /// Lowest address the file loads at (drcov's offsets count from it).
    base: u64,
    blocks: Vec<Block>,
    /// Whether the file (or its debug file) has line tables.
    has_lines: bool,
}

struct Block {
    addr: u64,
    end: u64,
    function: String,
    count: Option<u64>,
    ran: Option<bool>,
    lines: Vec<Line>,
}

/// A recorded program's file and, when it has one, its separate debug file: the line tables
/// are in the second when it is there.
fn read_with_debug(source: &str) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    let file = std::fs::read(source).with_context(|| format!("reading {source} (the recorded program) for its addresses and lines"))?;
    let debug = lopi_elf::DebugFile::find(Path::new(source), &file, &lopi_elf::debug_dir()).and_then(|d| std::fs::read(&d.path).ok());
    Ok((file, debug))
}

/// `text` to `output`, or to stdout.
fn write_out(text: &str, output: Option<&Path>) -> Result<()> {
    match output {
        Some(path) => std::fs::write(path, text).with_context(|| format!("writing {}", path.display())),
        None => crate::output::print(text),
    }
}

fn modules(blocks: Vec<ModuleBlocks>) -> Result<Vec<Module>> {
    let mut out = Vec::new();
    for m in blocks {
        let (file, debug) = read_with_debug(&m.source)?;
        let elf = lopi_elf::ElfModule::parse(&file).with_context(|| m.source.clone())?;
        let base = elf.segments.iter().map(|s| s.vaddr.0).min().unwrap_or(0);
        let ranges: Vec<(u64, u64)> = m.blocks.iter().map(|b| (b.addr, b.end)).collect();
        let lines = lopi_elf::lines::lines_of(debug.as_deref().unwrap_or(&file), &ranges);
        let has_lines = lines.is_some();
        let mut lines = lines.unwrap_or_default().into_iter();
        let ran = m.covered();
        let blocks = m
            .blocks
            .iter()
            .zip(ran)
            .map(|(b, ran)| Block { addr: b.addr, end: b.end, function: b.function.clone(), count: b.count, ran, lines: lines.next().unwrap_or_default() })
            .collect();
        out.push(Module { source: m.source, base, blocks, has_lines });
    }
    if out.is_empty() {
        bail!("no block counts or function marks in this record: record it with --probe coverage, block or entry:mark (lopi run, rewrite or attach)");
    }
    Ok(out)
}

#[derive(Default)]
struct Tally {
    blocks: usize,
    ran: usize,
    unknown: usize,
}

impl Tally {
    fn add(&mut self, ran: Option<bool>) {
        self.blocks += 1;
        match ran {
            Some(true) => self.ran += 1,
            Some(false) => {}
            None => self.unknown += 1,
        }
    }

    fn pct(&self) -> f64 {
        let known = self.blocks - self.unknown;
        if known == 0 {
            0.0
        } else {
            100.0 * self.ran as f64 / known as f64
        }
    }
}

/// Per source file, per line: the highest count of the blocks its code is in (a block known
/// to have run without a count counts 1). A line none of whose blocks is known to have run
/// while some are not known is left out: it may have run.
fn line_hits(modules: &[Module]) -> BTreeMap<String, BTreeMap<u32, u64>> {
    let mut files: BTreeMap<String, BTreeMap<u32, Option<u64>>> = BTreeMap::new();
    for b in modules.iter().flat_map(|m| &m.blocks) {
        let hits = b.ran.map(|ran| if ran { b.count.unwrap_or(1).max(1) } else { 0 });
        for l in &b.lines {
            let e = files.entry(l.file.clone()).or_default().entry(l.line).or_insert(Some(0));
            *e = match (*e, hits) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (Some(n), None) | (None, Some(n)) if n > 0 => Some(n),
                _ => None,
            };
        }
    }
    files
        .into_iter()
        .map(|(file, lines)| (file, lines.into_iter().filter_map(|(l, h)| Some((l, h?))).collect::<BTreeMap<_, _>>()))
        .filter(|(_, lines)| !lines.is_empty())
        .collect()
}

fn functions(modules: &[Module]) -> BTreeMap<(String, String), Tally> {
    let mut out: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for m in modules {
        for b in &m.blocks {
            out.entry((m.source.clone(), b.function.clone())).or_default().add(b.ran);
        }
    }
    out
}

pub fn run(data: &DataFile, format: Format, output: Option<&Path>) -> Result<()> {
    let blocks = ModuleBlocks::from_data(data);
    if blocks.is_empty() {
        if let Ok(ran) = <lopi_trace::FunctionsRan as lopi_trace::View>::read(data) {
            return functions::run(&ran, format, output);
        }
    }
    let modules = modules(blocks)?;
    let text = match format {
        Format::Text => text(&modules),
        Format::Json => serde_json::to_string_pretty(&json_value(&modules))? + "\n",
        Format::Lcov => lcov(&modules)?,
        Format::Drcov => {
            let bytes = drcov(&modules);
            return match output {
                Some(path) => std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display())),
                None => bail!("drcov is binary: give -o FILE"),
            };
        }
    };
    write_out(&text, output)
}

fn text(modules: &[Module]) -> String {
    let mut out = String::from("FUNCTION                                 BLOCKS    RAN  NOT KNOWN  COVERED\n");
    let mut total = Tally::default();
    for ((_, name), t) in functions(modules) {
        let name: String = name.chars().take(38).collect();
        let _ = writeln!(out, "{name:<38} {:>8} {:>6} {:>10} {:>7.1}%", t.blocks, t.ran, t.unknown, t.pct());
        total.blocks += t.blocks;
        total.ran += t.ran;
        total.unknown += t.unknown;
    }
    let _ = writeln!(out, "{:<38} {:>8} {:>6} {:>10} {:>7.1}%", "all functions", total.blocks, total.ran, total.unknown, total.pct());
    let files = line_hits(modules);
    if !files.is_empty() {
        out.push_str("\nFILE                                      LINES    RAN  COVERED\n");
        for (file, lines) in &files {
            let ran = lines.values().filter(|&&n| n > 0).count();
            let name = Path::new(file).file_name().map_or(file.clone(), |n| n.to_string_lossy().into_owned());
            let _ = writeln!(out, "{name:<40} {:>7} {ran:>6} {:>7.1}%", lines.len(), 100.0 * ran as f64 / lines.len().max(1) as f64);
        }
    } else if modules.iter().all(|m| !m.has_lines) {
        out.push_str("note: no line tables (build with -g, or install the -dbgsym package): blocks only\n");
    }
    out.push_str("note: NOT KNOWN blocks had no probe and no probed block decides them; COVERED is RAN of the others\n");
    out
}

fn json_value(modules: &[Module]) -> Value {
    let functions: Vec<Value> = functions(modules)
        .into_iter()
        .map(|((module, name), t)| json!({"name": name, "module": module, "blocks": t.blocks, "covered": t.ran, "unknown": t.unknown}))
        .collect();
    let files: Vec<Value> = line_hits(modules)
        .into_iter()
        .map(|(path, lines)| {
            let covered: Vec<u32> = lines.iter().filter(|(_, &n)| n > 0).map(|(&l, _)| l).collect();
            let missed: Vec<u32> = lines.iter().filter(|(_, &n)| n == 0).map(|(&l, _)| l).collect();
            json!({"path": path, "lines": lines.len(), "covered": covered.len(), "covered_lines": covered, "missed_lines": missed})
        })
        .collect();
    json!({"functions": functions, "files": files})
}

/// lcov's tracefile: per source file, each line with code and its hits.
fn lcov(modules: &[Module]) -> Result<String> {
    let files = line_hits(modules);
    if files.is_empty() {
        bail!("no source lines: the recorded files have no DWARF line tables (build with -g, or install their -dbgsym packages)");
    }
    let mut out = String::from("TN:\n");
    for (file, lines) in files {
        let _ = writeln!(out, "SF:{file}");
        for (line, hits) in &lines {
            let _ = writeln!(out, "DA:{line},{hits}");
        }
        let _ = writeln!(out, "LF:{}\nLH:{}\nend_of_record", lines.len(), lines.values().filter(|&&n| n > 0).count());
    }
    Ok(out)
}

/// drcov (DynamoRIO's coverage format, version 2): the module table, then the blocks that
/// ran as (offset from the module's base, size, module id).
fn drcov(modules: &[Module]) -> Vec<u8> {
    let mut head = format!("DRCOV VERSION: 2\nDRCOV FLAVOR: lopi\nModule Table: version 2, count {}\nColumns: id, base, end, entry, checksum, timestamp, path\n", modules.len());
    let mut table = Vec::new();
    let mut count = 0;
    for (id, m) in modules.iter().enumerate() {
        let end = m.blocks.iter().map(|b| b.end).max().unwrap_or(m.base);
        let _ = writeln!(head, "{id:>2}, {:#018x}, {:#018x}, 0x0000000000000000, 0x00000000, 0x00000000, {}", m.base, end, m.source);
        for b in m.blocks.iter().filter(|b| b.ran == Some(true)) {
            let (Ok(offset), Ok(size)) = (u32::try_from(b.addr - m.base), u16::try_from(b.end - b.addr)) else { continue };
            table.extend_from_slice(&offset.to_le_bytes());
            table.extend_from_slice(&size.to_le_bytes());
            table.extend_from_slice(&(id as u16).to_le_bytes());
            count += 1;
        }
    }
    let _ = writeln!(head, "BB Table: {count} bbs");
    let mut out = head.into_bytes();
    out.extend(table);
    out
}
