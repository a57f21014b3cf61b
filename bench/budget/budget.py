#!/usr/bin/env python3
"""The perturbation budget on sqlite's speedtest1 (W2, every function probed).

Configurations, interleaved: uninstrumented; `lopi rewrite --probe entry` (counting only);
`--probe entry,exit` (every function timed); `--probe entry,exit --budget B` for each budget
asked. For the timed configurations the table also says how many functions the budget switched
to counting and how many of the full-timing run's top functions by inclusive time the report
still names among its own top ones (same set, order aside).

Run through run.sh; `budget.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "budget"
BASE, COUNT, TIMED = "baseline", "lopi-entry", "lopi-timed"
TOP = 10


def budget_name(b: str) -> str:
    return f"lopi-budget-{b.rstrip('%')}"


def keep_profile(rep: dict) -> dict:
    """The report's top functions by inclusive time and the budget's switches."""
    timed = [f for f in rep["functions"] if f.get("total_ns") is not None]
    timed.sort(key=lambda f: -f["total_ns"])
    threads = (rep.get("timing") or {}).get("threads", [])
    switched = sum(len(t.get("switches", [])) for t in threads)
    budgets = [t["budget"] for t in threads if t.get("budget")]
    cost = 100 * sum(b["timing_ns"] for b in budgets) / max(1, sum(b["run_ns"] for b in budgets)) if budgets else None
    return {"top": [f["name"] for f in timed[:TOP]], "switched": switched, "timing_cost": cost}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sqlite-dir", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="n=3, --size 10")
    ap.add_argument("-n", type=int, help="recorded runs per configuration (default 5, quick 3)")
    ap.add_argument("--size", type=int, help="speedtest1 --size (default 25, quick 10)")
    ap.add_argument("--budgets", default="5%,2%", help="budgets to run, comma separated (default 5%%,2%%)")
    ap.add_argument("--lopi", type=Path, default=REPO / "target" / "release" / "lopi")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "budget.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    size = a.size or (10 if a.quick else 25)
    budgets = [b.strip() for b in a.budgets.split(",") if b.strip()]
    t_start, load_start = time.time(), h.loadavg()

    BUILD.mkdir(parents=True, exist_ok=True)
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    base = h.build_parallel({BASE: h.w2_job("speedtest1", a.sqlite_dir)})[BASE]
    configs = {COUNT: ["--probe", "entry"], TIMED: ["--probe", "entry,exit"]}
    for b in budgets:
        configs[budget_name(b)] = ["--probe", "entry,exit", "--budget", b]
    bins = {"w2": {BASE: base}}
    skip, rnotes = h.rewrite_configs(lopi, a.lopi, bins, configs, BUILD)

    argv_tail = ["--memdb", "--size", str(size)]
    variants = [h.Variant(BASE, [str(base), *argv_tail], h.TOTAL, check=h.w2_check)]
    for cfg in configs:
        before, after = h.lopi_data_hooks(lopi, BUILD / "data" / cfg, keep_profile)
        variants.append(h.Variant(cfg, [str(bins["w2"].get(cfg, "missing")), *argv_tail], h.TOTAL, before=before,
                                  after=after, check=h.w2_check, skip_reason=skip["w2"].get(cfg, "")))
    res = h.run_interleaved(variants, n)

    base_st = h.stats(res[BASE])
    full_top = next((r.extra["top"] for r in res.get(TIMED, []) if "top" in r.extra), [])
    rows = []
    for v in variants:
        runs = res.get(v.name, [])
        st = h.stats(runs)
        label = " ".join(configs.get(v.name, ["(uninstrumented)"]))
        if v.skip_reason or not st:
            rows.append([label, "skipped: " + (v.skip_reason or h.failure_note(runs) or "no run"), "", "", "", "", "", ""])
            continue
        ratio = f"x{st.median / base_st.median:.2f}" if base_st else "-"
        extra = next((r.extra for r in runs if "calls" in r.extra), {})
        calls = h.fmt_int(extra.get("calls")) if extra else "-"
        switched = str(statistics.median(r.extra["switched"] for r in runs if "switched" in r.extra)) \
            if v.name.startswith("lopi-budget") else "-"
        costs = [r.extra["timing_cost"] for r in runs if r.extra.get("timing_cost") is not None]
        cost = f"{statistics.median(costs):.1f}%" if costs else "-"
        if v.name == TIMED or v.name.startswith("lopi-budget"):
            tops = [set(r.extra["top"]) for r in runs if "top" in r.extra]
            shared = min((len(t & set(full_top)) for t in tops), default=0)
            top = f"{shared}/{len(full_top)}"
        else:
            top = "-"
        mismatch = h.output_mismatch(v.check, res[BASE], runs)
        notes = "; ".join(filter(None, [mismatch, *rnotes["w2"].get(v.name, []), f"n={len(runs)}"]))
        rows.append([label, h.fmt_range(st), ratio, calls, switched, cost, top, notes])

    machine = h.machine_info(REPO, [("lopi binary", lopi_line), ("sqlite", h.sqlite_source_line(a.sqlite_dir))])
    md = h.results_head("The perturbation budget on speedtest1", "bench/budget/run.sh", a.quick, machine)
    md += [f"- load average: {load_start} at start, {h.loadavg()} at end (2 CPUs: other jobs add noise)",
           f"- run time: {time.time() - t_start:.0f} s", "",
           "## Method", "",
           f"- W2 = sqlite `speedtest1 --memdb --size {size}` built with `gcc {' '.join(h.W2_FLAGS)}`; time = its `TOTAL`.",
           "- Configurations interleaved round-robin after a warm-up round; median [min-max] of the recorded runs; "
           "ratio = median / uninstrumented median.",
           f"- top {TOP}: of the full-timing run's {TOP} functions with the most inclusive time, how many each "
           "budgeted run also has among its own top ones (the worst of its runs).",
           "- timing cost: what the budgeted run's timed calls cost (each one call's probes, as calibrated) in % of its "
           "run time (`lopi report --budget`), median of the runs.",
           "", "## Results", "",
           h.markdown_table(["configuration", "TOTAL median [min-max]", "x uninstr.", "calls", "switched",
                             "timing cost", f"top {TOP} kept", "notes"], rows),
           "", f"Full-timing top {TOP} by inclusive time: " + ", ".join(f"`{f}`" for f in full_top), ""]
    h.write_results(a.out, md, "budget", {"size": size, "n": n}, {"w2": res}, machine, [], a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
