#!/usr/bin/env python3
"""What a `lopi trace` script costs per call, against the issue's two criteria, next to the same
scripts in bpftrace, Frida and SystemTap's dyninst runtime.

Scripts (F = the workload's hot function: fib, tiny):
  count  `func:* { @[func] = count(); }`        vs lopi run --probe entry (every function)
         criterion 1: at most 2x the plain counting probe's ns per call
  hist   `func:F:return { @h = hist(elapsed); }` vs lopi run --probe entry,exit --functions F
         criterion 2: at most the timing probe's ns per call + 10 ns
The same scripts: bpftrace uprobes (count: every function; hist: a uprobe and a uretprobe on F, the
entry time kept per thread and depth); Frida's Interceptor with a CModule (count: bench/anchors'
frida_count.py; hist: this script's `frida-hist` mode, onEnter/onLeave in C); SystemTap
`stap --dyninst` (process.function probes, `@entry` for the elapsed time).

Workloads: W1 loop (calls of the 4-byte `tiny`), W1 fib, W2 speedtest1 (count script only).
bpftrace, Frida and SystemTap run W1 at smaller sizes, each next to an uninstrumented run of its
own size: bpftrace single-steps tiny()'s first instruction (~10 us per call here).

Run through run.sh; `trace.py --help` lists the knobs. `trace.py frida-hist --fn F [--counts FILE]
-- PROG ARGS` is the Frida runner of the hist script.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
sys.path.insert(0, str(REPO / "bench" / "anchors"))
import harness as h  # noqa: E402
import anchors  # noqa: E402  (its bpftrace function list and Frida counting runner)

BUILD = REPO / "work-real" / "bench-build" / "trace"
log = h.log

BASE, BASE_SLOW = "baseline", "baseline-slow"
LOPI_E, TRACE_C, BPF_C, FRIDA_C, STAP_C = "lopi-entry", "lopi-trace-count", "bpftrace-count", "frida-count", "stap-count"
LOPI_T, TRACE_H, BPF_H, FRIDA_H, STAP_H = "lopi-timing", "lopi-trace-hist", "bpftrace-hist", "frida-hist", "stap-hist"
HANDLER_H = "lopi-handler-hist"
COUNT = [LOPI_E, TRACE_C, BPF_C, FRIDA_C, STAP_C]
HIST = [LOPI_T, TRACE_H, HANDLER_H, BPF_H, FRIDA_H, STAP_H]
# Configurations that run W1 at its smaller size, against BASE_SLOW.
SLOW = {BPF_C, BPF_H, FRIDA_C, FRIDA_H, STAP_C, STAP_H}
COUNT_SCRIPT = "func:* { @[func] = count(); }"
CRIT1_RATIO, CRIT2_NS = 2.0, 10.0
TOOLS = {BASE: h.TOOL["base"], BASE_SLOW: h.TOOL["base"], LOPI_E: h.TOOL["lopi-entry"],
         LOPI_T: h.TOOL["lopi-timing"], TRACE_C: "lopi trace", TRACE_H: "lopi trace", HANDLER_H: "lopi --handler", BPF_C: h.TOOL["bpftrace"],
         BPF_H: h.TOOL["bpftrace"], FRIDA_C: h.TOOL["frida-cmodule"], FRIDA_H: h.TOOL["frida-cmodule"],
         STAP_C: "SystemTap --dyninst", STAP_H: "SystemTap --dyninst"}


def label(cfg: str, fn: str) -> str:
    return {
        BASE: "uninstrumented",
        BASE_SLOW: "uninstrumented",
        LOPI_E: "lopi run --probe entry (every function)",
        TRACE_C: f"lopi trace `{COUNT_SCRIPT}`",
        BPF_C: "bpftrace `uprobe:BIN:<every function> { @[func] = count(); }`",
        FRIDA_C: "Frida Interceptor, CModule onEnter: a counter per function (every function)",
        STAP_C: 'stap --dyninst `process("BIN").function("*") { c[ppfunc()] <<< 1 }`',
        LOPI_T: f"lopi run --probe entry,exit --functions {fn}",
        TRACE_H: f"lopi trace `func:{fn}:return {{ @h = hist(elapsed); }}`",
        HANDLER_H: f"lopi run --handler (C: lopi_leave adds elapsed_ns to a log2 hist) --functions {fn}",
        BPF_H: f"bpftrace uprobe + uretprobe on {fn}, `@h = hist(nsecs - entry time)`",
        FRIDA_H: f"Frida Interceptor on {fn}, CModule onEnter + onLeave: log2 hist of clock_gettime differences",
        STAP_H: f'stap --dyninst `process("BIN").function("{fn}").return {{ h <<< '
                "gettimeofday_ns() - @entry(gettimeofday_ns()) }`",
    }[cfg]


# The hist script as a C handler: lopi_leave on F, a log2 histogram of the call's elapsed time
# (bucket b holds [2^(b-1), 2^b)); a plain increment, as Frida's CModule does it.
HANDLER_HIST_C = r"""
#include "lopi.h"
static uint64_t hist[65];
void lopi_leave(const struct lopi_event *e)
{
    uint64_t d = e->elapsed_ns;
    hist[d ? 64 - __builtin_clzll(d) : 0]++;
}
"""


# ---------------------------------------------------------------- Frida: the hist script

# `@h = hist(elapsed)` on F: the entry time in the invocation's own data, a log2 histogram (bucket
# b holds [2^(b-1), 2^b), bucket 0 the zeros, as bpftrace's and lopi's hist) read at exit().
FRIDA_HIST_JS = r"""
const hist = Memory.alloc(8 * 65);
const cm = new CModule(`
#include <gum/guminterceptor.h>
struct ts { long sec; long nsec; };
extern int clock_gettime (int clock, struct ts * t);
extern volatile unsigned long long hist[];
static unsigned long long now (void) { struct ts t; clock_gettime (1, &t); return t.sec * 1000000000ULL + t.nsec; }
void on_enter (GumInvocationContext * ic) { *GUM_IC_GET_INVOCATION_DATA (ic, unsigned long long) = now (); }
void on_leave (GumInvocationContext * ic) {
  unsigned long long d = now () - *GUM_IC_GET_INVOCATION_DATA (ic, unsigned long long);
  int b = 0;
  while (d != 0) { b++; d >>= 1; }
  hist[b]++;
}
`, { hist, clock_gettime: Module.getGlobalExportByName('clock_gettime') });
rpc.exports = {
  attach(fn) {
    const s = Process.mainModule.enumerateSymbols().find(x => x.type === 'function' && x.name === fn);
    if (!s) return `no function symbol ${fn}`;
    try { Interceptor.attach(s.address, { onEnter: cm.on_enter, onLeave: cm.on_leave }); } catch (e) { return String(e.message || e); }
    return '';
  },
};
Interceptor.attach(Module.getGlobalExportByName('exit'), {
  onEnter(args) {
    const buckets = [];
    for (let i = 0; i < 65; i++) buckets.push(hist.add(8 * i).readU64().toNumber());
    send({ exit_status: args[0].toInt32(), buckets });
    recv('ack', () => {}).wait();
  },
});
"""


def frida_hist(args: list[str]) -> int:
    """Run PROG under Frida with FRIDA_HIST_JS on FN; prints `frida_hist: calls=N` on stderr, the
    buckets to --counts. Exit 125 when Frida cannot spawn, attach or intercept FN (the message says why)."""
    ap = argparse.ArgumentParser(prog="trace.py frida-hist")
    ap.add_argument("--fn", required=True)
    ap.add_argument("--counts", type=Path)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args(args)
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    try:
        import frida
    except ImportError as e:
        print(f"frida_hist: {e}", file=sys.stderr)
        return 125
    done = threading.Event()
    result: dict = {}
    errors: list[str] = []
    try:
        dev = frida.get_local_device()
        pid = dev.spawn(argv, stdio="pipe")
        session = dev.attach(pid)
        script = session.create_script(FRIDA_HIST_JS)
    except Exception as e:  # frida.*Error: not permitted, not supported, ...
        print(f"frida_hist: cannot spawn/attach: {type(e).__name__}: {e}", file=sys.stderr)
        return 125

    def on_message(msg, data):
        if msg["type"] == "error":
            errors.append(msg.get("description", str(msg)))
        elif "exit_status" in msg.get("payload", {}):
            result.update(msg["payload"])
            script.post({"type": "ack"})

    def on_output(p, fd, data):
        if data:
            out = sys.stdout if fd == 1 else sys.stderr
            out.buffer.write(data)
            out.flush()

    script.on("message", on_message)
    dev.on("output", on_output)
    session.on("detached", lambda *_: done.set())
    try:
        script.load()
        why = script.exports_sync.attach(a.fn)
    except Exception as e:
        why = f"script failed to load: {e}"
    if why:
        print(f"frida_hist: {a.fn}: {why}", file=sys.stderr)
        dev.kill(pid)
        return 125
    dev.resume(pid)
    done.wait()
    dev.off("output", on_output)
    for e in errors:
        print(f"frida_hist: script error: {e}", file=sys.stderr)
    if "exit_status" not in result:
        print("frida_hist: the process ended without calling exit() (no histogram)", file=sys.stderr)
        return 1
    print(f"frida_hist: calls={sum(result['buckets'])}", file=sys.stderr)
    if a.counts:
        a.counts.write_text(json.dumps({"buckets": result["buckets"]}))
    return int(result["exit_status"]) & 0xFF


# ---------------------------------------------------------------- the configurations


@dataclasses.dataclass
class Workload:
    key: str  # h.KIND key
    title: str
    prog: Path
    argv: list[str]
    slow_argv: Optional[list[str]]  # SLOW configurations' arguments; None: they run `argv` against BASE
    slow_title: str  # their size, in their labels
    fn: Optional[str]  # the hot function (hist script, count checks); None: count script only
    metric: object
    check: object

    def base_of(self, cfg: str) -> str:
        return BASE_SLOW if self.slow_argv and (cfg in SLOW or cfg == BASE_SLOW) else BASE

    def argv_of(self, cfg: str) -> list[str]:
        return self.slow_argv if self.base_of(cfg) == BASE_SLOW else self.argv

    def label(self, cfg: str) -> str:
        return label(cfg, self.fn or "") + (f" [{self.slow_title}]" if self.base_of(cfg) == BASE_SLOW else "")


def lopi_trace_variant(name: str, lopi: Optional[Path], script: str, wl: Workload, data: Path, hist: bool,
                       skip: str) -> h.Variant:
    """`lopi trace --format json -o OUT -e SCRIPT`: calls = the @ map's values (count) or the @h
    histogram's buckets (hist), summed; what lopi said on stderr kept for the notes."""
    out = data / f"{name}.json"

    def before(idx: int) -> dict:
        out.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not out.exists():
            return {"after_error": "lopi trace wrote no maps"}
        maps = json.loads(out.read_text())["maps"]
        said = [ln[6:] for ln in stderr.splitlines() if ln.startswith("lopi: ")]
        name = "@h" if hist else "@"
        if name not in maps:
            return {"after_error": f"no {name} map in lopi trace's output: {json.dumps(maps)[:200]}", "said": said}
        if hist:
            return {"calls": sum(b["count"] for b in maps[name]["buckets"]), "said": said}
        per_fn = {k: int(v) for k, v in maps[name].items()}
        return {"calls": sum(per_fn.values()), "per_fn": per_fn, "said": said}

    return h.Variant(name, [str(lopi), "trace", "--format", "json", "-o", str(out), "-e", script, "--",
                            str(wl.prog), *wl.argv_of(name)], wl.metric, before=before, after=after,
                     check=wl.check, skip_reason=skip)


def lopi_run_variant(name: str, lopi: Optional[Path], args: list[str], wl: Workload, data: Path,
                     skip: str) -> h.Variant:
    before, after = h.lopi_data_hooks(lopi, data / name)
    return h.Variant(name, [str(lopi), "run", "-q", *args, "--", str(wl.prog), *wl.argv_of(name)], wl.metric,
                     before=before, after=after, check=wl.check, skip_reason=skip)


BPF_KEY = re.compile(r"^@\[([^\]]+)\]: (\d+)$", re.M)
HIST_ROW = re.compile(r"^\[[^\]\)]*[\]\)]\s+(\d+)\s+\|", re.M)  # `[4K, 8K)   54 |@@@  |`


def named_by_symbols(per_addr: dict[int, int], syms: dict[str, tuple[int, int]]) -> dict[str, int]:
    """bpftrace (v0.17) prints `@[func]` after the program has exited, when it can no longer
    symbolize its addresses: names from the symbol table, by the page-aligned load base that puts
    every key at a function's start."""
    by_off = {addr: name for name, (addr, _) in syms.items()}
    for key in per_addr:
        for off in by_off:
            base = key - off
            if base % 4096 == 0 and all(a - base in by_off for a in per_addr):
                return {by_off[a - base]: c for a, c in per_addr.items()}
    return {hex(a): c for a, c in per_addr.items()}


def bpftrace_variant(name: str, wl: Workload, data: Path, skip: str) -> h.Variant:
    prog = wl.prog
    out, script = data / f"{name}.out", data / f"{name}.bt"
    fns = anchors.functions_of(prog)
    syms = anchors.symbols(prog)
    if name == BPF_C:
        script.write_text(",\n".join(f"uprobe:{prog}:{f}" for f in fns) + "\n{ @[func] = count(); }\n")
    else:
        # bpftrace has no elapsed: the entry's nsecs per thread and depth (fib recurses), read at the return
        f = f"{prog}:{wl.fn}"
        script.write_text(
            f"uprobe:{f} {{ @start[tid, @depth[tid]] = nsecs; @depth[tid] = @depth[tid] + 1; }}\n"
            f"uretprobe:{f} /@depth[tid] > 0/ {{ @depth[tid] = @depth[tid] - 1; "
            "@h = hist(nsecs - @start[tid, @depth[tid]]); delete(@start[tid, @depth[tid]]); }\n"
            "END { clear(@depth); clear(@start); }\n")

    def before(idx: int) -> dict:
        out.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        text = out.read_text() if out.exists() else ""
        if name == BPF_H:
            rows = [int(c) for c in HIST_ROW.findall(text)]
            return {"calls": sum(rows)} if rows else {"after_error": "no @h histogram in bpftrace's output"}
        rows = BPF_KEY.findall(text)
        if not rows:
            return {"after_error": "no `@[...]` counts in bpftrace's output"}
        per_fn = {k: int(c) for k, c in rows if not k.startswith("0x")}
        per_fn.update(named_by_symbols({int(k, 16): int(c) for k, c in rows if k.startswith("0x")}, syms))
        return {"calls": sum(per_fn.values()), "per_fn": per_fn}

    limit = str(len(fns) + 64)
    return h.Variant(name, ["bpftrace", "-o", str(out), str(script), "-c", " ".join([str(prog), *wl.argv_of(name)])],
                     wl.metric, env={"BPFTRACE_MAX_PROBES": limit, "BPFTRACE_MAX_BPF_PROGS": limit},
                     before=before, after=after, check=wl.check, timeout_s=1800, skip_reason=skip)


def frida_hist_variant(wl: Workload, data: Path, skip: str) -> h.Variant:
    counts = data / f"{FRIDA_H}.json"

    def before(idx: int) -> dict:
        counts.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not counts.exists():
            return {"after_error": "frida-hist wrote no histogram"}
        return {"calls": sum(json.loads(counts.read_text())["buckets"])}

    return h.Variant(FRIDA_H, [sys.executable, str(Path(__file__).resolve()), "frida-hist", "--fn", str(wl.fn),
                               "--counts", str(counts), "--", str(wl.prog), *wl.argv_of(FRIDA_H)], wl.metric,
                     before=before, after=after, check=wl.check, timeout_s=1800, skip_reason=skip)


STAP_COUNT_ROW = re.compile(r"^stap_count (\S+) (\d+)$", re.M)
STAP_HIST_ROW = re.compile(r"^stap_hist calls=(\d+)$", re.M)


def stap_script(name: str, prog: Path, fn: Optional[str]) -> str:
    if name == STAP_C:
        return (f'global c\nprobe process("{prog}").function("*") {{ c[ppfunc()] <<< 1 }}\n'
                'probe end { foreach (f in c) printf("stap_count %s %d\\n", f, @count(c[f])) }\n')
    return (f'global h\nprobe process("{prog}").function("{fn}").return '
            "{ h <<< gettimeofday_ns() - @entry(gettimeofday_ns()) }\n"
            'probe end { printf("stap_hist calls=%d\\n", @count(h)); if (@count(h)) print(@hist_log(h)) }\n')


def stap_variant(name: str, wl: Workload, data: Path, skip: str) -> h.Variant:
    out, script = data / f"{name}.out", data / f"{name}.stp"
    script.write_text(stap_script(name, wl.prog, wl.fn))

    def before(idx: int) -> dict:
        out.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        text = out.read_text() if out.exists() else ""
        if name == STAP_H:
            m = STAP_HIST_ROW.search(text)
            return {"calls": int(m.group(1))} if m else {"after_error": "no `stap_hist calls=` line"}
        per_fn = {f: int(c) for f, c in STAP_COUNT_ROW.findall(text)}
        return {"calls": sum(per_fn.values()), "per_fn": per_fn} if per_fn else {"after_error": "no stap_count lines"}

    return h.Variant(name, ["stap", "--dyninst", "-o", str(out), str(script), "-c",
                            " ".join([str(wl.prog), *wl.argv_of(name)])], wl.metric, before=before, after=after,
                     check=wl.check, timeout_s=1800, skip_reason=skip)


def handler_file(data: Path) -> Path:
    path = data / "hist_handler.c"
    path.write_text(HANDLER_HIST_C)
    return path


def make_variants(wl: Workload, lopi: Optional[Path], skip: dict[str, str]) -> list[h.Variant]:
    data = BUILD / "data" / wl.key
    data.mkdir(parents=True, exist_ok=True)
    vs = [h.Variant(BASE, [str(wl.prog), *wl.argv], wl.metric, check=wl.check)]
    if wl.slow_argv:
        vs.append(h.Variant(BASE_SLOW, [str(wl.prog), *wl.slow_argv], wl.metric, check=wl.check))
    vs += [lopi_run_variant(LOPI_E, lopi, ["--probe", "entry"], wl, data, skip.get(LOPI_E, "")),
           lopi_trace_variant(TRACE_C, lopi, COUNT_SCRIPT, wl, data, False, skip.get(TRACE_C, "")),
           bpftrace_variant(BPF_C, wl, data, skip.get(BPF_C, "")),
           anchors.frida_variant(FRIDA_C, "cmodule", wl.prog, wl.argv_of(FRIDA_C), data, wl.metric, wl.check,
                                 skip.get(FRIDA_C, "")),
           stap_variant(STAP_C, wl, data, skip.get(STAP_C, ""))]
    if wl.fn:
        vs += [lopi_run_variant(LOPI_T, lopi, ["--probe", "entry,exit", "--functions", wl.fn], wl, data,
                                skip.get(LOPI_T, "")),
               lopi_trace_variant(TRACE_H, lopi, f"func:{wl.fn}:return {{ @h = hist(elapsed); }}", wl, data, True,
                                  skip.get(TRACE_H, "")),
               lopi_run_variant(HANDLER_H, lopi, ["--handler", str(handler_file(data)), "--functions", wl.fn], wl, data,
                                skip.get(HANDLER_H, "")),
               bpftrace_variant(BPF_H, wl, data, skip.get(BPF_H, "")),
               frida_hist_variant(wl, data, skip.get(FRIDA_H, "")),
               stap_variant(STAP_H, wl, data, skip.get(STAP_H, ""))]
    return vs


# ---------------------------------------------------------------- preflight


def attempt(argv: list[str], ok: re.Pattern) -> str:
    """Empty when ARGV exits 0 and prints OK, else why not (its last error line)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if p.returncode == 0 and ok.search(p.stdout + p.stderr):
        return ""
    lines = (p.stderr + "\n" + p.stdout).strip().splitlines()
    errs = [ln for ln in lines if re.search(r"error|refus|unable|unavailable|not supported|not found|no such", ln, re.I)
            and "RLIMIT_MEMLOCK" not in ln]
    return f"does not run here (exit {p.returncode}): {(errs or lines or ['no output'])[-1][:240]}"


def preflight(w1: Path, work: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({config: why it cannot run here}, {config: why it cannot run on W1 loop}), each tool tried
    on a few calls of W1."""
    why: dict[str, str] = {}
    loop_why: dict[str, str] = {}
    if not h.which("bpftrace"):
        why[BPF_C] = "bpftrace not installed (apt-get install bpftrace failed)"
    else:
        why[BPF_C] = attempt(["bpftrace", "-e", f"uprobe:{w1}:tiny {{ @c = count(); }}", "-c", f"{w1} loop 10"],
                             re.compile(r"^@c: 10$", re.M))
    why[BPF_H] = why[BPF_C]
    if subprocess.run([sys.executable, "-c", "import frida"], capture_output=True).returncode != 0:
        why[FRIDA_C] = why[FRIDA_H] = f"frida not installed for {sys.executable} (pip install frida failed)"
    else:
        fib = ["--", str(w1), "fib", "5", "1"]
        why[FRIDA_C] = attempt([sys.executable, str(anchors.FRIDA_RUNNER), "--mode", "cmodule", *fib],
                               re.compile(r"frida_count: calls=\d+"))
        hist = [sys.executable, str(Path(__file__).resolve()), "frida-hist"]
        why[FRIDA_H] = attempt([*hist, "--fn", "fib", *fib], re.compile(r"^frida_hist: calls=15$", re.M))
        if not why[FRIDA_H]:
            loop_why[FRIDA_H] = attempt([*hist, "--fn", "tiny", "--", str(w1), "loop", "10"],
                                        re.compile(r"^frida_hist: calls=10$", re.M))
    if not h.which("stap"):
        why[STAP_C] = "SystemTap not installed (apt-get install systemtap failed)"
    else:
        script = work / "preflight.stp"
        script.write_text(f'global c\nprobe process("{w1}").function("tiny") {{ c <<< 1 }}\n'
                          'probe end { printf("stap_count tiny %d\\n", @count(c)) }\n')
        why[STAP_C] = attempt(["stap", "--dyninst", str(script), "-c", f"{w1} loop 10"],
                              re.compile(r"^stap_count tiny 10$", re.M))
    why[STAP_H] = why[STAP_C]
    for k, v in why.items():
        log(f"{k}: {'ready' if not v else 'skipped: ' + v}")
    for k, v in loop_why.items():
        if v:
            log(f"{k} on W1 loop: skipped: {v}")
    return {k: v for k, v in why.items() if v}, {k: v for k, v in loop_why.items() if v}


def versions() -> list[tuple[str, str]]:
    frida = h._cmd([sys.executable, "-c", "import frida; print(frida.__version__)"]) or "not installed"
    stap = h.tool_version(["stap", "--version"]) if h.which("stap") else "not installed"
    return [("bpftrace", h.tool_version(["bpftrace", "--version"])),
            ("frida", f"frida {frida} (Python bindings, PyPI)"),
            ("SystemTap", stap)]


# ---------------------------------------------------------------- notes, criteria


def recorded(runs: list[h.RunResult]) -> list[h.RunResult]:
    return [r for r in runs if r.ok and r.round >= 0]


def count_note(runs: list[h.RunResult], expected: dict) -> Optional[str]:
    """The hot function's calls as the tool counted them (its count, else the histogram's total)
    against W1's own count; None when the tool did not probe it (the ns/call note says so)."""
    if not expected:
        return None
    fn, want = expected["fn"], expected["calls"]
    per_fn = [r.extra["per_fn"] for r in recorded(runs) if "per_fn" in r.extra]
    if per_fn:
        if not any(fn in p for p in per_fn):
            return None
        got, what = sorted({p.get(fn, 0) for p in per_fn}), fn
    else:
        got, what = sorted({r.extra["calls"] for r in recorded(runs) if "calls" in r.extra}), f"{fn} in the histogram"
    if not got:
        return None
    shown = f"{got[0]:,}" if len(got) == 1 else f"{got[0]:,}–{got[-1]:,}"
    return f"{what}: {shown} {'=' if got == [want] else '≠'} expected {want:,}"


def agreement(res: dict) -> Optional[str]:
    """lopi trace's per-function counts against lopi run --probe entry's."""
    a = next((r.extra["per_fn"] for r in recorded(res.get(TRACE_C, [])) if "per_fn" in r.extra), None)
    b = next((r.extra["per_fn"] for r in recorded(res.get(LOPI_E, [])) if "per_fn" in r.extra), None)
    if a is None or b is None:
        return None
    called = {n for n, c in a.items() if c} | {n for n, c in b.items() if c}
    differ = sorted((n for n in called if a.get(n, 0) != b.get(n, 0)), key=lambda n: -max(a.get(n, 0), b.get(n, 0)))
    shown = ", ".join(f"`{n}` {a.get(n, 0):,} / {b.get(n, 0):,}" for n in differ[:4])
    return (f"per function: the same count as lopi run --probe entry for {len(called) - len(differ)} of "
            f"{len(called)} functions called" + (f" (differ, trace / run: {shown}{' …' if len(differ) > 4 else ''})"
                                                 if differ else ""))


def lopi_said(runs: list[h.RunResult]) -> list[str]:
    """lopi trace's own lines worth a note: how many functions it probed, drops, faults, returns it
    could not see."""
    said = next((r.extra["said"] for r in recorded(runs) if "said" in r.extra), [])
    out = [m.group(1) for ln in said if (m := re.match(r"(.*\d+ functions?) of ", ln))]
    out += sorted({ln for r in recorded(runs) for ln in r.extra.get("said", [])
                   if re.search(r"dropped|not seen|faults", ln)})
    return out


def notes_for(wl: Workload, vs: list[h.Variant], res: dict, expected: dict[str, dict]) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {}
    for v in vs:
        runs = res.get(v.name, [])
        n = []
        if v.name in (LOPI_E, LOPI_T):
            n += h.lopi_report_notes(runs, {})
        if v.name in (TRACE_C, TRACE_H):
            n += lopi_said(runs)
        if v.name == TRACE_C and (agree := agreement(res)):
            n.append(agree)
        if v.name not in (BASE, BASE_SLOW) and (c := count_note(runs, expected[wl.base_of(v.name)])):
            n.append(c)
        if v.name == FRIDA_C:
            refused = next((r.extra.get("refused") for r in recorded(runs) if r.extra.get("refused")), None)
            if refused:
                first = next(iter(refused.items()))
                n.append(f"Interceptor refused {len(refused)} functions (e.g. `{first[0]}`: {first[1]})")
        n += h.after_errors(runs)
        notes[v.name] = n
    return notes


def ns_of(entries: list[dict], cfg: str) -> Optional[float]:
    return next((e["ns_per_call"] for e in entries if e["config"] == cfg and "ns_per_call" in e), None)


def criteria(wl: Workload, entries: list[dict]) -> list[dict]:
    """The issue's criteria on one workload: {workload, criterion, lopi trace ns, reference ns,
    measured, limit, holds (True/False/None: not judged), why}."""
    out = []
    trace, plain = ns_of(entries, TRACE_C), ns_of(entries, LOPI_E)
    c1 = {"workload": wl.title, "criterion": 1, "script": COUNT_SCRIPT, "trace_ns": trace, "reference_ns": plain,
          "reference": "lopi run --probe entry", "limit": f"≤ {CRIT1_RATIO:g}x"}
    if trace is None or plain is None:
        c1.update(holds=None, measured="-", why="a configuration has no ns/call")
    elif plain <= 0:
        c1.update(holds=None, measured="-", why="the plain probe's cost is within noise (≤ 0 ns/call)")
    else:
        c1.update(holds=trace / plain <= CRIT1_RATIO, measured=f"{trace / plain:.2f}x", ratio=trace / plain)
    out.append(c1)
    if wl.fn:
        hist, timing = ns_of(entries, TRACE_H), ns_of(entries, LOPI_T)
        c2 = {"workload": wl.title, "criterion": 2, "script": f"func:{wl.fn}:return {{ @h = hist(elapsed); }}",
              "trace_ns": hist, "reference_ns": timing, "reference": f"lopi run --probe entry,exit --functions {wl.fn}",
              "limit": f"≤ +{CRIT2_NS:g} ns"}
        if hist is None or timing is None:
            c2.update(holds=None, measured="-", why="a configuration has no ns/call")
        else:
            c2.update(holds=hist - timing <= CRIT2_NS, measured=f"{hist - timing:+.1f} ns", diff_ns=hist - timing)
        out.append(c2)
    return out


def verdict(c: dict) -> str:
    return "not judged: " + c["why"] if c["holds"] is None else ("PASS" if c["holds"] else "FAIL")


def fmt_ns(ns: Optional[float]) -> str:
    return "-" if ns is None else h.fmt_ns(ns)


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3 and smaller workloads")
    ap.add_argument("-n", type=int, help="recorded runs per configuration (default 5, quick 3)")
    ap.add_argument("--loop", type=int, help="W1 loop calls (default 10,000,000, quick 2,000,000)")
    ap.add_argument("--fib", nargs=2, type=int, metavar=("N", "REPS"), help="W1 fib (default 27 20, quick 25 5)")
    ap.add_argument("--slow-loop", type=int, help="W1 loop under bpftrace, Frida, SystemTap (default 100,000, "
                    "quick 20,000)")
    ap.add_argument("--slow-fib", nargs=2, type=int, metavar=("N", "REPS"),
                    help="W1 fib under bpftrace, Frida, SystemTap (default 22 10, quick 20 5)")
    ap.add_argument("--size", type=int, help="speedtest1 --size (default 5, quick 2); 0: no W2")
    ap.add_argument("--sqlite-dir", type=Path, required=True, help="dir with sqlite3.c, speedtest1.c (fetch_sqlite.sh)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/trace.md")
    a = ap.parse_args()

    q = a.quick
    n = a.n or (3 if q else 5)
    loop_n, slow_loop = a.loop or (2_000_000 if q else 10_000_000), a.slow_loop or (20_000 if q else 100_000)
    fib, slow_fib = a.fib or ((25, 5) if q else (27, 20)), a.slow_fib or ((20, 5) if q else (22, 10))
    size = (2 if q else 5) if a.size is None else a.size
    t_start, load_start = time.time(), h.loadavg()
    shutil.rmtree(BUILD / "data", ignore_errors=True)
    BUILD.mkdir(parents=True, exist_ok=True)

    w1 = h.build("w1", [*h.W1_FLAGS, str(h.W1_SRC)], [h.W1_SRC])
    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    why, loop_why = preflight(w1, BUILD)
    if not lopi:
        why.update({c: f"lopi binary not found ({a.lopi})" for c in (LOPI_E, TRACE_C, LOPI_T, TRACE_H)})

    workloads = [Workload("w1-loop", f"W1 loop {loop_n:,}", w1, ["loop", str(loop_n)], ["loop", str(slow_loop)],
                          f"loop {slow_loop:,}", "tiny", h.HOT_NS, h.w1_check),
                 Workload("w1-fib", f"W1 fib({fib[0]})x{fib[1]}", w1, ["fib", *map(str, fib)],
                          ["fib", *map(str, slow_fib)], f"fib({slow_fib[0]})x{slow_fib[1]}", "fib", h.HOT_NS,
                          h.w1_check)]
    skips = {"w1-loop": dict(why, **loop_why), "w1-fib": dict(why)}
    if size:
        w2 = h.build_parallel({BASE: h.w2_job("speedtest1", a.sqlite_dir)})[BASE]
        workloads.append(Workload("w2", f"W2 speedtest1 --memdb --size {size}", w2, ["--memdb", "--size", str(size)],
                                  None, "", None, h.TOTAL, h.w2_check))
        skips["w2"] = dict(why)
        if BPF_C not in why:
            skips["w2"][BPF_C] = (f"not run on speedtest1: attaching its {len(anchors.functions_of(w2)):,} uprobes "
                                  "takes minutes (see bench/anchors)")

    all_res: dict[str, dict] = {}
    entries: list[dict] = []
    crit: list[dict] = []
    for wl in workloads:
        log(f"{wl.title}: n={n} (+1 warm-up), interleaved")
        vs = make_variants(wl, lopi, skips[wl.key])
        res = h.run_interleaved(vs, n, warmup=1, log=log)
        all_res[wl.title] = res
        expected = {b: h.w1_expected(res[b], wl.fn) if wl.fn and b in res else {} for b in (BASE, BASE_SLOW)}
        notes = notes_for(wl, vs, res, expected)
        wl_entries = []
        for v in vs:
            e = h.summary_entry("trace", wl.key, wl.title, v, res, wl.label(v.name), TOOLS[v.name],
                                expected[wl.base_of(v.name)], base=wl.base_of(v.name))
            e["notes"] = notes[v.name]
            wl_entries.append(e)
        wl_crit = criteria(wl, wl_entries)
        for c in wl_crit:
            cfg = TRACE_C if c["criterion"] == 1 else TRACE_H
            line = (f"criterion {c['criterion']} ({c['limit']} {c['reference']}): {c['measured']}: {verdict(c)}")
            log(f"{wl.title}: {line}")
            next(e for e in wl_entries if e["config"] == cfg)["notes"].insert(0, line)
        entries += wl_entries
        crit += wl_crit

    rows = [[e["workload"], e["label"], *h.entry_cells(e)] for e in entries]
    header = ["workload", "config", "time median [min–max]", "x uninstrumented", "calls", "overhead ns/call",
              "output identical", "notes"]
    crit_rows = [[c["workload"], str(c["criterion"]), f"`{c['script']}`", fmt_ns(c["trace_ns"]),
                  f"{c['reference']}: {fmt_ns(c['reference_ns'])}", c["measured"], c["limit"], verdict(c)]
                 for c in crit]
    judged = [c for c in crit if c["holds"] is not None]
    overall = {k: ("PASS" if all(c["holds"] for c in judged if c["criterion"] == k) else "FAIL")
               if any(c["criterion"] == k for c in judged) else "not judged" for k in (1, 2)}
    for k, v in overall.items():
        log(f"criterion {k}: {v}")
    side = []
    for wl in workloads:
        # The count script has no C handler of its own: its column stays empty.
        count_cols = [LOPI_E, TRACE_C, None, BPF_C, FRIDA_C, STAP_C]
        for script, cfgs in ((COUNT_SCRIPT, count_cols), (f"func:{wl.fn}:return {{ @h = hist(elapsed); }}", HIST)):
            if script != COUNT_SCRIPT and not wl.fn:
                continue
            cells = []
            for cfg in cfgs:
                e = next((e for e in entries if e["workload"] == wl.title and e["config"] == cfg), None)
                cells.append("-" if e is None else fmt_ns(e.get("ns_per_call")) if e["status"] == "ok" else e["status"])
            side.append([wl.title, f"`{script}`", *cells])

    machine = h.machine_info(REPO, [("lopi binary", lopi_info), *versions(),
                                    ("sqlite", h.sqlite_source_line(a.sqlite_dir)),
                                    *h.load_and_time(load_start, t_start)])
    md = [
        *h.results_head("lopi trace: what a probe script costs, next to bpftrace, Frida and SystemTap",
                        "bench/trace/run.sh", q, machine),
        "",
        "## Method",
        "",
        f"- W1 = `bench/workloads/w1.c` built with `gcc {' '.join(h.W1_FLAGS)}`; time = its hot section's own "
        "CLOCK_MONOTONIC time (`hot_ns=`). W1 loop calls the 4-byte `tiny` (`lea; ret`), W1 fib the recursive "
        f"`fib`. W2 = sqlite `speedtest1` + amalgamation built with `gcc {' '.join(h.W2_FLAGS)}`; time = its "
        "`TOTAL`; count script only.",
        f"- The scripts: count `{COUNT_SCRIPT}` and hist `func:F:return {{ @h = hist(elapsed); }}` with F = `tiny` "
        "(W1 loop) or `fib` (W1 fib), run by `lopi trace --format json -o FILE -e SCRIPT -- PROG` (calls = the "
        "map's values, or the histogram's buckets, summed). Their references: `lopi run -q --probe entry` (every "
        "function counted) and `lopi run -q --probe entry,exit --functions F` (F timed); calls from `lopi report "
        "--format json`.",
        "- The same scripts elsewhere: bpftrace (count: a uprobe on every function symbol with a size, "
        "`{ @[func] = count(); }`; hist: a uprobe on F keeping `nsecs` per thread and call depth, a uretprobe "
        "adding `nsecs` minus it to `hist()`); Frida's Interceptor with a CModule (count: "
        "`bench/anchors/frida_count.py --mode cmodule`, a per-function counter in C on every function symbol; hist: "
        "`trace.py frida-hist`, C onEnter/onLeave taking `clock_gettime(CLOCK_MONOTONIC)` and adding the difference "
        "to a log2 histogram); SystemTap's dyninst runtime (`stap --dyninst`, `process.function` probes, "
        "`@entry()` for the elapsed time). A tool that cannot be installed or run here is shown as skipped, "
        "with its error.",
        "- Sizes: bpftrace traps into the kernel on every probe hit (and single-steps `tiny`'s first "
        f"instruction), so bpftrace, Frida and SystemTap run W1 at smaller sizes (loop {slow_loop:,}, "
        f"fib({slow_fib[0]})x{slow_fib[1]}; in brackets after their configuration), each against an uninstrumented "
        "run of that size in the same rounds; lopi runs the sizes in the workload column. W1's work is linear in "
        "its size, so ns per call compare across sizes.",
        f"- Runs: configurations of one workload interleaved round-robin with the uninstrumented program(s), order "
        f"rotated each round, one unrecorded warm-up round, n={n} recorded runs each. Overhead ns/call = (median − "
        "uninstrumented median of the same size) / calls, calls = what each tool counted itself. Output: the "
        "program's call count and checksum (W1), speedtest1's output without times (W2), against the "
        "uninstrumented run's; the notes compare the hot function's count with W1's own.",
        f"- Criteria (the issue's): 1. the count script costs at most {CRIT1_RATIO:g}x lopi's plain counting probe "
        f"per call; 2. the hist script costs at most the timing probe's cost + {CRIT2_NS:g} ns per call.",
        "",
        "## Results",
        "",
        h.markdown_table(header, rows),
        "",
        "## The criteria",
        "",
        h.markdown_table(["workload", "criterion", "script", "lopi trace ns/call", "reference ns/call", "measured",
                          "limit", "verdict"], crit_rows),
        "",
        f"- Criterion 1 (count script ≤ {CRIT1_RATIO:g}x `lopi run --probe entry`): **{overall[1]}**.",
        f"- Criterion 2 (hist script ≤ `lopi run --probe entry,exit` + {CRIT2_NS:g} ns): **{overall[2]}**.",
        "",
        "## The same scripts side by side (overhead ns per call)",
        "",
        h.markdown_table(["workload", "script", "lopi (reference)", "lopi trace", "lopi C handler", "bpftrace",
                          "Frida CModule", "SystemTap dyninst"], side),
        "",
        "Reference: `lopi run --probe entry` for the count script, `lopi run --probe entry,exit --functions F` for "
        "the hist script. `-`: the tool did not instrument the hot function (Frida refuses `tiny`) or has no "
        "figure; see the notes above.",
        "",
    ]
    raw_meta = {"n": n, "quick": q, "lopi": lopi_info, "skipped": skips,
                "sizes": {"loop": loop_n, "slow_loop": slow_loop, "fib": fib, "slow_fib": slow_fib, "size": size}}
    h.write_results(a.out, md, "trace", raw_meta, all_res, machine, entries, q, criteria=crit,
                    criteria_overall=overall)
    return 0


if __name__ == "__main__":
    sys.exit(frida_hist(sys.argv[2:]) if sys.argv[1:2] == ["frida-hist"] else main())
