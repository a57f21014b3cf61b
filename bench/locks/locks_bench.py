#!/usr/bin/env python3
"""What lopi's lock probes cost: `lopi run -q --probe locks` next to valgrind's drd and bpftrace
uprobes on glibc's pthread_mutex_lock/unlock, each recording every lock call of the program.

Workloads:
  pair             `pair N` (pair.c, built here with gcc -O2 -pthread): N uncontended
                   pthread_mutex_lock + pthread_mutex_unlock pairs on one mutex in one thread, timed
                   in-process around the loop; ns per pair, and ns added per pair against plain
  sysbench-mutex   `sysbench mutex --threads=2 --mutex-num=64 --mutex-locks=L --mutex-loops=100`:
                   sysbench's own `total time`; check: its `total number of events`
  sysbench-threads `sysbench threads --threads=2 --thread-yields=100 --thread-locks=4 --time=0
                   --events=E`: `total time`; check: `total number of events`
  pigz             `pigz -p 2 -c CORPUS > OUT` of a deterministic corpus (64 MiB, quick 16 MiB):
                   the process's wall time; check: sha256 of the output
Every variant of a workload runs interleaved round-robin after a warm-up round (bench/lib/harness.py);
drd on pigz runs once, after the others (valgrind runs pigz ~30x slower).

Run through run.sh; `locks_bench.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "locks"
BT_SCRIPT = HERE / "mutex.bt"
BT_LIBC = "/lib/x86_64-linux-gnu/libc.so.6"  # the path written in mutex.bt
log = h.log

BASE, LOPI, DRD, BPF = "plain", "lopi", "drd", "bpftrace"
CONFIGS = [BASE, LOPI, DRD, BPF]
LABEL = {BASE: "plain (uninstrumented)", LOPI: "lopi run -q --probe locks",
         DRD: "valgrind --tool=drd --exclusive-threshold=10", BPF: "bpftrace uprobes (mutex.bt)"}
# Pairs per configuration in the micro-benchmark: drd costs ~1,000x and bpftrace's uprobes ~5,000x
# what lopi adds per pair here, so they make fewer to keep each run around a second; ns per pair
# comes from the program's own timer either way.
PAIRS = {BASE: 2_000_000, LOPI: 2_000_000, DRD: 200_000, BPF: 20_000}
QUICK_PAIRS = {BASE: 500_000, LOPI: 500_000, DRD: 50_000, BPF: 10_000}
TARGET_NS = 25  # the aim: at most 25 ns added per uncontended lock/unlock pair
TOTAL_TIME = h.regex_seconds(r"^\s*total time:\s+([0-9.]+)s")
PAIR_NS = h.regex_seconds(r"^pairs \d+ ns (\d+)", 1e-9)


# ---------------------------------------------------------------- tools


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


# ---------------------------------------------------------------- workloads


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


# ---------------------------------------------------------------- tables


def recorded(runs: list[h.RunResult]) -> list[h.RunResult]:
    return [r for r in runs if r.ok and r.round >= 0]


def values(runs: list[h.RunResult], key: str) -> list[int]:
    return sorted({r.extra[key] for r in recorded(runs) if r.extra.get(key) is not None})


def fmt_values(vals: list[int]) -> str:
    return "-" if not vals else h.fmt_int(vals[0]) if len(vals) == 1 else f"{vals[0]:,}–{vals[-1]:,}"


def run_notes(wl: Workload, v: h.Variant, runs: list[h.RunResult], base_out: set, said: dict,
              base_runs: list[h.RunResult]) -> list[str]:
    """Why a row is empty, or what the runs showed beyond the figures."""
    if v.skip_reason:
        return ["skipped: " + v.skip_reason]
    notes = [h.failure_note(runs) or ""] + h.after_errors(runs)
    outs = {r.extra.get("output") for r in recorded(runs)}
    if v.name != BASE and base_out and outs != base_out:
        notes.append(f"OUTPUT DIFFERS from plain's: {sorted(map(str, outs))}")
    if v.name in wl.solo:
        notes.append("run alone after the interleaved rounds, no warm-up")
    st, base = h.stats(runs), h.stats(base_runs)
    same_work = wl.key != "pair" or v.name == LOPI  # pair: drd and bpftrace make fewer pairs
    if v.name != BASE and same_work and st and base and st.lo <= base.hi:
        notes.insert(0, "within plain's run-to-run spread (fastest run ≤ plain's slowest)")
    if v.name == LOPI and (sizes := values(runs, "data_bytes")):
        notes.append(f"data file {h.fmt_bytes(int(statistics.median(sizes)))}")
    if v.name == DRD:
        errs, held = values(runs, "drd_errors"), values(runs, "drd_held_too_long")
        if errs:
            notes.append(f"drd reported {fmt_values(errs)} errors (data races, lock misuse)")
        if held and held[-1]:
            notes.append(f"{fmt_values(held)} locks held > 10 ms")
    if v.name in said:
        notes.append(said[v.name])
    return [x for x in notes if x] + [f"n={len(recorded(runs))}"]


def base_outputs(res: dict) -> set:
    return {r.extra.get("output") for r in recorded(res[BASE])}


def output_cell(v: h.Variant, runs: list[h.RunResult], base_out: set) -> str:
    if v.name == BASE:
        return fmt_out(base_out)
    outs = {r.extra.get("output") for r in recorded(runs)}
    return "identical" if outs == base_out else "DIFFERS"


def fmt_out(outs: set) -> str:
    return " / ".join(sorted(map(str, outs))) if outs else "-"


def micro_table(wl: Workload, variants: list[h.Variant], res: dict, pairs: dict, said: dict
                ) -> tuple[list[str], dict]:
    """The per-pair table and {config: ns added per pair}."""
    per = {}
    for v in variants:
        st = h.stats(res[v.name])
        if st and not v.skip_reason:
            k = 1e9 / pairs[v.name]
            per[v.name] = h.Stats(st.n, st.median * k, st.lo * k, st.hi * k, st.wall_median)
    base = per.get(BASE)
    added = {cfg: s.median - base.median for cfg, s in per.items() if base and cfg != BASE}
    base_out = base_outputs(res)
    rows = []
    for v in variants:
        s, runs = per.get(v.name), res[v.name]
        notes = "; ".join(run_notes(wl, v, runs, {None} if v.name == BASE else base_out, said, res[BASE]))
        if not s or not base:
            rows.append([LABEL[v.name], h.fmt_int(pairs[v.name]), "-", "-", "-", "-", "-", notes])
            continue
        counted = values(runs, "busiest_lock") if v.name in (LOPI, BPF) else []
        if counted and counted != [pairs[v.name]]:
            notes += f"; COUNTED {fmt_values(counted)} acquisitions of the pair's lock, not {pairs[v.name]:,}"
        rel = (f"{added[v.name] / added[LOPI]:,.0f}x" if v.name not in (BASE, LOPI) and added.get(LOPI, 0) > 0
               else "1x" if v.name == LOPI else "-")
        rows.append([LABEL[v.name], h.fmt_int(pairs[v.name]), f"{s.median:,.1f} [{s.lo:,.1f}–{s.hi:,.1f}]",
                     "-" if v.name == BASE else f"{added[v.name]:,.1f}",
                     "x1.00" if v.name == BASE else f"x{s.median / base.median:.2f}", rel,
                     fmt_values(counted) if v.name in (LOPI, BPF) else "-", notes])
    header = ["variant", "pairs", "ns per pair median [min–max]", "ns added per pair", "x plain",
              "added / lopi's added", "acquisitions of the pair's lock counted by the tool", "notes"]
    return [h.markdown_table(header, rows)], added


def run_table(wl: Workload, variants: list[h.Variant], res: dict, said: dict) -> list[str]:
    base = h.stats(res[BASE])
    base_out = base_outputs(res)
    rows = []
    for v in variants:
        runs = res[v.name]
        st = h.stats(runs)
        notes = "; ".join(run_notes(wl, v, runs, base_out, said, res[BASE]))
        if v.skip_reason or not st:
            rows.append([LABEL[v.name], "-", "-", "-", "-", "-", "-", notes])
            continue
        calls, calls_text = h.median_calls(runs) if v.name in (LOPI, BPF) else (None, "-")
        ratio = f"x{st.median / base.median:.2f}" if base else "-"
        added = "-"
        if base and calls and v.name != BASE and wl.per_acquisition:
            added = h.fmt_ns((st.median - base.median) / calls * 1e9)
        rows.append([LABEL[v.name], h.fmt_range(st), ratio, h.fmt_time(st.wall_median), calls_text, added,
                     output_cell(v, runs, base_out), notes])
    header = ["variant", f"{wl.metric_name} median [min–max]", "x plain", "process wall median",
              "lock acquisitions counted", "ns added per acquisition", "output", "notes"]
    return [h.markdown_table(header, rows)]


def fmt_lock(lk: dict) -> str:
    kind = f" ({lk['kind']})" if "kind" in lk else ""
    cont = f", contended {h.fmt_int(lk.get('contended'))}" if "contended" in lk else ""
    return (f"`{lk.get('name', '?')}`{kind}: acquisitions {h.fmt_int(lk.get('acquisitions'))}{cont}, "
            f"wait {lk.get('wait_ns', 0) / 1e6:,.3f} ms, hold {lk.get('hold_ns', 0) / 1e6:,.3f} ms")


def lock_notes(wl: Workload, variants: list[h.Variant], res: dict) -> list[str]:
    """lopi's top locks (its first recorded run's report) and bpftrace's for comparison; the
    plausibility of their counts against what the program did."""
    out = []
    for cfg in (LOPI, BPF):
        runs = [r for r in recorded(res.get(cfg, [])) if "top3" in r.extra]
        if not runs:
            continue
        r = runs[0]
        what = ("lopi's report (`lopi report DATA --locks --format json`)" if cfg == LOPI
                else "bpftrace's maps (pthread_mutex_lock only)")
        out.append(f"- {what}, round {r.round + 1}: {r.extra['locks']:,} locks, {r.extra['calls']:,} acquisitions"
                   + (f" ({r.extra['mutex_acquisitions']:,} of mutexes)" if cfg == LOPI else "")
                   + "; top 3 by wait:")
        out += [f"  - {fmt_lock(lk)}" for lk in r.extra["top3"]]
    if wl.key in ("sysbench-mutex", "sysbench-threads", "pair"):
        for cfg in (LOPI, BPF):
            runs = [r for r in recorded(res.get(cfg, [])) if "busiest_sum" in r.extra]
            if not runs:
                continue
            got = sorted({r.extra["busiest_sum"] for r in runs})
            exp = sorted({r.extra["expected"] for r in runs if r.extra.get("expected") is not None})
            what = {"sysbench-mutex": "sysbench's events x --mutex-locks",
                    "sysbench-threads": "sysbench's events x --thread-yields",
                    "pair": "the program's pairs"}[wl.key]
            which = "the busiest lock" if wl.busiest == 1 else f"the {wl.busiest} busiest locks"
            out.append(f"- Plausibility, {cfg}: acquisitions of {which} {fmt_values(got)} "
                       f"{'=' if got == exp else '≠'} {what} {fmt_values(exp)}")
    return out


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="n=3, 500,000 pairs, a quarter of sysbench's work, a 16 MiB pigz corpus")
    ap.add_argument("-n", type=int, help="recorded runs per variant (default 5, quick 3)")
    ap.add_argument("--mutex-locks", type=int, help="sysbench mutex --mutex-locks (default 200000, quick 50000)")
    ap.add_argument("--events", type=int, help="sysbench threads --events (default 2000, quick 500)")
    ap.add_argument("--mib", type=int, help="pigz corpus size in MiB (default 64, quick 16)")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first (default: /dev/shm/lopi-bench-locks, "
                    "a tmpfs, else work-real/bench-build/locks/work)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "locks.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    pairs = QUICK_PAIRS if a.quick else PAIRS
    mutex_locks = a.mutex_locks or (50_000 if a.quick else 200_000)
    events = a.events or (500 if a.quick else 2000)
    mib = a.mib or (16 if a.quick else 64)
    t_start, load_start = time.time(), h.loadavg()

    work = a.work or (Path("/dev/shm/lopi-bench-locks") if os.access("/dev/shm", os.W_OK) else BUILD / "work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # lopi's plan cache: the benchmark's own (filled by the warm-up round), so that another lopi
    # emptying ~/.cache/lopi meanwhile cannot turn a recorded run into a planning one
    cache_env = {"XDG_CACHE_HOME": str(work / "cache")}
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    pair_src = HERE / "pair.c"
    pair = h.build("pair", ["-O2", "-pthread", str(pair_src)], [pair_src])
    libc = program_libc(pair)
    bt_script, bt_note = (bt_script_for(libc, work) if libc else (BT_SCRIPT, "libc not found by ldd"))
    skip, said = preflight(lopi, a.lopi, pair, work, bt_script, cache_env)
    if bt_note:
        said[BPF] = "; ".join(x for x in (said.get(BPF), bt_note) if x)

    workloads = [micro_workload(pair, pairs)]
    missing = {}
    sysbench, pigz = shutil.which("sysbench"), shutil.which("pigz")
    if sysbench:
        workloads += [sysbench_mutex(sysbench, mutex_locks), sysbench_threads(sysbench, events)]
    else:
        missing["sysbench mutex, sysbench threads"] = "sysbench not installed (Debian's `sysbench` package)"
    corpus_sha = ""
    if pigz:
        corpus = work / f"corpus-{mib}M.bin"
        t0 = time.time()
        corpus_sha = make_corpus(corpus, mib)
        log(f"corpus: {corpus} ({mib} MiB, sha256 {corpus_sha[:16]}) in {time.time() - t0:.1f} s")
        workloads.append(pigz_workload(pigz, corpus, work / "pigz-out.gz", mib))
    else:
        missing["pigz"] = "pigz not installed (Debian's `pigz` package)"

    all_res = {}
    for wl in workloads:
        log(f"=== {wl.title}")
        variants = make_variants(wl, lopi, work, skip, bt_script, cache_env)
        all_res[wl.key] = (wl, variants, run_workload(wl, variants, n))

    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        *((tool, h.tool_version(argv)) for tool, argv in (
            ("glibc", ["ldd", "--version"]), ("valgrind", ["valgrind", "--version"]),
            ("bpftrace", ["bpftrace", "--version"]), ("sysbench", ["sysbench", "--version"]),
            ("pigz", ["pigz", "--version"]))),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("Locks: lopi's lock probes next to drd and bpftrace", "bench/locks/run.sh", a.quick, machine)
    md += ["", "## Method", "",
           "- Every tool records every `pthread_mutex_lock`/`unlock` call of the program and its threads: "
           "`lopi run -q --probe locks` (probes spliced at the entry point into glibc's lock functions — mutexes, "
           "rwlocks, spinlocks, semaphores, condition variables, barriers, thread calls — and the `futex` calls "
           "inside them; acquisitions, contention, wait, blocked and hold time per lock and call site; data to "
           "`$LOPI_OUTPUT`, a fresh file per run, read with `lopi report DATA --locks --format json`, then deleted; "
           "plan cache in the scratch directory, filled by the warm-up round); "
           "`valgrind --tool=drd --exclusive-threshold=10` (a data-race detector that follows every lock and "
           "memory access: the heavyweight anchor); `bpftrace -q` with [mutex.bt](../locks/mutex.bt) (uprobes "
           "on glibc's `pthread_mutex_lock` entry and return and `pthread_mutex_unlock` entry, filtered on the "
           "command's pid: acquisitions, wait and hold time per lock address in BPF maps).",
           f"- Variants of a workload interleaved round-robin after one unrecorded warm-up round, n={n}; "
           "median [min–max] of the recorded runs; x plain = median / plain median. A variant that cannot run "
           "here is shown as skipped, with the reason.",
           "- pair: [pair.c](../locks/pair.c) built `gcc -O2 -pthread`, N lock+unlock pairs on one mutex in one "
           "thread (never contended), timed in-process with `clock_gettime(CLOCK_MONOTONIC)` around the loop "
           "only; ns per pair = loop time / N; ns added = variant's median − plain's. drd and bpftrace make "
           "fewer pairs (N in the table) so that each run stays around a second. The tools' count of the pair's "
           "lock must be N.",
           "- sysbench: Debian's `sysbench`, 2 threads; metric = sysbench's `total time` (the workers' run, "
           "without start-up: lopi's set-up and data writing are in the process wall time column); output "
           "check = `total number of events`. `mutex`: every event (one per thread) takes --mutex-locks "
           "random ones of 64 mutexes, after a 100-iteration busy loop each; `threads`: every event makes 100 "
           "lock / sched_yield / unlock rounds on one of 4 mutexes. ns added per acquisition = (median − plain "
           "median) / the acquisitions the tool counted: wall time, with 2 threads acquiring at once.",
           "- pigz: Debian's `pigz -p 2 -c CORPUS > OUT` (2 compression threads handing blocks over with mutexes "
           "and condition variables); CORPUS = deterministic lines of words from a fixed random vocabulary with "
           "every eighth MiB random bytes, generated in the scratch directory (tmpfs when /dev/shm is writable)"
           + (f", sha256 {corpus_sha[:16]}" if corpus_sha else "")
           + "; metric = the whole process's wall time (tool start-up and exit included); output check = the "
             "sha256 of OUT (bpftrace's two trailing newlines on its standard output left out). No ns per "
             "acquisition: pigz takes a few thousand locks, and its wall time includes the tools' start-up. "
             "drd runs once, after the interleaved rounds: valgrind runs pigz ~30x slower.",
           ""]
    added: dict = {}
    for key, (wl, variants, res) in all_res.items():
        md += [f"## {wl.title}", ""]
        if key == "pair":
            table, added = micro_table(wl, variants, res, pairs, said)
            md += table + [""]
            if LOPI in added:
                lo = added[LOPI]
                md.append(f"- lopi adds {lo:.1f} ns per uncontended lock/unlock pair: target ≤ {TARGET_NS} ns "
                          f"{'met' if lo <= TARGET_NS else 'NOT met'}.")
                for cfg in (DRD, BPF):
                    if cfg in added and lo > 0:
                        md.append(f"- {cfg} adds {added[cfg]:,.0f} ns per pair, {added[cfg] / lo:,.0f}x lopi's.")
        else:
            md += run_table(wl, variants, res, said) + [""]
        md += lock_notes(wl, variants, res) + [""]
    for what, why in missing.items():
        md += [f"## {what}", "", f"Not run: {why}.", ""]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    raw = a.out.with_suffix(".runs.json")
    meta = {"n": n, "pairs": pairs, "mutex_locks": mutex_locks, "events": events, "pigz_mib": mib,
            "corpus_sha256": corpus_sha, "work": str(work), "skipped": skip, "missing": missing,
            "machine": machine, "ns_added_per_pair": added,
            "argv": {k: {v.name: v.argv for v in vs} for k, (_, vs, _) in all_res.items()}}
    h.dump_raw(raw, meta, {k: r for k, (_, _, r) in all_res.items()})
    print(text)
    shown = a.out.relative_to(REPO) if a.out.is_relative_to(REPO) else a.out
    log(f"wrote {shown} and {raw.name}")
    shutil.rmtree(work, ignore_errors=True)  # tmpfs: memory
    return 0


if __name__ == "__main__":
    sys.exit(main())
