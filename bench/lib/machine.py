"""Facts on the machine and the tools a benchmark ran with, for the head of its results (part of
the harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional


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


def machine_info(repo: Path, extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(what, value) pairs: CPU, kernel, gcc, lopi's commit, then `extra`."""
    gcc = _cmd(["gcc", "--version"]).splitlines()
    return [
        ("CPU", f"{cpu_model()} ({os.cpu_count()} CPUs online)"),
        ("kernel", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("gcc", gcc[0] if gcc else "not found"),
        ("lopi git commit", git_commit(repo)),
    ] + extra


def machine_lines(repo: Path, extra: list[tuple[str, str]]) -> list[str]:
    return [f"- {k}: {v}" for k, v in machine_info(repo, extra)]


def tool_version(argv: list[str]) -> str:
    """First line of `argv` (e.g. `valgrind --version`), or "not installed"."""
    out = _cmd(argv)
    return out.splitlines()[0] if out else "not installed"


def which(name: str) -> Optional[str]:
    return shutil.which(name)


def load_and_time(load_start: str, t_start: float) -> list[tuple[str, str]]:
    """The machine_info lines on the run itself: load average at start and end, run time."""
    return [("load average", f"{load_start} at start, {loadavg()} at end (2 CPUs: other jobs on the machine add noise)"),
            ("run time", f"{time.time() - t_start:.0f} s")]
