#!/usr/bin/env python3
"""How well `lopi coverage` agrees with gcov, line by line, on real programs, and why they disagree.

Each program is built twice from one source with one set of flags, plain and with `--coverage`, and both
run the same inputs: lopi (`lopi rewrite --probe P` of the plain build, `lopi coverage DATA --format json`:
covered/missed) against gcov (`gcov -t -j` of the .gcda: run/not run). Per program and probe it prints the
lines both report, the share where they agree, the lines only one reports, and each disagreement in a
category with a few examples (all of them, with their line-table rows and blocks, in --json). lopi credits a
line to a block when one of the line's is_stmt rows in the DWARF line table has its address in the block:
  gcov contradicts itself   gcov's own graph (`gcov-dump -l`) has the line in a block that ran (an inlined
                            copy's; gcov recounts a line that ends a block from the arcs into just the
                            blocks it ends, dropping copies where it is mid-block), or in a fully run function
  shared code (is_stmt)     an is_stmt row of the line is in a ran block: code shared by lines (tail merging,
                            cross-jumping, a join point's zero-length rows) carries this one
  non-statement rows only   ran blocks hold the line only in is_stmt=false rows: an instruction of it
                            scheduled, hoisted, if-converted or merged into code run for another line
  no code on executed path  no row of the line in any ran block: what ran for it carries other lines
Agreement is also given against gcov with its self-contradictions counted as run.

  bench/coverage/gcov_agreement.py [--program speedtest1|zstd|all] [--probe coverage,block] [--json OUT]

speedtest1: fetch_sqlite.sh's amalgamation, W2 flags (-O2 -g -DSQLITE_THREADSAFE=0; harness.py's cached
builds), `speedtest1 --memdb --size 40`. zstd: fetch_zstd.sh's Debian source, Debian's flags (bench/zstd's),
`make -C programs zstd-release` in trees kept under work-real/ (gcov needs the .gcno), `zstd -q -T1 -3 -c`
of bench/locks's 8 MiB corpus, then `zstd -q -d -c` of that; or (--zstd-battery) tests/real/zstd-battery.sh. Needs gcc, gcov, gcov-dump, make, lopi.
"""
from __future__ import annotations

import argparse, bisect, collections, hashlib, json, linecache, os, shutil, struct, subprocess, sys
from pathlib import Path

sys.dont_write_bytecode = True
REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bench" / p) for p in ("lib", "zstd", "locks")]
import harness as h  # noqa: E402
import zstd_bench  # noqa: E402
from locks_bench import make_corpus  # noqa: E402

WORK = REPO / "work-real" / "bench-build" / "gcov-agreement"
CATS = ["gcov contradicts itself", "shared code (is_stmt)", "non-statement rows only", "no code on executed path"]
sh = lambda *argv: subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=True).stdout


def uleb(b: bytes, i: int, signed: bool = False) -> tuple[int, int]:
    r = s = 0
    while True:
        x = b[i]; i += 1; r |= (x & 0x7f) << s; s += 7
        if x < 0x80: return (r - (1 << s) if signed and x & 0x40 else r), i


def line_table(path: Path, cwd: str) -> list[tuple[list, int]]:
    """DWARF 5 .debug_line of an ELF file: per sequence ([(addr, file, line, is_stmt)], end), table order."""
    data = path.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28); shnum, shstr = struct.unpack_from("<HH", data, 0x3c)
    hdrs = [struct.unpack_from("<IIQQQQ", data, shoff + 64 * i) for i in range(shnum)]
    name = lambda n: data[hdrs[shstr][4] + n:data.index(b"\0", hdrs[shstr][4] + n)].decode()
    sec = {name(n): data[o:o + sz] for n, t, _, _, o, sz in hdrs if t != 8}
    b, strs = sec.get(".debug_line", b""), {0x1f: sec.get(".debug_line_str", b""), 0x0e: sec.get(".debug_str", b"")}
    cstr = lambda s, i: s[i:s.index(b"\0", i)].decode(errors="replace")
    def form(f, i):  # the attribute forms of line table headers
        if f == 0x08: return cstr(b, i), b.index(b"\0", i) + 1
        if f in strs: return cstr(strs[f], struct.unpack_from("<I", b, i)[0]), i + 4
        if f == 0x0f: return uleb(b, i)
        n = {0x0b: 1, 0x05: 2, 0x06: 4, 0x07: 8, 0x1e: 16}[f]; return int.from_bytes(b[i:i + n], "little"), i + n
    def entries(i):  # a directory or file table: its format, then its entries
        fmt, n, out = [], b[i], []; i += 1
        for _ in range(2 * n): x, i = uleb(b, i); fmt.append(x)
        count, i = uleb(b, i)
        for _ in range(count):
            out.append({})
            for c, f in zip(fmt[::2], fmt[1::2]): out[-1][c], i = form(f, i)
        return out, i
    seqs, off = [], 0
    while off < len(b):
        unit_len, ver = struct.unpack_from("<IH", b, off); end = off + 4 + unit_len
        if ver < 5: raise SystemExit(f"{path}: a DWARF {ver} line table; this reads DWARF 5 (gcc 11+'s default)")
        hlen, = struct.unpack_from("<I", b, off + 8); prog = off + 12 + hlen
        minl, _, dstmt, lbase, lrange, obase = struct.unpack_from("<BBBbBB", b, off + 12); i = off + 18
        oplen = b[i:i + obase - 1]; dirs, i = entries(i + obase - 1); fents, i = entries(i)
        dirs = [os.path.join(cwd, d[1]) for d in dirs]; files = [os.path.join(dirs[f.get(2, 0)], f[1]) for f in fents]
        i, rows, (a, fi, ln, st) = prog, [], (0, 1, 1, dstmt)
        while i < end:
            op = b[i]; i += 1
            if op >= obase:
                adj = op - obase; a += adj // lrange * minl; ln += lbase + adj % lrange
                rows.append((a, files[fi], ln, bool(st)))
            elif op == 0:
                n, i = uleb(b, i); sub, nxt = b[i], i + n
                if sub == 1:
                    if rows: seqs.append((rows, a))
                    rows, a, fi, ln, st = [], 0, 1, 1, dstmt
                elif sub == 2: a, = struct.unpack_from("<Q", b, i + 1)
                i = nxt
            elif op == 1: rows.append((a, files[fi], ln, bool(st)))
            elif op == 2: n, i = uleb(b, i); a += n * minl
            elif op == 3: n, i = uleb(b, i, True); ln += n
            elif op == 4: fi, i = uleb(b, i)
            elif op == 6: st = not st
            elif op == 8: a += (255 - obase) // lrange * minl
            elif op == 9: a += struct.unpack_from("<H", b, i)[0]; i += 2
            else:
                for _ in range(oplen[op - 1]): _, i = uleb(b, i)
        off = end
    return seqs


def lopi_blocks(data: Path) -> list[tuple]:
    """[(addr, end, function, ran: True/False/None, count)] of a data file's records (lopi-rt-abi's layout),
    decided as lopi-trace's ModuleBlocks::covered does: counted, implied by a ran block, ruled out, unknown."""
    b, off, by = data.read_bytes(), 4096, {}
    while off + 88 <= len(b):
        if b[off:off + 8] != b"LOPIREC2":
            off += 4096; continue
        rlen, _, _, _, mo, ml, co, _, cc, po, ncpu, stride = struct.unpack_from("<QIIQQQQQQQII", b, off + 8)
        meta = json.loads(b[off + mo:off + mo + ml]); counts = list(struct.unpack_from(f"<{cc}Q", b, off + co))
        for c in range(ncpu):
            counts = [x + y for x, y in zip(counts, struct.unpack_from(f"<{cc}Q", b, off + po + c * stride))]
        # Its probes are in counter order (ModuleMeta version 3); an instruction's point is no block.
        for blk, n in zip(meta["probes"], counts):
            if blk["point"] == "block" and blk["action"] != "probe":
                by[blk["addr"]] = (blk, by.get(blk["addr"], (0, 0))[1] + n)
        for blk in meta["unprobed_blocks"]:
            by.setdefault(blk["addr"], (blk, None))
        off += rlen
    ran = {a: n > 0 for a, (_, n) in by.items() if n is not None}
    def decide(blk, n):
        if n is not None: return n > 0
        if any(ran.get(x) is True for x in blk["implied_by"]): return True
        return False if any(ran.get(x) is False for x in blk["needs"]) or blk["exactly"] else None
    return [(a, blk["end"], blk["function"], decide(blk, n), n) for a, (blk, n) in sorted(by.items())]


def norm(path: str, cwd: str, root: str) -> str:  # a source path, relative to its tree's root when in it
    p = os.path.normpath(os.path.join(cwd, path))
    return os.path.relpath(p, root) if p.startswith(root + "/") else p


def gcov_lines(prefix: Path, root: str) -> tuple[dict, set]:
    """({(file, line): ran} of the .gcda files under PREFIX (each gets its .gcno copied beside it), the
    lines gcov says did not run although its own block graph says they did)."""
    verdict, blocks_of, full, ranges = {}, collections.defaultdict(set), set(), collections.defaultdict(list)
    for gcda in sorted(prefix.rglob("*.gcda")):
        gcno = gcda.with_suffix(".gcno")
        shutil.copy2("/" + str(gcno.relative_to(prefix)), gcno)
        doc = json.loads(sh("gcov", "-t", "-j", gcda))
        cwd = doc["current_working_directory"]
        for f in doc["files"]:
            path, fns = norm(f["file"], cwd, root), f["functions"]
            for ln in f["lines"]:
                verdict[path, ln["line_number"]] = verdict.get((path, ln["line_number"]), False) or ln["count"] > 0
            full.update((gcno, f["name"]) for f in fns if f["execution_count"] and f["blocks_executed"] == f["blocks"])
            ranges[path] += [(fn["start_line"], fn["end_line"], fn["name"]) for fn in fns]
        fn = None
        for line in sh("gcov-dump", "-l", gcno).splitlines():
            if "FUNCTION ident=" in line:
                fn = line.split("`")[1].split("'")[0]
            elif "block " in line and ":`" in line:  # block N:`file':l1, l2, ...
                blk, rest = line.split("block ", 1)[1].split(":`", 1); path, _, nums = rest.partition("':")
                for n in filter(None, nums.split(",")):
                    blocks_of[(norm(path, cwd, root), int(n))].add((gcno, fn, int(blk)))
    members = collections.defaultdict(set)
    for k, blk in ((k, blk) for k, bs in blocks_of.items() for blk in bs): members[blk].add(k)
    def ran(k, blk, k_blocks):  # BLK, holding K, ran: its function ran every block; or BLK is an inlined
        if (blk[0], blk[1]) in full:  # copy's (not of K's own function) and holds a line gcov says ran all
            return True  # of whose blocks hold K
        own = any(lo <= k[1] <= hi and name == blk[1] for lo, hi, name in ranges[k[0]])
        return not own and any(verdict.get(m) and blocks_of[m] <= k_blocks for m in members[blk])
    return verdict, {k for k, bs in blocks_of.items() if verdict.get(k) is False and any(ran(k, b, bs) for b in bs)}


def rows_of(seqs: list, p: dict, blocks: list) -> dict:
    """{(file, line): [(addr, is_stmt, ran, block)]}, rows in blocks that ran first."""
    starts, out = [blk[0] for blk in blocks], collections.defaultdict(list)
    for rows, _ in seqs:
        for a, f, ln, st in rows:
            i = bisect.bisect_right(starts, a) - 1
            blk = blocks[i] if i >= 0 and blocks[i][1] > a else None
            out[(norm(f, p["cwd"], p["root"]), ln)].append((a, st, blk and blk[3], blk))
    for rs in out.values(): rs.sort(key=lambda r: (r[2] is not True, not r[1], r[0]))
    return out


def classify(k: tuple, lopi_ran: bool, rows: list, gcov_wrong: set) -> str:
    if lopi_ran:
        return CATS[0] if k in gcov_wrong else CATS[1]
    return CATS[2] if any(r[2] for r in rows) else CATS[3]


def compare(lopi: dict, gcov: dict) -> dict:
    both = set(lopi) & set(gcov); agree = sum(lopi[k] == gcov[k] for k in both)
    return {"both": len(both), "agree_pct": round(100 * agree / max(1, len(both)), 2), "disagree": len(both) - agree,
            "lopi_only": len(set(lopi) - set(gcov)), "gcov_only": len(set(gcov) - set(lopi))}


def build_zstd(src: Path, version: str, tag: str, extra: list[str]) -> Path:
    """A kept copy of zstd's tree with programs/zstd made with Debian's flags (bench/zstd's) + EXTRA."""
    flags = zstd_bench.deb_buildflags(src)
    key = hashlib.sha256("\0".join([h.gcc_version(), version, *flags.values(), *extra]).encode()).hexdigest()[:10]
    tree = WORK / f"zstd-{tag}-{key}"
    if not (tree / "programs" / "zstd").exists():
        shutil.rmtree(tree, ignore_errors=True); shutil.copytree(src, tree, symlinks=True)
        h.log(f"build: zstd {tag} in {tree}")
        subprocess.run(["make", f"-j{os.cpu_count() or 2}", "-C", "programs", "zstd-release"], cwd=tree, check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, CFLAGS=" ".join([flags["CFLAGS"], *extra]),
                                                           CPPFLAGS=flags["CPPFLAGS"], LDFLAGS=flags["LDFLAGS"]))
    return tree


def programs(a) -> dict:
    """{name: the plain and gcov executables, source roots, DWARF cwd, runs [(argv tail, stdout to)]}."""
    out = {}
    if a.program in ("speedtest1", "all"):
        d = a.sqlite_dir or Path(sh("bash", REPO / "bench/lib/fetch_sqlite.sh").strip())
        out["speedtest1"] = dict(plain=h.build(*h.w2_job("speedtest1", d)), root=str(d), groot=str(d), cwd=str(d),
                                 gcov=h.build(*h.w2_job("speedtest1-gcov", d, flags=("--coverage",))), src=d,
                                 runs=[(["{prog}", "--memdb", "--size", str(a.size)], None)])
    if a.program in ("zstd", "all"):
        env = zstd_bench.read_env(a.zstd_paths or Path(sh("bash", REPO / "bench/lib/fetch_zstd.sh").strip()))
        src, ver = Path(env["ZSTD_SRC"]), env["ZSTD_SRC_VERSION"]
        tp, tg = build_zstd(src, ver, "plain", []), build_zstd(src, ver, "gcov", ["--coverage"])
        corpus = WORK / f"corpus-{a.corpus_mib}M.dat"
        if not corpus.exists(): make_corpus(corpus, a.corpus_mib)
        runs = [(["{prog}", "-q", "-T1", "-3", "-c", str(corpus)], "{out}"), (["{prog}", "-q", "-d", "-c", "{out}"], None)]
        if a.zstd_battery:
            subprocess.run(["make", "-C", "tests", "datagen"], cwd=tp, check=True, stdout=subprocess.DEVNULL)
            runs = [(["bash", str(REPO / "tests/real/zstd-battery.sh"), "{prog}", str(tp / "tests/datagen"),
                      str(WORK / "battery")], None)]
        out["zstd"] = dict(plain=tp / "programs/zstd", gcov=tg / "programs/zstd", root=str(tp), groot=str(tg),
                           cwd=str(tp / "programs"), src=tp, runs=runs)
    return out


def run(prog: Path, runs: list, env: dict, out: Path) -> None:  # each run: argv ({prog}, {out}), stdout to
    for tail, to in runs:
        with open(str(to).format(out=out) if to else os.devnull, "wb") as f:
            subprocess.run([t.format(out=out, prog=prog) for t in tail], env=dict(os.environ, **env), stdout=f, check=True)


def analyse(name: str, p: dict, lopi: Path, probe: str, gcov: dict, gcov_wrong: set, examples: int) -> dict:
    """Rewrite and run the plain build, compare lopi's lines with gcov's, classify the differences."""
    rewritten, data, files = WORK / f"{name}.{probe}", WORK / f"{name}.{probe}.lopi-data", {k[0] for k in gcov}
    sh(lopi, "rewrite", p["plain"], "-o", rewritten, "--probe", probe)
    data.unlink(missing_ok=True)
    run(rewritten, p["runs"], {"LOPI_OUTPUT": str(data)}, WORK / f"{name}.{probe}.out")
    now = {}
    for f in json.loads(sh(lopi, "coverage", data, "--format", "json"))["files"]:
        for ln in f["covered_lines"] + f["missed_lines"]:
            k = (norm(f["path"], p["cwd"], p["root"]), ln)
            if k[0] in files: now[k] = now.get(k, False) or ln in f["covered_lines"]
    blocks, seqs = lopi_blocks(data), line_table(Path(p["plain"]), p["cwd"])
    rows = rows_of(seqs, p, blocks)
    corrected = {k: v or k in gcov_wrong for k, v in gcov.items()}
    summary = {"lopi": compare(now, gcov), "lopi vs gcov corrected": compare(now, corrected)}
    print(f"\n== {name}, --probe {probe}: {sum(b[3] is None for b in blocks)} of {len(blocks)} blocks undecided")
    for what, s in summary.items():
        print(f"  {what:24s} both {s['both']:6d}  agree {s['agree_pct']:6.2f}%  disagree {s['disagree']:5d}  "
              f"lopi-only {s['lopi_only']:6d}  gcov-only {s['gcov_only']:6d}")
    by_cat = collections.defaultdict(list)
    for k in sorted(k for k in set(now) & set(gcov) if now[k] != gcov[k]):
        by_cat[classify(k, now[k], rows[k], gcov_wrong)].append({
            "file": k[0], "line": k[1], "source": linecache.getline(os.path.join(p["src"], k[0]), k[1]).strip(),
            "lopi": "covered" if now[k] else "missed", "gcov": "run" if gcov[k] else "not run",
            "rows": [{"addr": hex(a), "is_stmt": st, "block_ran": ran, "block": blk and hex(blk[0]),
                      "function": blk and blk[2], "count": blk and blk[4]} for a, st, ran, blk in rows[k][:8]]})
    for cat in (c for c in CATS if c in by_cat):
        got = by_cat[cat]
        print(f"  [{len(got):4d}] {cat}: lopi {got[0]['lopi']}, gcov {got[0]['gcov']}")
        for d in got[:examples]:
            ev = "; ".join(f"{r['addr']} {'stmt' if r['is_stmt'] else 'non-stmt'} in {r['function']} block {r['block']} "
                           f"ran={r['block_ran']}" for r in d["rows"][:2] if r["block"])
            print(f"      {d['file']}:{d['line']}  {d['source'][:60]!r}  [{ev}]")
    return {"summary": summary, "categories": {c: len(v) for c, v in by_cat.items()},
            "lines": [dict(d, category=c) for c, v in by_cat.items() for d in v]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", choices=("speedtest1", "zstd", "all"), default="all")
    ap.add_argument("--probe", default="coverage,block", help="lopi probe modes, comma-separated (default both)")
    ap.add_argument("--lopi", type=Path, default=REPO / "target" / "release" / "lopi")
    ap.add_argument("--sqlite-dir", type=Path, help="fetch_sqlite.sh's directory (default: run it)")
    ap.add_argument("--zstd-paths", type=Path, help="fetch_zstd.sh's env file (default: run it)")
    ap.add_argument("--size", type=int, default=40, help="speedtest1 --size")
    ap.add_argument("--corpus-mib", type=int, default=8, help="zstd's corpus, MiB")
    ap.add_argument("--zstd-battery", action="store_true",
                    help="run tests/real/zstd-battery.sh (levels, dictionaries, formats, error cases) instead")
    ap.add_argument("--examples", type=int, default=3, help="examples printed per category")
    ap.add_argument("--json", type=Path, help="write the summaries and every disagreeing line here")
    a = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    result = {}
    for name, p in programs(a).items():
        prefix = WORK / f"{name}.gcda"
        shutil.rmtree(prefix, ignore_errors=True)
        run(p["gcov"], p["runs"], {"GCOV_PREFIX": str(prefix), "GCOV_PREFIX_STRIP": "0"}, WORK / f"{name}.gcov.out")
        gcov, wrong = gcov_lines(prefix, p["groot"])
        print(f"\n# {name}: gcov reports {len(gcov)} lines ({sum(gcov.values())} run); its own block graph says "
              f"{len(wrong)} of its 'not run' lines ran")
        for probe in a.probe.split(","):
            result[f"{name} --probe {probe}"] = analyse(name, p, a.lopi, probe, gcov, wrong, a.examples)
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
