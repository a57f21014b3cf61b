"""The locks benchmark's tools: each configuration's command line, reading what lopi and
bpftrace counted and what drd reported, and whether each tool runs here (preflight)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import harness as h

HERE = Path(__file__).resolve().parent
log = h.log

BT_SCRIPT = HERE / "mutex.bt"
BT_LIBC = "/lib/x86_64-linux-gnu/libc.so.6"  # the path written in mutex.bt

BASE, LOPI, DRD, BPF = "plain", "lopi", "drd", "bpftrace"
CONFIGS = [BASE, LOPI, DRD, BPF]
LABEL = {BASE: "plain (uninstrumented)", LOPI: "lopi run -q --probe locks",
         DRD: "valgrind --tool=drd --exclusive-threshold=10", BPF: "bpftrace uprobes (mutex.bt)"}


def tool_argv(cfg: str, argv: list[str], lopi: Path, bt_script: Path, bt_out: Path,
              stdout_to: Optional[Path]) -> list[str]:
    """ARGV run under configuration CFG (lopi's data goes to $LOPI_OUTPUT, bpftrace's maps to
    BT_OUT); with STDOUT_TO, the program's standard output is redirected there by sh (exec: the
    tool's process replaces sh)."""
    out = {
        BASE: argv,
        LOPI: [str(lopi), "run", "-q", "--probe", "locks", "--", *argv],
        DRD: ["valgrind", "--tool=drd", "--exclusive-threshold=10", *argv],
        # bpftrace splits -c at spaces, without quoting: the workloads' arguments have none
        BPF: ["bpftrace", "-q", "-o", str(bt_out), str(bt_script), "-c", " ".join(argv)],
    }[cfg]
    if stdout_to is not None:
        out = ["sh", "-c", f"exec {shlex.join(out)} > {shlex.quote(str(stdout_to))}"]
    return out


def remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def lopi_locks(lopi: Path, data: Path) -> list[dict]:
    """The locks of `lopi report DATA --locks --format json`."""
    p = subprocess.run([str(lopi), "report", str(data), "--locks", "--format", "json"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"lopi report --locks exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)["locks"]


BT_MAP = re.compile(r"^@(acq|wait|hold)\[(\d+)\]: (\d+)$", re.M)


def bpftrace_locks(out: Path) -> list[dict]:
    """mutex.bt's maps as lock dicts (addr, acquisitions, wait_ns, hold_ns), as lopi's report has."""
    locks: dict[int, dict] = {}
    for m in BT_MAP.finditer(out.read_text()):
        d = locks.setdefault(int(m.group(2)), {"name": hex(int(m.group(2))), "acquisitions": 0, "wait_ns": 0,
                                               "hold_ns": 0})
        d[{"acq": "acquisitions", "wait": "wait_ns", "hold": "hold_ns"}[m.group(1)]] = int(m.group(3))
    if not locks:
        raise RuntimeError(f"no @acq map in bpftrace's output {out.name}")
    return list(locks.values())


def lock_summary(locks: list[dict], busiest: int) -> dict:
    """What a run's locks come to: acquisitions (all kinds; mutexes), the BUSIEST locks' acquisitions,
    the top 3 by wait time."""
    acq = [int(lk.get("acquisitions", 0)) for lk in locks]
    by_acq = sorted(acq, reverse=True)
    top = sorted(locks, key=lambda lk: -int(lk.get("wait_ns", 0)))[:3]
    keys = ("name", "kind", "acquisitions", "contended", "wait_ns", "hold_ns")
    return {"calls": sum(acq), "locks": len(locks),
            "mutex_acquisitions": sum(int(lk.get("acquisitions", 0)) for lk in locks if lk.get("kind", "mutex") == "mutex"),
            "busiest_lock": by_acq[0] if by_acq else 0, "busiest_sum": sum(by_acq[:busiest]),
            "top3": [{k: lk[k] for k in keys if k in lk} for lk in top]}


DRD_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors from (\d+) contexts")


def drd_summary(stderr: str) -> dict:
    m = DRD_SUMMARY.search(stderr)
    return {"drd_errors": int(m.group(1)) if m else None, "drd_contexts": int(m.group(2)) if m else None,
            "drd_held_too_long": stderr.count("was held during")}


def bt_script_for(libc: Path, work: Path) -> tuple[Path, str]:
    """(mutex.bt, "") when its libc path is the programs' libc, else a copy with LIBC's path."""
    try:
        if os.path.samefile(BT_LIBC, libc):
            return BT_SCRIPT, ""
    except OSError:
        pass
    copy = work / "mutex.bt"
    copy.write_text(BT_SCRIPT.read_text().replace(BT_LIBC, str(libc)))
    return copy, f"mutex.bt's libc path replaced with {libc}"


def program_libc(prog: Path) -> Optional[Path]:
    """The libc.so.6 PROG loads, from ldd."""
    p = subprocess.run(["ldd", str(prog)], capture_output=True, text=True)
    m = re.search(r"libc\.so\.6 => (\S+)", p.stdout)
    return Path(m.group(1)) if m else None


def preflight(lopi: Optional[Path], lopi_path: Path, pair: Path, work: Path, bt_script: Path,
              cache_env: dict) -> tuple[dict[str, str], dict[str, str]]:
    """({configuration: why it cannot run here}, {configuration: what it printed that the notes
    should say}), from 1,000 pairs under each tool: the tool must count 1,000 on the pair's lock
    (drd: run and print the pair's line)."""
    why, said = {}, {}
    for cfg in (LOPI, DRD, BPF):
        exe = {LOPI: lopi, DRD: "valgrind", BPF: "bpftrace"}[cfg]
        if exe is None or not shutil.which(str(exe)):
            why[cfg] = f"not installed ({lopi_path if cfg == LOPI else exe} not found)"
            continue
        data = work / f"preflight.{cfg}"
        remove(data)
        argv = tool_argv(cfg, [str(pair), "1000"], lopi or Path("lopi"), bt_script, data, None)
        got: object = None
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, LOPI_OUTPUT=str(data), **(cache_env if cfg == LOPI else {})))
            if p.returncode == 0 and "pairs 1000 " in p.stdout:
                if cfg == LOPI:
                    got = lock_summary(lopi_locks(lopi, data), 1)["busiest_lock"]
                elif cfg == BPF:
                    got = lock_summary(bpftrace_locks(data), 1)["busiest_lock"]
                else:
                    got = 1000
        except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
            p, got = None, f"{type(e).__name__}: {e}"
        if p is not None and p.returncode == 0 and got != 1000:
            why[cfg] = f"does not run here: it counted {got} acquisitions of 1,000 on the pair's lock"
        elif p is None or p.returncode != 0:
            lines = (p.stderr + p.stdout).strip().splitlines() if p else []
            errs = [ln for ln in lines if "ERROR" in ln and "RLIMIT_MEMLOCK" not in ln] or lines or [str(got)]
            why[cfg] = f"does not run here (exit {p.returncode if p else '-'}): {errs[-1][:300]}"
        if cfg == BPF and p is not None and "RLIMIT_MEMLOCK" in p.stderr and cfg not in why:
            said[cfg] = "bpftrace prints `ERROR: ... couldn't set RLIMIT_MEMLOCK` and attaches anyway"
        remove(data)
    for cfg in (LOPI, DRD, BPF):
        log(f"{cfg}: {'ready' if cfg not in why else 'skipped: ' + why[cfg]}")
    return why, said
