#!/usr/bin/env python3
"""Live splicing: `lopi attach PID` on a running, busy process, next to bpftrace uprobes and Frida's
Interceptor attaching to the same process and functions.

The workload (gen_workload.py, built `gcc -O2 -fPIE -pie -pthread`) has 10,000 small non-inlined
functions f0000..f9999 that 2 worker threads call in a loop, one call of each per iteration, for
ever; it keeps its iteration counters in a shared file this script reads at any moment.

Every run starts a fresh workload process, then:
  1. base window: iterations/s for W seconds, no tool;
  2. attach: launch the tool, timed until its probes are live (lopi: its `attached` line; bpftrace:
     its BEGIN probe, which fires once every uprobe is attached; Frida: script.load() returned);
     lopi's own pause figures are parsed from its stderr; the workload's counters are sampled every
     ~1 ms meanwhile (longest gap without a completed iteration);
  3. live window: iterations/s for W seconds with the probes in, after 0.2 s; the code pages are
     compared with the file while live (bytes the tool changed);
  4. detach: lopi after its --duration (2 s), bpftrace on SIGINT, Frida script.unload() +
     session.detach(); timed, counters sampled; the tool's call counts are read;
  5. the workload's r-xp mappings of its binary are compared byte for byte with the file
     (/proc/PID/mem vs the file at the mapping's offset): "code restored";
  6. base window again (the workload must still be running).
ns per hit = (P / rate_live - P / rate_base) / H, rate = iterations/s summed over the worker
threads, P = min(worker threads, CPUs) (the threads run in parallel, so P / rate is the time one
thread takes per iteration), H = probed calls per iteration (functions selected, each called once
per iteration). Each window's rate is its best of 5 sub-windows; rate_base = the better of the two
base windows (other jobs on the machine only slow the workload down).

Configurations, rotated each round: lopi --probe entry on every function (+ entry,exit in full
mode); on a subset (first 100 functions, glob f00*, quick; first 1,000, f0*, full): lopi entry (+
entry,exit, full), bpftrace uprobes (`uprobe:BIN:f00* { @c[probe] = count(); }`), Frida
Interceptor.attach with a JavaScript and with a CModule onEnter. bpftrace removes uprobes one by
one (~0.3 s each here: ~35 s for 100, ~5.5 min for 1,000), so it runs on the subset only, and n=1 in
full mode.

Run through run.sh; `live.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import mmap
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "live"
log = h.log
MAGIC = 0x4C4F50494C495645

ATTACH_RX = re.compile(r"lopi: attached to (\d+) \((\d+) threads?\): (\d+) sites; process paused ([0-9.]+) ms "
                       r"\(([0-9.]+) ms to stop its threads(?:; planned beforehand in ([0-9.]+) ms)?[^)]*\)")
DETACH_RX = re.compile(r"lopi: detached after ([0-9.]+) s: (\d+) sites restored, process paused ([0-9.]+) ms"
                       r"(?:, waited for (\d+) threads? inside probes)?")
BPF_ATTACHING_RX = re.compile(r"Attaching (\d+) probes")
BPF_ROW = re.compile(r"^@c\[uprobe:[^\]]*:([^:\]]+)\]: (\d+)$", re.M)


# ---------------------------------------------------------------- the workload


class Counters:
    """The workload's shared counter file (see gen_workload.py)."""

    def __init__(self, path: Path, timeout: float = 10.0):
        deadline = time.time() + timeout
        while True:
            try:
                if path.stat().st_size >= 4096:
                    f = path.open("rb")
                    self.mm = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
                    f.close()
                    if struct.unpack_from("<Q", self.mm, 0)[0] == MAGIC:
                        break
                    self.mm.close()
            except (FileNotFoundError, ValueError):
                pass
            if time.time() > deadline:
                raise RuntimeError(f"the workload did not set up {path} within {timeout:.0f} s")
            time.sleep(0.01)
        self.threads, self.calls_per_iter, self.pid = struct.unpack_from("<QQQ", self.mm, 8)

    def total(self) -> int:
        return sum(struct.unpack_from("<Q", self.mm, 64 * (1 + t))[0] for t in range(self.threads))

    def sample(self) -> tuple[float, int]:
        return time.perf_counter(), self.total()

    def rate(self, seconds: float, parts: int = 5) -> float:
        """Iterations per second (all workers): the best of `parts` consecutive sub-windows of
        `seconds` in all. Other jobs on the machine only ever slow the workload down, so the fastest
        sub-window is the least disturbed estimate (the same rule for the baseline and the probes)."""
        best = 0.0
        t0, c0 = self.sample()
        for _ in range(parts):
            time.sleep(seconds / parts)
            t1, c1 = self.sample()
            best = max(best, (c1 - c0) / (t1 - t0))
            t0, c0 = t1, c1
        return best


class Sampler:
    """Samples the counters every ~1 ms while a phase is on; gap() = the longest time during which the
    total did not move (no worker completed an iteration), from the samples of that phase."""

    def __init__(self, counters: Counters, period: float = 0.001):
        self.c, self.period = counters, period
        self.on = threading.Event()
        self.stop_ev = threading.Event()
        self.samples: list[tuple[float, int]] = []
        self.lock = threading.Lock()
        self.th = threading.Thread(target=self._loop, daemon=True)
        self.th.start()

    def _loop(self) -> None:
        while not self.stop_ev.is_set():
            if not self.on.wait(0.05):
                continue
            s = self.c.sample()
            with self.lock:
                self.samples.append(s)
            time.sleep(self.period)

    def start(self) -> None:
        with self.lock:
            self.samples = []
        self.on.set()

    def stop(self) -> Optional[float]:
        """Ends the phase: the longest run of samples with the same total, in seconds (None: <2 samples)."""
        self.on.clear()
        with self.lock:
            s = list(self.samples)
        if len(s) < 2:
            return None
        best, start = 0.0, 0
        for i in range(1, len(s)):
            if s[i][1] != s[start][1]:
                start = i
            else:
                best = max(best, s[i][0] - s[start][0])
        return best

    def close(self) -> None:
        self.stop_ev.set()
        self.on.set()
        self.th.join(1)


class Workload:
    def __init__(self, binary: Path, datadir: Path, env: Optional[dict] = None):
        datadir.mkdir(parents=True, exist_ok=True)
        self.binary = binary
        cnt = datadir / "counters"
        cnt.unlink(missing_ok=True)
        self.p = subprocess.Popen([str(binary), str(cnt)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=dict(os.environ, **(env or {})))
        try:
            self.c = Counters(cnt)
        except RuntimeError:
            self.kill()
            raise
        self.pid = self.p.pid
        self.sampler = Sampler(self.c)

    def alive(self) -> bool:
        return self.p.poll() is None

    def death(self) -> str:
        rc = self.p.poll()
        if rc is None:
            return ""
        return f"the workload died ({'signal ' + str(-rc) if rc < 0 else 'exit ' + str(rc)}{self.kernel_note()})"

    def kernel_note(self) -> str:
        """Where the kernel saw the fault (`segfault at ... in OBJECT`), from dmesg when readable."""
        try:
            out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
        hits = [ln for ln in out.splitlines() if f"[{self.pid}]: segfault" in ln]
        m = re.search(r"segfault at (\S+) ip (\S+) .* in (\S+?)\[", hits[-1]) if hits else None
        return f"; kernel: segfault at {m.group(1)}, ip {m.group(2)} in {m.group(3)}" if m else ""

    def kill(self) -> None:
        if hasattr(self, "sampler"):
            self.sampler.close()
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()

    def code_diff(self) -> tuple[int, int, str]:
        """(bytes that differ, bytes compared, where the first difference is) between the r-xp
        mappings of the workload's binary in /proc/PID/maps (read from /proc/PID/mem) and the file
        at the mappings' offsets."""
        real = os.path.realpath(self.binary)
        maps = []
        for line in Path(f"/proc/{self.pid}/maps").read_text().splitlines():
            f = line.split(None, 5)
            if len(f) == 6 and f[5] == real and "x" in f[1]:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                maps.append((lo, hi, int(f[2], 16)))
        if not maps:
            raise RuntimeError(f"no executable mapping of {real} in /proc/{self.pid}/maps")
        differ = compared = 0
        first = ""
        with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem, open(real, "rb") as fil:
            for lo, hi, off in maps:
                fil.seek(off)
                want = fil.read(hi - lo)
                mem.seek(lo)
                got = mem.read(len(want))
                compared += len(want)
                if got != want:
                    d = [i for i in range(len(want)) if got[i] != want[i]]
                    differ += len(d)
                    if not first:
                        first = f"file offset 0x{off + d[0]:x}"
        return differ, compared, first


# ---------------------------------------------------------------- build and functions


def build_workload(n_funcs: int, threads: int) -> Path:
    src = BUILD / "live_workload.c"
    subprocess.run([sys.executable, str(HERE / "gen_workload.py"), "--functions", str(n_funcs),
                    "--threads", str(threads), str(src)], check=True)
    return h.build("live_workload", ["-O2", "-fPIE", "-pie", "-pthread", str(src)], [src], build_dir=BUILD)


def functions(binary: Path) -> dict[str, int]:
    """{name: size} of the function symbols (with a size) of the binary."""
    p = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True, text=True, check=True)
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in ("t", "T") and int(f[1], 16) > 0:
            out[f[3]] = int(f[1], 16)
    return out


# ---------------------------------------------------------------- one run of one configuration


def base_rate(wl: Workload, window: float) -> float:
    return wl.c.rate(window)


def line_reader(stream, lines: list, counters: Counters, on_line: Optional[Callable[[str], None]] = None):
    """Thread: every line of `stream` with its arrival time and the workload's counter then."""

    def run() -> None:
        for line in iter(stream.readline, ""):
            t, c = counters.sample()
            lines.append((t, c, line.rstrip("\n")))
            if on_line:
                on_line(line)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def wait_for(lines: list, pred, proc: Optional[subprocess.Popen], timeout: float):
    """The first (t, counter, line) of `lines` matching pred, waiting up to timeout (None: the process
    ended first, or timeout)."""
    deadline = time.perf_counter() + timeout
    i = 0
    while True:
        while i < len(lines):
            if pred(lines[i][2]):
                return lines[i]
            i += 1
        if proc is not None and proc.poll() is not None:
            time.sleep(0.05)  # lines still in the pipe
            while i < len(lines):
                if pred(lines[i][2]):
                    return lines[i]
                i += 1
            return None
        if time.perf_counter() >= deadline:
            return None
        time.sleep(0.002)


class RunError(Exception):
    pass


def run_lopi(cfg: dict, wl: Workload, lopi: Path, window: float, datadir: Path) -> dict:
    out = datadir / "record.lopi"
    if out.is_dir():
        shutil.rmtree(out)
    out.unlink(missing_ok=True)
    argv = [str(lopi), "attach", str(wl.pid), "--probe", cfg["probe"], "--duration", cfg["duration"]]
    for g in cfg["globs"]:
        argv += ["--functions", g]
    lines: list = []
    r: dict = {}
    wl.sampler.start()
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, LOPI_OUTPUT=str(out)))
    reader = line_reader(p.stderr, lines, wl.c)
    try:
        hit = wait_for(lines, ATTACH_RX.search, p, 120)
        r["attach_stall_s"] = wl.sampler.stop()
        if not hit:
            raise RunError(f"no `attached` line from lopi (exit {p.poll()}): {tail(lines)}" + death(wl))
        t_live, c_live, line = hit
        m = ATTACH_RX.search(line)
        r.update(attach_s=t_live - t0, threads=int(m.group(2)), sites=int(m.group(3)),
                 pause_ms=float(m.group(4)), stop_ms=float(m.group(5)),
                 plan_ms=float(m.group(6)) if m.group(6) else None)
        time.sleep(0.2)
        r["live_bytes_changed"] = wl.code_diff()[0]
        r["rate_live"] = wl.c.rate(window)
        wl.sampler.start()
        try:
            p.wait(timeout=float(cfg["duration"].rstrip("s")) + 120)
        except subprocess.TimeoutExpired:
            p.kill()
            raise RunError("lopi did not detach within its duration + 120 s")
        r["detach_stall_s"] = wl.sampler.stop()
        reader.join(2)
        hit = wait_for(lines, DETACH_RX.search, None, 0)
        if not hit:
            raise RunError(f"no `detached` line from lopi (exit {p.returncode}): {tail(lines)}" + death(wl))
        t_off, c_off, line = hit
        m = DETACH_RX.search(line)
        r.update(detach_ms=float(m.group(3)), restored=int(m.group(2)),
                 waited_threads=int(m.group(4) or 0), detached_after_s=float(m.group(1)))
        r["expected_calls"] = (c_off - c_live) * cfg["hits"]
        rep = h.lopi_report(lopi, out)
        per_fn = rep["per_fn"]
        sel = [per_fn.get(f, 0) for f in cfg["fns"]]
        r.update(calls=sum(sel), calls_min=min(sel), calls_max=max(sel), report_functions=rep["functions"],
                 report_incomplete=rep["incomplete"])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return r


def run_static(cfg: dict, lopi: Path, binary: Path, window: float, datadir: Path) -> dict:
    """The same probes written into a copy of the file (`lopi rewrite`), in a process of its own: the
    throughput the live probes should match."""
    rewritten = BUILD / f"live_workload.rewritten-{cfg['probe'].replace(',', '-')}"
    if not rewritten.exists() or rewritten.stat().st_mtime < max(binary.stat().st_mtime, lopi.stat().st_mtime):
        err, _, _ = h.lopi_rewrite(lopi, binary, rewritten, ["--probe", cfg["probe"]])
        if err:
            raise RunError(err)
    out = datadir / "static.lopi"
    out.unlink(missing_ok=True)
    wl = Workload(rewritten, datadir / "static", env={"LOPI_OUTPUT": str(out)})
    try:
        time.sleep(0.3)
        r = {"rate_live": wl.c.rate(window)}
        if not wl.alive():
            raise RunError(wl.death())
        iterations = wl.c.total()
    finally:
        wl.kill()
    per_fn = h.lopi_report(lopi, out)["per_fn"]
    sel = [per_fn.get(f, 0) for f in cfg["fns"]]
    # The process is killed mid-iteration: a few calls more than whole iterations.
    r.update(calls=sum(sel), calls_min=min(sel), calls_max=max(sel), expected_calls=iterations * cfg["hits"])
    return r


def run_bpftrace(cfg: dict, wl: Workload, window: float, datadir: Path) -> dict:
    prog = (f"uprobe:{os.path.realpath(wl.binary)}:{cfg['globs'][0]} {{ @c[probe] = count(); }}\n"
            'BEGIN { printf("lopi-bench: probes live\\n"); }\n')
    limit = str(len(cfg["fns"]) + 64)
    lines: list = []
    r: dict = {}
    wl.sampler.start()
    t0 = time.perf_counter()
    p = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, BPFTRACE_MAX_PROBES=limit, BPFTRACE_MAX_BPF_PROGS=limit))
    reader = line_reader(p.stdout, lines, wl.c)
    try:
        hit = wait_for(lines, lambda s: "lopi-bench: probes live" in s, p, 900)
        r["attach_stall_s"] = wl.sampler.stop()
        if not hit:
            raise RunError(f"bpftrace did not get its probes live (exit {p.poll()}): {tail(lines)}" + death(wl))
        t_live, c_live, _ = hit
        att = wait_for(lines, BPF_ATTACHING_RX.search, None, 0)
        r.update(attach_s=t_live - t0, sites=int(BPF_ATTACHING_RX.search(att[2]).group(1)) - 1 if att else None)
        if att:
            r["announce_s"] = att[0] - t0  # "Attaching N probes..." printed
        time.sleep(0.2)
        r["live_bytes_changed"] = wl.code_diff()[0]
        r["rate_live"] = wl.c.rate(window)
        wl.sampler.start()
        t_int, c_int = wl.c.sample()
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            p.kill()
            raise RunError("bpftrace did not exit within 30 min of SIGINT")
        t_exit, c_exit = wl.c.sample()
        r["detach_s"] = t_exit - t_int
        r["detach_stall_s"] = wl.sampler.stop()
        reader.join(5)
        text = "\n".join(ln for _, _, ln in lines)
        per_fn = {m.group(1): int(m.group(2)) for m in BPF_ROW.finditer(text)}
        if not per_fn:
            raise RunError(f"no `@c[...]` counts in bpftrace's output (exit {p.returncode}): {tail(lines)}")
        sel = [per_fn.get(f, 0) for f in cfg["fns"]]
        # the uprobes are removed one by one after SIGINT and count until then: the calls expected are
        # those from BEGIN to bpftrace's exit (an upper bound), those up to SIGINT a lower one
        r.update(calls=sum(sel), calls_min=min(sel), calls_max=max(sel), expected_calls=(c_exit - c_live) * cfg["hits"],
                 expected_calls_to_sigint=(c_int - c_live) * cfg["hits"], exit_code=p.returncode,
                 detach_errors=sum("failed to detach probe" in ln for _, _, ln in lines))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return r


def run_frida(cfg: dict, wl: Workload, window: float, datadir: Path) -> dict:
    import frida
    source = (f"const MODE = {json.dumps(cfg['mode'])};\nconst FN_NAMES = {json.dumps(cfg['fns'])};\n"
              + (HERE.parent / "lib" / "frida_counters.js").read_text() + (HERE / "frida_live.js").read_text())
    r: dict = {}
    errors: list[str] = []
    wl.sampler.start()
    t0 = time.perf_counter()
    session = script = None
    try:
        session = frida.attach(wl.pid)
        r["inject_s"] = time.perf_counter() - t0
        script = session.create_script(source)
        script.on("message", lambda msg, data: errors.append(msg.get("description", str(msg)))
                  if msg.get("type") == "error" else None)
        script.load()
        t_live, c_live = wl.c.sample()
        r["attach_stall_s"] = wl.sampler.stop()
        r["attach_s"] = t_live - t0
        info = script.exports_sync.info()
        r.update(sites=info["attached"], found=info["found"], refused=len(info["refused"]),
                 refused_example=next(iter(info["refused"].items()), None))
        if errors:
            raise RunError(f"script error: {errors[0]}")
        time.sleep(0.2)
        r["live_bytes_changed"] = wl.code_diff()[0]
        r["rate_live"] = wl.c.rate(window)
        wl.sampler.start()
        t_c, c_c = wl.c.sample()
        counts = script.exports_sync.counts()
        t1 = time.perf_counter()
        script.unload()
        script = None
        session.detach()
        session = None
        r["detach_s"] = time.perf_counter() - t1
        time.sleep(0.05)
        r["detach_stall_s"] = wl.sampler.stop()
        r.update(calls=counts["total"], calls_min=counts["min"], calls_max=counts["max"],
                 expected_calls=(c_c - c_live) * r["sites"])
    except RunError:
        raise
    except Exception as e:  # frida.*Error: not permitted, not supported, RPC errors...
        raise RunError(f"frida: {type(e).__name__}: {e}" + death(wl))
    finally:
        wl.sampler.stop()
        for obj, fn in ((script, "unload"), (session, "detach")):
            if obj is not None:
                try:
                    getattr(obj, fn)()
                except Exception:
                    pass
    return r


def tail(lines: list) -> str:
    text = [ln for _, _, ln in lines if ln.strip()]
    errs = [ln for ln in text if "rror" in ln and "RLIMIT_MEMLOCK" not in ln]
    return ((errs or text or ["no output"])[-1])[:200]


def death(wl: Workload) -> str:
    d = wl.death()
    return f"; {d}" if d else ""


def run_config(cfg: dict, binary: Path, lopi: Optional[Path], window: float, cpus: int, idx: int) -> dict:
    """One run of one configuration in a fresh workload process."""
    datadir = BUILD / "runs" / f"{cfg['key']}-{idx}"
    shutil.rmtree(datadir, ignore_errors=True)
    wl = Workload(binary, datadir)
    r: dict = {"config": cfg["key"], "ok": False}
    try:
        time.sleep(0.3)  # threads started, code warm
        r["rate_base_before"] = base_rate(wl, window)
        if cfg["tool"] == "lopi":
            r.update(run_lopi(cfg, wl, lopi, window, datadir))
        elif cfg["tool"] == "static":
            r.update(run_static(cfg, lopi, binary, window, datadir))
        elif cfg["tool"] == "bpftrace":
            r.update(run_bpftrace(cfg, wl, window, datadir))
        else:
            r.update(run_frida(cfg, wl, window, datadir))
        if not wl.alive():
            raise RunError(wl.death() + " during the run")
        differ, compared, first = wl.code_diff()
        r.update(code_bytes_compared=compared, code_bytes_differ=differ, code_first_diff=first,
                 code_restored=differ == 0)
        r["rate_base_after"] = base_rate(wl, window)
        if not wl.alive() or r["rate_base_after"] <= 0:
            raise RunError((wl.death() or "the workload stopped making progress") + " after the tool detached")
        threads = wl.c.threads
        par = min(threads, cpus)
        rb = max(r["rate_base_before"], r["rate_base_after"])
        r.update(rate_base=rb, worker_threads=threads, parallel=par, hits_per_iter=cfg["hits"],
                 ns_per_hit=(par / r["rate_live"] - par / rb) / cfg["hits"] * 1e9,
                 base_noise_ns=abs(par / r["rate_base_before"] - par / r["rate_base_after"]) / cfg["hits"] * 1e9,
                 ns_per_call_base=par / rb / wl.c.calls_per_iter * 1e9)
        r["ok"] = True
    except RunError as e:
        r["error"] = str(e)
    except Exception as e:
        r["error"] = f"{type(e).__name__}: {e}" + death(wl)
    finally:
        wl.kill()
    return r


# ---------------------------------------------------------------- configurations and tables


def make_configs(quick: bool, all_fns: list[str], subset_glob: str, skip: dict) -> list[dict]:
    sub = [f for f in all_fns if fnmatch.fnmatchcase(f, subset_glob)]
    cfgs = []

    def add(key, tool, label, fns, globs, **kw):
        cfgs.append(dict(key=key, tool=tool, label=label, fns=fns, globs=globs, hits=len(fns),
                         set=("all" if fns is all_fns else "subset"), skip=skip.get(tool, ""), **kw))

    add("lopi-entry-all", "lopi", "lopi attach --probe entry", all_fns, [], probe="entry", duration="2s")
    add("static-entry-all", "static", "lopi rewrite --probe entry (static, for comparison)", all_fns, [], probe="entry")
    if not quick:
        add("lopi-timing-all", "lopi", "lopi attach --probe entry,exit", all_fns, [], probe="entry,exit",
            duration="2s")
        add("static-timing-all", "static", "lopi rewrite --probe entry,exit (static, for comparison)", all_fns, [],
            probe="entry,exit")
    add("lopi-entry-sub", "lopi", "lopi attach --probe entry", sub, [subset_glob], probe="entry", duration="2s")
    if not quick:
        add("lopi-timing-sub", "lopi", "lopi attach --probe entry,exit", sub, [subset_glob], probe="entry,exit",
            duration="2s")
    add("bpftrace-sub", "bpftrace", "bpftrace uprobes, @c[probe] = count()", sub, [subset_glob])
    add("frida-js-sub", "frida", "frida Interceptor.attach, JavaScript onEnter", sub, [subset_glob], mode="js")
    add("frida-cmodule-sub", "frida", "frida Interceptor.attach, CModule onEnter", sub, [subset_glob],
        mode="cmodule")
    for c in cfgs:
        c["functions_text"] = ("every function" if c["set"] == "all" else f"{subset_glob}: {len(sub):,}")
    return cfgs


def med(vals: list) -> Optional[float]:
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None


def rng(vals: list, fmt: Callable[[float], str]) -> str:
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    if len(v) == 1:
        return fmt(v[0])
    return f"{fmt(statistics.median(v))} [{fmt(min(v))}–{fmt(max(v))}]"


def ms(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def secs(x: float) -> str:
    return f"{x:.3g} s" if x < 100 else f"{x:,.0f} s"


def summarize(cfg: dict, runs: list[dict]) -> dict:
    ok = [r for r in runs if r["ok"]]
    s = {"key": cfg["key"], "tool": cfg["tool"], "label": cfg["label"], "functions": cfg["functions_text"],
         "hits_per_iter": cfg["hits"], "n": len(ok), "runs": len(runs)}
    if cfg["skip"]:
        return dict(s, status="skipped", reason=cfg["skip"])
    bad = [r for r in runs if not r["ok"]]
    if bad:
        s["failed"] = bad[0]["error"]
    if not ok:
        return dict(s, status="failed", reason=bad[0]["error"] if bad else "not run")
    s["status"] = "ok"
    for k in ("attach_s", "pause_ms", "stop_ms", "plan_ms", "attach_stall_s", "detach_ms", "detach_s",
              "detach_stall_s", "ns_per_hit", "base_noise_ns", "ns_per_call_base", "rate_base", "rate_live",
              "sites", "calls", "expected_calls"):
        vals = [r.get(k) for r in ok if r.get(k) is not None]
        if vals:
            s[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}
    s["calls_min_values"] = [r["calls_min"] for r in ok if "calls_min" in r]
    s["calls_max_values"] = [r["calls_max"] for r in ok if "calls_max" in r]
    s["code_restored"] = all(r["code_restored"] for r in ok)
    s["code_not_restored_runs"] = sum(not r["code_restored"] for r in ok)
    s["live_bytes_changed"] = med([r.get("live_bytes_changed") for r in ok])
    ratios = [r["calls"] / r["expected_calls"] for r in ok if r.get("expected_calls")]
    if ratios:
        s["counted_over_expected"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    s["waited_threads"] = [r.get("waited_threads") for r in ok if "waited_threads" in r]
    s["detach_errors"] = med([r.get("detach_errors") for r in ok])
    s["refused"] = next((r.get("refused_example") for r in ok if r.get("refused")), None)
    return s


def xfmt(r: float) -> str:
    return f"{r:,.0f}" if r >= 100 else f"{r:.3g}"


def vals(s: dict, k: str, scale: float = 1.0) -> list:
    return [v * scale for v in s[k]["values"]] if k in s else []


def table(summ: list[dict], lopi_ref: Optional[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    header = ["tool", "functions (sites)", "attach: launch → probes live", "pause while attaching, ms",
              "detach, ms", "ns per hit", "per hit x lopi", "calls counted / expected", "code restored",
              "notes"]
    rows, notes_all = [], []
    by_key = {s["key"]: s for s in summ}
    for s in summ:
        if s["status"] != "ok":
            rows.append([s["label"], s["functions"], s["status"], "-", "-", "-", "-", "-", "-", s.get("reason", "")])
            continue
        notes = []
        sites = int(s["sites"]["median"]) if "sites" in s else None
        fn = f"{s['functions']} ({sites:,} sites)" if sites is not None else s["functions"]
        attach = rng(vals(s, "attach_s"), secs)
        if s["tool"] == "lopi":
            pause = (f"{rng(vals(s, 'pause_ms'), ms)} (stop threads {rng(vals(s, 'stop_ms'), ms)}; "
                     f"stall seen {rng(vals(s, 'attach_stall_s', 1e3), ms)})")
            detach = f"{rng(vals(s, 'detach_ms'), ms)} paused (stall seen {rng(vals(s, 'detach_stall_s', 1e3), ms)})"
            if "plan_ms" in s:
                notes.append(f"planned before stopping the process: {rng(vals(s, 'plan_ms'), ms)} ms")
            waited = [w for w in s["waited_threads"] if w]
            if waited:
                notes.append(f"waited for threads inside probes at detach in {len(waited)} of {s['n']} runs")
        elif s["tool"] == "static":
            attach = "- (rewritten file)"
            pause = detach = "-"
            notes.append("the rewritten copy of the workload, each run in a process of its own; ns per hit "
                         "against the original's throughput measured just before")
        else:
            pause = f"none reported (stall seen {rng(vals(s, 'attach_stall_s', 1e3), ms)})"
            detach = (f"{rng(vals(s, 'detach_s', 1e3), ms)} to detach (stall seen "
                      f"{rng(vals(s, 'detach_stall_s', 1e3), ms)})")
        nsh = rng(vals(s, "ns_per_hit"), h.fmt_ns)
        noise = s.get("base_noise_ns", {}).get("median")
        noisy = "ns_per_hit" in s and (s["ns_per_hit"]["median"] <= 0
                                       or (noise is not None and s["ns_per_hit"]["median"] < 2 * noise))
        if noisy:
            notes.append(f"ns per hit within the noise (the process's two baseline windows differ by "
                         f"{h.fmt_ns(noise or 0)} ns per hit)")
        same = by_key.get("lopi-entry-" + ("all" if s["key"].endswith("-all") else "sub"))
        if s["tool"] != "lopi" and same and same["status"] == "ok" and "attach_s" in s:
            attach += f" (x{xfmt(s['attach_s']['median'] / same['attach_s']['median'])} lopi)"
        ratio = "-"
        lopi_sub = s["tool"] == "lopi" and s["key"].endswith("-sub")  # 1% (10%) of the calls: imprecise
        if (lopi_ref and "ns_per_hit" in s and not noisy and not lopi_sub and s["key"] != lopi_ref["key"]
                and lopi_ref["ns_per_hit"]["median"] > 0):
            ratio = f"x{xfmt(s['ns_per_hit']['median'] / lopi_ref['ns_per_hit']['median'])}"
        elif lopi_ref and s["key"] == lopi_ref["key"]:
            ratio = "x1 (reference)"
        if "counted_over_expected" in s:
            c = s["counted_over_expected"]
            counted = (f"{h.fmt_int(int(s['calls']['median']))} / {h.fmt_int(int(s['expected_calls']['median']))} "
                       f"({c['median']:.3f}" + (f", {c['min']:.3f}–{c['max']:.3f})" if s["n"] > 1 else ")"))
        else:
            counted = "-"
        restored = "yes" if s["code_restored"] else f"NO ({s['code_not_restored_runs']} of {s['n']} runs)"
        if s["tool"] == "static":
            restored = "-"
        if s.get("live_bytes_changed") is not None:
            restored += f" ({int(s['live_bytes_changed']):,} bytes differed while live)"
        if s["tool"] == "bpftrace" and "calls" in s:
            notes.append("bpftrace removes its uprobes one by one after SIGINT, and they count until removed: "
                         "expected = iterations from BEGIN to its exit × H, an upper bound (per function "
                         f"{rng([r for r in s['calls_min_values']], h.fmt_int)} to "
                         f"{rng([r for r in s['calls_max_values']], h.fmt_int)} calls)")
        if s.get("detach_errors"):
            notes.append(f"bpftrace printed {int(s['detach_errors']):,} `failed to detach probe` errors "
                         "(no tracefs at /sys/kernel/tracing); the uprobes were removed all the same (code check)")
        if s.get("refused"):
            notes.append(f"Interceptor refused some functions (e.g. `{s['refused'][0]}`: {s['refused'][1]})")
        if "failed" in s:
            notes.append(f"FAILED in {s['runs'] - s['n']} of {s['runs']} runs (figures from the others): {s['failed']}")
        notes.append(f"n={s['n']}")
        rows.append([s["label"], fn, attach, pause, detach, nsh, ratio, counted, restored, "; ".join(notes)])
    return header, rows, notes_all


def versions(lopi: Optional[Path]) -> list[tuple[str, str]]:
    frida = h._cmd([sys.executable, "-c", "import frida; print(frida.__version__)"]) or "not installed"
    lv = h._cmd([str(lopi), "--version"]) if lopi else ""
    return [("lopi", lv or "not found"),
            ("bpftrace", h.tool_version(["bpftrace", "--version"])),
            ("frida", f"frida {frida} (Python bindings, PyPI)" if frida != "not installed" else frida)]


def preflight(lopi: Optional[Path], lopi_path: Path) -> dict[str, str]:
    skip = {}
    if not lopi:
        skip["lopi"] = f"lopi binary not found ({lopi_path})"
    if not h.which("bpftrace"):
        skip["bpftrace"] = "bpftrace not installed (apt-get install bpftrace failed)"
    try:
        import frida  # noqa: F401
    except ImportError as e:
        skip["frida"] = f"frida not installed (pip): {e}"
    for tool in ("lopi", "bpftrace", "frida"):
        log(f"{tool}: {'ready' if tool not in skip else 'skipped: ' + skip[tool]}")
    return skip


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3, subset f00* (100 functions), entry probes only")
    ap.add_argument("-n", type=int, help="runs per configuration (default 5, quick 3)")
    ap.add_argument("--bpftrace-n", type=int, help="runs of bpftrace (default: n in quick mode, 1 in full mode: removing 1,000 uprobes "
                    "takes ~5 min here)")
    ap.add_argument("--subset", help="glob of the subset every tool probes (default f0*, quick f00*)")
    ap.add_argument("--functions", type=int, default=10_000, help="functions in the workload (default 10000)")
    ap.add_argument("--threads", type=int, default=2, help="worker threads of the workload (default 2)")
    ap.add_argument("--window", type=float, help="seconds of each throughput window (default 1.5, quick 1.0)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/live.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    n_bpf = a.bpftrace_n if a.bpftrace_n is not None else (n if a.quick else 1)
    subset = a.subset or ("f00*" if a.quick else "f0*")
    window = a.window or (1.0 if a.quick else 1.5)
    cpus = os.cpu_count() or 1
    t_start = time.time()
    load_start = h.loadavg()
    BUILD.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(BUILD / "runs", ignore_errors=True)

    binary = build_workload(a.functions, a.threads)
    fns = functions(binary)
    all_fns = sorted(f for f in fns if re.fullmatch(r"f\d+", f))
    if len(all_fns) != a.functions:
        raise SystemExit(f"{binary}: {len(all_fns)} f-functions, expected {a.functions}")
    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    skip = preflight(lopi, a.lopi)
    if n_bpf <= 0 and "bpftrace" not in skip:
        skip["bpftrace"] = "not run (--bpftrace-n 0)"
    cfgs = make_configs(a.quick, all_fns, subset, skip)
    sub_n = next(c["hits"] for c in cfgs if c["set"] == "subset")
    if sub_n == 0:
        raise SystemExit(f"--subset {subset} selects no function")
    log(f"workload {binary.name}: {len(all_fns):,} functions, {a.threads} worker threads; subset {subset} = "
        f"{sub_n:,} functions; n={n} (bpftrace {n_bpf}), windows of {window} s")

    runs: dict[str, list[dict]] = {c["key"]: [] for c in cfgs}
    failed: set[str] = set()
    active = [c for c in cfgs if not c["skip"]]
    idx = 0
    for rnd in range(n):
        k = rnd % max(1, len(active))
        order = active[k:] + active[:k]
        line = []
        for c in order:
            # a configuration whose first run fails (cannot run here) is not run again; later
            # failures (a crash of the workload) are counted and the configuration goes on
            if c["key"] in failed or (c["tool"] == "bpftrace" and rnd >= n_bpf):
                continue
            t0 = time.time()
            r = run_config(c, binary, lopi, window, cpus, idx)
            idx += 1
            r["round"], r["wall_s"] = rnd, time.time() - t0
            runs[c["key"]].append(r)
            if r["ok"] and c["tool"] == "static":
                line.append(f"{c['key']}: {h.fmt_ns(r['ns_per_hit'])} ns/hit")
            elif r["ok"]:
                extra = (f"pause {r['pause_ms']:.1f} ms, detach {r['detach_ms']:.1f} ms" if c["tool"] == "lopi"
                         else f"detach {r['detach_s']:.2f} s")
                line.append(f"{c['key']}: attach {r['attach_s']:.2f} s, {extra}, {h.fmt_ns(r['ns_per_hit'])} ns/hit, "
                            f"code restored: {'yes' if r['code_restored'] else 'no'}")
            else:
                if not any(x["ok"] for x in runs[c["key"]]):
                    failed.add(c["key"])
                line.append(f"{c['key']}: FAILED ({r['error']})")
            log(f"  round {rnd + 1}/{n}: {line[-1]}")

    summ = [summarize(c, runs[c["key"]]) for c in cfgs]
    ref = next((s for s in summ if s["key"] == "lopi-entry-all" and s["status"] == "ok" and "ns_per_hit" in s), None)
    header, rows, _ = table(summ, ref)
    by_key_summ = {x["key"]: x for x in summ}
    base = [r for rs in runs.values() for r in rs if r["ok"]]
    base_rate_txt = rng([r["rate_base"] for r in base], lambda x: f"{x:,.0f}")
    base_call_txt = rng([r["ns_per_call_base"] for r in base], lambda x: f"{x:.3g}")
    restored_all = all(s.get("code_restored", True) for s in summ if s["status"] == "ok")

    sizes = [fns[f] for f in all_fns]
    fn_size = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
    code = [r["code_bytes_compared"] for r in base if "code_bytes_compared" in r]
    code_kb = f"{code[0] / 1000:,.0f}" if code else "?"
    bpf = by_key_summ.get("bpftrace-sub", {})
    bpf_each = (f"{bpf['detach_s']['min'] / bpf['sites']['median']:.2g}–{bpf['detach_s']['max'] / bpf['sites']['median']:.2g}"
                if bpf.get("status") == "ok" and "detach_s" in bpf and bpf.get("sites", {}).get("median") else "")
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_info),
        *versions(lopi),
        *h.load_and_time(load_start, t_start),
    ])
    run_id = os.environ.get("LOPI_BENCH_RUN_ID", "") or f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"
    md = [
        *h.results_head("Live splicing: lopi attach next to bpftrace and Frida on a running process",
                        "bench/live/run.sh", a.quick, machine),
        f"- run id: {run_id}",
        "",
        "## Method",
        "",
        f"- Workload: `bench/live/gen_workload.py` → {len(all_fns):,} distinct `noinline` functions "
        f"`f{'0' * (len(all_fns[-1]) - 1)}`…`{all_fns[-1]}` (a shift, a multiply, an add; {fn_size} bytes each), "
        f"called in order in a loop by {a.threads} worker threads, for ever; built `gcc -O2 -fPIE -pie -pthread`. "
        "One iteration = one call of every function; the workload counts its iterations in a shared file "
        "read without disturbing it. Uninstrumented: "
        f"{base_rate_txt} iterations/s (all workers), i.e. {base_call_txt} ns per call per thread (the "
        f"code is {code_kb} kB: calls miss the L1 instruction cache).",
        f"- Every run uses a fresh workload process: {window:g} s throughput window → attach (timed from "
        "launching the tool until its probes are live: lopi's `attached` line; bpftrace's `BEGIN` probe, "
        "which fires once every uprobe is attached; Frida's `script.load()` returning, after `frida.attach(pid)` "
        f"injected its agent) → 0.2 s → {window:g} s throughput window with the probes in → detach (lopi after "
        "`--duration 2s`; bpftrace on SIGINT until it exits; Frida `script.unload()` + `session.detach()`) → code "
        f"check → {window:g} s throughput window. Configurations rotated each round; n={n} runs each "
        f"(bpftrace {n_bpf}).",
        f"- Functions: all = every function of the executable (lopi's default; {len(all_fns):,} f-functions + the "
        f"C runtime's and `main`/`worker`, which are not called in the loop); subset = `{subset}` = the first "
        f"{sub_n:,} functions ({sub_n / len(all_fns):.0%} of the calls), the same for every tool: `lopi attach "
        f"--functions '{subset}'`, `bpftrace -e 'uprobe:BIN:{subset} {{ @c[probe] = count(); }}'`, Frida "
        "`Interceptor.attach` on the symbols of those names (`Module.enumerateSymbols`). bpftrace (v0.17 here) "
        "attaches and removes its uprobes one at a time" + (f", and removing them took {bpf_each} s per uprobe here" if bpf_each else "")
        + ", so it is not run on all functions.",
        "- Pause: lopi's own figures (`process paused X ms (Y ms to stop its threads)` at attach, `process "
        "paused Z ms` at detach). *Stall seen*: the longest time the workload's counters did not move while the "
        "tool attached or detached, sampled every ~1 ms from outside: the time every worker thread was stopped "
        "at once (lopi's pause counts from stopping the first thread, so a short pause can show no stall), but "
        "also just slow iterations once probes are live (an iteration of the subset under bpftrace takes "
        "H × its cost per hit).",
        "- ns per hit = (P / rate_live − P / rate_base) / H. rate = iterations/s summed over the worker threads; "
        f"P = min(worker threads, CPUs) = {min(a.threads, cpus)}, so P / rate = the time one thread takes per "
        "iteration; H = probed calls per iteration (every selected function is called once per iteration). "
        "Each window's rate is the best of its 5 sub-windows and rate_base the better of the process's two "
        "uninstrumented windows: other jobs on this 2-CPU machine only ever slow the workload down, so the "
        "fastest is the least disturbed figure (the same rule with and without probes). *per hit x lopi*: against "
        f"lopi `--probe entry` on all functions (H = {len(all_fns):,}, where the cost is well above the noise; on "
        f"the subset only {sub_n / len(all_fns):.0%} of the calls hit a probe, so lopi's own figure there is "
        "imprecise and not compared; the probe's cost does not depend on how many functions are probed, but "
        "the code's footprint does: with 10,000 probed functions the trampolines add instruction-cache misses).",
        "- calls counted / expected: the calls of the selected functions the tool counted (lopi: `lopi report "
        "--format json`; bpftrace: its `@c` map; Frida: its counters, read by RPC before unloading) over the "
        "workload's iterations × H while the probes were live (lopi: from its `attached` to its `detached` "
        "line; bpftrace: from `BEGIN` to its exit, see the note; Frida: from "
        "`load()` to the counters' read). Median (range).",
        "- Code restored: the workload's executable mappings of its binary (r-xp in /proc/PID/maps) read from "
        "/proc/PID/mem after the tool detached, compared byte for byte with the file at the mapping's offset; "
        "the bytes that differed while the probes were live are shown to prove the check sees the patches.",
        "",
        "## Results",
        "",
        h.markdown_table(header, rows),
        "",
        f"code restored: {'yes' if restored_all else 'no'} (after every detach of every tool, "
        "the executable mappings equal the file)." if restored_all else
        "code restored: no (see the table: a tool left bytes changed after it detached).",
        "",
    ]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    data = {
        "bench": "live", "run_id": run_id, "quick": a.quick,
        "generated": datetime.datetime.now().isoformat(timespec="seconds"), "results": a.out.name,
        "machine": machine,
        "params": {"n": n, "bpftrace_n": n_bpf, "subset": subset, "subset_functions": sub_n,
                   "functions": len(all_fns), "worker_threads": a.threads, "cpus": cpus, "window_s": window,
                   "workload": str(binary.relative_to(REPO) if binary.is_relative_to(REPO) else binary),
                   "lopi": lopi_info, "skipped": skip},
        "formula": "ns_per_hit = (P / rate_live - P / rate_base) / H; rate = iterations/s of all worker threads, "
                   "P = min(worker threads, CPUs), H = probed calls per iteration",
        "configs": summ,
        "runs": runs,
    }
    json_out = a.out.with_suffix(".json")
    json_out.write_text(json.dumps(data, indent=1))
    print(text)
    shown = a.out.relative_to(REPO) if a.out.is_relative_to(REPO) else a.out
    log(f"wrote {shown} and {json_out.name} in {time.time() - t_start:.0f} s")
    # an anchor that fails is a row of the table; lopi failing or not restoring the code fails the benchmark
    lopi_ok = all(s["status"] == "ok" and "failed" not in s and s["code_restored"] for s in summ
                  if s["tool"] == "lopi")
    if not lopi_ok:
        log("lopi failed in some run or did not restore the code (see the table)")
    return 0 if lopi_ok else 1


if __name__ == "__main__":
    sys.exit(main())
