"""Running one corpus script under `lopi trace` and under bpftrace, from the workload's start
(`-- PROG`, `-c PROG`) or attached to it (`-p PID`), and reading what each printed into the
same form: maps normalized by agreement.py's `norm`, printed lines, the program's stdout and
the times of its phases (`phase NAME NS` on stderr, the fixtures')."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from agreement import norm
from corpus_cases import BASE, Workload

BPFTRACE = "/usr/bin/bpftrace"
TIMEOUT = 240
PHASE = re.compile(r"^phase (\w+) (\d+)$", re.M)
FIXTURES = Path(__file__).resolve().parent / "corpus" / "fixtures"


@dataclass
class Result:
    maps: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    stdout: str = ""
    # The fixtures' phases: {name: ns}.
    phases: dict = field(default_factory=dict)
    # Why the tool did not run the script ("" when it did).
    error: str = ""
    # The tool refused the script before the program ran (lopi), rather than failing later.
    refused: bool = False


def stdin_of(wl: Workload):
    return open(FIXTURES / wl.stdin if wl.stdin else os.devnull, "rb")


def stdin_bytes(wl: Workload) -> bytes:
    return (FIXTURES / wl.stdin).read_bytes() if wl.stdin else b""


def phases(stderr: str) -> dict:
    return {name: int(ns) for name, ns in PHASE.findall(stderr)}


def lopi_error(stderr: str) -> str:
    """The first line that says what went wrong, with the place a diagnostic points at."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("error", "lopi: error")):
            where = next((x.strip() for x in lines[i + 1:i + 2] if x.strip().startswith("-->")), "")
            return f"{line.strip()} {where}".strip()
    return (lines or ["(no message)"])[-1].strip()


def bpftrace_error(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip() and "RLIMIT_MEMLOCK" not in x]
    errors = [x for x in lines if "ERROR" in x or "rror:" in x]
    return (errors or lines or ["(no message)"])[0].strip()


def read_lopi_output(path: Path) -> tuple[dict, list[str]]:
    """lopi's -o file: the printed lines, with a `{"maps": ...}` line for each print(@m), then
    `{"maps": ...}` on the last line: the maps, each as the last of these lines gives it (as
    bpftrace's map events are read)."""
    text = path.read_text(errors="replace").rstrip("\n").split("\n") if path.exists() else []
    if not text or not text[-1].startswith('{"maps"'):
        raise ValueError("no maps at the end of lopi's output")
    maps, printed = {}, []
    for line in text:
        if line.startswith('{"maps"'):
            maps.update({k: norm(v) for k, v in json.loads(line)["maps"].items()})
        else:
            printed.append(line)
    return maps, printed


def read_bpftrace_output(stdout: str) -> tuple[dict, list[str], str]:
    """bpftrace -f json's events: maps, printed text (printf, time, and join's line), and the
    lines that are not events (the -c program's own stdout, on the same stream)."""
    maps, printed, program = {}, "", []
    for line in stdout.splitlines():
        if not line.startswith('{"type"'):
            program.append(line)
            continue
        event = json.loads(line)
        if event["type"] in ("printf", "time"):
            printed += event["data"]
        elif event["type"] == "join":
            printed += event["data"] + "\n"
        elif event["type"] in ("map", "hist", "stats"):
            maps.update({k: norm(v) for k, v in event["data"].items()})
    return maps, printed.splitlines(), "".join(x + "\n" for x in program if x)


def lopi_run(lopi: str, script: Path, wl: Workload, out: Path) -> Result:
    out.unlink(missing_ok=True)
    with stdin_of(wl) as stdin:
        r = subprocess.run([lopi, "trace", "--format", "json", "-o", str(out), str(script), "--", *wl.argv],
                           stdin=stdin, capture_output=True, text=True, timeout=TIMEOUT, cwd=BASE)
    return lopi_result(r.returncode, r.stdout, r.stderr, out)


def lopi_result(code: int, stdout: str, stderr: str, out: Path) -> Result:
    try:
        maps, lines = read_lopi_output(out)
    except (ValueError, json.JSONDecodeError) as e:
        # No output file at all: the script was refused before anything ran.
        return Result(error=f"exit {code}: {lopi_error(stderr)}" if code else str(e), refused=not out.exists(), stdout=stdout)
    return Result(maps, lines, stdout, phases(stderr))


def bpftrace_run(script: Path, wl: Workload) -> Result:
    with stdin_of(wl) as stdin:
        r = subprocess.run([BPFTRACE, "-f", "json", str(script), "-c", " ".join(wl.argv)],
                           stdin=stdin, capture_output=True, text=True, timeout=TIMEOUT, cwd=BASE)
    return bpftrace_result(r.returncode, r.stdout, r.stderr, program=None)


def bpftrace_result(code: int, stdout: str, stderr: str, program: Optional[str]) -> Result:
    if code != 0:
        return Result(error=f"exit {code}: {bpftrace_error(stderr)}")
    maps, lines, own = read_bpftrace_output(stdout)
    return Result(maps, lines, own if program is None else program, phases(stderr))


class Lines(threading.Thread):
    """Collects a stream's lines and says when one containing `ready` came."""

    def __init__(self, stream, ready: str):
        super().__init__(daemon=True)
        self.stream, self.ready, self.text, self.seen = stream, ready, [], threading.Event()
        self.start()

    def run(self) -> None:
        for line in iter(self.stream.readline, ""):
            self.text.append(line)
            if self.ready in line:
                self.seen.set()
        self.seen.set()


def perf_events_open(pid: int, probes: int, timeout: float = 30) -> bool:
    """Waits until bpftrace (`pid`) holds its probes' perf events: it says `attached_probes`
    before attaching them, and holds one event per probe once they are (`BEGIN` and `END` not
    counted), besides one per CPU for its output buffers, which it opens first."""
    want = probes + (os.cpu_count() or 1)
    end = time.time() + timeout
    while time.time() < end:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            return False
        if sum("perf_event" in link for link in links) >= want:
            # Each probe's program is enabled just after its event is made.
            time.sleep(0.3)
            return True
        time.sleep(0.05)
    return False


def attached_run(tool: list[str], ready_on: str, ready: str, wl: Workload, special: int = 0) -> tuple[int, str, str, str, str, str]:
    """Starts the workload waiting for its input, starts `tool` (`{pid}` replaced by its pid),
    gives the workload its input once the tool says `ready` on `ready_on` (stdout or stderr)
    and, for bpftrace, holds its probes (less `special`, its BEGIN and END), and waits for both. Returns the tool's exit code,
    stdout and stderr, the workload's stdout and stderr, and "" or what went wrong."""
    argv = wl.argv + ([wl.wait_arg] if wl.wait_arg else [])
    work = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=BASE)
    # The workload blocks in its first read of stdin: give it a moment to get there.
    time.sleep(0.3)
    tracer = subprocess.Popen([a.replace("{pid}", str(work.pid)) for a in tool], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=BASE)
    out, err = Lines(tracer.stdout, ready if ready_on == "stdout" else "\0"), Lines(tracer.stderr, ready if ready_on == "stderr" else "\0")
    problem = ""
    said = out if ready_on == "stdout" else err
    if not said.seen.wait(TIMEOUT) or tracer.poll() is not None:
        problem = "the tracer did not attach"
    elif m := re.search(r'"probes": (\d+)', "".join(said.text)):
        if not perf_events_open(tracer.pid, int(m[1]) - special):
            problem = "bpftrace did not attach its probes"
    try:
        w_out, w_err = work.communicate(b"go\n" if wl.wait_arg else stdin_bytes(wl), timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        work.kill()
        w_out, w_err = work.communicate()
        problem = problem or "the workload did not finish"
    try:
        tracer.wait(timeout=60)
    except subprocess.TimeoutExpired:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
        problem = problem or "the tracer did not end with the process (stopped by SIGINT)"
    out.join(5)
    err.join(5)
    return tracer.returncode, "".join(out.text), "".join(err.text), w_out.decode(errors="replace"), w_err.decode(errors="replace"), problem


def lopi_attach(lopi: str, script: Path, wl: Workload, out: Path) -> Result:
    out.unlink(missing_ok=True)
    code, stdout, stderr, w_out, w_err, problem = attached_run(
        [lopi, "trace", "--format", "json", "-o", str(out), str(script), "-p", "{pid}"], "stderr", "lopi: tracing process", wl)
    r = lopi_result(code, stdout, stderr, out)
    r.stdout, r.phases = w_out, phases(w_err)
    r.error = r.error or problem
    return r


def bpftrace_attach(script: Path, wl: Workload) -> Result:
    special = len(re.findall(r"^\s*(?:BEGIN|END)\b", script.read_text(), re.M))
    code, stdout, stderr, w_out, w_err, problem = attached_run(
        [BPFTRACE, "-f", "json", str(script), "-p", "{pid}"], "stdout", '"attached_probes"', wl, special)
    r = bpftrace_result(code, stdout, stderr, program=w_out)
    r.phases = phases(w_err)
    r.error = r.error or problem
    return r


def native(wl: Workload, runs: int = 5) -> tuple[str, dict]:
    """The workload's stdout alone, and the median time of each of its phases."""
    outs, times = [], {}
    for _ in range(runs):
        with stdin_of(wl) as stdin:
            r = subprocess.run(wl.argv, stdin=stdin, capture_output=True, text=True, timeout=TIMEOUT, cwd=BASE)
        outs.append(r.stdout)
        for name, ns in phases(r.stderr).items():
            times.setdefault(name, []).append(ns)
    return outs[0], {name: sorted(ns)[len(ns) // 2] for name, ns in times.items()}


def env_ok() -> str:
    """Why bpftrace cannot run here, or ""."""
    if os.geteuid() != 0:
        return "bpftrace needs root"
    if not os.access(BPFTRACE, os.X_OK):
        return f"no {BPFTRACE} (apt-get install bpftrace)"
    return ""
