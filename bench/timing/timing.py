#!/usr/bin/env python3
"""Cost of timing every call: lopi's entry+exit probes next to uftrace, a hand-written
gcc -finstrument-functions timing hook, the uninstrumented program and the physical floor.

Workloads (built -O2 here, same flags as bench/entry-count):
  W1 fib   `w1 fib N R`   R x fib(N), 17-instruction recursive function
  W1 loop  `w1 loop N`    N calls of tiny() (lea; ret)
  W2       `speedtest1 --memdb --size S` (sqlite from `apt-get source sqlite3`), TOTAL
Configurations: baseline; `lopi rewrite --probe entry,exit` (when `lopi rewrite --help` lists
--probe), the same with `--time sampled` (when it lists --time) and `lopi rewrite --probe entry`
(counting); `uftrace record` (default options: every function, no filter) on a -pg build, on a
-fpatchable-function-entry=5 build with `-P .`, and on the unmodified binary with `-P .`;
-finstrument-functions + timing_hooks.c. Per-call overhead = (median - median_baseline) / calls,
calls = what each tool itself counted (lopi's report, uftrace's report, the hook's count);
x floor = that overhead / (rdtsc2 - plain) of floor.c. The sampled run's calls per function are
checked against the exact run's of the same round, and on W2 its top 10 by inclusive time too
(sampled.py).

Run through run.sh; `timing.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402
import sampled  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "timing"  # rewritten programs, tool data
HOOKS_SRC = HERE / "timing_hooks.c"
FLOOR_SRC = HERE / "floor.c"
FINSTR = ["-finstrument-functions"]
PG = ["-pg"]
PFE = ["-fpatchable-function-entry=5"]
LOPI_PROBE = ["--probe", "entry,exit"]
log = h.log

BASE, LOPI, LOPI_S, LOPI_C, UFT_PG, UFT_PFE, UFT_DYN, GCC, PREV = (
    "baseline", "lopi", "lopi-sampled", "lopi-count", "uftrace-pg", "uftrace-pfe", "uftrace-dyn",
    "gcc-finstr-timing", h.PREV)
FLOOR = "floor"
FLOOR_CALLS = 5_000_000
LABEL = {
    BASE: "uninstrumented",
    LOPI: "lopi rewrite --probe entry,exit (all functions)",
    LOPI_S: "lopi rewrite --probe entry,exit --time sampled (all functions)",
    LOPI_C: "lopi rewrite --probe entry (all functions)",
    UFT_PG: "uftrace record, -pg build (mcount)",
    UFT_PFE: "uftrace record -P ., -fpatchable-function-entry=5 build",
    UFT_DYN: "uftrace record -P ., unmodified binary",
    GCC: "gcc -finstrument-functions + timing_hooks.c",
    PREV: "the previous build's lopi rewrite --probe entry,exit (--against)",
}
TOOLS = {BASE: h.TOOL["base"], LOPI: h.TOOL["lopi-timing"], LOPI_S: h.TOOL["lopi-sampled"],
         LOPI_C: h.TOOL["lopi-entry"], UFT_PG: h.TOOL["uftrace-pg"],
         UFT_PFE: h.TOOL["uftrace-pfe"], UFT_DYN: h.TOOL["uftrace-dyn"], GCC: h.TOOL["gcc-timing"],
         PREV: h.TOOL["lopi-timing"]}
UFTRACE = (UFT_PG, UFT_PFE, UFT_DYN)
# lopi's configurations of this benchmark and the file name suffix of their rewritten programs
LOPI_SUFFIX = {LOPI: ".lopi-timing", LOPI_S: ".lopi-sampled", LOPI_C: ".lopi-count"}
# build flags per configuration that needs its own binary
BUILD_FLAGS = {UFT_PG: PG, UFT_PFE: PFE, GCC: FINSTR}


# ---------------------------------------------------------------- building


def build_all(sqlite_dir: Path, uftrace_modes: list[str]) -> dict:
    build = h.build
    hooks = build("timing_hooks", ["-O2", "-c", str(HOOKS_SRC)], [HOOKS_SRC], ".o")
    w1, w1f = h.W1_SRC, h.W1_FLAGS
    b = {"w1": {BASE: build("w1", [*w1f, str(w1)], [w1]),
                GCC: build("w1-finstr-timing", [*w1f, *FINSTR, str(w1), str(hooks)], [w1, hooks])},
         "floor": build("timing-floor", ["-O2", str(FLOOR_SRC)], [FLOOR_SRC])}
    for mode in (UFT_PG, UFT_PFE):
        if mode in uftrace_modes:
            b["w1"][mode] = build(f"w1-{mode}", [*w1f, *BUILD_FLAGS[mode], str(w1)], [w1])
    st_c, sq_c = h.sqlite_sources(sqlite_dir)
    inc = f"-I{sqlite_dir}"
    w2f = h.W2_FLAGS
    jobs = {
        BASE: h.w2_job("speedtest1", sqlite_dir),
        # sqlite3.c with the hook calls, linked with timing_hooks.o below (a hook change relinks only)
        "sqlite3-finstr.o": ("sqlite3-finstr", [*w2f, *FINSTR, inc, "-c", str(sq_c)], [sq_c], ".o"),
    }
    for mode in (UFT_PG, UFT_PFE):
        if mode in uftrace_modes:
            jobs[mode] = h.w2_job(f"speedtest1-{mode}", sqlite_dir, BUILD_FLAGS[mode])
    w2 = h.build_parallel(jobs)
    sq_o = w2.pop("sqlite3-finstr.o")
    w2[GCC] = build("speedtest1-finstr-timing", [*w2f, *FINSTR, inc, str(st_c), str(sq_o), str(hooks), "-lm"],
                    [st_c, sq_o, hooks])
    b["w2"] = w2
    return b


# ---------------------------------------------------------------- lopi


def lopi_support(lopi: Optional[Path], option: str, what: str) -> str:
    """"" when `lopi rewrite --help` lists `option`, else why a lopi configuration is not run."""
    if lopi is None:
        return "lopi binary not found"
    p = subprocess.run([str(lopi), "rewrite", "--help"], capture_output=True, text=True, timeout=60)
    return "" if option in p.stdout + p.stderr else f"lopi: {what} not available yet"


def lopi_keep(rep: dict) -> dict:
    """What a timing report has beyond counts: whether functions carry times, and the probe cost."""
    fns = rep.get("functions", [])
    kept = {"has_times": any("total_ns" in f for f in fns) or "timing" in rep}
    timing = rep.get("timing") if isinstance(rep.get("timing"), dict) else None
    if timing and isinstance(timing.get("probe_cost"), dict):
        kept["probe_cost"] = timing["probe_cost"]
    kept.update(sampled.keep(rep))
    return kept


# ---------------------------------------------------------------- variants


def make_variants(key: str, argv_tail: list[str], bins: dict, skip: dict, lopi: Optional[Path], metric, check,
                  counted: dict, count: bool = True, prev: Optional[Path] = None) -> list[h.Variant]:
    """One Variant per configuration; count=False leaves out reading the tools' reports
    (the correctness runs). With `prev` (--against), the previous build's lopi too."""
    data = BUILD / "data" / key
    vs = [h.Variant(BASE, [str(bins[BASE]), *argv_tail], metric, check=check)]
    for name in LOPI_SUFFIX:
        lb, la = h.lopi_data_hooks(lopi, data / name, lopi_keep)
        vs.append(h.Variant(name, [str(bins.get(name, f"{name}-missing")), *argv_tail], metric, before=lb,
                            after=la if count else None, check=check, skip_reason=skip.get(name, "")))
    if prev and PREV in bins:
        # The previous build reads its own records.
        pb, pa = h.lopi_data_hooks(prev, data / "prev", lopi_keep)
        vs.append(h.Variant(PREV, [str(bins[PREV]), *argv_tail], metric, before=pb, after=pa if count else None,
                            check=check))
    for mode in UFTRACE:
        prog = bins.get(BASE if mode == UFT_DYN else mode, f"{mode}-missing")
        vs.append(h.uftrace_variant(mode, prog, argv_tail, data / mode, counted.setdefault(mode, {}), metric,
                                    patch_all=mode != UFT_PG, check=check, skip_reason=skip.get(mode, ""),
                                    count=count))
    vs.append(h.Variant(GCC, [str(bins[GCC]), *argv_tail], metric,
                        before=h.timing_hook_before(data / "timing_hooks.txt"),
                        after=h.timing_hook_after if count else None, check=check))
    return vs


# ---------------------------------------------------------------- tables


def per_fn_of(runs: list[h.RunResult]) -> dict:
    return next((r.extra["per_fn"] for r in runs if "per_fn" in r.extra), {})


def sampled_notes(res: dict, ratio: Optional[float]) -> list[str]:
    """Notes of the sampled row: samples and period, calls against the exact run's, and with the
    ratio to the uninstrumented run (W2) the top-10 agreement and the ratio's goal."""
    notes = [n for n in (sampled.sampling_note(res[LOPI_S]),) if n]
    same, text = sampled.calls_verdict(res[LOPI], res[LOPI_S])
    notes.append("calls per function = exact run's, every round" if same
                 else "calls per function NOT CHECKED against exact's (see correctness)" if same is None
                 else "calls per function DIFFER from exact's (see correctness)")
    if ratio is not None:
        notes.insert(0, sampled.ratio_goal(ratio))
        _, top = sampled.agreement(res[LOPI], res[LOPI_S])
        notes.append(top or "top-10 agreement not measured (no round with both reports)")
    return notes


def summarise(title: str, variants: list[h.Variant], res: dict, notes_extra: dict, expected: dict,
              floor_ns: Optional[float], goal: bool = False) -> tuple[list[list[str]], dict]:
    """Table rows for one workload, and {config: (x baseline, ns/call, x floor)} for stdout; goal:
    sampled time's goals beside its row (W2)."""
    rows, ratios = [], {}
    base = h.stats(res[BASE])
    for v in variants:
        runs = res[v.name]
        if v.skip_reason:
            rows.append([title, LABEL[v.name], "skipped", "-", "-", "-", "-", "-", "-", v.skip_reason])
            ratios[v.name] = v.skip_reason
            continue
        failed = h.failure_note(runs)
        if failed:
            rows.append([title, LABEL[v.name], "FAILED", "-", "-", "-", "-", "-", "-", failed])
            ratios[v.name] = "FAILED: " + failed
            continue
        st = h.stats(runs)
        notes: list[str] = []
        if v.name != BASE and (diff := h.output_mismatch(v.check, res[BASE], runs)):
            notes.append(diff)
        notes += h.after_errors(runs)
        calls, calls_s = h.median_calls(runs)
        ratio, wall, pcall, xfloor = "x1.00", "x1.00", "-", "-"
        if v.name != BASE and base:
            ratio = f"x{st.median / base.median:.2f}"
            wall = f"x{st.wall_median / base.wall_median:.2f}"
            missing = expected and not per_fn_of(runs).get(expected["fn"]) and v.name != GCC
            if missing:
                notes.append(f"{expected['fn']} NOT RECORDED (not instrumented): ns/call not comparable")
            elif calls:
                ns = (st.median - base.median) / calls * 1e9
                pcall = f"{ns:.1f} (best {(st.lo - base.lo) / calls * 1e9:.1f})"
                xfloor = f"x{ns / floor_ns:.2f}" if floor_ns else "-"
        sizes = [r.extra["data_bytes"] for r in runs if r.extra.get("data_bytes")]
        if sizes:
            notes.append(f"data {h.fmt_bytes(int(statistics.median(sizes)))}")
        if v.name in (*LOPI_SUFFIX, PREV):
            notes += h.lopi_report_notes(runs, expected)
            if v.name != LOPI_C and not any(r.extra.get("has_times") for r in runs):
                notes.append("report has NO times (total_ns)")
            if v.name == LOPI_S:
                notes += sampled_notes(res, st.median / base.median if goal and base else None)
            pc = next((r.extra["probe_cost"] for r in runs if "probe_cost" in r.extra), None)
            if pc and "pair_ns" in pc and "inner_ns" in pc:
                notes.append(f"report's probe cost estimate: {pc['pair_ns']:.1f} ns per call added to the caller, "
                             f"{pc['inner_ns']:.1f} ns inside the call")
        elif v.name in UFTRACE:
            per_fn = per_fn_of(runs) or None
            if expected and per_fn is not None and per_fn.get(expected["fn"]):
                got = per_fn.get(expected["fn"])
                notes.append(f"{expected['fn']}: {h.fmt_int(got)} {'=' if got == expected['calls'] else '≠'} "
                             f"expected {expected['calls']:,}")
            elif per_fn is not None:
                notes.append(f"report: {len(per_fn)} functions called")
        elif v.name == GCC:
            r0 = next((r for r in runs if "top" in r.extra), None)
            if r0:
                if expected:
                    ok = "=" if r0.extra["top"] == expected["calls"] else "≠"
                    notes.append(f"most-called function: {r0.extra['top']:,} {ok} expected {expected['fn']} "
                                 f"{expected['calls']:,}")
                notes.append(f"{r0.extra['functions']} functions called")
                if r0.extra["too_deep"] or r0.extra["mismatched"]:
                    notes.append(f"too_deep {r0.extra['too_deep']}, mismatched exits {r0.extra['mismatched']}")
        notes += notes_extra.get(v.name, [])
        notes.append(f"n={st.n}")
        rows.append([title, LABEL[v.name], h.fmt_range(st), ratio, h.fmt_time(st.wall_median), wall, calls_s,
                     pcall, xfloor, "; ".join(notes)])
        ratios[v.name] = (ratio, pcall, xfloor)
    return rows, ratios


FLOOR_DESC = {
    "plain": "call + ret (uninstrumented)",
    "rdtsc2": "`rdtsc` at entry and at exit, difference summed, call counted (**the floor**)",
    "rdtsc2_hijack": "same, exit reached by replacing the return address (shadow stack, exit stub)",
    "clock_gettime2": "`clock_gettime(CLOCK_MONOTONIC)` before and after the call (vDSO)",
}


def floor_table(runs: list[dict[str, float]]) -> tuple[list[str], dict, Optional[float]]:
    """(Markdown rows, medians, floor, ns). Each case's cost over the plain call is taken per run;
    the floor is the least rdtsc2 - plain of all runs: a lower bound, which other jobs on the
    machine can only raise."""
    vals: dict[str, list[float]] = {}
    over: dict[str, list[float]] = {}
    for r in runs:
        for k, ns in r.items():
            vals.setdefault(k, []).append(ns)
            if "plain" in r and k != "plain":
                over.setdefault(k, []).append(ns - r["plain"])
    med = {k: statistics.median(v) for k, v in vals.items()}
    rows = []
    for k, v in vals.items():
        o = over.get(k)
        over_s = f"{statistics.median(o):.2f} [{min(o):.2f}–{max(o):.2f}]" if o else "-"
        rows.append(f"| {FLOOR_DESC.get(k, k)} | {med[k]:.2f} [{min(v):.2f}–{max(v):.2f}] | {over_s} |")
    floor = min(over["rdtsc2"]) if over.get("rdtsc2") else None
    return rows, med, floor if floor and floor > 0 else None


def correctness(groups: list[tuple]) -> list[str]:
    """Markdown rows: per workload and configuration, whether its output equals the baseline's."""
    rows = []
    for title, vs, res, what in groups:
        base_out = {v.check(r.stdout) for v in vs if v.name == BASE for r in res[BASE] if r.ok}
        for v in vs:
            if v.name == BASE or v.skip_reason:
                continue
            runs = res[v.name]
            if h.failure_note(runs):
                verdict = "FAILED: " + h.failure_note(runs)
            else:
                got = {v.check(r.stdout) for r in runs if r.ok}
                verdict = "identical" if got == base_out and len(got) == 1 else "**DIFFERS**"
            rows.append(f"| {title} | {LABEL[v.name]} | {what} | {verdict} |")
    return rows


def calls_rows(measured: list[tuple]) -> list[str]:
    """Markdown rows: sampled time's and counting's calls per function against exact timing's, round
    by round (every configuration counts every call, so any difference is a failure)."""
    rows = []
    for _, title, _, vs, res, _ in measured:
        for v in vs:
            if v.name in (LOPI_S, LOPI_C) and not v.skip_reason:
                _, verdict = sampled.calls_verdict(res[LOPI], res[v.name])
                rows.append(f"| {title} | {LABEL[v.name]} | calls per function (`lopi report --format json`) "
                            f"vs {LABEL[LOPI]}, same round | {verdict} |")
    return rows


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_size_args(ap, fib="30 10", loop="30000000", size="10")
    ap.add_argument("--uftrace", default="pg,pfe,dyn",
                    help="uftrace configurations: any of pg,pfe,dyn, or none (default all three)")
    ap.add_argument("--lopi-args", default=" ".join(LOPI_PROBE),
                    help="options of `lopi rewrite` for the lopi column (default: --probe entry,exit)")
    ap.add_argument("--sample-hz", type=int,
                    help="--sample-hz of the sampled configuration (default: lopi's, 1000)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/timing.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    fib_n, fib_r = a.fib or ((28, 10) if a.quick else (30, 10))
    loop_n = a.loop or (10_000_000 if a.quick else 30_000_000)
    size = a.size or (5 if a.quick else 10)
    t_start = time.time()
    load_start = h.loadavg()
    modes = [] if a.uftrace == "none" else [f"uftrace-{m.strip()}" for m in a.uftrace.split(",")]
    bad = [m for m in modes if m not in UFTRACE]
    if bad:
        raise SystemExit(f"--uftrace: unknown {bad}")
    shutil.rmtree(BUILD / "data", ignore_errors=True)  # the previous run's data files
    BUILD.mkdir(parents=True, exist_ok=True)
    bins = build_all(a.sqlite_dir, modes)

    # which configurations run
    skip: dict[str, dict] = {"w1": {}, "w2": {}}
    uft_ver = h.tool_version(["uftrace", "--version"])
    for mode in UFTRACE:
        why = ("not selected (--uftrace)" if mode not in modes
               else "" if h.which("uftrace") else "uftrace not installed")
        if why:
            for wl in skip:
                skip[wl][mode] = why
    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    lopi_args = a.lopi_args.split()
    hz = ["--sample-hz", str(a.sample_hz)] if a.sample_hz else []
    configs = {LOPI: lopi_args, LOPI_S: [*lopi_args, "--time", "sampled", *hz], LOPI_C: ["--probe", "entry"]}
    for name, args in configs.items():
        LABEL[name] = f"lopi rewrite {' '.join(args)} (all functions)".replace("  ", " ")
    probe_why = lopi_support(lopi, "--probe", "--probe")
    lopi_why = {LOPI: probe_why if "--probe" in lopi_args else ("" if lopi else "lopi binary not found"),
                LOPI_S: probe_why or lopi_support(lopi, "--time", "--time sampled"),
                LOPI_C: probe_why}
    notes_extra: dict[str, dict[str, list[str]]] = {"w1": {}, "w2": {}}
    for wl in ("w1", "w2"):
        prog = bins[wl][BASE]
        for name, args in configs.items():
            if lopi_why[name]:
                skip[wl][name] = lopi_why[name]
                continue
            out, why, notes = h.rewrite_or_skip(lopi, prog, BUILD / (prog.name + LOPI_SUFFIX[name]), args)
            if out:
                bins[wl][name], notes_extra[wl][name] = out, notes
            else:
                skip[wl][name] = why
    lopi_skips = "; ".join(sorted({why for why in lopi_why.values() if why}))
    if lopi_skips:
        log(lopi_skips)
    against = h.previous_build()
    prev = against[0] if against else None
    if against:
        LABEL[PREV] = f"lopi at {against[1]} (--against) rewrite {' '.join(lopi_args)} (all functions)"
        h.rewrite_previous(prev, bins, BUILD, ".lopi-timing-prev", notes_extra, lopi_args)

    # The floor runs as one more member of every round, so it sees the load the tools see.
    floor_v = h.Variant(FLOOR, [str(bins["floor"]), str(FLOOR_CALLS)],
                        h.regex_seconds(r"^rdtsc2 ns_per_call=([0-9.]+)", 1e-9),
                        after=lambda idx, out, err, env: {"floor": h.floor_values(out)})

    w2_title = f"W2 speedtest1 --memdb --size {size}"
    groups = [(key, title, "w1", argv, h.HOT_NS, h.w1_check, fn)
              for key, title, argv, fn in h.w1_groups((fib_n, fib_r), loop_n)]
    groups.append(("w2", w2_title, "w2", ["--memdb", "--size", str(size)], h.TOTAL, h.w2_check, None))
    all_res: dict[str, dict] = {}
    rows: list[list[str]] = []
    ratios: dict[str, dict] = {}
    checked: list[tuple] = []
    counted: dict[str, dict] = {}
    measured = []
    against_rows: list[str] = []
    for key, title, wl, argv, metric, check, fn in groups:
        log(f"{title}: n={n} (+1 warm-up), interleaved, with the floor")
        vs = make_variants(key, argv, bins[wl], skip[wl], lopi, metric, check, counted.setdefault(key, {}), prev=prev)
        res = h.run_interleaved([*vs, floor_v], n, warmup=1, log=log)
        all_res[title] = res
        if against:
            against_rows += h.against_rows(title, res, BASE, LOPI, against[1])
        measured.append((key, title, wl, vs, res, h.w1_expected(res[BASE], fn) if fn else {}))
        checked.append((title, vs, res, "`calls_expected=` and `result=` of every run" if fn
                        else "test names and TOTAL line of every timed run (times removed)"))
        if wl == "w2":
            # speedtest1 --verify hashes every query result: one more run of each configuration
            log(f"{title} --verify: correctness runs")
            vv = make_variants(key + "-verify", [*argv, "--verify"], bins[wl], skip[wl], lopi, metric,
                               lambda out: (re.findall(r"^Verification Hash: .*$", out, re.M) or [None])[0],
                               {}, count=False)
            vres = h.run_interleaved(vv, 1, warmup=0, log=log)
            all_res[title + " --verify"] = vres
            checked.append((title + " --verify", vv, vres, "`Verification Hash:` (hash of every query result)"))

    for d in (BUILD / "data").glob("*/uftrace-*/uftrace.data*"):  # the --verify runs' data
        shutil.rmtree(d, ignore_errors=True)

    floor_runs = [r for *_, res, _ in measured for r in res[FLOOR] if r.ok and r.round >= 0]
    floor_rows, floor_med, floor_ns = floor_table([r.extra["floor"] for r in floor_runs if r.extra.get("floor")])
    floor_failed = [f"| floor: {h.failure_note(res[FLOOR])} | | |"
                    for *_, res, _ in measured if h.failure_note(res[FLOOR])]
    entries: list[dict] = []
    goals: list[tuple] = []
    for key, title, wl, vs, res, expected in measured:
        r, ratios[title] = summarise(title, vs, res, notes_extra[wl], expected, floor_ns, goal=wl == "w2")
        rows += r
        for e in h.summary_entries("timing", key, title, vs, res, LABEL, TOOLS, expected):
            if e["config"] == LOPI_S and e["status"] == "ok":
                if sampled.calls_verdict(res[LOPI], res[LOPI_S])[0] is False:
                    e["output"] = "calls DIFFER from exact timing's"
                if wl == "w2":
                    e["goal"] = {"ratio_max": sampled.GOAL_RATIO, "what": sampled.GOAL}
            entries.append(e)
        if wl == "w2":
            goals += sampled.goals(title, res, BASE, LOPI_S, LOPI)

    header = ["workload", "config", "time median [min–max]", "x uninstr.", "process wall", "wall x",
              "calls", "overhead ns/call", "x floor", "notes"]
    table = h.markdown_table(header, rows)
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_info + (f"; {lopi_skips}" if lopi_skips else "")),
        ("uftrace", uft_ver),
        ("sqlite", h.sqlite_source_line(a.sqlite_dir)),
        *h.load_and_time(load_start, t_start),
    ])
    md = [
        *h.results_head("Cost of timing every call", "bench/timing/run.sh", a.quick, machine),
        "",
        "## Method",
        "",
        f"- W1 = `bench/workloads/w1.c` built with `gcc {' '.join(h.W1_FLAGS)}`; time = the hot section's own "
        "CLOCK_MONOTONIC time (`hot_ns=`). W2 = sqlite `speedtest1` + amalgamation built with "
        f"`gcc {' '.join(h.W2_FLAGS)}`; time = its `TOTAL`. Start-up, rewriting and writing data at exit are "
        "excluded from `time`; `process wall` is the whole process (for uftrace: `uftrace record` itself, "
        "start-up and flushing of its buffers included).",
        "- Configurations: uninstrumented; `lopi rewrite PROG -o OUT " + " ".join(lopi_args) + "` (all functions, "
        "data to `$LOPI_OUTPUT`; exact timing, the clock read at every entry and exit), the same with "
        "`" + " ".join(configs[LOPI_S][len(lopi_args):]) + "` (calls and calling contexts exact, time from a "
        "per-thread CPU-time timer) and `lopi rewrite PROG -o OUT --probe entry` (counting only); "
        "`uftrace record -d DIR` with its defaults (every function, no filter or "
        "depth limit set; library calls and sched events recorded as it does by default) on the same source "
        "built with `-pg`, on it built with `-fpatchable-function-entry=5` and `-P .` (patch every function "
        "at start-up), and on the unmodified binary with `-P .`; the same source built with "
        "`-finstrument-functions` and linked with `bench/timing/timing_hooks.c` (per-thread shadow stack, "
        "`rdtsc` at entry and exit, per-thread hash table of calls / inclusive / self time, dumped at exit).",
        f"- Runs: configurations of one workload interleaved round-robin, order rotated each round, one "
        f"unrecorded warm-up round, n={n} recorded runs each.",
        "- calls: what each tool counted itself: lopi = sum of `calls` in `lopi report DATA --format json` "
        "(binary-level entries); uftrace = sum of `Calls` in `uftrace report` of the first run (kernel "
        "`linux:` events left out; binary-level functions plus library calls through the PLT); gcc = the "
        "hook's count (source-level entries, including those of inlined functions: about twice as many "
        "on W2). Overhead ns/call = (median − uninstrumented median) / calls; `best` = the same with the "
        "fastest runs (min − uninstrumented min), less sensitive to other jobs on the machine.",
        "- x floor = overhead ns/call (median) / floor, floor = least `rdtsc2` − `plain` of "
        "`bench/timing/floor.c` below (two `rdtsc` per call and the bookkeeping a timed call cannot avoid), "
        "run as one more member of every recorded round so that it sees the same machine load.",
        "- Sampled time vs exact timing, per recorded round (the two ran in the same round): calls per function "
        "must be equal (correctness section); on W2, the top 10 functions by inclusive time (`total_ns` of "
        "`lopi report --format json`, summed by name) of the sampled report against the exact report's, as "
        "k/10, with the samples taken and the period the report states; a time of n samples is within about "
        "2√n samples (95%, the report's own statement).",
        "",
        "## Results",
        "",
        table,
        "",
        *(["## Sampled time beside its goals (issue 27, goal 5: shown, not asserted)", "",
           "| workload | what | goal | measured |", "|---|---|---|---|", *(f"| {' | '.join(g)} |" for g in goals),
           ""] if goals else []),
        *([f"## Against {against[1]} (`bench/run.sh --against {against[1]}`: the same probes by that build, "
           "in the same rounds)", "", *h.AGAINST_HEAD, *against_rows, ""] if against else []),
        f"## Floor on this machine (`bench/timing/floor.c`, {FLOOR_CALLS:,} calls of one function per case, "
        f"run once in every recorded round of every workload: {len(floor_runs)} runs)",
        "",
        "| case | ns/call median [min–max] | ns/call over plain call, median [min–max] |",
        "|---|---|---|",
        *floor_rows,
        *floor_failed,
        "",
        f"Floor used above: **{floor_ns:.2f} ns** per timed call (least `rdtsc2` − `plain` of all runs)."
        if floor_ns else "Floor: not measured.",
        "",
        "## Correctness: output of each configuration vs the uninstrumented program",
        "",
        "| workload | config | compared | result |",
        "|---|---|---|---|",
        *correctness(checked),
        "",
        "## Correctness: calls per function of sampled time and counting vs exact timing",
        "",
        "| workload | config | compared | result |",
        "|---|---|---|---|",
        *calls_rows(measured),
        "",
    ]
    h.write_results(a.out, md, "timing", {"n": n, "quick": a.quick, "floor_median_ns": floor_med, "floor_ns": floor_ns,
                                          "lopi": lopi_info, "lopi_args": lopi_args, "lopi_skip": lopi_skips,
                                          "uftrace": uft_ver}, all_res, machine, entries, a.quick, floor_ns=floor_ns)
    print("\nRatios (x uninstrumented / overhead ns per call / x floor"
          + (f" = {floor_ns:.2f} ns" if floor_ns else "") + "):")
    for title, per in ratios.items():
        print(f"  {title}")
        for name, val in per.items():
            if name == BASE:
                continue
            shown = val if isinstance(val, str) else f"{val[0]:>8}  {val[1]:>20} ns/call  {val[2]:>7}"
            print(f"    {LABEL[name]:<64} {shown}")
    if goals:
        print("Sampled time beside its goals (" + sampled.GOAL + ", shown, not asserted):")
        for title, what, goal, measured in goals:
            print(f"  {title}: {what}: {measured} (goal {goal})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
