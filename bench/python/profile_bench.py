#!/usr/bin/env python3
"""lopi's Python-level profile next to cProfile, on Debian's /usr/bin/python3.11 (issue 31: "The
Python profile of a test workload names the same top-5 Python functions by inclusive time as
cProfile on it, at a fraction of cProfile's cost (both measured)").

Two workloads: fixtures/python/profile_work.py (few calls, long loops; run by timed.py, which
prints its CPU time) and calls_work.py (~8,800 small calls per round), each printing the CPU time
of its main part (`cpu_s=`, time.process_time). Configurations, interleaved round-robin after one
unrecorded warm-up round, the order rotated each round: the program alone (native);
`python3.11 -m cProfile -o FILE`; `lopi pyprofile --format json -o FILE` (199 Hz of CPU time);
the same with `--calls`. Then, per workload: the costs (in-program CPU time and wall time, x
native), the top five functions of the workload's file by inclusive time (cProfile's cumulative
time, lopi's inclusive samples), and lopi's call counts against cProfile's ncalls.

Writes bench/results/python-profile.md and python-profile.runs.json. Run through run.sh; --help
lists the knobs.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402
import profile_tables as t  # noqa: E402
from profile_tables import CPROFILE, LOPI, LOPI_CALLS, NATIVE  # noqa: E402

PYTHON = "/usr/bin/python3.11"  # Debian's: lopi reads its structures; `python3.11` on PATH may be pyenv's
HZ = 199
CONFIGS = (NATIVE, CPROFILE, LOPI, LOPI_CALLS)

CPU_RX = re.compile(r"^cpu_s=([0-9.]+)$", re.M)
PHASE_RX = re.compile(r"^phase_s (.*)$", re.M)
NOT_TAKEN_RX = re.compile(r"lopi: (\d+) profile: samples not taken")
FRAME_RX = re.compile(r"^(?P<qual>.*) \((?P<file>.*):(?P<line>\d+)\)$")


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    script: Path  # the file whose functions are compared
    argv: list[str]  # the interpreter's arguments
    # The functions' inclusive shares without a profiler (name -> %), from the native runs, and
    # where they come from; None: not known.
    truth: Callable[[list[h.RunResult]], Optional[dict[str, float]]]
    truth_label: str
    call_heavy: bool


def designed_shares(_runs: list[h.RunResult]) -> dict[str, float]:
    """profile_work.py's shares as its docstring gives them (each function loops on its own)."""
    return {"parse": 65.0, "tokenize": 45.0, "render": 22.0, "classify": 15.0, "checksum": 8.0}


def measured_shares(runs: list[h.RunResult]) -> Optional[dict[str, float]]:
    """calls_work.py's phases (process_time around each call main makes) / its main part's CPU
    time, median over the native runs."""
    shares: dict[str, list[float]] = {}
    for r in runs:
        if r.ok and r.round >= 0 and r.extra.get("phases"):
            for name, s in r.extra["phases"].items():
                shares.setdefault(name, []).append(100 * s / r.metric_s)
    return {name: statistics.median(v) for name, v in shares.items()} or None


def workloads(quick: bool, rounds_fixture: Optional[int], rounds_calls: Optional[int]) -> list[Workload]:
    fixture = REPO / "fixtures" / "python" / "profile_work.py"
    calls = HERE / "calls_work.py"
    ra = rounds_fixture or (1000 if quick else 2000)
    rb = rounds_calls or (150 if quick else 600)
    return [
        Workload("profile_work", f"fixtures/python/profile_work.py {ra}: few calls, long loops", fixture,
                 [str(HERE / "timed.py"), str(fixture), str(ra)], designed_shares, "designed shares (its docstring)",
                 False),
        Workload("calls_work", f"bench/python/calls_work.py {rb}: call-heavy", calls, [str(calls), str(rb)],
                 measured_shares, "process_time around main's calls", True),
    ]


def func_key(name: str, line: int) -> str:
    """A function of the workload's file: its code object's name (cProfile's) and first line."""
    return f"{name}:{line}"


def cprofile_functions(path: Path, script: Path) -> dict:
    """cProfile's stats file: the workload file's functions ({key: name, line, cc, nc, ct}), the
    profile's total time and its calls of everything (builtins included)."""
    st = pstats.Stats(str(path))
    funcs = {}
    for (file, line, name), (cc, nc, _tt, ct, _callers) in st.stats.items():
        if file == str(script):
            funcs[func_key(name, line)] = {"name": name, "line": line, "cc": cc, "nc": nc, "ct": ct}
    return {"functions": funcs, "total_s": st.total_tt, "all_calls": st.total_calls}


def lopi_functions(path: Path, script: Path) -> dict:
    """lopi pyprofile's JSON: the workload file's functions ({key: qualname, line, inclusive and
    self samples, calls}), all samples and those outside Python code."""
    data = json.loads(path.read_text())
    funcs = {}
    for row in data["functions"]:
        m = FRAME_RX.match(row["function"])
        if not m or m["file"] != str(script):
            continue
        qual, line = m["qual"], int(m["line"])
        funcs[func_key(qual.rsplit(".", 1)[-1], line)] = {
            "name": qual, "line": line, "incl": row["inclusive_samples"], "self": row["self_samples"],
            "calls": row.get("calls")}
    return {"functions": funcs, "samples": data["samples"], "outside": data["outside_python"], "hz": data["hz"]}


def cpu_metric(stdout: str, stderr: str) -> Optional[float]:
    m = CPU_RX.search(stderr)
    return float(m.group(1)) if m else None


def program_output(stdout: str) -> Optional[str]:
    """The workload's result line: the same under every tool."""
    return next((line for line in stdout.splitlines() if line.startswith("total ")), None)


def variants(wl: Workload, lopi: Optional[Path], work: Path, skip: dict) -> list[h.Variant]:
    vs = []
    for cfg in CONFIGS:
        out = work / f"{wl.key}.{cfg}.out"
        tool = {NATIVE: [PYTHON], CPROFILE: [PYTHON, "-m", "cProfile", "-o", str(out)],
                LOPI: [str(lopi), "pyprofile", "--hz", str(HZ), "--format", "json", "-o", str(out), "--", PYTHON],
                LOPI_CALLS: [str(lopi), "pyprofile", "--hz", str(HZ), "--calls", "--format", "json", "-o", str(out),
                             "--", PYTHON]}[cfg]

        def before(idx: int, out=out) -> dict:
            out.unlink(missing_ok=True)
            return {}

        def after(idx: int, stdout: str, stderr: str, env: dict, out=out, cfg=cfg) -> dict:
            extra: dict = {}
            m = PHASE_RX.search(stderr)
            if m:
                extra["phases"] = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
            if cfg == CPROFILE:
                extra["cprofile"] = cprofile_functions(out, wl.script)
            elif cfg in (LOPI, LOPI_CALLS):
                extra["lopi"] = lopi_functions(out, wl.script)
                m = NOT_TAKEN_RX.search(stderr)
                extra["lopi"]["not_taken"] = int(m.group(1)) if m else 0
            out.unlink(missing_ok=True)
            return extra

        vs.append(h.Variant(cfg, [*tool, *wl.argv], cpu_metric, before=before, after=after, check=program_output,
                            timeout_s=1800, skip_reason=skip.get(cfg, "")))
    return vs


def generators(script: Path) -> set[int]:
    """First lines of the generator functions and generator expressions of `script` (their code
    objects' first lines): their calls are counted at every resumption, by both tools."""
    def own_nodes(fn: ast.AST):
        """fn's nodes outside the functions and classes defined in it."""
        todo = list(ast.iter_child_nodes(fn))
        while todo:
            node = todo.pop()
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                yield node
                todo.extend(ast.iter_child_nodes(node))

    lines = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.GeneratorExp):
            lines.add(node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_nodes(node)):
                lines.add(node.decorator_list[0].lineno if node.decorator_list else node.lineno)
    return lines


def preflight(lopi: Optional[Path], lopi_arg: Path) -> dict:
    """{config: why it cannot run}."""
    if lopi is None:
        why = f"lopi binary not found ({lopi_arg})"
    elif h._cmd([str(lopi), "pyprofile", "--help"]) == "":
        why = f"`{lopi} pyprofile` not available in this build"
    else:
        return {}
    return {LOPI: why, LOPI_CALLS: why}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=2 (default 5) and smaller workloads")
    ap.add_argument("-n", type=int, help="recorded runs per configuration")
    ap.add_argument("--rounds-fixture", type=int, help="profile_work.py's rounds (default 2000, quick 1000)")
    ap.add_argument("--rounds-calls", type=int, help="calls_work.py's rounds (default 600, quick 150)")
    ap.add_argument("--only", help="one workload: profile_work or calls_work")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "python-profile.md")
    a = ap.parse_args()
    n = a.n or (2 if a.quick else 5)
    t_start, load_start = time.time(), h.loadavg()
    if not os.access(PYTHON, os.X_OK):
        raise SystemExit(f"{PYTHON} not found: Debian's python3.11 is what lopi pyprofile reads")

    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="lopi-bench-python-", dir=shm))
    lopi, lopi_line = h.find_lopi(a.lopi, work / "bin")
    skip = preflight(lopi, a.lopi)
    for why in sorted(set(skip.values())):
        h.log(f"skipped: {why}")

    wls = [wl for wl in workloads(a.quick, a.rounds_fixture, a.rounds_calls) if not a.only or wl.key == a.only]
    all_res, sections, short, summaries = {}, [], [], []
    for wl in wls:
        h.log(f"=== {wl.title}, n={n}")
        vs = variants(wl, lopi, work, skip)
        res = h.run_interleaved(vs, n, log=h.log)
        all_res[wl.key] = res
        view = t.WorkloadView(wl.key, wl.title, wl.script, vs, res, wl.truth(res[NATIVE]), wl.truth_label,
                              generators(wl.script), wl.call_heavy)
        lines, summary = t.workload_section(view)
        sections += lines
        short.append(t.short_line(view, summary))
        summaries.append((view, summary))
    shutil.rmtree(work, ignore_errors=True)

    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        ("python", f"{PYTHON}: {h.tool_version([PYTHON, '--version'])} (Debian's; cProfile from its standard library)"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("Python profiles: lopi pyprofile next to cProfile", "bench/python/run.sh", a.quick, machine)
    md += ["", "## Results in short", "", t.conclusion(summaries), "", *short, "", "## Method", "",
           *t.method(n, HZ, PYTHON), *sections, ""]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    raw = a.out.with_suffix(".runs.json")
    h.dump_raw(raw, {"n": n, "quick": a.quick, "hz": HZ, "python": PYTHON, "machine": machine}, all_res)
    print(text)
    h.log(f"wrote {a.out}, {raw.name}")
    failed = any(h.failure_note(runs) for res in all_res.values() for runs in res.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
