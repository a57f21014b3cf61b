"""bench/mp's "The thesis's tables side by side": Paper II's giant-lock breakdown and speedup (thesis Ch. 3,
Table 3.1 and §3.5) and Paper III's null system call (Ch. 4, Table 4.2), quoted exactly from the thesis
(Kågström, licentiate thesis, BTH 2005:15), beside lopi's emulation on mpbench calibrated to the thesis's
64:36 split, with what a user-space emulation cannot model on each row; then issue 29's criteria on the
kernel-heavy calibration (20% user) under the emulated giant lock.
"""

from __future__ import annotations

from typing import Optional

import harness as h
from whatif import cpu_share, f2, whatif_fig

THESIS = "Kågström, *Performance and Implementation Complexity in Multiprocessor Operating System Kernels*, " \
    "licentiate thesis, BTH 2005:15"


def shares(k: dict) -> str:
    """user / kernel / spinning, % of the threads' CPU time (kernel-lock and program-lock spin together)."""
    return (f"{f2(cpu_share(k, 'user_ns'), '{:.1f}')}% / {f2(cpu_share(k, 'kernel_ns'), '{:.1f}')}% / "
            f"{f2(cpu_share(k, 'kernel_lock_spin_ns', 'lock_spin_ns'), '{:.1f}')}%")


def cycles(k: dict, key: str = "null_syscall_cycles", ns: str = "null_syscall_ns") -> str:
    return f"{k[key]:,.0f} cycles ({k[ns]:,.0f} ns)" if k.get(key) is not None else "-"


def rows64(g: dict, a: dict, ncpu: int) -> list[list[str]]:
    """The comparison's rows: G and A are whatif_fig's figures of the giant-lock and app-kernel calls."""
    if "error" in g:
        gl = [f"`lopi whatif --kernel giant-lock` FAILED: {g['error']}"] * 2
        rows = [["Table 3.1, UP: user-mode / kernel / spinning", "64% / 36% / < 0.1%", *gl, ""]]
    else:
        nat, gk = g["native"], g["kernel"]
        rows = [
            ["Table 3.1, UP: user-mode / kernel / spinning", "64% / 36% / < 0.1%",
             shares(nat["one_cpu"]), shares(gk["one_cpu"]),
             "The thesis's kernel time was the whole system's (about 100 threads beside the benchmark, §3.4; "
             "interrupts); lopi's lock covers only the benchmark's own system calls, and its kernel time is theirs."],
            [f"Table 3.1, SMP ({ncpu} CPUs): user-mode / kernel / spinning", "55%-59% / 20%-22% / 20-23%",
             shares(nat), shares(gk),
             "Interrupts, page faults and the kernel's own threads take no emulated lock; the real kernel's "
             "fine-grained locks still run underneath lopi's, so kernel work that a giant lock would serialise "
             "partly runs in parallel."],
            [f"§3.5: speedup on {ncpu} CPUs over the uniprocessor kernel",
             "\"the speedup is only 1.2\"; \"a 20% speedup over the uniprocessor kernel\"", f"{nat['speedup']:.2f}",
             f"{gk['speedup']:.2f} (against native's 1-CPU run)",
             "No shared ready queue nor lock cache line bouncing between the CPUs (§3.5's second reason): Linux's "
             "run queues are per CPU and lopi's lock is one word in the program's memory."],
            ["§3.5: Amdahl's law, the in-kernel time serial", "(36+64)/(36+64/2) ≈ 1.47", "-",
             f"{f2(g['amdahl'])} from native's 1-CPU kernel share "
             f"{f2(100 * g['kshare'] if g['kshare'] else None, '{:.1f}')}%"
             f"; one lock's ceiling min({ncpu}, 1/share) {f2(g['ceiling'])}",
             "Amdahl's law holds user time serial against kernel time too; a spinlock lets one thread's kernel "
             "phase overlap the other's user phase, which is why the ceiling, not 1.47, bounds the emulation."],
            ["§3.5: the multiprocessor kernel on a uniprocessor", "\"a modest slowdown of around 2%\"", "1.00",
             f"x{f2(g['slowdown1'], '{:.3f}')} native's 1-CPU wall time",
             "lopi's cost is an uncontended atomic lock per system call in its probes (the null call below); the "
             "thesis's was the multiprocessor kernel's code everywhere (per-CPU data, locks, TLB handling)."],
        ]
    if "error" in a:
        rows.append(["Table 4.2: getpid latency, PPro 200MHz (cycles)", "Linux 970 / Application Kernel 5700",
                     f"`lopi whatif --kernel app-kernel` FAILED: {a['error']}", "", ""])
    else:
        an, ak_ = a["native"], a["kernel"]
        ratio = (ak_["null_syscall_cycles"] / an["null_syscall_cycles"]
                 if ak_.get("null_syscall_cycles") and an.get("null_syscall_cycles") else None)
        gl = f"; giant lock {cycles(g['kernel'])}" if "error" not in g else ""
        rows.append([
            "Table 4.2: getpid latency, PPro 200MHz (cycles)", "Linux 970 / Application Kernel 5700",
            cycles(an) + " (getppid)",
            f"application kernel {cycles(ak_)}, x{f2(ratio, '{:.1f}')} native's (the thesis's 5700 / 970: x5.9; "
            f"proxy spinning; asleep in futex {f2(ak_.get('null_syscall_ns_futex'), '{:,.0f}')} ns){gl}",
            "The thesis's forwarded call took five privilege switches, through the driver's ioctl and its "
            "scheduler (§4.6.1); lopi's proxy is a user thread reached through shared memory, with no switch while "
            "it spins and a cross-CPU futex wake-up when it sleeps. Cycles are of a 200 MHz Pentium Pro there, of "
            "this machine's TSC here."])
    rows.append(["Table 4.2: getpid latency, Simics (cycles)", "Linux 74 / Application Kernel 860", "-",
                 "-", "Simics ran one instruction a cycle with free privilege switches, so it counted instructions; "
                      "lopi measures time on real CPUs, where the switches and the mitigations cost most."])
    return rows


def criteria(f: dict, pct: int, ncpu: int) -> list[str]:
    """Issue 29's done-when on the kernel-heavy calibration, from its giant-lock call's figures F."""
    if "error" in f:
        return [f"(`lopi whatif --kernel giant-lock` on the {pct}% calibration FAILED: {f['error']})", ""]
    nat, k = f["native"], f["kernel"]
    spin1 = cpu_share(k["one_cpu"], "kernel_lock_spin_ns")
    ceil = f.get("ceiling")
    rows = [
        ["giant lock on 1 CPU spins", "< 5% of its time", f"{f2(spin1, '{:.1f}')}% of its CPU time",
         "yes" if spin1 is not None and spin1 < 5 else "NO"],
        ["giant lock's 1-CPU wall time", "within 10% of native's", f"x{f2(f['slowdown1'], '{:.3f}')}",
         "yes" if f["slowdown1"] is not None and abs(f["slowdown1"] - 1) <= 0.10 else "NO"],
        [f"giant lock's speedup on {ncpu} CPUs against native's 1-CPU time", "≤ the printed ceiling + 10%",
         f"{k['speedup']:.2f} against a ceiling of {f2(ceil)}",
         "yes" if ceil is not None and k["speedup"] <= 1.1 * ceil else "NO"],
        ["... and below native's", f"< native's {nat['speedup']:.2f}", f"{k['speedup']:.2f}",
         "yes" if k["speedup"] < nat["speedup"] else "NO"],
    ]
    return [h.markdown_table(["criterion", "target", "this run", "met"], rows), ""]


def section(res64: dict, res20: Optional[dict], ncpu: int, cal64: str, cal20: str) -> list[str]:
    """The Markdown section: RES64 and RES20 are mp_bench's results of mpbench at 64% and 20% user."""
    calls = res64.get("whatif") or {}
    g, a = whatif_fig(calls.get("giant-lock"), "giant-lock"), whatif_fig(calls.get("app-kernel"), "app-kernel")
    md = ["## The thesis's tables side by side", "",
          f"The thesis ({THESIS}) measured a giant-locked kernel (Paper II, Ch. 3: its synthetic benchmark, two "
          "processes looping in user space with a kernel call at a set interval, on a two-way 300 MHz Pentium II) "
          "and an application kernel's null system call (Paper III, Ch. 4, Table 4.2). Beside them, lopi's "
          f"emulation on mpbench calibrated to the thesis's 64:36 split on one CPU ({cal64}): `lopi whatif "
          "--kernel giant-lock` and `--kernel app-kernel`, each recording native Linux and the emulated kernel "
          f"on 1 and {ncpu} CPUs. Shares are of the threads' summed CPU time; spinning is the emulated lock's "
          "wait plus any program lock's. The thesis's figures are quoted as printed, with their table or "
          "section; the last column says what a user-space emulation cannot model there.", "",
          h.markdown_table(["thesis (reference)", "thesis's figure", "lopi: native Linux",
                            "lopi: emulated kernel", "what the emulation cannot model"], rows64(g, a, ncpu)), "",
          "- The thesis's Table 3.1 is for a benchmark that made hardly any system calls: \"Consistent speedups "
          "are only seen when our benchmark application executes almost completely in user-mode, so the "
          "presented results refer to the case when the benchmark processes run only in user-mode\" (§3.5). Its "
          "36% kernel time was the rest of the system's, under the same lock; mpbench puts 36% of its own time "
          "in system calls, the only kernel work lopi can put under its lock.", ""]
    if res20 is None:
        return md
    f20 = whatif_fig((res20.get("whatif") or {}).get("giant-lock"), "giant-lock")
    return md + [f"Issue 29's criteria on the kernel-heavy calibration ({cal20}) under `lopi whatif --kernel "
                 "giant-lock`:", "", *criteria(f20, 20, ncpu)]
