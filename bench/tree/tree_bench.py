#!/usr/bin/env python3
"""Following a process tree: what `lopi run` costs when it follows every fork and exec of a
`make -j2` build, next to strace -f, and whether its system-call counts for a whole tree equal
`strace -f -c`'s, name by name.

1. Cost: `make -j2` of a generated C project (FILES modules; `make clean` before every run, outside
   the timing), wall time of the whole build, with, interleaved round-robin after one unrecorded
   warm-up round: make alone; strace -f -o /dev/null; strace -f -o FILE; strace -f -c; lopi run
   --probe syscall (following); the same with --log FILE; lopi run --no-follow --probe syscall
   (make's own process only); lopi run --probe entry (every function of every program executed).
   The program built must print the same; the two logs' lines are counted. lopi's plan cache is a
   private directory emptied first: the warm-up round fills it.
2. Syscall-heavy: one process making getppid + write calls, timed by its own clock, under strace
   -f -o FILE and lopi run --probe syscall with and without --log (tree_calls.py).
3. Counts: ten commands that spawn and exec (tree_counts.py), lopi's counts against strace's.

Writes bench/results/tree.md, tree.runs.json, tree.summary.json. Run through run.sh; --help lists
the knobs.
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
import tree_calls  # noqa: E402
import tree_commands as tc  # noqa: E402
import tree_counts  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "tree"

BASE, STRACE, STRACE_LOG, STRACE_C, LOPI, LOPI_LOG, NOFOLLOW, ENTRY = (
    "baseline", "strace-f", "strace-f-log", "strace-f-c", "lopi-syscall", "lopi-syscall-log", "lopi-syscall-no-follow",
    "lopi-entry")
CONFIGS = (BASE, STRACE, STRACE_LOG, STRACE_C, LOPI, LOPI_LOG, NOFOLLOW, ENTRY)
LABEL = {BASE: "make -j2 (uninstrumented)", STRACE: "strace -f -o /dev/null", STRACE_LOG: "strace -f -o FILE",
         STRACE_C: "strace -f -c", LOPI: "lopi run --probe syscall", LOPI_LOG: "lopi run --probe syscall --log FILE",
         NOFOLLOW: "lopi run --no-follow --probe syscall", ENTRY: "lopi run --probe entry"}
TOOL = {BASE: "uninstrumented", STRACE: "strace -f", STRACE_LOG: "strace -f -o FILE", STRACE_C: "strace -f -c",
        LOPI: "lopi syscall, following", LOPI_LOG: "lopi syscall --log FILE, following",
        NOFOLLOW: "lopi syscall, --no-follow", ENTRY: "lopi entry count, following"}
WHAT = {STRACE: "", STRACE_LOG: "", STRACE_C: "system calls", LOPI: "system calls", LOPI_LOG: "system calls",
        NOFOLLOW: "system calls (make's own)", ENTRY: "function entries"}


def lopi_report(lopi: Path, data: Path, *args: str) -> dict:
    return tree_counts.lopi_json(lopi, data, *args)


def make_variants(lopi: Path, project: Path, work: Path, cache: Path, skip: dict) -> list[h.Variant]:
    make = tc.make_argv(project)
    vs = []
    for cfg in CONFIGS:
        data, log = work / f"{cfg}.data", work / f"{cfg}.log"
        argv = {BASE: make, STRACE: ["strace", "-f", "-o", "/dev/null", *make],
                STRACE_LOG: ["strace", "-f", "-o", str(log), *make],
                STRACE_C: ["strace", "-f", "-c", "-o", str(data), *make],
                LOPI: [str(lopi), "run", "-q", "--probe", "syscall", "--", *make],
                LOPI_LOG: [str(lopi), "run", "-q", "--probe", "syscall", "--log", str(log), "--", *make],
                NOFOLLOW: [str(lopi), "run", "-q", "--no-follow", "--probe", "syscall", "--", *make],
                ENTRY: [str(lopi), "run", "-q", "--probe", "entry", "--", *make]}[cfg]

        def before(idx: int, data=data, log=log) -> dict:
            data.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
            tc.make_clean(project)
            return {"LOPI_OUTPUT": str(data), "XDG_CACHE_HOME": str(cache)}

        def after(idx: int, stdout: str, stderr: str, env: dict, data=data, log=log, cfg=cfg) -> dict:
            extra = {"output": tc.project_output(project)}
            if cfg == STRACE_C:
                extra["calls"] = sum(tree_counts.strace_table(data.read_text()).values())
            elif cfg in (LOPI, LOPI_LOG, NOFOLLOW):
                extra["calls"] = sum(int(s["calls"]) for s in lopi_report(lopi, data, "--syscalls")["syscalls"])
            elif cfg == ENTRY:
                extra["calls"] = sum(int(f.get("calls", 0)) for f in lopi_report(lopi, data)["functions"])
            if cfg in (LOPI, LOPI_LOG, ENTRY):  # --no-follow records no process tree
                procs = lopi_report(lopi, data, "--processes")["processes"]
                extra["processes"] = len(procs)
                # counted through ptrace before the probes went live: not in the log
                extra["startup"] = sum(int(p.get("startup_calls", 0)) for p in procs)
            if cfg in (STRACE_LOG, LOPI_LOG):
                extra.update(tree_calls.log_facts(log, stderr))
            data.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
            return extra

        vs.append(h.Variant(cfg, argv, h.WALL, before=before, after=after, timeout_s=900,
                            check=None, skip_reason=skip.get(cfg, "")))
    return vs


def cost_table(variants: list[h.Variant], res: dict) -> tuple[list[str], dict]:
    """The table and {config: (median ratio, fastest ratio)}."""
    base = h.stats(res[BASE])
    base_out = {r.extra.get("output") for r in res[BASE] if r.ok and r.round >= 0}
    tree = next((r.extra["processes"] for r in res.get(LOPI, []) if "processes" in r.extra), None)
    rows, ratios = [], {}
    for v in variants:
        runs = res[v.name]
        st = h.stats(runs)
        notes = [n for n in [v.skip_reason, h.failure_note(runs), *h.after_errors(runs)] if n]
        if not st or not base:
            rows.append([LABEL[v.name], "-", "-", "-", "-", "-", "-", "-", "; ".join(notes)])
            continue
        ok = [r for r in runs if r.ok and r.round >= 0]
        outs = {r.extra.get("output") for r in ok}
        if v.name != BASE and outs != base_out:
            notes.append(f"BUILT PROGRAM DIFFERS: {sorted(map(str, outs))} vs {sorted(map(str, base_out))}")
        warm = [r for r in runs if r.round < 0 and r.ok]
        if warm and v.name in (LOPI, LOPI_LOG, NOFOLLOW, ENTRY):
            notes.append(f"warm-up (plan cache cold) {h.fmt_time(warm[0].wall_s)}")
        if v.name != BASE and st.lo <= base.hi:
            notes.append("within the baseline's run-to-run spread")
        notes.append(f"n={st.n}")
        ratio, fastest = st.median / base.median, st.lo / base.lo
        ratios[v.name] = (ratio, fastest)
        procs = sorted({r.extra["processes"] for r in ok if "processes" in r.extra})
        per_proc = "-"
        if v.name != BASE and v.name != NOFOLLOW and tree:
            per_proc = f"{(st.median - base.median) / tree * 1e3:.1f}"
        _, calls = h.median_calls(runs)
        counted = f"{calls} {WHAT[v.name]}" if calls != "-" else "-"
        rows.append([LABEL[v.name], h.fmt_range(st), "x1.00" if v.name == BASE else f"x{ratio:.2f}",
                     "x1.00" if v.name == BASE else f"x{fastest:.2f}",
                     "/".join(map(str, procs)) or "-", per_proc, counted, tree_calls.log_cell(runs),
                     "; ".join(notes)])
    header = ["configuration", "wall time median [min–max]", "x uninstr. (medians)", "x uninstr. (fastest runs)",
              "processes recorded", "ms added per process (median)", "counted by the tool", "log file", "notes"]
    return [h.markdown_table(header, rows)], ratios


def results_summary(ratios: dict, counts: list[dict], tree: int, base_s: float, machine_load: str,
                    logs: str, loop: list[str]) -> list[str]:
    """Short notes on what the run found, for the table's reader."""
    out = [f"- Host: {h.cpu_model()} ({os.cpu_count()} CPUs); load average {machine_load}."]
    if ratios:
        parts = [f"{TOOL[c]} x{ratios[c][0]:.2f} (fastest x{ratios[c][1]:.2f})" for c in
                 CONFIGS[1:] if c in ratios]
        out.append(f"- make -j2 ({tree or '?'} processes, {base_s:.2f} s uninstrumented): " + ", ".join(parts) + ".")
    out += [line for line in (logs, *loop) if line]
    done = [r for r in counts if "skipped" not in r]
    if done:
        clean = [r["key"] for r in done if not tree_counts.unexplained(r) and not r["problems"]]
        timing = [f"{r['key']}: {tree_counts.fmt_differ(r, True)}" for r in done if tree_counts.fmt_differ(r, True)]
        bad = [f"{r['key']}: {'; '.join([tree_counts.fmt_differ(r, False), *r['problems']]).strip('; ')}"
               for r in done if tree_counts.unexplained(r) or r["problems"]]
        out.append(f"- Counts: for {len(clean)} of {len(done)} commands lopi's count equals strace -f -c's for every "
                   "system call but those whose count depends on the timing"
                   + (f" (strace's runs disagree, or one more run shows why: {'; '.join(timing)})" if timing else "")
                   + (f"; UNEXPLAINED: {'; '.join(bad)}" if bad else "") + ".")
        views = [f"{r['key']}: {len(r['view_failures'])} of {r['processes']}" for r in done if r["view_failures"]]
        sums = [r["key"] for r in done if r["view_sums"]]
        elsewhere = [f"{r['key']}: {len(r['execve_elsewhere'])} of {r['processes']}" for r in done if r["execve_elsewhere"]]
        if views:
            out.append(f"- `lopi report --syscalls --pid P` fails for some processes: {', '.join(views)} (which ones: "
                       "below).")
        if sums:
            out.append(f"- Per-process views do not add up to the whole tree: {', '.join(sums)}.")
        if elsewhere:
            out.append("- Processes that executed a program but whose `--pid` view has no execve (it is in another "
                       f"process's view): {', '.join(elsewhere)} (which ones: below).")
    skipped = [f"{r['key']} ({r['skipped']})" for r in counts if "skipped" in r]
    if skipped:
        out.append(f"- Skipped: {', '.join(skipped)}.")
    out.append("- exit and exit_group are left out of every comparison: they never return, and strace -c counts a "
               "call when it returns (lopi when it is made).")
    return out


def preflight(lopi, lopi_path: Path) -> dict[str, str]:
    skip = {}
    if lopi is None:
        for c in (LOPI, LOPI_LOG, NOFOLLOW, ENTRY, tree_calls.L_LOPI, tree_calls.L_LOPI_LOG):
            skip[c] = f"lopi not found ({lopi_path})"
    if not shutil.which("strace"):
        skip[STRACE] = skip[STRACE_LOG] = skip[STRACE_C] = skip[tree_calls.L_STRACE] = "strace not installed"
        skip[tree_calls.L_STRACE_PIN] = "strace not installed"
    elif not shutil.which("taskset"):
        skip[tree_calls.L_STRACE_PIN] = "taskset not installed"
    return skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3 (default 5)")
    ap.add_argument("-n", type=int, help="recorded runs per configuration")
    ap.add_argument("--files", type=int, default=10, help="modules of the C project (default 10)")
    ap.add_argument("--funcs", type=int, default=12, help="functions per module (default 12)")
    ap.add_argument("--runs", type=int, default=3, help="runs under strace and under lopi per command in the count "
                    "comparison (default 3)")
    ap.add_argument("--rechecks", type=int, default=4, help="more strace -f -c runs for a difference left "
                    "unexplained (default 4): a count that moves varies between runs")
    ap.add_argument("--no-entry", action="store_true", help="leave out lopi run --probe entry")
    ap.add_argument("--loop-calls", type=int, default=200_000, help="system calls of the syscall-heavy workload, "
                    "getppid and write in turn (default 200000; 0 leaves it out)")
    ap.add_argument("--loop-events", type=int, default=8_000_000, help="LOPI_TRACE_EVENTS of its --log run "
                    "(default 8000000: a thread's log holds about a tenth as many calls)")
    ap.add_argument("--commands", help="only these commands in the count comparison (keys, comma-separated: make, git, "
                    "tar, sh-pipes, python, dlopen, node, find-xargs, bash-subshells, perl)")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first (default /dev/shm/lopi-bench-tree, "
                    "a tmpfs, else work-real/bench-build/tree/work)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tree.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    t_start, load_start = time.time(), h.loadavg()

    work = a.work or (Path("/dev/shm/lopi-bench-tree") if os.access("/dev/shm", os.W_OK) else BUILD / "work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cache = work / "cache"  # lopi's plan cache: emptied with WORK, filled by the warm-up round
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    skip = preflight(lopi, a.lopi)
    if a.no_entry:
        skip[ENTRY] = "left out (--no-entry)"
    project = work / "project"
    tc.c_project(project, a.files, a.funcs)

    h.log(f"=== make -j2 of {a.files} modules, n={n}")
    variants = make_variants(lopi or Path("lopi"), project, work, cache, skip)
    res = h.run_interleaved(variants, n, log=h.log)

    loop_vs, loop_res = [], {}
    if a.loop_calls:
        h.log(f"=== one process, {a.loop_calls} getppid + write calls, n={n}")
        prog = tree_calls.build_loop(work / "loop")
        loop_vs = tree_calls.loop_variants(lopi or Path("lopi"), prog, a.loop_calls, a.loop_events, work, cache, skip)
        loop_res = h.run_interleaved(loop_vs, n, log=h.log)

    counts_skip = "lopi not found" if lopi is None else ("strace not installed" if STRACE in skip else "")
    cmds = [c for c in tc.commands(work / "commands", project) if not a.commands or c.key in a.commands.split(",")]
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    counts = tree_counts.compare_all(cmds, lopi, work, env, a.runs, a.rechecks, counts_skip)

    load_end = h.loadavg()
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        *((tool, h.tool_version(argv)) for tool, argv in (
            ("strace", ["strace", "-V"]), ("make", ["make", "--version"]), ("git", ["git", "--version"]),
            ("python3", ["python3", "--version"]), ("node", ["node", "--version"]), ("perl", ["perl", "-e",
                                                                                             "print \"perl $^V\""]))),
        ("python3 on PATH", shutil.which("python3") or "-"),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("Following a process tree: lopi run next to strace -f", "bench/tree/run.sh", a.quick, machine)
    table, ratios = cost_table(variants, res)
    loop_table, loop_figures = tree_calls.loop_table(loop_vs, loop_res, a.loop_calls, a.loop_events) if loop_vs \
        else ([], {})
    loop_short = [f"- One process, {a.loop_calls:,} getppid + write(/dev/null) calls (its own clock around the loop): "
                  + ", ".join(f"{tree_calls.LOOP_TOOL[c]} x{x:.2f}, {h.fmt_ns(ns)} ns added per call"
                              for c, (x, ns) in loop_figures.items()) + "."] if loop_figures else []
    base = h.stats(res[BASE])
    tree = next((r.extra["processes"] for r in res.get(LOPI, []) if "processes" in r.extra), 0)
    md += ["", "## Results in short", "",
           *results_summary(ratios, counts, tree, base.median if base else 0.0, f"{load_start} at start, {load_end} at end",
                            tree_calls.log_summary(res, STRACE_LOG, LOPI_LOG), loop_short),
           "", "## Method", "",
           f"- Cost: `make -j2` of a generated C project ({a.files} modules of {a.funcs} functions and main.c, "
           "`gcc -O2`; [tree_commands.py](../tree/tree_commands.py)), `make clean` before every run (not timed); "
           "wall time of the whole command, the tool's start-up and its writing of data at exit included. "
           f"Configurations interleaved round-robin, the order rotated each round, after one unrecorded warm-up "
           f"round; n={n}; x uninstr. = median / uninstrumented median, and fastest run / uninstrumented fastest "
           "run. ms added per process = (median − uninstrumented median) / the processes of the tree (lopi's "
           "`report --processes` of its following run). The program built must print the same as the "
           "uninstrumented build's. lopi's plan cache (`XDG_CACHE_HOME`) is a private directory, emptied "
           "first: the warm-up round plans make, gcc, cc1, as, collect2 and ld, the recorded rounds load the "
           "plans.",
           "- `--no-follow` probes make's own process only: its children run without probes and without ptrace.",
           "- The logs: `strace -f -o FILE` and `lopi run -q --probe syscall --log FILE` write every system call of "
           "the tree to FILE (in the scratch directory), one line each in strace's format; log file = its lines "
           "(median of the recorded runs), for strace also the calls begun (lines less the `<... resumed>` halves "
           "of calls another process's line interrupted, and `+++ exited`/`--- SIGNAL` lines), and the calls "
           "lopi said are not in it (`N system calls are not in FILE` on its stderr: a thread's log was full). "
           "lopi writes its log from the record after the program ends: inside the wall time. `strace -f -o "
           "/dev/null` formats every line too, but writes it nowhere.",
           *([f"- Syscall-heavy: one process ([tree_calls.py](../tree/tree_calls.py), `gcc -O2`, built at bench "
              f"time) makes {a.loop_calls // 2:,} getppid and {a.loop_calls // 2:,} write(/dev/null, 8 bytes) calls "
              "in turn (strace also with `taskset -c 0`, strace and the program on one CPU: strace stops the "
              "program at each call and waits for it, and on a VM whose other CPU is idle each wake-up that "
              "crosses CPUs can cost tens of µs), timed by its own CLOCK_MONOTONIC around the loop (so without the tools' start-up and "
              "lopi's writing of the log at exit: those are in the whole run's wall time, beside), after the "
              f"make runs, interleaved the same way, n={n}; ns added per call = (median − uninstrumented median) / "
              f"{a.loop_calls:,}. lopi's --log run has `LOPI_TRACE_EVENTS={a.loop_events}`: the default 1M "
              "slots of a thread's log hold about 100,000 calls. The program must print the same calls and no "
              "short write."] if loop_vs else []),
           "- Counts: each command runs once unrecorded (caches: Python's, node's), then alternately under "
           f"`strace -f -c -o FILE` and under `lopi run -q --probe syscall` ({a.runs} runs each; lopi's counts from "
           "`lopi report --syscalls --format json`: the whole tree, the calls each program made before its probes "
           "went live included), with the same environment for every run and what must be reset reset before each "
           "(make clean, the next change staged for git, tar's archive removed). A name whose strace runs "
           "disagree depends on the timing in any run (futex waits, node's threads, malloc's heap in cc1, make's "
           "jobserver) and is shown as *varies between strace's runs*, with lopi's counts beside. Any other name "
           "whose lopi count differs from strace's in any lopi run is a difference, looked at in one more run "
           "under `strace -f -y` ([tree_explain.py](../tree/tree_explain.py)): when that run's count differs from "
           "the strace -c runs' too, the name varies after all; else the calls are summed per program in that run "
           "and in lopi's last record, and each program whose counts differ is put down to *pipes* (it made "
           "that call on pipes: a read returns what the writer has written so far, and strace, which stops both "
           "ends at every call, changes how a transfer is split), *signals* (the program ran a different "
           "number of signal handlers, rt_sigreturn: a standard signal arriving while the same one is pending "
           "merges with it, so how many SIGCHLD handlers run depends on how close together children end; each "
           "handler run adds its rt_sigreturn and repeats the wait it interrupted, make's pselect6 and wait4), "
           "*threads* (the process ran "
           "several threads: which of them does a piece of work depends on the timing) or *maps* (it read "
           "/proc/PID/maps, as glibc's pthread_getattr_np does: lopi's own mappings make the file longer, so "
           "it takes more reads), every reason that fits; anything else is "
           f"UNEXPLAINED, unless one of up to {a.rechecks} more strace -f -c runs moves the count (it varies "
           "after all). lopi's exit status and stdout must equal strace's. exit and exit_group are not "
           "compared: they never return, and strace -c counts a call when it returns.",
           "- Per-process views: `lopi report --syscalls --pid P` of every process of lopi's last record must "
           "work, the views must add up to the whole tree's counts, and a process that executed a program (its "
           "dynamic loader made start-up calls) must have its execve in its own view.",
           "", f"## Cost of following: make -j2 of {a.files} modules", "", *table, "",
           *([f"## Cost of logging every call: one process, {a.loop_calls:,} getppid + write calls", "",
              *loop_table, ""] if loop_vs else []),
           "## System-call counts of whole trees: lopi vs strace -f -c", "",
           *tree_counts.count_section(counts, a.runs)]
    entries = h.summary_entries("tree", "make-j2", f"make -j2 ({a.files} modules)", variants, res, LABEL, TOOL)
    if loop_vs:
        entries += h.summary_entries("tree", "getppid-write", f"{a.loop_calls:,} getppid + write calls", loop_vs,
                                     loop_res, tree_calls.LOOP_LABEL, tree_calls.LOOP_TOOL)
    raw_meta = {"n": n, "files": a.files, "funcs": a.funcs, "count_runs": a.runs, "work": str(work),
                "loop_calls": a.loop_calls, "loop_events": a.loop_events, "skipped": skip, "ratios": ratios,
                "loop": loop_figures, "counts": counts}
    h.write_results(a.out, md, "tree", raw_meta, {"make-j2": res, "getppid-write": loop_res}, machine, entries,
                    a.quick,
                    counts=[{k: v for k, v in r.items() if k not in ("strace", "lopi", "processes_text")} for r in counts])
    shutil.rmtree(work, ignore_errors=True)  # tmpfs: memory
    return 0


if __name__ == "__main__":
    sys.exit(main())
