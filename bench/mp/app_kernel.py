"""bench/mp's figures for `lopi whatif --kernel app-kernel` (the thesis's application kernel, Paper III: every
system call of a thread made by a proxy thread of its own, the proxies on CPU 0): the cells of mp_bench.py's
per-workload What-if table, its notes, and the summary's App-kernel table. Takes whatif_fig's figures
({native, kernel, identical, slowdown, slowdown1, ...}, kernel = the JSON's "app-kernel" object).
"""

from __future__ import annotations

from typing import Optional

import harness as h

KERNEL = "app-kernel"


def _n(x: Optional[float], fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def per_call(k: dict, key: str) -> Optional[float]:
    """KEY (round_trip_ns or proxy_ns, summed over the threads of the run on the most CPUs) per forwarded call."""
    return k[key] / k["forwarded"] if k.get("forwarded") else None


def null_cell(k: dict) -> str:
    """The null system call under both ways a proxy waits, for the per-workload table's last column."""
    return (f"{_n(k.get('null_syscall_ns_spin'))} spin / {_n(k.get('null_syscall_ns_futex'))} futex "
            f"(on {min(k['cpus'], 2)} CPUs)")


def call_note(k: dict) -> str:
    """Under the per-workload table: what the proxies did on the most CPUs."""
    return (f"on {k['cpus']} CPUs {k['forwarded']:,} calls made by the proxies (round trip "
            f"{_n(per_call(k, 'round_trip_ns'))} ns per call on average, {_n(per_call(k, 'proxy_ns'))} ns of it in "
            f"the proxy), {k['in_place']:,} by the threads themselves (calls about the calling thread)"
            + ("; WARNING: a thread got no proxy and made its calls itself" if k.get("proxy_failed") else ""))


def summary(rows_in: list[tuple[str, dict, str]], ncpu: int, n: int) -> list[str]:
    """The summary's App-kernel table: ROWS_IN are (workload, whatif_fig of its app-kernel call, why its output
    may differ between runs or "")."""
    rows, notes = [], []
    for key, f, timed in rows_in:
        if "skip" in f:
            rows.append([key, "skipped: " + f["skip"], *[""] * 8])
            continue
        if "error" in f:
            rows.append([key, "FAILED", *[""] * 8])
            notes.append(f"- {key}: `lopi whatif --kernel app-kernel` FAILED: {f['error']}")
            continue
        nat, k = f["native"], f["kernel"]
        rows.append([
            key, f"{nat['speedup_self']:.2f}", f"{k['speedup_self']:.2f}",
            f"{nat['wall_ns'] / 1e6:,.1f} → {k['wall_ns'] / 1e6:,.1f} (x{_n(f['slowdown'], '{:.2f}')})",
            f"{nat['one_cpu']['wall_ns'] / 1e6:,.1f} → {k['one_cpu']['wall_ns'] / 1e6:,.1f} "
            f"(x{_n(f['slowdown1'], '{:.2f}')})",
            f"{nat['null_syscall_ns']:.0f} → {_n(k.get('null_syscall_ns_spin'))} / "
            f"{_n(k.get('null_syscall_ns_futex'))}",
            f"{k['forwarded']:,} / {k['in_place']:,}",
            _n(per_call(k, "round_trip_ns")), _n(per_call(k, "proxy_ns")),
            "yes" if f["identical"] else "NO"])
        if k.get("proxy_failed"):
            notes.append(f"- {key}: a thread could not get a proxy and made its calls itself (proxy_failed).")
        if not f["identical"]:
            notes.append(f"- {key}: output NOT identical natively and under the app kernel (every run's standard "
                         "output, byte for byte)" + (f"; {key} prints {timed}, which differ between any two runs "
                                                     "(see the table above)." if timed else "."))
    md = ["### What-if: application kernel", "",
          f"`lopi whatif --kernel app-kernel --runs {n} --format json` per workload (native measured anew in the "
          f"call; the proxies spin while they wait, lopi whatif's default). Every system call of a thread is made by "
          f"a proxy thread of its own, all proxies on CPU 0 and the program's threads on the others, so "
          + (f"on {ncpu} CPUs the program has {ncpu - 1} to itself and " if ncpu > 1 else "")
          + "on 1 CPU it shares the one with its proxies. Speedup: the "
          f"{ncpu}-CPU wall time against the app kernel's own on 1 CPU (shared with the proxies, so it can pass "
          f"{ncpu}). Null system call: getppid natively on 1 CPU → forwarded, proxy and caller on {min(ncpu, 2)} "
          "CPUs, the two spinning / asleep in futex while they wait. Calls: made by the proxies / in place (calls "
          f"about the calling thread: exit, clone, its signal mask, ...), summed over the threads of the {ncpu}-CPU "
          "run; round trip (the thread's wait for a forwarded call) and proxy time (the call itself, on the proxy) "
          "are per forwarded call. A thread's kernel time under the app kernel is its wait for its proxy.", "",
          h.markdown_table(["workload", f"speedup on {ncpu} CPUs natively", "under app kernel",
                            f"{ncpu}-CPU wall ms, native → app kernel", "1-CPU wall ms, native → app kernel",
                            "null syscall ns, native → spin / futex", "calls forwarded / in place",
                            "round trip ns per forwarded call", "proxy ns per forwarded call", "output identical"],
                           rows), ""]
    return md + notes + ([""] if notes else [])


def thesis_rows(f: dict, ncpu: int) -> list[list[str]]:
    """Rows for the thesis comparison (mpbench's app-kernel call)."""
    if "error" in f:
        return [["null system call, native → application kernel", "970 → 5,700 cycles (Paper III)",
                 f"`lopi whatif --kernel app-kernel` FAILED: {f['error']}"]]
    nat, k = f["native"], f["kernel"]
    return [["null system call, native → application kernel", "970 → 5,700 cycles (Paper III)",
             f"{nat['null_syscall_cycles']:,.0f} → {k['null_syscall_cycles']:,.0f} cycles "
             f"({nat['null_syscall_ns']:.0f} → {_n(k['null_syscall_ns'])} ns, waiting by "
             f"{k.get('proxy_wait', '?')}; by spin / futex: "
             f"{_n(k.get('null_syscall_ns_spin'))} / {_n(k.get('null_syscall_ns_futex'))} ns)"],
            [f"speedup on {ncpu} CPUs, application kernel", "-",
             f"{k['speedup_self']:.2f} against its own 1-CPU run (proxies on CPU 0; native in the same call "
             f"{nat['speedup_self']:.2f}); {ncpu}-CPU wall x{_n(f['slowdown'], '{:.2f}')} native's"]]
