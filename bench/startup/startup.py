#!/usr/bin/env python3
"""Start-up: what `lopi run` adds to short processes, and what a static rewrite of a big program
takes.

1. The zstd battery (tests/real/zstd-battery.sh: ~245 short zstd processes, several at once in
   pipelines) with, rotated each round after one unrecorded warm-up round:
     original        zstd itself;
     rewritten       `lopi rewrite --probe entry,exit` (rewritten once, before the rounds);
     live            a launcher named zstd that execs `lopi run -q --probe entry,exit --arg0 $0 --
                     zstd ARGS` (bench/suites' live launcher), the plan cache warm (the warm-up
                     round fills it: the selection and the image laid out below zstd);
     live, no cache  the same with LOPI_CACHE=off: every process is planned anew.
   Metric: the battery's wall time. Each battery's output must equal the original's.
2. One process, `zstd -q -c -1` of a 100 kB file, run K times in a row per configuration (same
   four): ms per process = wall / K.
3. `lopi rewrite $(gcc -print-prog-name=cc1) --probe entry,exit` with --no-cache and with the
   cache warm (n runs each, interleaved).

The plan cache is a private directory (XDG_CACHE_HOME under --work), emptied at the start.
Writes bench/results/startup.md and startup.json. Run through run.sh; --help lists the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
sys.path.insert(0, str(REPO / "bench" / "suites"))
import harness as h  # noqa: E402
import suites  # noqa: E402

BATTERY = REPO / "tests" / "real" / "zstd-battery.sh"
CONFIGS = ["original", "rewritten", "live", "live, no cache"]


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def launcher(lopi: Path, real: str, out: Path) -> None:
    """bench/suites' live launcher: `lopi run -q --probe entry,exit --arg0 $0 -- REAL ARGS`."""
    fixed = ", ".join(suites.c_string(a) for a in [str(lopi), "run", "-q", "--probe", "entry,exit"])
    src = out.with_name(out.name + ".launcher.c")
    src.write_text(suites.LAUNCHER_C.replace("@FIXED@", fixed).replace("@REAL@", suites.c_string(real)))
    subprocess.run(["cc", "-O2", "-o", str(out), str(src)], check=True)
    src.unlink()


def programs(lopi: Path, zstd: str, work: Path, tag: str) -> dict[str, str]:
    """The zstd of each configuration, each named `zstd` (zstd's usage line shows its name)."""
    bins = {}
    for cfg in CONFIGS:
        d = work / tag / cfg.replace(", ", "-").replace(" ", "-")
        d.mkdir(parents=True, exist_ok=True)
        out = d / "zstd"
        if cfg == "original":
            out.unlink(missing_ok=True)
            out.symlink_to(zstd)
        elif cfg == "rewritten":
            err, dt, msg = h.lopi_rewrite(lopi, Path(zstd), out, ["--probe", "entry,exit", "--no-cache"])
            if err:
                raise SystemExit(f"{tag}: {err}")
            h.log(f"{tag}: rewrote zstd in {dt:.2f} s")
        else:
            launcher(lopi, zstd, out)
        bins[cfg] = str(out)
    return bins


def variants(bins: dict[str, str], argv, env_of, data: Path) -> list[h.Variant]:
    """One variant per configuration: argv(zstd) with env_of(cfg); a fresh LOPI_OUTPUT per run."""

    def before(idx: int) -> dict:
        for old in data.glob("*.lopi"):
            old.unlink()
        return {"LOPI_OUTPUT": str(data / f"run{idx}.lopi")}

    return [h.Variant(cfg, argv(bins[cfg]), h.WALL, env=env_of(cfg), before=before, timeout_s=1800) for cfg in CONFIGS]


def battery_table(tag: str, res: dict, base: str) -> list[list[str]]:
    rows = []
    ref, orig = h.stats(res["rewritten"]), h.stats(res["original"])
    for cfg in CONFIGS:
        st = h.stats(res[cfg])
        if not st:
            rows.append([tag, cfg, "failed: " + (h.failure_note(res[cfg]) or "?"), "", "", ""])
            continue
        outs = {r.stdout for r in res[cfg] if r.ok}
        same = "same" if outs == {base} else f"DIFFERS ({len(outs)} distinct)"
        vs_orig = st.median / orig.median if orig else float("nan")
        vs_rw = f"x{st.median / ref.median:.3f}" if ref else "-"
        rows.append([tag, cfg, h.fmt_range(st), f"x{vs_orig:.3f}", vs_rw, same])
    return rows


def single_table(tag: str, res: dict, k: int) -> list[list[str]]:
    rows = []
    orig = h.stats(res["original"])
    for cfg in CONFIGS:
        st = h.stats(res[cfg])
        if not st:
            rows.append([tag, cfg, "failed", ""])
            continue
        per = st.median / k * 1e3
        added = f"+{per - orig.median / k * 1e3:.1f}" if orig else "-"
        rows.append([tag, cfg, f"{per:.1f} [{st.lo / k * 1e3:.1f}–{st.hi / k * 1e3:.1f}]", added])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3, the source-built zstd only, K=20")
    ap.add_argument("-n", type=int, help="recorded rounds (default 5, quick 3)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--paths", type=Path, default=REPO / "work-real" / "paths.env", help="tests/real/prepare.sh's paths.env")
    ap.add_argument("--work", type=Path, default=REPO / "work-real" / "bench-build" / "startup", help="scratch directory")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup.md")
    a = ap.parse_args()
    n = a.n or (3 if a.quick else 5)
    k = 20 if a.quick else 50
    t_start, load_start = time.time(), h.loadavg()
    a.work.mkdir(parents=True, exist_ok=True)
    lopi, lopi_info = h.find_lopi(a.lopi, a.work / "bin")
    if not lopi:
        raise SystemExit(f"no lopi binary at {a.lopi}")
    paths = read_env(a.paths)
    cache_home = a.work / "xdg-cache"
    shutil.rmtree(cache_home, ignore_errors=True)
    data = a.work / "data"
    data.mkdir(exist_ok=True)
    common = {"XDG_CACHE_HOME": str(cache_home)}

    def env_of(cfg: str) -> dict:
        return {**common, "LOPI_CACHE": "off"} if cfg == "live, no cache" else dict(common)

    # Copies: prepare.sh may rebuild the shared originals while this runs.
    inputs = a.work / "inputs"
    inputs.mkdir(exist_ok=True)
    copied = {}
    for key, name in [("ZSTD_SRC_BIN", "zstd-source"), ("DEB_ZSTD", "zstd-debian"), ("DATAGEN", "datagen")]:
        copied[key] = str(inputs / name)
        shutil.copy2(paths[key], copied[key])
    programs_to_run = [("source", "zstd (source build)", copied["ZSTD_SRC_BIN"])]
    if not a.quick:
        programs_to_run.append(("debian", "zstd (Debian, stripped)", copied["DEB_ZSTD"]))
    raw: dict = {}
    battery_rows, single_rows = [], []
    sample = a.work / "sample.bin"
    subprocess.run([copied["DATAGEN"], "-g100K", "-P50", "-s7"], stdout=sample.open("wb"), check=True)
    for short, tag, zstd in programs_to_run:
        bins = programs(lopi, zstd, a.work, short)
        scratch = a.work / "scratch"
        h.log(f"{tag}: battery, n={n}")
        argv = lambda z: ["bash", str(BATTERY), z, copied["DATAGEN"], str(scratch)]  # noqa: E731
        res = h.run_interleaved(variants(bins, argv, env_of, data), n, log=h.log)
        base = next((r.stdout for r in res["original"] if r.ok), "")
        battery_rows += battery_table(tag, res, base)
        raw[f"battery {tag}"] = res
        h.log(f"{tag}: one process x{k}, n={n}")
        loop = f'for i in $(seq {k}); do "$0" -q -c -1 {sample} > /dev/null || exit 1; done'
        res = h.run_interleaved(variants(bins, lambda z: ["bash", "-c", loop, z], env_of, data), n, log=h.log)
        single_rows += single_table(tag, res, k)
        raw[f"single {tag}"] = res
    for old in data.glob("*.lopi"):
        old.unlink()

    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True).stdout.strip()
    rw_out = a.work / "cc1.lopi"
    h.log(f"cc1: lopi rewrite, n={n}")
    rw = [h.Variant(name, [str(lopi), "rewrite", cc1, "-o", str(rw_out), "--probe", "entry,exit", *extra], h.WALL, env=dict(common))
          for name, extra in [("planned (--no-cache)", ["--no-cache"]), ("plan from the cache", [])]]
    res = h.run_interleaved(rw, n, log=h.log)
    raw["cc1 rewrite"] = res
    rw_out.unlink(missing_ok=True)
    cc1_rows = []
    for v in rw:
        st = h.stats(res[v.name])
        said = next((r.stderr.strip().splitlines()[-1] for r in res[v.name] if r.ok and r.stderr.strip()), "")
        cc1_rows.append([v.name, h.fmt_range(st) if st else "failed", said.split(": ", 2)[-1]])

    machine = h.machine_info(REPO, [("lopi binary", lopi_info), ("zstd", f"{paths.get('ZSTD_VERSION', '?')} (source build and Debian's)"),
                                    ("cc1", f"{cc1} ({os.path.getsize(cc1) / 1e6:.0f} MB)")])
    machine += h.load_and_time(load_start, t_start)
    md = h.results_head("Start-up: lopi run on short processes, lopi rewrite of cc1", "bench/startup/run.sh", a.quick, machine)
    md += [
        "",
        "## Method",
        "",
        f"- zstd battery: `tests/real/zstd-battery.sh ZSTD DATAGEN SCRATCH` (~245 zstd processes, some at once in pipelines); wall time of the whole battery, n={n} rounds after a warm-up round, configurations rotated each round. *rewritten*: `lopi rewrite --probe entry,exit`; *live*: a launcher in zstd's place that execs `lopi run -q --probe entry,exit --arg0 $0 -- zstd ARGS` (as `bench/suites --mode live`), with the plan cache warm (filled by the warm-up round); *live, no cache*: `LOPI_CACHE=off`, every process planned anew. Output: the battery's output equals the original's.",
        f"- One process: `zstd -q -c -1` of a 100 kB file, {k} times in a row; ms per process = wall / {k}; *added* = minus the original's.",
        "- cc1: `lopi rewrite CC1 -o OUT --probe entry,exit`, wall time, with `--no-cache` and with the plan cache warm.",
        "",
        "## zstd battery",
        "",
        h.markdown_table(["zstd", "configuration", "battery, s: median [min–max]", "x original", "x rewritten", "output"], battery_rows),
        "",
        "## One short process",
        "",
        h.markdown_table(["zstd", "configuration", "ms per process: median [min–max]", "added, ms"], single_rows),
        "",
        "## Static rewrite of cc1",
        "",
        h.markdown_table(["plan", "lopi rewrite: median [min–max]", "lopi's summary"], cc1_rows),
        "",
    ]
    text = "\n".join(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    h.dump_raw(a.out.with_suffix(".json"), {"machine": machine, "n": n, "k": k}, raw)
    print(text)
    h.log(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
