"""The logs of bench/tree: what `strace -f -o FILE` and `lopi run --probe syscall --log FILE` wrote
(lines, calls left out), and a syscall-heavy workload beside the make build: one process making
getppid + write(/dev/null) calls in a loop, timed by its own clock, uninstrumented, under
`strace -f -o FILE`, `lopi run --probe syscall` and `lopi run --probe syscall --log FILE`."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness as h  # noqa: E402
import tree_counts  # noqa: E402

DROPPED_RX = re.compile(r"lopi: (\d+) system calls are not in ")
# strace -f writes a call that another process's line interrupts in two halves; the second is
# `PID <... NAME resumed>...`. `+++ exited` and `--- SIGCHLD` lines are events, not calls.
RESUMED_RX = re.compile(r"^\d+\s+<\.\.\. ")
EVENT_RX = re.compile(r"^\d+\s+(\+\+\+|---) ")


def log_facts(log: Path, stderr: str) -> dict:
    """Lines of a log in strace's format, the calls begun in it (lines less resumed halves and
    events), and the calls lopi said are not in it."""
    lines = resumed = events = 0
    with open(log, errors="replace") as f:
        for line in f:
            lines += 1
            resumed += bool(RESUMED_RX.match(line))
            events += bool(EVENT_RX.match(line))
    m = DROPPED_RX.search(stderr)
    return {"log_lines": lines, "log_calls": lines - resumed - events, "log_dropped": int(m.group(1)) if m else 0}


def log_cell(runs: list[h.RunResult]) -> str:
    """The log column: median lines (range when runs differ), calls begun when not one a line,
    calls not in the log."""
    ok = [r.extra for r in runs if r.ok and r.round >= 0 and "log_lines" in r.extra]
    if not ok:
        return "-"

    def med(key: str) -> str:
        vals = [e[key] for e in ok]
        text = f"{int(statistics.median(vals)):,}"
        return text + (f" (varies {min(vals):,}–{max(vals):,})" if min(vals) != max(vals) else "")

    text = f"{med('log_lines')} lines"
    if any(e["log_calls"] != e["log_lines"] for e in ok):
        text += f", {med('log_calls')} calls begun (the rest: `<... resumed>` halves, `+++`/`---` events)"
    dropped = [e["log_dropped"] for e in ok]
    empty = sum(e["log_lines"] == 0 for e in ok)
    return (text + (f"; {max(dropped):,} calls not in it (lopi's stderr, worst run)" if max(dropped) else "")
            + (f"; EMPTY in {empty} of {len(ok)} runs" if empty else ""))


def log_summary(res: dict, strace_log: str, lopi_log: str) -> str:
    """One line of "Results in short" on the two logs of the make build."""
    def med(cfg: str, key: str) -> int:
        vals = [r.extra[key] for r in res.get(cfg, []) if r.ok and r.round >= 0 and key in r.extra]
        return int(statistics.median(vals)) if vals else 0

    if not med(strace_log, "log_lines") or not med(lopi_log, "log_lines"):
        return ""
    dropped = max((r.extra.get("log_dropped", 0) for r in res[lopi_log] if r.ok), default=0)
    return (f"- The two logs of one build (medians): strace -f -o FILE wrote {med(strace_log, 'log_lines'):,} lines "
            f"({med(strace_log, 'log_calls'):,} calls begun, the rest `<... resumed>` halves and exit/signal lines); "
            f"lopi --log wrote {med(lopi_log, 'log_lines'):,} lines, one per call, for the {med(lopi_log, 'calls'):,} "
            f"calls it counted ({med(lopi_log, 'startup'):,} of them made before the probes went in, "
            "`report --processes`' start-up calls, logged through ptrace), "
            + (f"and said {dropped:,} calls are not in it (a thread's log was full)." if dropped
               else "and reported no calls left out (no thread's log filled)."))


# ---------------------------------------------------------------- the syscall-heavy workload

LOOP_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0) { perror("/dev/null"); return 2; }
    static const char buf[8] = "lopi-b\n";
    long bad = 0, parents = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);  /* the vDSO: not a system call */
    for (long i = 0; i < n; i++) {
        parents += getppid() > 0;
        bad += write(fd, buf, sizeof buf) != sizeof buf;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("loop_ns %lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    printf("calls %ld, parents seen %ld, short writes %ld\n", 2 * n, parents, bad);
    return bad != 0;
}
"""

# "baseline": the name summary_entry compares against
L_BASE, L_STRACE, L_STRACE_PIN, L_LOPI, L_LOPI_LOG = ("baseline", "loop-strace-f-log", "loop-strace-f-log-one-cpu",
                                                      "loop-lopi-syscall", "loop-lopi-syscall-log")
LOOP_CONFIGS = (L_BASE, L_STRACE, L_STRACE_PIN, L_LOPI, L_LOPI_LOG)
LOOP_LABEL = {L_BASE: "getppid + write loop (uninstrumented)", L_STRACE: "strace -f -o FILE",
              L_STRACE_PIN: "taskset -c 0 strace -f -o FILE", L_LOPI: "lopi run --probe syscall",
              L_LOPI_LOG: "lopi run --probe syscall --log FILE"}
LOOP_TOOL = {L_BASE: "uninstrumented", L_STRACE: "strace -f -o FILE", L_STRACE_PIN: "strace -f -o FILE on one CPU",
             L_LOPI: "lopi syscall", L_LOPI_LOG: "lopi syscall --log FILE"}
CALLS_RX = re.compile(r"^calls (\d+), .*$", re.M)


def build_loop(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "loop.c").write_text(LOOP_C)
    subprocess.run(["gcc", "-O2", "-o", "loop", "loop.c"], cwd=d, check=True)
    return d / "loop"


def loop_variants(lopi: Path, prog: Path, calls: int, events: int, work: Path, cache: Path,
                  skip: dict) -> list[h.Variant]:
    """The loop under each tool; LOPI_TRACE_EVENTS=EVENTS for --log (a thread's log holds about a
    tenth as many calls as it has slots)."""
    run = [str(prog), str(calls // 2)]
    vs = []
    for cfg in LOOP_CONFIGS:
        data, log = work / f"{cfg}.data", work / f"{cfg}.log"
        # strace stops the program at each call and waits for it: on a VM whose other CPU is idle,
        # each of those wake-ups crosses CPUs and can cost tens of µs; on one CPU they do not.
        argv = {L_BASE: run, L_STRACE: ["strace", "-f", "-o", str(log), *run],
                L_STRACE_PIN: ["taskset", "-c", "0", "strace", "-f", "-o", str(log), *run],
                L_LOPI: [str(lopi), "run", "-q", "--probe", "syscall", "--", *run],
                L_LOPI_LOG: [str(lopi), "run", "-q", "--probe", "syscall", "--log", str(log), "--", *run]}[cfg]

        def before(idx: int, data=data, log=log) -> dict:
            data.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
            return {"LOPI_OUTPUT": str(data), "XDG_CACHE_HOME": str(cache)}

        def after(idx: int, stdout: str, stderr: str, env: dict, data=data, log=log, cfg=cfg) -> dict:
            m = CALLS_RX.search(stdout)
            extra = {"calls": int(m.group(1)) if m else 0}  # the loop's: the ns/call denominator
            if cfg in (L_LOPI, L_LOPI_LOG):
                extra["counted"] = sum(int(s["calls"]) for s in
                                       tree_counts.lopi_json(lopi, data, "--syscalls")["syscalls"])
            if cfg in (L_STRACE, L_STRACE_PIN, L_LOPI_LOG):
                extra.update(log_facts(log, stderr))
            data.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
            return extra

        vs.append(h.Variant(cfg, argv, h.regex_seconds(r"^loop_ns (\d+)$", 1e-9),
                            env={"LOPI_TRACE_EVENTS": str(events)} if cfg == L_LOPI_LOG else {},
                            before=before, after=after, timeout_s=600,
                            check=lambda out: (CALLS_RX.search(out) or [None])[0], skip_reason=skip.get(cfg, "")))
    return vs


def loop_table(variants: list[h.Variant], res: dict, calls: int, events: int) -> tuple[list[str], dict]:
    """The loop's table and {config: (x uninstr., ns added per call)}."""
    base = h.stats(res[L_BASE])
    rows, figures = [], {}
    for v in variants:
        runs = res[v.name]
        st = h.stats(runs)
        notes = [n for n in [v.skip_reason, h.failure_note(runs), *h.after_errors(runs)] if n]
        if not st or not base:
            rows.append([LOOP_LABEL[v.name], "-", "-", "-", "-", "-", "-", "-", "; ".join(notes)])
            continue
        if v.name != L_BASE and h.output_mismatch(v.check, res[L_BASE], runs):
            notes.append("PROGRAM'S OUTPUT DIFFERS")
        if v.name == L_LOPI_LOG:
            notes.append(f"LOPI_TRACE_EVENTS={events} (the default 1M slots hold about 100,000 calls)")
        if v.name != L_BASE and st.lo <= base.hi:
            notes.append("within the baseline's run-to-run spread")
        notes.append(f"n={st.n}")
        ns = (st.median - base.median) / calls * 1e9
        wall_ns = (st.wall_median - base.wall_median) / calls * 1e9
        if v.name != L_BASE:
            figures[v.name] = (st.median / base.median, ns)
        counted = [r.extra["counted"] for r in runs if r.ok and r.round >= 0 and "counted" in r.extra]
        is_base = v.name == L_BASE
        rows.append([LOOP_LABEL[v.name], h.fmt_range(st), "x1.00" if is_base else f"x{st.median / base.median:.2f}",
                     "-" if is_base else h.fmt_ns(ns), h.fmt_time(st.wall_median), "-" if is_base else h.fmt_ns(wall_ns),
                     f"{int(statistics.median(counted)):,}" if counted else "-", log_cell(runs), "; ".join(notes)])
    header = ["configuration", "loop time median [min–max]", "x uninstr. (medians)", "ns added per call (loop)",
              "whole run, median", "ns added per call (whole run)", "system calls counted by lopi", "log file",
              "notes"]
    return [h.markdown_table(header, rows)], figures
