#!/usr/bin/env python3
"""lopi trace against bpftrace: the same scripts on the same binaries give the same maps.

Each pair is a lopi script, its bpftrace translation (func:F -> uprobe:BIN:F, func:F:return ->
uretprobe:BIN:F, func:libc:F -> uprobe:LIBC:F, begin/end -> BEGIN/END, written out by hand where
`elapsed` needs an entry time), a fixture built here with gcc, and the maps to compare. Both run
the fixture from its start (`lopi trace -- PROG`, `bpftrace -c PROG`); counts, sums, mins, maxes,
truncated averages, stats (count, sum, avg: v0.17 prints no min/max) and hist/lhist buckets (by
lower edge) must be equal. Modes: `sorted` compares a keyed map's values only (per-tid maps: tids
differ between runs); `total` the number of events only (elapsed times differ by tool).

    python3 bench/trace/agreement.py [--out bench/results/trace-agreement.md]

Needs root (bpftrace) and gcc; builds lopi (cargo build --release) unless $LOPI is set. Prints
`PASS|FAIL|SKIP name: detail` per pair and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BPFTRACE = "/usr/bin/bpftrace"
TIMEOUT = 120

# crates/lopi-cli/tests/trace_e2e.rs's FIXTURE, plus one line in main: bpftrace's str() cannot
# fault a page in, so without it the first step() call, made before .rodata's page is mapped,
# gives an empty string under bpftrace (lopi reads it in the process).
SCRIPTED = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static const char *names[] = {"alpha", "beta", "gamma"};
__attribute__((noinline)) long step(long i, const char *name) { __asm__ volatile(""); return 2 * i + (long)strlen(name); }
#define CALLS __attribute__((noinline, optimize("no-optimize-sibling-calls")))
CALLS long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
CALLS void slow(int us) { usleep(us); }
__attribute__((noinline)) long leaf(long x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) long middle(long x) { return leaf(x) * 2 + 1; }
__attribute__((noinline)) long top(long x) { return middle(x) + 1; }
__attribute__((noinline)) long twice(long x) { __asm__ volatile(""); return 2 * x; }
__attribute__((noinline)) long tailer(long x) { return twice(x + 1); }
static void *worker(void *arg) {
    long id = (long)arg, sum = 0;
    for (long i = 0; i < 1000; i++) sum += step(i, names[(i + id) % 3]);
    return (void *)sum;
}
int main(void) {
    pthread_t t[4];
    long total = 0;
    for (int i = 0; i < 3; i++) total += *(volatile const char *)names[i] * 0;
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
    long f = fib(15);
    for (int i = 0; i < 5; i++) slow(2000);
    printf("steps %ld fib %ld top %ld\n", total, f, top(41) + tailer(-1));
    return 0;
}
"""

# trace_e2e.rs's MALLOCS and TICKER, as they are.
MALLOCS = r"""
#include <stdio.h>
#include <stdlib.h>
char *volatile keep;
int main(void) { long s = 0; for (int i = 1; i <= 1000; i++) { char *p = malloc(i); keep = p; p[0] = 1; s += p[0]; free(keep); } printf("s %ld\n", s); return 0; }
"""

TICKER = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long tick(long i) { long s = 0; for (long j = 0; j < i; j++) s += j * j; return s; }
int main(void) { long s = 0; for (int i = 0; i < 25; i++) { s += tick(i); usleep(10000); } printf("sum %ld\n", s); return 0; }
"""

# Strings (touched first, as above), negative and 32-bit return values, six arguments, threads
# with different call counts (thread 0 renamed), and mark(): bpftrace's exit() takes effect some
# time after the probe, so the calls after mark(4) wait 500 ms to let both counts be exact.
AGREE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#define F __attribute__((noipa))
static const char *words[] = {"the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"};
volatile long sink;
F long word(const char *w, long n) { return (long)strlen(w) * n; }
F long delta(long x) { return 50 - x; }
F int ineg(int x) { return -x; }
F long big(long i) { return i << 40; }
F long six(long a, long b, long c, long d, long e, long f) { return a + b + c + d + e + f; }
F long work(long id, long j) { return id * j; }
F void mark(long i) { sink += i; }
static void *worker(void *arg) {
    long id = (long)arg, s = 0;
    if (id == 0) pthread_setname_np(pthread_self(), "w-zero");
    for (long j = 0; j < 100 * (id + 1); j++) s += work(id, j);
    return (void *)s;
}
int main(void) {
    long s = 0;
    for (int i = 0; i < 9; i++) s += *(volatile const char *)words[i];
    for (long r = 0; r < 30; r++) for (int i = 0; i < 9; i++) s += word(words[i], r);
    for (long x = 0; x < 100; x++) s += delta(x) + ineg((int)x) + (big(x) >> 40);
    for (long a = 0; a < 10; a++) s += six(a, a + 1, 2 * a, 3 * a, -a, 1000 + a);
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    for (long i = 0; i < 10; i++) { mark(i); if (i == 4) usleep(500000); }
    printf("agree %ld\n", s);
    return 0;
}
"""

# Two threads taking one mutex 1,000 times each, main another once (lock: points).
LOCKER = r"""
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER, other = PTHREAD_MUTEX_INITIALIZER;
static long shared;
static void *w(void *a) {
    for (int i = 0; i < 1000; i++) { pthread_mutex_lock(&m); shared++; pthread_mutex_unlock(&m); }
    return a;
}
int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, w, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    pthread_mutex_lock(&other); pthread_mutex_unlock(&other);
    printf("locker %ld\n", shared);
    return 0;
}
"""

FIXTURES = {"scripted": (SCRIPTED, ["-O2", "-pthread"]), "mallocs": (MALLOCS, ["-O2"]),
            "ticker": (TICKER, ["-O2"]), "agree": (AGREE, ["-O2", "-pthread"]), "locker": (LOCKER, ["-O2", "-pthread"])}

# (name, fixture, lopi script, maps compared as `@m[:mode]` or `printf[:sorted]`, bpftrace script
# when not translated: BIN and LIBC stand for the paths).
ELAPSED = "uprobe:BIN:{f} {{ @start[tid] = nsecs; }} uretprobe:BIN:{f} {{ {body} delete(@start[tid]); }}"
PAIRS = [
    ("count", "scripted", "func:step { @n = count(); }", "@n"),
    ("str-key", "scripted", "func:step { @by[str(arg1)] = count(); }", "@by"),
    ("ret-sum", "scripted", "func:step:return { @s = sum(retval); }", "@s"),
    ("pred-lt", "scripted", "func:step /arg0 < 10/ { @small = count(); }", "@small"),
    ("pred-and-str", "scripted", 'func:step /arg0 >= 990 && str(arg1) == "beta"/ { @late = count(); }', "@late"),
    ("min-max-arg", "scripted", "func:fib { @calls = count(); @most = max(arg0); @least = min(arg0); }", "@calls @most @least"),
    ("ret-pred", "scripted", "func:fib:return /retval == 0/ { @zero = count(); } func:fib:return { @top = max(retval); }", "@zero @top"),
    ("hist-arg", "scripted", "func:leaf { @h = hist(arg0); }", "@h"),
    ("lhist-arg", "scripted", "func:step { @l = lhist(arg0, 0, 1000, 250); }", "@l"),
    ("avg-stats", "scripted", "func:step { @a = avg(arg0); @st = stats(arg0); }", "@a @st"),
    ("hist-lhist-neg", "scripted", "func:step { @h = hist(arg0 - 500); @l = lhist(arg0, 100, 900, 200); }", "@h @l"),
    ("per-tid", "scripted", "func:step { @t[tid] = count(); } func:step /tid == pid/ { @main = count(); }", "@t:sorted @main"),
    ("tuple-str-int", "scripted", "func:step /arg0 < 2/ { @k[str(arg1), arg0] = count(); }", "@k"),
    # A glob alone: where a glob and another probe name the same function, bpftrace v0.17's
    # uprobe of the glob runs the other probe's program (uprobe:B:step {@a} uprobe:B:s* {@b}: @a 8000, @b 5).
    ("glob", "scripted", "func:s* { @b = count(); }", "@b"),
    ("comm-key", "scripted", "func:top { @c[comm] = count(); }", "@c"),
    ("point-list-ret", "scripted", "func:leaf:return,func:middle:return,func:top:return { @r = sum(retval); @n = count(); }", "@r @n"),
    ("printf-threads", "scripted", 'func:step /arg0 == 7/ { printf("%s %d %5d|%-3x|\\n", str(arg1), arg0, tid == pid, 255); }', "printf:sorted"),
    ("elapsed-count", "scripted", "func:slow:return { @n = count(); @ns = hist(elapsed); }", "@n @ns:total",
     ELAPSED.format(f="slow", body="@n = count(); @ns = hist(nsecs - @start[tid]);")),
    ("libc-malloc", "mallocs", "func:libc:malloc /arg0 <= 1000/ { @n = count(); @bytes = sum(arg0); @big = max(arg0); }", "@n @bytes @big"),
    ("libc-free", "mallocs", "func:libc:free /arg0 != 0/ { @frees = count(); }", "@frees"),
    ("libc-malloc-hist", "mallocs", "func:libc:malloc /arg0 <= 1000/ { @h = hist(arg0); }", "@h"),
    ("libc-malloc-ret", "mallocs", "func:libc:malloc:return /retval != 0/ { @r = count(); } func:main { @main = count(); }", "@r @main"),
    ("begin-end-printf", "ticker", 'begin { printf("start\\n"); @b = 7; } func:tick { @n = count(); @s = sum(arg0); } end { printf("end %d\\n", @b + 1); }', "printf @b @n @s"),
    ("ret-max-lhist", "ticker", "func:tick:return { @r = sum(retval); @m = max(retval); } func:tick { @l = lhist(arg0, 0, 25, 5); }", "@r @m @l"),
    ("str-count", "agree", "func:word { @w[str(arg0)] = count(); }", "@w"),
    ("int-key", "agree", "func:word { @n[arg1 % 4] = count(); }", "@n"),
    ("tuple-sum", "agree", "func:word /arg1 < 3/ { @k[str(arg0), arg1] = sum(arg1 + 1); }", "@k"),
    ("str-or", "agree", 'func:word /str(arg0) == "fox" || str(arg0) == "dog"/ { @fd[str(arg0)] = sum(arg1); }', "@fd"),
    ("ret-sum-max-avg", "agree", "func:word:return { @s = sum(retval); @mx = max(retval); @a = avg(retval); }", "@s @mx @a"),
    ("ret-negative", "agree", "func:delta:return { @mn = min(retval); @mx = max(retval); @s = sum(retval); @a = avg(retval); }", "@mn @mx @s @a"),
    ("ret-hist-neg", "agree", "func:delta:return { @h = hist(retval); @l = lhist(retval, 0, 40, 10); }", "@h @l"),
    ("ret-32bit", "agree", "func:ineg:return { @s = sum(retval); @mx = max(retval); @st = stats(retval); }", "@s @mx @st"),
    ("ret-64bit", "agree", "func:big:return { @mx = max(retval); @s = sum(retval); }", "@mx @s"),
    ("six-args", "agree", "func:six { @s5 = sum(arg5); @m4 = min(arg4); @st = stats(arg3); @a2 = avg(arg2); }", "@s5 @m4 @st @a2"),
    ("tuple-int-pred", "agree", "func:six /arg0 % 2 == 0 && arg5 > 1003/ { @k[arg0, arg1] = count(); }", "@k"),
    ("threads-tid", "agree", "func:work { @t[tid] = count(); @s[tid] = sum(arg1); }", "@t:sorted @s:sorted"),
    ("threads-pred", "agree", "func:work /tid != pid/ { @w = count(); } func:word /tid == pid/ { @m = count(); }", "@w @m"),
    ("thread-comm", "agree", "func:work { @c[comm] = count(); @id[arg0] = max(arg1); }", "@c @id"),
    ("exit-after-5", "agree", "func:mark { @n = count(); } func:mark /arg0 == 4/ { exit(); }", "@n"),
    # lock:acquire/release are libc's mutex (and rwlock, spinlock) calls; this fixture makes only
    # mutex calls, so bpftrace's uprobes on the two mutex functions see the same ones. The
    # workers' only: main's pthread_create takes libc's TLS lock inside it, which lopi leaves to
    # the create call it probes (no lock: event), and bpftrace counts.
    ("lock-events", "locker", "lock:acquire /tid != pid/ { @n = count(); @t[tid] = count(); } lock:release /tid != pid/ { @r = count(); }", "@n @t:sorted @r",
     "uprobe:LIBC:pthread_mutex_lock /pid == cpid && tid != pid/ { @n = count(); @t[tid] = count(); } "
     "uprobe:LIBC:pthread_mutex_unlock /pid == cpid && tid != pid/ { @r = count(); }"),
    ("elapsed-threads", "agree", "func:work:return { @n = count(); @e[tid] = stats(elapsed); }", "@n @e:total",
     ELAPSED.format(f="work", body="@n = count(); @e[tid] = stats(nsecs - @start[tid]);")),
]


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, **kw)


def translate(script: str, binary: str, libc: str) -> str:
    def point(m: re.Match) -> str:
        return f"{'uretprobe' if m[3] else 'uprobe'}:{libc if m[1] else binary}:{m[2]}"
    out = re.sub(r"\bfunc:(?:(libc):)?([\w*?]+)(:return)?", point, script)
    out = re.sub(r"\b(begin|end)(?=\s*\{)", lambda m: m[1].upper(), out)
    # A library uprobe fires in every process that maps the library: keep the child's calls.
    def only_child(m: re.Match) -> str:
        return f"{m[1]} /pid == cpid{f' && ({m[2]})' if m[2] else ''}/ {{"
    return re.sub(rf"(\S*:{re.escape(libc)}:\S*?)\s*(?:/(.*?)/)?\s*\{{", only_child, out)


def hist(buckets: list, lo: str) -> list:
    """Buckets as (lower edge, count), empty ones left out: lopi labels [lo, hi), bpftrace
    [min, max]; the unbounded lowest bucket has no lower edge in either."""
    return [[b.get(lo), b["count"]] for b in buckets if b["count"]]


def norm(v):
    """One map value, lopi's or bpftrace's JSON, in a form both share."""
    if isinstance(v, list):
        return hist(v, "min")
    if isinstance(v, dict):
        if "buckets" in v:
            return hist(v["buckets"], "lo")
        if "count" in v and ("average" in v or "avg" in v):
            return {"count": v["count"], "sum": v.get("sum", v.get("total")), "avg": v.get("avg", v.get("average"))}
        return {k: norm(x) for k, x in sorted(v.items())}
    return v


def view(v, mode: str):
    """What a map's mode compares: `sorted` the values without their keys, `total` the number
    of events (a hist's buckets, a stats' count, summed over a keyed map's keys)."""
    if mode == "sorted" and isinstance(v, (dict, list)):
        return sorted(v.values() if isinstance(v, dict) else v, key=lambda x: x if isinstance(x, int) else json.dumps(x))
    if mode == "total":
        if isinstance(v, dict):
            return v["count"] if "count" in v else sum(view(x, "total") for x in v.values())
        return sum(c for _, c in v) if isinstance(v, list) else v
    return v


def run_lopi(lopi: str, script: str, prog: str, work: Path) -> tuple[dict, str]:
    out = work / "lopi.json"
    # In the scratch directory: a lopi that keeps its record leaves it there.
    r = sh([lopi, "trace", "--format", "json", "-o", str(out), "-e", script, "--", prog], cwd=work)
    if r.returncode != 0:
        raise RuntimeError(f"lopi trace exited {r.returncode}: {r.stderr.strip()[-400:]}")
    text = out.read_text().rstrip("\n").split("\n")
    maps = {k: norm(v) for k, v in json.loads(text[-1])["maps"].items()}
    maps["printf"] = text[:-1]
    return maps, r.stdout


def run_bpftrace(script: str, prog: str) -> tuple[dict, str]:
    r = sh([BPFTRACE, "-f", "json", "-c", prog, "-e", script])
    if r.returncode != 0:
        raise RuntimeError(f"bpftrace exited {r.returncode}: {r.stderr.strip()[-400:]}")
    maps, printed, program = {}, "", []
    for line in r.stdout.splitlines():
        if not line.startswith('{"type"'):
            program.append(line)  # the fixture's own output, on the same stdout
            continue
        event = json.loads(line)
        if event["type"] == "printf":
            printed += event["data"]
        elif event["type"] in ("map", "hist", "stats"):
            maps.update({k: norm(v) for k, v in event["data"].items()})
    maps["printf"] = printed.splitlines()
    return maps, "".join(line + "\n" for line in program if line)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "bench/results/trace-agreement.md"))
    args = ap.parse_args()

    lopi = os.environ.get("LOPI")
    if not lopi:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "lopi-cli"], cwd=REPO, check=True)
        lopi = str(REPO / "target/release/lopi")
    skip = None
    if os.geteuid() != 0:
        skip = "bpftrace needs root"
    elif not os.access(BPFTRACE, os.X_OK):
        skip = f"no {BPFTRACE} (apt-get install bpftrace)"

    work = Path(tempfile.mkdtemp(prefix="lopi-agreement-"))
    bins, plain = {}, {}
    for name, (source, flags) in FIXTURES.items():
        (work / f"{name}.c").write_text(source)
        bins[name] = str(work / name)
        subprocess.run(["gcc", *flags, "-o", bins[name], str(work / f"{name}.c")], check=True)
        plain[name] = sh([bins[name]]).stdout
    libc = re.search(r"libc\.so\.6 => (\S+)", sh(["ldd", bins["mallocs"]]).stdout)[1]

    rows, failed = [], 0
    for name, fixture, script, compared, *manual in PAIRS:
        binary = bins[fixture]
        bpf = manual[0].replace("BIN", binary).replace("LIBC", libc) if manual else translate(script, binary, libc)
        maps = [(m, mode) for m, _, mode in (c.partition(":") for c in compared.split())]
        got = {"lopi": {}, "bpftrace": {}}
        if skip:
            verdict, detail = "SKIP", skip
        else:
            problems = []
            for tool, runner in (("lopi", lambda: run_lopi(lopi, script, binary, work)), ("bpftrace", lambda: run_bpftrace(bpf, binary))):
                try:
                    values, output = runner()
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    problems.append(f"{tool}: {e}")
                    continue
                # bpftrace prints a map no probe updated as 0, lopi leaves it out.
                got[tool] = {m: view(values.get(m, 0), mode) for m, mode in maps}
                # bpftrace ends its -c child when a probe calls exit(); lopi lets it run to its end.
                if output != plain[fixture] and not (tool == "bpftrace" and "exit()" in script):
                    problems.append(f"{tool}: the program printed {output!r}, not {plain[fixture]!r}")
            if not problems:
                problems = [f"{m}: lopi {json.dumps(got['lopi'][m])} bpftrace {json.dumps(got['bpftrace'][m])}"
                            for m, _ in maps if got["lopi"][m] != got["bpftrace"][m]]
            verdict = "FAIL" if problems else "PASS"
            detail = "; ".join(problems) or ", ".join(f"{m}={json.dumps(got['lopi'][m])}" for m, _ in maps)
        failed += verdict == "FAIL"
        print(f"{verdict} {name}: {detail[:300]}", flush=True)
        shown = {tool: "; ".join(f"{m}={json.dumps(v)}" for m, v in vals.items()) for tool, vals in got.items()}
        rows.append(f"| {name} | `{cell(script)}` | `{cell(bpf.replace(binary, 'BIN').replace(libc, 'LIBC'))}` | "
                    f"{cell(compared)} | {cell(shown['lopi'])} | {cell(shown['bpftrace'])} | {verdict} |")

    shutil.rmtree(work)

    def first_line(cmd: list[str]) -> str:
        try:
            return sh(cmd).stdout.splitlines()[0].strip()
        except (OSError, IndexError):
            return "not available"
    commit = sh(["git", "rev-parse", "--short", "HEAD"], cwd=REPO).stdout.strip() or "(commit unknown)"
    # lopi is built from the work tree: say so when its sources differ from the commit.
    if sh(["git", "status", "--porcelain", "--untracked-files=no", "--", "crates", "runtime", "Cargo.lock"], cwd=REPO).stdout:
        commit += " with uncommitted changes"
    passed = sum(r.endswith("| PASS |") for r in rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join([
        "# lopi trace and bpftrace: the same scripts, the same maps",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; lopi {commit}; "
        f"{first_line([BPFTRACE, '--version'])}; {first_line(['gcc', '--version'])}; kernel {os.uname().release}.",
        f"Written by `bench/trace/agreement.py`: {passed} of {len(rows)} pairs agree"
        f"{f', {failed} differ' if failed else ''}{f' (skipped: {skip})' if skip else ''}.",
        "",
        "Each lopi script ran as `lopi trace --format json -- PROG`, its translation as `bpftrace -f json -c PROG`",
        "(BIN = the fixture, LIBC = the libc ldd finds; a library uprobe fires in every process, hence `pid == cpid`),",
        "on fixtures built by the script (`gcc -O2`; `scripted`, `mallocs` and `ticker` are `crates/lopi-cli/tests/trace_e2e.rs`'s, `agree` the script's own). Compared: counts,",
        "sums, mins, maxes, truncated averages and stats' count/sum/avg exactly; hist/lhist as [lower edge, count]",
        "(null = unbounded below); `:sorted` the values without the keys (tids differ between runs); `:total` the",
        "number of events only (elapsed times). A pair passes only if the fixture also printed what it prints alone.",
        "",
        "| pair | script (lopi) | script (bpftrace) | maps compared | lopi | bpftrace | verdict |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "bpftrace v0.17 differences kept out of the set: its `str()` reads nothing from a page the process has not",
        "touched yet (`scripted` as in trace_e2e.rs gives `@by` an empty key for the first call); where a glob",
        "and another probe name the same function, the glob's uprobe there runs the other probe's program",
        "(`uprobe:BIN:step { @a = count(); } uprobe:BIN:s* { @b = count(); }`: @a 8000, @b 5; lopi 4000, 4005);",
        "`exit()` takes effect after later calls (`func:fib /arg0 == 10/ { @n = count(); exit(); }`: lopi 1,",
        "bpftrace 1 or 8), hence `agree`'s pause after mark(4), and it ends the `-c` program (SIGTERM), so that",
        "pair's program output is checked under lopi only.",
        "",
    ]))
    print(f"wrote {args.out}: {passed} of {len(rows)} pass", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
