"""Sampled time (`lopi rewrite --probe entry,exit --time sampled`) beside exact timing in
bench/timing: what the two configurations' reports are compared on, run by run in the same round.

* Calls: both count every call, so the sampled run's calls per function must equal the exact run's
  exactly; anything else is a failure row of the correctness section.
* Time: the top 10 functions by inclusive (total) time of the sampled report against the exact
  report's, as k/10, with the samples taken and the stated period (issue 27, goal 5: 8/10 at least,
  and sampled speedtest1 at most x1.3 of the uninstrumented program; shown, not asserted).
"""

from __future__ import annotations

import math
import statistics
from typing import Optional

import harness as h

TOP = 10
GOAL_RATIO = 1.3  # issue 27, goal 5: speedtest1 with sampled time <= x1.3 of uninstrumented
GOAL_TOP = 8  # ... and 8 of its top 10 by inclusive time those of exact timing
GOAL = "issue 27, goal 5"


def keep(rep: dict) -> dict:
    """What a timing report adds for this comparison: the top functions by inclusive time (summed
    over modules by name, as lopi_report sums calls) and, for sampled time, the samples taken."""
    totals: dict[str, float] = {}
    for f in rep.get("functions", []):
        if f.get("total_ns") is not None:
            totals[f["name"]] = totals.get(f["name"], 0.0) + float(f["total_ns"])
    kept: dict = {"top_inclusive": sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]}
    timing = rep.get("timing") if isinstance(rep.get("timing"), dict) else {}
    sampling = [t["sampling"] for t in timing.get("threads", []) if isinstance(t, dict) and t.get("sampling")]
    if sampling:
        kept["sampling"] = {"samples": sum(int(s["samples"]) for s in sampling),
                            "period_ns": float(sampling[0]["period_ns"]),
                            "timer_errors": sorted({str(s["timer_error"]) for s in sampling if s.get("timer_error")})}
    return kept


def same_rounds(exact: list[h.RunResult], sampled: list[h.RunResult], what: str) -> list[tuple]:
    """(round, exact run, sampled run) of every recorded round in which both ran and carry `what`."""
    by_round = {r.round: r for r in exact if r.ok and r.round >= 0 and what in r.extra}
    return [(s.round, by_round[s.round], s) for s in sampled
            if s.ok and s.round >= 0 and what in s.extra and s.round in by_round]


def sampling_note(runs: list[h.RunResult]) -> Optional[str]:
    """`4,320 samples [4,310–4,400] of 1000 us of CPU time per thread` (the recorded rounds)."""
    got = [r.extra["sampling"] for r in runs if r.ok and r.round >= 0 and "sampling" in r.extra]
    if not got:
        return None
    n = [s["samples"] for s in got]
    spread = f" [{min(n):,}–{max(n):,}]" if min(n) != max(n) else ""
    note = (f"{int(statistics.median(n)):,} samples{spread} of {got[0]['period_ns'] / 1e3:.0f} us of each "
            "thread's CPU time (stated period)")
    errors = sorted({e for s in got for e in s["timer_errors"]})
    return note + (f"; TIMER ERROR: {', '.join(errors)}" if errors else "")


def agreement(exact: list[h.RunResult], sampled: list[h.RunResult]) -> tuple[list[int], Optional[str]]:
    """([k of every round], note): how many of the sampled run's top 10 by inclusive time are in the
    exact run's of the same round, and the 95% error of the sampled 10th function's time."""
    pairs = same_rounds(exact, sampled, "top_inclusive")
    if not pairs:
        return [], None
    ks, tenth = [], []
    for _, e, s in pairs:
        top_e = {name for name, _ in e.extra["top_inclusive"]}
        top_s = s.extra["top_inclusive"]
        ks.append(len(top_e & {name for name, _ in top_s}))
        period = s.extra.get("sampling", {}).get("period_ns")
        if period and len(top_s) == TOP:
            tenth.append(top_s[-1][1] / period)
    per_round = ", ".join(f"{k}/{TOP}" for k in ks)
    note = (f"top {TOP} by inclusive time = exact run's (same round): {per_round} "
            f"(goal ≥ {GOAL_TOP}/{TOP}, {GOAL})")
    if tenth:
        n = statistics.median(tenth)
        if n > 0:
            note += (f"; the sampled 10th function's time is {n:.0f} samples, ±{2 * math.sqrt(n):.0f} "
                     f"(±{200 / math.sqrt(n):.0f}%, 95%)")
    return ks, note


def calls_verdict(exact: list[h.RunResult], other: list[h.RunResult]) -> tuple[Optional[bool], str]:
    """(equal?, text): a configuration's calls per function against the exact run's of the same
    round, every recorded round. None when nothing could be compared (said why)."""
    pairs = same_rounds(exact, other, "per_fn")
    if not pairs:
        return None, "**NOT COMPARED**: no recorded round with both reports"
    for rnd, e, o in pairs:
        pe, po = e.extra["per_fn"], o.extra["per_fn"]
        if pe != po:
            diff = sorted(k for k in set(pe) | set(po) if pe.get(k) != po.get(k))
            shown = ", ".join(f"`{k}` {h.fmt_int(po.get(k))} vs {h.fmt_int(pe.get(k))}" for k in diff[:5])
            more = f" and {len(diff) - 5} more" if len(diff) > 5 else ""
            return False, (f"**DIFFERS** in round {rnd + 1}: {len(diff)} function{'s' if len(diff) > 1 else ''} "
                          f"(sampled or counting vs exact): {shown}{more}")
    pe = pairs[0][1].extra["per_fn"]
    return True, (f"identical in all {len(pairs)} rounds ({sum(1 for c in pe.values() if c)} functions called, "
                  f"{sum(pe.values()):,} calls)")


def ratio_goal(ratio: float) -> str:
    return f"goal ≤ x{GOAL_RATIO:.2f} ({GOAL}): {'met' if ratio <= GOAL_RATIO else 'not met'}"


def goals(title: str, res: dict, base: str, sampled: str, exact: str) -> list[tuple[str, str, str, str]]:
    """(workload, what, goal, measured) of sampled time's goals: its ratio and top-10 agreement."""
    b, s = h.stats(res.get(base, [])), h.stats(res.get(sampled, []))
    ratio = "not measured"
    if b and s:
        r = s.median / b.median
        ratio = f"x{r:.2f} (fastest runs x{s.lo / b.lo:.2f}): {'met' if r <= GOAL_RATIO else 'not met'}"
    ks, _ = agreement(res.get(exact, []), res.get(sampled, []))
    top = "not measured"
    if ks:
        top = ", ".join(f"{k}/{TOP}" for k in ks) + f": {'met' if min(ks) >= GOAL_TOP else 'not met'}"
    return [(title, "sampled time, x uninstrumented", f"≤ x{GOAL_RATIO:.2f}", ratio),
            (title, f"top {TOP} by inclusive time, sampled vs exact (each round)", f"≥ {GOAL_TOP}/{TOP}", top)]
