"""bench/coverage's checks of lopi's answers: coverage mode (a block's mark, or implied by marked blocks)
against block mode's counts, run by run and block by block, and callgrind's executions per instruction as
an oracle for the blocks where they differ."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Optional

import harness as h

log = h.log


def callgrind_counts(out: Path, obj: str) -> dict[int, int]:
    """{instruction address: executions} of OBJ's code from a callgrind output file written with
    --dump-instr=yes --compress-pos=no --compress-strings=no (cost lines `ADDR LINE Ir`; the lines after
    calls=, jump= and jcnd= are a call's inclusive cost or a jump's source, not executions)."""
    counts: dict[int, int] = {}
    ob, skip, real = "", False, {}
    obj = os.path.realpath(obj)
    rx = re.compile(r"^0x([0-9a-f]+) \d+ (\d+)")
    with out.open() as f:
        for line in f:
            if line.startswith("ob="):
                ob = line[3:].strip()
                ob = real.setdefault(ob, os.path.realpath(ob))
            elif line.startswith(("calls=", "jump=", "jcnd=")):
                skip = True
            elif line[:1].isalpha():
                continue
            elif skip:
                skip = False
            elif ob == obj and (m := rx.match(line)):
                a = int(m.group(1), 16)
                counts[a] = counts.get(a, 0) + int(m.group(2))
    return counts


def block_answers(lopi: Path, data: str, fn: str) -> dict:
    """{block address: (ran, count, no_probe)} of FN's blocks in a record (`lopi report DATA --blocks FN
    --format json`; every function of that name)."""
    p = subprocess.run([str(lopi), "report", data, "--blocks", fn, "--format", "json"], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        return {}
    return {b["address"]: (b["ran"], b["count"], b["no_probe"]) for e in json.loads(p.stdout) for b in e["blocks"]}


def block_mismatches(lopi: Path, cov_data: list[str], blk_data: list[str], fn: str,
                     oracle: Optional[dict] = None) -> tuple[list[str], int]:
    """FN's blocks that block mode counted (a probe, so a measured count) and whose coverage-mode answer
    (its mark, or implied by marked blocks) says the opposite in every run of both modes; and how many
    of its blocks ran in some runs of a mode and not in others (timing: not counted as a contradiction)."""
    covs = [block_answers(lopi, d, fn) for d in cov_data]
    blks = [block_answers(lopi, d, fn) for d in blk_data]
    if not covs or not blks or not all(covs) or not all(blks):
        return [], 0
    wrong, varying = [], 0
    for addr, (_, count, _) in sorted(blks[0].items()):
        counts = [b.get(addr, (None, None, None))[1] for b in blks]
        answers = [c.get(addr, (None, None, None)) for c in covs]
        if count is None or None in counts or any(a[0] is None for a in answers):
            continue
        ran_blk = {n > 0 for n in counts}
        ran_cov = {a[0] for a in answers}
        if len(ran_blk) > 1 or len(ran_cov) > 1:
            varying += 1
        elif ran_blk != ran_cov:
            how = answers[0][2]
            wrong.append(f"{addr:#x}: block mode counted {h.fmt_int(counts[0])}, coverage mode says "
                         f"{'ran' if answers[0][0] else 'did not run'} "
                         f"({'implied, no probe' if how == 'implied' else how or 'its own mark'})"
                         + (f", callgrind on native {oracle.get(addr, 0):,}" if oracle else ""))
    return wrong, varying


def consistency(cov_runs: list, blk_runs: list, lopi: Optional[Path], every_block: bool, deterministic: bool,
                oracle: Optional[dict]) -> list[str]:
    """Coverage mode's answers against block mode's, over all their runs (warm-up included). Per
    function (`lopi coverage DATA --format json`: blocks ran and not known), a contradiction shows when
    one mode has more blocks ran than the other has ran + not known; such functions (EVERY_BLOCK: every
    function that ran) are compared block by block (`lopi report DATA --blocks FUNC --format json`).
    COV_RUNS and BLK_RUNS: harness results of coverage mode and block mode."""
    cov_runs = [r for r in cov_runs if r.ok and "fn_ran" in r.extra]
    blk_runs = [r for r in blk_runs if r.ok and "fn_ran" in r.extra]
    if not cov_runs or not blk_runs or not lopi:
        return []
    fns = sorted(set().union(*(r.extra["fn_ran"] for r in cov_runs + blk_runs)))
    suspects = []
    for fn in fns:
        cs = {tuple(r.extra["fn_ran"].get(fn, [0, 0])) for r in cov_runs}
        bs = {tuple(r.extra["fn_ran"].get(fn, [0, 0])) for r in blk_runs}
        if every_block and any(c[0] or b[0] for c in cs for b in bs):
            suspects.append(fn)
        elif any(c[0] > b[0] + b[1] or b[0] > c[0] + c[1] for c in cs for b in bs):
            suspects.append(fn)
    cov_data = [r.extra["data_path"] for r in cov_runs if "data_path" in r.extra]
    blk_data = [r.extra["data_path"] for r in blk_runs if "data_path" in r.extra]
    n_ran = len(suspects)
    if every_block:  # every block of every function that ran: one run of each mode first, all runs where they differ
        first = [fn for fn in suspects
                 if block_mismatches(lopi, cov_data[-1:], blk_data[-1:], fn.split(":", 1)[1])[0]]
        log(f"  blocks: {len(suspects)} functions that ran compared block by block, {len(first)} with a difference")
        suspects = first
    wrong, varying = [], {}
    for fn in suspects:
        name = fn.split(":", 1)[1]
        w, v = block_mismatches(lopi, cov_data, blk_data, name, oracle)
        wrong += [f"`{name}` {x}" for x in w]
        if v:
            varying[name] = v
    scope = (f"every block of the {n_ran:,} functions that ran compared" if every_block else
             f"{len(fns):,} functions compared by their totals, {len(suspects)} of them block by block")
    runs = f"{len(cov_runs)} runs of coverage mode, {len(blk_runs)} of block mode"
    out = []
    if wrong:
        what = ("CONTRADICTS block mode's counts" if deterministic else
                "differs from block mode's counts (not necessarily an error: this program's paths depend on its "
                "threads' timing, which block mode's slowdown shifts)")
        out.append(f"- Blocks ran: coverage mode {what} on {len(wrong)} blocks ({scope}; "
                   f"{runs}, the same answer in every run"
                   + ("; callgrind = executions of the block's first instruction in valgrind's run of the native "
                      "program" if oracle else "") + "): " + "; ".join(wrong[:20])
                   + (f"; and {len(wrong) - 20} more" if len(wrong) > 20 else "") + ".")
    else:
        out.append(f"- Blocks ran: coverage mode agrees with block mode's counts ({scope}; {runs}).")
    if varying:
        out.append(f"- Blocks that ran in some runs and not in others (timing; not counted above): "
                   + ", ".join(f"`{k}` {v}" for k, v in varying.items()) + ".")
    return out
