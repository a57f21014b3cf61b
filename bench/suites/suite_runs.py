"""The correctness suite's steps on one program: running a battery, instrumenting the program in a
mode (rewritten files, or a launcher under `lopi run` in live mode), checking the data it wrote."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from suite_programs import Mode, Program


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
