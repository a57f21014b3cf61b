"""The other tools' runs as variants: uftrace, gcc -finstrument-functions hook builds, and the
floor programs (part of the harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Optional

from runs import Variant


# ---------------------------------------------------------------- uftrace


# `  946.080 ms  755.631 ms     8077611  fib` (seconds are printed `1.773  s`)
UFT_ROW = re.compile(r"^\s*[0-9.]+\s+[a-z]+\s+[0-9.]+\s+[a-z]+\s+(\d+)\s+(\S.*?)\s*$", re.M)


def uftrace_report(data: Path) -> dict:
    """Calls per function from `uftrace report` (kernel events such as linux:schedule left out)."""
    p = subprocess.run(["uftrace", "report", "-d", str(data)], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"uftrace report exit {p.returncode}: {p.stderr.strip()[-300:]}")
    per_fn: dict[str, int] = {}
    for m in UFT_ROW.finditer(p.stdout):
        name = m.group(2)
        if not name.startswith("linux:"):
            per_fn[name] = per_fn.get(name, 0) + int(m.group(1))
    if not per_fn:
        raise RuntimeError("uftrace report listed no function")
    return {"calls": sum(per_fn.values()), "per_fn": per_fn, "functions": len(per_fn)}


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def uftrace_hooks(datadir: Path, counted: dict):
    """(before, after) hooks for an uftrace variant recording into `datadir`: a fresh directory per
    run; after it, the data size, and the call counts of `uftrace report` on the first run (the
    workloads are deterministic: the later runs reuse them, `counted` caches them)."""

    def before(idx: int) -> dict:
        for d in (datadir, datadir.with_name(datadir.name + ".old")):
            shutil.rmtree(d, ignore_errors=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not datadir.is_dir():
            return {"after_error": f"no uftrace data in {datadir}"}
        extra = {"data_bytes": dir_bytes(datadir)}
        if not counted:
            counted.update(uftrace_report(datadir), counted_run=idx)
        extra.update(counted)
        shutil.rmtree(datadir, ignore_errors=True)
        return extra

    return before, after


def uftrace_variant(name: str, prog: Path, argv_tail: list[str], datadir: Path, counted: dict, metric,
                    patch_all: bool, check=None, skip_reason: str = "", count: bool = True) -> Variant:
    """`uftrace record [-P .] -d DATADIR/uftrace.data PROG ARGS` (its defaults otherwise); with
    count, the calls of `uftrace report` on the first run (see uftrace_hooks)."""
    d = datadir / "uftrace.data"
    d.parent.mkdir(parents=True, exist_ok=True)
    ub, ua = uftrace_hooks(d, counted)
    patch = ["-P", "."] if patch_all else []
    return Variant(name, ["uftrace", "record", *patch, "-d", str(d), str(prog), *argv_tail], metric,
                   before=ub, after=ua if count else None, check=check, timeout_s=1800, skip_reason=skip_reason)


# ---------------------------------------------------------------- gcc -finstrument-functions hooks

TIMING_HOOK_RX = re.compile(r"^timing_hooks: calls=(\d+) functions=(\d+) threads=\d+ top=(\d+) too_deep=(\d+) "
                     r"mismatched=(\d+)", re.M)


def timing_hook_before(out: Path) -> Callable[[int], dict]:
    """Variant.before of a timing_hooks.c build: its per-function table goes to `out`."""
    return lambda idx: {"TIMING_HOOKS_OUTPUT": str(out)}


def timing_hook_after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
    """Variant.after of a timing_hooks.c build: its `timing_hooks: calls=...` line."""
    m = TIMING_HOOK_RX.search(stderr)
    if not m:
        return {"after_error": "no `timing_hooks: calls=` line"}
    out = Path(env["TIMING_HOOKS_OUTPUT"])
    return {"calls": int(m.group(1)), "functions": int(m.group(2)), "top": int(m.group(3)),
            "too_deep": int(m.group(4)), "mismatched": int(m.group(5)),
            "data_bytes": out.stat().st_size if out.exists() else None}


COUNT_HOOK_RX = re.compile(r"^count_hooks: calls=(\d+)", re.M)


def count_hook_after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
    """Variant.after of a count_hooks.c build: its `count_hooks: calls=N` line."""
    m = COUNT_HOOK_RX.search(stderr)
    return {"calls": int(m.group(1))} if m else {"after_error": "no `count_hooks: calls=` line"}


# ---------------------------------------------------------------- floor


def floor_values(stdout: str) -> dict[str, float]:
    """{case: ns per call} from a floor program's `<case> ns_per_call=<x>` lines."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+) ns_per_call=([0-9.]+)", stdout, re.M)}


def run_floor(binary: Path, n: int, calls: int) -> tuple[dict[str, list[float]], Optional[str]]:
    """Run a floor program n times with `calls`: ({case: [ns per call of each run]}, error or None)."""
    vals: dict[str, list[float]] = {}
    for _ in range(n):
        p = subprocess.run([str(binary), str(calls)], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            return vals, f"floor benchmark failed: {p.stderr.strip()}"
        for case, ns in floor_values(p.stdout).items():
            vals.setdefault(case, []).append(ns)
    return vals, None
