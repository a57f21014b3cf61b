#!/usr/bin/env python3
"""zstd, a real program from Debian's sources and Debian's stripped binary, under lopi and the anchors.

Workloads: a fixed corpus made by zstd's own `tests/datagen -gSIZE -sSEED` (default 64 MB, seed 1;
quick 16 MB), compressed (`zstd -3 -q -f CORPUS -o OUT`) and decompressed (`zstd -d -q -f
CORPUS.zst -o OUT`, the .zst made once by the uninstrumented build); OUT in a tmpfs directory.
The metric is the whole process's wall-clock time (zstd has no timer of its own): start-up,
instrumentation set-up and writing the tool's data at exit are included.

Source build (Debian's zstd source package, built with Debian's flags: dpkg-buildflags,
hardening=+all, like tests/real/prepare.sh): uninstrumented; lopi rewrite --probe entry;
lopi rewrite --probe entry,exit; uftrace record -P . on the same binary; the same source built with
-finstrument-functions + bench/entry-count/count_hooks.c and + bench/timing/timing_hooks.c.
Debian's stripped /usr/bin/zstd: uninstrumented; lopi --probe entry; lopi --probe entry,exit.

calls = what each tool counted itself (lopi's report, uftrace's report, the hook's count);
overhead ns/call = (median - baseline median) / calls. Every output is checked: decompressed
files byte-identical to the corpus (sha256), compressed files identical to the baseline's.

Run through run.sh; `zstd_bench.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench" / "lib"))
import harness as h  # noqa: E402

BUILD = REPO / "work-real" / "bench-build" / "zstd"  # rewritten programs, corpus, tool data
COUNT_HOOKS = REPO / "bench" / "entry-count" / "count_hooks.c"
TIMING_HOOKS = REPO / "bench" / "timing" / "timing_hooks.c"
FINSTR = ["-finstrument-functions"]
log = h.log

BASE, LOPI_E, LOPI_T, UFT, GCC_C, GCC_T = (
    "baseline", "lopi-entry", "lopi-timing", "uftrace-dyn", "gcc-finstr-count", "gcc-finstr-timing")
LABEL = {
    BASE: "uninstrumented",
    LOPI_E: "lopi rewrite --probe entry (all functions)",
    LOPI_T: "lopi rewrite --probe entry,exit (all functions)",
    UFT: "uftrace record -P ., same binary",
    GCC_C: "gcc -finstrument-functions build + count_hooks.c",
    GCC_T: "gcc -finstrument-functions build + timing_hooks.c",
}
TOOLS = {BASE: h.TOOL["base"], LOPI_E: h.TOOL["lopi-entry"], LOPI_T: h.TOOL["lopi-timing"],
         UFT: h.TOOL["uftrace-dyn"], GCC_C: h.TOOL["gcc-count"], GCC_T: h.TOOL["gcc-timing"]}
LOPI_ARGS = {LOPI_E: ["--probe", "entry"], LOPI_T: ["--probe", "entry,exit"]}


# ---------------------------------------------------------------- building


def read_env(path: Path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def deb_buildflags(src: Path) -> dict:
    """Debian's CFLAGS/CPPFLAGS/LDFLAGS for zstd (hardening=+all, as its debian/rules asks)."""
    env = dict(os.environ, DEB_BUILD_MAINT_OPTIONS="hardening=+all")
    return {k: subprocess.run(["dpkg-buildflags", "--get", k], capture_output=True, text=True, env=env,
                              cwd=src, check=True).stdout.strip() for k in ("CFLAGS", "CPPFLAGS", "LDFLAGS")}


def build_zstd(name: str, src: Path, version: str, extra_cflags: list[str], objects: list[Path],
               target: tuple[str, str, str] = ("programs", "zstd-release", "programs/zstd")) -> Path:
    """`make -C DIR GOAL` in a copy of the source tree with Debian's flags (+ extra_cflags, objects
    linked in), the result (RESULT path in the tree) cached by a hash of all of that."""
    flags = deb_buildflags(src)
    subdir, goal, result = target

    def produce(tmp: Path) -> None:
        tree = tmp.with_name(tmp.name + ".tree")
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(src, tree, symlinks=True)
        env = dict(os.environ, CFLAGS=" ".join([flags["CFLAGS"], *extra_cflags]), CPPFLAGS=flags["CPPFLAGS"],
                   LDFLAGS=" ".join([flags["LDFLAGS"], *map(str, objects)]), V="1")
        logf = tmp.with_name(tmp.name + ".log")
        with logf.open("w") as f:
            p = subprocess.run(["make", f"-j{os.cpu_count() or 2}", "-C", subdir, goal], cwd=tree, env=env,
                               stdout=f, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            raise SystemExit(f"build of {name} failed, see {logf}:\n" + logf.read_text()[-3000:])
        shutil.copy2(tree / result, tmp)
        shutil.rmtree(tree)

    parts = [h.gcc_version(), str(src), version, goal, *extra_cflags, *flags.values(),
             *(o.read_bytes() for o in objects)]
    return h.cached_output(name, parts, produce, f"make -C {subdir} {goal}, Debian flags {' '.join(extra_cflags)}")


def build_all(env: dict) -> dict:
    src, version = Path(env["ZSTD_SRC"]), env["ZSTD_SRC_VERSION"]
    hooks = {GCC_C: h.build("count_hooks", ["-O2", "-c", str(COUNT_HOOKS)], [COUNT_HOOKS], ".o"),
             GCC_T: h.build("timing_hooks", ["-O2", "-c", str(TIMING_HOOKS)], [TIMING_HOOKS], ".o")}
    b = {}
    if env.get("ZSTD_BUILT") and env.get("DATAGEN"):
        b[BASE], b["datagen"] = Path(env["ZSTD_BUILT"]), Path(env["DATAGEN"])
        log(f"zstd: reusing tests/real/prepare.sh's build {b[BASE]}")
    else:
        b[BASE] = build_zstd("zstd", src, version, [], [])
        b["datagen"] = build_zstd("zstd-datagen", src, version, [], [], ("tests", "datagen", "tests/datagen"))
    for cfg, obj in hooks.items():
        b[cfg] = build_zstd(f"zstd-{cfg}", src, version, FINSTR, [obj])
    return b


def has_symtab(prog: Path) -> bool:
    p = subprocess.run(["readelf", "-S", "-W", str(prog)], capture_output=True, text=True)
    return " .symtab " in p.stdout


def sha256(path: Path) -> str:
    d = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            d.update(chunk)
    return d.hexdigest()


def make_corpus(datagen: Path, zstd: Path, size_mb: int, seed: int) -> tuple[Path, Path]:
    """(corpus, corpus.zst): `datagen -gSIZEM -sSEED` and its `zstd -3` by the uninstrumented build."""
    BUILD.mkdir(parents=True, exist_ok=True)
    corpus = BUILD / f"corpus-{size_mb}M-s{seed}.dat"
    if not corpus.exists():
        tmp = corpus.with_name(corpus.name + ".part")
        with tmp.open("wb") as f:
            subprocess.run([str(datagen), f"-g{size_mb}M", f"-s{seed}"], stdout=f, check=True)
        tmp.rename(corpus)
    ref = corpus.with_name(corpus.name + ".zst")
    subprocess.run([str(zstd), "-3", "-q", "-f", str(corpus), "-o", str(ref)], check=True)
    return corpus, ref


# ---------------------------------------------------------------- variants


def output_hooks(out: Path):
    """(before, after): OUT removed before the run; after it, its sha256 (then removed)."""

    def before(idx: int) -> dict:
        out.unlink(missing_ok=True)
        return {}

    def after(idx: int, stdout: str, stderr: str, env: dict) -> dict:
        if not out.exists():
            return {"after_error": f"no output file {out}"}
        digest = sha256(out)
        out.unlink()
        return {"output_sha256": digest}

    return before, after


def make_variants(key: str, args: list[str], bins: dict, skip: dict, lopi: Optional[Path], tmp: Path,
                  counted: dict) -> list[h.Variant]:
    """args: zstd's arguments with "OUT" where the output file goes."""
    data = BUILD / "data" / key
    vs = []
    for cfg in (BASE, LOPI_E, LOPI_T, UFT, GCC_C, GCC_T):
        if cfg not in bins and cfg not in skip:
            continue
        out = tmp / f"{key}-{cfg}.out"
        argv_tail = [str(out) if a == "OUT" else a for a in args]
        prog = str(bins.get(cfg, f"{cfg}-missing"))
        hooks = [output_hooks(out)]
        if cfg in (LOPI_E, LOPI_T):
            hooks.append(h.lopi_data_hooks(lopi, data / cfg))
        elif cfg == GCC_C:
            hooks.append((None, h.count_hook_after))
        elif cfg == GCC_T:
            hooks.append((h.timing_hook_before(data / "timing_hooks.txt"), h.timing_hook_after))
        if cfg == UFT:
            v = h.uftrace_variant(cfg, bins[BASE], argv_tail, data / cfg, counted.setdefault(cfg, {}), h.WALL,
                                  patch_all=True, skip_reason=skip.get(cfg, ""))
            hooks.insert(0, (v.before, v.after))
        else:
            v = h.Variant(cfg, [prog, *argv_tail], h.WALL, skip_reason=skip.get(cfg, ""))
        v.before, v.after = h.compose_hooks(*hooks)
        vs.append(v)
    return vs


def output_verdicts(vs: list[h.Variant], res: dict, want: Optional[str]) -> dict:
    """{config: "identical" | "DIFFERS ..."} against `want` (sha256; None: the baseline's output)."""
    shas = {v.name: {r.extra.get("output_sha256") for r in res[v.name] if r.ok} for v in vs if not v.skip_reason}
    if want is None:
        base = shas.get(BASE, set())
        want = next(iter(base)) if len(base) == 1 else None
    out = {}
    for name, got in shas.items():
        if not got:
            continue
        out[name] = "identical" if want and got == {want} else f"DIFFERS ({len(got)} distinct outputs)"
    return out


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n=3 and a 16 MB corpus")
    ap.add_argument("-n", type=int, help="recorded runs per configuration (default 5, quick 3)")
    ap.add_argument("--size-mb", type=int, help="corpus size in MB (default 64, quick 16)")
    ap.add_argument("--seed", type=int, default=1, help="datagen seed (default 1)")
    ap.add_argument("--lopi", type=Path, default=Path(os.environ.get("LOPI", REPO / "target/release/lopi")))
    ap.add_argument("--paths", type=Path, required=True, help="env file written by bench/lib/fetch_zstd.sh")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/zstd.md")
    a = ap.parse_args()

    n = a.n or (3 if a.quick else 5)
    size_mb = a.size_mb or (16 if a.quick else 64)
    t_start = time.time()
    load_start = h.loadavg()
    env = read_env(a.paths)
    shutil.rmtree(BUILD / "data", ignore_errors=True)
    bins = {"src": build_all(env), "deb": {BASE: Path(env["DEB_ZSTD"])}}
    corpus, ref = make_corpus(bins["src"]["datagen"], bins["src"][BASE], size_mb, a.seed)
    corpus_sha = sha256(corpus)
    log(f"zstd: corpus {corpus.name} ({corpus.stat().st_size:,} bytes, sha256 {corpus_sha[:16]}), "
        f"{ref.name} ({ref.stat().st_size:,} bytes)")

    lopi, lopi_info = h.find_lopi(a.lopi, BUILD)
    skip, notes = h.rewrite_configs(lopi, a.lopi, bins, LOPI_ARGS, BUILD)
    for build in ("src", "deb"):
        if not h.which("uftrace"):
            skip[build][UFT] = "uftrace not installed"
        elif not has_symtab(bins[build][BASE]):
            skip[build][UFT] = ("stripped (no .symtab): uftrace -P . finds no function of the binary to patch, "
                                "it would record library calls only")
        else:
            bins[build][UFT] = bins[build][BASE]

    shm = Path("/dev/shm")
    tmp = Path(tempfile.mkdtemp(prefix="lopi-bench-zstd-", dir=shm if shm.is_dir() else BUILD))
    groups = [
        ("zstd-src-c", f"zstd -3, source build, {size_mb} MB", "src", ["-3", "-q", "-f", str(corpus), "-o", "OUT"], None),
        ("zstd-src-d", f"zstd -d, source build, {size_mb} MB", "src", ["-d", "-q", "-f", str(ref), "-o", "OUT"],
         corpus_sha),
        ("zstd-deb-c", f"zstd -3, Debian's stripped binary, {size_mb} MB", "deb",
         ["-3", "-q", "-f", str(corpus), "-o", "OUT"], None),
        ("zstd-deb-d", f"zstd -d, Debian's stripped binary, {size_mb} MB", "deb",
         ["-d", "-q", "-f", str(ref), "-o", "OUT"], corpus_sha),
    ]
    ref_sha = sha256(ref)
    all_res: dict[str, dict] = {}
    entries: list[dict] = []
    counted: dict[str, dict] = {}
    try:
        for key, title, build, args, want in groups:
            log(f"{title}: n={n} (+1 warm-up), interleaved")
            vs = make_variants(key, args, bins[build], skip[build], lopi, tmp, counted.setdefault(key, {}))
            res = h.run_interleaved(vs, n, warmup=1, log=log)
            all_res[title] = res
            verdicts = output_verdicts(vs, res, want)
            extra_notes = {k: list(v) for k, v in notes[build].items()}
            if want is None:  # compression: the baseline's output against the reference .zst
                base_sha = {r.extra.get("output_sha256") for r in res[BASE] if r.ok}
                extra_notes.setdefault(BASE, []).append(
                    "output = the reference CORPUS.zst" if base_sha == {ref_sha} else "output ≠ the reference CORPUS.zst")
            entries += h.summary_entries("zstd", key, title, vs, res, LABEL, TOOLS, outputs=verdicts,
                                         notes=extra_notes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = [[e["workload"], e["label"], *h.entry_cells(e)] for e in entries]
    header = ["workload", "config", "process wall time median [min–max]", "x uninstr.", "calls",
              "overhead ns/call", "output", "notes"]
    machine = h.machine_info(REPO, [
        ("lopi binary", lopi_info),
        ("uftrace", h.tool_version(["uftrace", "--version"])),
        ("zstd", f"source package {env['ZSTD_SRC_VERSION']} ({Path(env['ZSTD_SRC']).name}); "
                 f"Debian binary package zstd {env['DEB_ZSTD_VERSION']}"),
        ("corpus", f"`datagen -g{size_mb}M -s{a.seed}` ({corpus.stat().st_size:,} bytes, sha256 {corpus_sha[:16]}…)"),
        *h.load_and_time(load_start, t_start),
    ])
    md = [
        *h.results_head("zstd: source build and Debian's stripped binary", "bench/zstd/run.sh", a.quick, machine),
        "",
        "## Method",
        "",
        f"- Corpus: zstd's `tests/datagen -g{size_mb}M -s{a.seed}` (fixed seed, 50% compressibility). "
        "Compression: `zstd -3 -q -f CORPUS -o OUT`; decompression: `zstd -d -q -f CORPUS.zst -o OUT` (CORPUS.zst "
        "made once by the uninstrumented source build). OUT is in a tmpfs directory. zstd's default threads "
        "(one compression worker, asynchronous I/O).",
        "- Time = the whole process's wall-clock time (zstd has no timer of its own), so start-up, the tools' set-up "
        "and writing their data at exit are included.",
        "- Source build: Debian's source package built with Debian's flags (dpkg-buildflags, hardening=+all), "
        "`make -C programs zstd-release`; the gcc rows are the same build with `-finstrument-functions` and "
        "`bench/entry-count/count_hooks.c` or `bench/timing/timing_hooks.c` linked in. Debian's binary: "
        "`/usr/bin/zstd` of the package (stripped; lopi finds its functions in `.eh_frame`).",
        f"- Runs: configurations of one workload interleaved round-robin, order rotated each round, one unrecorded "
        f"warm-up round, n={n} recorded runs each.",
        "- calls: lopi = sum of `calls` in `lopi report DATA --format json`; uftrace = sum of `Calls` in `uftrace "
        "report` of the first run; gcc = the hook's count (source-level entries, inlined functions included, so "
        "far more than binary-level calls; count_hooks.c's counter is not atomic, and zstd runs several threads). "
        "Overhead ns/call = (median − uninstrumented median) / calls: zstd makes few calls per byte, so this "
        "figure is dominated by run-to-run noise where the note says so.",
        "- output: every run's OUT hashed (sha256): decompressed = the corpus, compressed = the uninstrumented "
        "build's output.",
        "",
        "## Results",
        "",
        h.markdown_table(header, rows),
        "",
    ]
    h.write_results(a.out, md, "zstd", {"n": n, "quick": a.quick, "size_mb": size_mb, "seed": a.seed,
                                        "corpus_sha256": corpus_sha, "lopi": lopi_info}, all_res, machine, entries,
                    a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
