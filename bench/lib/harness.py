"""Benchmark harness for lopi: interleaved runs, in-program timers, Markdown tables.

Standard library only. The method is the one of the anchor measurements
(shared/reference/anchor-measurements.md):

* every variant of one workload is run interleaved round-robin, the order rotated each round,
  after one unrecorded warm-up round;
* the metric is the workload's own timer (hot section only), parsed from its output, so start-up,
  instrumentation set-up and writing of data at exit are excluded; the whole-process wall-clock
  time is kept too, for the notes;
* tables show median and [min-max] of the recorded runs, the ratio of medians to the baseline and
  the per-call overhead (median_variant - median_baseline) / calls.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional


@dataclasses.dataclass
class RunResult:
    """One execution of one variant."""

    variant: str
    round: int  # -1 for the warm-up
    ok: bool
    metric_s: Optional[float]  # the workload's own timer, seconds
    wall_s: float  # whole process
    returncode: Optional[int]
    stdout: str
    stderr: str
    extra: dict  # whatever a variant's `after` hook returned (counts, data paths...)
    error: str = ""


@dataclasses.dataclass
class Variant:
    """A way to run one workload: argv, environment and how to read its timer."""

    name: str
    argv: list[str]
    metric: Callable[[str, str], Optional[float]]  # (stdout, stderr) -> seconds or None
    env: dict = dataclasses.field(default_factory=dict)
    # Called before each run with the run's index; returns extra env (e.g. a fresh data path).
    before: Optional[Callable[[int], dict]] = None
    # Called after each successful run: (run index, stdout, stderr, env used) -> extra dict.
    after: Optional[Callable[[int, str, str, dict], dict]] = None
    # Checked against the baseline's output: (stdout) -> a string that must be equal, or None.
    check: Optional[Callable[[str], Optional[str]]] = None
    timeout_s: float = 600.0
    skip_reason: str = ""  # non-empty: not run, shown as skipped


def regex_seconds(pattern: str, scale: float = 1.0) -> Callable[[str, str], Optional[float]]:
    """A metric reader: the first group of `pattern` in stdout, times `scale`, in seconds."""
    rx = re.compile(pattern, re.M)

    def read(stdout: str, stderr: str) -> Optional[float]:
        m = rx.search(stdout)
        return float(m.group(1)) * scale if m else None

    return read


def _run_once(v: Variant, idx: int, rnd: int, log) -> RunResult:
    env = dict(os.environ)
    env.update(v.env)
    extra_env = v.before(idx) if v.before else {}
    env.update(extra_env)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(v.argv, env=env, capture_output=True, text=True, timeout=v.timeout_s)
    except subprocess.TimeoutExpired as e:
        wall = time.perf_counter() - t0
        return RunResult(v.name, rnd, False, None, wall, None, str(e.stdout or ""), str(e.stderr or ""),
                         {}, f"timed out after {v.timeout_s:.0f} s")
    wall = time.perf_counter() - t0
    res = RunResult(v.name, rnd, False, None, wall, p.returncode, p.stdout, p.stderr, {})
    if p.returncode != 0:
        res.error = f"exit code {p.returncode}" + (f" (signal {-p.returncode})" if p.returncode < 0 else "")
        return res
    res.metric_s = v.metric(p.stdout, p.stderr)
    if res.metric_s is None:
        res.error = "metric not found in output"
        return res
    if v.after:
        try:
            res.extra = v.after(idx, p.stdout, p.stderr, extra_env)
        except Exception as e:  # a broken data file must not lose the timings
            res.extra = {"after_error": f"{type(e).__name__}: {e}"}
    res.ok = True
    return res


def run_interleaved(variants: list[Variant], n: int, warmup: int = 1, log=print) -> dict[str, list[RunResult]]:
    """Run every runnable variant n times (+ warm-up rounds, round < 0), round-robin, rotating the
    order each round. A variant that fails is not run again; its failed run is kept. All runs are
    returned, warm-up included; `stats` uses the recorded rounds only."""
    active = [v for v in variants if not v.skip_reason]
    results: dict[str, list[RunResult]] = {v.name: [] for v in variants}
    failed: set[str] = set()
    idx = 0
    for rnd in range(-warmup, n):
        k = (rnd + warmup) % max(1, len(active))
        order = active[k:] + active[:k]
        line = []
        for v in order:
            if v.name in failed:
                continue
            r = _run_once(v, idx, rnd, log)
            idx += 1
            if not r.ok:
                failed.add(v.name)
                results[v.name].append(r)
                line.append(f"{v.name}=FAILED({r.error})")
                continue
            results[v.name].append(r)
            line.append(f"{v.name}={fmt_time(r.metric_s)}")
        log(f"  {'warm-up' if rnd < 0 else f'round {rnd + 1}/{n}'}: " + ", ".join(line))
    return results


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


def fmt_int(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    return "\n".join(out)


def _cmd(argv: list[str], cwd: Optional[str] = None) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def git_commit(repo: Path) -> str:
    """Commit of the work tree, with `+dirty` when crates/ or Cargo files differ from it."""
    head = _cmd(["git", "rev-parse", "--short=12", "HEAD"], cwd=str(repo))
    if not head:
        return "no commit yet (work tree only)"
    dirty = _cmd(["git", "status", "--porcelain", "--", "crates", "Cargo.toml", "Cargo.lock"], cwd=str(repo))
    return head + ("+dirty" if dirty else "")


def machine_lines(repo: Path, extra: list[tuple[str, str]]) -> list[str]:
    gcc = _cmd(["gcc", "--version"]).splitlines()
    lines = [
        ("CPU", f"{cpu_model()} ({os.cpu_count()} CPUs online)"),
        ("kernel", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("gcc", gcc[0] if gcc else "not found"),
        ("lopi git commit", git_commit(repo)),
    ] + extra
    return [f"- {k}: {v}" for k, v in lines]


def which(name: str) -> Optional[str]:
    return shutil.which(name)


def dump_raw(path: Path, meta: dict, groups: dict[str, dict[str, list[RunResult]]]) -> None:
    """Every run of every variant (stdout/stderr trimmed), for re-analysis."""

    def trim(s: str) -> str:
        return s if len(s) < 4000 else s[:1000] + "\n...\n" + s[-2500:]

    def slim(extra: dict) -> dict:
        if "per_fn" not in extra:
            return extra
        top = sorted(extra["per_fn"].items(), key=lambda kv: -kv[1])[:20]
        return dict(extra, per_fn=dict(top), per_fn_note="top 20 functions by calls")

    data = {"meta": meta, "workloads": {}}
    for wl, res in groups.items():
        data["workloads"][wl] = {
            v: [dict(dataclasses.asdict(r), stdout=trim(r.stdout), stderr=trim(r.stderr), extra=slim(r.extra)) for r in runs]
            for v, runs in res.items()
        }
    path.write_text(json.dumps(data, indent=1))
