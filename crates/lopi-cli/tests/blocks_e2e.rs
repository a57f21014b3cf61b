//! `lopi info --probe block`: the control-flow graph lopi builds for a function with a loop, a
//! dense switch (a jump table) and early returns, at -O0 and -O2, PIE and not, with and without
//! CET: blocks that tile the function's code without overlapping, edges that land on block
//! starts, a back edge for the loop, an indirect jump through the table, and a probe for
//! most blocks.
mod common;

use common::{cleanup, compile, fresh_dir, lopi_bin, run};
use serde_json::Value as Json;
use std::collections::BTreeSet;
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int classify(int x) {
    switch (x) {
    case 0: return 11;
    case 1: return x * 7 + 3;
    case 2: return 29;
    case 3: puts("three"); return 31;
    case 4: return 37;
    case 5: return x ^ 0x55;
    case 6: return 43;
    case 7: return 47;
    case 8: return 53;
    default: return -1;
    }
}
__attribute__((noinline)) long walk(const int *v, int n) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        if (v[i] < 0) return -sum;
        if (v[i] == 42) continue;
        sum += classify(v[i] % 10);
    }
    return sum;
}
int main(int argc, char **argv) {
    int v[64];
    for (int i = 0; i < 64; i++) v[i] = (i * 37 + argc) % 50;
    printf("%ld\n", walk(v, argc > 1 ? atoi(argv[1]) : 64));
    return 0;
}
"#;

fn hex(v: &Json) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn blocks_tile_functions_and_their_edges_land_on_blocks() {
    let dir = fresh_dir("blocks_graph");
    let src = dir.join("blocks.c");
    std::fs::write(&src, PROGRAM).unwrap();
    for flags in [&["-O0"][..], &["-O2"], &["-O2", "-no-pie"], &["-O3", "-fcf-protection"]] {
        let prog = dir.join(format!("blocks{}", flags.join("")));
        compile(Command::new("cc").args(flags).arg("-o").arg(&prog).arg(&src)).unwrap();
        let out = run(Command::new(lopi_bin()).args(["info", "--probe", "block", "--format", "json"]).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{flags:?}: {}", out.stderr_str());
        let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
        let functions = json["functions"].as_array().unwrap();
        let function = |name: &str| functions.iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("{name} in {json}"));
        let mut probed = 0;
        let mut total = 0;
        for name in ["classify", "walk", "main"] {
            let f = function(name);
            let blocks = f["blocks"].as_array().unwrap_or_else(|| panic!("{flags:?} {name}: no graph: {f}"));
            let starts: BTreeSet<u64> = blocks.iter().map(|b| hex(&b["start"])).collect();
            assert!(starts.contains(&hex(&f["address"])), "{flags:?} {name}: the entry starts a block: {f}");
            let mut last_end = 0;
            for b in blocks {
                let (start, end) = (hex(&b["start"]), hex(&b["end"]));
                assert!(start < end && start >= last_end, "{flags:?} {name}: blocks in order, apart: {f}");
                last_end = end;
                for e in b["edges"].as_array().unwrap() {
                    if e["kind"] == "next" || e["kind"] == "jump" {
                        assert!(starts.contains(&e["to"].as_u64().unwrap()), "{flags:?} {name}: edge {e} lands on a block: {f}");
                    }
                }
                total += 1;
                probed += usize::from(b["probe"].is_string());
            }
            let back = blocks.iter().any(|b| b["edges"].as_array().unwrap().iter().any(|e| e["kind"] == "jump" && e["to"].as_u64().unwrap() <= hex(&b["start"])));
            if name == "walk" {
                assert!(back, "{flags:?}: walk's loop has a back edge: {f}");
            }
            if name == "classify" {
                assert!(blocks.len() >= 10, "{flags:?}: ten cases and a default: {f}");
                let table = blocks.iter().any(|b| b["edges"].as_array().unwrap().iter().any(|e| e["kind"] == "table"));
                assert!(table, "{flags:?}: the switch jumps through its table: {f}");
            }
        }
        // A program this small has little padding for bounces: its short blocks (`leave; ret`
        // at -O0) are the ones the blocks dominating them will have to stand for.
        assert!(probed * 10 >= total * 8, "{flags:?}: {probed} of {total} blocks get a probe: {json}");
    }
    cleanup(&dir);
}

#[test]
fn block_probes_are_refused_outside_info_for_now() {
    let out = run(Command::new(lopi_bin()).args(["run", "--probe", "block", "--", "true"]), common::default_timeout()).unwrap();
    assert!(!out.status.success() && out.stderr_str().contains("--probe block"), "{}", out.stderr_str());
}
