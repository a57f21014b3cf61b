"""The live benchmark's workload (gen_workload.py's program): its build, its function list, its
shared counters, a ~1 ms sampler of them, and the running process with the check of its code
pages against the file."""

from __future__ import annotations

import mmap
import os
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import harness as h

HERE = Path(__file__).resolve().parent
BUILD = HERE.parents[1] / "work-real" / "bench-build" / "live"
MAGIC = 0x4C4F50494C495645


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
