//! `lopi info --probe block`: each selected function's basic blocks and the probe each would
//! get (the tactic, or why none), summed over the module.
use anyhow::{bail, Context, Result};
use lopi_elf::ElfModule;
use lopi_trace::{BlockCount, ModuleBlocks};
use lopi_patch::blocks::{Edge, FunctionBlocks};
use lopi_patch::Outcome;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Default)]
struct Totals {
    functions: usize,
    /// Functions whose graph is not known, by reason.
    no_graph: BTreeMap<String, usize>,
    blocks: usize,
    /// Blocks without a probe that probed blocks stand for.
    implied: usize,
    probed: BTreeMap<&'static str, usize>,
    skipped: BTreeMap<&'static str, usize>,
}

fn totals(plan: &[FunctionBlocks]) -> Totals {
    let mut t = Totals::default();
    for f in plan {
        t.functions += 1;
        match &f.blocks {
            Ok(blocks) => {
                t.blocks += blocks.len();
                t.implied += lopi_patch::blocks::implications(f).values().filter(|i| !i.by.is_empty()).count();
                for (_, outcome) in blocks {
                    match outcome {
                        Outcome::Probed(tactic) => *t.probed.entry(tactic.name()).or_default() += 1,
                        Outcome::Skipped(reason) => *t.skipped.entry(reason.key()).or_default() += 1,
                        Outcome::Moved | Outcome::NotSelected => {}
                    }
                }
            }
            Err(reason) => *t.no_graph.entry(reason.key().to_string()).or_default() += 1,
        }
    }
    t
}

fn pct(n: usize, of: usize) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

/// One line: blocks found and probed.
pub fn summary(plan: &[FunctionBlocks]) -> String {
    let t = totals(plan);
    let probed: usize = t.probed.values().sum();
    let s = if t.functions == 1 { "" } else { "s" };
    format!(
        "{} blocks in {} function{s}, {probed} probed ({:.2}%), {:.2}% probed or implied",
        t.blocks,
        t.functions,
        pct(probed, t.blocks),
        pct(probed + t.implied, t.blocks)
    )
}

pub fn info_text(plan: &[FunctionBlocks]) -> String {
    let t = totals(plan);
    let probed: usize = t.probed.values().sum();
    let mut out = format!(
        "blocks: {} in {} functions ({} functions without a known graph); a probe fits {} ({:.1}%); {} more are implied by probed ones ({:.1}% probed or implied)\n",
        t.blocks,
        t.functions - t.no_graph.values().sum::<usize>(),
        t.no_graph.values().sum::<usize>(),
        probed,
        pct(probed, t.blocks),
        t.implied,
        pct(probed + t.implied, t.blocks)
    );
    for (tactic, n) in &t.probed {
        let _ = writeln!(out, "  {tactic:<16} {n:>8} ({:.1}%)", pct(*n, t.blocks));
    }
    for (reason, n) in &t.skipped {
        let _ = writeln!(out, "  skipped: {reason:<24} {n:>8} ({:.1}%)", pct(*n, t.blocks));
    }
    for (reason, n) in &t.no_graph {
        let _ = writeln!(out, "  functions without a graph: {reason}: {n}");
    }
    out
}

fn edge_json(e: &Edge) -> Value {
    match e {
        Edge::Next(to) => json!({"kind": "next", "to": to}),
        Edge::Jump(to) => json!({"kind": "jump", "to": to}),
        Edge::Table => json!({"kind": "table"}),
        Edge::Leaves => json!({"kind": "leaves"}),
    }
}

pub fn info_json(module: &ElfModule<'_>, plan: &[FunctionBlocks]) -> Value {
    let t = totals(plan);
    let functions: Vec<Value> = plan
        .iter()
        .map(|f| {
            let function = &module.functions[f.function];
            match &f.blocks {
                Ok(blocks) => json!({
                    "name": function.name,
                    "address": format!("{:#x}", function.addr.0),
                    "blocks": blocks.iter().map(|(b, outcome)| {
                        let (probe, reason) = match outcome {
                            Outcome::Probed(tactic) => (Some(tactic.name()), None),
                            Outcome::Skipped(reason) => (None, Some(reason.key())),
                            Outcome::Moved | Outcome::NotSelected => (None, None),
                        };
                        json!({"start": format!("{:#x}", b.start), "end": format!("{:#x}", b.end), "instructions": b.instructions, "edges": b.edges.iter().map(edge_json).collect::<Vec<_>>(), "probe": probe, "skipped": reason})
                    }).collect::<Vec<_>>(),
                }),
                Err(reason) => json!({"name": function.name, "address": format!("{:#x}", function.addr.0), "blocks": null, "no_graph": reason.key()}),
            }
        })
        .collect();
    json!({"blocks": t.blocks, "probed": t.probed, "skipped": t.skipped, "implied": t.implied, "functions_without_graph": t.no_graph, "functions": functions})
}

/// `lopi report DATA --blocks FUNC`: the function's code, block by block, each block's
/// executions beside its first instruction (or why it had no probe).
pub fn report_text(modules: &[ModuleBlocks], func: &str) -> Result<String> {
    let mut out = String::new();
    for m in modules {
        let blocks: Vec<&BlockCount> = m.blocks.iter().filter(|b| b.function == func).collect();
        if blocks.is_empty() {
            continue;
        }
        let file = std::fs::read(&m.source).with_context(|| format!("reading {} for its code", m.source))?;
        let probed = blocks.iter().filter(|b| b.count.is_some()).count();
        let ran = blocks.iter().filter(|b| b.count.is_some_and(|n| n > 0)).count();
        let _ = writeln!(out, "{func} in {}: {} blocks, {probed} probed, {ran} ran", m.source, blocks.len());
        let _ = writeln!(out, "{:>12}  {:>10}  CODE", "COUNT", "ADDRESS");
        let elf = lopi_elf::ElfModule::parse(&file).ok();
        for (b, ran) in m.blocks.iter().zip(m.covered()).filter(|(b, _)| b.function == func) {
            let len = usize::try_from(b.end.saturating_sub(b.addr)).unwrap_or(0);
            let code = elf.as_ref().and_then(|e| e.bytes_from(lopi_elf::Svma(b.addr))).and_then(|c| c.get(..len));
            let insns: Vec<lopi_x86::Insn> = code.map(|c| lopi_x86::decode(c, b.addr).collect()).unwrap_or_default();
            let head = match b.count {
                Some(n) if m.marks => (if n > 0 { "ran" } else { "no" }).to_string(),
                Some(n) => n.to_string(),
                None => "-".to_string(),
            };
            let implied = match ran {
                Some(true) if b.count.is_none() => ", ran (implied)",
                Some(false) if b.count.is_none() => ", did not run (implied)",
                None => ", not known whether it ran",
                _ => "",
            };
            let why = b.unprobed.as_ref().map(|r| format!("    # no probe: {r}{implied}")).unwrap_or_default();
            if insns.is_empty() {
                let _ = writeln!(out, "{head:>12}  {:>#10x}  (code not in the file){why}", b.addr);
            }
            for (i, insn) in insns.iter().enumerate() {
                let (count, why) = if i == 0 { (head.as_str(), why.as_str()) } else { ("", "") };
                let _ = writeln!(out, "{count:>12}  {:>#10x}  {insn}{why}", insn.ip());
            }
        }
    }
    if out.is_empty() {
        bail!("no blocks of {func} in this record (recorded with --probe block --functions {func}?)");
    }
    Ok(out)
}

/// `lopi report DATA --blocks FUNC --format json`.
pub fn report_json(modules: &[ModuleBlocks], func: &str) -> Result<Value> {
    let list: Vec<Value> = modules
        .iter()
        .filter(|m| m.blocks.iter().any(|b| b.function == func))
        .map(|m| {
            let covered = m.covered();
            let blocks: Vec<Value> = m
                .blocks
                .iter()
                .zip(covered)
                .filter(|(b, _)| b.function == func)
                .map(|(b, ran)| json!({"address": b.addr, "end": b.end, "count": b.count, "ran": ran, "no_probe": b.unprobed}))
                .collect();
            json!({"function": func, "file": m.source, "marks": m.marks, "blocks": blocks})
        })
        .collect();
    if list.is_empty() {
        bail!("no blocks of {func} in this record (recorded with --probe block --functions {func}?)");
    }
    Ok(Value::Array(list))
}
