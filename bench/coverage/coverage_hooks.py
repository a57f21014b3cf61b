"""The coverage benchmark's per-run hooks: where each configuration's output, data and counters go
before a run and what is read back after it (lopi's data file, gcov's .gcda files, valgrind's
counts, lopi run's start-up line). Used by coverage.py."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import zstd_bench  # bench/zstd's, on the path coverage.py sets up
from answers import callgrind_counts

STARTUP_RX = re.compile(r"lopi: (\d+) sites installed in ([0-9.]+) ms "
                        r"\(([0-9.]+) ms from launch to the program's entry\)")
LACKEY_RX = {"SBs entered": re.compile(r"SBs entered:\s+([0-9,]+)"),
             "guest instrs": re.compile(r"guest instrs:\s+([0-9,]+)")}
CALLGRIND_RX = re.compile(r"I\s+refs:\s+([0-9,]+)")


def output_file_hooks(out: Path):
    """(before, after): OUT removed before the run; after it, its size and sha256 (then removed)."""

    def before(idx: int) -> dict:
        out.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not out.exists():
            return {"after_error": f"no output file {out}"}
        extra = {"output": f"{out.stat().st_size:,} bytes, sha256 {zstd_bench.sha256(out)[:16]}"}
        out.unlink()
        return extra

    return before, after


def stdout_hooks(check, timer):
    """(None, after): what the program printed, less its times (speedtest1): its lines and sha256; and
    the program's own timer (speedtest1's TOTAL), as own_s."""

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        text = check(stdout)
        extra = {"output": f"{len(text.splitlines())} lines, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}"}
        if timer and (t := timer(stdout, stderr)) is not None:
            extra["own_s"] = t
        return extra

    return None, after


def coverage_json(lopi: Path, path: Path) -> dict:
    """`lopi coverage DATA --format json`, parsed; RuntimeError with lopi's message when it fails."""
    p = subprocess.run([str(lopi), "coverage", str(path), "--format", "json"], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"lopi coverage exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)


def lopi_data_hooks(datadir: Path, read, keep: bool = False):
    """(before, after) of a lopi configuration: a fresh `$LOPI_OUTPUT` per run; after it, the data's
    size and what READ(path) adds, then the data is deleted (unless KEEP: the path is kept in the
    run's extra fields, and whoever reads it deletes it)."""
    datadir.mkdir(parents=True, exist_ok=True)

    def before(idx: int) -> dict:
        path = datadir / f"run{idx}.lopi-data"
        path.unlink(missing_ok=True)
        return {"LOPI_OUTPUT": str(path)}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        path = Path(env["LOPI_OUTPUT"])
        if not path.exists():
            return {"after_error": f"no data written to LOPI_OUTPUT ({path})"}
        extra: dict = {"data_bytes": path.stat().st_size}
        extra.update(read(path))
        if keep:
            extra["data_path"] = str(path)
        else:
            path.unlink(missing_ok=True)
        return extra

    return before, after


def lopi_cov_hooks(lopi: Path, datadir: Path, keep: bool = False):
    """lopi_data_hooks reading the blocks that ran / are not known by `lopi coverage DATA --format
    json` (KEEP: block_mismatches reads the data, the benchmark deletes it at the end)."""

    def read(path: Path) -> dict:
        try:
            fns = coverage_json(lopi, path)["functions"]
        except RuntimeError as e:
            return {"after_error": str(e)}
        return dict(blocks=sum(f["blocks"] for f in fns), ran=sum(f["covered"] for f in fns),
                    unknown=sum(f["unknown"] for f in fns),
                    fn_ran={f"{Path(f['module']).name}:{f['name']}": [f["covered"], f["unknown"]] for f in fns})

    return lopi_data_hooks(datadir, read, keep)


def gcov_hooks(prefix: Path):
    """(before, after) of a --coverage build: its .gcda files go under a fresh GCOV_PREFIX per run
    (counted, then deleted), so that no run merges into an earlier one's counters."""

    def before(idx: int) -> dict:
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir(parents=True)
        return {"GCOV_PREFIX": str(prefix), "GCOV_PREFIX_STRIP": "0"}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        files = list(prefix.rglob("*.gcda"))
        extra = {"gcda_files": len(files), "data_bytes": sum(f.stat().st_size for f in files)}
        if not files:
            extra["after_error"] = f"no .gcda file under GCOV_PREFIX {prefix}"
        shutil.rmtree(prefix, ignore_errors=True)
        return extra

    return before, after


def callgrind_hooks(out: Path, obj: str):
    """(before, after) of the callgrind variant: its output file removed first; after the run, the
    program's executions per instruction (kept for the block check, not in the runs file)."""

    def before(idx: int) -> dict:
        out.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not out.exists():
            return {"after_error": f"no callgrind output {out}"}
        extra = {"insn_counts": callgrind_counts(out, obj)}
        out.unlink()
        return extra

    return before, after


def valgrind_after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
    extra = {}
    for what, rx in LACKEY_RX.items():
        if m := rx.search(stderr):
            extra[what] = int(m.group(1).replace(",", ""))
    if m := CALLGRIND_RX.search(stderr):
        extra["I refs"] = int(m.group(1).replace(",", ""))
    return extra


def startup_after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
    m = STARTUP_RX.search(stderr)
    if not m:
        return {"after_error": "no `sites installed in` line in lopi run's stderr"}
    return {"sites": int(m.group(1)), "install_ms": float(m.group(2)), "launch_ms": float(m.group(3))}


# ---------------------------------------------------------------- variants


def redirect(argv: list[str], out: Optional[Path]) -> list[str]:
    """ARGV with its standard output to OUT (`sh -c 'exec "$@" > OUT'`), or ARGV."""
    return ["/bin/sh", "-c", 'exec "$@" > "$0"', str(out), *argv] if out else argv
