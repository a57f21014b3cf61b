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

The second half holds what the benchmarks share beyond running: cached gcc builds, the W1/W2
workloads (flags, timers, output checks), lopi's rewrite/report steps and the floor runner.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
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


# ---------------------------------------------------------------- shared by the benchmarks

REPO = Path(__file__).resolve().parents[2]
# Builds are cached here by a hash of gcc's version, flags and inputs, so the benchmarks share them.
BUILD_CACHE = REPO / "work-real" / "bench-build" / "cache"
W1_SRC = REPO / "bench" / "workloads" / "w1.c"
W1_FLAGS = ["-O2", "-g", "-fno-inline", "-fno-optimize-sibling-calls"]
W2_FLAGS = ["-O2", "-g", "-DSQLITE_THREADSAFE=0"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def gcc_version() -> str:
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def build(name: str, argv_tail: list[str], inputs: list[Path], out_suffix: str = "",
          build_dir: Path = BUILD_CACHE) -> Path:
    """`gcc argv_tail -o OUT`, cached under build_dir by a hash of gcc's version, flags and inputs."""
    key = hashlib.sha256()
    key.update(gcc_version().encode())
    key.update("\0".join(argv_tail).encode())
    for p in inputs:
        key.update(p.read_bytes())
    build_dir.mkdir(parents=True, exist_ok=True)
    out = build_dir / f"{name}-{key.hexdigest()[:12]}{out_suffix}"
    if out.exists():
        return out
    tmp = out.with_name(out.name + ".part")
    t0 = time.time()
    log(f"build: {name} (gcc {' '.join(argv_tail)})")
    p = subprocess.run(["gcc", *argv_tail, "-o", str(tmp)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"build of {name} failed:\n{p.stderr[-3000:]}")
    tmp.rename(out)
    log(f"build: {name} done in {time.time() - t0:.0f} s")
    return out


def build_parallel(jobs: dict[str, tuple], workers: int = 2) -> dict[str, Path]:
    """{key: build() arguments} built two at a time (sqlite3.c takes ~1.5 min at -O2 -g)."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        futs = {k: ex.submit(build, *v) for k, v in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


def sqlite_sources(sqlite_dir: Path) -> tuple[Path, Path]:
    """(speedtest1.c, sqlite3.c) of a fetch_sqlite.sh directory."""
    return sqlite_dir / "speedtest1.c", sqlite_dir / "sqlite3.c"


def sqlite_source_line(sqlite_dir: Path) -> str:
    f = sqlite_dir / "SOURCE.txt"
    return f.read_text().strip() if f.exists() else "?"


# W1 prints `hot_ns=... calls_expected=... result=...`; speedtest1 prints `TOTAL.... 0.123s`.
HOT_NS = regex_seconds(r"^hot_ns=(\d+)", 1e-9)
TOTAL = regex_seconds(r"TOTAL\.+\s+([0-9.]+)s")


def w1_check(stdout: str) -> Optional[str]:
    """What every W1 variant must print identically: the call count and the checksum."""
    m = re.search(r"calls_expected=(\d+) result=(-?\d+)", stdout)
    return m.group(0) if m else None


def w1_expected(base_runs: list[RunResult], fn: str) -> dict:
    """{"fn": fn, "calls": n} from the baseline's `calls_expected=`, or {} when runs disagree."""
    exp = {int(m.group(1)) for r in base_runs if (m := re.search(r"calls_expected=(\d+)", r.stdout))}
    return {"fn": fn, "calls": exp.pop()} if len(exp) == 1 else {}


def w1_groups(fib: tuple[int, int], loop_n: int) -> list[tuple]:
    """(key, title, argv, expected function) of the two W1 workloads."""
    return [
        ("w1-fib", f"W1 fib({fib[0]})x{fib[1]}", ["fib", str(fib[0]), str(fib[1])], "fib"),
        ("w1-loop", f"W1 loop {loop_n:,}", ["loop", str(loop_n)], "tiny"),
    ]


def output_mismatch(check: Optional[Callable[[str], Optional[str]]], base_runs: list[RunResult],
                    runs: list[RunResult]) -> Optional[str]:
    """A note when `check` of a variant's outputs differs from the baseline's, else None."""
    if check is None:
        return None
    want = {check(r.stdout) for r in base_runs}
    got = {check(r.stdout) for r in runs}
    if got == want:
        return None
    return f"OUTPUT DIFFERS from baseline: {sorted(got, key=str)} vs {sorted(want, key=str)}"


def failure_note(runs: list[RunResult]) -> Optional[str]:
    """Why a variant failed (first failed run), or None."""
    bad = [r for r in runs if not r.ok]
    if not bad:
        return None
    r = bad[0]
    tail = (r.stderr.strip().splitlines() or [""])[-1][:160]
    return f"{r.error} in {'warm-up' if r.round < 0 else f'round {r.round + 1}'}; stderr: {tail}"


def median_calls(runs: list[RunResult]) -> tuple[Optional[int], str]:
    """(median of the runs' extra["calls"], its text with the range when runs differ)."""
    counts = [r.extra["calls"] for r in runs if "calls" in r.extra]
    if not counts:
        return None, "-"
    calls = int(statistics.median(counts))
    text = fmt_int(calls)
    if min(counts) != max(counts):
        text += f" (varies {min(counts):,}–{max(counts):,})"
    return calls, text


def after_errors(runs: list[RunResult]) -> list[str]:
    return sorted({r.extra["after_error"] for r in runs if "after_error" in r.extra})


def add_size_args(ap, fib: str = "32 10", loop: str = "100000000", size: str = "25") -> None:
    """The options every benchmark has: -n, --fib, --loop, --size, --lopi, --sqlite-dir."""
    ap.add_argument("--quick", action="store_true", help="n=3 and smaller workloads")
    ap.add_argument("-n", type=int, help="recorded runs per variant (default 5, quick 3)")
    ap.add_argument("--fib", nargs=2, type=int, metavar=("N", "REPS"), help=f"W1 fib size (default {fib})")
    ap.add_argument("--loop", type=int, metavar="N", help=f"W1 loop calls (default {loop})")
    ap.add_argument("--size", type=int, help=f"speedtest1 --size (default {size})")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--sqlite-dir", type=Path, required=True,
                    help="dir with sqlite3.c, speedtest1.c (fetch_sqlite.sh)")


# ---------------------------------------------------------------- lopi


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
    for old in snapshot_dir.glob("lopi-*"):  # copies of earlier builds
        if old != copy:
            old.unlink(missing_ok=True)
    if not copy.exists():
        tmp = copy.with_name(copy.name + ".part")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.rename(copy)
    return copy, info


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
