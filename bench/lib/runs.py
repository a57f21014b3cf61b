"""Running the variants of a workload: interleaved rounds, each run timed by the workload's own
timer (part of the harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from figures import fmt_time

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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
    # (stdout, stderr) -> seconds or None; WALL (None): the whole process's wall-clock time
    metric: Optional[Callable[[str, str], Optional[float]]]
    env: dict = dataclasses.field(default_factory=dict)
    # Called before each run with the run's index; returns extra env (e.g. a fresh data path).
    before: Optional[Callable[[int], dict]] = None
    # Called after each successful run: (run index, stdout, stderr, env used) -> extra dict.
    after: Optional[Callable[[int, str, str, dict], dict]] = None
    # Checked against the baseline's output: (stdout) -> a string that must be equal, or None.
    check: Optional[Callable[[str], Optional[str]]] = None
    timeout_s: float = 600.0
    skip_reason: str = ""  # non-empty: not run, shown as skipped


WALL = None  # Variant.metric for programs without their own timer (zstd): the process's wall time


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
    res.metric_s = v.metric(p.stdout, p.stderr) if v.metric else wall
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


def compose_hooks(*pairs: tuple) -> tuple:
    """One (before, after) pair from several: the befores' environments merged, the afters' extras
    merged (None members are left out)."""
    befores = [b for b, _ in pairs if b]
    afters = [a for _, a in pairs if a]

    def before(idx: int) -> dict:
        env: dict = {}
        for b in befores:
            env.update(b(idx))
        return env

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        extra: dict = {}
        for a in afters:
            extra.update(a(idx, stdout, stderr, env))
        return extra

    return before, after
