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
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402
from live_runs import run_config  # noqa: E402
from live_tables import rng, summarize, table  # noqa: E402
from live_workload import BUILD, build_workload, functions  # noqa: E402

log = h.log


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
