"""lopi's steps in a benchmark: finding the binary, `lopi rewrite` of the workloads, `lopi report`
of a run's data, and the previous build `bench/run.sh --against REV` compares with (part of the
harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

from figures import fmt_int, stats
from runs import REPO, RunResult, log


def find_lopi(path: Path, snapshot_dir: Optional[Path] = None) -> tuple[Optional[Path], str]:
    """(the lopi binary or None, a line saying which binary: path, sha256, build time). With
    snapshot_dir, the binary returned is a copy made there, so that a rebuild of `path` during the
    run cannot mix two versions (rewrite with one, report with the other)."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        return None, "not found"
    st = path.stat()
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()[:12]
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    info = f"{shown} (sha256 {sha}, built {datetime.datetime.fromtimestamp(st.st_mtime):%Y-%m-%d %H:%M})"
    if snapshot_dir is None:
        return path, info
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    copy = snapshot_dir / f"lopi-{sha}"
    for old in snapshot_dir.glob("lopi-*"):  # copies of earlier builds (not lopi-data/)
        if old != copy and re.fullmatch(r"lopi-[0-9a-f]{12}", old.name) and old.is_file():
            old.unlink(missing_ok=True)
    if not copy.exists():
        tmp = copy.with_name(copy.name + ".part")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.rename(copy)
    return copy, info


PREV = "lopi-prev"


def previous_build() -> Optional[tuple[Path, str]]:
    """The lopi `bench/run.sh --against REV` built (LOPI_AGAINST, LOPI_AGAINST_REV): (binary, REV).
    Benchmarks then run the same probes with it as one more configuration (PREV) in the same
    rounds, so that a regression shows as a ratio measured side by side, not across runs."""
    path, rev = os.environ.get("LOPI_AGAINST"), os.environ.get("LOPI_AGAINST_REV", "previous")
    if not path:
        return None
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        raise SystemExit(f"LOPI_AGAINST={path}: not an executable (bench/lib/build_against.sh REV builds one)")
    return Path(path), rev


def against_rows(title: str, res: dict, base: str, lopi: str, rev: str) -> list[str]:
    """A Markdown row comparing lopi's configuration with the previous build's (PREV) in the same
    rounds: both ratios to the uninstrumented program and the verdict. A regression is today's
    fastest run slower than the previous build's slowest."""
    b, now, prev = stats(res.get(base, [])), stats(res.get(lopi, [])), stats(res.get(PREV, []))
    if not (b and now and prev):
        return [f"| {title} | - | - | - | not measured |"]
    change = now.median / prev.median - 1
    verdict = ("**REGRESSION**" if now.lo > prev.hi else "faster" if now.hi < prev.lo
               else "within the runs' spread")
    return [f"| {title} | x{now.median / b.median:.2f} | x{prev.median / b.median:.2f} ({rev}) | "
            f"{change:+.1%} | {verdict} |"]


def rewrite_previous(prev: Path, bins: dict, outdir: Path, suffix: str, notes: dict,
                     args: Optional[list[str]] = None) -> None:
    """The W1 and W2 programs rewritten by the previous build (`bins[wl][PREV]`), as today's
    are; a program it cannot rewrite has no PREV configuration (said on stderr)."""
    for wl in ("w1", "w2"):
        prog = bins[wl]["baseline"]
        out, why, rnotes = rewrite_or_skip(prev, prog, outdir / (prog.name + suffix), args)
        if out:
            bins[wl][PREV], notes[wl][PREV] = out, rnotes
        else:
            log(f"the previous build could not rewrite {prog.name}: {why}")


AGAINST_HEAD = ["| workload | today x uninstr. | previous build x uninstr. | change | verdict |",
                "|---|---|---|---|---|"]


def lopi_rewrite(lopi: Path, prog: Path, out: Path, extra: Optional[list[str]] = None
                 ) -> tuple[Optional[str], float, str]:
    """`lopi rewrite PROG -o OUT [extra]`: (error or None, seconds, lopi's stderr+stdout); the
    output is also kept in OUT.rewrite.log."""
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([str(lopi), "rewrite", str(prog), "-o", str(out), *(extra or [])],
                           capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return "lopi rewrite timed out (900 s)", 900.0, ""
    dt = time.perf_counter() - t0
    msg = (p.stderr + p.stdout).strip()
    out.with_name(out.name + ".rewrite.log").write_text(msg + "\n")
    if p.returncode != 0 or not out.exists():
        last = msg.splitlines()[-1] if msg else ""
        return f"lopi rewrite failed (exit {p.returncode}): {last}", dt, msg
    return None, dt, msg


def rewrite_note(msg: str, dt: float) -> str:
    """`rewrite 0.01 s, 11/11 functions probed` from lopi rewrite's summary line."""
    m = re.search(r"(\d+) functions found, (\d+) probed \(([0-9.]+%)\)", msg)
    return f"rewrite {dt:.2f} s" + (f", {m.group(2)}/{m.group(1)} functions probed" if m else "")


def rewrite_or_skip(lopi: Path, prog: Path, out: Path, args: Optional[list[str]] = None
                    ) -> tuple[Optional[Path], str, list[str]]:
    """Rewrite PROG for a lopi configuration: (OUT, "", [rewrite note]) or (None, why not, [])."""
    err, dt, msg = lopi_rewrite(lopi, prog, out, args)
    if err:
        log(f"lopi: {prog.name}: {err}")
        return None, err, []
    log(f"lopi: rewrote {prog.name}{' with ' + ' '.join(args) if args else ''} in {dt:.2f} s")
    return out, "", [rewrite_note(msg, dt)]


def rewrite_configs(lopi: Optional[Path], lopi_path: Path, bins: dict[str, dict], configs: dict[str, list[str]],
                    outdir: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """For every group's program bins[group]["baseline"] and every lopi configuration {name: rewrite
    args}: the rewritten program goes into bins[group][name]; returns ({group: {name: why not}},
    {group: {name: [rewrite note]}})."""
    skip: dict[str, dict] = {g: {} for g in bins}
    notes: dict[str, dict] = {g: {} for g in bins}
    for group, progs in bins.items():
        for cfg, args in configs.items():
            if not lopi:
                skip[group][cfg] = f"lopi binary not found ({lopi_path})"
                continue
            prog = progs["baseline"]
            out, why, rnotes = rewrite_or_skip(lopi, prog, outdir / f"{group}-{prog.name}.{cfg}", args)
            if out:
                progs[cfg], notes[group][cfg] = out, rnotes
            else:
                skip[group][cfg] = why
    return skip, notes


def lopi_report(lopi: Path, data: Path) -> dict:
    """Calls per function from `lopi report DATA --format json` (summed over modules with the same
    name), the whole report kept under "report"."""
    p = subprocess.run([str(lopi), "report", str(data), "--format", "json"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"lopi report exit {p.returncode}: {p.stderr.strip()[-300:]}")
    rep = json.loads(p.stdout)
    per_fn: dict[str, int] = {}
    for f in rep["functions"]:
        per_fn[f["name"]] = per_fn.get(f["name"], 0) + int(f["calls"])
    return {"calls": sum(per_fn.values()), "per_fn": per_fn, "functions": len(rep["functions"]),
            "incomplete": bool(rep.get("incomplete", False)), "report": rep}


def lopi_data_hooks(lopi: Optional[Path], datadir: Path, keep: Callable[[dict], dict] = lambda rep: {}):
    """(before, after) Variant hooks: a fresh `$LOPI_OUTPUT` per run, then its counts from lopi's
    report, its size, and whatever `keep(report json)` picks."""
    datadir.mkdir(parents=True, exist_ok=True)

    def before(idx: int) -> dict:
        path = datadir / f"run{idx}.lopi-data"
        if path.is_dir():
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
        return {"LOPI_OUTPUT": str(path)}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        path = Path(env["LOPI_OUTPUT"])
        if not path.exists():
            return {"after_error": f"no data written to LOPI_OUTPUT ({path})"}
        c = lopi_report(lopi, path)
        rep = c.pop("report")
        c.update(keep(rep))
        c["data_bytes"] = path.stat().st_size if path.is_file() else None
        return c

    return before, after


def lopi_report_notes(runs: list[RunResult], expected: dict) -> list[str]:
    """Notes on a lopi variant's reports: incomplete, functions called, the W1 function's count."""
    notes = []
    per_fn = next((r.extra["per_fn"] for r in runs if "per_fn" in r.extra), None)
    if any(r.extra.get("incomplete") for r in runs):
        notes.append("report says INCOMPLETE")
    if per_fn is not None:
        nz = sum(1 for c in per_fn.values() if c)
        notes.append(f"report: {len(per_fn)} functions, {nz} called")
        if expected:
            got = per_fn.get(expected["fn"])
            ok = "=" if got == expected["calls"] else "≠"
            notes.append(f"{expected['fn']}: {fmt_int(got)} {ok} expected {expected['calls']:,}")
    return notes
