//! `lopi info --probe block`: each selected function's basic blocks and the probe each would
//! get (the tactic, or why none), summed over the module.
use lopi_elf::ElfModule;
use lopi_patch::blocks::{BlockOutcome, FunctionBlocks};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Default)]
struct Totals {
    functions: usize,
    /// Functions whose graph is not known, by reason.
    no_graph: BTreeMap<String, usize>,
    blocks: usize,
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
                for (_, outcome) in blocks {
                    match outcome {
                        BlockOutcome::Probed(tactic) => *t.probed.entry(tactic.name()).or_default() += 1,
                        BlockOutcome::Skipped(reason) => *t.skipped.entry(reason.key()).or_default() += 1,
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

pub fn info_text(plan: &[FunctionBlocks]) -> String {
    let t = totals(plan);
    let probed: usize = t.probed.values().sum();
    let mut out = format!(
        "blocks: {} in {} functions ({} functions without a known graph); a probe fits {} ({:.1}%)\n",
        t.blocks,
        t.functions - t.no_graph.values().sum::<usize>(),
        t.no_graph.values().sum::<usize>(),
        probed,
        pct(probed, t.blocks)
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
                            BlockOutcome::Probed(tactic) => (Some(tactic.name()), None),
                            BlockOutcome::Skipped(reason) => (None, Some(reason.key())),
                        };
                        json!({"start": format!("{:#x}", b.start), "end": format!("{:#x}", b.end), "instructions": b.instructions, "edges": b.edges, "probe": probe, "skipped": reason})
                    }).collect::<Vec<_>>(),
                }),
                Err(reason) => json!({"name": function.name, "address": format!("{:#x}", function.addr.0), "blocks": null, "no_graph": reason.key()}),
            }
        })
        .collect();
    json!({"blocks": t.blocks, "probed": t.probed, "skipped": t.skipped, "functions_without_graph": t.no_graph, "functions": functions})
}
