#!/usr/bin/env python3
"""Find which probed function(s) make a rewritten program misbehave.

    tests/real/bisect-functions.py [--lopi LOPI] [--name NAME] PROG -- CHECK_CMD...

PROG is rewritten with `lopi rewrite PROG -o OUT --functions F1 --functions F2 ...`
for subsets of its probed functions (from `lopi info --format json`).  OUT is
a file named NAME (default: PROG's own name) in a scratch directory, so a
library keeps its soname.  CHECK_CMD runs with $LOPI_BISECT_BIN set to OUT
(and $LOPI_BISECT_DIR to its directory, for LD_LIBRARY_PATH) and must exit 0
when the program behaves like the original and non-zero when it does not.

It first checks that the whole set fails, then narrows it down by halving
(ddmin-style: when neither half fails alone, it tries removing chunks), and
prints the minimal failing set with each function's address and size.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--lopi", default=os.path.join(os.path.dirname(__file__), "../../target/release/lopi"))
ap.add_argument("--name")
ap.add_argument("prog")
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
if not cmd:
    sys.exit("need a CHECK_CMD after --")

info = json.loads(subprocess.check_output([a.lopi, "info", a.prog, "--format", "json"]))
funcs = [f for f in info["functions"] if f.get("status") == "probed"]
by_name = {}
for f in funcs:
    by_name.setdefault(f["name"], []).append(f)
names = sorted(by_name)
print(f"{len(names)} probed function names in {a.prog}", flush=True)

work = tempfile.mkdtemp(prefix="lopi-bisect-")
out = os.path.join(work, a.name or os.path.basename(a.prog))
runs = 0


def glob_escape(n):
    return "".join("[" + ch + "]" if ch in "*?[]" else ch for ch in n)


def fails(subset):
    global runs
    runs += 1
    if os.path.exists(out):
        os.remove(out)
    args = [a.lopi, "rewrite", a.prog, "-o", out]
    for n in subset:
        args += ["--functions", glob_escape(n)]
    if not subset:  # no --functions at all would mean every function
        args += ["--functions", "lopi-bisect-matches-no-function"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"lopi rewrite failed: {r.stderr}")
    env = dict(os.environ, LOPI_BISECT_BIN=out, LOPI_BISECT_DIR=work)
    env.pop("LOPI_OUTPUT", None)
    rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    print(f"  try {runs:3d}: {len(subset):5d} functions -> {'FAIL' if rc else 'ok'}", flush=True)
    return rc != 0


if not fails(names):
    sys.exit("the check passes with every function probed: nothing to bisect")
if fails([]):
    sys.exit("the check fails even with no function probed: not a per-function problem")

# ddmin
cur = names
n = 2
while len(cur) >= 2:
    size = (len(cur) + n - 1) // n
    chunks = [cur[i:i + size] for i in range(0, len(cur), size)]
    reduced = False
    for c in chunks:
        if fails(c):
            cur, n, reduced = c, 2, True
            break
    if not reduced:
        for i in range(len(chunks)):
            comp = [x for j, ch in enumerate(chunks) if j != i for x in ch]
            if fails(comp):
                cur, n, reduced = comp, max(n - 1, 2), True
                break
    if not reduced:
        if n >= len(cur):
            break
        n = min(len(cur), n * 2)

print(f"\nminimal failing set ({len(cur)} functions, {runs} rewrites):")
for name in cur:
    for f in by_name[name]:
        print(f"  {name} addr={f['addr']} size={f.get('size')} tactic={f.get('tactic')} source={f.get('source')}")
shutil.rmtree(work, ignore_errors=True)
