"""bench/mp's Predicted vs measured table: for each workload, the speedup lopi predicts on the machine's CPUs
(Amdahl's bound from the serial fraction of `lopi scale --breakdown`'s recorded runs; the USL fit's value when
lopi fits one) beside the speedup `lopi scale` measured (median wall time on 1 CPU over that on N), the error,
and where they differ by more than 15% what lopi's own data shows (the breakdown runs' reports: parallelism
profile, time blocked in system calls and in which, lock waits, CPU time on N CPUs against 1, processes the
record does not show); then 4 and 8 CPUs, extrapolated (nothing measured).
"""

from __future__ import annotations

import statistics
from typing import Optional

import harness as h

LIMIT = 15.0  # % error past which the table says why
EXTRA = (4, 8)  # CPU counts extrapolated to
SPAWN = ("clone", "clone3", "fork", "vfork")
FD_WAITS = ("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2", "recvfrom",
            "recvmsg", "accept", "accept4")


def digest(sc: dict) -> dict:
    """`lopi report --syscalls --format json` cut to what the table uses: the calls that took the most
    time (name, calls, total_ns) and the number of clone/fork calls."""
    calls = sorted(sc.get("syscalls", []), key=lambda c: -c["total_ns"])
    return {"top": [{k: c[k] for k in ("name", "calls", "total_ns")} for c in calls[:6]],
            "spawned": sum(c["calls"] for c in calls if c["name"] in SPAWN)}


def usl_at(usl: Optional[dict], n: int) -> Optional[float]:
    """The USL's speedup at N CPUs: N / (1 + sigma (N - 1) + kappa N (N - 1))."""
    if not usl:
        return None
    return n / (1 + usl["sigma"] * (n - 1) + usl["kappa"] * n * (n - 1))


def median_run(runs: list[dict]) -> Optional[dict]:
    """The recorded run with the median process wall time (of those with a report)."""
    ok = sorted((r for r in runs if "report" in r), key=lambda r: r["report"]["process_wall_ns"])
    return ok[(len(ok) - 1) // 2] if ok else None


def cpu_ns(t: dict) -> int:
    return t["user_ns"] + t["kernel_ns"] + t["lock_spin_ns"] + t.get("kernel_lock_spin_ns", 0)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def profile(rep: dict) -> str:
    par = rep.get("parallelism")
    if not par or not par.get("samples"):
        return f"no parallelism profile; {rep['average_parallelism']:.2f} CPUs busy on average"
    shares = sorted(par["shares"].items(), key=lambda kv: int(kv[0]))
    return ("threads ready to run " + ", ".join(f"{k}: {pct(v)}" for k, v in shares) +
            f" of the time ({rep['average_parallelism']:.2f} CPUs busy on average), so serial fraction "
            f"{rep['serial_fraction']:.3f} ({rep.get('serial_fraction_from', '?')})")


def why(res: dict, ncpu: int, pred: float, meas: float, spread: tuple[float, float]) -> str:
    """What lopi's breakdown runs show that bears on the gap between PRED and MEAS, from their JSON."""
    bd = res.get("breakdown", {})
    run_n, run_1 = median_run(bd.get(str(ncpu), {}).get("lopi", [])), median_run(bd.get("1", {}).get("lopi", []))
    if run_n is None:
        return "no recorded run on the most CPUs to look into"
    rep, tot = run_n["report"], run_n["report"]["total"]
    wall = tot["wall_ns"] or 1
    threads = [t for t in rep["threads"] if t["cpu_known"]]
    facts = []
    blocked = tot["syscall_blocked_ns"] / wall
    top = [c for c in run_n.get("syscalls", {}).get("top", []) if c["total_ns"] / wall >= 0.05][:3]
    top_txt = ", ".join(f"{c['name']} {pct(c['total_ns'] / wall)} ({c['calls']:,} calls)" for c in top)
    unseen = run_n.get("syscalls", {}).get("spawned", 0) - (len(threads) - 1)
    hidden = unseen > 0 and rep["average_parallelism"] < 0.1
    if hidden:
        names = sorted({t["name"] for t in threads})
        facts.append(f"the record holds {len({t['pid'] for t in threads})} process(es), {len(threads)} thread(s) "
                     f"({', '.join(names)}), {rep['average_parallelism']:.2f} CPUs busy on average, blocked "
                     f"{pct(blocked)} of their time in system calls ({top_txt}), and they started {unseen} processes: "
                     "the work is in those, and lopi records the program it starts, not the programs that one "
                     "executes")
    par = rep.get("parallelism") or {}
    if par.get("samples"):
        ready = sum(min(int(k), ncpu) * v for k, v in par["shares"].items())
        if ready - rep["average_parallelism"] >= 0.25:
            facts.append(f"{ready:.2f} of its threads were ready to run on average (at most {ncpu} counted) but "
                         f"only {rep['average_parallelism']:.2f} CPUs busy with them: they waited for a CPU "
                         f"({pct(tot['runnable_ns'] / wall)} of the threads' time runnable, not running), taken by "
                         "other programs or by the kernel switching threads, which the prediction leaves out")
    working = [t for t in threads if cpu_ns(t) >= 0.1 * t["wall_ns"]]
    w_blocked = sum(t["syscall_blocked_ns"] for t in working) / (sum(t["wall_ns"] for t in working) or 1)
    if not hidden and w_blocked > 0.2:
        io = [c["name"] for c in top if c["name"] in FD_WAITS]
        facts.append(f"the {len(working)} threads that used the CPU (of {len(threads)}) spent {pct(w_blocked)} of "
                     f"their time blocked in system calls (the record's longest: {top_txt})" +
                     (f"; {' and '.join(io)} wait for file descriptors, such as a server's answers, whose work runs "
                      "in a process lopi does not record" if io else ""))
    if run_1 is not None and not hidden:
        c1, cn = cpu_ns(run_1["report"]["total"]), cpu_ns(tot)
        if c1 and cn / c1 >= 1.10:
            t1 = run_1["report"]["total"]
            facts.append(f"the threads' CPU time is x{cn / c1:.2f} on {ncpu} CPUs what it is on 1 (user "
                         f"x{tot['user_ns'] / max(t1['user_ns'], 1):.2f}, kernel "
                         f"x{tot['kernel_ns'] / max(t1['kernel_ns'], 1):.2f}): the same work costs "
                         "more CPU with more CPUs (memory bus, caches, coherence traffic, spinning), which a serial "
                         "fraction does not model")
    lock = rep.get("lock_bound")
    if tot["lock_wait_ns"] / wall >= 0.02 or (lock and lock["bound"] < 1.25 * ncpu):
        facts.append(f"lock waits {pct(tot['lock_wait_ns'] / wall)} of the threads' time" +
                     (f"; most-held lock {lock['lock']} held {lock['hold_ns'] / 1e6:,.1f} ms, a bound of "
                      f"{lock['bound']:.2f}" if lock else ""))
    plain = [r["wall_s"] for r in bd.get(str(ncpu), {}).get("plain", []) if r["rc"] == 0]
    recorded = [r["wall_s"] for r in bd.get(str(ncpu), {}).get("lopi", []) if r["rc"] == 0]
    if plain and recorded and statistics.median(recorded) / statistics.median(plain) >= 1.2:
        facts.append(f"the recorded runs took x{statistics.median(recorded) / statistics.median(plain):.2f} the "
                     "plain runs' time (the probes' cost is in the profile)")
    if spread[1] / spread[0] >= 1.15:
        facts.append(f"the measured speedup itself ranges {spread[0]:.2f}–{spread[1]:.2f} over the runs")
    facts.append(profile(rep))
    return ("lopi predicts more than measured: " if pred > meas else "lopi predicts less than measured: ") + \
        "; ".join(facts)


def f2(x: Optional[float], fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def section(wls: list, all_res: dict, ncpu: int) -> list[str]:
    """The Predicted vs measured table (Markdown lines) for the workloads WLS (workloads.Workload)."""
    rows, refused, within, compared = [], set(), 0, 0
    for wl in wls:
        sc = all_res.get(wl.key, {}).get("scale") or {}
        if wl.skip or "json" not in sc:
            rows.append([wl.key, wl.kind, str(ncpu), "skipped: " + wl.skip if wl.skip else
                         f"lopi scale FAILED: {sc.get('error', 'not run')}", *[""] * 6])
            continue
        j = sc["json"]
        pts = {p["cpus"]: p for p in j["points"]}
        one, top = pts.get(1), pts.get(ncpu)
        bound = {int(k): v for k, v in (j.get("amdahl_bound") or {}).items()}
        usl = j.get("usl")
        if not usl:
            refused.add(j.get("usl_refused") or "no USL fit")
        s = j.get("serial_fraction")
        if not one or not top:
            rows.append([wl.key, wl.kind, str(ncpu), "no 1-CPU or no most-CPU point in lopi scale's JSON", *[""] * 6])
            continue
        meas, kf = top["speedup"], top["karp_flatt"]
        spread = (one["min_ns"] / top["max_ns"], one["max_ns"] / top["min_ns"])
        pred = bound.get(ncpu)
        err = 100 * (pred - meas) / meas if pred is not None and meas else None
        if err is not None:
            compared += 1
            within += abs(err) <= LIMIT
        rows.append([wl.key, wl.kind, str(ncpu), f"{meas:.2f} [{spread[0]:.2f}–{spread[1]:.2f}]", f2(kf, "{:.3f}"),
                     f"{f2(pred)} (s = {f2(s, '{:.3f}')})", f2(err, "{:+.1f}%"), f2(usl_at(usl, ncpu)), "-",
                     why(all_res[wl.key], ncpu, pred, meas, spread) if err is not None and abs(err) > LIMIT else ""])
        for n in EXTRA:
            fit = 1 / (kf + (1 - kf) / n) if kf is not None else None
            rows.append(["", "", f"{n} (extrapolation)", "extrapolation: not measured", "",
                         f2(bound.get(n)), "", f2(usl_at(usl, n)), f2(fit), ""])
    head = ["workload", "kind", "CPUs", f"measured speedup, median [range]", "Karp-Flatt e (measured)",
            "lopi: Amdahl bound (serial fraction s)", "error of the bound", "lopi: USL fit",
            f"Amdahl through the measured {ncpu}-CPU speedup (s = e)", f"why, where the error passes {LIMIT:.0f}%"]
    return ["## Predicted vs measured", "",
            f"For each workload, the speedup on {ncpu} CPUs that lopi predicts beside the one it measured. "
            f"**Measured**: `lopi scale`'s median wall time on 1 CPU over its median on {ncpu} (the range: slowest "
            f"1-CPU run over fastest {ncpu}-CPU run, and the reverse); Karp-Flatt e is the serial fraction that "
            f"speedup implies. **lopi's prediction**: Amdahl's bound 1 / (s + (1 − s) / N) from the serial "
            f"fraction s of `lopi scale --breakdown`'s recorded runs on {ncpu} CPUs (the median of three; from "
            "their parallelism profile: the time one thread alone was ready to run over all the work done while "
            "any was), and the USL fit where lopi makes one. **Error**: (bound − measured) / measured. Where it "
            f"passes {LIMIT:.0f}%, *why* gives what lopi's breakdown runs (`lopi report --breakdown` and "
            f"`--syscalls` of the recorded run with the median wall time on {ncpu} CPUs, and on 1 CPU for the CPU "
            "time) show, computed from their JSON. Rows for "
            f"{' and '.join(map(str, EXTRA))} CPUs are extrapolations (this machine has {ncpu}): lopi's Amdahl bound "
            "and USL, and beside them Amdahl through the measured speedup (s = e: the bench's arithmetic on lopi "
            "scale's Karp-Flatt, the USL with no coherency term).", "",
            h.markdown_table(head, rows), "",
            f"- {within} of {compared} predictions within {LIMIT:.0f}% of the measured speedup on {ncpu} CPUs.",
            *(f"- lopi's USL: {r} (this machine has {ncpu} CPUs, so lopi scale fits no USL here and predicts "
              "nothing past Amdahl)." for r in sorted(refused)), ""]
