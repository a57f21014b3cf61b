//! `lopi info PROG --usdt`: the program's SystemTap static markers (USDT), where each is, its
//! semaphore and arguments, and whether a `usdt:` point can probe it (or why not).
use crate::files::{debug_file, parse, read};
use crate::output::{print, print_json, Format};
use anyhow::Result;
use lopi_elf::usdt::UsdtMarker;
use serde_json::json;
use std::path::Path;

/// One marker as `lopi info` shows it.
struct Shown<'m> {
    marker: &'m UsdtMarker,
    /// The function that holds its `nop`, and the offset there.
    function: Option<(String, u64)>,
    /// Why a `usdt:` point cannot probe it.
    refusal: Option<String>,
}

pub(crate) fn info(prog: &Path, format: Format) -> Result<()> {
    let file = read(prog)?;
    let debug = debug_file(prog, &file);
    let mut module = parse(prog, &file, debug.as_ref())?;
    let analysis = lopi_patch::analyse(&mut module);
    let markers = lopi_elf::usdt::markers(&file);
    let shown: Vec<Shown<'_>> = markers
        .iter()
        .map(|marker| {
            let function = module.functions.iter().find(|f| (f.addr.0..f.addr.0 + f.size.max(1)).contains(&marker.addr)).map(|f| (f.name.clone(), marker.addr - f.addr.0));
            let refusal = match (&marker.args, lopi_patch::point_fits(&module, &analysis, marker.addr)) {
                (Err(why), _) => Some(why.clone()),
                (_, Err(why)) => Some(why.to_string()),
                _ => None,
            };
            Shown { marker, function, refusal }
        })
        .collect();
    match format {
        Format::Json => print_json(&json!({ "program": prog.display().to_string(), "markers": shown.iter().map(to_json).collect::<Vec<_>>() })),
        Format::Text => print(&text(prog, &shown)),
    }
}

fn to_json(s: &Shown<'_>) -> serde_json::Value {
    let m = s.marker;
    json!({
        "provider": m.provider,
        "name": m.name,
        "address": m.addr,
        "semaphore": (m.semaphore != 0).then_some(m.semaphore),
        "function": s.function.as_ref().map(|(name, _)| name),
        "offset": s.function.as_ref().map(|(_, offset)| offset),
        "args": m.args_text,
        "arg_count": m.args.as_ref().map_or(0, Vec::len),
        "probed": s.refusal.is_none(),
        "refusal": s.refusal,
    })
}

fn text(prog: &Path, shown: &[Shown<'_>]) -> String {
    if shown.is_empty() {
        return format!("{} has no static markers (no .note.stapsdt)\n", prog.display());
    }
    let hex = |a: u64| format!("{a:#x}");
    let rows: Vec<[String; 5]> = shown
        .iter()
        .map(|s| {
            let m = s.marker;
            let semaphore = if m.semaphore == 0 { "-".to_string() } else { hex(m.semaphore) };
            let function = s.function.as_ref().map_or("?".to_string(), |(name, offset)| format!("{name}+{offset:#x}"));
            [m.full_name(), hex(m.addr), semaphore, function, m.args_text.clone()]
        })
        .collect();
    let header = ["MARKER", "ADDRESS", "SEMAPHORE", "IN", "ARGUMENTS"].map(String::from);
    let widths: Vec<usize> = (0..4).map(|i| rows.iter().chain([&header]).map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let line = |r: &[String; 5]| format!("{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}", r[0], r[1], r[2], r[3], r[4], w0 = widths[0], w1 = widths[1], w2 = widths[2], w3 = widths[3]).trim_end().to_string() + "\n";
    let mut out = line(&header);
    for (row, s) in rows.iter().zip(shown) {
        out += &line(row);
        if let Some(why) = &s.refusal {
            out += &format!("  not probed: {why}\n");
        }
    }
    let probed = shown.iter().filter(|s| s.refusal.is_none()).count();
    let guarded = shown.iter().filter(|s| s.marker.semaphore != 0).count();
    out += &format!("{} markers, {probed} can be probed (usdt:{}:PROVIDER:NAME), {guarded} guarded by a semaphore\n", shown.len(), prog.display());
    out
}
