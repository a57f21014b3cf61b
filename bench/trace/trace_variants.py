"""The trace benchmark's configurations: their names, labels and tools, its workloads, and the
variant that runs each (lopi trace, lopi run, bpftrace, Frida, SystemTap)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Optional

import anchors
import harness as h

HERE = Path(__file__).resolve().parent
BUILD = HERE.parents[1] / "work-real" / "bench-build" / "trace"
TRACE_PY = HERE / "trace.py"  # `trace.py frida-hist` runs the hist script under Frida

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

    return h.Variant(FRIDA_H, [sys.executable, str(TRACE_PY), "frida-hist", "--fn", str(wl.fn),
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
