"""Oracles for the corpus: counts taken without lopi, on the program's native run.

- system calls (`syscall` probes, `lopi run`): gdb stops the native program at its entry point,
  where `lopi run` puts its probes in, and from there catches every system call by name (all
  threads). Calls that vary from run to run in a threaded program (futex, sched_yield, madvise)
  are left out of the comparison.
- calls (`entry` probes, rewritten program and libraries, which count from the first
  instruction): perf uprobes at the entries of a sample of functions of the program and of libc
  (the most called ones and some others lopi saw called), counted over the native run.
- blocks (`block` probes, rewritten): perf uprobes at the first instructions of a sample of the
  program's blocks that lopi saw run and that did not.
"""
import json
import os
import random
import select
import shlex
import struct
import socket
import subprocess
import time

NONDETERMINISTIC = {"futex", "sched_yield", "madvise", "clock_nanosleep", "nanosleep"}

GDB_SCRIPT = r"""
import gdb, json, re
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set print thread-events off")
gdb.execute("starti" + STDIN, to_string=True)
auxv = gdb.execute("info auxv", to_string=True)
entry = re.search(r"AT_ENTRY\s.*?(0x[0-9a-f]+)", auxv).group(1)
gdb.execute("tbreak *" + entry, to_string=True)
gdb.execute("continue", to_string=True)
gdb.execute("catch syscall", to_string=True)
counts = {}
while True:
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
    if not gdb.selected_inferior().pid:
        break
    try:
        rax = int(gdb.parse_and_eval("$rax")) & (2**64 - 1)
        nr = int(gdb.parse_and_eval("$orig_rax")) & (2**64 - 1)
    except gdb.error:
        break
    # At a system call's entry the kernel has put -ENOSYS in rax; at its return, the result.
    if rax == 2**64 - 38:
        counts[nr] = counts.get(nr, 0) + 1
open(OUT, "w").write(json.dumps(counts))
"""


def wait_for_port(port, seconds, proc):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def wait_for_line(stream, needles, seconds):
    """Reads `stream` (unbuffered, by its descriptor) until it holds one of `needles`: (found,
    what was read)."""
    seen = b""
    deadline = time.monotonic() + seconds
    fd = stream.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return False, seen
        seen += chunk
        if any(n in seen for n in needles):
            return True, seen
    return False, seen


def report(h, d, *args):
    p = subprocess.run([h.lopi, "report", str(d / "data.lopi"), "--format", "json", *args], capture_output=True,
                       text=True)
    return json.loads(p.stdout) if p.returncode == 0 else None


def native_argv(program, exe):
    return [exe] + program.argv[1:]


def syscalls(h, program, exe, d):
    script = d / "oracle_gdb.py"
    out = d / "oracle_syscalls.json"
    # `starti ARGS` sets the program's arguments (through the shell, which redirects stdin).
    args = " " + " ".join(shlex.quote(a) for a in program.argv[1:])
    if program.stdin:
        args += " < " + shlex.quote(str(d / program.stdin))
    script.write_text(f"STDIN = {args!r}\nOUT = {str(out)!r}\n" + GDB_SCRIPT)
    p = subprocess.run(["gdb", "-q", "-batch", "-nx", "-x", str(script), exe], cwd=d, capture_output=True,
                       timeout=600)
    if not out.exists():
        return {"equal": False, "summary": "gdb failed", "detail": p.stderr.decode(errors="replace")[-200:]}
    want = {int(nr): n for nr, n in json.loads(out.read_text()).items()}
    rep = report(h, d, "--syscalls")
    got, names = {}, {}
    for s in (rep or {}).get("syscalls", []):
        got[s["nr"]] = got.get(s["nr"], 0) + s["calls"]
        names[s["nr"]] = s["name"]
    skip = NONDETERMINISTIC if "threads" in program.kind else set()
    nrs = sorted(nr for nr in set(want) | set(got) if names.get(nr) not in skip)
    diffs = [f"{names.get(nr, nr)} {got.get(nr, 0)} vs {want.get(nr, 0)}" for nr in nrs if got.get(nr, 0) != want.get(nr, 0)]
    total = sum(want.get(nr, 0) for nr in nrs)
    return {"equal": not diffs, "summary": f"{len(nrs)} calls, {total} made" + (f", {len(diffs)} differ" if diffs else ", equal"),
            "detail": "system calls (lopi vs gdb): " + ", ".join(diffs[:8])}


def first_byte(module, addr, cache={}):
    """The byte at file address `addr` of the ELF file `module` (None outside its segments)."""
    if module not in cache:
        with open(module, "rb") as f:
            data = f.read()
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        loads = []
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
            if p_type == 1:
                loads.append((p_vaddr, p_filesz, p_offset))
        cache[module] = (data, loads)
    data, loads = cache[module]
    for vaddr, size, offset in loads:
        if vaddr <= addr < vaddr + size:
            return data[offset + addr - vaddr]
    return None


def uprobe_safe(module, addr):
    """The kernel single-steps a uprobe's instruction out of line, and corrupts the program
    when that instruction is VEX- or EVEX-encoded (seen: libc's __strchr_evex, whose first
    instruction is `vpbroadcastb %esi,%ymm17`, then made sed fail): such points are not used."""
    return first_byte(module, addr) not in (None, 0x62, 0xC4, 0xC5)


def uprobe_counts(program, exe, d, points):
    """Executions of each (module, address) over a native run, by perf uprobes."""
    points = [pt for pt in points if uprobe_safe(*pt)]
    subprocess.run(["perf", "probe", "-q", "-d", "lopicorpus:*"], capture_output=True)
    names = {}
    try:
        for i, (module, addr) in enumerate(points):
            p = subprocess.run(["perf", "probe", "-q", "-x", module, "-a", f"lopicorpus:p{i}={addr:#x}"],
                               capture_output=True, text=True)
            if p.returncode == 0:
                names[f"p{i}"] = (module, addr)
        if not names:
            return {}
        stdin = open(d / program.stdin, "rb") if program.stdin else subprocess.DEVNULL
        p = subprocess.run(["perf", "stat", "-x", ",", "-e", "lopicorpus:*", "--", *native_argv(program, exe)],
                           cwd=d, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=600)
        counts = {}
        for line in p.stderr.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[2].startswith("lopicorpus:"):
                key = names.get(parts[2].split(":")[1])
                if key and parts[0].strip().isdigit():
                    counts[key] = int(parts[0])
        return counts
    finally:
        subprocess.run(["perf", "probe", "-q", "-d", "lopicorpus:*"], capture_output=True)


def originals(rep, exe, libs, d):
    """The report with each function's module named by its original file (a rewritten copy in
    d/rw is run in rewrite mode; the oracle runs the original)."""
    by_name = {os.path.basename(exe): exe, **{n: p for n, p in libs}}
    rw = str(d / "rw") + "/"
    for f in rep["functions"]:
        if f["module"].startswith(rw):
            f["module"] = by_name.get(f["module"][len(rw):], f["module"])
    rep["modules"] = [by_name.get(m[len(rw):], m) if m.startswith(rw) else m for m in rep["modules"]]
    return rep


def calls(h, program, exe, libs, d):
    rep = report(h, d)
    if not rep:
        return {"equal": False, "summary": "no report", "detail": "calls: lopi report failed"}
    rep = originals(rep, exe, libs, d)
    info = {}
    for module in {f["module"] for f in rep["functions"]}:
        p = subprocess.run([h.lopi, "info", module, "--format", "json"], capture_output=True, text=True)
        if p.returncode == 0:
            for f in json.loads(p.stdout)["functions"]:
                info[(module, int(f["addr"], 16))] = f
    rng = random.Random(7)
    sample = []
    for module in (exe, next((m for m in rep["modules"] if "/libc.so" in m), None)):
        fs = [f for f in rep["functions"] if f["module"] == module and f["calls"] > 0
              and info.get((module, int(f["addr"], 16)), {}).get("tactic") not in (None, "whole")]
        fs.sort(key=lambda f: -f["calls"])
        sample += fs[:12] + rng.sample(fs[12:], min(8, len(fs[12:])))
    points = [(f["module"], int(f["addr"], 16)) for f in sample]
    got = uprobe_counts(program, exe, d, points)
    diffs = [f"{f['name']} {f['calls']} vs {got[(f['module'], int(f['addr'], 16))]}" for f in sample
             if (f["module"], int(f["addr"], 16)) in got and got[(f["module"], int(f["addr"], 16))] != f["calls"]]
    return {"equal": not diffs, "summary": f"{len(got)} functions" + (f", {len(diffs)} differ" if diffs else ", equal"),
            "detail": "calls (lopi vs perf uprobes): " + ", ".join(diffs[:8])}


def blocks(h, program, exe, libs, d):
    p = subprocess.run([h.lopi, "coverage", str(d / "data.lopi"), "--format", "json"], capture_output=True, text=True)
    if p.returncode != 0:
        return {"equal": False, "summary": "no report", "detail": "blocks: lopi coverage failed"}
    rep = originals({"functions": json.loads(p.stdout)["functions"], "modules": []}, exe, libs, d)
    fs = [f for f in rep["functions"] if f["module"] == exe and f["covered"] > 0]
    fs.sort(key=lambda f: -f["covered"])
    want = []
    for f in fs[:6]:
        p = subprocess.run([h.lopi, "report", str(d / "data.lopi"), "--blocks", f["name"], "--format", "json"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            continue
        for part in json.loads(p.stdout)[:1]:
            for b in part["blocks"]:
                if b.get("no_probe") is None:
                    want.append((f["name"], b["address"], b["count"]))
    rng = random.Random(11)
    want = rng.sample(want, min(40, len(want)))
    got = uprobe_counts(program, exe, d, [(exe, a) for _, a, _ in want])
    diffs = [f"{n}+{a:#x} {c} vs {got[(exe, a)]}" for n, a, c in want if (exe, a) in got and got[(exe, a)] != c]
    return {"equal": not diffs, "summary": f"{len(got)} blocks" + (f", {len(diffs)} differ" if diffs else ", equal"),
            "detail": "block counts (lopi vs perf uprobes): " + ", ".join(diffs[:8])}


def check(h, program, kind, mode, exe, libs, d):
    """The oracles that apply to this run, each {equal, summary, detail}."""
    if program.client is not None:
        return {}
    out = {}
    try:
        if kind == "syscall" and mode == "run":
            out["syscalls"] = syscalls(h, program, exe, d)
        elif kind == "entry" and mode == "rewrite":
            out["calls"] = calls(h, program, exe, libs, d)
        elif kind == "block" and mode == "rewrite":
            out["blocks"] = blocks(h, program, exe, libs, d)
    except (subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        out["error"] = {"equal": False, "summary": "oracle failed", "detail": f"oracle failed: {e!r}"}
    return out

