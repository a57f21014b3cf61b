#!/usr/bin/env python3
"""A service under `lopi agent`: the throughput of a TCP server (server.c, one thread per
connection) loaded by CONNS client connections (client.c, a request and its reply at a time, for
SECONDS), with, interleaved round-robin after one unrecorded warm-up round, the order rotated
each round:

1. the server alone (native);
2. under `lopi agent --match SERVER --push COLLECTOR --every 5s --probe entry,exit`, no --budget:
   the push sets the budget to 2% of CPU time (issue 32's goal: throughput within 5% of native);
3. under the agent with `--probe entry` (counting only);
4. under `lopi attach PID --probe entry,exit`, no push and no budget (every call timed), for
   comparison.

lopi is attached before the load starts and gets SIGTERM after it (agent_run.py runs one of
these). The collector is a real OpenTelemetry Collector (crates/lopi-cli/tests/otel/
build-collector.sh), started once on a free port with its file exporter. Writes
bench/results/agent.md, agent.runs.json, agent.summary.json. Run through run.sh; --help lists the
knobs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import agent_tables as t  # noqa: E402
import harness as h  # noqa: E402
from agent_run import AGENT_COUNT, AGENT_TIMING, ATTACH_TIMING, CONFIGS, NATIVE  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "agent"
BUILD_COLLECTOR = REPO / "crates" / "lopi-cli" / "tests" / "otel" / "build-collector.sh"
FLAGS = ["-O2", "-g", "-pthread"]


def programs(work: Path) -> tuple[Path, Path]:
    """The server and the client, built once (cached), copied under WORK: the agent's --match is
    the server's path there."""
    out = []
    for name in ("server", "client"):
        src = HERE / f"{name}.c"
        built = h.build(f"agent-{name}", [*FLAGS, str(src)], [src])
        dest = work / "bin" / f"lopi-bench-{name}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)
        out.append(dest)
    return out[0], out[1]


def server_work(server: Path) -> str:
    """The server's own work per request, without sockets (`server --selftest`)."""
    p = subprocess.run([str(server), "--selftest", "200000"], capture_output=True, text=True, timeout=120)
    return p.stdout.strip().split("ns_per_request=")[-1].split()[0] if "ns_per_request=" in p.stdout else "?"


class Collector:
    """An OpenTelemetry Collector with an OTLP/HTTP receiver on 127.0.0.1 and a file exporter
    (the config of crates/lopi-cli/tests/common/otel.rs), running until stop()."""

    def __init__(self, binary: Path, work: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.received = work / "received.jsonl"
        self.log = work / "collector.log"
        config = work / "collector.yaml"
        config.write_text(f"""receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{self.port}
exporters:
  file:
    path: {self.received}
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [file]
""")
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [str(binary), f"--config=file:{config}", "--feature-gates=service.profilesSupport"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the collector did not listen on {self.url}: {self.log.read_text()[-1000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def collector_binary() -> tuple[Path | None, str]:
    """(the collector binary, "") or (None, why not)."""
    p = subprocess.run(["bash", str(BUILD_COLLECTOR)], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or not p.stdout.strip():
        return None, f"cannot build the OpenTelemetry Collector ({BUILD_COLLECTOR.name}): {p.stderr.strip()[-200:]}"
    return Path(p.stdout.strip().splitlines()[-1]), ""


def make_variants(a: argparse.Namespace, lopi: Path, server: Path, client: Path, work: Path,
                  collector, skip: dict) -> list[h.Variant]:
    vs = []
    for cfg in CONFIGS:
        run_dir = work / "runs" / cfg
        argv = [sys.executable, str(HERE / "agent_run.py"), cfg, "--lopi", str(lopi), "--server", str(server),
                "--client", str(client), "--work", str(run_dir), "--every", a.every, "--conns", str(a.conns),
                "--seconds", str(a.seconds), "--cpu", str(a.cpu), "--cache", str(work / "cache")]
        if collector is not None:
            argv += ["--url", collector.url, "--received", str(collector.received)]

        def before(idx: int, run_dir=run_dir) -> dict:
            shutil.rmtree(run_dir, ignore_errors=True)
            return {}

        vs.append(h.Variant(cfg, argv, t.seconds_per_request, before=before, after=t.read_run,
                            timeout_s=a.seconds + 600, skip_reason=skip.get(cfg, "")))
    return vs


def measure(a: argparse.Namespace, n: int, work: Path, t_start: float, load_start: str) -> None:
    """The rounds in WORK, then the results' files."""
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    server, client = programs(work)
    work_ns = server_work(server)
    skip: dict[str, str] = {}
    if lopi is None:
        skip = {c: f"lopi not found ({a.lopi})" for c in CONFIGS if c != NATIVE}
    if a.no_attach:
        skip[ATTACH_TIMING] = "left out (--no-attach)"
    col_bin, why = collector_binary()
    collector = None
    if col_bin is not None:
        try:
            collector = Collector(col_bin, work)
        except RuntimeError as e:
            why = str(e)
    for c in (AGENT_TIMING, AGENT_COUNT):
        if collector is None:
            skip.setdefault(c, why)

    h.log(f"=== {a.conns} connections, {a.seconds:.0f} s of load per run, n={n}; "
          f"collector {collector.url if collector else why}")
    variants = make_variants(a, lopi or Path("lopi"), server, client, work, collector, skip)
    try:
        res = h.run_interleaved(variants, n, log=h.log)
    finally:
        if collector is not None:
            collector.stop()

    col_version = h.tool_version([str(col_bin), "--version"]) if col_bin else why
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        ("OpenTelemetry Collector", f"{col_version} ({col_bin})" if col_bin else why),
        ("server, client", f"bench/agent/server.c and client.c, `gcc {' '.join(FLAGS)}`; the server's own work "
                           f"{work_ns} ns per request (`server --selftest`, no sockets, no lopi)"),
        ("scratch directory", f"{work} ({h._cmd(['stat', '-f', '-c', '%T', str(work)])})"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("A service under lopi agent: throughput next to native", "bench/agent/run.sh", a.quick, machine)
    md += t.document(variants, res, n, a, work_ns, h.loadavg(), load_start)
    entries = [h.summary_entry("agent", "agent-server", f"TCP server, {a.conns} connections", v, res, t.LABEL[v.name],
                               t.TOOL[v.name], base=NATIVE) for v in variants]
    for e in entries:
        if e["config"] in (AGENT_TIMING, AGENT_COUNT):
            e["goal"] = {"ratio_max": 1 / t.GOAL, "what": "throughput within 5% of native"}
    raw_meta = {"n": n, "seconds": a.seconds, "conns": a.conns, "every": a.every, "work": str(work), "skipped": skip,
                "server_ns_per_request": work_ns, "collector": str(col_bin or why)}
    h.write_results(a.out, md, "agent", raw_meta, {"agent-server": res}, machine, entries, a.quick)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3 and 8 s of load per run (default n=5, 15 s)")
    ap.add_argument("-n", type=int, help="recorded runs per configuration")
    ap.add_argument("--seconds", type=float, help="seconds of load per run (default 15, quick 8)")
    ap.add_argument("--conns", type=int, default=2, help="client connections, one thread each (default 2)")
    ap.add_argument("--every", default="5s", help="the agent's --every (default 5s)")
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="the one CPU of the server and the client (default: the last; -1: not pinned)")
    ap.add_argument("--no-attach", action="store_true", help="leave out lopi attach --probe entry,exit")
    ap.add_argument("--work", type=Path, help="scratch directory, emptied first and removed at the end (default a "
                    "new /dev/shm/lopi-bench-agent-*, a tmpfs, else under work-real/bench-build/agent/)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "agent.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    a.seconds = a.seconds or (8.0 if a.quick else 15.0)
    t_start, load_start = time.time(), h.loadavg()

    if a.work:
        work = a.work
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    else:  # a directory of this run's own: another run of this benchmark empties its own only
        BUILD.mkdir(parents=True, exist_ok=True)
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(BUILD)
        work = Path(tempfile.mkdtemp(prefix="lopi-bench-agent-", dir=shm))
    try:
        measure(a, n, work, t_start, load_start)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # tmpfs: memory
    return 0


if __name__ == "__main__":
    sys.exit(main())
