#!/usr/bin/env python3
"""lopi's multiprocessor analysis on the thesis's benchmark and on real Debian programs, and how well lopi's
predictions match what it measures. Per workload: `lopi scale --breakdown` (the program uninstrumented on 1,
2, ... CPUs, then three recorded runs for the serial fraction and Amdahl's bound) and `lopi run -q --probe
syscall,locks` + `lopi report --breakdown` and `--syscalls` on 1 CPU (taskset -c 0) and on all CPUs, every
recorded run's output checked against plain runs of the same command; for some, `lopi whatif --kernel
giant-lock`, `subsystem-locks` and `app-kernel` (the program recorded natively and under an emulated kernel on
1 CPU and on all).

Workloads (workloads.py): mpbench (lopi's mpbench.c, the thesis's synthetic benchmark) calibrated on one CPU
to 64% user (the thesis's split) and to 80, 50 and 20%; pigz, zstd and xz of a deterministic corpus; make -jN
of zstd's library; memcached under memcaslap; sysbench oltp_read_only against PostgreSQL; postmark
(single-threaded); sysbench threads. predict.py writes the Predicted vs measured table, thesis.py the
thesis's tables side by side, whatif.py and app_kernel.py the emulated kernels' tables; bench/results/mp.md's
Method says more. Run through run.sh; `mp_bench.py --help` lists the knobs.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # no __pycache__ beside bench/lib's harness

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "bench" / "lib"), str(REPO / "bench" / "locks")]
import harness as h  # noqa: E402
from locks_bench import make_corpus  # noqa: E402  (bench/locks's corpus: the same bytes)
import app_kernel as ak  # noqa: E402  (this directory's: lopi whatif --kernel app-kernel's figures)
import predict  # noqa: E402
import thesis  # noqa: E402
import whatif  # noqa: E402
import workloads as wk  # noqa: E402
from whatif import cpu_share, f2, rng, run_whatif, whatif_fig, whatif_table  # noqa: E402
from workloads import Workload  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "mp"
MPBENCH_SRC = REPO / "crates" / "lopi-cli" / "src" / "mpbench.c"
log = h.log
PARTS = [("user_ns", "user"), ("kernel_ns", "kernel"), ("syscall_blocked_ns", "blocked"),
         ("lock_spin_ns", "lock spin"), ("lock_blocked_ns", "lock blocked"), ("other_ns", "other")]


def run(argv: list[str], env: dict, out: Path, cwd: Path) -> dict:
    """ARGV with its stdout to OUT: {rc, wall_s, output (OUT's bytes), stderr}."""
    t0 = time.perf_counter()
    with out.open("wb") as f:
        try:
            p = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, env=dict(os.environ, **env), cwd=cwd,
                               timeout=900)
            rc, err = p.returncode, p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, err = None, "timed out after 900 s"
    res = {"rc": rc, "wall_s": time.perf_counter() - t0, "output": out.read_bytes(), "stderr": err[-2000:]}
    out.unlink(missing_ok=True)
    return res


def run_scale(argv: list[str], work: Path, env: dict) -> dict:
    """`lopi scale ... --format json`: {wall_s, json} or {wall_s, error}."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, cwd=work, env=dict(os.environ, **env), timeout=1800)
        last = (p.stderr.strip().splitlines() or [""])[-1][:300]
        out = {"json": json.loads(p.stdout)} if p.returncode == 0 else {"error": f"exit {p.returncode}: {last}"}
        out["stderr"] = p.stderr[-2000:]
    except (subprocess.TimeoutExpired, ValueError) as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    return dict(out, wall_s=time.perf_counter() - t0)


def breakdown_runs(wl: Workload, lopi: Path, work: Path, env: dict, ncpu: int, n: int) -> dict:
    """n rounds of {plain, lopi} x {1 CPU, all CPUs}, interleaved, order rotated each round:
    {config: {variant: [run dicts]}}; lopi's runs carry their `lopi report --breakdown` JSON and a digest of
    their `--syscalls` JSON (predict.digest)."""
    configs = {"1": (["taskset", "-c", "0"], wl.argv("1")), str(ncpu): ([], wl.argv(str(ncpu)))}
    combos = [(c, v) for c in configs for v in ("plain", "lopi")]
    res: dict = {c: {"plain": [], "lopi": []} for c in configs}
    data = work / f"{wl.key}.lopi"
    for rnd in range(n):
        line = []
        for c, v in combos[rnd % 4:] + combos[:rnd % 4]:
            pin, argv = configs[c]
            cmd = pin + ([str(lopi), "run", "-q", "--probe", "syscall,locks", "--"] if v == "lopi" else []) + argv
            data.unlink(missing_ok=True)
            r = run(cmd, dict(env, LOPI_OUTPUT=str(data)), work / "stdout", work)
            raw = r.pop("output")
            r["check"], r["raw_sha256"] = wl.check(raw), hashlib.sha256(raw).hexdigest()[:16]
            if v == "lopi" and r["rc"] == 0:
                p = subprocess.run([str(lopi), "report", str(data), "--breakdown", "--format", "json"],
                                   capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
                r["data_bytes"] = data.stat().st_size if data.exists() else None
                r.update({"report": json.loads(p.stdout)} if p.returncode == 0 else
                         {"report_error": f"lopi report exit {p.returncode}: {p.stderr.strip()[-300:]}"})
                p = subprocess.run([str(lopi), "report", str(data), "--syscalls", "--format", "json"],
                                   capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
                if p.returncode == 0:
                    r["syscalls"] = predict.digest(json.loads(p.stdout))
            data.unlink(missing_ok=True)
            res[c][v].append(dict(r, round=rnd, argv=cmd))
            line.append(f"{v}@{c}cpu={r['wall_s']:.3f}s" + ("" if r["rc"] == 0 else f"(exit {r['rc']})"))
        log(f"  round {rnd + 1}/{n}: " + ", ".join(line))
    return res


def summarize(rep: dict, workers: str) -> dict:
    """A breakdown report's figures: percentages of the summed wall time (all threads; workers),
    how far each thread's parts are from its wall time, CPU time over wall x CPUs."""
    known = [t for t in rep["threads"] if t["cpu_known"]]

    def pct(threads: list[dict]) -> dict:
        tot = {k: sum(t[k] for t in threads) for k in ("wall_ns", "runnable_ns", *(k for k, _ in PARTS))}
        w = tot["wall_ns"] or 1
        out = {k: 100 * tot[k] / w for k, _ in PARTS} | {"runnable_ns": 100 * tot["runnable_ns"] / w}
        uk = tot["user_ns"] + tot["kernel_ns"]
        return dict(out, wall_ms=tot["wall_ns"] / 1e6, threads=len(threads),
                    user_share=100 * tot["user_ns"] / uk if uk else None)

    dev = [abs(sum(t[k] for k, _ in PARTS) - t["wall_ns"]) / t["wall_ns"] for t in known if t["wall_ns"]]
    tot = rep["total"]
    cap = rep["process_wall_ns"] * rep["cpus"]
    return {"all": pct(known), "workers": pct([t for t in known if t["name"] == workers]) if workers else None,
            "process_wall_ms": rep["process_wall_ns"] / 1e6, "cpus": rep["cpus"],
            "avg_par": rep["average_parallelism"], "serial": rep["serial_fraction"],
            "addup": max(dev) if dev else None, "unknown": rep["threads_without_cpu_times"],
            "cpu_over_capacity": (tot["user_ns"] + tot["kernel_ns"] + tot["lock_spin_ns"]) / cap if cap else None}


def workload_section(wl: Workload, res: dict, ncpu: int) -> tuple[list[str], dict]:
    """The workload's Markdown and its summary figures."""
    md = [f"## {wl.title}", ""]
    if wl.skip:
        return md + [f"Skipped: {wl.skip}.", ""], {"skip": wl.skip}
    sc, bd = res.get("scale"), res["breakdown"]
    md += [f"- `lopi scale` command: `{res['scale_shown']}`"]
    fig: dict = {}
    if sc and "json" in sc:
        j = sc["json"]
        rows = [[str(p["cpus"]), f"{p['wall_ns'] / 1e6:,.1f} [{p['min_ns'] / 1e6:,.1f}–{p['max_ns'] / 1e6:,.1f}]",
                 f"{p['speedup']:.3f}", f"{p['efficiency']:.3f}", f2(p["karp_flatt"], "{:.3f}")] for p in j["points"]]
        md += ["", h.markdown_table(["CPUs", "wall ms median [min–max]", "speedup", "efficiency", "Karp-Flatt"],
                                    rows), ""]
        top = j["points"][-1]
        fig.update(speedup=top["speedup"], kf=top["karp_flatt"], scale_serial=j["serial_fraction"],
                   amdahl=(j["amdahl_bound"] or {}).get(str(top["cpus"])))
        usl = json.dumps(j["usl"]) if j["usl"] else f"refused: {j.get('usl_refused')}"
        bound = ", ".join(f"{k}: {v:.2f}" for k, v in
                          sorted((j["amdahl_bound"] or {}).items(), key=lambda kv: int(kv[0])))
        md += [f"- USL: {usl}.",
               f"- Serial fraction from scale's recorded runs (median) on {top['cpus']} CPUs: "
               f"{f2(j['serial_fraction'], '{:.3f}')}; "
               f"Amdahl bound by CPUs: {bound or '-'} (Karp-Flatt from the measured speedup on {top['cpus']} CPUs: "
               f"{f2(top['karp_flatt'], '{:.3f}')}). `lopi scale` took {sc['wall_s']:.1f} s."]
    else:
        md += ["", f"- `lopi scale` FAILED: {sc.get('error') if sc else 'not run'}"]
        fig["scale_error"] = sc.get("error") if sc else "not run"
    header = ["CPUs", "threads", "summed wall ms", "process wall ms", *(f"{lbl} %" for _, lbl in PARTS),
              "runnable % (in other)", "avg parallelism", "serial fraction", "max \\|parts − wall\\| / wall",
              "CPU / (wall × CPUs)"]
    rows, notes, ident = [], [], True
    for c, vs in bd.items():
        cpus = f"{c} CPU" + ("" if c == "1" else "s")
        for r in vs["lopi"]:
            if r["rc"] == 0 and "report" in r:
                r["summary"] = summarize(r["report"], wl.workers)
        ok = [r["summary"] for r in vs["lopi"] if "summary" in r]
        plain_out = {r["check"] for r in vs["plain"] if r["rc"] == 0}
        lopi_out = {r["check"] for r in vs["lopi"] if r["rc"] == 0}
        bad = [r for r in vs["plain"] + vs["lopi"] if r["rc"] != 0 or "report_error" in r]
        notes += [f"- {cpus}: `{' '.join(r['argv'])}` FAILED (exit {r['rc']}): "
                  f"{r.get('report_error') or (r['stderr'].strip().splitlines() or [''])[-1][:300]}" for r in bad]
        same = len(plain_out) == 1 and lopi_out == plain_out and not bad
        ident &= same
        pw, lw = (statistics.median([r["wall_s"] for r in vs[v]] or [0]) for v in ("plain", "lopi"))
        notes.append(f"- {cpus}: output {'identical' if same else 'DIFFERS'} (plain: {' / '.join(sorted(plain_out))}"
                     + ("" if same else f"; under lopi: {' / '.join(sorted(lopi_out))}")
                     + f"); process wall plain {pw:.3f} s, under `lopi run` {lw:.3f} s (x{lw / pw if pw else 0:.2f}); "
                     f"over {len(ok)} recorded runs: serial fraction {rng([x['serial'] for x in ok])}, average "
                     f"parallelism {rng([x['avg_par'] for x in ok], '{:.2f}')}")
        if not ok:
            continue
        s = sorted(ok, key=lambda x: x["process_wall_ms"])[(len(ok) - 1) // 2]  # the median run's
        fig[c] = {"serial": [x["serial"] for x in ok], "avg_par": [x["avg_par"] for x in ok], "median": s,
                  "slowdown": lw / pw if pw else None,
                  "user_share": [x["workers"]["user_share"] for x in ok if x["workers"]]}
        for who in ("all", "workers"):
            if (p := s[who]) is None:
                continue
            tail = ([f"{s['avg_par']:.2f}", f2(s["serial"], "{:.3f}"), f2(s["addup"], "{:.2%}"),
                     f2(s["cpu_over_capacity"], "{:.3f}")] if who == "all" else ["", "", "", ""])
            rows.append([c, f"{p['threads']} ({'all' if who == 'all' else wl.workers})", f"{p['wall_ms']:,.1f}",
                         f"{s['process_wall_ms']:,.1f}", *(f"{p[k]:.1f}" for k, _ in PARTS), f"{p['runnable_ns']:.1f}",
                         *tail])
        if s["unknown"]:
            notes.append(f"- {cpus}: {s['unknown']} threads without CPU times (left out of the sums)")
        if s["cpu_over_capacity"] and s["cpu_over_capacity"] > 1.0:
            notes.append(f"- {cpus}: the threads' CPU time is {s['cpu_over_capacity']:.3f}x what {cpus} could run in "
                         "the process's wall time: some of the CPU time counted lies outside that wall time")
        if s["addup"] and s["addup"] > 0.01:
            notes.append(f"- {cpus}: a thread's parts exceed its wall time by {s['addup']:.2%} (`other` is 0 there)")
    md += ["", "Breakdown (`lopi report --breakdown`) of the recorded run with the median process wall time "
           "per CPU count; percentages of the threads' summed wall time:", "",
           h.markdown_table(header, rows) if rows else "(no breakdown)", "", *notes, ""]
    fig["identical"] = ident
    if res.get("whatif"):
        md += [f"What-if kernels (`lopi whatif --runs {res['whatif_runs']} --format json`, one call per kernel, each "
               "measuring native anew): the median recorded run's process wall time, and user, kernel and spin "
               "as shares of the threads' summed CPU time (under the app kernel, kernel is a thread's wait for its "
               f"proxy, and its null system call is forwarded on {min(ncpu, 2)} CPUs):", "",
               *whatif_table(res["whatif"], ncpu)]
    return md, fig


def run_workload(wl: Workload, res: dict, lopi: Path, work: Path, env: dict, ncpu: int, n: int, timeout: int,
                 mpbench: str) -> None:
    """lopi scale, the breakdown runs and the workload's lopi whatif calls, into RES."""
    log(f"=== {wl.key}: lopi scale")
    res["scale"] = run_scale(res["scale_argv"], work, env)
    log(f"  scale: {res['scale'].get('error') or 'ok'} in {res['scale']['wall_s']:.1f} s")
    log(f"=== {wl.key}: breakdown runs (plain and lopi run, 1 and {ncpu} CPUs)")
    res["breakdown"] = breakdown_runs(wl, lopi, work, env, ncpu, n)
    res["whatif_runs"], res["whatif"] = n, {}
    for kernel in wl.kernels:
        log(f"=== {wl.key}: lopi whatif --kernel {kernel}")
        wi = run_whatif([str(lopi), "whatif", "--kernel", kernel, "--runs", str(n), "--format", "json", "--",
                         *wl.argv("{cpus}")], work, env, timeout)
        wi["shown"] = " ".join(["lopi", *wi["argv"][1:]]).replace(mpbench, "mpbench")
        res["whatif"][kernel] = wi
        f = whatif_fig(wi, kernel)
        log(f"  {kernel}: {f['error']}" if "error" in f else
            f"  {kernel}: speedup native {f['native']['speedup']:.2f}, {kernel} {f['kernel']['speedup']:.2f}; "
            + (f"{f['kernel']['forwarded']:,} calls forwarded, {f['kernel']['in_place']:,} in place; "
               if kernel == ak.KERNEL else
               f"spin {f2(cpu_share(f['kernel'], 'kernel_lock_spin_ns'), '{:.1f}')}%; ")
            + f"output {'identical' if f['identical'] else 'DIFFERS'}; {wi['wall_s']:.1f} s")


def summary(wls: list[Workload], figs: dict, ncpu: int) -> list[str]:
    """The Summary table: each workload's speedup and serial fractions, and where they disagree."""
    rows, odd = [], []
    for wl in wls:
        f = figs[wl.key]
        if "skip" in f:
            rows.append([wl.key, "skipped: " + f["skip"], "", "", "", "", "", ""])
            continue
        many = f.get(str(ncpu), {})
        rows.append([wl.key, f2(f.get("speedup"), "{:.3f}"), f2(f.get("kf"), "{:.3f}"),
                     f2(f.get("scale_serial"), "{:.3f}"), rng(many.get("serial", [])),
                     rng(many.get("avg_par", []), "{:.2f}"), f2(f.get("amdahl")),
                     "identical" if f["identical"] else "DIFFERS or failed (see below)"])
        ser = [x for x in many.get("serial", []) if x is not None]
        if f.get("kf") is not None and ser and abs(statistics.median(ser) - f["kf"]) > 0.1:
            odd.append(f"- {wl.key}: lopi's breakdown finds an average parallelism of {rng(many['avg_par'], '{:.2f}')} "
                       f"on {ncpu} CPUs and a serial fraction of {rng(ser)}, while the speedup measured by scale, "
                       f"{f['speedup']:.3f}, implies {f['kf']:.3f} (Karp-Flatt); the recorded runs took "
                       f"x{many.get('slowdown') or 0:.2f} plain's wall time. The Predicted vs measured table says "
                       "what lopi's data shows where the two disagree.")
    return ["## Summary", "",
            h.markdown_table(["workload", f"speedup on {ncpu} CPUs (scale)", "Karp-Flatt from the speedup",
                              "serial fraction, scale's recorded runs (median)",
                              f"serial fraction, breakdown runs on {ncpu} CPUs", f"average parallelism on {ncpu} CPUs",
                              f"Amdahl bound on {ncpu} CPUs (scale)", "outputs under lopi run"], rows), "",
            *odd, *([""] if odd else [])]


def method(n: int, ncpu: int, timeout: int, cals: list, sz: wk.Sizes, corpus_sha: str) -> list[str]:
    """The Method section."""
    cal_txt = "; ".join(f"{key} at {pct}% user: `mpbench --calibrate {ms} {pct}` (ROUNDS {r}, USER_ITERS {i})"
                        for key, pct, ms, r, i in cals)
    return [
        "## Method", "",
        f"- `lopi scale --runs {n} --breakdown --format json -- PROG ARGS`: PROG uninstrumented, pinned by lopi to "
        f"1, ..., {ncpu} CPUs (`{{cpus}}` in ARGS becomes the count), one warm-up run on the most CPUs then {n} runs "
        "per count interleaved; median wall time [min–max], speedup and efficiency against 1 CPU, Karp-Flatt from "
        "the measured speedup; `--breakdown` adds three runs recorded under lopi on the most CPUs whose breakdowns' "
        "median serial fraction gives Amdahl's bound. PROG's standard output is discarded by lopi scale.",
        f"- Breakdown runs: {n} rounds, each running PROG plain and under `lopi run -q --probe syscall,locks` "
        f"on 1 CPU (`taskset -c 0`, `{{cpus}}` = 1) and on all {ncpu} CPUs, the four in an order rotated each "
        "round; lopi's data goes to a fresh `$LOPI_OUTPUT` per run in the scratch directory, read with `lopi "
        "report DATA --breakdown --format json` and `--syscalls --format json` (kept: the six calls that took the "
        "most time, and the clone/fork count), then deleted. The tables show the recorded run with the median "
        "process wall time; the notes give the range over all runs. Parts: user, kernel (CPU), blocked (in system "
        "calls, off the CPU), lock spin / lock blocked (acquisition waits), other (the rest: runnable, page "
        "faults); they should sum to each thread's wall time (column `max |parts − wall| / wall`, worst thread). "
        "`CPU / (wall × CPUs)`: the threads' user + kernel + spin time over what the CPUs could run in the "
        "process's wall time (must be ≤ 1). lopi records the program it starts (and its forked children), not the "
        "programs that one executes: for make and the memcached script it records make and the shell.",
        "- Output identity: every run's standard output against the plain runs of the same command: the sha256 "
        "of the compressors' output, mpbench's checksum line, the checksum of make's objects, memcaslap's "
        "operation count, sysbench's event (and read query) counts, postmark's report with the lines that contain "
        "`seconds` dropped and the `(N per second)` rates cut from the others (timings vary from run to run).",
        f"- What-if kernels (`lopi whatif --kernel K --runs {n} --format json -- PROG ARGS`, one call per kernel, "
        f"hung after {timeout} s): mpbench at 64% under giant-lock, subsystem-locks and app-kernel, mpbench at 20% "
        "under giant-lock, and pigz, zstd, postmark and sysbench threads under all three. PROG is recorded "
        f"(`lopi run --probe syscall,locks`) natively and under the emulated kernel, on 1 CPU and on {ncpu}, "
        f"{n} runs each (the median process wall time counts), plus a getppid loop for the null system call on 1 "
        "CPU. The lock kernels are a spinlock that the system-call probes hold around each call that cannot sleep "
        "(one for all calls: giant-lock; one per subsystem — file system, network, memory, processes, time, IPC: "
        "subsystem-locks); a call that may sleep (futex, poll, waits, fork/clone/exec, pipes, sockets, terminals) "
        "runs without it and takes and drops it on return; a waiter that spun 20 µs yields its CPU, so that a "
        "holder preempted on its CPU runs on (a kernel's holder is never preempted), and the time off the CPU is "
        "not spin. Not modelled: page faults and interrupts (not system calls), the real kernel's own locks (still "
        "there underneath), vDSO calls (clock_gettime and the like), and the system calls of a vfork child. The "
        "application kernel (app-kernel, the thesis's Paper III) has every system call of a thread made by a "
        "proxy thread of its own, through a mailbox, all proxies pinned to CPU 0 and the program's threads to the "
        "other CPUs (on 1 CPU they share it), the proxy and its thread spinning while they wait (`--proxy-wait "
        "spin`, the default); calls about the calling thread (exit, clone, fork, exec, its signal mask, ...) and a "
        "signal handler's call during a forwarded one run in place, and its null system call is measured on 2 "
        "CPUs (proxy and caller apart), both spinning and waiting in futex. Not modelled there: a signal does not "
        "interrupt a forwarded call, the proxies are visible in /proc/self/task. lopi whatif checks output identity "
        "on every run's standard output, byte for byte, per CPU count.",
        f"- mpbench: [mpbench.c](../../crates/lopi-cli/src/mpbench.c) built `gcc -O2 -pthread`, calibrated once "
        f"per split on CPU 0 (`taskset -c 0`): {cal_txt}; workers are the threads named `worker`.",
        f"- pigz and zstd compress bench/locks's deterministic corpus ({sz.mib} MiB, sha256 {corpus_sha[:16]}) on "
        f"tmpfs, xz its first {sz.xz_mib} MiB. make builds zstd's library from Debian's source (bench/lib/"
        f"fetch_zstd.sh; directories {sz.make_dirs} of lib/) at -O0 into the scratch directory, every object each "
        "run (a FORCE prerequisite instead of `make clean`), then prints the objects' sha256. memcached: a shell "
        f"script starts `memcached -t CPUS` on a free TCP port of 127.0.0.1, runs `memcaslap -T CPUS -c 32 -x "
        f"{sz.mc_ops} -X 100` against it and kills it, all on lopi scale's CPUs (memcached rather than redis: "
        "redis's I/O threads busy-wait, so `--io-threads N` on N CPUs shared with the client starves the "
        "client). sysbench-oltp: a PostgreSQL cluster made for the run in the scratch directory (Unix socket, "
        "fsync off, autovacuum off), `sysbench oltp_read_only` prepared once (2 tables of "
        f"{sz.oltp_rows:,} rows), then `--threads=CPUS --events={sz.oltp_events}` through a script that first "
        "moves the server's processes onto sysbench's CPUs (sysbench's init hook), so that the server and its "
        f"client share lopi scale's CPUs and lopi records sysbench itself. postmark ({sz.pm_files:,} files, "
        f"{sz.pm_tx:,} transactions) is single-threaded: `{{cpus}}` is unused and its speedup should stay ~1. "
        "lopi's plan cache (XDG_CACHE_HOME) and scale's data file (TMPDIR) are in the scratch directory.", ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="--runs 2, mpbench 300 ms (its other splits 200 ms), 16 MiB corpus (xz 8), about half "
                    "the work of the other workloads, make of two of zstd's library directories")
    ap.add_argument("--runs", type=int, help="lopi scale --runs, lopi whatif --runs, and rounds of breakdown runs "
                    "(default 3, quick 2)")
    ap.add_argument("--ms", type=int, help="mpbench's calibration at 64%% user, ms on one CPU (default 1000, "
                    "quick 300)")
    ap.add_argument("--ms-splits", type=int, help="mpbench's calibration at 80, 50 and 20%% user, ms on one CPU "
                    "(default 500, quick 200)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds before a lopi whatif call counts as hung")
    ap.add_argument("--mib", type=int, help="pigz/zstd corpus in MiB (default 64, quick 16)")
    ap.add_argument("--zstd-src", default="", help="zstd's source tree, for make (run.sh: bench/lib/fetch_zstd.sh)")
    ap.add_argument("--only", help="comma-separated workload keys (mpbench,mpbench-80,mpbench-50,mpbench-20,pigz,"
                    "zstd,xz,make,memcached,sysbench-oltp,postmark,sysbench)")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first (default /dev/shm/lopi-bench-mp)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "mp.md")
    ap.add_argument("--render", type=Path, metavar="RUNS_JSON",
                    help="run nothing: write --out anew from a run's mp.runs.json")
    a = ap.parse_args()
    if a.render:
        return rerender(a.render, a.out)
    n, ms = a.runs or (2 if a.quick else 3), a.ms or (300 if a.quick else 1000)
    ms_splits = a.ms_splits or (200 if a.quick else 500)
    sz = (wk.Sizes(a.mib or 16, 8, 1000, 10000, 1000, "common decompress", 80000, 1500, 10000) if a.quick else
          wk.Sizes(a.mib or 64, 16, 2000, 20000, 2000, "common compress decompress dictBuilder legacy deprecated",
                   200000, 4000, 20000))
    t_start, load_start = time.time(), h.loadavg()
    ncpu = len(os.sched_getaffinity(0))
    work = a.work or (Path("/dev/shm/lopi-bench-mp") if os.access("/dev/shm", os.W_OK) else BUILD / "work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {"XDG_CACHE_HOME": str(work / "cache"), "TMPDIR": str(work)}  # lopi's plan cache, scale's data file
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    if lopi is None:
        raise SystemExit(f"lopi not found at {a.lopi}")

    mpbench = h.build("mpbench", ["-O2", "-pthread", str(MPBENCH_SRC)], [MPBENCH_SRC])
    cals = []
    for key, pct, cms in (("mpbench", 64, ms), ("mpbench-80", 80, ms_splits), ("mpbench-50", 50, ms_splits),
                          ("mpbench-20", 20, ms_splits)):
        out = subprocess.run(["taskset", "-c", "0", str(mpbench), "--calibrate", str(cms), str(pct)],
                             capture_output=True, text=True).stdout.split()
        cals.append((key, pct, cms, *(out + ["0", "0"])[:2]))
        log(f"mpbench calibrated for {cms} ms at {pct}% user on one CPU: ROUNDS {cals[-1][3]} USER_ITERS {cals[-1][4]}")
    corpus, xz_corpus = work / f"corpus-{sz.mib}M.bin", work / f"corpus-{sz.xz_mib}M.bin"
    corpus_sha = make_corpus(corpus, sz.mib)
    make_corpus(xz_corpus, sz.xz_mib)
    wls = (wk.mpbench_workloads(mpbench, [(key, pct, r, i) for key, pct, _, r, i in cals])
           + wk.real_workloads(work, sz, corpus, xz_corpus, a.zstd_src))
    if a.only:
        wls = [w for w in wls if w.key in a.only.split(",")]
    all_res: dict = {}
    for wl in wls:
        res: dict = {"scale_argv": [str(lopi), "scale", "--runs", str(n), "--breakdown", "--format", "json", "--",
                                    *wl.argv("{cpus}")], "breakdown": {}}
        res["scale_shown"] = " ".join(["lopi", *res["scale_argv"][1:]]).replace(str(mpbench), "mpbench")
        all_res[wl.key] = res
        if not wl.skip:
            log(f"=== {wl.key}: starting")
            try:
                wl.skip = wl.start()
                if not wl.skip:
                    run_workload(wl, res, lopi, work, env, ncpu, n, a.timeout, str(mpbench))
            finally:
                wl.stop()
        if wl.skip:
            log(f"=== {wl.key}: skipped: {wl.skip}")

    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line), *wk.versions(),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    for wl in wls:
        all_res[wl.key]["skip"] = wl.skip
    meta = {"runs": n, "quick": a.quick, "generated": datetime.datetime.now().isoformat(timespec="minutes"),
            "sizes": dataclasses.asdict(sz), "corpus_sha256": corpus_sha,
            "mpbench": cals, "mpbench_path": str(mpbench), "zstd_src": a.zstd_src, "whatif_timeout_s": a.timeout,
            "cpus": ncpu, "work": str(work), "machine": machine}
    raw = a.out.with_suffix(".runs.json")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps({"meta": meta, "workloads": all_res}, indent=1, default=str))  # before rendering
    shutil.rmtree(work, ignore_errors=True)
    render(a.out, meta, all_res, wls)
    log(f"wrote {a.out} and {raw.name}")
    return 0


def render(out: Path, meta: dict, all_res: dict, wls: list[Workload]) -> None:
    """bench/results/mp.md from a run's results (ALL_RES) and META."""
    n, ncpu, cals = meta["runs"], meta["cpus"], meta["mpbench"]
    sections, figs = [], {}
    for wl in wls:
        md, figs[wl.key] = workload_section(wl, all_res[wl.key], ncpu)
        sections += md
    akmd = ak.summary([(wl.key, {"skip": wl.skip} if wl.skip else
                        whatif_fig(all_res[wl.key].get("whatif", {}).get(ak.KERNEL), ak.KERNEL), wl.timed)
                       for wl in wls if ak.KERNEL in wl.kernels], ncpu, n)
    md = h.results_head("Multiprocessor analysis: lopi scale, lopi report --breakdown and lopi whatif, predictions "
                        "checked against measurement", "bench/mp/run.sh", meta["quick"], meta["machine"],
                        datetime.datetime.fromisoformat(meta["generated"]))
    by_key = {wl.key: all_res[wl.key] for wl in wls if not wl.skip}
    cal_of = {key: f"`mpbench --calibrate {cms} {pct}`: ROUNDS {r}, USER_ITERS {i}" for key, pct, cms, r, i in cals}
    md += ["", *method(n, ncpu, meta["whatif_timeout_s"], cals, wk.Sizes(**meta["sizes"]), meta["corpus_sha256"]),
           *predict.section(wls, all_res, ncpu),
           *(thesis.section(by_key["mpbench"], by_key.get("mpbench-20"), ncpu, cal_of["mpbench"],
                            cal_of["mpbench-20"]) if "mpbench" in by_key else []),
           *summary(wls, figs, ncpu), *whatif.summary(wls, all_res, figs, ncpu, n), *akmd, *sections]
    out.write_text("\n".join(md))


def rerender(runs_json: Path, out: Path) -> int:
    """--render: mp.md anew from a run's mp.runs.json (the tables' code changed, the figures did not)."""
    data = json.loads(runs_json.read_text())
    meta, all_res = data["meta"], data["workloads"]
    meta.setdefault("generated", datetime.datetime.fromtimestamp(runs_json.stat().st_mtime).isoformat(
        timespec="minutes"))  # written when the run ended
    with tempfile.TemporaryDirectory() as tmp:  # the workloads' scripts are written there, and not used
        sz = wk.Sizes(**meta["sizes"])
        wls = (wk.mpbench_workloads(Path(meta["mpbench_path"]), [(k, p, r, i) for k, p, _, r, i in meta["mpbench"]])
               + wk.real_workloads(Path(tmp), sz, Path(tmp, "corpus"), Path(tmp, "xz-corpus"), meta["zstd_src"]))
    wls = [wl for wl in wls if wl.key in all_res]
    for wl in wls:
        wl.skip = all_res[wl.key].get("skip", "")
    render(out, meta, all_res, wls)
    log(f"wrote {out} from {runs_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
