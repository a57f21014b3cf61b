#!/usr/bin/env python3
"""What lopi's basic-block probes cost: `--probe coverage` (whether each block ran: a one-byte mark per
probe, probes only on blocks whose running the others do not imply) and `--probe block` (every block
counted), written into a copy of the program (`lopi rewrite`) and spliced in at start-up (`lopi run`),
next to gcc's `--coverage` build (gcov's compiled-in arc counters) and valgrind (lackey's basic-block
counts and callgrind with --collect-jumps=yes). At the function level (functions_ran.py): `--probe
entry:mark` (whether each function ran: a one-byte mark at its entry), rewritten and under `lopi run`,
beside `--probe entry` (every call counted); their answers checked against coverage mode's entry blocks.

Workloads:
  speedtest1  sqlite's `speedtest1 --memdb --size S` (full 120, quick 40), the amalgamation from Debian's
              source package (bench/lib/fetch_sqlite.sh) built with the W2 flags (-O2 -g, as
              bench/budget); gcov: the same build with `--coverage`; check: its output without times
  zstd        Debian's /usr/bin/zstd, `zstd -q -T1 -3 -c CORPUS > OUT` of a deterministic corpus (full
              64 MiB, quick 16 MiB; bench/locks's corpus, in /dev/shm); gcov: Debian's source package
              built with Debian's flags + `--coverage` (bench/zstd's build), next to the same source
              built without it; check: sha256 of OUT

Every configuration of a workload runs interleaved round-robin after a warm-up round
(bench/lib/harness.py); time = the whole process's wall time. valgrind runs once per workload, after
the others, in full mode only. A separate short run per workload measures `lopi run`'s start-up.

Run through run.sh; `coverage.py --help` lists the knobs.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # no __pycache__ beside bench/lib's harness

import argparse
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "bench" / "lib"), str(REPO / "bench" / "locks"), str(REPO / "bench" / "zstd")]
import harness as h  # noqa: E402
from locks_bench import make_corpus  # noqa: E402  (bench/locks's and bench/mp's corpus: the same bytes)
import zstd_bench  # noqa: E402  (bench/zstd's build of Debian's zstd source package)
sys.path.insert(0, str(HERE))
from answers import consistency  # noqa: E402
import functions_ran as fr  # noqa: E402
from coverage_hooks import (output_file_hooks, stdout_hooks, lopi_cov_hooks, gcov_hooks, callgrind_hooks, valgrind_after, startup_after, redirect)  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "coverage"
log = h.log

BASE, COV, BLK, LIVE, SRC, GCOV, LACKEY, CALLGRIND = (
    "baseline", "lopi-coverage", "lopi-block", "lopi-coverage-live", "native-src", "gcov", "lackey", "callgrind")
LOPI_STATIC = {COV: ["--probe", "coverage"], BLK: ["--probe", "block"], **fr.STATIC}
LOPI_CFGS = (COV, BLK, LIVE)
VALGRIND = {LACKEY: ["valgrind", "--tool=lackey", "--basic-counts=yes"],
            CALLGRIND: ["valgrind", "--tool=callgrind", "--collect-jumps=yes", "--dump-instr=yes", "--compress-pos=no",
                        "--compress-strings=no"]}
TARGET = 1.15  # the aim: coverage mode within 1.15x of native on speedtest1 and zstd
BCOV_PUBLISHED = "14%"  # bcov's published average overhead (reference only, not measured here)

SUMMARY_RX = re.compile(r"(\d+) blocks in (\d+) functions?, (\d+) probed \(([0-9.]+)%\), ([0-9.]+)% probed or implied")


def label(cfg: str, wl: dict) -> str:
    return {
        BASE: f"native ({wl['native_what']})",
        COV: "lopi coverage (static: `lopi rewrite --probe coverage`)",
        BLK: "lopi block counts (static: `lopi rewrite --probe block`)",
        LIVE: "lopi coverage live (`lopi run -q --probe coverage --`)",
        SRC: "native, zstd source build (gcov's reference)",
        GCOV: f"gcov: `--coverage` build ({wl['gcov_what']})",
        LACKEY: "valgrind `--tool=lackey --basic-counts=yes`",
        CALLGRIND: "valgrind `--tool=callgrind --collect-jumps=yes --dump-instr=yes`",
        **fr.LABELS,
    }[cfg]


# ---------------------------------------------------------------- hooks


def make_variants(wl: dict, bins: dict, skip: dict, lopi: Optional[Path], scratch: Path, cfgs: list[str],
                  argv_tail: list[str], tag: str = "") -> list[h.Variant]:
    """The variants of workload WL (its programs BINS by configuration, SKIP: why not) running
    ARGV_TAIL; zstd's output goes to a file in SCRATCH, speedtest1's is its stdout."""
    data = BUILD / "data" / (wl["key"] + tag)
    vs = []
    for cfg in cfgs:
        out = scratch / f"{wl['key']}{tag}-{cfg}.out" if wl["to_file"] else None
        hooks = [output_file_hooks(out) if out else stdout_hooks(wl["check"], wl.get("timer"))]
        if cfg in LOPI_CFGS and lopi:  # coverage mode's entry blocks first: LIVE's hook deletes its data
            hooks += [fr.entry_blocks_hook(lopi)] if cfg != BLK else []
            hooks.append(lopi_cov_hooks(lopi, data / cfg, keep=cfg in (COV, BLK)))
        if cfg in fr.CFGS and lopi:
            hooks.append(fr.hooks(cfg, lopi, data / cfg, {str(bins.get(cfg)): str(bins[BASE])}))
        if cfg == GCOV:
            hooks.append(gcov_hooks(scratch / f"gcov-{wl['key']}{tag}"))
        if cfg in VALGRIND:
            hooks.append((None, valgrind_after))
        if cfg == CALLGRIND:
            hooks.append(callgrind_hooks(scratch / "callgrind.out", str(bins[BASE])))
        if cfg in (LIVE, fr.MARK_LIVE):
            probe = ["--probe", "coverage"] if cfg == LIVE else fr.LIVE_PROBE
            argv = [str(lopi), "run", "-q", *probe, "--", str(bins[BASE]), *argv_tail]
        elif cfg in VALGRIND:
            extra = [f"--callgrind-out-file={scratch / 'callgrind.out'}"] if cfg == CALLGRIND else []
            argv = [*VALGRIND[cfg], *extra, str(bins[BASE]), *argv_tail]
        else:
            argv = [str(bins.get(cfg, f"{cfg}-missing")), *argv_tail]
        v = h.Variant(cfg, redirect(argv, out), h.WALL, skip_reason=skip.get(cfg, ""), timeout_s=3600)
        v.before, v.after = h.compose_hooks(*hooks)
        vs.append(v)
    return vs


def startup_variants(wl: dict, bins: dict, lopi: Optional[Path], scratch: Path, argv_tail: list[str],
                     skip: str) -> list[h.Variant]:
    """`lopi run --probe coverage` (not -q: its `N sites installed in X ms` line) on a trivial run of
    the program, plan cache warm and off, next to the native trivial run."""
    data = BUILD / "data" / (wl["key"] + "-startup")
    before, _ = lopi_cov_hooks(lopi, data) if lopi else (None, None)

    def drop_data(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        Path(env["LOPI_OUTPUT"]).unlink(missing_ok=True)
        return startup_after(idx, stdout, stderr, env)

    out = scratch / f"{wl['key']}-startup.out" if wl["to_file"] else None
    run = [str(lopi), "run", "--probe", "coverage", "--", str(bins[BASE]), *argv_tail]
    return [
        h.Variant("native-trivial", redirect([str(bins[BASE]), *argv_tail], out), h.WALL),
        h.Variant("live-warm", redirect(run, out), h.WALL, before=before, after=drop_data, skip_reason=skip),
        h.Variant("live-nocache", redirect(run, out), h.WALL, env={"LOPI_CACHE": "off"}, before=before,
                  after=drop_data, skip_reason=skip),
    ]


# ---------------------------------------------------------------- tables


def verdicts(res: dict, base: str = BASE) -> dict:
    """{config: "identical" | "DIFFERS ..."}: every recorded and warm-up run's output against the
    native runs' (all of which must agree)."""
    want = {r.extra.get("output") for r in res.get(base, []) if r.ok}
    out = {}
    for name, runs in res.items():
        got = {r.extra.get("output") for r in runs if r.ok}
        if not got or name == base:
            continue
        if len(want) != 1 or None in want:
            out[name] = f"? (native runs disagree: {len(want)} outputs)"
        elif got == want:
            out[name] = "identical"
        else:
            out[name] = f"DIFFERS ({len(got)} distinct outputs, none = native's)" if not (got & want) \
                else f"DIFFERS in some runs ({len(got)} distinct outputs)"
    return out


def ran_cell(runs: list[h.RunResult]) -> str:
    vals = sorted({(r.extra["ran"], r.extra["unknown"]) for r in runs if r.ok and "ran" in r.extra})
    if not vals:
        return "-"
    text = " / ".join(f"{ran:,} blocks ran, {unk:,} not known" for ran, unk in vals)
    return text + (" (runs differ)" if len(vals) > 1 else "")


def data_note(runs: list[h.RunResult]) -> str:
    sizes = [r.extra["data_bytes"] for r in runs if r.ok and r.extra.get("data_bytes") is not None]
    if not sizes:
        return ""
    what = "gcda" if any("gcda_files" in r.extra for r in runs) else "data"
    n_files = next((r.extra["gcda_files"] for r in runs if "gcda_files" in r.extra), None)
    return f"{what} {h.fmt_bytes(int(statistics.median(sizes)))}" + (f" in {n_files} files" if n_files else "")


def workload_table(wl: dict, variants: list[h.Variant], res: dict, vres: dict, said: dict,
                   cmp: dict) -> tuple[list[str], dict]:
    """The workload's table and {config: ratio to its reference}; CMP: fr.compare's per configuration."""
    base = h.stats(res.get(BASE, []))
    src = h.stats(res.get(SRC, []))
    outs = {**verdicts(res), **verdicts({BASE: res.get(BASE, []), **vres})}
    timer = wl.get("timer_name")

    def own(runs: list[h.RunResult]) -> Optional[float]:
        t = [r.extra["own_s"] for r in runs if r.ok and r.round >= 0 and "own_s" in r.extra]
        return statistics.median(t) if t else None

    own_base = own(res.get(BASE, []))
    ratios = {}
    rows = []
    for v in variants + [v for v in wl.get("valgrind_variants", [])]:
        runs = (vres if v.name in VALGRIND else res).get(v.name, [])
        notes = list(said.get(v.name, []))
        st = h.stats(runs)
        if v.skip_reason or not st:
            why = v.skip_reason or h.failure_note(runs) or "no run"
            rows.append([label(v.name, wl), "-", "-", *(["-"] if timer else []), "-", "-", "-",
                         "skipped: " + why if v.skip_reason else "FAILED: " + why])
            continue
        ref, ref_name = (src, "source build") if v.name == GCOV and wl["key"] == "zstd" else (base, "native")
        if v.name in VALGRIND and wl.get("valgrind_base"):
            ref, ref_name = wl["valgrind_base"], wl["valgrind_base_name"]
        ratio = "x1.00" if v.name == BASE else (f"x{st.median / ref.median:.2f}" if ref else "-")
        if ref and v.name != BASE:
            ratios[v.name] = st.median / ref.median
            if ref_name != "native":
                ratio += f" (vs {ref_name})"
        if v.name not in (BASE, LACKEY, CALLGRIND) and ref and st.lo <= ref.hi:
            notes.insert(0, "within native's run-to-run spread (fastest run ≤ native's slowest)")
        for r in runs:
            for k in ("SBs entered", "guest instrs", "I refs"):
                if k in r.extra:
                    notes.append(f"{k} {r.extra[k]:,}")
        if d := data_note(runs):
            notes.append(d)
        errs = h.after_errors(runs)
        notes += errs
        notes.append(f"n={st.n}")
        rng = h.fmt_range(st) if st.n > 1 else h.fmt_time(st.median)
        own_cell = []
        if timer:
            o = own(runs)
            ref_own = own_base if ref is base else None
            own_cell = [f"{h.fmt_time(o)}" + (f", x{o / ref_own:.2f}" if o and ref_own else "") if o else "-"]
            if o and ref_own:
                ratios[v.name + ":own"] = o / ref_own
        output = outs.get(v.name, "-" if v.name != BASE else "(reference)")
        ran = fr.ran_cell(v.name, runs) if v.name in fr.CFGS else ran_cell(runs)
        vs = fr.vs_cell(cmp.get(v.name)) if v.name in fr.CFGS else "-"
        rows.append([label(v.name, wl), rng, ratio, *own_cell, output, ran, vs, "; ".join(notes)])
    header = ["configuration", "wall time median [min–max]", "x native", *([timer] if timer else []), "output",
              "ran (lopi's data)", "mismatches: function ran vs its entry block ran (coverage mode)",
              "notes"]
    return [h.markdown_table(header, rows)], ratios


def startup_lines(wl: dict, svs: list[h.Variant], sres: dict) -> list[str]:
    if not sres:
        return []
    nat = h.stats(sres.get("native-trivial", []))
    rows = []
    for v in svs:
        runs = sres.get(v.name, [])
        st = h.stats(runs)
        if v.skip_reason or not st:
            rows.append([v.name, "-", "-", "-", "-", "-", v.skip_reason or h.failure_note(runs) or "no run"])
            continue
        ok = [r for r in runs if r.ok and r.round >= 0 and "sites" in r.extra]
        med = (lambda k: statistics.median(r.extra[k] for r in ok)) if ok else None
        what = {"native-trivial": "native", "live-warm": "`lopi run --probe coverage`, plan cache warm",
                "live-nocache": "`lopi run --probe coverage`, `LOPI_CACHE=off`"}[v.name]
        added = f"+{(st.median - nat.median) * 1e3:.0f} ms" if nat and v.name != "native-trivial" else "-"
        rows.append([what, h.fmt_range(st), added,
                     f"{ok[0].extra['sites']:,}" if ok else "-",
                     f"{med('install_ms'):.0f} ms" if ok else "-", f"{med('launch_ms'):.1f} ms" if ok else "-",
                     f"n={st.n}"])
    return [f"`lopi run` start-up on a trivial run of the program (`{' '.join(wl['trivial_shown'])}`):", "",
            h.markdown_table(["configuration", "wall time median [min–max]", "added", "sites installed",
                              "installing (lopi's figure)", "launch to entry (lopi's figure)", "notes"], rows)]


def live_vs_static(m: dict, ratios: dict) -> list[str]:
    """The spliced probes' cost without lopi run's start-up, next to the rewrite's: by the program's own
    timer (speedtest1's TOTAL), from the same runs as the table. (Subtracting the trivial run's start-up
    from the wall time does not work: on 2 CPUs part of lopi's own work overlaps a long run of the
    program, so the difference comes out too small, even below native on zstd.)"""
    if f"{LIVE}:own" not in ratios or f"{COV}:own" not in ratios:
        return []
    return [f"- Probes alone, live against static, by the program's own timer (its TOTAL, which leaves `lopi run`'s "
            f"start-up and the exit out): live x{ratios[LIVE + ':own']:.2f}, static x{ratios[COV + ':own']:.2f} "
            "of native."]


# ---------------------------------------------------------------- main


def rewrite_all(lopi: Optional[Path], lopi_path: Path, key: str, prog: Path) -> tuple[dict, dict, dict]:
    """({cfg: rewritten program}, {cfg: why not}, {cfg: summary dict}) of the static lopi configurations."""
    bins, skip, summ = {}, {}, {}
    for cfg, args in LOPI_STATIC.items():
        if not lopi:
            skip[cfg] = f"lopi binary not found ({lopi_path})"
            continue
        out = BUILD / f"{key}-{prog.name}.{cfg}"
        err, dt, msg = h.lopi_rewrite(lopi, prog, out, args)
        if err:
            skip[cfg] = err
            log(f"lopi: {prog.name}: {err}")
            continue
        log(f"lopi: rewrote {prog.name} with {' '.join(args)} in {dt:.2f} s: {msg.splitlines()[-1] if msg else ''}")
        bins[cfg] = out
        m = SUMMARY_RX.search(msg)
        summ[cfg] = {"rewrite_s": dt, "line": msg.splitlines()[-1] if msg else ""}
        if m:
            summ[cfg].update(blocks=int(m.group(1)), functions=int(m.group(2)), probed=int(m.group(3)),
                             probed_pct=float(m.group(4)), probed_or_implied_pct=float(m.group(5)))
    return bins, skip, summ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="n=3, speedtest1 --size 40, a 16 MiB corpus, no valgrind, blocks screened by function totals")
    ap.add_argument("-n", type=int, help="recorded runs per configuration (default 5, quick 3)")
    ap.add_argument("--size", type=int, help="speedtest1 --size (default 120, quick 40)")
    ap.add_argument("--corpus-mib", type=int, help="zstd's corpus in MiB (default 64, quick 16)")
    ap.add_argument("--valgrind", choices=("auto", "yes", "no"), default="auto",
                    help="run valgrind once per workload (auto: in full mode only)")
    ap.add_argument("--valgrind-size", type=int, help="speedtest1 --size under valgrind (default: --size)")
    ap.add_argument("--valgrind-mib", type=int, help="zstd's corpus under valgrind, MiB (default: --corpus-mib)")
    ap.add_argument("--check-blocks", choices=("auto", "all", "suspects"), default="auto",
                    help="compare coverage mode's answers with block mode's counts block by block in every function "
                         "that ran (all), or only where the per-function totals contradict (suspects); auto: all "
                         "in full mode (~2 min), suspects in quick mode")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--sqlite-dir", type=Path, required=True, help="dir with sqlite3.c, speedtest1.c (fetch_sqlite.sh)")
    ap.add_argument("--zstd", type=Path, default=Path("/usr/bin/zstd"), help="Debian's zstd (default /usr/bin/zstd)")
    ap.add_argument("--zstd-paths", type=Path, help="env file of bench/lib/fetch_zstd.sh (zstd's source: gcov build)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "coverage.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    size = a.size or (40 if a.quick else 120)
    mib = a.corpus_mib or (16 if a.quick else 64)
    use_valgrind = a.valgrind == "yes" or (a.valgrind == "auto" and not a.quick)
    check_blocks = a.check_blocks == "all" or (a.check_blocks == "auto" and not a.quick)
    vsize, vmib = a.valgrind_size or size, a.valgrind_mib or mib
    t_start, load_start = time.time(), h.loadavg()

    BUILD.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(BUILD / "data", ignore_errors=True)
    # lopi's plan cache: the benchmark's own, emptied first (the rewrites plan afresh; the live runs'
    # warm-up round fills it, the recorded ones find it warm)
    cache = BUILD / "xdg-cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    os.environ["XDG_CACHE_HOME"] = str(cache)
    lopi, lopi_line = h.find_lopi(a.lopi, BUILD)
    shm = Path("/dev/shm")
    scratch = Path(tempfile.mkdtemp(prefix="lopi-bench-coverage-", dir=shm if shm.is_dir() else BUILD))

    # ---- programs
    st_bins = h.build_parallel({BASE: h.w2_job("speedtest1", a.sqlite_dir),
                                GCOV: h.w2_job("speedtest1-gcov", a.sqlite_dir, flags=("--coverage",))})
    zstd_bins: dict = {BASE: a.zstd}
    zstd_skip: dict = {}
    zstd_src_line = "no source build"
    if not a.zstd.is_file():
        zstd_skip[BASE] = f"{a.zstd} not found (Debian's `zstd` package)"
    if a.zstd_paths and a.zstd_paths.is_file():
        env = zstd_bench.read_env(a.zstd_paths)
        src, ver = Path(env["ZSTD_SRC"]), env["ZSTD_SRC_VERSION"]
        try:
            zstd_bins[SRC] = zstd_bench.build_zstd("zstd", src, ver, [], [])
            zstd_bins[GCOV] = zstd_bench.build_zstd("zstd-gcov", src, ver, ["--coverage"], [])
            zstd_src_line = f"source package {ver} ({src.name}), built with Debian's flags (bench/zstd's build)"
        except SystemExit as e:  # build_zstd's failure: the gcov cells say why
            zstd_skip[SRC] = zstd_skip[GCOV] = f"source build failed: {str(e).splitlines()[0]}"
    else:
        zstd_skip[SRC] = zstd_skip[GCOV] = "n/a (no source build)"

    corpus = scratch / f"corpus-{mib}M.bin"
    t0 = time.time()
    corpus_sha = make_corpus(corpus, mib)
    log(f"corpus: {corpus} ({mib} MiB, sha256 {corpus_sha[:16]}) in {time.time() - t0:.1f} s")
    vcorpus = corpus
    if use_valgrind and vmib != mib:
        vcorpus = scratch / f"corpus-{vmib}M.bin"
        make_corpus(vcorpus, vmib)
    empty = scratch / "empty"
    empty.write_bytes(b"")

    workloads = [
        {"key": "speedtest1", "title": f"speedtest1 --memdb --size {size}", "bins": st_bins, "skip": {},
         "argv": ["--memdb", "--size", str(size)], "vargv": ["--memdb", "--size", str(vsize)],
         "trivial": ["--memdb", "--size", "1"], "trivial_shown": ["speedtest1", "--memdb", "--size", "1"],
         "to_file": False, "check": h.w2_check, "native_what": f"gcc {' '.join(h.W2_FLAGS)}",
         "timer": h.TOTAL, "timer_name": "its own TOTAL: median, x native",
         "gcov_what": f"gcc {' '.join(h.W2_FLAGS)} --coverage",
         "cfgs": [BASE, COV, BLK, LIVE, *fr.CFGS, GCOV], "vsame": vsize == size, "deterministic": True,
         "vtitle": f"--size {vsize}"},
        {"key": "zstd", "title": f"zstd -q -T1 -3 -c, {mib} MiB corpus (Debian's /usr/bin/zstd)", "bins": zstd_bins,
         "skip": zstd_skip, "argv": ["-q", "-T1", "-3", "-c", str(corpus)],
         "vargv": ["-q", "-T1", "-3", "-c", str(vcorpus)],
         "trivial": ["-q", "-T1", "-3", "-c", str(empty)], "trivial_shown": ["zstd", "-q", "-T1", "-3", "-c", "EMPTY"],
         "to_file": True, "check": None, "native_what": f"Debian's {a.zstd}",
         "gcov_what": "zstd's source, Debian's flags", "cfgs": [BASE, COV, BLK, LIVE, *fr.CFGS, SRC, GCOV],
         "vsame": vmib == mib, "vtitle": f"{vmib} MiB corpus", "deterministic": False},
    ]

    all_res: dict = {}
    meta_wl: dict = {}
    try:
        for wl in workloads:
            log(f"=== {wl['title']}")
            bins, skip = dict(wl["bins"]), dict(wl["skip"])
            said: dict = {}
            summ: dict = {}
            if BASE in skip:
                for cfg in wl["cfgs"]:
                    skip.setdefault(cfg, skip[BASE])
            else:
                rb, rskip, summ = rewrite_all(lopi, a.lopi, wl["key"], bins[BASE])
                bins.update(rb)
                skip.update(rskip)
                for cfg, s in summ.items():
                    said[cfg] = [h.rewrite_note(s["line"], s["rewrite_s"])]
                if not lopi:
                    skip[LIVE] = skip[fr.MARK_LIVE] = f"lopi binary not found ({a.lopi})"
            wl["summ"] = summ
            vs = make_variants(wl, bins, skip, lopi, scratch, wl["cfgs"], wl["argv"])
            log(f"{wl['title']}: n={n} (+1 warm-up), interleaved")
            res = h.run_interleaved(vs, n, warmup=1, log=log)
            all_res[wl["key"]] = res

            # valgrind: once each, after the others (and native at valgrind's input when it is smaller)
            vres: dict = {}
            wl["valgrind_variants"] = []
            if BASE not in skip:
                vcfgs = [LACKEY, CALLGRIND]
                vskip = {} if use_valgrind and h.which("valgrind") else {
                    c: ("full mode only (valgrind runs the program ~50-200x slower)" if not use_valgrind
                        else "valgrind not installed") for c in vcfgs}
                vvs = make_variants(wl, bins, vskip, lopi, scratch, ([] if wl["vsame"] else [BASE]) + vcfgs,
                                    wl["vargv"], tag="-valgrind")
                if use_valgrind and h.which("valgrind"):
                    log(f"{wl['title']}: valgrind once each ({wl['vtitle']})")
                    vres = h.run_interleaved([v for v in vvs if v.name in VALGRIND], 1, warmup=0, log=log)
                    if not wl["vsame"]:  # native on valgrind's input: n runs of its own, the ratio's reference
                        log(f"{wl['title']}: native on {wl['vtitle']}, n={n} (+1 warm-up)")
                        vres.update(h.run_interleaved([v for v in vvs if v.name == BASE], n, warmup=1, log=log))
                        wl["valgrind_base"] = h.stats(vres.get(BASE, []))
                        wl["valgrind_base_name"] = f"native at {wl['vtitle']}"
                wl["valgrind_variants"] = [v for v in vvs if v.name in VALGRIND]
                for c in vcfgs:
                    said.setdefault(c, [])
                    if not wl["vsame"]:
                        said[c].append(f"run on {wl['vtitle']}: ratio to native on that input")
                    said[c].append("run once, after the interleaved rounds")
            all_res[wl["key"] + "-valgrind"] = vres

            # lopi run's start-up on a trivial run
            sres: dict = {}
            svs: list = []
            if BASE not in skip:
                svs = startup_variants(wl, bins, lopi, scratch, wl["trivial"], "" if lopi else "lopi not found")
                log(f"{wl['title']}: lopi run start-up, trivial run, n={n} (+1 warm-up)")
                sres = h.run_interleaved(svs, n, warmup=1, log=log)
            all_res[wl["key"] + "-startup"] = sres
            meta_wl[wl["key"]] = {"vs": vs, "res": res, "vres": vres, "said": said, "svs": svs, "sres": sres,
                                  "bins": {k: str(v) for k, v in bins.items()}, "skip": skip}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # tmpfs: memory

    # ---- Markdown
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_line),
        ("sqlite", h.sqlite_source_line(a.sqlite_dir)),
        ("zstd", f"Debian's {a.zstd} ({h.tool_version(['dpkg-query', '-W', '-f', '${Version}', 'zstd'])}); "
                 f"gcov build: {zstd_src_line}"),
        ("valgrind", h.tool_version(["valgrind", "--version"])),
        ("corpus", f"{mib} MiB, sha256 {corpus_sha[:16]}… (bench/locks's generator, in /dev/shm)"),
        *h.load_and_time(load_start, t_start)])
    md = h.results_head("Basic-block and function-entry probes: lopi coverage, block counts and entry:mark next to "
                        "gcov and valgrind",
                        "bench/coverage/run.sh", a.quick, machine)
    sections: list[str] = []
    target_cells, fn_cells = [], []
    for wl in workloads:
        m = meta_wl.get(wl["key"])
        sections += [f"## {wl['title']}", ""]
        if not m:
            sections += ["Not run.", ""]
            continue
        cmp = {c: fr.compare(m["res"].get(c, []), m["res"].get(COV, []) + m["res"].get(LIVE, []), lopi)
               for c in fr.CFGS}
        table, ratios = workload_table(wl, m["vs"], m["res"], m["vres"], m["said"], cmp)
        sections += table + [""]
        s = wl["summ"]
        if s:
            c, b = s.get(COV, {}), s.get(BLK, {})
            blocks = c.get("blocks", b.get("blocks"))
            sites = next((r.extra["sites"] for r in m["sres"].get("live-warm", []) if "sites" in r.extra), None)
            sections.append(
                f"- Probes (`lopi rewrite`'s summary): {h.fmt_int(blocks)} blocks in "
                f"{h.fmt_int(c.get('functions', b.get('functions')))} functions; coverage mode probes "
                f"{h.fmt_int(c.get('probed'))} ({c.get('probed_pct', 0):.1f}%), block mode "
                f"{h.fmt_int(b.get('probed'))} ({b.get('probed_pct', 0):.1f}%); probed or implied: "
                f"{c.get('probed_or_implied_pct', 0):.1f}% / {b.get('probed_or_implied_pct', 0):.1f}%"
                + (f"; `lopi run --probe coverage` installs {sites:,} sites" if sites else "") + ".")
        oracle = next((r.extra["insn_counts"] for r in m["vres"].get(CALLGRIND, []) if "insn_counts" in r.extra),
                      None) if wl["vsame"] else None  # callgrind's counts, when it ran the same input
        sections += consistency(m["res"].get(COV, []), m["res"].get(BLK, []), lopi, check_blocks,
                                wl["deterministic"], oracle)
        sections += fr.summary_lines(cmp)
        outs = verdicts(m["res"])
        lopi_outs = {c: outs.get(c) for c in LOPI_CFGS + fr.CFGS if outs.get(c)}
        if lopi_outs:
            same = all(v == "identical" for v in lopi_outs.values())
            sections.append("- Output byte-identical to native for every lopi configuration: "
                            + ("yes" if same else "NO") + " ("
                            + ", ".join(f"{c}: {v}" for c, v in lopi_outs.items()) + ").")
        fn_cells.append((wl["key"], ratios, cmp))
        if COV in ratios:
            target_cells.append((wl["key"], ratios[COV], ratios.get(LIVE)))
        sections += [""] + startup_lines(wl, m["svs"], m["sres"]) + [""] + live_vs_static(m, ratios) + [""]

    met = bool(target_cells) and len(target_cells) == len(workloads) and all(r <= TARGET for _, r, _ in target_cells)
    target = (f"**Target** (the issue): lopi's coverage mode within {TARGET:.2f}x of native on speedtest1 and zstd. "
              + "; ".join(f"{k}: static x{r:.2f} ({'met' if r <= TARGET else 'NOT met'})"
                          + (f", live x{lv:.2f} (start-up included)" if lv else "") for k, r, lv in target_cells)
              + f". **{'Met' if met else 'Not met'}**"
              + ("" if met else " (the target counts the static rewrite)") + ".")
    fn_line, fn_meta = fr.headline(fn_cells)
    md += ["", target, *(["", fn_line] if fn_line else []), "",
           f"Reference only, not measured here: bcov (static binary rewriting for coverage, Ben Khadra et al., "
           f"ESEC/FSE 2020) reports an average overhead of {BCOV_PUBLISHED} in its paper; bcov is not installed.",
           "", "## Method", "",
           "- Machine: a VM with 2 CPUs (other jobs add noise; the load average is above). Time = the whole "
           "process's wall time, measured by the harness around the child (`bench/lib/harness.py`), so start-up, "
           "the tools' set-up and writing their data at exit are included.",
           f"- Runs: the configurations of one workload interleaved round-robin, the order rotated each round, after "
           f"one unrecorded warm-up round; n={n} recorded runs each; median [min–max]; x native = median / native "
           "median of the same rounds (gcov on zstd: / the source build's median, the build it instruments).",
           f"- speedtest1: sqlite's `speedtest1 --memdb --size {size}` with the amalgamation of Debian's source "
           "package "
           f"(bench/lib/fetch_sqlite.sh), built `gcc {' '.join(h.W2_FLAGS)}` as bench/budget does; output check = its "
           "output without the times (test names, TOTAL line).",
           f"- zstd: Debian's `{a.zstd} -q -T1 -3 -c CORPUS > OUT` (one thread, its library linked in statically), "
           f"CORPUS = {mib} MiB of lines of words from a fixed random vocabulary with every eighth MiB random bytes "
           "(bench/locks's generator, as bench/mp), CORPUS and OUT in /dev/shm; output check = OUT's sha256. The "
           "command runs under `sh -c 'exec \"$@\" > OUT'` in every configuration.",
           "- lopi coverage (static): `lopi rewrite --probe coverage PROG -o PROG.cov`, then PROG.cov: a one-byte "
           "store per probe, probes only on blocks whose running the probed blocks do not imply. lopi block counts: "
           "`lopi rewrite --probe block` (a per-CPU counter per probed block). lopi coverage live: `lopi run -q "
           "--probe coverage -- PROG ARGS` (probes spliced in at the entry point; the wall time includes lopi's "
           "start-up: planning from the plan cache, which the warm-up round fills, and installing every site). "
           "Every lopi run writes to a fresh `$LOPI_OUTPUT`; *blocks ran* = `lopi coverage DATA --format json` "
           "summed over functions (then the data is deleted).",
           fr.METHOD,
           "- gcov: the same source built with `--coverage` (gcc's arc counters compiled in, `.gcda` files written at "
           "exit under a fresh `GCOV_PREFIX` per run, so no run merges into an earlier one's counters). speedtest1: "
           "the W2 flags + `--coverage`; zstd: Debian's source package built with Debian's flags "
           "(`make -C programs zstd-release`, bench/zstd's build) with and without `--coverage` "
           + ("(not available here: n/a)" if SRC in zstd_skip else "") + ".",
           "- valgrind: `--tool=lackey --basic-counts=yes` (counts every superblock it runs: the closest to block "
           "counting) and `--tool=callgrind --collect-jumps=yes`, each run once per workload after the interleaved "
           "rounds, in full mode only, on the same input as the table unless the notes say otherwise (then the "
           "ratio is to native runs on that input). Their notes give what they counted.",
           "- Blocks ran, agreement: coverage mode's answers (a block's own mark, or implied by marked blocks) against "
           "block mode's counts (measured: every probed block counted), over every run of both (warm-up included). "
           + ("Every function that ran is compared block by block (`lopi report DATA --blocks FUNC --format json`), "
              "one run of each mode first, then every run for the functions that differ. " if check_blocks else
              "Functions are screened by their totals (`lopi coverage DATA --format json`: one mode has more blocks "
              "ran than the other has ran + not known), those compared block by block (`lopi report DATA --blocks "
              "FUNC --format json`); errors that cancel out within a function are not seen (full mode compares "
              "every block). ")
           + "A block is listed when every run of both modes gives the same answer and the two contradict; blocks "
           "that ran in some runs and not in others are counted apart. speedtest1 is single-threaded and "
           "deterministic, so a listed block is a wrong answer; zstd hands buffers between its threads even with "
           "-T1 (a buffer pool whose paths depend on timing, which block mode's slowdown shifts), so its list is "
           "not proof of an error. In full mode the listed blocks also get callgrind's count of their first "
           "instruction in its run of the native program (same input).",
           "- Start-up: `lopi run --probe coverage` (without -q, for its `N sites installed in X ms (Y ms from launch "
           "to the program's entry)` line) on a trivial run of the program, interleaved with the native trivial run; "
           "added = median − native median, which includes what lopi does after the program exits; "
           "`LOPI_CACHE=off` plans the module afresh each run. On 2 CPUs part of that overlaps a long run of the "
           "program, so the live row's wall time less this figure understates the probes' cost (zstd: below native); "
           "speedtest1's own TOTAL gives the live probes' cost without start-up and exit.",
           "- bcov is not installed; its figure above is the published one, for reference only.",
           "", *sections]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    raw = a.out.with_suffix(".runs.json")
    meta = {"n": n, "size": size, "corpus_mib": mib, "corpus_sha256": corpus_sha, "valgrind": use_valgrind,
            "valgrind_size": vsize, "valgrind_mib": vmib, "machine": machine, "target": TARGET,
            "target_ratios": {k: {"coverage": r, "coverage_live": lv} for k, r, lv in target_cells},
            "target_met": met, "functions_ran": fn_meta,
            "probes": {wl["key"]: wl.get("summ", {}) for wl in workloads},
            "argv": {wl["key"]: {v.name: v.argv for v in meta_wl[wl["key"]]["vs"] + wl.get("valgrind_variants", [])}
                     for wl in workloads if wl["key"] in meta_wl},
            "skipped": {k: m["skip"] for k, m in meta_wl.items()}}
    shutil.rmtree(BUILD / "data", ignore_errors=True)  # the lopi records consistency() read
    for res in all_res.values():  # per-function answers: used above (consistency), too big to keep
        for runs in res.values():
            for r in runs:
                for k in ("fn_ran", "insn_counts", *fr.DROP):
                    r.extra.pop(k, None)
    h.dump_raw(raw, meta, all_res)
    print(text)
    shown = a.out.relative_to(REPO) if a.out.is_relative_to(REPO) else a.out
    log(f"wrote {shown} and {raw.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
