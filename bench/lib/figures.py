"""What the runs come to and how it is shown: statistics of a variant's runs, the notes on them,
time and size formats, Markdown tables (part of the harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import dataclasses
import datetime
import statistics
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from runs import RunResult


@dataclasses.dataclass
class Stats:
    n: int
    median: float
    lo: float
    hi: float
    wall_median: float


def stats(runs: list[RunResult]) -> Optional[Stats]:
    """None when any run failed or no round was recorded."""
    ok = [r for r in runs if r.ok and r.round >= 0]
    if not ok or any(not r.ok for r in runs):
        return None
    m = [r.metric_s for r in ok]
    return Stats(len(m), statistics.median(m), min(m), max(m), statistics.median(r.wall_s for r in ok))


def fmt_time(s: Optional[float]) -> str:
    """3 significant digits, unit chosen by magnitude: 98.7 ms, 1.373 s, 412 us."""
    if s is None:
        return "-"
    if s >= 1.0:
        return f"{s:.3f} s"
    if s >= 1e-3:
        v = s * 1e3
        return f"{v:.3g} ms" if v < 100 else f"{v:.0f} ms"
    v = s * 1e6
    return f"{v:.3g} us" if v < 100 else f"{v:.0f} us"


def fmt_range(st: Stats) -> str:
    """median [min-max], the range in the median's unit: `98.7 ms [98.4–125]`."""
    med = fmt_time(st.median)
    unit = med.split()[-1]
    if unit == "s":
        return f"{med} [{st.lo:.3f}–{st.hi:.3f}]"
    scale = {"ms": 1e3, "us": 1e6}[unit]

    def num(x: float) -> str:
        v = x * scale
        return f"{v:.3g}" if v < 100 else f"{v:.0f}"

    return f"{med} [{num(st.lo)}–{num(st.hi)}]"


def fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def fmt_int(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    return "\n".join(out)


def output_mismatch(check: Optional[Callable[[str], Optional[str]]], base_runs: list[RunResult],
                    runs: list[RunResult]) -> Optional[str]:
    """A note when `check` of a variant's outputs differs from the baseline's, else None."""
    if check is None:
        return None
    want = {check(r.stdout) for r in base_runs}
    got = {check(r.stdout) for r in runs}
    if got == want:
        return None
    return f"OUTPUT DIFFERS from baseline: {sorted(got, key=str)} vs {sorted(want, key=str)}"


def failure_note(runs: list[RunResult]) -> Optional[str]:
    """Why a variant failed (first failed run), or None."""
    bad = [r for r in runs if not r.ok]
    if not bad:
        return None
    r = bad[0]
    tail = (r.stderr.strip().splitlines() or [""])[-1][:160]
    return f"{r.error} in {'warm-up' if r.round < 0 else f'round {r.round + 1}'}; stderr: {tail}"


def median_calls(runs: list[RunResult]) -> tuple[Optional[int], str]:
    """(median of the runs' extra["calls"], its text with the range when runs differ); the recorded
    rounds' counts, the warm-up's when no recorded round has one."""
    counts = ([r.extra["calls"] for r in runs if "calls" in r.extra and r.round >= 0]
              or [r.extra["calls"] for r in runs if "calls" in r.extra])
    if not counts:
        return None, "-"
    calls = int(statistics.median(counts))
    text = fmt_int(calls)
    if min(counts) != max(counts):
        text += f" (varies {min(counts):,}–{max(counts):,})"
    return calls, text


def after_errors(runs: list[RunResult]) -> list[str]:
    return sorted({r.extra["after_error"] for r in runs if "after_error" in r.extra})


def fmt_ns(ns: float) -> str:
    """ns per call with 3 significant digits: 1.26, 28.1, 850, 12,300."""
    a = abs(ns)
    if a >= 1000:
        return f"{ns:,.0f}"
    return f"{ns:.3g}" if a >= 1 else f"{ns:.2f}"


def entry_cells(e: dict, brief: bool = False) -> list[str]:
    """[time median [min–max], x baseline, calls, ns/call, output, notes] of a summary entry
    (brief: notes only on why a figure is missing or not significant, and the ratio's goal when the
    entry has one: {"ratio_max", "what"}, shown beside the ratio, never asserted)."""
    if e["status"] != "ok":
        return [e["status"], "-", "-", "-", "-", e.get("reason", "")]
    st = Stats(e["n"], e["median_s"], e["lo_s"], e["hi_s"], e["wall_median_s"])
    notes = [] if brief else list(e.get("notes", []))
    ratio = "x1.00" if e["is_baseline"] else (f"x{e['ratio']:.2f}" if "ratio" in e else "-")
    ns = "-"
    if "ns_per_call" in e:
        ns = fmt_ns(e["ns_per_call"])
    if e.get("ns_note"):
        notes.insert(0, e["ns_note"])
    if e.get("within_spread"):
        notes.insert(0, "within the baseline's run-to-run spread (fastest run ≤ the baseline's slowest)")
    if e.get("goal") and "ratio" in e:
        g = e["goal"]
        met = "met" if e["ratio"] <= g["ratio_max"] else "not met"
        notes.insert(0, f"goal ≤ x{g['ratio_max']:.2f} ({g['what']}): {met}")
    if not brief:
        notes.append(f"n={e['n']}")
    return [fmt_range(st), ratio, e.get("calls_text", fmt_int(e.get("calls"))), ns, e.get("output", "-"),
            "; ".join(notes)]


def results_head(title: str, script: str, quick: bool, machine: list[tuple[str, str]],
                 when: Optional[datetime.datetime] = None) -> list[str]:
    """The first lines of a benchmark's Markdown: title, which command made it and when (WHEN, else now),
    machine."""
    q = " --quick" if quick else ""
    return [f"# {title}" + (" (quick)" if quick else ""), "",
            f"Generated by `{script}{q}` on {when or datetime.datetime.now():%Y-%m-%d %H:%M}; every figure below comes "
            "from that run.", "", *(f"- {k}: {v}" for k, v in machine)]
