#!/usr/bin/env python3
"""What lopi's lock probes cost: `lopi run -q --probe locks` next to valgrind's drd and bpftrace
uprobes on glibc's pthread_mutex_lock/unlock, each recording every lock call of the program.

Workloads:
  pair             `pair N` (pair.c, built here with gcc -O2 -pthread): N uncontended
                   pthread_mutex_lock + pthread_mutex_unlock pairs on one mutex in one thread, timed
                   in-process around the loop; ns per pair, and ns added per pair against plain
  sysbench-mutex   `sysbench mutex --threads=2 --mutex-num=64 --mutex-locks=L --mutex-loops=100`:
                   sysbench's own `total time`; check: its `total number of events`
  sysbench-threads `sysbench threads --threads=2 --thread-yields=100 --thread-locks=4 --time=0
                   --events=E`: `total time`; check: `total number of events`
  pigz             `pigz -p 2 -c CORPUS > OUT` of a deterministic corpus (64 MiB, quick 16 MiB):
                   the process's wall time; check: sha256 of the output
Every variant of a workload runs interleaved round-robin after a warm-up round (bench/lib/harness.py);
drd on pigz runs once, after the others (valgrind runs pigz ~30x slower).

Run through run.sh; `locks_bench.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402
from locks_tables import lock_notes, micro_table, run_table  # noqa: E402
from locks_tools import BASE, BPF, BT_SCRIPT, DRD, LOPI, bt_script_for, preflight, program_libc  # noqa: E402
# make_corpus: bench/coverage and bench/mp make the same corpus (`from locks_bench import make_corpus`)
from locks_workloads import (make_corpus, make_variants, micro_workload, pigz_workload, run_workload,  # noqa: E402
                             sysbench_mutex, sysbench_threads)

BUILD = REPO / "work-real" / "bench-build" / "locks"
log = h.log

# Pairs per configuration in the micro-benchmark: drd costs ~1,000x and bpftrace's uprobes ~5,000x
# what lopi adds per pair here, so they make fewer to keep each run around a second; ns per pair
# comes from the program's own timer either way.
PAIRS = {BASE: 2_000_000, LOPI: 2_000_000, DRD: 200_000, BPF: 20_000}
QUICK_PAIRS = {BASE: 500_000, LOPI: 500_000, DRD: 50_000, BPF: 10_000}
TARGET_NS = 25  # the aim: at most 25 ns added per uncontended lock/unlock pair


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="n=3, 500,000 pairs, a quarter of sysbench's work, a 16 MiB pigz corpus")
    ap.add_argument("-n", type=int, help="recorded runs per variant (default 5, quick 3)")
    ap.add_argument("--mutex-locks", type=int, help="sysbench mutex --mutex-locks (default 200000, quick 50000)")
    ap.add_argument("--events", type=int, help="sysbench threads --events (default 2000, quick 500)")
    ap.add_argument("--mib", type=int, help="pigz corpus size in MiB (default 64, quick 16)")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first (default: /dev/shm/lopi-bench-locks, "
                    "a tmpfs, else work-real/bench-build/locks/work)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "locks.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    pairs = QUICK_PAIRS if a.quick else PAIRS
    mutex_locks = a.mutex_locks or (50_000 if a.quick else 200_000)
    events = a.events or (500 if a.quick else 2000)
    mib = a.mib or (16 if a.quick else 64)
    t_start, load_start = time.time(), h.loadavg()

    work = a.work or (Path("/dev/shm/lopi-bench-locks") if os.access("/dev/shm", os.W_OK) else BUILD / "work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # lopi's plan cache: the benchmark's own (filled by the warm-up round), so that another lopi
    # emptying ~/.cache/lopi meanwhile cannot turn a recorded run into a planning one
    cache_env = {"XDG_CACHE_HOME": str(work / "cache")}
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    pair_src = HERE / "pair.c"
    pair = h.build("pair", ["-O2", "-pthread", str(pair_src)], [pair_src])
    libc = program_libc(pair)
    bt_script, bt_note = (bt_script_for(libc, work) if libc else (BT_SCRIPT, "libc not found by ldd"))
    skip, said = preflight(lopi, a.lopi, pair, work, bt_script, cache_env)
    if bt_note:
        said[BPF] = "; ".join(x for x in (said.get(BPF), bt_note) if x)

    workloads = [micro_workload(pair, pairs)]
    missing = {}
    sysbench, pigz = shutil.which("sysbench"), shutil.which("pigz")
    if sysbench:
        workloads += [sysbench_mutex(sysbench, mutex_locks), sysbench_threads(sysbench, events)]
    else:
        missing["sysbench mutex, sysbench threads"] = "sysbench not installed (Debian's `sysbench` package)"
    corpus_sha = ""
    if pigz:
        corpus = work / f"corpus-{mib}M.bin"
        t0 = time.time()
        corpus_sha = make_corpus(corpus, mib)
        log(f"corpus: {corpus} ({mib} MiB, sha256 {corpus_sha[:16]}) in {time.time() - t0:.1f} s")
        workloads.append(pigz_workload(pigz, corpus, work / "pigz-out.gz", mib))
    else:
        missing["pigz"] = "pigz not installed (Debian's `pigz` package)"

    all_res = {}
    for wl in workloads:
        log(f"=== {wl.title}")
        variants = make_variants(wl, lopi, work, skip, bt_script, cache_env)
        all_res[wl.key] = (wl, variants, run_workload(wl, variants, n))

    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        *((tool, h.tool_version(argv)) for tool, argv in (
            ("glibc", ["ldd", "--version"]), ("valgrind", ["valgrind", "--version"]),
            ("bpftrace", ["bpftrace", "--version"]), ("sysbench", ["sysbench", "--version"]),
            ("pigz", ["pigz", "--version"]))),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("Locks: lopi's lock probes next to drd and bpftrace", "bench/locks/run.sh", a.quick, machine)
    md += ["", "## Method", "",
           "- Every tool records every `pthread_mutex_lock`/`unlock` call of the program and its threads: "
           "`lopi run -q --probe locks` (probes spliced at the entry point into glibc's lock functions — mutexes, "
           "rwlocks, spinlocks, semaphores, condition variables, barriers, thread calls — and the `futex` calls "
           "inside them; acquisitions, contention, wait, blocked and hold time per lock and call site; data to "
           "`$LOPI_OUTPUT`, a fresh file per run, read with `lopi report DATA --locks --format json`, then deleted; "
           "plan cache in the scratch directory, filled by the warm-up round); "
           "`valgrind --tool=drd --exclusive-threshold=10` (a data-race detector that follows every lock and "
           "memory access: the heavyweight anchor); `bpftrace -q` with [mutex.bt](../locks/mutex.bt) (uprobes "
           "on glibc's `pthread_mutex_lock` entry and return and `pthread_mutex_unlock` entry, filtered on the "
           "command's pid: acquisitions, wait and hold time per lock address in BPF maps).",
           f"- Variants of a workload interleaved round-robin after one unrecorded warm-up round, n={n}; "
           "median [min–max] of the recorded runs; x plain = median / plain median. A variant that cannot run "
           "here is shown as skipped, with the reason.",
           "- pair: [pair.c](../locks/pair.c) built `gcc -O2 -pthread`, N lock+unlock pairs on one mutex in one "
           "thread (never contended), timed in-process with `clock_gettime(CLOCK_MONOTONIC)` around the loop "
           "only; ns per pair = loop time / N; ns added = variant's median − plain's. drd and bpftrace make "
           "fewer pairs (N in the table) so that each run stays around a second. The tools' count of the pair's "
           "lock must be N.",
           "- sysbench: Debian's `sysbench`, 2 threads; metric = sysbench's `total time` (the workers' run, "
           "without start-up: lopi's set-up and data writing are in the process wall time column); output "
           "check = `total number of events`. `mutex`: every event (one per thread) takes --mutex-locks "
           "random ones of 64 mutexes, after a 100-iteration busy loop each; `threads`: every event makes 100 "
           "lock / sched_yield / unlock rounds on one of 4 mutexes. ns added per acquisition = (median − plain "
           "median) / the acquisitions the tool counted: wall time, with 2 threads acquiring at once.",
           "- pigz: Debian's `pigz -p 2 -c CORPUS > OUT` (2 compression threads handing blocks over with mutexes "
           "and condition variables); CORPUS = deterministic lines of words from a fixed random vocabulary with "
           "every eighth MiB random bytes, generated in the scratch directory (tmpfs when /dev/shm is writable)"
           + (f", sha256 {corpus_sha[:16]}" if corpus_sha else "")
           + "; metric = the whole process's wall time (tool start-up and exit included); output check = the "
             "sha256 of OUT (bpftrace's two trailing newlines on its standard output left out). No ns per "
             "acquisition: pigz takes a few thousand locks, and its wall time includes the tools' start-up. "
             "drd runs once, after the interleaved rounds: valgrind runs pigz ~30x slower.",
           ""]
    added: dict = {}
    for key, (wl, variants, res) in all_res.items():
        md += [f"## {wl.title}", ""]
        if key == "pair":
            table, added = micro_table(wl, variants, res, pairs, said)
            md += table + [""]
            if LOPI in added:
                lo = added[LOPI]
                md.append(f"- lopi adds {lo:.1f} ns per uncontended lock/unlock pair: target ≤ {TARGET_NS} ns "
                          f"{'met' if lo <= TARGET_NS else 'NOT met'}.")
                for cfg in (DRD, BPF):
                    if cfg in added and lo > 0:
                        md.append(f"- {cfg} adds {added[cfg]:,.0f} ns per pair, {added[cfg] / lo:,.0f}x lopi's.")
        else:
            md += run_table(wl, variants, res, said) + [""]
        md += lock_notes(wl, variants, res) + [""]
    for what, why in missing.items():
        md += [f"## {what}", "", f"Not run: {why}.", ""]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    raw = a.out.with_suffix(".runs.json")
    meta = {"n": n, "pairs": pairs, "mutex_locks": mutex_locks, "events": events, "pigz_mib": mib,
            "corpus_sha256": corpus_sha, "work": str(work), "skipped": skip, "missing": missing,
            "machine": machine, "ns_added_per_pair": added,
            "argv": {k: {v.name: v.argv for v in vs} for k, (_, vs, _) in all_res.items()}}
    h.dump_raw(raw, meta, {k: r for k, (_, _, r) in all_res.items()})
    print(text)
    shown = a.out.relative_to(REPO) if a.out.is_relative_to(REPO) else a.out
    log(f"wrote {shown} and {raw.name}")
    shutil.rmtree(work, ignore_errors=True)  # tmpfs: memory
    return 0


if __name__ == "__main__":
    sys.exit(main())
