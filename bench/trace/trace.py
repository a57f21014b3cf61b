#!/usr/bin/env python3
"""What a `lopi trace` script costs per call, against the issue's two criteria, next to the same
scripts in bpftrace, Frida and SystemTap's dyninst runtime.

Scripts (F = the workload's hot function: fib, tiny):
  count  `func:* { @[func] = count(); }`        vs lopi run --probe entry (every function)
         criterion 1: at most 2x the plain counting probe's ns per call
  hist   `func:F:return { @h = hist(elapsed); }` vs lopi run --probe entry,exit --functions F
         criterion 2: at most the timing probe's ns per call + 10 ns
The same scripts: bpftrace uprobes (count: every function; hist: a uprobe and a uretprobe on F, the
entry time kept per thread and depth); Frida's Interceptor with a CModule (count: bench/anchors'
frida_count.py; hist: this script's `frida-hist` mode, onEnter/onLeave in C); SystemTap
`stap --dyninst` (process.function probes, `@entry` for the elapsed time).

Workloads: W1 loop (calls of the 4-byte `tiny`), W1 fib, W2 speedtest1 (count script only).
bpftrace, Frida and SystemTap run W1 at smaller sizes, each next to an uninstrumented run of its
own size: bpftrace single-steps tiny()'s first instruction (~10 us per call here).

Run through run.sh; `trace.py --help` lists the knobs. `trace.py frida-hist --fn F [--counts FILE]
-- PROG ARGS` is the Frida runner of the hist script.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
sys.path.insert(0, str(REPO / "bench" / "anchors"))
import harness as h  # noqa: E402
import anchors  # noqa: E402  (its bpftrace function list and Frida counting runner)
from trace_checks import criteria, fmt_ns, notes_for, preflight, verdict, versions  # noqa: E402
from trace_frida import frida_hist  # noqa: E402
from trace_variants import (BASE, BASE_SLOW, BPF_C, BUILD, COUNT_SCRIPT, CRIT1_RATIO, CRIT2_NS, FRIDA_C,  # noqa: E402
                            HIST, LOPI_E, LOPI_T, STAP_C, TOOLS, TRACE_C, TRACE_H, Workload, make_variants)

log = h.log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3 and smaller workloads")
    ap.add_argument("-n", type=int, help="recorded runs per configuration (default 5, quick 3)")
    ap.add_argument("--loop", type=int, help="W1 loop calls (default 10,000,000, quick 2,000,000)")
    ap.add_argument("--fib", nargs=2, type=int, metavar=("N", "REPS"), help="W1 fib (default 27 20, quick 25 5)")
    ap.add_argument("--slow-loop", type=int, help="W1 loop under bpftrace, Frida, SystemTap (default 100,000, "
                    "quick 20,000)")
    ap.add_argument("--slow-fib", nargs=2, type=int, metavar=("N", "REPS"),
                    help="W1 fib under bpftrace, Frida, SystemTap (default 22 10, quick 20 5)")
    ap.add_argument("--size", type=int, help="speedtest1 --size (default 5, quick 2); 0: no W2")
    ap.add_argument("--sqlite-dir", type=Path, required=True, help="dir with sqlite3.c, speedtest1.c (fetch_sqlite.sh)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/trace.md")
    a = ap.parse_args()

    q = a.quick
    n = a.n or (3 if q else 5)
    loop_n, slow_loop = a.loop or (2_000_000 if q else 10_000_000), a.slow_loop or (20_000 if q else 100_000)
    fib, slow_fib = a.fib or ((25, 5) if q else (27, 20)), a.slow_fib or ((20, 5) if q else (22, 10))
    size = (2 if q else 5) if a.size is None else a.size
    t_start, load_start = time.time(), h.loadavg()
    shutil.rmtree(BUILD / "data", ignore_errors=True)
    BUILD.mkdir(parents=True, exist_ok=True)

    w1 = h.build("w1", [*h.W1_FLAGS, str(h.W1_SRC)], [h.W1_SRC])
    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    why, loop_why = preflight(w1, BUILD)
    if not lopi:
        why.update({c: f"lopi binary not found ({a.lopi})" for c in (LOPI_E, TRACE_C, LOPI_T, TRACE_H)})

    workloads = [Workload("w1-loop", f"W1 loop {loop_n:,}", w1, ["loop", str(loop_n)], ["loop", str(slow_loop)],
                          f"loop {slow_loop:,}", "tiny", h.HOT_NS, h.w1_check),
                 Workload("w1-fib", f"W1 fib({fib[0]})x{fib[1]}", w1, ["fib", *map(str, fib)],
                          ["fib", *map(str, slow_fib)], f"fib({slow_fib[0]})x{slow_fib[1]}", "fib", h.HOT_NS,
                          h.w1_check)]
    skips = {"w1-loop": dict(why, **loop_why), "w1-fib": dict(why)}
    if size:
        w2 = h.build_parallel({BASE: h.w2_job("speedtest1", a.sqlite_dir)})[BASE]
        workloads.append(Workload("w2", f"W2 speedtest1 --memdb --size {size}", w2, ["--memdb", "--size", str(size)],
                                  None, "", None, h.TOTAL, h.w2_check))
        skips["w2"] = dict(why)
        if BPF_C not in why:
            skips["w2"][BPF_C] = (f"not run on speedtest1: attaching its {len(anchors.functions_of(w2)):,} uprobes "
                                  "takes minutes (see bench/anchors)")

    all_res: dict[str, dict] = {}
    entries: list[dict] = []
    crit: list[dict] = []
    for wl in workloads:
        log(f"{wl.title}: n={n} (+1 warm-up), interleaved")
        vs = make_variants(wl, lopi, skips[wl.key])
        res = h.run_interleaved(vs, n, warmup=1, log=log)
        all_res[wl.title] = res
        expected = {b: h.w1_expected(res[b], wl.fn) if wl.fn and b in res else {} for b in (BASE, BASE_SLOW)}
        notes = notes_for(wl, vs, res, expected)
        wl_entries = []
        for v in vs:
            e = h.summary_entry("trace", wl.key, wl.title, v, res, wl.label(v.name), TOOLS[v.name],
                                expected[wl.base_of(v.name)], base=wl.base_of(v.name))
            e["notes"] = notes[v.name]
            wl_entries.append(e)
        wl_crit = criteria(wl, wl_entries)
        for c in wl_crit:
            cfg = TRACE_C if c["criterion"] == 1 else TRACE_H
            line = (f"criterion {c['criterion']} ({c['limit']} {c['reference']}): {c['measured']}: {verdict(c)}")
            log(f"{wl.title}: {line}")
            next(e for e in wl_entries if e["config"] == cfg)["notes"].insert(0, line)
        entries += wl_entries
        crit += wl_crit

    rows = [[e["workload"], e["label"], *h.entry_cells(e)] for e in entries]
    header = ["workload", "config", "time median [min–max]", "x uninstrumented", "calls", "overhead ns/call",
              "output identical", "notes"]
    crit_rows = [[c["workload"], str(c["criterion"]), f"`{c['script']}`", fmt_ns(c["trace_ns"]),
                  f"{c['reference']}: {fmt_ns(c['reference_ns'])}", c["measured"], c["limit"], verdict(c)]
                 for c in crit]
    judged = [c for c in crit if c["holds"] is not None]
    overall = {k: ("PASS" if all(c["holds"] for c in judged if c["criterion"] == k) else "FAIL")
               if any(c["criterion"] == k for c in judged) else "not judged" for k in (1, 2)}
    for k, v in overall.items():
        log(f"criterion {k}: {v}")
    side = []
    for wl in workloads:
        # The count script has no C handler of its own: its column stays empty.
        count_cols = [LOPI_E, TRACE_C, None, BPF_C, FRIDA_C, STAP_C]
        for script, cfgs in ((COUNT_SCRIPT, count_cols), (f"func:{wl.fn}:return {{ @h = hist(elapsed); }}", HIST)):
            if script != COUNT_SCRIPT and not wl.fn:
                continue
            cells = []
            for cfg in cfgs:
                e = next((e for e in entries if e["workload"] == wl.title and e["config"] == cfg), None)
                cells.append("-" if e is None else fmt_ns(e.get("ns_per_call")) if e["status"] == "ok" else e["status"])
            side.append([wl.title, f"`{script}`", *cells])

    machine = h.machine_info(REPO, [("lopi binary", lopi_info), *versions(),
                                    ("sqlite", h.sqlite_source_line(a.sqlite_dir)),
                                    *h.load_and_time(load_start, t_start)])
    md = [
        *h.results_head("lopi trace: what a probe script costs, next to bpftrace, Frida and SystemTap",
                        "bench/trace/run.sh", q, machine),
        "",
        "## Method",
        "",
        f"- W1 = `bench/workloads/w1.c` built with `gcc {' '.join(h.W1_FLAGS)}`; time = its hot section's own "
        "CLOCK_MONOTONIC time (`hot_ns=`). W1 loop calls the 4-byte `tiny` (`lea; ret`), W1 fib the recursive "
        f"`fib`. W2 = sqlite `speedtest1` + amalgamation built with `gcc {' '.join(h.W2_FLAGS)}`; time = its "
        "`TOTAL`; count script only.",
        f"- The scripts: count `{COUNT_SCRIPT}` and hist `func:F:return {{ @h = hist(elapsed); }}` with F = `tiny` "
        "(W1 loop) or `fib` (W1 fib), run by `lopi trace --format json -o FILE -e SCRIPT -- PROG` (calls = the "
        "map's values, or the histogram's buckets, summed). Their references: `lopi run -q --probe entry` (every "
        "function counted) and `lopi run -q --probe entry,exit --functions F` (F timed); calls from `lopi report "
        "--format json`.",
        "- The same scripts elsewhere: bpftrace (count: a uprobe on every function symbol with a size, "
        "`{ @[func] = count(); }`; hist: a uprobe on F keeping `nsecs` per thread and call depth, a uretprobe "
        "adding `nsecs` minus it to `hist()`); Frida's Interceptor with a CModule (count: "
        "`bench/anchors/frida_count.py --mode cmodule`, a per-function counter in C on every function symbol; hist: "
        "`trace.py frida-hist`, C onEnter/onLeave taking `clock_gettime(CLOCK_MONOTONIC)` and adding the difference "
        "to a log2 histogram); SystemTap's dyninst runtime (`stap --dyninst`, `process.function` probes, "
        "`@entry()` for the elapsed time). A tool that cannot be installed or run here is shown as skipped, "
        "with its error.",
        "- Sizes: bpftrace traps into the kernel on every probe hit (and single-steps `tiny`'s first "
        f"instruction), so bpftrace, Frida and SystemTap run W1 at smaller sizes (loop {slow_loop:,}, "
        f"fib({slow_fib[0]})x{slow_fib[1]}; in brackets after their configuration), each against an uninstrumented "
        "run of that size in the same rounds; lopi runs the sizes in the workload column. W1's work is linear in "
        "its size, so ns per call compare across sizes.",
        f"- Runs: configurations of one workload interleaved round-robin with the uninstrumented program(s), order "
        f"rotated each round, one unrecorded warm-up round, n={n} recorded runs each. Overhead ns/call = (median − "
        "uninstrumented median of the same size) / calls, calls = what each tool counted itself. Output: the "
        "program's call count and checksum (W1), speedtest1's output without times (W2), against the "
        "uninstrumented run's; the notes compare the hot function's count with W1's own.",
        f"- Criteria (the issue's): 1. the count script costs at most {CRIT1_RATIO:g}x lopi's plain counting probe "
        f"per call; 2. the hist script costs at most the timing probe's cost + {CRIT2_NS:g} ns per call.",
        "",
        "## Results",
        "",
        h.markdown_table(header, rows),
        "",
        "## The criteria",
        "",
        h.markdown_table(["workload", "criterion", "script", "lopi trace ns/call", "reference ns/call", "measured",
                          "limit", "verdict"], crit_rows),
        "",
        f"- Criterion 1 (count script ≤ {CRIT1_RATIO:g}x `lopi run --probe entry`): **{overall[1]}**.",
        f"- Criterion 2 (hist script ≤ `lopi run --probe entry,exit` + {CRIT2_NS:g} ns): **{overall[2]}**.",
        "",
        "## The same scripts side by side (overhead ns per call)",
        "",
        h.markdown_table(["workload", "script", "lopi (reference)", "lopi trace", "lopi C handler", "bpftrace",
                          "Frida CModule", "SystemTap dyninst"], side),
        "",
        "Reference: `lopi run --probe entry` for the count script, `lopi run --probe entry,exit --functions F` for "
        "the hist script. `-`: the tool did not instrument the hot function (Frida refuses `tiny`) or has no "
        "figure; see the notes above.",
        "",
    ]
    raw_meta = {"n": n, "quick": q, "lopi": lopi_info, "skipped": skips,
                "sizes": {"loop": loop_n, "slow_loop": slow_loop, "fib": fib, "slow_fib": slow_fib, "size": size}}
    h.write_results(a.out, md, "trace", raw_meta, all_res, machine, entries, q, criteria=crit,
                    criteria_overall=overall)
    return 0


if __name__ == "__main__":
    sys.exit(frida_hist(sys.argv[2:]) if sys.argv[1:2] == ["frida-hist"] else main())
