"""The locks benchmark's tables: the per-pair table of the micro-benchmark, the run table of the
other workloads, and the notes on the locks the tools saw."""

from __future__ import annotations

import statistics

import harness as h
from locks_tools import BASE, BPF, DRD, LABEL, LOPI
from locks_workloads import Workload


def recorded(runs: list[h.RunResult]) -> list[h.RunResult]:
    return [r for r in runs if r.ok and r.round >= 0]


def values(runs: list[h.RunResult], key: str) -> list[int]:
    return sorted({r.extra[key] for r in recorded(runs) if r.extra.get(key) is not None})


def fmt_values(vals: list[int]) -> str:
    return "-" if not vals else h.fmt_int(vals[0]) if len(vals) == 1 else f"{vals[0]:,}–{vals[-1]:,}"


def run_notes(wl: Workload, v: h.Variant, runs: list[h.RunResult], base_out: set, said: dict,
              base_runs: list[h.RunResult]) -> list[str]:
    """Why a row is empty, or what the runs showed beyond the figures."""
    if v.skip_reason:
        return ["skipped: " + v.skip_reason]
    notes = [h.failure_note(runs) or ""] + h.after_errors(runs)
    outs = {r.extra.get("output") for r in recorded(runs)}
    if v.name != BASE and base_out and outs != base_out:
        notes.append(f"OUTPUT DIFFERS from plain's: {sorted(map(str, outs))}")
    if v.name in wl.solo:
        notes.append("run alone after the interleaved rounds, no warm-up")
    st, base = h.stats(runs), h.stats(base_runs)
    same_work = wl.key != "pair" or v.name == LOPI  # pair: drd and bpftrace make fewer pairs
    if v.name != BASE and same_work and st and base and st.lo <= base.hi:
        notes.insert(0, "within plain's run-to-run spread (fastest run ≤ plain's slowest)")
    if v.name == LOPI and (sizes := values(runs, "data_bytes")):
        notes.append(f"data file {h.fmt_bytes(int(statistics.median(sizes)))}")
    if v.name == DRD:
        errs, held = values(runs, "drd_errors"), values(runs, "drd_held_too_long")
        if errs:
            notes.append(f"drd reported {fmt_values(errs)} errors (data races, lock misuse)")
        if held and held[-1]:
            notes.append(f"{fmt_values(held)} locks held > 10 ms")
    if v.name in said:
        notes.append(said[v.name])
    return [x for x in notes if x] + [f"n={len(recorded(runs))}"]


def base_outputs(res: dict) -> set:
    return {r.extra.get("output") for r in recorded(res[BASE])}


def output_cell(v: h.Variant, runs: list[h.RunResult], base_out: set) -> str:
    if v.name == BASE:
        return fmt_out(base_out)
    outs = {r.extra.get("output") for r in recorded(runs)}
    return "identical" if outs == base_out else "DIFFERS"


def fmt_out(outs: set) -> str:
    return " / ".join(sorted(map(str, outs))) if outs else "-"


def micro_table(wl: Workload, variants: list[h.Variant], res: dict, pairs: dict, said: dict
                ) -> tuple[list[str], dict]:
    """The per-pair table and {config: ns added per pair}."""
    per = {}
    for v in variants:
        st = h.stats(res[v.name])
        if st and not v.skip_reason:
            k = 1e9 / pairs[v.name]
            per[v.name] = h.Stats(st.n, st.median * k, st.lo * k, st.hi * k, st.wall_median)
    base = per.get(BASE)
    added = {cfg: s.median - base.median for cfg, s in per.items() if base and cfg != BASE}
    base_out = base_outputs(res)
    rows = []
    for v in variants:
        s, runs = per.get(v.name), res[v.name]
        notes = "; ".join(run_notes(wl, v, runs, {None} if v.name == BASE else base_out, said, res[BASE]))
        if not s or not base:
            rows.append([LABEL[v.name], h.fmt_int(pairs[v.name]), "-", "-", "-", "-", "-", notes])
            continue
        counted = values(runs, "busiest_lock") if v.name in (LOPI, BPF) else []
        if counted and counted != [pairs[v.name]]:
            notes += f"; COUNTED {fmt_values(counted)} acquisitions of the pair's lock, not {pairs[v.name]:,}"
        rel = (f"{added[v.name] / added[LOPI]:,.0f}x" if v.name not in (BASE, LOPI) and added.get(LOPI, 0) > 0
               else "1x" if v.name == LOPI else "-")
        rows.append([LABEL[v.name], h.fmt_int(pairs[v.name]), f"{s.median:,.1f} [{s.lo:,.1f}–{s.hi:,.1f}]",
                     "-" if v.name == BASE else f"{added[v.name]:,.1f}",
                     "x1.00" if v.name == BASE else f"x{s.median / base.median:.2f}", rel,
                     fmt_values(counted) if v.name in (LOPI, BPF) else "-", notes])
    header = ["variant", "pairs", "ns per pair median [min–max]", "ns added per pair", "x plain",
              "added / lopi's added", "acquisitions of the pair's lock counted by the tool", "notes"]
    return [h.markdown_table(header, rows)], added


def run_table(wl: Workload, variants: list[h.Variant], res: dict, said: dict) -> list[str]:
    base = h.stats(res[BASE])
    base_out = base_outputs(res)
    rows = []
    for v in variants:
        runs = res[v.name]
        st = h.stats(runs)
        notes = "; ".join(run_notes(wl, v, runs, base_out, said, res[BASE]))
        if v.skip_reason or not st:
            rows.append([LABEL[v.name], "-", "-", "-", "-", "-", "-", notes])
            continue
        calls, calls_text = h.median_calls(runs) if v.name in (LOPI, BPF) else (None, "-")
        ratio = f"x{st.median / base.median:.2f}" if base else "-"
        added = "-"
        if base and calls and v.name != BASE and wl.per_acquisition:
            added = h.fmt_ns((st.median - base.median) / calls * 1e9)
        rows.append([LABEL[v.name], h.fmt_range(st), ratio, h.fmt_time(st.wall_median), calls_text, added,
                     output_cell(v, runs, base_out), notes])
    header = ["variant", f"{wl.metric_name} median [min–max]", "x plain", "process wall median",
              "lock acquisitions counted", "ns added per acquisition", "output", "notes"]
    return [h.markdown_table(header, rows)]


def fmt_lock(lk: dict) -> str:
    kind = f" ({lk['kind']})" if "kind" in lk else ""
    cont = f", contended {h.fmt_int(lk.get('contended'))}" if "contended" in lk else ""
    return (f"`{lk.get('name', '?')}`{kind}: acquisitions {h.fmt_int(lk.get('acquisitions'))}{cont}, "
            f"wait {lk.get('wait_ns', 0) / 1e6:,.3f} ms, hold {lk.get('hold_ns', 0) / 1e6:,.3f} ms")


def lock_notes(wl: Workload, variants: list[h.Variant], res: dict) -> list[str]:
    """lopi's top locks (its first recorded run's report) and bpftrace's for comparison; the
    plausibility of their counts against what the program did."""
    out = []
    for cfg in (LOPI, BPF):
        runs = [r for r in recorded(res.get(cfg, [])) if "top3" in r.extra]
        if not runs:
            continue
        r = runs[0]
        what = ("lopi's report (`lopi report DATA --locks --format json`)" if cfg == LOPI
                else "bpftrace's maps (pthread_mutex_lock only)")
        out.append(f"- {what}, round {r.round + 1}: {r.extra['locks']:,} locks, {r.extra['calls']:,} acquisitions"
                   + (f" ({r.extra['mutex_acquisitions']:,} of mutexes)" if cfg == LOPI else "")
                   + "; top 3 by wait:")
        out += [f"  - {fmt_lock(lk)}" for lk in r.extra["top3"]]
    if wl.key in ("sysbench-mutex", "sysbench-threads", "pair"):
        for cfg in (LOPI, BPF):
            runs = [r for r in recorded(res.get(cfg, [])) if "busiest_sum" in r.extra]
            if not runs:
                continue
            got = sorted({r.extra["busiest_sum"] for r in runs})
            exp = sorted({r.extra["expected"] for r in runs if r.extra.get("expected") is not None})
            what = {"sysbench-mutex": "sysbench's events x --mutex-locks",
                    "sysbench-threads": "sysbench's events x --thread-yields",
                    "pair": "the program's pairs"}[wl.key]
            which = "the busiest lock" if wl.busiest == 1 else f"the {wl.busiest} busiest locks"
            out.append(f"- Plausibility, {cfg}: acquisitions of {which} {fmt_values(got)} "
                       f"{'=' if got == exp else '≠'} {what} {fmt_values(exp)}")
    return out
