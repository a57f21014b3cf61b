"""The workloads every benchmark shares: cached gcc builds, W1 (bench/workloads/w1.c) and W2
(sqlite's speedtest1) with their flags, timers and output checks, the common options (part of
the harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

from runs import REPO, RunResult, log, regex_seconds

# Builds are cached here by a hash of gcc's version, flags and inputs, so the benchmarks share them.
BUILD_CACHE = REPO / "work-real" / "bench-build" / "cache"
W1_SRC = REPO / "bench" / "workloads" / "w1.c"
W1_FLAGS = ["-O2", "-g", "-fno-inline", "-fno-optimize-sibling-calls"]
W2_FLAGS = ["-O2", "-g", "-DSQLITE_THREADSAFE=0"]


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
