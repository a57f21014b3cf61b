"""The corpus of bench/trace/corpus/*.bt: each script's workload, what of its output is compared,
where it comes from, and the workloads themselves (corpus.py runs them).

A script is run as it is, under `lopi trace` and under bpftrace. bpftrace's tracepoints and its
uprobes on a library or on /bin/bash fire in every process of the machine, so a comparison keeps
what belongs to the workload: a map's key for its process name (`@[corpus_io]`), or the printed
lines that match a pattern. Values that differ by nature between two runs (pids, times of day,
latencies) are masked in printed lines, and compared by their number only in maps (`:total`).

Map specs: `@m` (exact), `@m:sorted` (values without keys: tids), `@m:total` (number of events),
`@m[KEY]` (one key's value), `@m[KEY]:total`. `lines`: the printed lines, in order; `keep` a regex
a line must match (else left out), `mask` regexes whose matches become `*`, `sort` for lines from
several threads. `cost`: (phase, calls): a phase of the fixture whose time (`phase NAME NS` on
its stderr), less its native time, divided by its calls of the probed function (or system
calls), is the cost per event the table shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

# The scripts name the fixture by this path (bpftrace users write absolute paths), so the
# fixtures are built there.
BASE = Path("/tmp/lopi-corpus")

TIME = r"\d\d:\d\d:\d\d"


@dataclass
class Workload:
    argv: list[str]
    desc: str
    # A file for stdin (in `fixtures/`, or generated in BASE), or None.
    stdin: Optional[str] = None
    # The argument that makes it wait for a line on stdin before working (-p runs), if any;
    # without one, a -p run writes stdin's file after attaching.
    wait_arg: Optional[str] = None



WORKLOADS = {
    "io": Workload([str(BASE / "iofix")], "`iofix` (fixtures/corpus_io.c, gcc -O2): opens, reads of 512/4096/65536 bytes, "
                   "200 writes, 5 sleeps, 5 kills, syncs, stats, 20,000 getppid; named `corpus_io` in main", wait_arg="--wait"),
    "app": Workload([str(BASE / "corpus_app")], "`corpus_app` (fixtures/corpus_app.c, gcc -O2): 360 parse_word, 20,000 malloc/free, "
                    "100 calloc/realloc, fib(20), 10,000 classify, 4 threads making 25,000 checksum calls, 3 getaddrinfo + 2 gethostbyname(localhost), 5 usleep",
                    wait_arg="--wait"),
    "bash": Workload(["/bin/bash", "--norc", "--noprofile", "-i"], "Debian's bash -i reading fixtures/bash.in (7 lines, builtins only)",
                     stdin="bash.in"),
    "sqlite": Workload(["/usr/bin/sqlite3", ":memory:"], "Debian's sqlite3 reading fixtures/queries.sql (7 statements)", stdin="queries.sql"),
    "grep": Workload(["/usr/bin/grep", "-P", "-c", r"error\s\w+\svalue=\d{3}$", str(BASE / "log.txt")],
                     "Debian's grep -P -c on a generated 2,000-line log (seed 7)"),
    "jq": Workload(["/usr/bin/jq", "-c", "[.[]|select(.n>50)|.name]|group_by(.)|map({(.[0]):length})|add", str(BASE / "data.json")],
                   "Debian's jq on a generated array of 300 objects (seed 7)"),
    "sort": Workload(["/usr/bin/sort", str(BASE / "words.txt")], "Debian's sort of a generated 20,000-line file (seed 7)"),
    "exec": Workload(["/usr/bin/env", "/bin/true", "corpus", "exec"], "Debian's env running `/bin/true corpus exec`: one execve, "
                     "made by the traced process itself (bpftrace also sees the exec of env that starts it)"),
}


@dataclass
class Case:
    script: str
    workload: str
    maps: list[str] = field(default_factory=list)
    lines: Optional[dict] = None
    origin: str = ""
    # What a difference or a refusal comes from, when known: shown with the verdict.
    note: str = ""
    cost: Optional[tuple[str, int]] = None
    # Also run with -p PID (the workload started first, both tools attaching to it).
    pid: bool = False


IO, APP = "corpus_io", "corpus_app"
TUT, REF, TOOL, DEB, OWN = "bpftrace tutorial", "bpftrace reference guide", "bpftrace tool", "Debian program", "user-space one-liner"

CASES = [
    Case("hello.bt", "io", lines={}, origin=TUT),
    Case("opens.bt", "io", lines={"keep": f"^{IO} "}, origin=TUT),
    Case("syscalls_by_comm.bt", "io", [f"@[{IO}]"], origin=TUT, cost=("getppid", 20000)),
    Case("read_bytes_by_comm.bt", "io", [f"@[{IO}]"], origin=TUT),
    Case("read_size_hist.bt", "io", [f"@[{IO}]"], origin=TUT, pid=True),
    Case("read_size_lhist.bt", "io", ["@bytes"], origin=TUT + " (vfs_read adapted)"),
    Case("read_latency.bt", "io", [f"@ns[{IO}]:total"], origin=TUT + " (vfs_read adapted)"),
    Case("syscalls_by_probe.bt", "io", ["@"], origin=TUT),
    Case("sleeping.bt", "io", lines={"keep": f"^{IO} "}, origin=REF + " (nanosleep adapted)"),
    Case("readline_ret.bt", "bash", lines={}, origin=REF),
    Case("readline_prompt.bt", "bash", lines={}, origin=REF + " (str(arg0))"),
    Case("reads_requested.bt", "io", ["@reads", "@requested"], origin=REF),
    Case("writes.bt", "io", ["@bytes", "@fd"], origin=REF),
    Case("syscall_errors.bt", "io", ["@errors", "@errno"], origin=OWN, cost=("getppid", 20000)),
    Case("malloc_hist.bt", "app", ["@size"], origin=REF, pid=True, cost=("malloc", 20000)),
    Case("malloc_bytes_by_comm.bt", "app", [f"@bytes[{APP}]"], origin=REF, cost=("malloc", 20000)),
    Case("malloc_returns.bt", "app", ["@returned", "@null"], origin=OWN, cost=("malloc", 20000)),
    Case("realloc_sizes.bt", "app", ["@grow", "@cbytes", "@calls"], origin=OWN),
    Case("words.bt", "app", ["@"], origin=OWN, pid=True),
    Case("word_tuples.bt", "app", ["@"], origin=OWN),
    Case("word_returns.bt", "app", ["@st", "@lo", "@hi", "@mean", "@total"], origin=OWN),
    Case("classify.bt", "app", ["@", "@sign"], origin=OWN, pid=True, cost=("classify", 10000)),
    Case("if_else.bt", "app", ["@even", "@late", "@odd"], origin=OWN),
    Case("threads.bt", "app", ["@calls:sorted", "@len"], origin=OWN, pid=True),
    Case("fib.bt", "app", ["@calls", "@n", "@big"], origin=OWN, cost=("fib", 10946)),
    Case("pause_latency.bt", "app", ["@us:total"], origin=OWN,
         note="pause_us is `jmp usleep` (a tail call, gcc -O2): lopi runs no return probe for a return through a tail call "
              "(the value would be usleep's) and counts it instead (`lopi: 5 returns through tail calls`); bpftrace's uretprobe "
              "fires at usleep's return to pause_us's caller"),
    Case("printf_formats.bt", "app", lines={}, origin=OWN),
    Case("counter_end.bt", "app", lines={}, origin=OWN),
    Case("interval.bt", "app", ["@calls"], origin=REF + " (interval)", note="@ticks depends on time: not compared"),
    Case("bashreadline.bt", "bash", lines={"mask": [TIME, r"(?<=^\* {2})\d+"]}, origin=TOOL, pid=True),
    Case("gethostlatency.bt", "app", lines={"mask": [TIME, r"^(\* {2})\d+", r"(?<= )\d+(?= localhost)"]}, origin=TOOL,
         note="PID and LATms masked"),
    Case("opensnoop.bt", "io", lines={"keep": rf"^(PID|Tracing|\d+ +{IO} )", "mask": [r"^\d+"]}, origin=TOOL, pid=True),
    Case("statsnoop.bt", "io", lines={"keep": rf"^(PID|Tracing|\d+ +{IO} )", "mask": [r"^\d+"]}, origin=TOOL),
    Case("killsnoop.bt", "io", lines={"keep": rf"^(TIME|Tracing|{TIME} +\d+ +{IO} )", "mask": [TIME, r"\b\d{3,7}\b"]},
         origin=TOOL, note="TIME, PID and TPID (the workload's own pid) masked"),
    Case("syncsnoop.bt", "io", lines={"keep": rf"^(TIME|Tracing|{TIME} +\d+ +{IO} )", "mask": [TIME, r"(?<=^\* {2})\d+"]}, origin=TOOL),
    Case("syscount.bt", "io", [f"@process[{IO}]"], origin=TOOL, note="@process as its print(@process, 10) in END shows it"),
    Case("execsnoop.bt", "exec", lines={"keep": r"^(TIME|\d+ +\d+ +/bin/true )", "mask": [r"^\d+ +\d+"]}, origin=TOOL,
         note="TIME(ms) and PID masked"),
    Case("threadsnoop.bt", "app", lines={"mask": [r"^\d+ +\d+"]}, origin=TOOL,
         note="bpftrace sees no call: the script names libpthread, and glibc 2.34+ has pthread_create in libc (corpus_app "
              "does not even load the empty libpthread); lopi takes libpthread's functions from libc and prints the 4 threads"),
    Case("sqlite_prepare.bt", "sqlite", lines={}, origin=DEB),
    Case("sqlite_step.bt", "sqlite", ["@rc"], origin=DEB, pid=True),
    Case("sqlite_latency.bt", "sqlite", ["@ns:total"], origin=DEB),
    Case("grep_pcre.bt", "grep", ["@calls", "@rc"], origin=DEB),
    Case("jq_strings.bt", "jq", ["@next", "@s", "@num", "@set"], origin=DEB),
    Case("bash_builtins.bt", "bash", ["@builtin", "@var"], origin=DEB),
    Case("sort_io.bt", "sort", ["@bytes", "@writes", "@env"], origin=DEB,
         note="bpftrace's str() reads nothing from a page the process has not touched yet: the first getenv(), of "
              "\"POSIXLY_CORRECT\" in sort's .rodata, gives an empty key there"),
]
