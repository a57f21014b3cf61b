#!/usr/bin/env python3
"""Correctness suite: every real program, rewritten at every function in every lopi mode, must
behave exactly like the original on its own tests or a battery of real commands.

    bench/suites/run.sh [--quick] [--mode entry|timing|trace|live|all] [--program NAME ...]

run.sh prepares the programs (tests/real/prepare.sh) and a release lopi, then runs this file.
The batteries are the scripts of tests/real/ (shared with crates/lopi-cli/tests/real_programs.rs);
nothing here knows what they run, only how to call them and that their stdout and exit code are
deterministic.  For each program the original runs once per battery; then, for each mode, every
module is rewritten, every battery runs again with the rewritten module(s) and LOPI_OUTPUT set,
stdout and exit code must be byte-identical, and the data file must parse (`lopi report --format
json`) with what the mode records (timing, trace events; for trace mode `lopi export --format
chrome` and `lopi flamegraph` must succeed too).

Writes bench/results/suites.md (never edit it by hand).  Exit status: 0 when every row is `same`
(or `same, original varies`: see ORIGINAL_RERUNS)
with good data, 1 otherwise, 2 for bad arguments.  Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from suite_programs import (MODES, NOT_APPLICABLE, NOT_IMPLEMENTED, ORIGINAL_RERUNS, TRACE_EVENTS, VARIES, Battery,
                            programs)
from suite_results import SUMMARY_HEADER, BatteryRow, Row, machine, summary_rows, text_table, write_results
# LAUNCHER_C and c_string: bench/startup's live launcher is this suite's (suites.LAUNCHER_C)
from suite_runs import LAUNCHER_C, Run, c_string, check_data, clean_env, rewrite, run  # noqa: F401

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS = REPO / "bench" / "results" / "suites.md"


# ---------------------------------------------------------------- main


def parse_args(argv: list[str]):
    ap = argparse.ArgumentParser(prog="bench/suites/run.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="without playTests.sh; 1 in 10 of sqlite's test files")
    ap.add_argument("--mode", action="append", default=None,
                    help="entry, timing, trace, live or all (repeatable, or comma-separated; default all)")
    ap.add_argument("--program", nargs="+", action="extend", default=None, metavar="NAME",
                    help="only these programs (default: all)")
    ap.add_argument("--list", action="store_true", help="list programs, batteries and modes, then exit")
    ap.add_argument("--keep", action="store_true", help="keep data files and rewritten binaries of passing runs")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("LOPI_REAL_TIMEOUT", 1800)),
                    help="bound on one battery run, seconds (default 1800, or $LOPI_REAL_TIMEOUT)")
    ap.add_argument("--lopi", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--work", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--results", default=str(RESULTS), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    user_argv = [a for a in argv if not a.startswith(("--lopi=", "--work=", "--results="))]
    lopi = args.lopi
    work = Path(args.work)
    paths = dict(l.split("=", 1) for l in (work / "paths.env").read_text().splitlines() if "=" in l)
    base = work / "suites"
    base.mkdir(parents=True, exist_ok=True)
    progs = programs(paths, base)

    names = {m.name for m in MODES}
    wanted_modes: list[str] = []
    for m in args.mode or ["all"]:
        for x in m.split(","):
            if x == "all":
                wanted_modes += [m.name for m in MODES]
            elif x in names:
                wanted_modes.append(x)
            else:
                print(f"unknown mode {x!r} (modes: {', '.join(sorted(names))}, all)", file=sys.stderr)
                return 2
    modes = [m for m in MODES if m.name in wanted_modes]
    if args.program:
        unknown = set(args.program) - {p.name for p in progs}
        if unknown:
            print(f"unknown program(s) {sorted(unknown)}; programs: {', '.join(p.name for p in progs)}", file=sys.stderr)
            return 2
        progs = [p for p in progs if p.name in args.program]

    if args.list:
        for m in MODES:
            print(f"mode {m.name:7} {m.what}" + ("" if m.rewrite_args is not None else f"  [{NOT_IMPLEMENTED}]"))
        for p in progs:
            print(f"{p.name:15} {p.what}")
            for b in p.batteries:
                print(f"{'':15}   {b.name}" + ("" if b.quick else "  (full run only)") + ("" if b.full else "  (--quick only)"))
        return 0

    for m in modes:
        if m.rewrite_args is None:
            print(f"[suites] {m.name}: {NOT_IMPLEMENTED} ({m.what} do not exist); its rows say so")
    if not any(m.rewrite_args is not None for m in modes):
        print(f"[suites] nothing to run: every selected mode is {NOT_IMPLEMENTED}")
        return 2

    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    log = lambda msg: print(f"[suites {time.monotonic() - t_start:6.0f}s] {msg}", flush=True)  # noqa: E731
    rows: list[Row] = []
    brows: list[BatteryRow] = []
    varies: list[tuple[str, str, str, int, str]] = []  # program, mode, battery, original run, diff

    for prog in progs:
        pdir = base / prog.name
        shutil.rmtree(pdir, ignore_errors=True)
        (pdir / "original").mkdir(parents=True)
        bats = [b for b in prog.batteries if (b.quick if args.quick else b.full)]
        # The original and every rewritten version run from the same paths (bin/), with the
        # same environment (LOPI_OUTPUT and LOPI_TRACE_EVENTS are set for the original too,
        # which ignores them): a program may depend on its argv/environment's size (sqlite's
        # withM.test counts 1095, 1096 or 1097 cases depending on it), and the comparison must
        # only see what lopi changed.
        bindir, datadir = pdir / "bin", pdir / "data"
        datadir.mkdir()

        def install_originals() -> None:
            for role, (key, rel) in prog.rewrite.items():
                (bindir / rel).parent.mkdir(parents=True, exist_ok=True)
                (bindir / rel).unlink(missing_ok=True)
                shutil.copy2(paths[key], bindir / rel)

        install_originals()
        targets = {role: bindir / rel for role, (_, rel) in prog.rewrite.items()}
        targets.update({role: Path(paths[key]) for role, key in prog.fixed.items()})

        def battery_env(b: Battery, extra: dict[str, str]) -> dict[str, str]:
            return clean_env({**extra, "LOPI_OUTPUT": str(datadir / f"{safe(b.name)}.lopi"),
                              "LOPI_TRACE_EVENTS": TRACE_EVENTS})

        # every run of the original, per battery; the first is the reference
        originals: dict[str, list[Run]] = {}

        def run_original(b: Battery) -> Run:
            """Runs the original from bin/; the caller puts a mode's files back if it needs them."""
            install_originals()
            n = len(originals.setdefault(b.name, []))
            stem = safe(b.name) + (f".run{n + 1}" if n else "")
            argv_, env = b.command(targets, pdir / "scratch")
            r = run(argv_, battery_env(b, env), pdir / "original" / f"{stem}.stderr", args.timeout)
            (pdir / "original" / f"{stem}.out").write_bytes(r.stdout)
            shutil.rmtree(pdir / "scratch", ignore_errors=True)
            originals[b.name].append(r)
            return r

        orig_bad = []
        for b in bats:
            r = run_original(b)
            log(f"{prog.name}: original, {b.name}: exit {r.rc}, {len(r.stdout.splitlines())} lines, {r.seconds:.1f}s")
            if r.rc != 0:
                orig_bad.append(f"original fails {b.name} (exit {r.rc}; {pdir / 'original'})")

        for mode in modes:
            row = Row(prog.name, mode.name, "")
            rows.append(row)
            if mode.rewrite_args is None:
                row.result = NOT_IMPLEMENTED
                log(f"{prog.name}: {mode.name}: {NOT_IMPLEMENTED}")
                continue
            if mode.live and "bin" not in prog.rewrite:
                row.result = NOT_APPLICABLE
                log(f"{prog.name}: {mode.name}: {NOT_APPLICABLE}")
                continue
            row.orig_s = sum(originals[b.name][0].seconds for b in bats)
            if orig_bad:
                row.result, row.problems = "ORIGINAL FAILS", list(orig_bad)
                log(f"{prog.name}: {mode.name}: ORIGINAL FAILS, not compared: {'; '.join(orig_bad)}")
                continue
            mdir = pdir / mode.name
            mdir.mkdir(parents=True)
            rw, err = rewrite(lopi, mode, prog, paths, bindir)  # over the files in bin/
            if rw is None:
                row.result, row.problems = "REWRITE FAILED", [err]
                log(f"{prog.name}: {mode.name}: {err}")
                continue
            row.rw = rw
            for l in rw.lines:
                log(f"{prog.name}: {mode.name}: {l}")
            # The mode's files, to put back after a re-run of the original (which runs from bin/).
            mode_bin = pdir / f"{mode.name}.bin"
            shutil.rmtree(mode_bin, ignore_errors=True)
            shutil.copytree(bindir, mode_bin, symlinks=True)
            results, data_all = [], True
            for i, b in enumerate(bats):
                data = datadir / f"{safe(b.name)}.lopi"
                data.unlink(missing_ok=True)
                argv_, env = b.command(targets, pdir / "scratch")
                r = run(argv_, battery_env(b, env), mdir / f"{safe(b.name)}.stderr", args.timeout)
                shutil.rmtree(pdir / "scratch", ignore_errors=True)
                o = originals[b.name][0]
                matches = lambda x: x.stdout == r.stdout and x.rc == r.rc  # noqa: E731
                result = "same" if matches(o) else ""
                if not result:
                    out_file = mdir / f"{safe(b.name)}.out"
                    out_file.write_bytes(r.stdout)
                    orig_file = pdir / "original" / f"{safe(b.name)}.out"
                    diff = subprocess.run(["diff", "-u", str(orig_file), str(out_file)], capture_output=True, text=True).stdout
                    (mdir / f"{safe(b.name)}.diff").write_text(diff)
                    log(f"{prog.name}: {mode.name}: {b.name}: differs from the original (exit {r.rc}, original {o.rc}):")
                    print("\n".join("    " + l for l in diff.splitlines()[:40]))
                    if r.stderr_tail.strip():
                        print("    stderr tail:\n" + "\n".join("      " + l for l in r.stderr_tail.splitlines()))
                    # Does the original itself give this output?  (A nondeterministic battery.)
                    while not any(matches(x) for x in originals[b.name]) and len(originals[b.name]) <= ORIGINAL_RERUNS:
                        x = run_original(b)
                        log(f"{prog.name}: original again, {b.name}: exit {x.rc}, "
                            + ("same as the rewritten run" if matches(x) else
                               "same as its first run" if x.stdout == o.stdout and x.rc == o.rc else "a third output"))
                    shutil.rmtree(bindir)
                    shutil.copytree(mode_bin, bindir, symlinks=True)
                    k = next((k for k, x in enumerate(originals[b.name]) if matches(x)), None)
                    if k is not None:
                        result = VARIES
                        varies.append((prog.name, mode.name, b.name, k + 1, diff))
                        log(f"{prog.name}: {mode.name}: {b.name}: {VARIES}: run {k + 1} of the original gave the "
                            "rewritten run's output byte for byte")
                    else:
                        result = "DIFFERENT"
                        row.problems.append(f"{b.name}: exit {r.rc} (original {o.rc}), not any of "
                                            f"{len(originals[b.name])} original runs; diff in {mdir / (safe(b.name) + '.diff')}")
                br = BatteryRow(prog.name, b.name, mode.name, result, o.seconds, r.seconds)
                brows.append(br)
                row.rw_s += r.seconds
                results.append(result)
                dc = check_data(lopi, mode, data, mdir, exports=mode.trace and i == 0)
                br.data = dc
                row.called += dc.called
                row.calls += dc.calls
                row.trace_events += dc.trace_events
                if not dc.ok:
                    data_all = False
                    row.problems += [f"{b.name}: {p}" for p in dc.problems]
                log(f"{prog.name}: {mode.name}: {b.name}: {br.result} ({o.seconds:.1f}s -> {r.seconds:.1f}s), data "
                    + ("ok" if dc.ok else "BAD: " + "; ".join(dc.problems))
                    + f" ({dc.called} functions called, {dc.calls:,} calls, {dc.threads} timed threads, "
                    f"{dc.trace_events:,} trace events, {dc.bytes_on_disk / 1e6:.1f} MB)"
                    + (f"; {dc.exports}" if dc.exports else ""))
                if result == "same" and dc.ok and not args.keep:
                    data.unlink(missing_ok=True)
                elif data.exists():
                    data.rename(mdir / data.name)
            row.result = "DIFFERENT" if "DIFFERENT" in results else VARIES if VARIES in results else "same"
            row.data_ok = data_all
            if not row.good or args.keep:  # keep this mode's rewritten files for inspection
                for rel in {rel for _, rel in prog.rewrite.values()}:
                    (mdir / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(bindir / rel, mdir / rel)
            shutil.rmtree(mode_bin, ignore_errors=True)
        shutil.rmtree(bindir, ignore_errors=True)

    took = time.monotonic() - t_start
    print()
    print(text_table(SUMMARY_HEADER, summary_rows(rows)))
    bad = [r for r in rows if not r.good]
    for m in modes:
        if m.rewrite_args is None:
            print(f"{m.name}: {NOT_IMPLEMENTED}")
    print()
    if bad:
        print(f"FAILED: {len(bad)} program x mode row(s) differ from the original or have bad data:")
        for r in bad:
            print(f"  {r.program} / {r.mode}: {r.result}; " + "; ".join(r.problems))
    else:
        print("all same: every battery gave the original's output byte for byte, every data file is good")
    results = Path(args.results)
    for prog_name, mode_name, bat, k, _ in varies:
        print(f"note: {prog_name} / {mode_name} / {bat}: the original's output varies from run to run; "
              f"the rewritten output is the one of its run {k}")
    write_results(results, args, user_argv, rows, brows, varies, machine(lopi, paths), started, took)
    print(f"[suites] {took / 60:.1f} min; table in {results}; outputs in {base}")
    return 1 if bad else 0


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", name).strip("_")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
