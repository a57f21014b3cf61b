"""The locks benchmark's workloads (pair.c, sysbench mutex and threads, pigz on a generated
corpus) and the variants that run each under every tool."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import re
from pathlib import Path
from typing import Callable, Optional

import harness as h
from locks_tools import (BPF, CONFIGS, DRD, LOPI, bpftrace_locks, drd_summary, lock_summary, lopi_locks, remove,
                         tool_argv)

log = h.log
TOTAL_TIME = h.regex_seconds(r"^\s*total time:\s+([0-9.]+)s")
PAIR_NS = h.regex_seconds(r"^pairs \d+ ns (\d+)", 1e-9)


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    argv: Callable[[str], list[str]]  # the program's argv for a configuration
    metric: Optional[Callable]  # the program's own timer, or h.WALL
    metric_name: str
    check: Callable[[str], Optional[str]]  # stdout -> what must equal plain's
    stdout_to: Optional[Path] = None  # the program's stdout goes to this file (pigz)
    solo: dict = dataclasses.field(default_factory=dict)  # {cfg: n}: run alone, after the interleaved rounds
    busiest: int = 3  # how many of the busiest locks to sum for the plausibility line
    expected: Optional[Callable[[str], Optional[int]]] = None  # stdout -> acquisitions the program made
    per_acquisition: bool = True  # the table divides the time added by the acquisitions counted


def micro_workload(pair: Path, pairs: dict) -> Workload:
    return Workload("pair", "Uncontended pthread_mutex_lock + unlock pairs (pair.c)",
                    lambda cfg: [str(pair), str(pairs[cfg])], PAIR_NS, "ns per pair",
                    # pair exits non-zero unless its counter equals N: a run that is ok made every pair
                    lambda stdout: "every pair made" if re.search(r"^pairs \d+ ns \d+", stdout, re.M) else None,
                    busiest=1, expected=lambda stdout: int(re.search(r"^pairs (\d+)", stdout, re.M).group(1)))


def sysbench_events(stdout: str) -> Optional[str]:
    m = re.search(r"total number of events:\s+(\d+)", stdout)
    return f"events {m.group(1)}" if m else None


def sysbench_mutex(sysbench: str, locks: int) -> Workload:
    args = ["mutex", "--threads=2", "--mutex-num=64", f"--mutex-locks={locks}", "--mutex-loops=100", "run"]

    def expected(stdout: str) -> Optional[int]:
        m = re.search(r"total number of events:\s+(\d+)", stdout)
        return int(m.group(1)) * locks if m else None

    return Workload("sysbench-mutex", f"sysbench {' '.join(args)}", lambda cfg: [sysbench, *args], TOTAL_TIME,
                    "sysbench's total time", sysbench_events, busiest=64, expected=expected)


def sysbench_threads(sysbench: str, events: int) -> Workload:
    args = ["threads", "--threads=2", "--thread-yields=100", "--thread-locks=4", "--time=0", f"--events={events}",
            "run"]

    def expected(stdout: str) -> Optional[int]:
        # every event: --thread-yields x (lock one of the --thread-locks mutexes, sched_yield, unlock)
        m = re.search(r"total number of events:\s+(\d+)", stdout)
        return int(m.group(1)) * 100 if m else None

    return Workload("sysbench-threads", f"sysbench {' '.join(args)}", lambda cfg: [sysbench, *args], TOTAL_TIME,
                    "sysbench's total time", sysbench_events, busiest=4, expected=expected)


def make_corpus(path: Path, mib: int) -> str:
    """MIB MiB of deterministic data: lines of words from a fixed random vocabulary, with every
    eighth MiB random bytes (incompressible); returns its sha256."""
    rng = random.Random(20240601)
    words = ["".join(rng.choice("etaoinshrdlcumwfgypbvkjxqz") for _ in range(rng.randint(1, 11)))
             for _ in range(4000)]
    hsh = hashlib.sha256()
    with path.open("wb") as out:
        for i in range(mib):
            if i % 8 == 7:
                b = rng.randbytes(1 << 20)
            else:
                parts, n = [], 0
                while n < 1 << 20:
                    line = " ".join(rng.choices(words, k=rng.randint(3, 16))) + "\n"
                    parts.append(line)
                    n += len(line)
                b = "".join(parts).encode()[:1 << 20]
            out.write(b)
            hsh.update(b)
    # pigz stores the input's mtime in the gzip header: a fixed one makes OUT the same from run to run
    os.utime(path, (1_700_000_000, 1_700_000_000))
    return hsh.hexdigest()


def pigz_workload(pigz: str, corpus: Path, out: Path, mib: int) -> Workload:
    return Workload("pigz", f"pigz -p 2 -c of a {mib} MiB corpus", lambda cfg: [pigz, "-p", "2", "-c", str(corpus)],
                    h.WALL, "wall time", lambda stdout: None, stdout_to=out, solo={DRD: 1}, per_acquisition=False)


def file_digest(path: Path, cfg: str) -> str:
    """sha256 of the program's output file. bpftrace writes two newlines to its standard output at
    exit, after the program's: they are left out (the output must otherwise be equal)."""
    data = path.read_bytes()
    if cfg == BPF and data.endswith(b"\n\n"):
        data = data[:-2]
    return f"{len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"


def make_variants(wl: Workload, lopi: Optional[Path], work: Path, skip: dict, bt_script: Path,
                  cache_env: dict) -> list[h.Variant]:
    vs = []
    for cfg in CONFIGS:
        data = work / f"{wl.key}.{cfg}.data"

        def before(idx: int, data=data, cfg=cfg) -> dict:
            remove(data)
            if wl.stdout_to:
                remove(wl.stdout_to)
            return {"LOPI_OUTPUT": str(data)} if cfg == LOPI else {}

        def after(idx: int, stdout: str, stderr: str, env: dict, data=data, cfg=cfg) -> dict:
            extra: dict = {"output": wl.check(stdout)}
            if wl.stdout_to:
                extra["output"] = file_digest(wl.stdout_to, cfg)
                remove(wl.stdout_to)
            if wl.expected:
                extra["expected"] = wl.expected(stdout)
            if cfg == LOPI:
                extra["data_bytes"] = data.stat().st_size if data.is_file() else None
                extra.update(lock_summary(lopi_locks(lopi, data), wl.busiest))
            elif cfg == BPF:
                extra.update(lock_summary(bpftrace_locks(data), wl.busiest))
            elif cfg == DRD:
                extra.update(drd_summary(stderr))
            remove(data)
            return extra

        vs.append(h.Variant(cfg, tool_argv(cfg, wl.argv(cfg), lopi or Path("lopi"), bt_script, data, wl.stdout_to),
                            wl.metric, env=cache_env if cfg == LOPI else {}, before=before, after=after,
                            timeout_s=900, skip_reason=skip.get(cfg, "")))
    return vs


def run_workload(wl: Workload, variants: list[h.Variant], n: int) -> dict[str, list[h.RunResult]]:
    """The interleaved rounds, then the solo variants (n of wl.solo each, no warm-up)."""
    main = [v for v in variants if v.name not in wl.solo]
    res = h.run_interleaved(main, n, log=log)
    for v in variants:
        if v.name in wl.solo:
            log(f"  {v.name} alone, n={wl.solo[v.name]}:")
            res.update(h.run_interleaved([v], wl.solo[v.name], warmup=0, log=log))
    return res
