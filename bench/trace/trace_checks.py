"""What the trace benchmark checks around its runs: which tools run here (preflight) and their
versions, the notes on each configuration's runs, and the issue's two criteria."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import anchors
import harness as h
from trace_variants import (BASE, BASE_SLOW, BPF_C, BPF_H, COUNT_SCRIPT, CRIT1_RATIO, CRIT2_NS, FRIDA_C, FRIDA_H,
                            LOPI_E, LOPI_T, STAP_C, STAP_H, TRACE_C, TRACE_H, TRACE_PY, Workload)

log = h.log


def attempt(argv: list[str], ok: re.Pattern) -> str:
    """Empty when ARGV exits 0 and prints OK, else why not (its last error line)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if p.returncode == 0 and ok.search(p.stdout + p.stderr):
        return ""
    lines = (p.stderr + "\n" + p.stdout).strip().splitlines()
    errs = [ln for ln in lines if re.search(r"error|refus|unable|unavailable|not supported|not found|no such", ln, re.I)
            and "RLIMIT_MEMLOCK" not in ln]
    return f"does not run here (exit {p.returncode}): {(errs or lines or ['no output'])[-1][:240]}"


def preflight(w1: Path, work: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({config: why it cannot run here}, {config: why it cannot run on W1 loop}), each tool tried
    on a few calls of W1."""
    why: dict[str, str] = {}
    loop_why: dict[str, str] = {}
    if not h.which("bpftrace"):
        why[BPF_C] = "bpftrace not installed (apt-get install bpftrace failed)"
    else:
        why[BPF_C] = attempt(["bpftrace", "-e", f"uprobe:{w1}:tiny {{ @c = count(); }}", "-c", f"{w1} loop 10"],
                             re.compile(r"^@c: 10$", re.M))
    why[BPF_H] = why[BPF_C]
    if subprocess.run([sys.executable, "-c", "import frida"], capture_output=True).returncode != 0:
        why[FRIDA_C] = why[FRIDA_H] = f"frida not installed for {sys.executable} (pip install frida failed)"
    else:
        fib = ["--", str(w1), "fib", "5", "1"]
        why[FRIDA_C] = attempt([sys.executable, str(anchors.FRIDA_RUNNER), "--mode", "cmodule", *fib],
                               re.compile(r"frida_count: calls=\d+"))
        hist = [sys.executable, str(TRACE_PY), "frida-hist"]
        why[FRIDA_H] = attempt([*hist, "--fn", "fib", *fib], re.compile(r"^frida_hist: calls=15$", re.M))
        if not why[FRIDA_H]:
            loop_why[FRIDA_H] = attempt([*hist, "--fn", "tiny", "--", str(w1), "loop", "10"],
                                        re.compile(r"^frida_hist: calls=10$", re.M))
    if not h.which("stap"):
        why[STAP_C] = "SystemTap not installed (apt-get install systemtap failed)"
    else:
        script = work / "preflight.stp"
        script.write_text(f'global c\nprobe process("{w1}").function("tiny") {{ c <<< 1 }}\n'
                          'probe end { printf("stap_count tiny %d\\n", @count(c)) }\n')
        why[STAP_C] = attempt(["stap", "--dyninst", str(script), "-c", f"{w1} loop 10"],
                              re.compile(r"^stap_count tiny 10$", re.M))
    why[STAP_H] = why[STAP_C]
    for k, v in why.items():
        log(f"{k}: {'ready' if not v else 'skipped: ' + v}")
    for k, v in loop_why.items():
        if v:
            log(f"{k} on W1 loop: skipped: {v}")
    return {k: v for k, v in why.items() if v}, {k: v for k, v in loop_why.items() if v}


def versions() -> list[tuple[str, str]]:
    frida = h._cmd([sys.executable, "-c", "import frida; print(frida.__version__)"]) or "not installed"
    stap = h.tool_version(["stap", "--version"]) if h.which("stap") else "not installed"
    return [("bpftrace", h.tool_version(["bpftrace", "--version"])),
            ("frida", f"frida {frida} (Python bindings, PyPI)"),
            ("SystemTap", stap)]


# ---------------------------------------------------------------- notes, criteria


def recorded(runs: list[h.RunResult]) -> list[h.RunResult]:
    return [r for r in runs if r.ok and r.round >= 0]


def count_note(runs: list[h.RunResult], expected: dict) -> Optional[str]:
    """The hot function's calls as the tool counted them (its count, else the histogram's total)
    against W1's own count; None when the tool did not probe it (the ns/call note says so)."""
    if not expected:
        return None
    fn, want = expected["fn"], expected["calls"]
    per_fn = [r.extra["per_fn"] for r in recorded(runs) if "per_fn" in r.extra]
    if per_fn:
        if not any(fn in p for p in per_fn):
            return None
        got, what = sorted({p.get(fn, 0) for p in per_fn}), fn
    else:
        got, what = sorted({r.extra["calls"] for r in recorded(runs) if "calls" in r.extra}), f"{fn} in the histogram"
    if not got:
        return None
    shown = f"{got[0]:,}" if len(got) == 1 else f"{got[0]:,}–{got[-1]:,}"
    return f"{what}: {shown} {'=' if got == [want] else '≠'} expected {want:,}"


def agreement(res: dict) -> Optional[str]:
    """lopi trace's per-function counts against lopi run --probe entry's."""
    a = next((r.extra["per_fn"] for r in recorded(res.get(TRACE_C, [])) if "per_fn" in r.extra), None)
    b = next((r.extra["per_fn"] for r in recorded(res.get(LOPI_E, [])) if "per_fn" in r.extra), None)
    if a is None or b is None:
        return None
    called = {n for n, c in a.items() if c} | {n for n, c in b.items() if c}
    differ = sorted((n for n in called if a.get(n, 0) != b.get(n, 0)), key=lambda n: -max(a.get(n, 0), b.get(n, 0)))
    shown = ", ".join(f"`{n}` {a.get(n, 0):,} / {b.get(n, 0):,}" for n in differ[:4])
    return (f"per function: the same count as lopi run --probe entry for {len(called) - len(differ)} of "
            f"{len(called)} functions called" + (f" (differ, trace / run: {shown}{' …' if len(differ) > 4 else ''})"
                                                 if differ else ""))


def lopi_said(runs: list[h.RunResult]) -> list[str]:
    """lopi trace's own lines worth a note: how many functions it probed, drops, faults, returns it
    could not see."""
    said = next((r.extra["said"] for r in recorded(runs) if "said" in r.extra), [])
    out = [m.group(1) for ln in said if (m := re.match(r"(.*\d+ functions?) of ", ln))]
    out += sorted({ln for r in recorded(runs) for ln in r.extra.get("said", [])
                   if re.search(r"dropped|not seen|faults", ln)})
    return out


def notes_for(wl: Workload, vs: list[h.Variant], res: dict, expected: dict[str, dict]) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {}
    for v in vs:
        runs = res.get(v.name, [])
        n = []
        if v.name in (LOPI_E, LOPI_T):
            n += h.lopi_report_notes(runs, {})
        if v.name in (TRACE_C, TRACE_H):
            n += lopi_said(runs)
        if v.name == TRACE_C and (agree := agreement(res)):
            n.append(agree)
        if v.name not in (BASE, BASE_SLOW) and (c := count_note(runs, expected[wl.base_of(v.name)])):
            n.append(c)
        if v.name == FRIDA_C:
            refused = next((r.extra.get("refused") for r in recorded(runs) if r.extra.get("refused")), None)
            if refused:
                first = next(iter(refused.items()))
                n.append(f"Interceptor refused {len(refused)} functions (e.g. `{first[0]}`: {first[1]})")
        n += h.after_errors(runs)
        notes[v.name] = n
    return notes


def ns_of(entries: list[dict], cfg: str) -> Optional[float]:
    return next((e["ns_per_call"] for e in entries if e["config"] == cfg and "ns_per_call" in e), None)


def criteria(wl: Workload, entries: list[dict]) -> list[dict]:
    """The issue's criteria on one workload: {workload, criterion, lopi trace ns, reference ns,
    measured, limit, holds (True/False/None: not judged), why}."""
    out = []
    trace, plain = ns_of(entries, TRACE_C), ns_of(entries, LOPI_E)
    c1 = {"workload": wl.title, "criterion": 1, "script": COUNT_SCRIPT, "trace_ns": trace, "reference_ns": plain,
          "reference": "lopi run --probe entry", "limit": f"≤ {CRIT1_RATIO:g}x"}
    if trace is None or plain is None:
        c1.update(holds=None, measured="-", why="a configuration has no ns/call")
    elif plain <= 0:
        c1.update(holds=None, measured="-", why="the plain probe's cost is within noise (≤ 0 ns/call)")
    else:
        c1.update(holds=trace / plain <= CRIT1_RATIO, measured=f"{trace / plain:.2f}x", ratio=trace / plain)
    out.append(c1)
    if wl.fn:
        hist, timing = ns_of(entries, TRACE_H), ns_of(entries, LOPI_T)
        c2 = {"workload": wl.title, "criterion": 2, "script": f"func:{wl.fn}:return {{ @h = hist(elapsed); }}",
              "trace_ns": hist, "reference_ns": timing, "reference": f"lopi run --probe entry,exit --functions {wl.fn}",
              "limit": f"≤ +{CRIT2_NS:g} ns"}
        if hist is None or timing is None:
            c2.update(holds=None, measured="-", why="a configuration has no ns/call")
        else:
            c2.update(holds=hist - timing <= CRIT2_NS, measured=f"{hist - timing:+.1f} ns", diff_ns=hist - timing)
        out.append(c2)
    return out


def verdict(c: dict) -> str:
    return "not judged: " + c["why"] if c["holds"] is None else ("PASS" if c["holds"] else "FAIL")


def fmt_ns(ns: Optional[float]) -> str:
    return "-" if ns is None else h.fmt_ns(ns)
