"""bench/mp's `lopi whatif` calls and their figures: running one call (a hang killed), the figures of a call
on the most CPUs, the per-workload What-if table and the summary's table of the lock kernels (app_kernel.py
renders the application kernel's)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Optional

import harness as h
import app_kernel as ak


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
            "amdahl": j.get("amdahl_bound"), "kshare": j.get("kernel_share_one_cpu"),
            "ceiling": j.get("lock_ceiling")}


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



def summary(wls: list, all_res: dict, figs: dict, ncpu: int, n: int) -> list[str]:
    """The summary's What-if table: the lock kernels per workload run under any (workloads.Workload)."""
    wrows, wnotes = [], []
    for wl in wls:
        res = all_res[wl.key]
        if not wl.kernels:
            continue
        if wl.skip:
            wrows.append([wl.key, "skipped: " + wl.skip, *[""] * 7])
            continue
        label, calls = wl.key, res.get("whatif", {})
        fs = {k: whatif_fig(calls.get(k), k) for k in LOCKS if k in wl.kernels}
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
        if wl.threads == 1 and ok:
            one = natives(lambda f: f"{f['native']['one_cpu']['wall_ns'] / 1e6:,.1f}")
            wnotes.append(
                f"- {label} is single-threaded: no second thread contends for the emulated lock (spin {spin}% "
                f"on {ncpu} CPUs); what the emulation costs it is the uncontended lock in its probes (null "
                f"system call {null} ns): wall time {both(lambda f: 'x' + f2(f['slowdown1']))} native's on 1 "
                f"CPU, {both(lambda f: 'x' + f2(f['slowdown']))} on {ncpu} (for scale, native's 1-CPU wall "
                f"time in the two calls: {one} ms).")
        spins = [cpu_share(f["kernel"], "kernel_lock_spin_ns") or 0 for f in ok.values()]
        if wl.whatif_note and spins and max(spins) > 20:
            wnotes.append(f"- {label}: {wl.whatif_note}")
    return ["### What-if kernels", "",
            f"`lopi whatif --kernel K --runs {n} --format json` per workload and lock kernel K (native measured anew "
            "in each call, so native's figures come in pairs: giant-lock call / subsystem-locks call; pairs of the "
            f"other columns: giant lock / subsystem locks). Speedup: the {ncpu}-CPU wall time against native's on "
            f"1 CPU (the thesis's baseline for every kernel). Spin: waiting for the emulated kernel lock, % of the "
            f"threads' CPU time on {ncpu} CPUs. Wall ÷ native's: the wall time under the emulated kernel over "
            "native's in the same call. Null system call: getppid on 1 CPU.", "",
            h.markdown_table(["workload", f"speedup on {ncpu} CPUs natively", "under giant lock",
                              "under subsystem locks", f"kernel-lock spin % of CPU on {ncpu} CPUs",
                              f"{ncpu}-CPU wall ÷ native's", "1-CPU wall ÷ native's",
                              "null syscall ns, native → emulated", "output identical"], wrows), "",
            *wnotes, *([""] if wnotes else [])]
