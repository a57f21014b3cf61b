#!/usr/bin/env python3
"""lopi trace on a corpus of bpftrace scripts, run as they are, against bpftrace itself.

bench/trace/corpus/*.bt are scripts written in bpftrace's spelling only (uprobe:, uretprobe:,
tracepoint:syscalls:, tracepoint:raw_syscalls:, BEGIN, END, interval:): one-liners of bpftrace's
tutorial and reference guide (the kernel's points moved to the system calls user space sees),
bpftrace's own tools as Debian ships them (/usr/sbin/*.bt, copied unchanged), one-liners on a
fixture of user-space calls, and scripts for Debian programs (bash, sqlite3, grep -P, jq,
sort). Each runs unchanged with `lopi trace --format json FILE -- PROG` and `bpftrace -f json
FILE -c PROG` on a deterministic workload (corpus_cases.py), and for some also attached to the
running workload (`-p PID` for both); what belongs to the workload is compared: counts, sums,
mins, maxes, averages and stats exactly, histograms bucket by bucket, printed lines in order
with the values that differ by nature between runs (pids, times of day, latencies) masked. The
per-event cost is the time of a phase of a fixture (20,000 malloc calls, 20,000 getppid calls,
...) under each tool less its native time, divided by the phase's calls.

    python3 bench/trace/corpus.py [--quick] [--only NAME,...] [--out bench/results/trace-corpus.md]

--quick leaves out the -p runs.

Needs root (bpftrace) and gcc; $LOPI or lopi built here. Prints a verdict per run and writes the
table (and trace-corpus.json: every run's values).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402
from agreement import view  # noqa: E402
from corpus_cases import BASE, CASES, WORKLOADS, Case  # noqa: E402
from corpus_runs import (BPFTRACE, FIXTURES, Result, bpftrace_attach, bpftrace_run, env_ok, lopi_attach,  # noqa: E402
                         lopi_run, native)

SCRIPTS = HERE / "corpus"
SPEC = re.compile(r"^(@\w*)(?:\[(.*)\])?(?::(\w+))?$")


def build() -> None:
    """The fixtures at the paths the scripts name, and the generated inputs (fixed seeds)."""
    (BASE / "data").mkdir(parents=True, exist_ok=True)
    for src, out, flags in (("corpus_app.c", "corpus_app", ["-pthread"]), ("corpus_io.c", "iofix", [])):
        subprocess.run(["gcc", "-O2", "-g", *flags, "-o", str(BASE / out), str(FIXTURES / src)], check=True)
    for name, size, byte in (("small.txt", 100, b"a"), ("medium.txt", 5000, b"b"), ("big.bin", 70000, b"c")):
        (BASE / "data" / name).write_bytes(byte * size)
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "error", "warning", "info", "debug"]
    (BASE / "log.txt").write_text("".join(f"{i:05d} {rng.choice(words)} {rng.choice(words)} value={rng.randint(0, 999)}\n"
                                          for i in range(2000)))
    items = [{"id": i, "name": rng.choice(words), "n": rng.randint(0, 99), "tags": [rng.choice(words) for _ in range(3)]}
             for i in range(300)]
    (BASE / "data.json").write_text(json.dumps(items))
    (BASE / "words.txt").write_text("".join(f"{rng.choice(words)}-{rng.randint(0, 99999)}\n" for _ in range(20000)))


def pick(maps: dict, spec: str):
    """What spec `@m[KEY]:mode` selects of a tool's maps (a map nothing updated is 0, as bpftrace
    prints it)."""
    name, key, mode = SPEC.match(spec).groups()
    value = maps.get(name, 0)
    if key is not None:
        value = value.get(key, 0) if isinstance(value, dict) else 0
    return view(value, mode or "")


def lines_of(case: Case, r: Result) -> list[str]:
    keep, masks = case.lines.get("keep"), case.lines.get("mask", [])
    out = []
    for line in r.lines:
        if keep and not re.search(keep, line):
            continue
        for mask in masks:
            line = re.sub(mask, "*", line)
        out.append(line)
    return sorted(out) if case.lines.get("sort") else out


def compared(case: Case, r: Result) -> dict:
    got = {spec: pick(r.maps, spec) for spec in case.maps}
    if case.lines is not None:
        got["lines"] = lines_of(case, r)
    return got


def cost(case: Case, r: Result, native_phases: dict) -> str:
    """ns per call of the probed function in the case's phase, under the tool of `r`."""
    if not case.cost or case.cost[0] not in r.phases or case.cost[0] not in native_phases:
        return ""
    phase, calls = case.cost
    return f"{(r.phases[phase] - native_phases[phase]) / calls:,.0f}"


def judge(case: Case, lopi: Result, bpf: Result, plain: str, skip: str) -> tuple[str, list[str]]:
    if lopi.error:
        kind = "lopi refused" if lopi.refused else "lopi failed"
        other = f"bpftrace failed too: {bpf.error}" if bpf.error and not skip else "bpftrace runs it" if not skip else ""
        return f"{kind}: {lopi.error}" + (f" ({other})" if other else ""), []
    if skip:
        return f"bpftrace not run: {skip}", []
    if bpf.error:
        return f"bpftrace failed: {bpf.error}", []
    problems = []
    got_l, got_b = compared(case, lopi), compared(case, bpf)
    for what in got_l:
        if got_l[what] != got_b[what]:
            problems.append(f"{what}: lopi {json.dumps(got_l[what])[:300]} bpftrace {json.dumps(got_b[what])[:300]}")
    for tool, r in (("lopi", lopi), ("bpftrace", bpf)):
        if r.stdout != plain:
            problems.append(f"the program printed {r.stdout[-120:]!r} under {tool}, not {plain[-120:]!r}")
    return ("FAIL" if problems else "PASS"), problems


def shown(got: dict) -> str:
    parts = []
    for what, value in got.items():
        text = json.dumps(value) if what != "lines" else " / ".join(value)
        parts.append(f"{what}={text}" if what != "lines" else f"{len(value)} lines: {text}")
    text = "; ".join(parts)
    return text if len(text) <= 240 else text[:237] + "..."


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "bench/results/trace-corpus.md"))
    ap.add_argument("--only", default="", help="comma-separated script names (without .bt)")
    ap.add_argument("--quick", action="store_true", help="from the program's start only (-c), no -p runs")
    args = ap.parse_args()
    only = {n if n.endswith(".bt") else n + ".bt" for n in args.only.split(",") if n}
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    found, lopi_info = h.find_lopi(Path(os.environ.get("LOPI") or target / "release" / "lopi"))
    if found is None:
        print(f"no lopi binary ({lopi_info}): set LOPI or build it (cargo build --release -p lopi-cli)", file=sys.stderr)
        return 2
    lopi = str(found)
    t0, load0 = time.time(), h.loadavg()
    skip = env_ok()
    build()
    plain = {name: native(wl) for name, wl in WORKLOADS.items()}
    rows = []
    out = Path("/tmp/lopi-corpus/lopi-out.txt")
    for case in CASES:
        if only and case.script not in only:
            continue
        wl, script = WORKLOADS[case.workload], SCRIPTS / case.script
        for mode in ("-c", "-p") if case.pid and not args.quick else ("-c",):
            if mode == "-c":
                lres = lopi_run(lopi, script, wl, out)
                bres = bpftrace_run(script, wl) if not skip else Result(error=skip)
            else:
                lres = lopi_attach(lopi, script, wl, out)
                bres = bpftrace_attach(script, wl) if not skip else Result(error=skip)
            base_out, base_phases = plain[case.workload]
            verdict, problems = judge(case, lres, bres, base_out, skip)
            row = {"script": case.script, "mode": mode, "workload": case.workload, "origin": case.origin,
                   "compared": case.maps + (["lines"] if case.lines is not None else []), "verdict": verdict,
                   "problems": problems, "note": case.note, "lopi": compared(case, lres) if not lres.error else None,
                   "bpftrace": compared(case, bres) if not bres.error and not lres.error else None,
                   "cost_phase": case.cost, "phase_ns": {"native": base_phases, "lopi": lres.phases, "bpftrace": bres.phases},
                   "ns_per_event": {"lopi": cost(case, lres, base_phases), "bpftrace": cost(case, bres, base_phases)}}
            # The scripts' paths as the repository names them.
            row["verdict"] = row["verdict"].replace(f"{REPO}/", "")
            rows.append(row)
            print(f"{verdict.split(':')[0]} {case.script} {mode}: {'; '.join(problems)[:400] or verdict}", flush=True)
    write(Path(args.out), rows, lopi_info, skip, load0, t0)
    # A difference or refusal no case explains is news: say so by the exit status.
    return 1 if any(r["verdict"] != "PASS" and not r["note"] for r in rows) else 0


def write(out: Path, rows: list[dict], lopi: str, skip: str, load0: str, t0: float) -> None:
    counts = {}
    for r in rows:
        kind = r["verdict"].split(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    scripts = sorted({r["script"] for r in rows})
    all_pass = [s for s in scripts if all(r["verdict"] == "PASS" for r in rows if r["script"] == s)]
    table, why = [], []
    for r in rows:
        verdict = r["verdict"] + (f" ({'; '.join(r['problems'])})" if r["problems"] else "")
        if r["note"]:
            verdict += f". Why: {r['note']}" if r["verdict"] != "PASS" else f" ({r['note']})"
        if r["verdict"] != "PASS":
            why.append(f"- `{r['script']}` {r['mode']}: **{r['verdict'].split(':')[0]}**"
                       f"{': ' + r['verdict'].split(':', 1)[1].strip() if ':' in r['verdict'] else ''}"
                       f"{'. ' + r['note'] if r['note'] else ''}")
        lopi_cell = cell(shown(r["lopi"])) if r["lopi"] is not None else "—"
        bpf_cell = "—" if r["bpftrace"] is None else "= lopi" if r["bpftrace"] == r["lopi"] else cell(shown(r["bpftrace"]))
        cost_cell = " / ".join(x or "—" for x in (r["ns_per_event"]["lopi"], r["ns_per_event"]["bpftrace"]))
        calls = f"{r['cost_phase'][1]:,} ({r['cost_phase'][0]})" if r["cost_phase"] else "—"
        table.append([f"[{r['script']}](../trace/corpus/{r['script']})", r["mode"], r["origin"], r["workload"],
                      ", ".join(r["compared"]), lopi_cell, bpf_cell, cell(verdict), calls, cost_cell])
    machine = h.machine_lines(REPO, [("bpftrace", h.tool_version([BPFTRACE, "--version"]) if not skip else skip),
                                     ("lopi", lopi)] + h.load_and_time(load0, t0))
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    md = [
        "# lopi trace on bpftrace's own scripts",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, written by `bench/trace/corpus.sh` "
        "(`bench/trace/corpus.py`).",
        "",
        *machine,
        "",
        f"**{len(scripts)} scripts, {len(rows)} runs ({sum(r['mode'] == '-p' for r in rows)} attached with -p): {summary}.** "
        f"{len(all_pass)} scripts pass in every mode they ran. The others, and why:",
        "",
        *why,
        "",
        "Each script of [bench/trace/corpus/](../trace/corpus/) is written as a bpftrace user writes it (bpftrace's "
        "spellings only; bpftrace's tools copied from Debian's /usr/sbin as they are) and runs unchanged: "
        "`lopi trace --format json FILE -- PROG` against `bpftrace -f json FILE -c PROG` (mode `-c`), and for some "
        "also both attached to the running workload (`-p PID`: the workload waits for a line on stdin, each tool "
        "attaches, then the line is written). bpftrace's tracepoints and its uprobes on libraries and /bin/bash fire "
        "in every process of the machine, so only the workload's part is compared: its process name's key "
        "(`@[corpus_io]`), or the printed lines of it; pids, times of day and latencies are masked in lines (`*`) "
        "and counted only in maps (`:total`). Counts, sums, mins, maxes, averages and stats are compared exactly, "
        "histograms bucket by bucket (lower edge, count), lines in order. A run passes only if the program also "
        "printed what it prints alone. The workloads ([corpus_cases.py](../trace/corpus_cases.py)) are deterministic:",
        "",
        *[f"- `{name}`: {wl.desc}" for name, wl in WORKLOADS.items()],
        "",
        "The fixture `iofix` names itself `corpus_io` first thing in main: the dynamic loader's start-up calls "
        "(opening and reading libc), which bpftrace sees and lopi does not (its probes start at the program's "
        "entry point), are made under the name `iofix` and are not compared. With `-p`, the fixtures wait for their "
        "line in poll(), not read(): a system call in progress when the tools attach is seen returning by bpftrace's "
        "tracepoint and not by lopi (a fixture waiting in read() gave bpftrace one read more). `ns/event` is (the "
        "time of a phase of the fixture under the tool − its median native time over 5 runs) / the phase's calls of "
        "the probed function or system call (`calls`): lopi's probes run in the program, bpftrace's in the kernel "
        "after a trap (uprobes, uretprobes) or at the system call's tracepoint; one run each, on a 2-CPU machine "
        "shared with other jobs.",
        "",
        h.markdown_table(["script", "mode", "origin", "workload", "compared", "lopi", "bpftrace", "verdict", "calls",
                          "ns/event lopi / bpftrace"], table),
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md))
    out.with_suffix(".json").write_text(json.dumps({"run_id": os.environ.get("LOPI_BENCH_RUN_ID", ""), "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}: {summary}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
