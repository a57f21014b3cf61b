"""A benchmark's outputs: its Markdown, every run (.runs.json) and the entries bench/run.sh's
summary merges (.summary.json), with the workload kinds and tool names they share (part of the
harness: bench/lib/harness.py re-exports it)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Optional

from figures import failure_note, median_calls, output_mismatch, stats
from runs import REPO, RunResult, Variant, log


# Chart groups of the workloads (bench/lib/summary.py draws one group of bars per kind).
KIND = {"w1-fib": "W1 fib", "w1-loop": "W1 loop", "w2": "W2 speedtest1",
        "zstd-src-c": "zstd -3 (source build)", "zstd-src-d": "zstd -d (source build)",
        "zstd-deb-c": "zstd -3 (Debian binary)", "zstd-deb-d": "zstd -d (Debian binary)"}
# Tool names shared by the benchmarks: one colour per tool in overhead.png.
TOOL = {
    "base": "uninstrumented",
    "lopi-entry": "lopi entry count",
    "lopi-timing": "lopi entry+exit timing",
    "lopi-sampled": "lopi entry+exit, sampled time",
    "gcc-count": "gcc -finstrument-functions + count hook",
    "gcc-timing": "gcc -finstrument-functions + timing hook",
    "uftrace-pg": "uftrace, -pg build",
    "uftrace-pfe": "uftrace -P ., patchable build",
    "uftrace-dyn": "uftrace -P ., unmodified binary",
    "gprof": "gprof (gcc -pg, mcount)",
    "callgrind": "valgrind callgrind",
    "bpftrace": "bpftrace uprobes",
    "frida-js": "frida Interceptor, JS onEnter",
    "frida-cmodule": "frida Interceptor, CModule onEnter",
}


def summary_entry(bench: str, key: str, workload: str, v: Variant, res: dict, label: str, tool: str,
                  expected: Optional[dict] = None, output: Optional[str] = None, base: str = "baseline") -> dict:
    """One row of bench/results/summary.md: configuration `v` on one workload, next to the baseline
    `base` run in the same rounds. expected: {"fn", "calls"} of W1 (ns/call is left out when the tool
    did not record that function); output: the verdict on its output, else from `v.check`."""
    e = {"bench": bench, "key": key, "kind": KIND.get(key, key), "workload": workload, "config": v.name,
         "label": label, "tool": tool, "is_baseline": v.name == base}
    runs = res.get(v.name, [])
    if v.skip_reason:
        return dict(e, status="skipped", reason=v.skip_reason)
    failed = failure_note(runs)
    if failed or stats(runs) is None:
        return dict(e, status="failed", reason=failed or "no recorded run")
    st, b = stats(runs), stats(res.get(base, []))
    calls, calls_text = median_calls(runs)
    if output is None and v.name != base and v.check is not None:
        output = "DIFFERS" if output_mismatch(v.check, res.get(base, []), runs) else "identical"
    e.update(status="ok", n=st.n, median_s=st.median, lo_s=st.lo, hi_s=st.hi, wall_median_s=st.wall_median,
             calls=calls, calls_text=calls_text, output=output or "-")
    per_fn = next((r.extra["per_fn"] for r in runs if "per_fn" in r.extra), None)
    if v.name != base and b:
        e["ratio"] = st.median / b.median
        e["within_spread"] = st.lo <= b.hi  # its fastest run is not slower than the baseline's slowest
        if expected and per_fn is not None and not per_fn.get(expected["fn"]):
            e["ns_note"] = f"{expected['fn']} not instrumented: ns/call not comparable"
        elif calls:
            e["ns_per_call"] = (st.median - b.median) / calls * 1e9
    return e


def summary_entries(bench: str, key: str, workload: str, variants: list[Variant], res: dict, labels: dict,
                    tools: dict, expected: Optional[dict] = None, outputs: Optional[dict] = None,
                    notes: Optional[dict] = None) -> list[dict]:
    """summary_entry of every variant (labels/tools: by variant name; outputs: verdicts by name;
    notes: extra notes by name)."""
    out = []
    for v in variants:
        e = summary_entry(bench, key, workload, v, res, labels[v.name], tools[v.name], expected,
                          (outputs or {}).get(v.name))
        e["notes"] = list((notes or {}).get(v.name, []))
        out.append(e)
    return out


def dump_raw(path: Path, meta: dict, groups: dict[str, dict[str, list[RunResult]]]) -> None:
    """Every run of every variant (stdout/stderr trimmed), for re-analysis."""

    def trim(s: str) -> str:
        return s if len(s) < 4000 else s[:1000] + "\n...\n" + s[-2500:]

    def slim(extra: dict) -> dict:
        if "per_fn" not in extra:
            return extra
        top = sorted(extra["per_fn"].items(), key=lambda kv: -kv[1])[:20]
        return dict(extra, per_fn=dict(top), per_fn_note="top 20 functions by calls")

    data = {"meta": meta, "workloads": {}}
    for wl, res in groups.items():
        data["workloads"][wl] = {
            v: [dict(dataclasses.asdict(r), stdout=trim(r.stdout), stderr=trim(r.stderr), extra=slim(r.extra)) for r in runs]
            for v, runs in res.items()
        }
    path.write_text(json.dumps(data, indent=1))


def write_results(out: Path, md: list[str], bench: str, raw_meta: dict, all_res: dict,
                  machine: list[tuple[str, str]], entries: list[dict], quick: bool, **summary_extra) -> str:
    """A benchmark's outputs: OUT (the Markdown), OUT.runs.json (every run), OUT.summary.json (for
    bench/run.sh's summary); prints the Markdown on stdout. Returns it."""
    text = "\n".join(md)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = out.with_suffix(".runs.json")
    dump_raw(raw, raw_meta, all_res)
    write_summary(out, bench, machine, entries, quick, **summary_extra)
    print(text)
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    log(f"wrote {shown}, {raw.name} and {out.with_suffix('.summary.json').name}")
    return text


def write_summary(md_path: Path, bench: str, machine: list[tuple[str, str]], entries: list[dict],
                  quick: bool, **extra) -> Path:
    """MD.summary.json next to a benchmark's table: what bench/lib/summary.py merges. It carries
    the run id bench/run.sh sets ($LOPI_BENCH_RUN_ID), so that the summary only takes figures from
    the run that made it."""
    out = md_path.with_suffix(".summary.json")
    data = {"bench": bench, "run_id": os.environ.get("LOPI_BENCH_RUN_ID", ""), "quick": quick,
            "generated": datetime.datetime.now().isoformat(timespec="seconds"), "results": md_path.name,
            "machine": machine, "entries": entries, **extra}
    out.write_text(json.dumps(data, indent=1))
    return out
