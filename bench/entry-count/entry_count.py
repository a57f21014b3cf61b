#!/usr/bin/env python3
"""Cost of lopi's entry-count probe, next to the uninstrumented program and gcc -finstrument-functions.

Workloads (built here, same flags as the anchor measurements):
  W1 fib   `w1 fib N R`   R x fib(N), 17-instruction recursive function
  W1 loop  `w1 loop N`    N calls of tiny() (lea; ret)
  W2       `speedtest1 --memdb --size S` (sqlite from `apt-get source sqlite3`), TOTAL
Variants: baseline; `lopi rewrite` (all functions, counts to $LOPI_OUTPUT); gcc -finstrument-functions
linked with count_hooks.c. Per-call overhead = (median - median_baseline) / calls, where calls are
the counts lopi's report gives for the lopi rows and the hook's own count for the gcc rows.

Run through run.sh; `entry_count.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "entry-count"  # rewritten programs and lopi data
HOOKS_SRC = HERE / "count_hooks.c"
FLOOR_SRC = HERE / "floor.c"
W1_FLAGS, W2_FLAGS = h.W1_FLAGS, h.W2_FLAGS
FINSTR = ["-finstrument-functions"]
log = h.log

BASE, LOPI, GCC, PREV = "baseline", "lopi", "gcc-finstr", h.PREV
LABEL = {
    BASE: "baseline (uninstrumented)",
    LOPI: "lopi rewrite, entry count (all functions)",
    GCC: "gcc -finstrument-functions + count hook",
    PREV: "the previous build's lopi rewrite, entry count (--against)",
}
TOOLS = {BASE: h.TOOL["base"], LOPI: h.TOOL["lopi-entry"], GCC: h.TOOL["gcc-count"], PREV: h.TOOL["lopi-entry"]}


# ---------------------------------------------------------------- building


def build_all(sqlite_dir: Path) -> dict:
    BUILD.mkdir(parents=True, exist_ok=True)
    build = h.build
    hooks = build("count_hooks", ["-O2", "-c", str(HOOKS_SRC)], [HOOKS_SRC], ".o")
    b = {
        "w1": {
            BASE: build("w1", [*W1_FLAGS, str(h.W1_SRC)], [h.W1_SRC]),
            GCC: build("w1-finstr", [*W1_FLAGS, *FINSTR, str(h.W1_SRC), str(hooks)], [h.W1_SRC, hooks]),
        },
        "floor": build("floor", ["-O2", str(FLOOR_SRC)], [FLOOR_SRC]),
    }
    jobs = {
        BASE: h.w2_job("speedtest1", sqlite_dir),
        GCC: h.w2_job("speedtest1-finstr", sqlite_dir, FINSTR, (hooks,)),
    }
    b["w2"] = h.build_parallel(jobs)
    return b


# ---------------------------------------------------------------- variants


HOT_NS, TOTAL, w1_check = h.HOT_NS, h.TOTAL, h.w1_check
def make_variants(workload: str, argv_tail: list[str], bins: dict, lopi: Optional[Path],
                  lopi_skip: str, metric, check, prev: Optional[Path] = None) -> list[h.Variant]:
    lopi_before, lopi_after = h.lopi_data_hooks(lopi, BUILD / "lopi-data" / workload)
    vs = [h.Variant(BASE, [str(bins[BASE]), *argv_tail], metric, check=check)]
    vs.append(h.Variant(LOPI, [str(bins.get(LOPI, "lopi-missing")), *argv_tail], metric,
                        before=lopi_before, after=lopi_after, check=check, skip_reason=lopi_skip))
    if prev and PREV in bins:
        # The previous build reads its own records.
        pb, pa = h.lopi_data_hooks(prev, BUILD / "lopi-data" / (workload + "-prev"))
        vs.append(h.Variant(PREV, [str(bins[PREV]), *argv_tail], metric, before=pb, after=pa, check=check))
    vs.append(h.Variant(GCC, [str(bins[GCC]), *argv_tail], metric, after=h.count_hook_after, check=check))
    return vs


# ---------------------------------------------------------------- table


def summarise(title: str, variants: list[h.Variant], res: dict, notes_extra: dict, expected: dict) -> list[list[str]]:
    """Table rows for one workload. expected: {"fn": name, "calls": n} for the W1 cross-check."""
    rows = []
    base = h.stats(res[BASE])
    for v in variants:
        runs = res[v.name]
        notes: list[str] = []
        if v.skip_reason:
            rows.append([title, LABEL[v.name], "skipped", "-", "-", "-", v.skip_reason])
            continue
        failed = h.failure_note(runs)
        if failed:
            rows.append([title, LABEL[v.name], "FAILED", "-", "-", "-", failed])
            continue
        st = h.stats(runs)
        rec = [r for r in runs if r.round >= 0]
        # output check against the baseline's output (W1: result checksum and call count)
        if v.name != BASE and (diff := h.output_mismatch(v.check, res[BASE], runs)):
            notes.append(diff)
        ratio = pcall = "-"
        notes += h.after_errors(runs)
        calls, calls_s = h.median_calls(runs)
        if base and v.name != BASE:
            ratio = f"x{st.median / base.median:.2f}"
            notes.append(f"wall-clock x{st.wall_median / base.wall_median:.2f}")
            if calls:
                pcall = f"{(st.median - base.median) / calls * 1e9:.2f}"
        if v.name in (LOPI, PREV):
            notes += h.lopi_report_notes(runs, expected)
        if v.name == GCC and expected and calls:
            notes.append(f"hook calls − expected {expected['fn']} calls = {calls - expected['calls']:,} (other functions)")
        notes += notes_extra.get(v.name, [])
        notes.append(f"n={len(rec)}")
        rows.append([title, LABEL[v.name], h.fmt_range(st), ratio if v.name != BASE else "x1.00",
                     calls_s, pcall if v.name != BASE else "-", "; ".join(notes)])
    return rows


def run_floor(binary: Path, n: int, calls: int) -> tuple[list[str], dict]:
    vals, err = h.run_floor(binary, n, calls)
    if err:
        return [err], {}
    med = {k: statistics.median(v) for k, v in vals.items()}
    rows = []
    desc = {
        "plain": "call + ret (no probe)",
        "jmp": "entry `jmp` to a trampoline + `jmp` back",
        "jmp_inc": "same, trampoline does `incq counter(%rip)`",
        "jmp_lock_inc": "same, trampoline does `lock incq counter(%rip)`",
    }
    for k, v in vals.items():
        over = "-" if k == "plain" else f"{med[k] - med['plain']:.2f}"
        rows.append(f"| {desc.get(k, k)} | {med[k]:.2f} [{min(v):.2f}–{max(v):.2f}] | {over} |")
    return rows, med


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_size_args(ap)
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/entry-count.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    fib_n, fib_r = a.fib or ((30, 10) if a.quick else (32, 10))
    loop_n = a.loop or (30_000_000 if a.quick else 100_000_000)
    size = a.size or (10 if a.quick else 25)
    t_start = time.time()
    load_start = h.loadavg()

    bins = build_all(a.sqlite_dir)

    # lopi variants
    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    lopi_skip = {"w1": "", "w2": ""} if lopi else {"w1": f"lopi binary not found ({a.lopi})", "w2": f"lopi binary not found ({a.lopi})"}
    notes_extra: dict[str, dict[str, list[str]]] = {"w1": {}, "w2": {}}
    if lopi:
        log(f"lopi: {lopi}")
        for wl in ("w1", "w2"):
            prog = bins[wl][BASE]
            out, lopi_skip[wl], notes = h.rewrite_or_skip(lopi, prog, BUILD / (prog.name + ".lopi"))
            if out:
                bins[wl][LOPI], notes_extra[wl][LOPI] = out, notes
    else:
        log(f"lopi binary not found ({a.lopi}): lopi rows are skipped")
    against = h.previous_build()
    prev = against[0] if against else None
    if against:
        LABEL[PREV] = f"lopi at {against[1]} (--against), entry count (all functions)"
        h.rewrite_previous(prev, bins, BUILD, ".lopi-prev", notes_extra)

    w2_title = f"W2 speedtest1 --memdb --size {size}"
    groups = [(key, title, "w1", argv, HOT_NS, w1_check, fn)
              for key, title, argv, fn in h.w1_groups((fib_n, fib_r), loop_n)]
    groups.append(("w2", w2_title, "w2", ["--memdb", "--size", str(size)], TOTAL, h.w2_check, None))
    all_res: dict[str, dict] = {}
    rows: list[list[str]] = []
    entries: list[dict] = []
    against_rows: list[str] = []
    for key, title, wl, argv, metric, check, fn in groups:
        log(f"{title}: n={n} (+1 warm-up), interleaved")
        vs = make_variants(key, argv, bins[wl], lopi, lopi_skip[wl], metric, check, prev)
        res = h.run_interleaved(vs, n, warmup=1, log=log)
        all_res[title] = res
        if against:
            against_rows += h.against_rows(title, res, BASE, LOPI, against[1])
        expected = h.w1_expected(res[BASE], fn) if fn else {}
        rows += summarise(title, vs, res, notes_extra[wl], expected)
        entries += h.summary_entries("entry-count", key, title, vs, res, LABEL, TOOLS, expected)

    log("floor: jump to a trampoline and back")
    floor_rows, floor_med = run_floor(bins["floor"], n, loop_n)

    header = ["workload", "variant", "metric median [min–max]", "ratio to baseline", "calls",
              "overhead ns/call", "notes"]
    table = h.markdown_table(header, rows)
    sqlite_src = h.sqlite_source_line(a.sqlite_dir)
    machine = h.machine_info(REPO, [("lopi binary", lopi_info), ("sqlite", sqlite_src),
                                    *h.load_and_time(load_start, t_start)])
    md = [
        *h.results_head("Entry-count probe cost", "bench/entry-count/run.sh", a.quick, machine),
        "",
        "## Method",
        "",
        f"- W1 = `bench/workloads/w1.c` built with `gcc {' '.join(W1_FLAGS)}`; metric = the hot section's own "
        "CLOCK_MONOTONIC time (`hot_ns=`). W2 = sqlite `speedtest1` + amalgamation built with "
        f"`gcc {' '.join(W2_FLAGS)}`; metric = its `TOTAL`. Start-up, rewriting and writing counts at exit are excluded; "
        "the whole-process wall-clock ratio is in the notes.",
        "- Variants: baseline; `lopi rewrite PROG -o OUT` (all functions), counts written to `$LOPI_OUTPUT`; "
        "the same source built with `-finstrument-functions` and linked with `bench/entry-count/count_hooks.c` "
        "(one global non-atomic 64-bit counter incremented in `__cyg_profile_func_enter`, empty exit hook).",
        f"- Runs: variants of one workload interleaved round-robin, order rotated each round, one unrecorded "
        f"warm-up round, n={n} recorded runs each.",
        "- calls: lopi rows = sum of `calls` over all functions of `lopi report DATA --format json` (binary-level "
        "entries); gcc rows = the hook's own count printed at exit (source-level entries, which include functions "
        "GCC inlined, so more than binary-level calls on W2). Overhead ns/call = (median − baseline median) / calls.",
        "",
        "## Results",
        "",
        table,
        "",
        *([f"## Against {against[1]} (`bench/run.sh --against {against[1]}`: the same probes by that build, "
           "in the same rounds)", "", *h.AGAINST_HEAD, *against_rows, ""] if against else []),
        f"## Floor on this machine (`bench/entry-count/floor.c`, {loop_n:,} direct calls, n={n})",
        "",
        "| case | ns/call median [min–max] | ns/call over plain call |",
        "|---|---|---|",
        *floor_rows,
        "",
    ]
    h.write_results(a.out, md, "entry-count", {"n": n, "quick": a.quick, "floor_median_ns": floor_med}, all_res,
                    machine, entries, a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
