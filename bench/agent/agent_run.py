#!/usr/bin/env python3
"""One run of bench/agent: the server, lopi (the agent, `lopi attach`, or none) attached to it,
then the load; prints one JSON line with the client's figures and lopi's.

    agent_run.py CONFIG --lopi L --server S --client C --work DIR [--url URL --received FILE] ...

CONFIG: native; agent-timing (`lopi agent --probe entry,exit`, the push's default budget);
agent-count (`lopi agent --probe entry`); attach-timing (`lopi attach PID --probe entry,exit`,
no push, no budget). lopi is attached before the load starts: the client is started once lopi's
stderr says "attached to PID". At the end lopi gets SIGTERM (it detaches and, as the agent,
sends the last window) and the server is stopped after it. Exits non-zero, saying why on
stderr, when a step fails; a window that was not pushed is a figure, not a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

NATIVE, AGENT_TIMING, AGENT_COUNT, ATTACH_TIMING = "native", "agent-timing", "agent-count", "attach-timing"
CONFIGS = (NATIVE, AGENT_TIMING, AGENT_COUNT, ATTACH_TIMING)
PUSHED = re.compile(r"pushed (\d+) of (\d+) windows")
TICKS = os.sysconf("SC_CLK_TCK")
CPU = re.compile(r"its own CPU use: ([\d.]+) s in ([\d.]+) s \(([\d.]+)% of one CPU\)")


def fail(msg: str) -> None:
    raise SystemExit(f"agent_run: {msg}")


def wait_for(what: str, timeout: float, ready) -> None:
    """Polls ready() until it is true; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


def lines_in(path: Path) -> int:
    """Whole lines (requests) the collector's file exporter wrote so far."""
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def cpu_ticks(pid: int) -> int:
    """The process's user and system time (its ended threads' included), in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def lopi_argv(a: argparse.Namespace, pid: int) -> list[str]:
    if a.config == ATTACH_TIMING:
        return [a.lopi, "attach", str(pid), "--probe", "entry,exit"]
    probe = "entry,exit" if a.config == AGENT_TIMING else "entry"
    return [a.lopi, "agent", "--match", f"^{re.escape(a.server)}$", "--push", a.url, "--every", a.every,
            "--probe", probe, "--dir", str(a.work / "agent-data"), "--keep"]


def report_figures(lopi: str, data: Path, budget: bool) -> dict:
    """Calls lopi counted in the record, and what the budget did (when there was one)."""
    def report(*args: str):
        p = subprocess.run([lopi, "report", str(data), "--format", "json", *args], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            fail(f"lopi report {data} {' '.join(args)}: {p.stderr.strip()[-300:]}")
        return json.loads(p.stdout)

    out = {"calls": sum(int(f.get("calls", 0)) for f in report()["functions"])}
    if budget:
        threads = [t for t in report("--budget") if t.get("budget")]
        out["switched"] = sorted({s["function"] for t in threads for s in t.get("switches", [])})
        out["budget_ppm"] = max((t["budget"]["ppm"] for t in threads), default=0)
        # lopi's own estimate of what timing cost each thread, as a share of its CPU time (the budget's)
        out["timing_cost"] = [t["budget"]["timing_ns"] / t["budget"]["cpu_ns"]
                              for t in threads if t["budget"].get("cpu_ns")]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", choices=CONFIGS)
    ap.add_argument("--lopi", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--work", type=Path, required=True, help="scratch directory of this run (emptied by the caller)")
    ap.add_argument("--url", help="the collector's OTLP/HTTP address (agent configurations)")
    ap.add_argument("--received", type=Path, help="the collector's file exporter's output (agent configurations)")
    ap.add_argument("--every", default="5s")
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--cpu", type=int, default=-1, help="the CPU of the server and the client (-1: not pinned)")
    ap.add_argument("--cache", type=Path, help="lopi's plan cache (XDG_CACHE_HOME)")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if a.cache:
        env["XDG_CACHE_HOME"] = str(a.cache)

    # The server and the client on one CPU: the service is then CPU-bound, its throughput what its
    # CPU time per request allows, not what the scheduler's placement of 4 threads on 2 CPUs does
    # this time (unpinned, native runs differ by x4 here).
    pin = None if a.cpu < 0 else (lambda: os.sched_setaffinity(0, {a.cpu}))
    server = subprocess.Popen([a.server, "0"], stdout=subprocess.PIPE, text=True, preexec_fn=pin)
    lopi: Optional[subprocess.Popen] = None
    lopi_err = a.work / "lopi.stderr"
    result: dict = {"config": a.config}
    try:
        first = server.stdout.readline()
        m = re.match(r"port (\d+)", first)
        if not m:
            fail(f"the server did not say its port: {first!r}")
        port = m.group(1)
        before = lines_in(a.received) if a.received else 0
        if a.config != NATIVE:
            if a.config == ATTACH_TIMING:
                env["LOPI_OUTPUT"] = str(a.work / "attach.%p.lopi")
            with lopi_err.open("w") as err:
                lopi = subprocess.Popen(lopi_argv(a, server.pid), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=err, env=env)
            attached = f"attached to {server.pid} ("
            t0 = time.monotonic()

            def ready() -> bool:
                text = lopi_err.read_text()
                if lopi.poll() is not None or "not attaching to" in text:
                    fail(f"lopi did not attach to the server:\n{text}")
                return attached in text

            wait_for("lopi attaching to the server", 120, ready)
            result["attach_wait_s"] = time.monotonic() - t0

        cpu0, idle = cpu_ticks(server.pid), threads(server.pid)
        c = subprocess.run([a.client, port, str(a.conns), str(a.seconds)], capture_output=True, text=True,
                           timeout=a.seconds + 120, preexec_fn=pin)
        # The connections' threads have ended (the client closed them): their time is the process's.
        wait_for("the server's threads ending", 10, lambda: threads(server.pid) == idle)
        cpu1 = cpu_ticks(server.pid)
        m = re.search(r"requests=(\d+) seconds=([\d.]+) rps=(\d+) errors=(\d+)", c.stdout)
        if c.returncode != 0 or not m:
            fail(f"the client failed (exit {c.returncode}): {c.stdout.strip()} {c.stderr.strip()}")
        result.update(requests=int(m.group(1)), seconds=float(m.group(2)), rps=int(m.group(1)) / float(m.group(2)),
                      server_cpu_s=(cpu1 - cpu0) / TICKS)

        if lopi is not None:
            lopi.send_signal(signal.SIGTERM)
            try:
                code = lopi.wait(timeout=120)
            except subprocess.TimeoutExpired:
                lopi.kill()
                fail(f"lopi did not end within 120 s of SIGTERM:\n{lopi_err.read_text()}")
            text = lopi_err.read_text()
            result["lopi_stderr_tail"] = text.strip().splitlines()[-4:]
            if code != 0:
                fail(f"lopi exited {code} after SIGTERM:\n{text}")
            if a.config != ATTACH_TIMING:
                pushed = [tuple(map(int, p)) for p in PUSHED.findall(text)]
                cpu = CPU.search(text)
                if not pushed or not cpu:
                    fail(f"the agent did not say what it pushed and its CPU use:\n{text}")
                result.update(pushed=sum(p for p, _ in pushed), windows=sum(w for _, w in pushed),
                              agent_cpu_s=float(cpu.group(1)), agent_wall_s=float(cpu.group(2)),
                              agent_cpu_pct=float(cpu.group(3)))
    finally:
        if lopi is not None and lopi.poll() is None:
            lopi.kill()
            lopi.wait()
        server.terminate()
        server.wait()

    if a.config in (AGENT_TIMING, AGENT_COUNT):
        # The collector flushes its file every 100 ms: the pushed windows are lines there soon.
        want = before + result["pushed"]
        try:
            wait_for("the collector writing the pushed windows", 30, lambda: lines_in(a.received) >= want)
        except SystemExit as e:
            print(e, file=sys.stderr)
        result["received"] = lines_in(a.received) - before
    if a.config != NATIVE:
        data = sorted(a.work.glob("agent-data/*.lopi") if a.config != ATTACH_TIMING else a.work.glob("attach.*.lopi"))
        if len(data) != 1:
            fail(f"expected one data file in {a.work}, found {[str(d) for d in data]}")
        result.update(report_figures(a.lopi, data[0], a.config == AGENT_TIMING))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
