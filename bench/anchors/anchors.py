#!/usr/bin/env python3
"""The anchors: tools that count or trace every call without lopi, next to lopi and the
uninstrumented program, on the call-heavy micro-benchmark (W1) and on speedtest1 (W2).

Configurations (each skipped, with the reason printed, when it cannot run here):
  uninstrumented; lopi rewrite --probe entry; lopi rewrite --probe entry,exit;
  gprof         the same source built with `gcc -pg` (mcount arcs + sampling), gmon.out per run,
                calls from `gprof -b -q`;
  callgrind     `valgrind --tool=callgrind`: simulates the whole program; its call counts are the
                exact oracle that lopi's counts are compared with;
  bpftrace      a uprobe on every function of the binary (`uprobe:BIN:f1,... { @c[probe] = count(); }`);
                W1 only (speedtest1's ~1,400 uprobes take minutes to attach; --bpftrace-w2 adds it);
  frida         frida_count.py/.js: Interceptor.attach on every function symbol of the program, with a
                JavaScript onEnter and with a CModule (native C) onEnter.
Sizes are smaller than in bench/entry-count and bench/timing: the slow anchors cost 0.1-1 us per call.

Run through run.sh; `anchors.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "anchors"  # rewritten programs, tool data
FRIDA_RUNNER = HERE / "frida_count.py"
log = h.log

BASE, LOPI_E, LOPI_T, GPROF, CALLGRIND, BPF, FRIDA_JS, FRIDA_C = (
    "baseline", "lopi-entry", "lopi-timing", "gprof", "callgrind", "bpftrace", "frida-js", "frida-cmodule")
LABEL = {
    BASE: "uninstrumented",
    LOPI_E: "lopi rewrite --probe entry (all functions)",
    LOPI_T: "lopi rewrite --probe entry,exit (all functions)",
    GPROF: "gcc -pg build (gprof: mcount + sampling)",
    CALLGRIND: "valgrind --tool=callgrind",
    BPF: "bpftrace, uprobe on every function",
    FRIDA_JS: "frida Interceptor.attach, JavaScript onEnter",
    FRIDA_C: "frida Interceptor.attach, CModule onEnter",
}
TOOLS = {BASE: h.TOOL["base"], LOPI_E: h.TOOL["lopi-entry"], LOPI_T: h.TOOL["lopi-timing"], GPROF: h.TOOL["gprof"],
         CALLGRIND: h.TOOL["callgrind"], BPF: h.TOOL["bpftrace"], FRIDA_JS: h.TOOL["frida-js"],
         FRIDA_C: h.TOOL["frida-cmodule"]}
LOPI_ARGS = {LOPI_E: ["--probe", "entry"], LOPI_T: ["--probe", "entry,exit"]}
CONFIGS = (BASE, LOPI_E, LOPI_T, GPROF, CALLGRIND, BPF, FRIDA_JS, FRIDA_C)


# ---------------------------------------------------------------- building


def build_all(sqlite_dir: Path) -> dict:
    w1, w1f = h.W1_SRC, h.W1_FLAGS
    # the same names and flags as bench/timing's -pg builds: one cached binary for both
    b = {"w1": {BASE: h.build("w1", [*w1f, str(w1)], [w1]),
                GPROF: h.build("w1-uftrace-pg", [*w1f, "-pg", str(w1)], [w1])}}
    b["w2"] = h.build_parallel({BASE: h.w2_job("speedtest1", sqlite_dir),
                                GPROF: h.w2_job("speedtest1-uftrace-pg", sqlite_dir, ["-pg"])})
    return b


# ---------------------------------------------------------------- the tools' counts


def gprof_hooks(prog: Path, datadir: Path):
    """(before, after): gmon.out of each run under datadir ($GMON_OUT_PREFIX), calls from gprof's
    call graph (`called` column: direct + recursive calls of every -pg function)."""
    row = re.compile(r"^\[\d+\]\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)(?:\+(\d+))?\s+(\S+)", re.M)

    def before(idx: int) -> dict:
        shutil.rmtree(datadir, ignore_errors=True)
        datadir.mkdir(parents=True)
        return {"GMON_OUT_PREFIX": str(datadir / "gmon.out")}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        files = list(datadir.glob("gmon.out*"))
        if not files:
            return {"after_error": f"no gmon.out in {datadir}"}
        p = subprocess.run(["gprof", "-b", "-q", str(prog), *map(str, files)], capture_output=True, text=True,
                           timeout=600)
        per_fn: dict[str, int] = {}
        for m in row.finditer(p.stdout):
            if not m.group(3).startswith("<"):
                per_fn[m.group(3)] = per_fn.get(m.group(3), 0) + int(m.group(1)) + int(m.group(2) or 0)
        if not per_fn:
            return {"after_error": f"gprof listed no call: {p.stderr.strip()[-200:]}"}
        return {"calls": sum(per_fn.values()), "per_fn": per_fn}

    return before, after


def callgrind_counts(out: Path, prog: Path) -> dict[str, int]:
    """Calls of each function of `prog` in a callgrind file written with --compress-strings=no
    --compress-pos=no (callgrind's recursion levels, `fib'2`, summed into `fib`; functions it names
    by address, having no debug information, named from the symbol table)."""
    obj = os.path.realpath(prog)
    by_addr = {addr: name for name, (addr, _) in symbols(prog).items()}
    per_fn: dict[str, int] = {}
    ob = cob = cfn = None
    with out.open() as f:
        for line in f:
            if line.startswith("ob="):
                ob = line[3:].strip()
            elif line.startswith("cob="):
                cob = line[4:].strip()
            elif line.startswith("cfn="):
                cfn = line[4:].strip()
            elif line.startswith("calls="):
                if (cob or ob) == obj and cfn:
                    name = re.sub(r"'\d+$", "", cfn)
                    if re.fullmatch(r"0x[0-9a-f]+", name):
                        name = by_addr.get(int(name, 16), name)
                    per_fn[name] = per_fn.get(name, 0) + int(line[6:].split()[0])
                cob = None  # a cob= names the callee's object of the next call only
    return per_fn


def callgrind_after(out: Path, prog: Path):
    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not out.exists():
            return {"after_error": f"no callgrind output {out}"}
        per_fn = callgrind_counts(out, prog)
        out.unlink()
        return {"calls": sum(per_fn.values()), "per_fn": per_fn}

    return after


def symbols(prog: Path) -> dict[str, tuple[int, int]]:
    """{name: (address, size)} of the function symbols in prog's .symtab."""
    p = subprocess.run(["nm", "-S", "--defined-only", str(prog)], capture_output=True, text=True, check=True)
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 3:  # nm -S prints no size for size-0 symbols
            f.insert(1, "0")
        if len(f) == 4 and f[2] in ("t", "T"):
            out[f[3]] = (int(f[0], 16), int(f[1], 16))
    return out


def functions_of(prog: Path) -> list[str]:
    """Function symbols with a size (what `uprobe:BIN:*` means, less the size-0 ones bpftrace refuses)."""
    return sorted(name for name, (_, size) in symbols(prog).items() if size > 0)


BPF_ROW = re.compile(r"^@c\[uprobe:[^\]]*:([^:\]]+)\]: (\d+)$", re.M)


def bpftrace_variant(prog: Path, argv_tail: list[str], datadir: Path, metric, check, skip_reason: str) -> h.Variant:
    fns = functions_of(prog)
    datadir.mkdir(parents=True, exist_ok=True)
    script = datadir / "count.bt"
    script.write_text(",\n".join(f"uprobe:{prog}:{f}" for f in fns) + "\n{ @c[probe] = count(); }\n")

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        per_fn = {m.group(1): int(m.group(2)) for m in BPF_ROW.finditer(stdout)}
        if not per_fn:
            return {"after_error": "no `@c[...]` counts in bpftrace's output"}
        return {"calls": sum(per_fn.values()), "per_fn": per_fn, "functions": len(fns)}

    limit = str(len(fns) + 64)
    return h.Variant(BPF, ["bpftrace", str(script), "-c", " ".join([str(prog), *argv_tail])], metric,
                     env={"BPFTRACE_MAX_PROBES": limit, "BPFTRACE_MAX_BPF_PROGS": limit}, after=after,
                     check=(lambda out: check(strip_bpf_maps(out))) if check else None, timeout_s=1800,
                     skip_reason=skip_reason)


def strip_bpf_maps(stdout: str) -> str:
    """The program's own output: bpftrace's map dump (`@c[...]: N`) and its blank lines removed."""
    return "\n".join(line for line in stdout.splitlines() if line.strip() and not line.startswith("@"))


def frida_variant(name: str, mode: str, prog: Path, argv_tail: list[str], datadir: Path, metric, check,
                  skip_reason: str) -> h.Variant:
    counts = datadir / f"{name}.json"
    datadir.mkdir(parents=True, exist_ok=True)

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not counts.exists():
            return {"after_error": "frida_count.py wrote no counts"}
        d = json.loads(counts.read_text())
        counts.unlink()
        return {"calls": sum(d["per_fn"].values()), "per_fn": d["per_fn"], "refused": d["refused"]}

    return h.Variant(name, [sys.executable, str(FRIDA_RUNNER), "--mode", mode, "--counts", str(counts), "--",
                            str(prog), *argv_tail], metric, after=after, check=check, timeout_s=1800,
                     skip_reason=skip_reason)


# ---------------------------------------------------------------- preflight


def preflight(w1: Path) -> dict[str, str]:
    """{config: why it cannot run here} for the anchors, from a one-call run of W1 under each."""
    why: dict[str, str] = {}
    probe = [str(w1), "loop", "10"]

    def attempt(argv: list[str], ok: re.Pattern, env: Optional[dict] = None) -> str:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, **(env or {})))
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{type(e).__name__}: {e}"
        if p.returncode == 0 and ok.search(p.stdout + p.stderr):
            return ""
        lines = [ln for ln in (p.stderr + p.stdout).strip().splitlines() if "ERROR" in ln or "rror" in ln]
        tail = (lines or (p.stderr + p.stdout).strip().splitlines() or ["no output"])[-1][:200]
        return f"cannot run here (exit {p.returncode}): {tail}"

    if not h.which("gprof"):
        why[GPROF] = "gprof not installed (binutils)"
    if not h.which("valgrind"):
        why[CALLGRIND] = "valgrind not installed (apt-get install valgrind failed)"
    else:
        why[CALLGRIND] = attempt(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *probe],
                                 re.compile(r"calls_expected=10"))
    if not h.which("bpftrace"):
        why[BPF] = "bpftrace not installed (apt-get install bpftrace failed)"
    else:
        why[BPF] = attempt(["bpftrace", "-e", f"uprobe:{w1}:tiny {{ @c = count(); }}", "-c", " ".join(probe)],
                           re.compile(r"^@c: 10$", re.M))
    frida = [sys.executable, str(FRIDA_RUNNER), "--mode", "js", "--", str(w1), "fib", "5", "1"]
    why[FRIDA_JS] = attempt(frida, re.compile(r"frida_count: calls=\d+"))
    if why[FRIDA_JS]:
        why[FRIDA_C] = why[FRIDA_JS]
    else:
        why[FRIDA_C] = attempt([*frida[:3], "cmodule", *frida[4:]], re.compile(r"frida_count: calls=\d+"))
    for k, v in why.items():
        log(f"{k}: {'ready' if not v else 'skipped: ' + v}")
    return {k: v for k, v in why.items() if v}


def versions() -> list[tuple[str, str]]:
    frida = h._cmd([sys.executable, "-c", "import frida; print(frida.__version__)"]) or "not installed"
    return [("valgrind", h.tool_version(["valgrind", "--version"])),
            ("bpftrace", h.tool_version(["bpftrace", "--version"])),
            ("frida", f"frida {frida} (Python bindings, PyPI)"),
            ("gprof", h.tool_version(["gprof", "--version"]))]


# ---------------------------------------------------------------- variants and tables


def make_variants(key: str, argv_tail: list[str], bins: dict, skip: dict, lopi: Optional[Path], metric,
                  check) -> list[h.Variant]:
    data = BUILD / "data" / key
    prog = bins[BASE]
    vs = [h.Variant(BASE, [str(prog), *argv_tail], metric, check=check)]
    for cfg in (LOPI_E, LOPI_T):
        lb, la = h.lopi_data_hooks(lopi, data / cfg)
        vs.append(h.Variant(cfg, [str(bins.get(cfg, "lopi-missing")), *argv_tail], metric, before=lb, after=la,
                            check=check, skip_reason=skip.get(cfg, "")))
    gb, ga = gprof_hooks(bins[GPROF], data / "gmon")
    vs.append(h.Variant(GPROF, [str(bins[GPROF]), *argv_tail], metric, before=gb, after=ga, check=check,
                        skip_reason=skip.get(GPROF, "")))
    cg_out = data / "callgrind.out"
    data.mkdir(parents=True, exist_ok=True)
    vs.append(h.Variant(CALLGRIND, ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no", "--show-below-main=yes",
                                    f"--callgrind-out-file={cg_out}", str(prog), *argv_tail], metric,
                        after=callgrind_after(cg_out, prog), check=check, timeout_s=1800,
                        skip_reason=skip.get(CALLGRIND, "")))
    vs.append(bpftrace_variant(prog, argv_tail, data / "bpftrace", metric, check, skip.get(BPF, "")))
    for cfg, mode in ((FRIDA_JS, "js"), (FRIDA_C, "cmodule")):
        vs.append(frida_variant(cfg, mode, prog, argv_tail, data, metric, check, skip.get(cfg, "")))
    return vs


def per_fn_of(runs: list[h.RunResult]) -> Optional[dict]:
    return next((r.extra["per_fn"] for r in runs if r.ok and "per_fn" in r.extra), None)


def oracle(title: str, res: dict) -> tuple[Optional[str], Optional[str]]:
    """(Markdown row, note for lopi's entry) comparing lopi's per-function counts with callgrind's."""
    lp, cg = per_fn_of(res.get(LOPI_E, [])), per_fn_of(res.get(CALLGRIND, []))
    if lp is None or cg is None:
        return None, None
    unprobed = sorted(n for n, c in cg.items() if c and n not in lp)  # lopi's report lists probed functions
    names = {n for n, c in lp.items() if c} | {n for n, c in cg.items() if c and n in lp}
    same = sorted(n for n in names if lp.get(n, 0) == cg.get(n, 0))
    differ = sorted(names - set(same), key=lambda n: -max(lp.get(n, 0), cg.get(n, 0)))
    shown = ", ".join(f"`{n}` lopi {lp.get(n, 0):,} / callgrind {cg.get(n, 0):,}" for n in differ[:8])
    more = f" (+{len(differ) - 8} more)" if len(differ) > 8 else ""
    not_probed = ", ".join(f"`{n}` ({cg[n]:,} calls)" for n in unprobed[:5]) + (" …" if len(unprobed) > 5 else "")
    row = (f"| {title} | {len(names)} | {len(same)} | {sum(lp.get(n, 0) for n in names):,} | "
           f"{sum(cg.get(n, 0) for n in names):,} | {shown + more or 'none'} | {not_probed or '-'} |")
    return row, f"callgrind counts the same calls for {len(same)} of {len(names)} probed functions called"


def extra_notes(res: dict, vs: list[h.Variant]) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {CALLGRIND: ["callgrind simulates every instruction: its ns/call is the "
                                               "whole program's slowdown spread over the calls"]}
    for v in vs:
        if v.name in (FRIDA_JS, FRIDA_C):
            refused = next((r.extra.get("refused") for r in res[v.name] if r.ok and "refused" in r.extra), None)
            if refused:
                first = next(iter(refused.items()))
                notes[v.name] = [f"Interceptor refused {len(refused)} functions (e.g. `{first[0]}`: {first[1]})"]
        if v.name == GPROF:
            notes[v.name] = ["calls = mcount arcs of -pg functions (gprof call graph)"]
    return notes


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_size_args(ap, fib="27 10", loop="500000", size="5")
    ap.add_argument("--bpftrace-w2", action="store_true", help="also run bpftrace on speedtest1 (slow)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/anchors.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    fib_n, fib_r = a.fib or ((24, 10) if a.quick else (27, 10))
    loop_n = a.loop or (100_000 if a.quick else 500_000)
    size = a.size or (2 if a.quick else 5)
    t_start = time.time()
    load_start = h.loadavg()
    shutil.rmtree(BUILD / "data", ignore_errors=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    bins = build_all(a.sqlite_dir)

    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    skip, notes = h.rewrite_configs(lopi, a.lopi, bins, LOPI_ARGS, BUILD)
    why = preflight(bins["w1"][BASE])
    for wl in skip:
        skip[wl].update(why)
    if not a.bpftrace_w2 and BPF not in why:
        n_fns = len(functions_of(bins["w2"][BASE]))
        skip["w2"][BPF] = (f"not run on speedtest1 by default: attaching its {n_fns:,} uprobes takes minutes "
                           "(`anchors.py --bpftrace-w2` runs it)")

    w2_title = f"W2 speedtest1 --memdb --size {size}"
    groups = [(key, title, "w1", argv, h.HOT_NS, h.w1_check, fn)
              for key, title, argv, fn in h.w1_groups((fib_n, fib_r), loop_n)]
    groups.append(("w2", w2_title, "w2", ["--memdb", "--size", str(size)], h.TOTAL, h.w2_check, None))
    all_res: dict[str, dict] = {}
    entries: list[dict] = []
    oracle_rows: list[str] = []
    for key, title, wl, argv, metric, check, fn in groups:
        log(f"{title}: n={n} (+1 warm-up), interleaved")
        vs = make_variants(key, argv, bins[wl], skip[wl], lopi, metric, check)
        res = h.run_interleaved(vs, n, warmup=1, log=log)
        all_res[title] = res
        expected = h.w1_expected(res[BASE], fn) if fn else {}
        more = extra_notes(res, vs)
        for cfg, ns in notes[wl].items():
            more.setdefault(cfg, []).extend(ns)
        row, note = oracle(title, res)
        if row:
            oracle_rows.append(row)
            more.setdefault(LOPI_E, []).insert(0, note)
        entries += h.summary_entries("anchors", key, title, vs, res, LABEL, TOOLS, expected, notes=more)

    rows = [[e["workload"], e["label"], *h.entry_cells(e)] for e in entries]
    header = ["workload", "config", "time median [min–max]", "x uninstr.", "calls", "overhead ns/call", "output",
              "notes"]
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_info),
        *versions(),
        ("sqlite", h.sqlite_source_line(a.sqlite_dir)),
        *h.load_and_time(load_start, t_start),
    ])
    md = [
        *h.results_head("Anchors: gprof, callgrind, bpftrace and frida next to lopi", "bench/anchors/run.sh", a.quick,
                        machine),
        "",
        "## Method",
        "",
        f"- W1 = `bench/workloads/w1.c` built with `gcc {' '.join(h.W1_FLAGS)}`; time = the hot section's own "
        "CLOCK_MONOTONIC time (`hot_ns=`). W2 = sqlite `speedtest1` + amalgamation built with "
        f"`gcc {' '.join(h.W2_FLAGS)}`; time = its `TOTAL`. Smaller sizes than the other benchmarks: the slow "
        "anchors cost from 0.1 to 10 µs per call.",
        "- Configurations: uninstrumented; `lopi rewrite --probe entry` and `--probe entry,exit` (all functions); "
        "the same source built with `gcc -pg` (gprof: mcount on every call + profil sampling; gmon.out written "
        "at exit; calls from `gprof -b -q`'s call graph); `valgrind --tool=callgrind` (calls of the program's "
        "functions from its output file); `bpftrace` with a uprobe on every function symbol of the program "
        "(`uprobe:BIN:f1,... { @c[probe] = count(); }`, counts from its map); Frida (`bench/anchors/frida_count.py` "
        "spawns the program and `Interceptor.attach`es every function symbol, with a JavaScript `onEnter` and with "
        "a CModule `onEnter` in C that increments a per-function counter).",
        f"- Runs: configurations of one workload interleaved round-robin, order rotated each round, one unrecorded "
        f"warm-up round, n={n} recorded runs each. Overhead ns/call = (median − uninstrumented median) / calls, "
        "calls = what each tool counted itself.",
        "",
        "## Results",
        "",
        h.markdown_table(header, rows),
        "",
        "## Call counts: lopi (`--probe entry`) vs callgrind, the exact oracle",
        "",
        "Per function of the program, the calls in lopi's report and in callgrind's output (callgrind's "
        "recursion levels summed), over the functions lopi probed that either tool saw called; the last column "
        "lists the functions callgrind saw called that lopi did not probe (`lopi info` says why).",
        "",
        "| workload | functions | same count | calls (lopi) | calls (callgrind) | differences | not probed by lopi |",
        "|---|---|---|---|---|---|---|",
        *(oracle_rows or ["| - | callgrind or lopi did not run | | | | | |"]),
        "",
    ]
    h.write_results(a.out, md, "anchors", {"n": n, "quick": a.quick, "lopi": lopi_info, "skipped": skip}, all_res,
                    machine, entries, a.quick, oracle=oracle_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
