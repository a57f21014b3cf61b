#!/usr/bin/env python3
"""What lopi's system-call probes cost: `lopi run --probe syscall` next to strace -c, perf trace -s
and bpftrace on the raw_syscalls tracepoints, all counting and timing every system call.

Workloads:
  getppid  `getppid N` (getppid.c, built here): N getppid() calls through glibc, timed in-process
           around the loop; ns per call, and ns added per call against the uninstrumented run;
           under lopi with its catch of unprobed calls off (the default) and on, and alone with
           Syscall User Dispatch on (`getppid N sud`: the kernel's share of the catch's cost)
  getppid-jit  `getppid_jit N` (getppid_jit.c): the same loop, each getppid a `syscall` in
           machine code written at run time (no probe covers it: lopi catches it with SIGSYS),
           under lopi --catch-unprobed following the tree (its ptrace tracer) and with --no-follow
  zstd     Debian's /usr/bin/zstd compressing F generated files of 1-8 KiB
           (`zstd -q -f -r IN --output-dir-flat OUT`); the process's wall time
  sqlite   Debian's /usr/bin/sqlite3 running T INSERTs, each its own transaction, on a file
           database with `PRAGMA synchronous=FULL` (`sqlite3 -init SQL DB .quit`); wall time
Every configuration of a workload runs interleaved round-robin after a warm-up round.
The counts each tool reports are compared with strace's (lopi counts the calls made before its
probes go live through ptrace).

Run through run.sh; `syscall_bench.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "syscall"
BT_SCRIPT = HERE / "syscalls.bt"
UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
log = h.log

BASE, SUD, STRACE, PERF, BPF = "baseline", "baseline-sud", "strace", "perf-trace", "bpftrace"
LOPI, CATCH, NOFOLLOW = "lopi", "lopi-catch", "lopi-no-follow"
UNTRACED, LOPIS = (BASE, SUD), (LOPI, CATCH, NOFOLLOW)
CONFIGS = [BASE, LOPI, STRACE, PERF, BPF]  # zstd's and sqlite's
LABEL = {BASE: "uninstrumented", SUD: "uninstrumented, Syscall User Dispatch on (its selector: allow)",
         LOPI: "lopi run --probe syscall", CATCH: "lopi run --probe syscall --catch-unprobed",
         NOFOLLOW: "lopi run --no-follow --probe syscall --catch-unprobed", STRACE: "strace -f -qq -c",
         PERF: "perf trace -s", BPF: "bpftrace raw_syscalls enter/exit (syscalls.bt)"}
# getppid calls per configuration: the tracers cost 10-300x more per call than lopi, so they make
# fewer to keep each run within ~0.3-1 s; ns/call comes from the program's own timer either way.
MICRO_CALLS = {BASE: 3_000_000, SUD: 3_000_000, LOPI: 3_000_000, CATCH: 3_000_000, STRACE: 20_000,
               PERF: 20_000, BPF: 300_000}
# getppid_jit: a caught call is a SIGSYS, which also stops the program for lopi when lopi follows
# the tree (its ptrace tracer: ~50 us a call here, as strace's stops), ~1.3 us without (--no-follow)
JIT_CALLS = {BASE: 3_000_000, CATCH: 20_000, NOFOLLOW: 300_000, LOPI: 3_000_000, STRACE: 20_000}
# Reasons for the differences between lopi's counts and strace's that this machine shows.
NEVER_RETURNS = ("never returns: strace -c (like perf trace -s and bpftrace's sys_exit) counts a call when it "
                 "returns, lopi when it is made")
WHY = {"exit": NEVER_RETURNS, "exit_group": NEVER_RETURNS,
       "futex": "the program's calls depend on its threads' timing: pthread_join makes none when the thread "
                "has already exited, as it more often has when every call is not slowed down by ptrace"}


# ---------------------------------------------------------------- tools


def tool_argv(cfg: str, argv: list[str], data: Path, lopi: Path) -> list[str]:
    """ARGV run under configuration CFG, the tool's counts written to DATA."""
    return {
        BASE: argv,
        SUD: argv,  # the workload's argv asks for it
        LOPI: [str(lopi), "run", "--probe", "syscall", "--", *argv],  # data: $LOPI_OUTPUT
        CATCH: [str(lopi), "run", "--probe", "syscall", "--catch-unprobed", "--", *argv],
        NOFOLLOW: [str(lopi), "run", "--no-follow", "--probe", "syscall", "--catch-unprobed", "--", *argv],
        STRACE: ["strace", "-f", "-qq", "-c", "-o", str(data), *argv],
        PERF: ["perf", "trace", "-s", "-o", str(data), "--", *argv],
        # bpftrace splits -c at spaces, without quoting: the workloads' arguments have none
        BPF: ["bpftrace", "-o", str(data), str(BT_SCRIPT), "-c", " ".join(argv)],
    }[cfg]


# `100.00    3.137317          15    200000           getppid` (the errors column may be empty)
STRACE_ROW = re.compile(r"^\s*[0-9.]+\s+[0-9.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", re.M)
# `   getppid           100000      0  1224.017     0.010 ...`, one table per thread
PERF_ROW = re.compile(r"^\s+(\w+)\s+(\d+)\s+(\d+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+", re.M)
BPF_ROW = re.compile(r"^@c\[(\d+)\]: (\d+)$", re.M)


def syscall_names() -> dict[int, str]:
    """x86-64 system call numbers (bpftrace's keys) to names, from the kernel headers gcc uses."""
    return {int(m.group(2)): m.group(1)
            for m in re.finditer(r"^#define __NR_(\w+) (\d+)$", UNISTD.read_text(), re.M)}


def read_counts(cfg: str, data: Path, lopi: Path, names: dict[int, str]) -> dict[str, int]:
    """{syscall: calls} from a tool's output file."""
    if cfg in LOPIS:
        p = subprocess.run([str(lopi), "report", "--syscalls", str(data), "--format", "json"],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"lopi report exit {p.returncode}: {p.stderr.strip()[-300:]}")
        return {s["name"]: int(s["calls"]) for s in json.loads(p.stdout)["syscalls"]}
    text = data.read_text()
    out: dict[str, int] = {}
    if cfg == STRACE:
        for m in STRACE_ROW.finditer(text):
            if m.group(2) != "total":
                out[m.group(2)] = int(m.group(1))
    elif cfg == PERF:
        for m in PERF_ROW.finditer(text):
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    else:
        for m in BPF_ROW.finditer(text):
            name = names.get(int(m.group(1)), f"#{m.group(1)}")
            out[name] = int(m.group(2))
    if not out:
        raise RuntimeError(f"no counts in {data.name}")
    return out


def remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def preflight(lopi: Optional[Path], lopi_path: Path, micro: Path, work: Path, names: dict) -> dict[str, str]:
    """{configuration: why it cannot run here}, from counting `getppid 10` under each tool."""
    why = {}
    for cfg in (*LOPIS, STRACE, PERF, BPF):
        exe = lopi if cfg in LOPIS else {STRACE: "strace", PERF: "perf", BPF: "bpftrace"}[cfg]
        if exe is None or not shutil.which(str(exe)):
            why[cfg] = f"not installed ({lopi_path if cfg in LOPIS else exe} not found)"
            continue
        data = work / f"preflight.{cfg}"
        remove(data)
        argv = tool_argv(cfg, [str(micro), "10"], data, lopi)
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, LOPI_OUTPUT=str(data)))
            got = read_counts(cfg, data, lopi, names).get("getppid") if p.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, RuntimeError) as e:
            p, got = None, f"{type(e).__name__}: {e}"
        if p is not None and p.returncode == 0 and got != 10:
            why[cfg] = f"does not run here: it counted {got} of 10 getppid calls"
        elif p is None or p.returncode != 0:
            lines = (p.stderr + p.stdout).strip().splitlines() if p else []
            errs = [ln for ln in lines if "rror" in ln or "ermission" in ln] or lines or [str(got)]
            why[cfg] = f"does not run here (exit {p.returncode if p else '-'}): {errs[-1][:200]}"
        remove(data)
    for cfg in (*LOPIS, STRACE, PERF, BPF):
        log(f"{cfg}: {'ready' if cfg not in why else 'skipped: ' + why[cfg]}")
    return why


# ---------------------------------------------------------------- workloads


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    argv: Callable[[str], list[str]]  # the program's argv for a configuration
    metric: Optional[Callable]  # h.HOT_NS (in-program timer) or h.WALL
    # the count table's first rows, shown when equal too; empty: no count table
    key_syscalls: list[str] = dataclasses.field(default_factory=list)
    reset: Callable[[], None] = lambda: None  # before every run: the same starting state
    digest: Callable[[str], Optional[str]] = lambda stdout: None  # the run's output, to compare
    configs: list[str] = dataclasses.field(default_factory=lambda: list(CONFIGS))
    calls: dict[str, int] = dataclasses.field(default_factory=dict)  # loops: getppid calls per configuration
    # loops: {configuration: (its count of getppid, why)} where that is not the calls made
    expected: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)


def zstd_workload(work: Path, files: int) -> Workload:
    src, out = work / "zstd-in", work / "zstd-out"
    rng = random.Random(1)  # the same files every run
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    src.mkdir()
    for i in range(files):
        size = rng.randint(1024, 8192)
        (src / f"f{i:05d}.txt").write_text(" ".join(rng.choice(words) for _ in range(size // 4))[:size])

    def reset() -> None:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()  # zstd 1.5.4 crashes when --output-dir-flat's directory is missing

    def digest(stdout: str) -> str:
        hsh = hashlib.sha256()
        for f in sorted(out.iterdir()):
            hsh.update(f.name.encode() + b"\0" + f.read_bytes())
        return f"{len(list(out.iterdir()))} files, sha256 {hsh.hexdigest()[:16]}"

    return Workload("zstd", f"zstd -q -f -r of {files:,} files of 1-8 KiB", lambda cfg: [
        "/usr/bin/zstd", "-q", "-f", "-r", str(src), "--output-dir-flat", str(out)], h.WALL,
        ["openat", "read", "write", "close"], reset, digest)


def sqlite_workload(work: Path, inserts: int) -> Workload:
    sql, db = work / "inserts.sql", work / "sqlite.db"
    rows = [f"INSERT INTO t(v) VALUES('row {i:06d} {'x' * (i % 200)}');" for i in range(inserts)]
    sql.write_text("\n".join(["PRAGMA synchronous=FULL;", "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);", *rows,
                              "SELECT count(*), sum(length(v)) FROM t;", "PRAGMA integrity_check;", ""]))

    def reset() -> None:
        for f in (db, db.with_name(db.name + "-journal")):
            f.unlink(missing_ok=True)

    return Workload("sqlite", f"sqlite3: {inserts:,} INSERT transactions, synchronous=FULL",
                    lambda cfg: ["/usr/bin/sqlite3", "-init", str(sql), str(db), ".quit"], h.WALL,
                    ["pwrite64", "fdatasync", "unlink", "openat"], reset,
                    # bpftrace adds blank lines to the program's stdout
                    lambda stdout: " / ".join(ln for ln in stdout.splitlines() if ln.strip()))


def loop_workload(key: str, title: str, prog: Path, calls: dict[str, int], scale: float,
                  expected: Optional[dict[str, tuple[int, str]]] = None) -> Workload:
    """A getppid loop: each configuration makes its own number of calls (no count table: the loop's
    table checks each tool's count of getppid against the calls made, or EXPECTED's)."""
    n = {cfg: int(c * scale) for cfg, c in calls.items()}
    return Workload(key, title, lambda cfg: [str(prog), str(n[cfg]), *(["sud"] if cfg == SUD else [])], h.HOT_NS,
                    configs=list(calls), calls=n, expected=expected or {})


def make_variants(wl: Workload, lopi: Optional[Path], work: Path, skip: dict, names: dict) -> list[h.Variant]:
    vs = []
    for cfg in wl.configs:
        data = work / f"{wl.key}.{cfg}.data"

        def before(idx: int, data=data, cfg=cfg) -> dict:
            remove(data)
            wl.reset()
            return {"LOPI_OUTPUT": str(data)} if cfg in LOPIS else {}

        def after(idx: int, stdout: str, stderr: str, env: dict, data=data, cfg=cfg) -> dict:
            extra = {"output": wl.digest(stdout)}
            if cfg not in UNTRACED:
                per_sc = read_counts(cfg, data, lopi, names)
                extra.update(calls=sum(per_sc.values()), per_sc=per_sc)
            if m := re.search(r"sites installed in ([0-9.]+) ms", stderr):
                extra["setup_ms"] = float(m.group(1))
            # e.g. a kernel without Syscall User Dispatch: the unprobed calls go uncounted
            if warn := [ln for ln in stderr.splitlines() if ln.startswith("lopi: ") and "not counted" in ln]:
                extra["lopi_warning"] = warn[0][:200]
            remove(data)
            return extra

        vs.append(h.Variant(cfg, tool_argv(cfg, wl.argv(cfg), data, lopi or Path("lopi")), wl.metric,
                            before=before, after=after, timeout_s=900, skip_reason=skip.get(cfg, "")))
    return vs


# ---------------------------------------------------------------- tables


def recorded(runs: list[h.RunResult]) -> list[h.RunResult]:
    return [r for r in runs if r.ok and r.round >= 0]


def per_sc_values(runs: list[h.RunResult], name: str) -> list[int]:
    return sorted({r.extra["per_sc"].get(name, 0) for r in recorded(runs) if "per_sc" in r.extra})


def fmt_values(vals: list[int]) -> str:
    return "-" if not vals else h.fmt_int(vals[0]) if len(vals) == 1 else f"{vals[0]:,}–{vals[-1]:,}"


def run_notes(v: h.Variant, runs: list[h.RunResult], base_out: set) -> list[str]:
    """Why a row is empty, or what the runs showed beyond the figures."""
    if v.skip_reason:
        return [v.skip_reason]
    notes = [h.failure_note(runs) or ""] + h.after_errors(runs)
    notes += sorted({r.extra["lopi_warning"] for r in recorded(runs) if "lopi_warning" in r.extra})
    setup = sorted(r.extra["setup_ms"] for r in recorded(runs) if "setup_ms" in r.extra)
    if setup:
        notes.append(f"probes installed in {setup[len(setup) // 2]:.1f} ms (median; lopi's own figure)")
    outs = {r.extra.get("output") for r in recorded(runs)}
    if v.name != BASE and outs != base_out:
        notes.append(f"OUTPUT DIFFERS from the uninstrumented run's: {sorted(map(str, outs))}")
    return [n for n in notes if n] + [f"n={len(recorded(runs))}"]


def loop_table(wl: Workload, variants: list[h.Variant], res: dict) -> tuple[list[str], dict, dict]:
    """The per-call table, {config: ns added per call} (medians) and {config: ns per call Stats}."""
    calls = wl.calls
    ns = {}
    for v in variants:
        st = h.stats(res[v.name])
        if st and not v.skip_reason:
            k = 1e9 / calls[v.name]
            ns[v.name] = h.Stats(st.n, st.median * k, st.lo * k, st.hi * k, st.wall_median)
    base = ns.get(BASE)
    added = {cfg: s.median - base.median for cfg, s in ns.items() if base and cfg != BASE}
    rows = []
    for v in variants:
        s, runs = ns.get(v.name), res[v.name]
        notes = "; ".join(run_notes(v, runs, {None}))
        if not s or not base:
            rows.append([LABEL[v.name], h.fmt_int(calls[v.name]), "-", "-", "-", "-", "-", notes])
            continue
        counted = per_sc_values(runs, "getppid") if v.name not in UNTRACED else []
        want, why = wl.expected.get(v.name, (calls[v.name], ""))
        if counted and counted != [want]:
            if v.name in LOPIS:  # lopi's count is exact or wrong
                notes += f"; COUNT MISMATCH: counted {fmt_values(counted)}, expected {want:,}"
            else:
                worst = max(counted, key=lambda c: abs(c - want))
                notes += (f"; counted up to {abs(worst - want):,} {'fewer' if worst < want else 'more'} calls "
                          "than the program made")
        elif counted and why:
            notes += f"; {why}"
        r = added[v.name] / added[LOPI] if v.name != BASE and added.get(LOPI, 0) > 0 else None
        rel = "-" if r is None else "1x" if v.name == LOPI else f"{r:.2f}x" if r < 10 else f"{r:,.0f}x"
        rows.append([LABEL[v.name], h.fmt_int(calls[v.name]), f"{s.median:,.1f} [{s.lo:,.1f}–{s.hi:,.1f}]",
                     "-" if v.name == BASE else f"{added[v.name]:,.1f}",
                     "x1.00" if v.name == BASE else f"x{s.median / base.median:.2f}", rel, fmt_values(counted), notes])
    header = ["configuration", "getppid calls", "ns per call median [min–max]", "ns added per call", "x uninstr.",
              "added / lopi's added", "getppid counted by the tool", "notes"]
    return [h.markdown_table(header, rows)], added, ns


def catch_cost_line(ns: dict) -> list[str]:
    """What the catch adds to a probed call: lopi's figures with it on and off, same rounds, and the
    kernel's share (Syscall User Dispatch on in the uninstrumented program)."""
    if LOPI not in ns or CATCH not in ns:
        return []
    on, off = ns[CATCH], ns[LOPI]
    kernel = (f"; the kernel's check of the selector at every call alone (Syscall User Dispatch on, "
              f"uninstrumented): {ns[SUD].median - ns[BASE].median:+.1f} ns (fastest runs "
              f"{ns[SUD].lo - ns[BASE].lo:+.1f} ns)" if SUD in ns and BASE in ns else "")
    return [f"- The catch on a probed call: {on.median - off.median:+.1f} ns per call (medians; fastest runs "
            f"{on.lo - off.lo:+.1f} ns), lopi with `--catch-unprobed` − without: the trampoline's two "
            f"selector stores and the kernel's check{kernel}."]


def jit_lines(wl: Workload, res: dict, added: dict, probed_added: Optional[float]) -> list[str]:
    """The JIT loop's findings: what a caught call costs, next to a probed call and strace."""
    out = []
    for cfg, how in ((CATCH, "following the program's tree (the default: lopi is its ptrace tracer, so each "
                            "SIGSYS also stops the program for lopi, a signal-delivery stop)"),
                     (NOFOLLOW, "with `--no-follow` (no tracer: the SIGSYS and lopi's handler alone)")):
        if cfg not in added:
            continue
        counted, made = per_sc_values(res[cfg], "getppid"), wl.calls[cfg]
        vs = (f", {added[cfg] / probed_added:,.0f}x a probed call's {probed_added:.1f} ns (getppid table, this run)"
              if probed_added and probed_added > 0 else "")
        ok = (f"counted all {made:,} calls" if counted == [made]
              else f"COUNT MISMATCH: counted {fmt_values(counted)} of {made:,} calls")
        out.append(f"- A call from code no probe covers, caught {how}: {added[cfg]:,.1f} ns added{vs}; {ok}.")
    if LOPI in added:
        out.append(f"- Without `--catch-unprobed`: {added[LOPI]:+,.1f} ns per call, counted "
                   f"{fmt_values(per_sc_values(res[LOPI], 'getppid'))} of {wl.calls[LOPI]:,}.")
    if STRACE in added:
        vs = "; ".join(f"{added[STRACE] / added[c]:,.1f}x {LABEL[c]}'s" for c in (CATCH, NOFOLLOW)
                       if added.get(c, 0) > 0)
        out.append(f"- strace, which stops the program twice at every call: {added[STRACE]:,.0f} ns added"
                   f"{': ' + vs if vs else ''}.")
    return out


def run_table(variants: list[h.Variant], res: dict) -> list[str]:
    base = h.stats(res[BASE])
    base_out = {r.extra.get("output") for r in recorded(res[BASE])}
    rows = []
    for v in variants:
        runs = res[v.name]
        st = h.stats(runs)
        notes = "; ".join(run_notes(v, runs, base_out))
        if v.skip_reason or not st:
            rows.append([LABEL[v.name], "-", "-", "-", "-", "-", notes])
            continue
        calls, calls_text = h.median_calls(runs)
        ratio = f"x{st.median / base.median:.2f}" if base else "-"
        added = (h.fmt_ns((st.median - base.median) / calls * 1e9) if base and calls and v.name != BASE else "-")
        output = "-" if v.name == BASE else ("identical" if {r.extra.get("output") for r in recorded(runs)} == base_out
                                             else "DIFFERS")
        rows.append([LABEL[v.name], h.fmt_range(st), ratio, calls_text, added, output, notes])
    header = ["configuration", "wall time median [min–max]", "x uninstr.", "system calls counted",
              "ns added per call (whole run)", "output", "notes"]
    return [h.markdown_table(header, rows)]


def count_table(wl: Workload, res: dict) -> list[str]:
    """lopi's counts against strace's, with perf's and bpftrace's."""
    if not recorded(res[LOPI]) or not recorded(res[STRACE]):
        return ["No comparison: lopi or strace has no recorded run."]
    names = {n for cfg in (LOPI, STRACE) for r in recorded(res[cfg]) for n in r.extra.get("per_sc", {})}
    rows, equal = [], 0
    for name in wl.key_syscalls + sorted(names - set(wl.key_syscalls)):
        strace, lopi = per_sc_values(res[STRACE], name), per_sc_values(res[LOPI], name)
        if lopi == strace and len(lopi) == 1:
            verdict = "="
        elif name in WHY:
            verdict = "≠: " + WHY[name]
        else:
            verdict = "varies from run to run" if len(lopi) > 1 or len(strace) > 1 else "≠: UNEXPLAINED"
        if verdict == "=" and name not in wl.key_syscalls:
            equal += 1
            continue
        rows.append([name, fmt_values(strace), fmt_values(lopi), fmt_values(per_sc_values(res[PERF], name)),
                     fmt_values(per_sc_values(res[BPF], name)), verdict])
    header = ["syscall", "strace", "lopi", "perf trace", "bpftrace", "lopi vs strace"]
    return [h.markdown_table(header, rows), "",
            f"The {equal} other system calls lopi or strace saw: lopi's count = strace's."]


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3, a third of the calls, 500 files, 1,000 inserts")
    ap.add_argument("-n", type=int, help="recorded runs per configuration (default 5, quick 3)")
    ap.add_argument("--files", type=int, help="zstd: files to compress (default 2000, quick 500)")
    ap.add_argument("--inserts", type=int, help="sqlite: INSERT transactions (default 3000, quick 1000)")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first (default: /dev/shm/lopi-bench-syscall, "
                    "a tmpfs, else work-real/bench-build/syscall/work)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "syscall.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    scale = 1 / 3 if a.quick else 1.0
    files, inserts = a.files or (500 if a.quick else 2000), a.inserts or (1000 if a.quick else 3000)
    t_start, load_start = time.time(), h.loadavg()

    # tmpfs: sqlite's fdatasync and zstd's file creation then cost CPU, not this disk's latency
    # (0.05-8 ms per fdatasync here), which would bury the tools' costs in its noise
    work = a.work or (Path("/dev/shm/lopi-bench-syscall") if os.access("/dev/shm", os.W_OK) else BUILD / "work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    micro = h.build("getppid", ["-O2", str(HERE / "getppid.c")], [HERE / "getppid.c"])
    jit = h.build("getppid_jit", ["-O2", str(HERE / "getppid_jit.c")], [HERE / "getppid_jit.c"])
    names = syscall_names()
    skip = preflight(lopi, a.lopi, micro, work, names)

    workloads = [
        loop_workload("getppid", "getppid() in a loop", micro, MICRO_CALLS, scale),
        loop_workload("getppid-jit", "getppid() from run-time machine code (JIT) in a loop", jit, JIT_CALLS,
                      scale, {LOPI: (0, "none counted, as expected: the calls come from code no probe covers, and the catch is not asked for")}),
    ]
    missing = {}
    for prog, make in (("zstd", lambda: zstd_workload(work, files)), ("sqlite3", lambda: sqlite_workload(work, inserts))):
        if shutil.which(f"/usr/bin/{prog}"):
            workloads.append(make())
        else:
            missing[prog] = f"/usr/bin/{prog} not installed (Debian's `{prog}` package)"

    all_res = {}
    for wl in workloads:
        log(f"=== {wl.title}")
        variants = make_variants(wl, lopi, work, skip, names)
        all_res[wl.key] = (variants, h.run_interleaved(variants, n, log=log))

    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        *((tool, h.tool_version(argv)) for tool, argv in (
            ("strace", ["strace", "-V"]), ("perf", ["perf", "--version"]), ("bpftrace", ["bpftrace", "--version"]),
            ("zstd", ["/usr/bin/zstd", "-V"]), ("sqlite3", ["/usr/bin/sqlite3", "-version"]))),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("System calls: lopi next to strace, perf trace and bpftrace", "bench/syscall/run.sh", a.quick,
                        machine)
    md += ["", "## Method", "",
           "- Every tool counts and times every system call of the program and its threads, per syscall: "
           "`lopi run --probe syscall` (a probe spliced before the libraries' constructors run around every `syscall` "
           "instruction of the executable, libc and ld.so; the calls of code no probe covers caught with Syscall "
           "User Dispatch, a SIGSYS each, with `--catch-unprobed`; data to `$LOPI_OUTPUT`, read with "
           "`lopi report --syscalls --format json`); `strace -f -qq -c -o FILE` (ptrace: two stops per call); "
           "`perf trace -s -o FILE` (the raw_syscalls tracepoints through perf's ring buffer); `bpftrace` with "
           "[syscalls.bt](../syscall/syscalls.bt) (the raw_syscalls tracepoints, filtered on the command's pid, "
           "summed in BPF maps).",
           f"- Configurations of a workload interleaved round-robin after one unrecorded warm-up round, n={n}; "
           "median [min–max] of the recorded runs; x uninstr. = median / uninstrumented median.",
           "- getppid: [getppid.c](../syscall/getppid.c) built `gcc -O2`, N calls timed in-process around the "
           "loop (the tool's start-up and exit are outside); ns per call = loop time / N; each tool's count of "
           "getppid must be N. The tracers make fewer "
           "calls (N in the table) so that each run stays under ~1 s. ns added = tool's median − uninstrumented "
           "median.",
           "- getppid from run-time machine code: [getppid_jit.c](../syscall/getppid_jit.c), the same loop, each "
           "getppid a `syscall` in code written into an mmap'd page and made executable (as a JIT's): no probe "
           "covers it, so lopi counts it only by catching it (SIGSYS, `--catch-unprobed`), and without the flag not at all. "
           "lopi follows the program's tree by default as its ptrace tracer; `--no-follow` shows the catch "
           "without a tracer. The probed getppid loop runs with the catch on (`--catch-unprobed`: the trampoline "
           "stores the selector byte before and after its `syscall`, and the kernel checks the selector at "
           "every call) and off (the default), in the same rounds, for what the catch costs calls that are probed; `getppid N "
           "sud` turns Syscall User Dispatch on in the uninstrumented loop, its selector letting every call "
           "through, for the kernel's share of that.",
           "- zstd and sqlite: Debian's binaries; wall time of the whole process, so the tool's start-up (lopi: "
           "loading its plan from the cache and installing its probes; bpftrace: compiling and attaching) and "
           "its exit are included; ns added per call = (median − uninstrumented median) / the calls the tool counted. "
           "Inputs, output directory and database in the scratch directory (tmpfs when /dev/shm is writable: "
           "the disk's fdatasync latency would otherwise dominate); the output directory and the database are "
           "removed before every run. Output: zstd's compressed files (sha256), sqlite's query results "
           "(count, total length, integrity_check), compared with the uninstrumented run's.",
           "- Counts: lopi counts the calls a program makes before its probes go live (the execve, ld.so's, "
           "through ptrace's system-call stops) beside its probed ones, so its count of each system call should "
           "equal strace's. perf trace and bpftrace see every call from execve on; bpftrace counts a call when it returns (not exit_group) and also sees its own child's `close` between fork and "
           "execve; perf trace may lose events under load.",
           ""]
    probed_added = None  # the getppid table's, for the JIT table's comparison
    for wl in workloads:
        variants, res = all_res[wl.key]
        md += [f"## {wl.title}", ""]
        if wl.calls:
            table, added, ns = loop_table(wl, variants, res)
            md += table + [""]
            if wl.key == "getppid-jit":
                md += jit_lines(wl, res, added, probed_added)
            elif LOPI in added:
                probed_added = added[LOPI]
                lo = added[LOPI]
                md.append(f"- lopi adds {lo:.1f} ns per timed system call: aim ≤ 25 ns "
                          f"{'met' if lo <= 25 else 'NOT met'} (zpoline's published hook cost: 41 ns).")
                if STRACE in added and lo > 0:
                    r = added[STRACE] / lo
                    md.append(f"- strace adds {added[STRACE]:,.0f} ns, {r:,.0f}x lopi's: aim ≥ 20x "
                              f"{'met' if r >= 20 else 'NOT met'}.")
                md += catch_cost_line(ns)
            md.append("")
        else:
            md += run_table(variants, res) + [""]
        if wl.key_syscalls:
            md += [f"Counts ({wl.title}):", "", *count_table(wl, res), ""]
    for prog, why in missing.items():
        md += [f"## {prog}", "", f"Not run: {why}.", ""]
    raw_meta = {"n": n, "loop_calls": {wl.key: wl.calls for wl in workloads if wl.calls}, "files": files,
                "inserts": inserts, "work": str(work), "skipped": skip, "missing": missing}
    h.write_results(a.out, md, "syscall", raw_meta, {k: r for k, (_, r) in all_res.items()}, machine, [], a.quick)
    shutil.rmtree(work, ignore_errors=True)  # tmpfs: memory
    return 0


if __name__ == "__main__":
    sys.exit(main())
