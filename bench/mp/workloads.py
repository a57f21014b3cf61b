"""bench/mp's workloads: what each runs for a CPU count, what its output must show, and the servers some
need (started before their runs and stopped after). mp_bench.py runs them.

- mpbench (lopi's mpbench.c, the thesis's benchmark) at 64% user, the thesis's split, and at 80, 50
  and 20% user; all calibrated on one CPU.
- Compressors: `pigz -p N`, `zstd -TN -3`, `xz -TN -1 --block-size=1MiB` (1 MiB blocks: one thread
  compresses the same blocks as two, and the two threads get even shares).
- A parallel build: `make -jN` of zstd's library (Debian's source, bench/lib/fetch_zstd.sh) at -O0,
  every object rebuilt each run (a FORCE prerequisite; `make clean` would be one more serial step).
- A key-value server under a load client: memcached with N worker threads and memcaslap (libmemcached-
  tools) with N threads, both pinned to the same N CPUs by lopi scale (a shell script starts the
  server, runs the client, kills the server: its graceful stop waits ~0.8 s for its clock tick).
- A database benchmark: `sysbench oltp_read_only --threads=N` against PostgreSQL on a Unix socket.
  The server runs for the whole workload; a sysbench script moves it onto sysbench's own CPUs
  before each run (sysbench's init hook), so that server and client share the N CPUs lopi scale
  allows, and lopi records sysbench itself, a multithreaded program.
- postmark (single-threaded, system-call heavy) and `sysbench threads` (yields and mutexes).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import pwd
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Callable

import harness as h


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    kind: str  # what sort of program (the predictions table's second column)
    argv: Callable[[str], list[str]]  # the program's argv for a CPU count ("{cpus}" for lopi scale)
    check: Callable[[bytes], str]  # stdout -> what every run of one configuration must print alike
    workers: str = ""  # thread name of the workers (a breakdown row of their own)
    timed: str = ""  # what of its run time the program prints (its bytes differ from run to run)
    threads: int = 0  # 1: single-threaded whatever the CPUs
    whatif_note: str = ""  # said under the What-if table when an emulated kernel spins > 20% of the CPU time
    kernels: tuple[str, ...] = ()  # the emulated kernels `lopi whatif` runs it under
    skip: str = ""
    start: Callable[[], str] = lambda: ""  # before its runs: "" or why it cannot run
    stop: Callable[[], None] = lambda: None  # after its runs (also after a failed start)


def which(cmd: str, pkg: str = "") -> str:
    return "" if shutil.which(cmd) else f"{cmd} not installed (Debian's `{pkg or cmd}` package)"


def sha(out: bytes) -> str:
    return f"{len(out):,} bytes, sha256 {hashlib.sha256(out).hexdigest()[:16]}"


def counts(*named: tuple[str, bytes]) -> Callable[[bytes], str]:
    """stdout -> the numbers the (name, pattern with one group) pairs find in it: a program's counts, not its
    timings."""
    def check(out: bytes) -> str:
        return ", ".join(f"{name} {m.group(1).decode()}" if (m := re.search(pat, out)) else f"no {name}"
                         for name, pat in named)
    return check


def postmark_check(out: bytes) -> str:
    """postmark's report without its timings (lines with `seconds` dropped, `(N per second)` rates cut):
    its counts, and the sha256 of the whole report so cut."""
    text = "\n".join(re.sub(r"\s*\([^)]*per second\)", "", ln) for ln in out.decode(errors="replace").splitlines()
                     if "seconds" not in ln)
    found = re.findall(r"^\s*([0-9.]+ (?:created|read|appended|deleted|megabytes read|megabytes written))$",
                       text, re.M)
    return f"{', '.join(found)} (report sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})"


MAKEFILE = """\
# zstd's library, every object rebuilt each run (FORCE), then their checksum (the same every run)
Z := {src}
SRCS := $(sort $(foreach d,{dirs},$(wildcard $(Z)/lib/$(d)/*.c)))
OBJS := $(patsubst $(Z)/lib/%.c,obj/%.o,$(SRCS))
all: $(OBJS)
\t@cat $(OBJS) | sha256sum
obj/%.o: $(Z)/lib/%.c FORCE
\t@$(CC) -O0 -I$(Z)/lib -I$(Z)/lib/common -c $< -o $@
FORCE:
.PHONY: all FORCE
"""

MEMCACHED_SH = """\
# mc.sh THREADS PORT OPS: memcached with THREADS worker threads, then memcaslap with THREADS threads and 32
# connections doing OPS operations (9 gets to 1 set, 100-byte values); then the server is killed (its
# graceful stop waits ~0.8 s for its clock tick, which would be serial time in every run)
n=$1 port=$2 ops=$3
memcached -u nobody -t "$n" -p "$port" -U 0 -l 127.0.0.1 -m 256 &
srv=$!
tries=0
until memcstat --servers=127.0.0.1:"$port" >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 500 ] || { echo "mc.sh: memcached did not answer on port $port" >&2; kill -KILL "$srv"; exit 1; }
    sleep 0.01
done
memcaslap -s 127.0.0.1:"$port" -T "$n" -c 32 -x "$ops" -X 100
rc=$?
kill -KILL "$srv"
wait "$srv" 2>/dev/null
exit $rc
"""

REPIN_SH = """\
# the PostgreSQL server's processes onto this shell's CPUs (sysbench's, set by lopi scale or taskset);
# backends forked later inherit the postmaster's
cpus=$(taskset -pc $$ | sed 's/.*: //')
pm=$(head -n1 {data}/postmaster.pid)
for p in $pm $(pgrep -P "$pm"); do
    taskset -a -pc "$cpus" "$p" >/dev/null 2>&1 || [ ! -d /proc/"$p" ] || exit 1
done
"""

OLTP_LUA = """\
-- sysbench's oltp_read_only, with the PostgreSQL server moved onto sysbench's CPUs before the run
require("oltp_read_only")
local common_init = init
function init()
   local rc = os.execute("sh {repin}")
   if rc ~= 0 and rc ~= true then error("could not move the PostgreSQL server onto sysbench's CPUs") end
   if common_init then common_init() end
end
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throw-away PostgreSQL cluster in DIR (a Unix socket only, no fsync), with sysbench's oltp tables."""

    def __init__(self, work: Path, tables: int, rows: int):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        self.bin = Path(bins[-1]).parent if bins else None
        self.dir, self.data = work / "pg", work / "pg" / "data"
        self.tables, self.rows = tables, rows
        self.running = False

    def why_not(self) -> str:
        if self.bin is None:
            return "PostgreSQL not installed (Debian's `postgresql` package; not installed by run.sh, whose " \
                   "post-install would start a system cluster)"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no `postgres` user to run the server as"
        return which("sysbench")

    def conn(self) -> list[str]:
        return ["--db-driver=pgsql", f"--pgsql-host={self.dir}", "--pgsql-user=postgres", "--pgsql-db=postgres",
                f"--tables={self.tables}", f"--table-size={self.rows}"]

    def _as_postgres(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True,
                              timeout=120)

    def start(self) -> str:
        if why := self.why_not():
            return why
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700)
        shutil.chown(self.dir, "postgres")
        p = self._as_postgres([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"])
        if p.returncode:
            return f"initdb failed: {(p.stderr.strip().splitlines() or [''])[-1]}"
        opts = (f"-k {self.dir} -h '' -c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c autovacuum=off -c shared_buffers=64MB -c max_connections=20")
        p = self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts,
                               "-l", str(self.dir / "log"), "-w", "start"])
        if p.returncode:
            return f"pg_ctl start failed: {(p.stdout + p.stderr).strip()[-300:]}"
        self.running = True
        p = subprocess.run(["sysbench", "oltp_read_only", *self.conn(), "prepare"], capture_output=True, text=True,
                           timeout=300)
        return "" if p.returncode == 0 else f"sysbench prepare failed: {(p.stderr or p.stdout).strip()[-300:]}"

    def stop(self) -> None:
        if self.running:
            self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])
            self.running = False
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclasses.dataclass
class Sizes:
    """What each workload does: full or --quick."""
    mib: int  # pigz and zstd's corpus
    xz_mib: int
    pm_files: int
    pm_tx: int
    events: int  # sysbench threads
    make_dirs: str  # zstd's lib/ directories built
    mc_ops: int
    oltp_events: int
    oltp_rows: int


def mpbench_workloads(mpbench: Path, cals: list[tuple[str, int, str, str]]) -> list[Workload]:
    """mpbench at each calibration (key, user %, ROUNDS, USER_ITERS): the first is the thesis's 64%, run
    under every emulated kernel; the one at 20% user, the issue's kernel-heavy case, under the giant lock."""
    out = []
    for key, pct, rounds, iters in cals:
        title = (f"mpbench (the thesis's benchmark) at {pct}% user: {rounds} rounds of {iters} user iterations + "
                 "read(/dev/zero, 64 KiB), threads = CPUs")
        out.append(Workload(
            key, title, "thesis benchmark" + (" (thesis's 64:36)" if pct == 64 else f" {pct}:{100 - pct}"),
            lambda c, r=rounds, i=iters: [str(mpbench), c, r, i], lambda o: o.decode(errors="replace").strip(),
            workers="worker", kernels=(("giant-lock", "subsystem-locks", "app-kernel") if pct == 64 else
                                       ("giant-lock",) if pct == 20 else ()),
            skip="" if rounds != "0" else "mpbench --calibrate printed nothing"))
    return out


def real_workloads(work: Path, sz: Sizes, corpus: Path, xz_corpus: Path, zstd_src: str) -> list[Workload]:
    kernels = ("giant-lock", "subsystem-locks", "app-kernel")
    pm_dir, pm_cfg = work / "postmark", work / "postmark.cfg"
    pm_dir.mkdir(exist_ok=True)
    pm_cfg.write_text(f"set location {pm_dir}\nset number {sz.pm_files}\nset transactions {sz.pm_tx}\nrun\nquit\n")

    build = work / "build"
    make_skip = (which("make") or ("" if zstd_src and Path(zstd_src, "lib", "zstd.h").is_file() else
                                   "no zstd source tree (bench/lib/fetch_zstd.sh failed: see run.sh's log)"))
    if not make_skip:
        for d in sz.make_dirs.split():
            (build / "obj" / d).mkdir(parents=True, exist_ok=True)
        (build / "Makefile").write_text(MAKEFILE.format(src=zstd_src, dirs=sz.make_dirs))
    n_src = len([f for d in sz.make_dirs.split() for f in Path(zstd_src or "/nonexistent", "lib", d).glob("*.c")])

    port = free_port()
    (work / "mc.sh").write_text(MEMCACHED_SH)
    pg = Postgres(work, 2, sz.oltp_rows)
    (work / "repin.sh").write_text(REPIN_SH.format(data=pg.data))
    (work / "oltp_pinned.lua").write_text(OLTP_LUA.format(repin=work / "repin.sh"))
    oltp_check = counts(("events", rb"total number of events:\s+(\d+)"), ("read queries", rb"read:\s+(\d+)"))
    return [
        Workload("pigz", f"pigz -p CPUS -c of a {sz.mib} MiB corpus", "compressor",
                 lambda c: ["pigz", "-p", c, "-c", str(corpus)], sha, kernels=kernels, skip=which("pigz")),
        Workload("zstd", f"zstd -T CPUS -q -c -3 of a {sz.mib} MiB corpus", "compressor",
                 lambda c: ["zstd", f"-T{c}", "-q", "-c", "-3", str(corpus)], sha, kernels=kernels,
                 skip=which("zstd")),
        Workload("xz", f"xz -T CPUS -1 --block-size=1MiB -c of a {sz.xz_mib} MiB corpus (the first "
                 f"{sz.xz_mib} MiB of the same data)", "compressor",
                 lambda c: ["xz", f"-T{c}", "-1", "--block-size=1MiB", "-c", str(xz_corpus)], sha,
                 skip=which("xz", "xz-utils")),
        Workload("make", f"make -j CPUS: zstd's library ({sz.make_dirs}: {n_src} C files) at -O0, every object "
                 "rebuilt", "parallel build", lambda c: ["make", "-s", f"-j{c}", "-C", str(build)],
                 lambda o: o.decode(errors="replace").strip(), skip=make_skip),
        Workload("memcached", f"memcached -t CPUS under memcaslap -T CPUS: {sz.mc_ops:,} operations, 32 "
                 "connections", "key-value server + load client",
                 lambda c: ["sh", str(work / "mc.sh"), c, str(port), str(sz.mc_ops)],
                 counts(("operations", rb"Ops: (\d+)")), timed="its run time and rates",
                 skip=which("memcached") or which("memcaslap", "libmemcached-tools")),
        Workload("sysbench-oltp", f"sysbench oltp_read_only --threads=CPUS --events={sz.oltp_events:,} against "
                 f"PostgreSQL (2 tables of {sz.oltp_rows:,} rows)", "database benchmark",
                 lambda c: ["sysbench", str(work / "oltp_pinned.lua"), *pg.conn(), f"--threads={c}",
                            f"--events={sz.oltp_events}", "--time=0", "run"],
                 oltp_check, timed="its total time and latencies", start=pg.start, stop=pg.stop,
                 skip=pg.why_not()),
        Workload("postmark", f"postmark: {sz.pm_files:,} files, {sz.pm_tx:,} transactions (single-threaded)",
                 "file-system benchmark (1 thread)", lambda c: ["postmark", str(pm_cfg)], postmark_check,
                 kernels=kernels, skip=which("postmark"), timed="its run time in whole seconds and rates per second",
                 threads=1),
        Workload("sysbench", f"sysbench threads, --events={sz.events}", "thread benchmark (yields, mutexes)",
                 lambda c: ["sysbench", "threads", f"--threads={c}", "--thread-yields=100", "--thread-locks=4",
                            "--time=0", f"--events={sz.events}", "run"],
                 counts(("events", rb"total number of events:\s+(\d+)")), kernels=kernels,
                 skip=which("sysbench"), timed="its total time and latencies",
                 whatif_note="each event calls sched_yield 100 times; the emulation runs sched_yield without its "
                 "lock (a kernel drops its lock when it switches), as it does every call that gives the CPU away."),
    ]


def versions() -> list[tuple[str, str]]:
    """The Debian packages' versions, for the header."""
    return [(pkg, h._cmd(["dpkg-query", "-W", "-f", "${Version}", pkg]) or "not installed")
            for pkg in ("pigz", "zstd", "xz-utils", "make", "memcached", "libmemcached-tools", "postgresql",
                        "postmark", "sysbench", "util-linux")]
