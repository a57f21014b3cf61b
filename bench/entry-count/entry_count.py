#!/usr/bin/env python3
"""Cost of lopi's entry-count probe, next to the uninstrumented program and gcc -finstrument-functions.

Workloads (built here, same flags as the anchor measurements):
  W1 fib   `w1 fib N R`   R x fib(N), 17-instruction recursive function
  W1 loop  `w1 loop N`    N calls of tiny() (lea; ret)
  W2       `speedtest1 --memdb --size S` (sqlite from `apt-get source sqlite3`), TOTAL
Variants: baseline; `lopi rewrite` (all functions, counts to $LOPI_OUTPUT); gcc -finstrument-functions
linked with count_hooks.c. Per-call overhead = (median - median_baseline) / calls, where calls are
the counts lopi's report gives for the lopi rows and the hook's own count for the gcc rows.

Run through run.sh; `entry_count.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "entry-count"
W1_SRC = REPO / "bench" / "workloads" / "w1.c"
HOOKS_SRC = HERE / "count_hooks.c"
FLOOR_SRC = HERE / "floor.c"
W1_FLAGS = ["-O2", "-g", "-fno-inline", "-fno-optimize-sibling-calls"]
W2_FLAGS = ["-O2", "-g", "-DSQLITE_THREADSAFE=0"]
FINSTR = ["-finstrument-functions"]

BASE, LOPI, GCC = "baseline", "lopi", "gcc-finstr"
LABEL = {
    BASE: "baseline (uninstrumented)",
    LOPI: "lopi rewrite, entry count (all functions)",
    GCC: "gcc -finstrument-functions + count hook",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- building


def gcc_version() -> str:
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def build(name: str, argv_tail: list[str], inputs: list[Path], out_suffix: str = "") -> Path:
    """`gcc argv_tail -o OUT`, cached under BUILD by a hash of gcc's version, flags and inputs."""
    key = hashlib.sha256()
    key.update(gcc_version().encode())
    key.update("\0".join(argv_tail).encode())
    for p in inputs:
        key.update(p.read_bytes())
    out = BUILD / f"{name}-{key.hexdigest()[:12]}{out_suffix}"
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


def build_all(sqlite_dir: Path) -> dict:
    BUILD.mkdir(parents=True, exist_ok=True)
    hooks = build("count_hooks", ["-O2", "-c", str(HOOKS_SRC)], [HOOKS_SRC], ".o")
    b = {
        "w1": {
            BASE: build("w1", [*W1_FLAGS, str(W1_SRC)], [W1_SRC]),
            GCC: build("w1-finstr", [*W1_FLAGS, *FINSTR, str(W1_SRC), str(hooks)], [W1_SRC, hooks]),
        },
        "floor": build("floor", ["-O2", str(FLOOR_SRC)], [FLOOR_SRC]),
    }
    st_c, sq_c = sqlite_dir / "speedtest1.c", sqlite_dir / "sqlite3.c"
    common = [*W2_FLAGS, f"-I{sqlite_dir}", str(st_c), str(sq_c)]
    jobs = {
        BASE: ("speedtest1", [*common, "-lm"], [st_c, sq_c]),
        GCC: ("speedtest1-finstr", [*common[:3], *FINSTR, *common[3:], str(hooks), "-lm"], [st_c, sq_c, hooks]),
    }
    # sqlite3.c takes ~1.5 min at -O2 -g: build both variants at once (2 CPUs).
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        futs = {k: ex.submit(build, *v) for k, v in jobs.items()}
        b["w2"] = {k: f.result() for k, f in futs.items()}
    return b


# ---------------------------------------------------------------- lopi


def lopi_rewrite(lopi: Path, prog: Path, out: Path) -> tuple[Optional[str], float, str]:
    """(error or None, seconds, lopi's stderr)."""
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([str(lopi), "rewrite", str(prog), "-o", str(out)],
                           capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return "lopi rewrite timed out (900 s)", 900.0, ""
    dt = time.perf_counter() - t0
    msg = (p.stderr + p.stdout).strip()
    if p.returncode != 0 or not out.exists():
        last = msg.splitlines()[-1] if msg else ""
        return f"lopi rewrite failed (exit {p.returncode}): {last}", dt, msg
    return None, dt, msg


def lopi_counts(lopi: Path, data: Path) -> dict:
    """Calls per function from `lopi report DATA --format json`."""
    p = subprocess.run([str(lopi), "report", str(data), "--format", "json"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"lopi report exit {p.returncode}: {p.stderr.strip()[-300:]}")
    rep = json.loads(p.stdout)
    per_fn: dict[str, int] = {}
    for f in rep["functions"]:
        per_fn[f["name"]] = per_fn.get(f["name"], 0) + int(f["calls"])
    return {"calls": sum(per_fn.values()), "per_fn": per_fn, "functions": len(rep["functions"]),
            "incomplete": bool(rep.get("incomplete", False))}


# ---------------------------------------------------------------- variants


HOT_NS = h.regex_seconds(r"^hot_ns=(\d+)", 1e-9)
TOTAL = h.regex_seconds(r"TOTAL\.+\s+([0-9.]+)s")
HOOK_RX = re.compile(r"^count_hooks: calls=(\d+)", re.M)


def w1_check(stdout: str) -> Optional[str]:
    m = re.search(r"calls_expected=(\d+) result=(-?\d+)", stdout)
    return m.group(0) if m else None


def hook_calls(idx: int, stdout: str, stderr: str, env: dict) -> dict:
    m = HOOK_RX.search(stderr)
    return {"calls": int(m.group(1))} if m else {"after_error": "no `count_hooks: calls=` line"}


def make_variants(workload: str, argv_tail: list[str], bins: dict, lopi: Optional[Path],
                  lopi_skip: str, metric, check) -> list[h.Variant]:
    datadir = BUILD / "lopi-data" / workload
    datadir.mkdir(parents=True, exist_ok=True)

    def lopi_before(idx: int) -> dict:
        path = datadir / f"run{idx}.lopi-data"
        if path.is_dir():
            import shutil
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
        return {"LOPI_OUTPUT": str(path)}

    def lopi_after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        path = Path(env["LOPI_OUTPUT"])
        if not path.exists():
            return {"after_error": f"no data written to LOPI_OUTPUT ({path})"}
        c = lopi_counts(lopi, path)
        c["data_bytes"] = path.stat().st_size if path.is_file() else None
        return c

    vs = [h.Variant(BASE, [str(bins[BASE]), *argv_tail], metric, check=check)]
    vs.append(h.Variant(LOPI, [str(bins.get(LOPI, "lopi-missing")), *argv_tail], metric,
                        before=lopi_before, after=lopi_after, check=check, skip_reason=lopi_skip))
    vs.append(h.Variant(GCC, [str(bins[GCC]), *argv_tail], metric, after=hook_calls, check=check))
    return vs


# ---------------------------------------------------------------- table


def summarise(title: str, variants: list[h.Variant], res: dict, notes_extra: dict, expected: dict) -> list[list[str]]:
    """Table rows for one workload. expected: {"fn": name, "calls": n} for the W1 cross-check."""
    rows = []
    base = h.stats(res[BASE])
    for v in variants:
        runs = res[v.name]
        notes: list[str] = []
        if v.skip_reason:
            rows.append([title, LABEL[v.name], "skipped", "-", "-", "-", v.skip_reason])
            continue
        bad = [r for r in runs if not r.ok]
        if bad:
            r = bad[0]
            tail = (r.stderr.strip().splitlines() or [""])[-1][:160]
            rows.append([title, LABEL[v.name], "FAILED", "-", "-", "-",
                         f"{r.error} in {'warm-up' if r.round < 0 else f'round {r.round + 1}'}; stderr: {tail}"])
            continue
        st = h.stats(runs)
        rec = [r for r in runs if r.round >= 0]
        # output check against the baseline's output (W1: result checksum and call count)
        if v.check is not None and v.name != BASE:
            want = {v.check(r.stdout) for r in res[BASE]}
            got = {v.check(r.stdout) for r in runs}
            if got != want:
                notes.append(f"OUTPUT DIFFERS from baseline: {sorted(got, key=str)} vs {sorted(want, key=str)}")
        ratio = pcall = calls_s = "-"
        calls = None
        errs = sorted({r.extra["after_error"] for r in runs if "after_error" in r.extra})
        notes += errs
        counts = [r.extra["calls"] for r in runs if "calls" in r.extra]
        if counts:
            calls = int(statistics.median(counts))
            calls_s = h.fmt_int(calls)
            if min(counts) != max(counts):
                calls_s += f" (varies {min(counts):,}–{max(counts):,})"
        if base and v.name != BASE:
            ratio = f"x{st.median / base.median:.2f}"
            notes.append(f"wall-clock x{st.wall_median / base.wall_median:.2f}")
            if calls:
                pcall = f"{(st.median - base.median) / calls * 1e9:.2f}"
        if v.name == LOPI:
            per_fn = next((r.extra["per_fn"] for r in runs if "per_fn" in r.extra), None)
            if any(r.extra.get("incomplete") for r in runs):
                notes.append("report says INCOMPLETE")
            if per_fn is not None:
                nz = sum(1 for c in per_fn.values() if c)
                notes.append(f"report: {len(per_fn)} functions, {nz} called")
                if expected:
                    got = per_fn.get(expected["fn"])
                    ok = "=" if got == expected["calls"] else "≠"
                    notes.append(f"{expected['fn']}: {h.fmt_int(got)} {ok} expected {expected['calls']:,}")
        if v.name == GCC and expected and calls:
            notes.append(f"hook calls − expected {expected['fn']} calls = {calls - expected['calls']:,} (other functions)")
        notes += notes_extra.get(v.name, [])
        notes.append(f"n={len(rec)}")
        rows.append([title, LABEL[v.name], h.fmt_range(st), ratio if v.name != BASE else "x1.00",
                     calls_s, pcall if v.name != BASE else "-", "; ".join(notes)])
    return rows


def run_floor(binary: Path, n: int, calls: int) -> tuple[list[str], dict]:
    vals: dict[str, list[float]] = {}
    for _ in range(n):
        p = subprocess.run([str(binary), str(calls)], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            return [f"floor benchmark failed: {p.stderr.strip()}"], {}
        for m in re.finditer(r"^(\w+) ns_per_call=([0-9.]+)", p.stdout, re.M):
            vals.setdefault(m.group(1), []).append(float(m.group(2)))
    med = {k: statistics.median(v) for k, v in vals.items()}
    rows = []
    desc = {
        "plain": "call + ret (no probe)",
        "jmp": "entry `jmp` to a trampoline + `jmp` back",
        "jmp_inc": "same, trampoline does `incq counter(%rip)`",
        "jmp_lock_inc": "same, trampoline does `lock incq counter(%rip)`",
    }
    for k, v in vals.items():
        over = "-" if k == "plain" else f"{med[k] - med['plain']:.2f}"
        rows.append(f"| {desc.get(k, k)} | {med[k]:.2f} [{min(v):.2f}–{max(v):.2f}] | {over} |")
    return rows, med


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3 and smaller workloads (~3 min once built)")
    ap.add_argument("-n", type=int, help="recorded runs per variant (default 5, quick 3)")
    ap.add_argument("--fib", nargs=2, type=int, metavar=("N", "REPS"), help="W1 fib size (default 32 10)")
    ap.add_argument("--loop", type=int, metavar="N", help="W1 loop calls (default 100000000)")
    ap.add_argument("--size", type=int, help="speedtest1 --size (default 25)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--sqlite-dir", type=Path, required=True, help="dir with sqlite3.c, speedtest1.c (fetch_sqlite.sh)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/entry-count.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    fib_n, fib_r = a.fib or ((30, 10) if a.quick else (32, 10))
    loop_n = a.loop or (30_000_000 if a.quick else 100_000_000)
    size = a.size or (10 if a.quick else 25)
    t_start = time.time()
    load_start = h.loadavg()

    bins = build_all(a.sqlite_dir)

    # lopi variants
    lopi: Optional[Path] = a.lopi if a.lopi.is_file() and os.access(a.lopi, os.X_OK) else None
    lopi_skip = {"w1": "", "w2": ""} if lopi else {"w1": f"lopi binary not found ({a.lopi})", "w2": f"lopi binary not found ({a.lopi})"}
    notes_extra: dict[str, dict[str, list[str]]] = {"w1": {}, "w2": {}}
    lopi_info = "not found"
    if lopi:
        log(f"lopi: {lopi}")
        st = lopi.stat()
        sha = hashlib.sha256(lopi.read_bytes()).hexdigest()[:12]
        lopi_info = (f"{lopi.relative_to(REPO) if lopi.is_relative_to(REPO) else lopi} "
                     f"(sha256 {sha}, built {datetime.datetime.fromtimestamp(st.st_mtime):%Y-%m-%d %H:%M})")
        for wl in ("w1", "w2"):
            prog = bins[wl][BASE]
            out = BUILD / (prog.name + ".lopi")
            err, dt, msg = lopi_rewrite(lopi, prog, out)
            (BUILD / (prog.name + ".rewrite.log")).write_text(msg + "\n")
            if err:
                log(f"lopi: {wl}: {err}")
                lopi_skip[wl] = err
            else:
                log(f"lopi: rewrote {prog.name} in {dt:.2f} s")
                bins[wl][LOPI] = out
                summary = re.search(r"(\d+) functions found, (\d+) probed \(([0-9.]+%)\)", msg)
                notes_extra[wl][LOPI] = [f"rewrite {dt:.2f} s"
                                         + (f", {summary.group(2)}/{summary.group(1)} functions probed" if summary else "")]
    else:
        log(f"lopi binary not found ({a.lopi}): lopi rows are skipped")

    fib_title = f"W1 fib({fib_n})x{fib_r}"
    loop_title = f"W1 loop {loop_n:,}"
    w2_title = f"W2 speedtest1 --memdb --size {size}"
    groups = [
        ("w1-fib", fib_title, "w1", ["fib", str(fib_n), str(fib_r)], HOT_NS, w1_check, "fib"),
        ("w1-loop", loop_title, "w1", ["loop", str(loop_n)], HOT_NS, w1_check, "tiny"),
        ("w2", w2_title, "w2", ["--memdb", "--size", str(size)], TOTAL, None, None),
    ]
    all_res: dict[str, dict] = {}
    rows: list[list[str]] = []
    for key, title, wl, argv, metric, check, fn in groups:
        log(f"{title}: n={n} (+1 warm-up), interleaved")
        vs = make_variants(key, argv, bins[wl], lopi, lopi_skip[wl], metric, check)
        res = h.run_interleaved(vs, n, warmup=1, log=log)
        all_res[title] = res
        expected = {}
        if fn:
            exp = {int(m.group(1)) for r in res[BASE] if (m := re.search(r"calls_expected=(\d+)", r.stdout))}
            if len(exp) == 1:
                expected = {"fn": fn, "calls": exp.pop()}
        rows += summarise(title, vs, res, notes_extra[wl], expected)

    log("floor: jump to a trampoline and back")
    floor_rows, floor_med = run_floor(bins["floor"], n, loop_n)

    header = ["workload", "variant", "metric median [min–max]", "ratio to baseline", "calls",
              "overhead ns/call", "notes"]
    table = h.markdown_table(header, rows)
    sqlite_src = (a.sqlite_dir / "SOURCE.txt").read_text().strip() if (a.sqlite_dir / "SOURCE.txt").exists() else "?"
    elapsed = time.time() - t_start
    md = [
        "# Entry-count probe cost" + (" (quick)" if a.quick else ""),
        "",
        f"Generated by `bench/entry-count/run.sh{' --quick' if a.quick else ''}` on "
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}; every figure below comes from that run.",
        "",
        *h.machine_lines(REPO, [
            ("lopi binary", lopi_info),
            ("sqlite", sqlite_src),
            ("load average", f"{load_start} at start, {h.loadavg()} at end (2 CPUs: other jobs on the machine add noise)"),
            ("run time", f"{elapsed:.0f} s"),
        ]),
        "",
        "## Method",
        "",
        f"- W1 = `bench/workloads/w1.c` built with `gcc {' '.join(W1_FLAGS)}`; metric = the hot section's own "
        "CLOCK_MONOTONIC time (`hot_ns=`). W2 = sqlite `speedtest1` + amalgamation built with "
        f"`gcc {' '.join(W2_FLAGS)}`; metric = its `TOTAL`. Start-up, rewriting and writing counts at exit are excluded; "
        "the whole-process wall-clock ratio is in the notes.",
        "- Variants: baseline; `lopi rewrite PROG -o OUT` (all functions), counts written to `$LOPI_OUTPUT`; "
        "the same source built with `-finstrument-functions` and linked with `bench/entry-count/count_hooks.c` "
        "(one global non-atomic 64-bit counter incremented in `__cyg_profile_func_enter`, empty exit hook).",
        f"- Runs: variants of one workload interleaved round-robin, order rotated each round, one unrecorded "
        f"warm-up round, n={n} recorded runs each.",
        "- calls: lopi rows = sum of `calls` over all functions of `lopi report DATA --format json` (binary-level "
        "entries); gcc rows = the hook's own count printed at exit (source-level entries, which include functions "
        "GCC inlined, so more than binary-level calls on W2). Overhead ns/call = (median − baseline median) / calls.",
        "",
        "## Results",
        "",
        table,
        "",
        f"## Floor on this machine (`bench/entry-count/floor.c`, {loop_n:,} direct calls, n={n})",
        "",
        "| case | ns/call median [min–max] | ns/call over plain call |",
        "|---|---|---|",
        *floor_rows,
        "",
    ]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    raw = a.out.with_suffix(".runs.json")
    h.dump_raw(raw, {"n": n, "quick": a.quick, "floor_median_ns": floor_med}, all_res)
    print(text)
    log(f"wrote {a.out.relative_to(REPO)} and {raw.relative_to(REPO)} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
