"""bench/coverage's function-level part: `--probe entry:mark` (a one-byte mark at each function's entry
whose probe takes itself out once it fired), rewritten and under `lopi run`, next to `--probe entry`
(every call counted), and the check of their answers against coverage mode's: a function ran exactly
when its entry block ran, in the functions both records hold."""
from __future__ import annotations

import functools
import json
import struct
import subprocess
from pathlib import Path
from typing import Optional

import harness as h
from coverage_hooks import coverage_json, lopi_data_hooks

MARK, MARK_LIVE, ENTRY = "lopi-entry-mark", "lopi-entry-mark-live", "lopi-entry-count"
CFGS = (MARK, MARK_LIVE, ENTRY)
STATIC = {MARK: ["--probe", "entry:mark"], ENTRY: ["--probe", "entry"]}
LIVE_PROBE = ["--probe", "entry:mark"]
LABELS = {MARK: "lopi entry:mark (static: `lopi rewrite --probe entry:mark`)",
          MARK_LIVE: "lopi entry:mark live (`lopi run -q --probe entry:mark --`)",
          ENTRY: "lopi entry counts (static: `lopi rewrite --probe entry`)"}
DROP = ("fn_ans", "entry_ran")  # per-function answers: read by compare(), too big for the runs file
METHOD = (
    "- lopi entry:mark: `lopi rewrite --probe entry:mark` (static) and `lopi run -q --probe entry:mark --` (live): "
    "one marking probe at each function's entry, the same one-byte store and self-removal as coverage mode's; "
    "`lopi rewrite --probe entry` (a per-CPU counter bumped on every call) beside it for a count's cost. "
    "*Functions ran* = `lopi coverage DATA --format json` (entry:mark) or the functions with calls in `lopi report "
    "DATA --format json` (entry), of the functions marked or counted. *Mismatches*: per function in both "
    "records (its name among coverage mode's functions), its answer against whether coverage mode says its entry "
    "block ran (`lopi coverage DATA --format drcov`: the blocks that ran, marked or implied), over every run of "
    "the configuration and every run of coverage mode, static and live (warm-up included); a function whose "
    "answer varies between runs of one side is left out, and so is one whose entry block is not known to coverage "
    "mode (neither a mark of its own nor the probed blocks it dominates decide it, as in many functions that did not "
    "run: `lopi report DATA --blocks FUNC --format json`, asked of a function with blocks not known whose entry is "
    "not among those that ran).")


def hooks(cfg: str, lopi: Path, datadir: Path, aliases: dict[str, str]):
    """lopi_data_hooks of a function-level configuration, reading how many functions the data holds
    and ran, and each one's answer by (file, address) (a rewritten file's records name it: ALIASES
    maps it to the original)."""

    def read(path: Path) -> dict:
        try:
            if cfg == ENTRY:
                c = h.lopi_report(lopi, path)
                fns = c["report"]["functions"]
                ans = {(aliases.get(f["module"], f["module"]), int(f["addr"], 16)): (f["name"], f["calls"] > 0)
                       for f in fns}
                extra: dict = {"calls": c["calls"]}
            else:
                ans = {(m["source"], f["addr"]): (f["name"], f["ran"])
                       for m in coverage_json(lopi, path)["modules"] for f in m["functions"]}
                extra = {}
            extra.update(fns=len(ans), fns_ran=sum(ran for _, ran in ans.values()), fn_ans=ans)
            return extra
        except (RuntimeError, ValueError, KeyError) as e:
            return {"after_error": str(e)}

    return lopi_data_hooks(datadir, read)


def drcov_ran(path: Path) -> dict[str, set[int]]:
    """{file: addresses of the blocks that ran} of a drcov file (`lopi coverage --format drcov`): its
    module table (id, base, ..., path) and its blocks (u32 offset from base, u16 size, u16 module)."""
    data = path.read_bytes()
    at = data.index(b"BB Table:")
    mods = {}
    for line in data[:at].decode().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 7 and cols[0].isdigit():
            mods[int(cols[0])] = (int(cols[1], 16), cols[6])
    ran: dict[str, set[int]] = {src: set() for _, src in mods.values()}
    for off, _, mod in struct.iter_unpack("<IHH", data[data.index(b"\n", at) + 1:]):
        base, src = mods[mod]
        ran[src].add(base + off)
    return ran


def entry_blocks_hook(lopi: Path):
    """(None, after) of a coverage-mode configuration: the blocks that ran, per file (drcov), while its
    data is still there (compose it before the hook that deletes the data)."""

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        path = Path(env["LOPI_OUTPUT"])
        out = path.with_suffix(".drcov")
        p = subprocess.run([str(lopi), "coverage", str(path), "--format", "drcov", "-o", str(out)],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or not out.exists():
            return {"after_error": f"lopi coverage --format drcov exit {p.returncode}: {p.stderr.strip()[-300:]}"}
        ran = drcov_ran(out)
        out.unlink()
        return {"entry_ran": ran}

    return None, after


@functools.lru_cache(maxsize=None)  # the same function of the same record, for each configuration compared
def entry_block(lopi: Path, data: str, name: str, addr: int) -> Optional[str]:
    """What coverage mode's record DATA says of the block at ADDR in NAME: "ran", "did not run", "not
    known", or None when it has no block there (`lopi report DATA --blocks NAME --format json`)."""
    p = subprocess.run([str(lopi), "report", data, "--blocks", name, "--format", "json"], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        return None
    for b in (b for e in json.loads(p.stdout) for b in e["blocks"] if b["address"] == addr):
        return {True: "ran", False: "did not run", None: "not known"}[b["ran"]]
    return None


def compare(runs: list, cov_runs: list, lopi: Optional[Path]) -> Optional[dict]:
    """A function-level configuration's answers (RUNS) against coverage mode's entry blocks (COV_RUNS,
    static and live): {"both", "mismatches": [text], "varying", "not_known", "runs", "cov_runs"}."""
    runs = [r for r in runs if r.ok and "fn_ans" in r.extra]
    cov_runs = [r for r in cov_runs if r.ok and "entry_ran" in r.extra and "fn_ran" in r.extra]
    if not runs or not cov_runs or not lopi:
        return None
    cov_data = next((r.extra["data_path"] for r in cov_runs if "data_path" in r.extra), None)
    keys = sorted(set().union(*(r.extra["fn_ans"] for r in runs)))
    out = {"both": 0, "mismatches": [], "varying": 0, "not_known": 0, "not_known_ran": 0, "runs": len(runs),
           "cov_runs": len(cov_runs)}
    for src, addr in keys:
        name = next(r.extra["fn_ans"][src, addr][0] for r in runs if (src, addr) in r.extra["fn_ans"])
        fn = f"{Path(src).name}:{name}"
        if not all(fn in r.extra["fn_ran"] for r in cov_runs):
            continue  # not among coverage mode's functions (no graph)
        said = {r.extra["fn_ans"].get((src, addr), (name, None))[1] for r in runs}
        entry = {addr in r.extra["entry_ran"].get(src, ()) for r in cov_runs}
        if None in said:
            continue
        if len(said) > 1 or len(entry) > 1:
            out["both"] += 1
            out["varying"] += 1
            continue
        ran, cov = said.pop(), entry.pop()
        unknown = any(r.extra["fn_ran"][fn][1] for r in cov_runs)  # else its entry block is known too
        how = "ran" if cov else (entry_block(lopi, cov_data, name, addr) if unknown and cov_data else "did not run")
        if how is None:
            continue  # no block at its address in coverage mode's record
        out["both"] += 1
        if how == "not known":
            out["not_known"] += 1
            out["not_known_ran"] += ran
        elif ran != (how == "ran"):
            out["mismatches"].append(f"`{name}` ({addr:#x}): {'ran' if ran else 'did not run'}, entry block {how}")
    return out


def ran_cell(cfg: str, runs: list) -> str:
    """How many of the functions in the record ran (were called), and whether runs differ."""
    vals = sorted({(r.extra["fns_ran"], r.extra["fns"]) for r in runs if r.ok and "fns" in r.extra})
    what = "called" if cfg == ENTRY else "ran"
    text = " / ".join(f"{n:,} of {of:,} functions {what}" for n, of in vals)
    return (text + (" (runs differ)" if len(vals) > 1 else "")) or "-"


def left_out(c: dict) -> str:
    """The functions in both records that were not compared, and why."""
    return "; ".join(
        [f"{c['varying']} vary between runs"] * bool(c["varying"])
        + [f"{c['not_known']} entry block{'s' * (c['not_known'] > 1)} not known to coverage mode, "
           f"{c['not_known_ran']} of them in functions that ran"] * bool(c["not_known"]))


def vs_cell(c: Optional[dict]) -> str:
    if not c:
        return "-"
    compared = c["both"] - c["varying"] - c["not_known"]
    return f"{len(c['mismatches'])} of {compared:,}" + (f" (left out: {left_out(c)})" if left_out(c) else "")


def summary_lines(cmp: dict) -> list[str]:
    """The answer under a workload's table: functions ran, and the agreement with coverage mode."""
    out = []
    for cfg, c in cmp.items():
        if not c:
            continue
        what = {MARK: "entry:mark (static)", MARK_LIVE: "entry:mark (live)", ENTRY: "entry counts (calls > 0)"}[cfg]
        bad = c["mismatches"]
        out.append(f"- Functions ran, {what} against coverage mode's entry blocks: "
                   + ("agree" if not bad else f"{len(bad)} MISMATCHES")
                   + f" on {c['both'] - c['varying'] - c['not_known']:,} of the {c['both']:,} functions in both "
                   f"records ({c['runs']} runs against {c['cov_runs']} of coverage mode"
                   + (f"; left out: {left_out(c)}" if left_out(c) else "") + ")" + (": " + "; ".join(bad[:10]) + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")
                            if bad else "") + ".")
    return out


def headline(cells: list[tuple[str, dict, dict]]) -> tuple[str, dict]:
    """The line under the target, from [(workload, {config: ratio}, {config: fr.compare's})], and the same
    figures for the runs file."""
    meta = {key: {c: {"ratio": ratios.get(c), **({"both": cmp[c]["both"], "mismatches": len(cmp[c]["mismatches"]),
                                                  "varying": cmp[c]["varying"], "not_known": cmp[c]["not_known"],
                                                  "not_known_ran": cmp[c]["not_known_ran"]}
                                                 if cmp.get(c) else {})} for c in CFGS}
            for key, ratios, cmp in cells}
    if not any(m[c]["ratio"] for m in meta.values() for c in CFGS):
        return "", meta
    x = lambda r: f"x{r:.2f}" if r else "-"  # noqa: E731
    parts = [f"{key}: static {x(m[MARK]['ratio'])}, live {x(m[MARK_LIVE]['ratio'])} (start-up included), "
             f"`--probe entry` {x(m[ENTRY]['ratio'])}" for key, m in meta.items()]
    bad = [f"{key} {LABELS[c].split(' (')[0]}: {m[c]['mismatches']}" for key, m in meta.items() for c in CFGS
           if m[c].get("mismatches")]
    checked = all("both" in m[c] for m in meta.values() for c in CFGS)
    return ("**Functions ran** (`--probe entry:mark`), x native: " + "; ".join(parts) + ". Against coverage mode's "
            "entry blocks: " + ("MISMATCHES (" + ", ".join(bad) + ")" if bad else
                                "no mismatch" + ("" if checked else " where checked")) + "."), meta
