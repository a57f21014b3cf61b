#!/usr/bin/env python3
"""bench/results/summary.md and overhead.png from the benchmarks bench/run.sh just ran.

Reads bench/results/<bench>.summary.json of entry-count, timing, zstd and anchors, takes only those
written by this run (their run id = --run-id; a benchmark that failed or did not run is listed as
such, never filled in from an earlier run), and writes one table (workload x configuration: median
[min-max], ratio to the uninstrumented program, calls, ns per call, output check) with the machine
and versions, and a chart of the per-call overhead by tool (log scale).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as h  # noqa: E402

RESULTS = h.REPO / "bench" / "results"
BENCHES = [
    ("entry-count", "counting probes: lopi entry vs gcc -finstrument-functions"),
    ("timing", "timing every call: lopi entry+exit vs uftrace vs a gcc hook"),
    ("zstd", "zstd, source build and Debian's stripped binary"),
    ("anchors", "gprof, callgrind, bpftrace, frida"),
]
KIND_ORDER = list(dict.fromkeys(h.KIND.values()))
TOOL_ORDER = [t for k, t in h.TOOL.items() if k != "base"]


def load(run_id: str) -> tuple[dict[str, dict], dict[str, str]]:
    """({bench: its summary json}, {bench: why it is missing})."""
    got, missing = {}, {}
    for bench, _ in BENCHES:
        path = RESULTS / f"{bench}.summary.json"
        if not path.exists():
            missing[bench] = "no results (the benchmark did not finish; see its log)"
            continue
        data = json.loads(path.read_text())
        if data.get("run_id") != run_id:
            missing[bench] = (f"its last results ({data.get('generated', '?')}) are from another run: "
                              "the benchmark failed in this one (see its log)")
            continue
        got[bench] = data
    return got, missing


def machine_section(got: dict[str, dict]) -> list[str]:
    """Lines every benchmark agrees on once; per-benchmark values (load, run time, ...) per benchmark."""
    values: dict[str, dict[str, str]] = {}
    for bench, data in got.items():
        for k, v in data["machine"]:
            values.setdefault(k, {})[bench] = v
    out = []
    for k, per in values.items():
        distinct = set(per.values())
        if len(distinct) == 1:
            out.append(f"- {k}: {distinct.pop()}")
        else:
            out.append(f"- {k}: " + "; ".join(f"{b}: {v}" for b, v in per.items()))
    return out


def chart_entries(got: dict[str, dict]) -> dict[tuple[str, str], dict]:
    """{(kind, tool): entry} with ns/call, the first benchmark in BENCHES order that measured it."""
    picked: dict[tuple[str, str], dict] = {}
    for bench, _ in BENCHES:
        for e in got.get(bench, {}).get("entries", []):
            if e["status"] == "ok" and not e["is_baseline"] and "ns_per_call" in e:
                picked.setdefault((e["kind"], e["tool"]), e)
    return picked


def draw(picked: dict[tuple[str, str], dict], out: Path, title: str) -> Optional[str]:
    """overhead.png; returns why not when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as e:
        return f"matplotlib not available ({e})"
    kinds = [k for k in KIND_ORDER if any(pk == k for pk, _ in picked)]
    tools = [t for t in TOOL_ORDER if any(pt == t for _, pt in picked)]
    cmap = plt.get_cmap("tab20")
    colours = {t: cmap(i % 20) for i, t in enumerate(tools)}
    fig, ax = plt.subplots(figsize=(max(10, 2.3 * len(kinds) + 4), 7))
    width = 0.85 / max(1, max(sum((k, t) in picked for t in tools) for k in kinds) if kinds else 1)
    positive = [e["ns_per_call"] for e in picked.values() if e["ns_per_call"] > 0]
    floor = min(positive) / 3 if positive else 0.1
    for i, kind in enumerate(kinds):
        present = [t for t in tools if (kind, t) in picked]
        for j, tool in enumerate(present):
            e = picked[(kind, tool)]
            x = i + (j - (len(present) - 1) / 2) * width
            ns = e["ns_per_call"]
            noisy = e.get("within_spread", False)
            if ns > 0:
                ax.bar(x, ns, width * 0.92, color=colours[tool], hatch="//" if noisy else None,
                       edgecolor="black" if noisy else colours[tool], linewidth=0.4)
                ax.text(x, ns * 1.08, h.fmt_ns(ns), ha="center", va="bottom", fontsize=6.5, rotation=90)
            else:
                ax.text(x, floor * 1.1, "≤0", ha="center", va="bottom", fontsize=6.5, rotation=90, color=colours[tool])
    handles = [Patch(facecolor=colours[t], label=t) for t in tools]
    handles.append(Patch(facecolor="white", hatch="//", edgecolor="black",
                         label="within the baseline's\nrun-to-run spread"))
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels(kinds, fontsize=9)
    ax.set_ylabel("overhead per call, ns (log scale)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-id", required=True, help="$LOPI_BENCH_RUN_ID of the run to summarise")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--elapsed", type=float, help="seconds the whole run took")
    ap.add_argument("--load", default="", help="load average at the start of the run")
    ap.add_argument("--out", type=Path, default=RESULTS / "summary.md")
    a = ap.parse_args()

    got, missing = load(a.run_id)
    quick = " --quick" if a.quick else ""
    now = datetime.datetime.now()
    picked = chart_entries(got)
    png = a.out.with_name("overhead.png")
    chart_title = (f"lopi benchmarks{' (quick)' if a.quick else ''}: overhead per call by tool, "
                   f"{now:%Y-%m-%d %H:%M}, {h.cpu_model()}")
    no_chart = draw(picked, png, chart_title)

    rows = []
    for bench, _ in BENCHES:
        for e in got.get(bench, {}).get("entries", []):
            rows.append([f"[{bench}]({bench}.md)", e["workload"], e["tool"] if not e["is_baseline"] else "uninstrumented",
                         *h.entry_cells(e, brief=True)])
    header = ["benchmark", "workload", "tool", "time median [min–max]", "x uninstr.", "calls", "overhead ns/call",
              "output", "notes"]
    skipped = sorted({(e["tool"], e.get("reason", "")) for data in got.values() for e in data["entries"]
                      if e["status"] != "ok"})
    oracle = got.get("anchors", {}).get("oracle", [])
    elapsed = f"{a.elapsed:.0f} s" if a.elapsed else "?"
    ns = sorted({e["n"] for data in got.values() for e in data["entries"] if e["status"] == "ok"})
    runs = f"n={'/'.join(map(str, ns))} recorded runs each after one warm-up round" if ns else "no runs"
    md = [
        "# lopi benchmarks: summary" + (" (quick)" if a.quick else ""),
        "",
        f"Generated by `bench/run.sh{quick}` on {now:%Y-%m-%d %H:%M} in {elapsed} (run `{a.run_id}`); every "
        "figure below comes from that run, from the per-benchmark tables it wrote next to this file "
        "(linked in the first column, with their method and notes).",
        "",
        "## Machine and versions",
        "",
        *machine_section(got),
        *([f"- load average at the start of the run: {a.load}"] if a.load else []),
        "",
        "## Overhead per call",
        "",
        ("![overhead per call by tool, log scale](overhead.png)" if not no_chart else f"No chart: {no_chart}."),
        "",
        "Per workload, one bar per tool: (median time − uninstrumented median) / calls, calls as counted by the "
        "tool itself; where two benchmarks measured the same tool on the same workload, the first in this order: "
        + ", ".join(b for b, _ in BENCHES) + ". Hatched: the tool's fastest run was not slower than the "
        "uninstrumented program's slowest (the difference is within run-to-run noise). zstd's times are whole "
        "processes: fixed start-up costs (uftrace's, lopi's timing calibration) over few calls.",
        "",
        "## All configurations",
        "",
        "Time: W1 = its hot section (`hot_ns=`), speedtest1 = its `TOTAL`, zstd = the whole process's wall time "
        "(so a tool's start-up and exit costs are spread over zstd's few calls). Each workload's configurations "
        f"ran interleaved with its own uninstrumented baseline, {runs}.",
        "",
        h.markdown_table(header, rows),
        "",
    ]
    if missing:
        md += ["## Benchmarks without results in this run", "",
               *(f"- {b}: {why}" for b, why in missing.items()), ""]
    if skipped:
        md += ["## Skipped or failed configurations", "", *(f"- {t}: {why}" for t, why in skipped), ""]
    if oracle:
        md += ["## Call counts: lopi vs callgrind (the exact oracle), from bench/anchors", "",
               "| workload | functions | same count | calls (lopi) | calls (callgrind) | differences | "
               "not probed by lopi |", "|---|---|---|---|---|---|---|", *oracle, ""]
    text = "\n".join(md)
    a.out.write_text(text)
    print(text)
    h.log(f"wrote {a.out}" + ("" if no_chart else f" and {png}"))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
