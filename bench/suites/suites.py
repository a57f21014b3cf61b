#!/usr/bin/env python3
"""Correctness suite: every real program, rewritten at every function in every lopi mode, must
behave exactly like the original on its own tests or a battery of real commands.

    bench/suites/run.sh [--quick] [--mode entry|timing|trace|live|all] [--program NAME ...]

run.sh prepares the programs (tests/real/prepare.sh) and a release lopi, then runs this file.
The batteries are the scripts of tests/real/ (shared with crates/lopi-cli/tests/real_programs.rs);
nothing here knows what they run, only how to call them and that their stdout and exit code are
deterministic.  For each program the original runs once per battery; then, for each mode, every
module is rewritten, every battery runs again with the rewritten module(s) and LOPI_OUTPUT set,
stdout and exit code must be byte-identical, and the data file must parse (`lopi report --format
json`) with what the mode records (timing, trace events; for trace mode `lopi export --format
chrome` and `lopi flamegraph` must succeed too).

Writes bench/results/suites.md (never edit it by hand).  Exit status: 0 when every row is `same`
(or `same, original varies`: see ORIGINAL_RERUNS)
with good data, 1 otherwise, 2 for bad arguments.  Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REAL = REPO / "tests" / "real"
RESULTS = REPO / "bench" / "results" / "suites.md"


# ---------------------------------------------------------------- modes


@dataclasses.dataclass
class Mode:
    name: str
    what: str
    # `lopi rewrite` arguments; None: the mode does not exist in lopi yet (reported, not run)
    rewrite_args: Optional[list[str]]
    timing: bool = False  # the data file must hold timing (calling-context trees)
    trace: bool = False  # ... and trace events
    live: bool = False  # `lopi run` through a wrapper script instead of rewritten files


MODES = [
    Mode("entry", "`lopi rewrite` (entry counts)", []),
    Mode("timing", "`lopi rewrite --probe entry,exit`", ["--probe", "entry,exit"], timing=True),
    Mode("trace", "`lopi rewrite --trace`", ["--trace"], timing=True, trace=True),
    # Live splicing: every process the battery starts runs under `lopi run` (probes spliced in at
    # its entry point), through a wrapper script where the rewritten executable would be.
    Mode("live", "`lopi run --probe entry,exit` (no rewritten file)", ["--probe", "entry,exit"], timing=True, live=True),
]
NOT_IMPLEMENTED = "not implemented yet"
# Live mode needs a program to start: a library driven by a program the suite does not rewrite
# (or loaded with dlopen, as ctypes does) has no live form.
NOT_APPLICABLE = "n/a (library only)"
# A rewritten run whose output differs from the original's is compared with up to this many more
# runs of the original: when the original itself gives exactly the rewritten run's output, the row
# says VARIES (shown, with the original's own diff, but not a failure); otherwise DIFFERENT.
ORIGINAL_RERUNS = 2
VARIES = "same, original varies"

# Trace mode: per-thread event capacity.  lopi's default (1M events, 16 MiB a thread) makes the
# zstd battery write ~1 GB of trace (14 GB sparse) over its ~800 threads; 16K events keep every
# thread's first 16K events (and exercise the counted drop path) in ~100 MB.
TRACE_EVENTS = os.environ.get("LOPI_SUITE_TRACE_EVENTS", "16384")


# ---------------------------------------------------------------- programs and batteries


@dataclasses.dataclass
class Battery:
    name: str
    # (targets, scratch directory) -> (argv, extra environment); targets maps a program's roles
    # ("bin", "lib") to the original or the rewritten files.
    command: Callable[[dict[str, Path], Path], tuple[list[str], dict[str, str]]]
    quick: bool = True  # part of --quick
    full: bool = True  # part of the full run


@dataclasses.dataclass
class Program:
    name: str
    what: str
    # role -> (paths.env key of the original, file name of the rewritten copy)
    rewrite: dict[str, tuple[str, str]]
    batteries: list[Battery]
    # role -> paths.env key: files the batteries use but that are not rewritten
    fixed: dict[str, str] = dataclasses.field(default_factory=dict)


def script(name: str) -> list[str]:
    return ["bash", str(REAL / name)]


def quick_sqlite_tests(out: Path) -> Path:
    """1 in 10 of tests/real/sqlite-tests.txt (the 1st, 11th, 21st... file: ~50 files across
    every family, since the list is sorted by name)."""
    lines = [l for l in (REAL / "sqlite-tests.txt").read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
    out.write_text("".join(l + "\n" for l in lines[::10]))
    return out


def libdir(t: dict[str, Path]) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(t["lib"].parent)}


def programs(paths: dict[str, str], work: Path) -> list[Program]:
    P = lambda key: paths[key]  # noqa: E731
    quick_list = quick_sqlite_tests(work / "sqlite-tests-quick.txt")
    n_quick = len(quick_list.read_text().splitlines())
    sqlite_battery = Battery("sqlite-battery.sh", lambda t, s: (script("sqlite-battery.sh") + [str(t["bin"]), str(s)], {}))
    sqlite_battery_lib = Battery("sqlite-battery.sh", lambda t, s: (script("sqlite-battery.sh") + [str(t["bin"]), str(s)], libdir(t)))
    zstd_batteries = [
        Battery("zstd-battery.sh", lambda t, s: (script("zstd-battery.sh") + [str(t["bin"]), P("DATAGEN"), str(s)], {})),
        Battery("cli-tests", lambda t, s: (script("zstd-playtests.sh") + [str(t["bin"]), P("DATAGEN"), P("ZSTD_SRC"), "cli"], {})),
        Battery("playTests.sh", lambda t, s: (script("zstd-playtests.sh") + [str(t["bin"]), P("DATAGEN"), P("ZSTD_SRC"), "play"], {}), quick=False),
    ]
    libzstd = [Battery("libzstd-battery.py", lambda t, s: (["python3", str(REAL / "libzstd-battery.py"), str(t["lib"])], {}))]
    return [
        Program("sqlite3-src", "sqlite3 shell from source (engine compiled in, symbols)",
                {"bin": ("SQLITE3_SRC_BIN", "sqlite3")}, [sqlite_battery]),
        Program("testfixture", "sqlite's TCL test harness from source, sqlite's own test/*.test",
                {"bin": ("TESTFIXTURE", "testfixture")}, [
                    Battery(f"{n_quick} test files (1 in 10)",
                            lambda t, s: (script("sqlite-testfixture.sh") + [str(t["bin"]), P("SQLITE_SRC"), str(quick_list)], {}),
                            quick=True, full=False),
                    Battery("491 test files", lambda t, s: (script("sqlite-testfixture.sh") + [str(t["bin"]), P("SQLITE_SRC")], {}),
                            quick=False, full=True),
                ]),
        Program("sqlite3-deb", "Debian's stripped sqlite3 + libsqlite3.so.0, both rewritten",
                {"bin": ("DEB_SQLITE3", "sqlite3"), "lib": ("DEB_LIBSQLITE3", "lib/libsqlite3.so.0")}, [sqlite_battery_lib]),
        Program("libsqlite3-src", "libsqlite3.so.0 from source (symbols) under Debian's sqlite3",
                {"lib": ("LIBSQLITE3_SRC", "lib/libsqlite3.so.0")}, [sqlite_battery_lib], fixed={"bin": "DEB_SQLITE3"}),
        Program("zstd-src", "zstd from source (libzstd compiled in, symbols)",
                {"bin": ("ZSTD_SRC_BIN", "zstd")}, zstd_batteries),
        Program("zstd-deb", "Debian's stripped zstd (libzstd linked statically)",
                {"bin": ("DEB_ZSTD", "zstd")}, zstd_batteries),
        Program("libzstd-src", "libzstd.so.1 from source (symbols), C API through ctypes",
                {"lib": ("LIBZSTD_SRC", "libzstd.so.1")}, libzstd),
        Program("libzstd-deb", "Debian's stripped libzstd.so.1, C API through ctypes",
                {"lib": ("DEB_LIBZSTD", "libzstd.so.1")}, libzstd),
    ]


# ---------------------------------------------------------------- running


@dataclasses.dataclass
class Run:
    stdout: bytes
    rc: int  # -1: timed out
    seconds: float
    stderr_tail: str


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOPI_OUTPUT", "LOPI_TRACE_EVENTS")}
    env.update(extra)
    return env


def run(argv: list[str], env: dict[str, str], log: Path, timeout: float) -> Run:
    """stdout is the result (the batteries fold stderr in themselves); stderr goes to LOG."""
    out_path = log.with_suffix(".stdout")
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(log, "wb") as err:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = -1
    secs = time.monotonic() - t0
    stdout = out_path.read_bytes()
    out_path.unlink()
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:])
    return Run(stdout, rc, secs, tail)


def lopi_cmd(lopi: str, args: list[str], timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([lopi] + args, capture_output=True, text=True, timeout=timeout)


SUMMARY_RE = re.compile(r"(\d+) functions found, (\d+) probed \(([\d.]+)%\), (\d+) skipped")
TIMED_RE = re.compile(r"; (\d+) timed, (\d+) counted only")


@dataclasses.dataclass
class Rewritten:
    found: int = 0
    probed: int = 0
    timed: Optional[int] = None
    seconds: float = 0.0
    lines: list[str] = dataclasses.field(default_factory=list)


def rewrite(lopi: str, mode: Mode, prog: Program, paths: dict[str, str], bindir: Path) -> tuple[Optional[Rewritten], str]:
    if mode.live:
        return live_wrapper(lopi, mode, prog, paths, bindir)
    r = Rewritten()
    for role, (key, rel) in prog.rewrite.items():
        out = bindir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        p = lopi_cmd(lopi, ["rewrite", paths[key], "-o", str(out)] + (mode.rewrite_args or []))
        r.seconds += time.monotonic() - t0
        msg = (p.stdout + p.stderr).strip()
        if p.returncode != 0:
            return None, f"lopi rewrite {paths[key]} failed ({p.returncode}): {msg}"
        r.lines.append(msg)
        m = SUMMARY_RE.search(msg)
        if not m:
            return None, f"cannot read lopi rewrite's summary: {msg}"
        r.found += int(m.group(1))
        r.probed += int(m.group(2))
        m = TIMED_RE.search(msg)
        if m:
            r.timed = (r.timed or 0) + int(m.group(1))
    return r, ""


LAUNCHER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* Runs the original program under `lopi run`, passing on this program's argv[0] (programs such
   as zstd behave by the name they are called by) and arguments. A compiled program, not a
   script, so that what inspects the file (readelf in zstd's playTests) sees an ELF executable. */
static const char *fixed[] = {@FIXED@};
int main(int argc, char **argv) {
    size_t n = sizeof fixed / sizeof *fixed;
    char **args = calloc(n + argc + 4, sizeof *args);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) args[k++] = (char *)fixed[i];
    args[k++] = "--arg0";
    args[k++] = argv[0];
    args[k++] = "--";
    args[k++] = @REAL@;
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    execv(args[0], args);
    perror("lopi launcher: execv");
    return 127;
}
"""


def c_string(text: str) -> str:
    return json.dumps(text)


def live_wrapper(lopi: str, mode: Mode, prog: Program, paths: dict[str, str], bindir: Path) -> tuple[Optional[Rewritten], str]:
    """Live mode: a small launcher where the rewritten executable would be runs the original under
    `lopi run`; a library the program loads is probed with `--functions LIB:*` (and stays the
    original file).  Counts come from `lopi info`, since nothing is rewritten."""
    key, rel = prog.rewrite["bin"]
    args = ["run", "-q"] + (mode.rewrite_args or [])
    infos = [paths[key]]
    if "lib" in prog.rewrite:
        lib_key, lib_rel = prog.rewrite["lib"]
        (bindir / lib_rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths[lib_key], bindir / lib_rel)
        lib_name = Path(paths[lib_key]).name.split(".so")[0]
        args += ["--functions", "*", "--functions", f"{lib_name}:*"]
        infos.append(paths[lib_key])
    out = bindir / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name + ".launcher.c")
    fixed = ", ".join(c_string(a) for a in [lopi] + args)
    src.write_text(LAUNCHER_C.replace("@FIXED@", fixed).replace("@REAL@", c_string(paths[key])))
    out.unlink(missing_ok=True)
    cc = subprocess.run(["cc", "-O2", "-o", str(out), str(src)], capture_output=True, text=True)
    src.unlink(missing_ok=True)
    if cc.returncode != 0:
        return None, f"building the live launcher failed: {cc.stderr.strip()[-300:]}"
    r = Rewritten(lines=[f"{out} runs {paths[key]} under `lopi {' '.join(args)}`"])
    for path in infos:
        p = lopi_cmd(lopi, ["info", path] + (mode.rewrite_args or []))
        msg = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
        m, t = SUMMARY_RE.search(msg[0]), TIMED_RE.search(msg[0])
        if p.returncode != 0 or not m:
            return None, f"lopi info {path} failed ({p.returncode}): {msg[0]}"
        r.found += int(m.group(1))
        r.probed += int(m.group(2))
        if t:
            r.timed = (r.timed or 0) + int(t.group(1))
    return r, ""


@dataclasses.dataclass
class DataCheck:
    ok: bool = True
    problems: list[str] = dataclasses.field(default_factory=list)
    called: int = 0  # functions with calls
    calls: int = 0
    threads: int = 0
    trace_events: int = 0
    trace_dropped: int = 0
    bytes_on_disk: int = 0
    exports: str = ""

    def fail(self, why: str) -> None:
        self.ok = False
        self.problems.append(why)


def check_data(lopi: str, mode: Mode, data: Path, mdir: Path, exports: bool) -> DataCheck:
    c = DataCheck()
    if not data.exists():
        c.fail("no data file written")
        return c
    c.bytes_on_disk = data.stat().st_blocks * 512
    p = lopi_cmd(lopi, ["report", str(data), "--format", "json"])
    if p.returncode != 0:
        c.fail(f"lopi report failed ({p.returncode}): {p.stderr.strip()[:300]}")
        return c
    try:
        rep = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        c.fail(f"lopi report: bad JSON ({e})")
        return c
    funcs = rep.get("functions") or []
    c.called = sum(1 for f in funcs if f.get("calls", 0) > 0)
    c.calls = rep.get("total_calls", 0)
    if c.calls <= 0:
        c.fail("no calls recorded")
    if rep.get("incomplete"):
        c.fail("report says the data is incomplete")
    timing = rep.get("timing")
    threads = (timing or {}).get("threads") or []
    c.threads = len(threads)
    c.trace_events = sum(t.get("trace_events", 0) for t in threads)
    c.trace_dropped = sum(t.get("trace_dropped", 0) for t in threads)
    if mode.timing:
        if not timing or not threads:
            c.fail("no timing data (no timed thread)")
        elif not any(f.get("timed") and f.get("total_ns") for f in funcs):
            c.fail("no function has a time")
    elif timing:
        c.fail("entry-only rewrite wrote timing data")
    if mode.trace and c.trace_events == 0:
        c.fail("trace mode recorded no trace events")
    if not mode.trace and c.trace_events:
        c.fail(f"{c.trace_events} trace events without --trace")
    if exports:
        chrome, svg = mdir / "trace.chrome.json", mdir / "flamegraph.svg"
        p = lopi_cmd(lopi, ["export", str(data), "--format", "chrome", "-o", str(chrome)])
        ok_chrome = p.returncode == 0 and chrome.exists() and chrome.stat().st_size > 0
        if ok_chrome:
            with open(chrome, "rb") as f:
                ok_chrome = f.read(1) in (b"{", b"[")
        if not ok_chrome:
            c.fail(f"lopi export --format chrome failed ({p.returncode}): {p.stderr.strip()[:300]}")
        chrome_msg = (p.stderr.strip().splitlines() or [""])[-1]
        chrome.unlink(missing_ok=True)  # hundreds of MB; only whether it works matters here
        p = lopi_cmd(lopi, ["flamegraph", str(data), "-o", str(svg)])
        if p.returncode != 0 or not svg.exists() or b"<svg" not in svg.read_bytes()[:4096]:
            c.fail(f"lopi flamegraph failed ({p.returncode}): {p.stderr.strip()[:300]}")
        m1 = re.search(r"\((\d+) events\)", chrome_msg)
        m2 = re.search(r"\((\d+) stacks\)", p.stderr)
        c.exports = f"chrome {m1.group(1) if m1 else '?'} events, flamegraph {m2.group(1) if m2 else '?'} stacks"
    return c


# ---------------------------------------------------------------- results


@dataclasses.dataclass
class BatteryRow:
    program: str
    battery: str
    mode: str
    result: str
    orig_s: Optional[float] = None
    rw_s: Optional[float] = None
    data: Optional[DataCheck] = None
    detail: str = ""


@dataclasses.dataclass
class Row:
    program: str
    mode: str
    result: str  # same | VARIES | DIFFERENT | ORIGINAL FAILS | REWRITE FAILED | not implemented yet
    data_ok: Optional[bool] = None
    orig_s: float = 0.0
    rw_s: float = 0.0
    rw: Optional[Rewritten] = None
    called: int = 0
    calls: int = 0
    trace_events: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def good(self) -> bool:
        return self.result in (NOT_IMPLEMENTED, NOT_APPLICABLE) or (self.result in ("same", VARIES) and self.data_ok is not False)


def fmt_s(s: Optional[float]) -> str:
    return "-" if not s else f"{s:.1f}"


def fmt_ratio(a: float, b: float) -> str:
    return f"x{b / a:.2f}" if a and b else "-"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    w = [max(len(x) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(x.ljust(n) for x, n in zip(r, w)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * n for n in w])] + [line(r) for r in rows])


SUMMARY_HEADER = ["program", "mode", "output", "data", "original s", "rewritten s", "ratio",
                  "probed/found", "timed", "called", "calls", "trace events"]


def summary_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        if r.result in (NOT_IMPLEMENTED, NOT_APPLICABLE):
            out.append([r.program, r.mode, r.result] + ["-"] * (len(SUMMARY_HEADER) - 3))
            continue
        rw = r.rw
        data = "-" if r.data_ok is None else ("ok" if r.data_ok else "BAD")
        out.append([
            r.program, r.mode, r.result, data, fmt_s(r.orig_s), fmt_s(r.rw_s), fmt_ratio(r.orig_s, r.rw_s),
            f"{rw.probed}/{rw.found}" if rw else "-",
            str(rw.timed) if rw and rw.timed is not None else "-",
            str(r.called) if r.calls else "-", f"{r.calls:,}" if r.calls else "-",
            f"{r.trace_events:,}" if r.trace_events else "-",
        ])
    return out


def battery_rows(brows: list[BatteryRow]) -> list[list[str]]:
    out = []
    for b in brows:
        d = b.data
        out.append([
            b.program, b.battery, b.mode, b.result, fmt_s(b.orig_s), fmt_s(b.rw_s), fmt_ratio(b.orig_s or 0, b.rw_s or 0),
            ("ok" if d.ok else "BAD: " + "; ".join(d.problems)) if d else "-",
            f"{d.threads}" if d and d.threads else "-",
            f"{d.bytes_on_disk / 1e6:.1f}" if d else "-",
            (f"{d.trace_dropped:,}" if d and d.trace_events else "-"),
            (d.exports if d and d.exports else "-"),
        ])
    return out


BATTERY_HEADER = ["program", "battery", "mode", "output", "original s", "rewritten s", "ratio", "data",
                  "timed threads", "data MB", "trace dropped", "exports"]


def cmd_out(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(lopi: str, paths: dict[str, str]) -> list[tuple[str, str]]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = cmd_out(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"]) or "?"
    if cmd_out(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]):
        commit += " (with uncommitted changes)"
    debian = ""
    try:
        debian = Path("/etc/debian_version").read_text().strip()
    except OSError:
        pass
    return [
        ("CPU", f"{cpu} ({os.cpu_count()} CPUs online)"),
        ("kernel", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("OS", f"Debian {debian}" if debian else platform.platform()),
        ("glibc", (cmd_out(["ldd", "--version"]).splitlines() or ["?"])[0]),
        ("gcc", (cmd_out(["gcc", "--version"]).splitlines() or ["?"])[0]),
        ("lopi", f"{cmd_out([lopi, '--version'])}, git {commit}"),
        ("sqlite", f"{paths.get('SQLITE_VERSION', '?')} (Debian source and binary packages)"),
        ("zstd", f"{paths.get('ZSTD_VERSION', '?')} (Debian source and binary packages)"),
    ]


def write_results(path: Path, args, argv: list[str], rows: list[Row], brows: list[BatteryRow],
                  varies: list[tuple[str, str, str, int, str]], mach: list[tuple[str, str]],
                  started: datetime.datetime, took: float) -> None:
    bad = [r for r in rows if not r.good]
    lines = [
        "# Correctness suite: real programs under every lopi mode",
        "",
        "Written by `bench/suites/run.sh`; do not edit by hand. What runs and how to read it:",
        "[bench/suites/README.md](../suites/README.md).",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}, {took / 60:.1f} min",
        f"- command: `{' '.join(['bench/suites/run.sh'] + argv)}`",
        f"- run: {'quick (--quick)' if args.quick else 'full'}; trace mode with LOPI_TRACE_EVENTS={TRACE_EVENTS}",
    ]
    lines += [f"- {k}: {v}" for k, v in mach]
    lines += [
        "",
        f"**{'ALL SAME' if not bad else f'{len(bad)} BAD ROW(S)'}**: "
        f"{sum(1 for r in rows if r.good and r.result not in (NOT_IMPLEMENTED, NOT_APPLICABLE))} of "
        f"{sum(1 for r in rows if r.result not in (NOT_IMPLEMENTED, NOT_APPLICABLE))} program x mode runs gave the original's output "
        "byte for byte with a good data file.",
        "",
        "## Programs x modes",
        "",
        md_table(SUMMARY_HEADER, summary_rows(rows)),
        "",
        "`output`: stdout + exit code of every battery identical to the original's (`same`), identical "
        f"to another run of the original whose output varies (`{VARIES}`, see below), or not "
        "(`DIFFERENT`). `data`: the data file(s) parse and hold what the mode records. Times are the "
        "batteries' wall-clock seconds, summed. `probed/found`, `timed`: from `lopi rewrite` (summed "
        "over the rewritten modules). `called`, `calls`: functions with calls and all calls in "
        "`lopi report`, summed over the batteries.",
        "",
        "## Batteries",
        "",
        md_table(BATTERY_HEADER, battery_rows(brows)),
        "",
    ]
    if varies:
        lines += ["## Original varies", "",
                  "The rewritten run's output differed from the original's first run but equals, byte for "
                  "byte, another run of the original: the battery is not deterministic there. The diff "
                  "(original run 1 -> rewritten):", ""]
        for prog_name, mode_name, bat, k, diff in varies:
            body = [l for l in diff.splitlines() if l.startswith(("+", "-")) and not l.startswith(("+++", "---"))]
            lines += [f"- {prog_name} / {mode_name} / {bat} (= original run {k}):", "", "  ```"]
            lines += ["  " + l for l in body[:20]] + ["  ```", ""]
    if bad:
        lines += ["## Problems", ""]
        for r in bad:
            lines += [f"- {r.program} / {r.mode}: {r.result}; " + "; ".join(r.problems)]
        lines.append("")
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str]):
    ap = argparse.ArgumentParser(prog="bench/suites/run.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="without playTests.sh; 1 in 10 of sqlite's test files")
    ap.add_argument("--mode", action="append", default=None,
                    help="entry, timing, trace, live or all (repeatable, or comma-separated; default all)")
    ap.add_argument("--program", nargs="+", action="extend", default=None, metavar="NAME",
                    help="only these programs (default: all)")
    ap.add_argument("--list", action="store_true", help="list programs, batteries and modes, then exit")
    ap.add_argument("--keep", action="store_true", help="keep data files and rewritten binaries of passing runs")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("LOPI_REAL_TIMEOUT", 1800)),
                    help="bound on one battery run, seconds (default 1800, or $LOPI_REAL_TIMEOUT)")
    ap.add_argument("--lopi", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--work", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--results", default=str(RESULTS), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    user_argv = [a for a in argv if not a.startswith(("--lopi=", "--work=", "--results="))]
    lopi = args.lopi
    work = Path(args.work)
    paths = dict(l.split("=", 1) for l in (work / "paths.env").read_text().splitlines() if "=" in l)
    base = work / "suites"
    base.mkdir(parents=True, exist_ok=True)
    progs = programs(paths, base)

    names = {m.name for m in MODES}
    wanted_modes: list[str] = []
    for m in args.mode or ["all"]:
        for x in m.split(","):
            if x == "all":
                wanted_modes += [m.name for m in MODES]
            elif x in names:
                wanted_modes.append(x)
            else:
                print(f"unknown mode {x!r} (modes: {', '.join(sorted(names))}, all)", file=sys.stderr)
                return 2
    modes = [m for m in MODES if m.name in wanted_modes]
    if args.program:
        unknown = set(args.program) - {p.name for p in progs}
        if unknown:
            print(f"unknown program(s) {sorted(unknown)}; programs: {', '.join(p.name for p in progs)}", file=sys.stderr)
            return 2
        progs = [p for p in progs if p.name in args.program]

    if args.list:
        for m in MODES:
            print(f"mode {m.name:7} {m.what}" + ("" if m.rewrite_args is not None else f"  [{NOT_IMPLEMENTED}]"))
        for p in progs:
            print(f"{p.name:15} {p.what}")
            for b in p.batteries:
                print(f"{'':15}   {b.name}" + ("" if b.quick else "  (full run only)") + ("" if b.full else "  (--quick only)"))
        return 0

    for m in modes:
        if m.rewrite_args is None:
            print(f"[suites] {m.name}: {NOT_IMPLEMENTED} ({m.what} do not exist); its rows say so")
    if not any(m.rewrite_args is not None for m in modes):
        print(f"[suites] nothing to run: every selected mode is {NOT_IMPLEMENTED}")
        return 2

    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    log = lambda msg: print(f"[suites {time.monotonic() - t_start:6.0f}s] {msg}", flush=True)  # noqa: E731
    rows: list[Row] = []
    brows: list[BatteryRow] = []
    varies: list[tuple[str, str, str, int, str]] = []  # program, mode, battery, original run, diff

    for prog in progs:
        pdir = base / prog.name
        shutil.rmtree(pdir, ignore_errors=True)
        (pdir / "original").mkdir(parents=True)
        bats = [b for b in prog.batteries if (b.quick if args.quick else b.full)]
        # The original and every rewritten version run from the same paths (bin/), with the
        # same environment (LOPI_OUTPUT and LOPI_TRACE_EVENTS are set for the original too,
        # which ignores them): a program may depend on its argv/environment's size (sqlite's
        # withM.test counts 1095, 1096 or 1097 cases depending on it), and the comparison must
        # only see what lopi changed.
        bindir, datadir = pdir / "bin", pdir / "data"
        datadir.mkdir()

        def install_originals() -> None:
            for role, (key, rel) in prog.rewrite.items():
                (bindir / rel).parent.mkdir(parents=True, exist_ok=True)
                (bindir / rel).unlink(missing_ok=True)
                shutil.copy2(paths[key], bindir / rel)

        install_originals()
        targets = {role: bindir / rel for role, (_, rel) in prog.rewrite.items()}
        targets.update({role: Path(paths[key]) for role, key in prog.fixed.items()})

        def battery_env(b: Battery, extra: dict[str, str]) -> dict[str, str]:
            return clean_env({**extra, "LOPI_OUTPUT": str(datadir / f"{safe(b.name)}.lopi"),
                              "LOPI_TRACE_EVENTS": TRACE_EVENTS})

        # every run of the original, per battery; the first is the reference
        originals: dict[str, list[Run]] = {}

        def run_original(b: Battery) -> Run:
            """Runs the original from bin/; the caller puts a mode's files back if it needs them."""
            install_originals()
            n = len(originals.setdefault(b.name, []))
            stem = safe(b.name) + (f".run{n + 1}" if n else "")
            argv_, env = b.command(targets, pdir / "scratch")
            r = run(argv_, battery_env(b, env), pdir / "original" / f"{stem}.stderr", args.timeout)
            (pdir / "original" / f"{stem}.out").write_bytes(r.stdout)
            shutil.rmtree(pdir / "scratch", ignore_errors=True)
            originals[b.name].append(r)
            return r

        orig_bad = []
        for b in bats:
            r = run_original(b)
            log(f"{prog.name}: original, {b.name}: exit {r.rc}, {len(r.stdout.splitlines())} lines, {r.seconds:.1f}s")
            if r.rc != 0:
                orig_bad.append(f"original fails {b.name} (exit {r.rc}; {pdir / 'original'})")

        for mode in modes:
            row = Row(prog.name, mode.name, "")
            rows.append(row)
            if mode.rewrite_args is None:
                row.result = NOT_IMPLEMENTED
                log(f"{prog.name}: {mode.name}: {NOT_IMPLEMENTED}")
                continue
            if mode.live and "bin" not in prog.rewrite:
                row.result = NOT_APPLICABLE
                log(f"{prog.name}: {mode.name}: {NOT_APPLICABLE}")
                continue
            row.orig_s = sum(originals[b.name][0].seconds for b in bats)
            if orig_bad:
                row.result, row.problems = "ORIGINAL FAILS", list(orig_bad)
                log(f"{prog.name}: {mode.name}: ORIGINAL FAILS, not compared: {'; '.join(orig_bad)}")
                continue
            mdir = pdir / mode.name
            mdir.mkdir(parents=True)
            rw, err = rewrite(lopi, mode, prog, paths, bindir)  # over the files in bin/
            if rw is None:
                row.result, row.problems = "REWRITE FAILED", [err]
                log(f"{prog.name}: {mode.name}: {err}")
                continue
            row.rw = rw
            for l in rw.lines:
                log(f"{prog.name}: {mode.name}: {l}")
            # The mode's files, to put back after a re-run of the original (which runs from bin/).
            mode_bin = pdir / f"{mode.name}.bin"
            shutil.rmtree(mode_bin, ignore_errors=True)
            shutil.copytree(bindir, mode_bin, symlinks=True)
            results, data_all = [], True
            for i, b in enumerate(bats):
                data = datadir / f"{safe(b.name)}.lopi"
                data.unlink(missing_ok=True)
                argv_, env = b.command(targets, pdir / "scratch")
                r = run(argv_, battery_env(b, env), mdir / f"{safe(b.name)}.stderr", args.timeout)
                shutil.rmtree(pdir / "scratch", ignore_errors=True)
                o = originals[b.name][0]
                matches = lambda x: x.stdout == r.stdout and x.rc == r.rc  # noqa: E731
                result = "same" if matches(o) else ""
                if not result:
                    out_file = mdir / f"{safe(b.name)}.out"
                    out_file.write_bytes(r.stdout)
                    orig_file = pdir / "original" / f"{safe(b.name)}.out"
                    diff = subprocess.run(["diff", "-u", str(orig_file), str(out_file)], capture_output=True, text=True).stdout
                    (mdir / f"{safe(b.name)}.diff").write_text(diff)
                    log(f"{prog.name}: {mode.name}: {b.name}: differs from the original (exit {r.rc}, original {o.rc}):")
                    print("\n".join("    " + l for l in diff.splitlines()[:40]))
                    if r.stderr_tail.strip():
                        print("    stderr tail:\n" + "\n".join("      " + l for l in r.stderr_tail.splitlines()))
                    # Does the original itself give this output?  (A nondeterministic battery.)
                    while not any(matches(x) for x in originals[b.name]) and len(originals[b.name]) <= ORIGINAL_RERUNS:
                        x = run_original(b)
                        log(f"{prog.name}: original again, {b.name}: exit {x.rc}, "
                            + ("same as the rewritten run" if matches(x) else
                               "same as its first run" if x.stdout == o.stdout and x.rc == o.rc else "a third output"))
                    shutil.rmtree(bindir)
                    shutil.copytree(mode_bin, bindir, symlinks=True)
                    k = next((k for k, x in enumerate(originals[b.name]) if matches(x)), None)
                    if k is not None:
                        result = VARIES
                        varies.append((prog.name, mode.name, b.name, k + 1, diff))
                        log(f"{prog.name}: {mode.name}: {b.name}: {VARIES}: run {k + 1} of the original gave the "
                            "rewritten run's output byte for byte")
                    else:
                        result = "DIFFERENT"
                        row.problems.append(f"{b.name}: exit {r.rc} (original {o.rc}), not any of "
                                            f"{len(originals[b.name])} original runs; diff in {mdir / (safe(b.name) + '.diff')}")
                br = BatteryRow(prog.name, b.name, mode.name, result, o.seconds, r.seconds)
                brows.append(br)
                row.rw_s += r.seconds
                results.append(result)
                dc = check_data(lopi, mode, data, mdir, exports=mode.trace and i == 0)
                br.data = dc
                row.called += dc.called
                row.calls += dc.calls
                row.trace_events += dc.trace_events
                if not dc.ok:
                    data_all = False
                    row.problems += [f"{b.name}: {p}" for p in dc.problems]
                log(f"{prog.name}: {mode.name}: {b.name}: {br.result} ({o.seconds:.1f}s -> {r.seconds:.1f}s), data "
                    + ("ok" if dc.ok else "BAD: " + "; ".join(dc.problems))
                    + f" ({dc.called} functions called, {dc.calls:,} calls, {dc.threads} timed threads, "
                    f"{dc.trace_events:,} trace events, {dc.bytes_on_disk / 1e6:.1f} MB)"
                    + (f"; {dc.exports}" if dc.exports else ""))
                if result == "same" and dc.ok and not args.keep:
                    data.unlink(missing_ok=True)
                elif data.exists():
                    data.rename(mdir / data.name)
            row.result = "DIFFERENT" if "DIFFERENT" in results else VARIES if VARIES in results else "same"
            row.data_ok = data_all
            if not row.good or args.keep:  # keep this mode's rewritten files for inspection
                for rel in {rel for _, rel in prog.rewrite.values()}:
                    (mdir / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(bindir / rel, mdir / rel)
            shutil.rmtree(mode_bin, ignore_errors=True)
        shutil.rmtree(bindir, ignore_errors=True)

    took = time.monotonic() - t_start
    print()
    print(text_table(SUMMARY_HEADER, summary_rows(rows)))
    bad = [r for r in rows if not r.good]
    for m in modes:
        if m.rewrite_args is None:
            print(f"{m.name}: {NOT_IMPLEMENTED}")
    print()
    if bad:
        print(f"FAILED: {len(bad)} program x mode row(s) differ from the original or have bad data:")
        for r in bad:
            print(f"  {r.program} / {r.mode}: {r.result}; " + "; ".join(r.problems))
    else:
        print("all same: every battery gave the original's output byte for byte, every data file is good")
    results = Path(args.results)
    for prog_name, mode_name, bat, k, _ in varies:
        print(f"note: {prog_name} / {mode_name} / {bat}: the original's output varies from run to run; "
              f"the rewritten output is the one of its run {k}")
    write_results(results, args, user_argv, rows, brows, varies, machine(lopi, paths), started, took)
    print(f"[suites] {took / 60:.1f} min; table in {results}; outputs in {base}")
    return 1 if bad else 0


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", name).strip("_")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
