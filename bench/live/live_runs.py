"""One run of one configuration of the live benchmark, in a fresh workload process: the
uninstrumented windows, then lopi attach, the rewritten file (static), bpftrace or Frida attaching,
running and detaching, timed and checked."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import harness as h
from live_workload import BUILD, Counters, Workload

HERE = Path(__file__).resolve().parent

ATTACH_RX = re.compile(r"lopi: attached to (\d+) \((\d+) threads?\): (\d+) sites; process paused ([0-9.]+) ms "
                       r"\(([0-9.]+) ms to stop its threads(?:; planned beforehand in ([0-9.]+) ms)?[^)]*\)")
DETACH_RX = re.compile(r"lopi: detached after ([0-9.]+) s: (\d+) sites restored, process paused ([0-9.]+) ms"
                       r"(?:, waited for (\d+) threads? inside probes)?")
BPF_ATTACHING_RX = re.compile(r"Attaching (\d+) probes")
BPF_ROW = re.compile(r"^@c\[uprobe:[^\]]*:([^:\]]+)\]: (\d+)$", re.M)


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
