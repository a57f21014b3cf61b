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


def fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


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


def cached_output(name: str, key_parts: list, produce: Callable[[Path], None], what: str,
                  out_suffix: str = "", build_dir: Path = BUILD_CACHE) -> Path:
    """build_dir/NAME-HASH[suffix], HASH of key_parts (str or bytes, in order); made once by
    produce(tmp path), renamed into place when it returns."""
    key = hashlib.sha256()
    for part in key_parts:
        key.update(part if isinstance(part, bytes) else str(part).encode())
    build_dir.mkdir(parents=True, exist_ok=True)
    out = build_dir / f"{name}-{key.hexdigest()[:12]}{out_suffix}"
    if out.exists():
        return out
    tmp = out.with_name(out.name + ".part")
    t0 = time.time()
    log(f"build: {name} ({what})")
    produce(tmp)
    tmp.rename(out)
    log(f"build: {name} done in {time.time() - t0:.0f} s")
    return out


def build(name: str, argv_tail: list[str], inputs: list[Path], out_suffix: str = "",
          build_dir: Path = BUILD_CACHE) -> Path:
    """`gcc argv_tail -o OUT`, cached under build_dir by a hash of gcc's version, flags and inputs."""

    def gcc(tmp: Path) -> None:
        p = subprocess.run(["gcc", *argv_tail, "-o", str(tmp)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"build of {name} failed:\n{p.stderr[-3000:]}")

    return cached_output(name, [gcc_version(), "\0".join(argv_tail), *(p.read_bytes() for p in inputs)], gcc,
                         f"gcc {' '.join(argv_tail)}", out_suffix, build_dir)


def w2_job(name: str, sqlite_dir: Path, flags: tuple = (), objects: tuple = ()) -> tuple:
    """build() arguments of speedtest1 + the amalgamation with W2_FLAGS, `flags` and `objects`."""
    st_c, sq_c = sqlite_sources(sqlite_dir)
    return (name, [*W2_FLAGS, *flags, f"-I{sqlite_dir}", str(st_c), str(sq_c), *map(str, objects), "-lm"],
            [st_c, sq_c, *objects])


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


def w2_check(stdout: str) -> str:
    """speedtest1's output without its timings (test names, TOTAL line, verification hash)."""
    return "\n".join(re.sub(r"\s+[0-9.]+s$", "", line) for line in stdout.splitlines())


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
    """(median of the runs' extra["calls"], its text with the range when runs differ); the recorded
    rounds' counts, the warm-up's when no recorded round has one."""
    counts = ([r.extra["calls"] for r in runs if "calls" in r.extra and r.round >= 0]
              or [r.extra["calls"] for r in runs if "calls" in r.extra])
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


def write_results(out: Path, md: list[str], bench: str, raw_meta: dict, all_res: dict,
                  machine: list[tuple[str, str]], entries: list[dict], quick: bool, **summary_extra) -> str:
    """A benchmark's outputs: OUT (the Markdown), OUT.runs.json (every run), OUT.summary.json (for
    bench/run.sh's summary); prints the Markdown on stdout. Returns it."""
    text = "\n".join(md)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = out.with_suffix(".runs.json")
    dump_raw(raw, raw_meta, all_res)
    write_summary(out, bench, machine, entries, quick, **summary_extra)
    print(text)
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    log(f"wrote {shown}, {raw.name} and {out.with_suffix('.summary.json').name}")
    return text


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


# ---------------------------------------------------------------- summary (bench/run.sh)

# Chart groups of the workloads (bench/lib/summary.py draws one group of bars per kind).
KIND = {"w1-fib": "W1 fib", "w1-loop": "W1 loop", "w2": "W2 speedtest1",
        "zstd-src-c": "zstd -3 (source build)", "zstd-src-d": "zstd -d (source build)",
        "zstd-deb-c": "zstd -3 (Debian binary)", "zstd-deb-d": "zstd -d (Debian binary)"}
# Tool names shared by the benchmarks: one colour per tool in overhead.png.
TOOL = {
    "base": "uninstrumented",
    "lopi-entry": "lopi entry count",
    "lopi-timing": "lopi entry+exit timing",
    "lopi-sampled": "lopi entry+exit, sampled time",
    "gcc-count": "gcc -finstrument-functions + count hook",
    "gcc-timing": "gcc -finstrument-functions + timing hook",
    "uftrace-pg": "uftrace, -pg build",
    "uftrace-pfe": "uftrace -P ., patchable build",
    "uftrace-dyn": "uftrace -P ., unmodified binary",
    "gprof": "gprof (gcc -pg, mcount)",
    "callgrind": "valgrind callgrind",
    "bpftrace": "bpftrace uprobes",
    "frida-js": "frida Interceptor, JS onEnter",
    "frida-cmodule": "frida Interceptor, CModule onEnter",
}


def summary_entry(bench: str, key: str, workload: str, v: Variant, res: dict, label: str, tool: str,
                  expected: Optional[dict] = None, output: Optional[str] = None, base: str = "baseline") -> dict:
    """One row of bench/results/summary.md: configuration `v` on one workload, next to the baseline
    `base` run in the same rounds. expected: {"fn", "calls"} of W1 (ns/call is left out when the tool
    did not record that function); output: the verdict on its output, else from `v.check`."""
    e = {"bench": bench, "key": key, "kind": KIND.get(key, key), "workload": workload, "config": v.name,
         "label": label, "tool": tool, "is_baseline": v.name == base}
    runs = res.get(v.name, [])
    if v.skip_reason:
        return dict(e, status="skipped", reason=v.skip_reason)
    failed = failure_note(runs)
    if failed or stats(runs) is None:
        return dict(e, status="failed", reason=failed or "no recorded run")
    st, b = stats(runs), stats(res.get(base, []))
    calls, calls_text = median_calls(runs)
    if output is None and v.name != base and v.check is not None:
        output = "DIFFERS" if output_mismatch(v.check, res.get(base, []), runs) else "identical"
    e.update(status="ok", n=st.n, median_s=st.median, lo_s=st.lo, hi_s=st.hi, wall_median_s=st.wall_median,
             calls=calls, calls_text=calls_text, output=output or "-")
    per_fn = next((r.extra["per_fn"] for r in runs if "per_fn" in r.extra), None)
    if v.name != base and b:
        e["ratio"] = st.median / b.median
        e["within_spread"] = st.lo <= b.hi  # its fastest run is not slower than the baseline's slowest
        if expected and per_fn is not None and not per_fn.get(expected["fn"]):
            e["ns_note"] = f"{expected['fn']} not instrumented: ns/call not comparable"
        elif calls:
            e["ns_per_call"] = (st.median - b.median) / calls * 1e9
    return e


def summary_entries(bench: str, key: str, workload: str, variants: list[Variant], res: dict, labels: dict,
                    tools: dict, expected: Optional[dict] = None, outputs: Optional[dict] = None,
                    notes: Optional[dict] = None) -> list[dict]:
    """summary_entry of every variant (labels/tools: by variant name; outputs: verdicts by name;
    notes: extra notes by name)."""
    out = []
    for v in variants:
        e = summary_entry(bench, key, workload, v, res, labels[v.name], tools[v.name], expected,
                          (outputs or {}).get(v.name))
        e["notes"] = list((notes or {}).get(v.name, []))
        out.append(e)
    return out


def fmt_ns(ns: float) -> str:
    """ns per call with 3 significant digits: 1.26, 28.1, 850, 12,300."""
    a = abs(ns)
    if a >= 1000:
        return f"{ns:,.0f}"
    return f"{ns:.3g}" if a >= 1 else f"{ns:.2f}"


def entry_cells(e: dict, brief: bool = False) -> list[str]:
    """[time median [min–max], x baseline, calls, ns/call, output, notes] of a summary entry
    (brief: notes only on why a figure is missing or not significant, and the ratio's goal when the
    entry has one: {"ratio_max", "what"}, shown beside the ratio, never asserted)."""
    if e["status"] != "ok":
        return [e["status"], "-", "-", "-", "-", e.get("reason", "")]
    st = Stats(e["n"], e["median_s"], e["lo_s"], e["hi_s"], e["wall_median_s"])
    notes = [] if brief else list(e.get("notes", []))
    ratio = "x1.00" if e["is_baseline"] else (f"x{e['ratio']:.2f}" if "ratio" in e else "-")
    ns = "-"
    if "ns_per_call" in e:
        ns = fmt_ns(e["ns_per_call"])
    if e.get("ns_note"):
        notes.insert(0, e["ns_note"])
    if e.get("within_spread"):
        notes.insert(0, "within the baseline's run-to-run spread (fastest run ≤ the baseline's slowest)")
    if e.get("goal") and "ratio" in e:
        g = e["goal"]
        met = "met" if e["ratio"] <= g["ratio_max"] else "not met"
        notes.insert(0, f"goal ≤ x{g['ratio_max']:.2f} ({g['what']}): {met}")
    if not brief:
        notes.append(f"n={e['n']}")
    return [fmt_range(st), ratio, e.get("calls_text", fmt_int(e.get("calls"))), ns, e.get("output", "-"),
            "; ".join(notes)]


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


def load_and_time(load_start: str, t_start: float) -> list[tuple[str, str]]:
    """The machine_info lines on the run itself: load average at start and end, run time."""
    return [("load average", f"{load_start} at start, {loadavg()} at end (2 CPUs: other jobs on the machine add noise)"),
            ("run time", f"{time.time() - t_start:.0f} s")]


def results_head(title: str, script: str, quick: bool, machine: list[tuple[str, str]],
                 when: Optional[datetime.datetime] = None) -> list[str]:
    """The first lines of a benchmark's Markdown: title, which command made it and when (WHEN, else now),
    machine."""
    q = " --quick" if quick else ""
    return [f"# {title}" + (" (quick)" if quick else ""), "",
            f"Generated by `{script}{q}` on {when or datetime.datetime.now():%Y-%m-%d %H:%M}; every figure below comes "
            "from that run.", "", *(f"- {k}: {v}" for k, v in machine)]


def write_summary(md_path: Path, bench: str, machine: list[tuple[str, str]], entries: list[dict],
                  quick: bool, **extra) -> Path:
    """MD.summary.json next to a benchmark's table: what bench/lib/summary.py merges. It carries
    the run id bench/run.sh sets ($LOPI_BENCH_RUN_ID), so that the summary only takes figures from
    the run that made it."""
    out = md_path.with_suffix(".summary.json")
    data = {"bench": bench, "run_id": os.environ.get("LOPI_BENCH_RUN_ID", ""), "quick": quick,
            "generated": datetime.datetime.now().isoformat(timespec="seconds"), "results": md_path.name,
            "machine": machine, "entries": entries, **extra}
    out.write_text(json.dumps(data, indent=1))
    return out


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
