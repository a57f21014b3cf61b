#!/usr/bin/env python3
"""lopi's multiprocessor analysis on the thesis's benchmark and on real Debian programs: `lopi scale
--breakdown` (the program uninstrumented on 1, 2, ... CPUs, then up to three recorded runs for the serial
fraction) and `lopi run -q --probe syscall,locks` + `lopi report --breakdown` on 1 CPU (taskset -c 0)
and on all CPUs, every recorded run's output checked against plain runs of the same command; then
`lopi whatif --kernel giant-lock`, `--kernel subsystem-locks` and `--kernel app-kernel` (the program recorded
natively and under an emulated kernel on 1 CPU and on all; app_kernel.py renders the last one's figures), plus
mpbench at 30% user under the giant lock.

Workloads: mpbench (lopi's mpbench.c, the thesis's synthetic benchmark, calibrated on one CPU for
1000 ms at 64% user), `pigz -p CPUS` and `zstd -TCPUS -3` of a deterministic corpus, postmark
(single-threaded, system-call heavy), `sysbench threads`; bench/results/mp.md's Method says more.
Run through run.sh; `mp_bench.py --help` lists the knobs.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # no __pycache__ beside bench/lib's harness

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "bench" / "lib"), str(REPO / "bench" / "locks")]
import harness as h  # noqa: E402
from locks_bench import make_corpus  # noqa: E402  (bench/locks's corpus: the same bytes)
import app_kernel as ak  # noqa: E402  (this directory's: lopi whatif --kernel app-kernel's figures)

BUILD = REPO / "work-real" / "bench-build" / "mp"
MPBENCH_SRC = REPO / "crates" / "lopi-cli" / "src" / "mpbench.c"
log = h.log
PARTS = [("user_ns", "user"), ("kernel_ns", "kernel"), ("syscall_blocked_ns", "blocked"),
         ("lock_spin_ns", "lock spin"), ("lock_blocked_ns", "lock blocked"), ("other_ns", "other")]


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    argv: Callable[[str], list[str]]  # the program's argv for a CPU count ("{cpus}" for lopi scale)
    check: Callable[[bytes], str]  # stdout -> what every run of one configuration must print alike
    workers: str = ""  # thread name of the workers (a breakdown row of their own)
    timed: str = ""  # what of its run time the program prints (its bytes differ from run to run)
    threads: int = 0  # 1: single-threaded whatever the CPUs
    whatif_note: str = ""  # said under the What-if table when an emulated kernel spins > 20% of the CPU time
    skip: str = ""


def postmark_check(out: bytes) -> str:
    """postmark's report without its timings (lines with `seconds` dropped, `(N per second)` rates cut):
    its counts, and the sha256 of the whole report so cut."""
    text = "\n".join(re.sub(r"\s*\([^)]*per second\)", "", ln) for ln in out.decode(errors="replace").splitlines()
                     if "seconds" not in ln)
    counts = re.findall(r"^\s*([0-9.]+ (?:created|read|appended|deleted|megabytes read|megabytes written))$",
                        text, re.M)
    return f"{', '.join(counts)} (report sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})"


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


def run_whatif(argv: list[str], work: Path, env: dict, timeout: int) -> dict:
    """`lopi whatif ... --format json`: {argv, wall_s, json} or {argv, wall_s, error}; lopi and the program
    (its own session) are killed after TIMEOUT s, a hang reported as such."""
    t0 = time.perf_counter()
    out: dict = {"argv": argv}
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work,
                         env=dict(os.environ, **env), start_new_session=True)
    try:
        so, se = p.communicate(timeout=timeout)
        last = (se.strip().splitlines() or [""])[-1][:300]
        if p.returncode != 0:
            out["error"] = f"exit {p.returncode}: {last}"
        else:
            try:
                out["json"] = json.loads(so)
            except ValueError as e:
                out["error"] = f"unreadable JSON ({e}): {so[:200]!r}"
        out["stderr"] = se[-2000:]
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.communicate()
        out["error"] = f"HANG: no answer after {timeout} s (killed)"
    return dict(out, wall_s=time.perf_counter() - t0)


def breakdown_runs(wl: Workload, lopi: Path, work: Path, env: dict, ncpu: int, n: int) -> dict:
    """n rounds of {plain, lopi} x {1 CPU, all CPUs}, interleaved, order rotated each round:
    {config: {variant: [run dicts]}}; lopi's runs carry their `lopi report --breakdown` JSON."""
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


def f2(x: Optional[float], fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def rng(vals: list[float], fmt: str = "{:.3f}") -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    med = fmt.format(statistics.median(vals))
    return med if len(vals) == 1 else f"{med} [{fmt.format(min(vals))}–{fmt.format(max(vals))}]"


KERNELS = ("giant-lock", "subsystem-locks", "app-kernel")
LOCKS = KERNELS[:2]  # the kernels the summary's lock table compares (the app kernel has a table of its own)
KNAME = {"native": "native", "giant-lock": "giant lock", "subsystem-locks": "subsystem locks",
         "app-kernel": "app kernel"}


def cpu_share(k: dict, *keys: str) -> Optional[float]:
    """Keys' share of the CPU time (user + kernel + program-lock spin + kernel-lock spin), in %."""
    cpu = k["user_ns"] + k["kernel_ns"] + k["lock_spin_ns"] + k["kernel_lock_spin_ns"]
    return 100 * sum(k[x] for x in keys) / cpu if cpu else None


def whatif_fig(wi: Optional[dict], kernel: str) -> dict:
    """One `lopi whatif` call's figures on the most CPUs: {error} or {native, kernel, slowdown, ...}."""
    if not wi:
        return {"error": "not run"}
    if "json" not in wi:
        return {"error": wi.get("error", "?")}
    j = wi["json"]
    nat, emu = j.get("native"), j.get(kernel)
    if not nat or not emu:
        return {"error": f"no `native` or `{kernel}` in lopi whatif's JSON"}
    return {"native": nat, "kernel": emu, "identical": j.get("output_identical"),
            "slowdown": emu["wall_ns"] / nat["wall_ns"] if nat["wall_ns"] else None,
            "slowdown1": (emu["one_cpu"]["wall_ns"] / nat["one_cpu"]["wall_ns"] if nat["one_cpu"]["wall_ns"]
                          else None),
            "amdahl": j.get("amdahl_bound"), "kshare": j.get("kernel_share_one_cpu")}


def whatif_table(calls: dict, ncpu: int) -> list[str]:
    """The key numbers of each `lopi whatif` call (kernel -> run dict) as Markdown."""
    rows, notes = [], []
    for kernel, wi in calls.items():
        f = whatif_fig(wi, kernel)
        shown = wi["shown"] if wi else kernel
        if "error" in f:
            notes.append(f"- `{shown}` FAILED after {wi['wall_s'] if wi else 0:.1f} s: {f['error']}")
            continue
        for name, k in (("native", f["native"]), (kernel, f["kernel"])):
            null = (ak.null_cell(k) if name == ak.KERNEL else
                    f"{k['null_syscall_ns']:.0f} ({k['null_syscall_cycles']:.0f} cycles)")
            for cpus, p in ((1, k["one_cpu"]), (k["cpus"], k)):
                sp = f"{p['speedup']:.2f}"
                rows.append([f"--kernel {kernel}", KNAME[name], str(cpus), f"{p['wall_ns'] / 1e6:,.1f}", sp,
                             f2(cpu_share(p, "user_ns"), "{:.1f}"), f2(cpu_share(p, "kernel_ns"), "{:.1f}"),
                             f2(cpu_share(p, "kernel_lock_spin_ns"), "{:.1f}"),
                             f2(cpu_share(p, "lock_spin_ns"), "{:.1f}"),
                             null if cpus == 1 else ""])
        ks = f2(100 * f["kshare"] if f["kshare"] is not None else None, "{:.1f}")
        notes.append(f"- `{shown}` ({wi['wall_s']:.1f} s): {ncpu}-CPU wall time under {KNAME[kernel]} "
                     f"x{f2(f['slowdown'])} native's; Amdahl bound with the kernel serial {f2(f['amdahl'])} "
                     f"(native kernel share on 1 CPU {ks}%); "
                     f"output {'identical' if f['identical'] else 'DIFFERS'} (lopi whatif: every run's standard "
                     "output, byte for byte)" + ("; " + ak.call_note(f["kernel"]) if kernel == ak.KERNEL else ""))
    head = ["call", "kernel", "CPUs", "wall ms (median)", "speedup vs native on 1 CPU", "user %", "kernel %",
            "kernel-lock spin %", "program-lock spin %", "null syscall ns"]
    return ([h.markdown_table(head, rows), ""] if rows else []) + notes + [""]


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


def thesis_section(fig: dict, ncpu: int, res: dict, cal3070: tuple[int, str, str]) -> list[str]:
    one, many = fig.get("1"), fig.get(str(ncpu))
    if not one or not many:
        return ["No thesis comparison: the mpbench breakdowns are missing.", ""]
    w1, wn = one["median"]["workers"], many["median"]["workers"]
    k1 = 100 - statistics.median(one["user_share"])
    gl = 1 / (k1 / 100 + (1 - k1 / 100) / ncpu)
    g = whatif_fig((res.get("whatif") or {}).get("giant-lock"), "giant-lock")
    if "error" in g:
        g_shares = g_speed = f"`lopi whatif --kernel giant-lock` FAILED: {g['error']}"
        g_amdahl, g_near = "", "no figure, the call failed"
    else:
        k = g["kernel"]
        g_shares = (f"{f2(cpu_share(k, 'user_ns'), '{:.1f}')} / {f2(cpu_share(k, 'kernel_ns'), '{:.1f}')} / "
                    f"{f2(cpu_share(k, 'kernel_lock_spin_ns', 'lock_spin_ns'), '{:.1f}')} (emulated giant lock, "
                    "`lopi whatif`, % of all threads' CPU time)")
        g_speed = (f"{k['speedup']:.2f} (emulated giant lock, `lopi whatif`; native in the same call "
                   f"{g['native']['speedup']:.2f})")
        g_near = f"{k['speedup']:.2f}"
        g_amdahl = f"; `lopi whatif`'s, from its native 1-CPU kernel share {100 * g['kshare']:.1f}%: {f2(g['amdahl'])}"
    rows = [
        ["workers' user : kernel on 1 CPU, user/(user+kernel)", "64 : 36",
         f"{rng(one['user_share'], '{:.1f}')} : {100 - statistics.median(one['user_share']):.1f}"],
        ["workers' lock spin on 1 CPU, % of wall", "< 0.1", f"{w1['lock_spin_ns']:.2f}"],
        [f"user / kernel / spin on {ncpu} CPUs, giant lock", "55–59 / 20–22 / 20–23 (workers, % of time)",
         g_shares],
        [f"workers' user / kernel / spin on {ncpu} CPUs natively, % of wall", "-",
         f"{wn['user_ns']:.1f} / {wn['kernel_ns']:.1f} / {wn['lock_spin_ns']:.2f} "
         f"(native Linux; user share {rng(many['user_share'], '{:.1f}')}%)"],
        [f"speedup on {ncpu} CPUs, giant lock", "1.20", g_speed],
        [f"speedup on {ncpu} CPUs natively", "-", f2(fig.get("speedup"), "{:.3f}") + " (`lopi scale`, uninstrumented)"],
        [f"Amdahl bound on {ncpu} CPUs", "1.47 (kernel share serial)",
         f"{f2(fig.get('amdahl'))} from scale's serial fraction {f2(fig.get('scale_serial'), '{:.3f}')}; "
         f"{gl:.2f} if the kernel share were serial, 1 / (k + (1 − k) / {ncpu}) with lopi's 1-CPU k = {k1:.1f}% "
         f"(the thesis's k = 36% gives its 1.47){g_amdahl}"],
        ["serial fraction", "-", f"Karp-Flatt from the speedup {f2(fig.get('kf'), '{:.3f}')}; lopi's breakdown on "
         f"{ncpu} CPUs {rng(many['serial'])}"],
        *ak.thesis_rows(whatif_fig((res.get("whatif") or {}).get(ak.KERNEL), ak.KERNEL), ncpu),
    ]
    ms, rounds, iters = cal3070
    md = ["Beside the thesis's own figures (Paper II: its synthetic benchmark on 2 CPUs with a kernel under one "
          "giant lock). lopi's giant lock is emulated: `lopi whatif --kernel giant-lock` takes a spinlock around "
          "each of the program's system calls that cannot sleep (here every read of /dev/zero); native is "
          "Linux's fine-grained kernel. lopi's shares are of the CPU time summed over all threads, the main "
          "thread (asleep in pthread_join, almost no CPU) included. The application kernel (Paper III) is emulated "
          "too: `lopi whatif --kernel app-kernel` has each thread's system calls made by a proxy thread on CPU 0.",
          "",
          h.markdown_table(["figure", "thesis", "lopi (this run)"], rows), "",
          "At 64 : 36 an ideal spinlock lets one thread's kernel phase overlap the other's user phase, so two "
          f"threads can nearly double (lopi's emulated giant lock in this run: {g_near}), whereas the thesis's "
          "real giant-locked kernel reached 1.20: it also serialised interrupts and paid for the lock's cache "
          "line. Amdahl's 1.47 treats the kernel time as serial against everything, user time included: a "
          "pessimistic model rather than a ceiling. A lock that serialises only the kernel caps the speedup at "
          f"min({ncpu}, 1 / k) instead, with k the kernel share on 1 CPU.", ""]
    v = res.get("whatif_3070")
    md += [f"A kernel-heavy variant, where one lock should bite: mpbench calibrated for 30% user / 70% kernel "
           f"(`taskset -c 0 mpbench --calibrate {ms} 30`: ROUNDS {rounds}, USER_ITERS {iters}), "
           "`lopi whatif --kernel giant-lock` only:", ""]
    md += whatif_table(v, ncpu) if v else ["(not run: mpbench --calibrate printed nothing)", ""]
    for name, calls in (("64 : 36", res.get("whatif")), ("30 : 70", v)):
        f = whatif_fig((calls or {}).get("giant-lock"), "giant-lock")
        if "error" not in f and f["kshare"]:
            md.append(f"- {name}: under the emulated giant lock {f['kernel']['speedup']:.2f} on {ncpu} CPUs; "
                      f"Amdahl with the kernel serial {f2(f['amdahl'])}; the one-lock ceiling "
                      f"min({ncpu}, 1 / k) = {min(ncpu, 1 / f['kshare']):.2f} (k = {100 * f['kshare']:.1f}%).")
    return md + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="--runs 2, 300 ms mpbench (and 30:70 variant), 16 MiB corpus, half the postmark and "
                    "sysbench work")
    ap.add_argument("--runs", type=int, help="lopi scale --runs, lopi whatif --runs, and rounds of breakdown runs "
                    "(default 3, quick 2)")
    ap.add_argument("--ms", type=int, help="mpbench calibration in ms on one CPU (default 1000, quick 300)")
    ap.add_argument("--ms3070", type=int,
                    help="calibration of the 30%% user / 70%% kernel mpbench variant, ms (default 600, quick 300)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds before a lopi whatif call counts as hung")
    ap.add_argument("--mib", type=int, help="pigz/zstd corpus in MiB (default 64, quick 16)")
    ap.add_argument("--only", help="comma-separated workload keys (mpbench,pigz,zstd,postmark,sysbench)")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first (default /dev/shm/lopi-bench-mp)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "mp.md")
    a = ap.parse_args()
    n, ms, mib = a.runs or (2 if a.quick else 3), a.ms or (300 if a.quick else 1000), a.mib or (16 if a.quick else 64)
    ms3070 = a.ms3070 or (300 if a.quick else 600)
    pm_files, pm_tx, events = (1000, 10000, 1000) if a.quick else (2000, 20000, 2000)
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
    cal = subprocess.run(["taskset", "-c", "0", str(mpbench), "--calibrate", str(ms), "64"],
                         capture_output=True, text=True).stdout.split()
    rounds, iters = (cal + ["0", "0"])[:2]
    log(f"mpbench calibrated for {ms} ms at 64% user on one CPU: ROUNDS {rounds} USER_ITERS {iters}")
    cal = subprocess.run(["taskset", "-c", "0", str(mpbench), "--calibrate", str(ms3070), "30"],
                         capture_output=True, text=True).stdout.split()
    rounds30, iters30 = (cal + ["0", "0"])[:2]
    log(f"mpbench calibrated for {ms3070} ms at 30% user on one CPU: ROUNDS {rounds30} USER_ITERS {iters30}")
    corpus = work / f"corpus-{mib}M.bin"
    corpus_sha = make_corpus(corpus, mib)
    (pm_dir := work / "postmark").mkdir()
    pm_cfg = work / "postmark.cfg"
    pm_cfg.write_text(f"set location {pm_dir}\nset number {pm_files}\nset transactions {pm_tx}\nrun\nquit\n")

    def which(cmd: str) -> str:  # the Debian packages are named as their commands
        return "" if shutil.which(cmd) else f"{cmd} not installed (Debian's `{cmd}` package)"
    sha = lambda out: f"{len(out):,} bytes, sha256 {hashlib.sha256(out).hexdigest()[:16]}"  # noqa: E731
    wls = [
        Workload("mpbench", f"mpbench (the thesis's benchmark): {rounds} rounds of {iters} user iterations + "
                 "read(/dev/zero, 64 KiB), threads = CPUs", lambda c: [str(mpbench), c, rounds, iters],
                 lambda o: o.decode(errors="replace").strip(), workers="worker",
                 skip="" if rounds != "0" else "mpbench --calibrate printed nothing"),
        Workload("pigz", f"pigz -p CPUS -c of a {mib} MiB corpus", lambda c: ["pigz", "-p", c, "-c", str(corpus)], sha,
                 skip=which("pigz")),
        Workload("zstd", f"zstd -T CPUS -q -c -3 of a {mib} MiB corpus",
                 lambda c: ["zstd", f"-T{c}", "-q", "-c", "-3", str(corpus)], sha, skip=which("zstd")),
        Workload("postmark", f"postmark: {pm_files:,} files, {pm_tx:,} transactions (single-threaded)",
                 lambda c: ["postmark", str(pm_cfg)], postmark_check, skip=which("postmark"),
                 timed="its run time in whole seconds and rates per second", threads=1),
        Workload("sysbench", f"sysbench threads, --events={events}",
                 lambda c: ["sysbench", "threads", f"--threads={c}", "--thread-yields=100", "--thread-locks=4",
                            "--time=0", f"--events={events}", "run"],
                 lambda o: (f"events {m.group(1).decode()}" if (m := re.search(rb"total number of events:\s+(\d+)", o))
                            else "no event count"),
                 skip=which("sysbench"), timed="its total time and latencies",
                 whatif_note="each event calls sched_yield 100 times; the emulation runs sched_yield without its "
                 "lock (a kernel drops its lock when it switches), as it does every call that gives the CPU away."),
    ]
    if a.only:
        wls = [w for w in wls if w.key in a.only.split(",")]
    all_res: dict = {}
    for wl in wls:
        res: dict = {"scale_argv": [str(lopi), "scale", "--runs", str(n), "--breakdown", "--format", "json", "--",
                                    *wl.argv("{cpus}")], "breakdown": {}}
        res["scale_shown"] = " ".join(["lopi", *res["scale_argv"][1:]]).replace(str(mpbench), "mpbench")
        all_res[wl.key] = res
        if wl.skip:
            log(f"=== {wl.key}: skipped: {wl.skip}")
            continue
        log(f"=== {wl.key}: lopi scale")
        res["scale"] = run_scale(res["scale_argv"], work, env)
        log(f"  scale: {res['scale'].get('error') or 'ok'} in {res['scale']['wall_s']:.1f} s")
        log(f"=== {wl.key}: breakdown runs (plain and lopi run, 1 and {ncpu} CPUs)")
        res["breakdown"] = breakdown_runs(wl, lopi, work, env, ncpu, n)
        res["whatif_runs"], res["whatif"] = n, {}
        variants = [("whatif", k, wl.argv("{cpus}")) for k in KERNELS]
        if wl.key == "mpbench" and rounds30 != "0":
            res["whatif_3070"] = {}
            variants.append(("whatif_3070", "giant-lock", [str(mpbench), "{cpus}", rounds30, iters30]))
        for slot, kernel, argv in variants:
            log(f"=== {wl.key}: lopi whatif --kernel {kernel}" + (" (30:70 variant)" if slot != "whatif" else ""))
            wi = run_whatif([str(lopi), "whatif", "--kernel", kernel, "--runs", str(n), "--format", "json", "--",
                             *argv], work, env, a.timeout)
            wi["shown"] = " ".join(["lopi", *wi["argv"][1:]]).replace(str(mpbench), "mpbench")
            res[slot][kernel] = wi
            f = whatif_fig(wi, kernel)
            log(f"  {kernel}: {f['error']}" if "error" in f else
                f"  {kernel}: speedup native {f['native']['speedup']:.2f}, {kernel} {f['kernel']['speedup']:.2f}; "
                + (f"{f['kernel']['forwarded']:,} calls forwarded, {f['kernel']['in_place']:,} in place; "
                   if kernel == ak.KERNEL else
                   f"spin {f2(cpu_share(f['kernel'], 'kernel_lock_spin_ns'), '{:.1f}')}%; ")
                + f"output {'identical' if f['identical'] else 'DIFFERS'}; {wi['wall_s']:.1f} s")

    sections, figs = [], {}
    for wl in wls:
        md, figs[wl.key] = workload_section(wl, all_res[wl.key], ncpu)
        if wl.key == "mpbench" and not wl.skip:
            md[2:2] = thesis_section(figs[wl.key], ncpu, all_res[wl.key], (ms3070, rounds30, iters30))
        sections += md
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
                       f"on {ncpu} CPUs, so a serial fraction of {rng(ser)}, while the speedup measured by scale, "
                       f"{f['speedup']:.3f}, implies {f['kf']:.3f} (Karp-Flatt). The recorded runs took "
                       f"x{many.get('slowdown') or 0:.2f} plain's wall time: lopi's own work in the probes (parallel) "
                       "dilutes a serial part, and what the program does before lopi's first record (loading, "
                       "start-up) is outside its wall time.")
    wrows, wnotes = [], []
    for wl in wls:
        res = all_res[wl.key]
        if wl.skip:
            wrows.append([wl.key, "skipped: " + wl.skip, *[""] * 8])
            continue
        variants = [(wl.key, res.get("whatif", {}))]
        if "whatif_3070" in res:
            variants.append(("mpbench 30:70 (giant lock only)", res["whatif_3070"]))
        for label, calls in variants:
            fs = {k: whatif_fig(calls.get(k), k) for k in LOCKS if k in calls or label == wl.key}
            ok = {k: f for k, f in fs.items() if "error" not in f}
            cell = lambda k, fn: (fn(ok[k]) if k in ok else ("FAILED" if k in fs else "not run"))  # noqa: E731
            both = lambda fn: " / ".join(cell(k, fn) for k in LOCKS)  # noqa: E731
            natives = lambda fn: " / ".join(fn(f) for f in ok.values()) or "-"  # noqa: E731
            spin = both(lambda f: f2(cpu_share(f["kernel"], "kernel_lock_spin_ns"), "{:.1f}"))
            null = (natives(lambda f: f"{f['native']['null_syscall_ns']:.0f}") + " → "
                    + both(lambda f: f"{f['kernel']['null_syscall_ns']:.0f}"))
            wrows.append([
                label,
                natives(lambda f: f"{f['native']['speedup']:.2f}"),
                cell("giant-lock", lambda f: f"{f['kernel']['speedup']:.2f}"),
                cell("subsystem-locks", lambda f: f"{f['kernel']['speedup']:.2f}"),
                spin,
                both(lambda f: "x" + f2(f["slowdown"])),
                both(lambda f: "x" + f2(f["slowdown1"])),
                null,
                both(lambda f: "yes" if f["identical"] else "NO"),
            ])
            for k, f in fs.items():
                if "error" in f:
                    wnotes.append(f"- {label}, {k}: `{calls[k]['shown'] if k in calls else k}` FAILED: {f['error']}")
            differ = [KNAME[k] for k, f in ok.items() if not f["identical"]]
            if differ:
                plain = [r for vs in res["breakdown"].values() for r in vs["plain"] if r["rc"] == 0]
                why = (f" {wl.key} prints {wl.timed}, so its bytes differ between any two runs: its {len(plain)} plain "
                       f"breakdown runs printed {len({r['raw_sha256'] for r in plain})} different byte strings, and "
                       f"{len({r['check'] for r in plain})} once the timings are cut (the breakdown's check, "
                       + ("which also passed under lopi run)." if figs[wl.key].get("identical") else
                          "which FAILED under lopi run: see the workload's section).") if wl.timed else "")
                wnotes.append(f"- {label}: output NOT identical natively and under {' and '.join(differ)}, as lopi "
                              f"whatif compares it (every run's standard output, byte for byte).{why}")
            if label == wl.key and wl.threads == 1 and ok:
                one = natives(lambda f: f"{f['native']['one_cpu']['wall_ns'] / 1e6:,.1f}")
                wnotes.append(
                    f"- {label} is single-threaded: no second thread contends for the emulated lock (spin {spin}% "
                    f"on {ncpu} CPUs); what the emulation costs it is the uncontended lock in its probes (null "
                    f"system call {null} ns): wall time {both(lambda f: 'x' + f2(f['slowdown1']))} native's on 1 "
                    f"CPU, {both(lambda f: 'x' + f2(f['slowdown']))} on {ncpu} (for scale, native's 1-CPU wall "
                    f"time in the two calls: {one} ms).")
            spins = [cpu_share(f["kernel"], "kernel_lock_spin_ns") or 0 for f in ok.values()]
            if label == wl.key and wl.whatif_note and spins and max(spins) > 20:
                wnotes.append(f"- {label}: {wl.whatif_note}")
    akmd = ak.summary([(wl.key, {"skip": wl.skip} if wl.skip else
                        whatif_fig(all_res[wl.key].get("whatif", {}).get(ak.KERNEL), ak.KERNEL), wl.timed)
                       for wl in wls], ncpu, n)
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        *((pkg, (h._cmd(["dpkg-query", "-W", "-f", "${Version}", pkg]) or "not installed"))
          for pkg in ("pigz", "zstd", "postmark", "sysbench", "util-linux")),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("Multiprocessor analysis: lopi scale, lopi report --breakdown and lopi whatif",
                        "bench/mp/run.sh",
                        a.quick, machine)
    md += ["", "## Method", "",
           f"- `lopi scale --runs {n} --breakdown --format json -- PROG ARGS`: PROG uninstrumented, pinned by lopi to "
           f"1, ..., {ncpu} CPUs (`{{cpus}}` in ARGS becomes the count), one warm-up run on the most CPUs then "
           f"{n} runs "
           "per count interleaved; median wall time [min–max], speedup and efficiency against 1 CPU, Karp-Flatt from "
           "the measured speedup; `--breakdown` adds one run recorded under lopi on the most CPUs whose breakdown "
           "gives the serial fraction and Amdahl's bound. PROG's standard output is discarded by lopi scale.",
           f"- Breakdown runs: {n} rounds, each running PROG plain and under `lopi run -q --probe syscall,locks` "
           f"on 1 CPU (`taskset -c 0`, 1 thread) and on all {ncpu} CPUs ({ncpu} threads), the four in an order "
           "rotated each round; lopi's data goes to a fresh `$LOPI_OUTPUT` per run in the scratch directory, read "
           "with `lopi report DATA --breakdown --format json`, then deleted. The table shows the recorded run with "
           "the median process wall time; the notes give the range over all runs. Parts: user, kernel (CPU), "
           "blocked (in system calls, off the CPU), lock spin / lock blocked (acquisition waits), other (the rest: "
           "runnable, page faults); they should sum to each thread's wall time (column `max |parts − wall| / wall`, "
           "worst thread). `CPU / (wall × CPUs)`: the threads' user + kernel + spin time over what the CPUs could "
           "run in the process's wall time (must be ≤ 1).",
           "- Output identity: every run's standard output (its sha256 for pigz and zstd) against the plain runs "
           "of the same command: mpbench's checksum line, sysbench's `total number of events`, postmark's report "
           "with the lines that contain `seconds` dropped and the `(N per second)` rates cut from the others "
           "(timings vary from run to run).",
           f"- What-if kernels: `lopi whatif --kernel giant-lock|subsystem-locks|app-kernel --runs {n} --format json "
           "-- PROG ARGS`, "
           f"one call per kernel (hung after {a.timeout} s): PROG recorded (`lopi run --probe syscall,locks`) natively "
           f"and under the emulated kernel, on 1 CPU and on {ncpu}, {n} runs each (the median process wall time "
           "counts), plus a getppid loop for the null system call on 1 CPU. The lock kernels are a spinlock that "
           "the system-call probes hold around each call that cannot sleep (one for all calls: giant-lock; one per "
           "subsystem — file system, network, memory, processes, time, IPC: subsystem-locks); a call that may sleep "
           "(futex, poll, waits, fork/clone/exec, pipes, sockets, terminals) runs without it and takes and drops it "
           "on return. Not modelled: page faults and interrupts (not system calls), the real kernel's own locks "
           "(still there underneath), vDSO calls (clock_gettime and the like: not system calls), and the system "
           "calls of a vfork child (run unemulated). The application kernel (app-kernel, the thesis's Paper III) "
           "has every system call of a thread made by a proxy thread of its own, through a mailbox, all proxies "
           "pinned to CPU 0 and the program's threads to the other CPUs (on 1 CPU they share it), the proxy and "
           "its thread spinning while they wait (lopi whatif's default `--proxy-wait spin`); calls about the "
           "calling thread (exit, clone, fork, exec, its signal mask, ...) and a signal handler's call during a "
           "forwarded one run in place, and its null system call is measured on 2 CPUs (proxy and caller apart), "
           "both spinning and waiting in futex. Not modelled there: a signal does not interrupt a forwarded call, "
           "the proxies are visible in /proc/self/task, and page faults and interrupts are not system calls. "
           "lopi whatif checks output identity on every run's standard "
           "output, byte for byte. mpbench also runs as a 30% user / 70% kernel variant "
           f"(`mpbench --calibrate {ms3070} 30`) under the giant lock only.",
           f"- mpbench: [mpbench.c](../../crates/lopi-cli/src/mpbench.c) built `gcc -O2 -pthread`, calibrated once "
           f"with `taskset -c 0 mpbench --calibrate {ms} 64` (ROUNDS {rounds}, USER_ITERS {iters}); workers are the "
           "threads named `worker`. pigz and zstd compress bench/locks's deterministic corpus "
           f"({mib} MiB, sha256 {corpus_sha[:16]}) on tmpfs; postmark works in a fresh directory of the scratch "
           f"directory ({pm_files:,} files, {pm_tx:,} transactions); it is single-threaded, so `{{cpus}}` is unused "
           "and its speedup should stay ~1. lopi's plan cache (XDG_CACHE_HOME) and scale's data file (TMPDIR) "
           "are in the scratch directory.",
           "", "## Summary", "",
           h.markdown_table(["workload", f"speedup on {ncpu} CPUs (scale)", "Karp-Flatt from the speedup",
                             "serial fraction, scale's recorded runs (median)", f"serial fraction, breakdown runs on {ncpu} CPUs",
                             f"average parallelism on {ncpu} CPUs", f"Amdahl bound on {ncpu} CPUs (scale)",
                             "outputs under lopi run"], rows), "", *odd, *([""] if odd else []),
           "### What-if kernels", "",
           f"`lopi whatif --kernel K --runs {n} --format json` per workload and lock kernel K (native measured anew in "
           f"each call, so native's figures come in pairs: giant-lock call / subsystem-locks call; pairs of the other "
           f"columns: giant lock / subsystem locks). Speedup: the {ncpu}-CPU wall time against the same kernel's on "
           f"1 CPU. Spin: waiting for the emulated kernel lock, % of the threads' CPU time on {ncpu} CPUs. Wall ÷ "
           "native's: the wall time under the emulated kernel over native's in the same call. Null system call: "
           "getppid on 1 CPU.", "",
           h.markdown_table(["workload", f"speedup on {ncpu} CPUs natively", "under giant lock",
                             "under subsystem locks", f"kernel-lock spin % of CPU on {ncpu} CPUs",
                             f"{ncpu}-CPU wall ÷ native's", "1-CPU wall ÷ native's",
                             "null syscall ns, native → emulated",
                             "output identical"], wrows), "", *wnotes, *([""] if wnotes else []), *akmd, *sections]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(md))
    raw = a.out.with_suffix(".runs.json")
    meta = {"runs": n, "ms": ms, "mib": mib, "corpus_sha256": corpus_sha, "mpbench": [rounds, iters],
            "mpbench_3070": [ms3070, rounds30, iters30], "whatif_timeout_s": a.timeout,
            "postmark": [pm_files, pm_tx], "sysbench_events": events, "cpus": ncpu, "work": str(work),
            "machine": machine}
    raw.write_text(json.dumps({"meta": meta, "workloads": all_res}, indent=1, default=str))
    print("\n".join(md))
    log(f"wrote {a.out} and {raw.name}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
