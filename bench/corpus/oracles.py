"""Oracles for the corpus: counts lopi's probes must equal.

- system calls (`syscall` probes, `lopi run`): gdb stops the native program where `lopi run`
  puts its probes in (ld.so's rendezvous once every library is loaded, before the libraries'
  constructors; a program without ld.so at its entry point), and from there catches every system call (all threads),
  by number, for programs without threads (whose calls depend on how their threads meet);
  futex, sched_yield, madvise and sleeps, which vary from run to run, are left out.
- calls (`entry` probes, the program and its libraries rewritten, which count from their
  first instruction): the rewritten program runs once more under perf stat with uprobes at the
  entries of a sample of its functions and libc's (the most called and some others), recording
  into a second data file: perf's counts and lopi's are of the same run.
- blocks (`block` probes, rewritten): the same with uprobes at the first instructions of a
  sample of the program's blocks.
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
# The program's environment as lopi run gives it: without gdb's LINES and COLUMNS.
gdb.execute("unset environment LINES")
gdb.execute("unset environment COLUMNS")
gdb.execute("starti" + ARGS, to_string=True)
auxv = gdb.execute("info auxv", to_string=True)
entry = re.search(r"AT_ENTRY\s.*?(0x[0-9a-f]+)", auxv).group(1)
# Where lopi run puts its probes in: ld.so's rendezvous once every library is loaded
# (_dl_debug_state called with r_debug.r_state RT_CONSISTENT, after RT_ADD), before any
# library constructor; a program without ld.so at its entry point.
try:
    rendezvous = gdb.execute("break _dl_debug_state", to_string=True)
except gdb.error:
    rendezvous = None
if rendezvous:
    while True:
        gdb.execute("continue", to_string=True)
        if int(gdb.parse_and_eval("*(int *)((char *)&_r_debug + 24)")) == 0:
            break
    gdb.execute("delete", to_string=True)
else:
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


# System calls a program waits for its input in: poll, select, ppoll, pselect6 (xz -T2 polls),
# epoll_wait, epoll_pwait, epoll_pwait2 (Go's runtime waits for a pipe in its poller).
WAITS = {"7", "23", "270", "271", "232", "281", "441"}


def wait_for_stdin_read(pid, seconds):
    """Waits until a thread of process `pid` is blocked waiting for its standard input
    (`read(0, ...)`, or polling, from /proc/PID/task/TID/syscall): its start-up, libraries
    included, is over."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        # Any thread (zstd -T2 reads its input in a worker while the main thread waits).
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return False
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                    call = f.read().split()
            except OSError:
                continue
            if call[:2] == ["0", "0x0"] or call[:1] and call[0] in WAITS:
                return True
        time.sleep(0.01)
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


def report_of(h, data, *args):
    p = subprocess.run([h.lopi, "report", str(data), "--format", "json", *args], capture_output=True, text=True)
    return json.loads(p.stdout) if p.returncode == 0 else None


def report(h, d, *args):
    return report_of(h, d / "data.lopi", *args)


def syscalls(h, program, exe, d):
    script = d / "oracle_gdb.py"
    out = d / "oracle_syscalls.json"
    # `starti ARGS` sets the program's arguments and its input (through the shell: gdb's own
    # stdin is not the program's in batch mode).
    args = " " + " ".join(shlex.quote(a) for a in program.argv[1:])
    args += " < " + shlex.quote(str(d / program.stdin) if program.stdin else os.devnull)
    script.write_text(f"ARGS = {args!r}\nOUT = {str(out)!r}\n" + GDB_SCRIPT)
    p = subprocess.run(["gdb", "-q", "-batch", "-nx", "-x", str(script), exe], cwd=d, capture_output=True,
                       env=h.env({**program.env, "PWD": str(d)}), timeout=600)
    if not out.exists():
        return {"equal": False, "summary": "gdb failed", "detail": p.stderr.decode(errors="replace")[-200:]}
    want = {int(nr): n for nr, n in json.loads(out.read_text()).items()}
    rep = report(h, d, "--syscalls")
    got, names = {}, {}
    # The program's own process (gdb follows no child; lopi's record has its forked children).
    threads = (rep or {}).get("threads", [])
    root = min((t["pid"] for t in threads), default=0)
    for t in threads:
        for s in t["syscalls"] if t["pid"] == root else []:
            got[s["nr"]] = got.get(s["nr"], 0) + s["calls"]
            names[s["nr"]] = s["name"]
    skip = NONDETERMINISTIC | set(program.varies)
    nrs = sorted(nr for nr in set(want) | set(got) if names.get(nr) not in skip)
    diffs = [f"{names.get(nr, nr)} {got.get(nr, 0)} vs {want.get(nr, 0)}" for nr in nrs if got.get(nr, 0) != want.get(nr, 0)]
    total = sum(want.get(nr, 0) for nr in nrs)
    varies = f" ({', '.join(program.varies)} not compared: the program {program.varies_why})" if program.varies else ""
    return {"equal": not diffs, "summary": f"{len(nrs)} calls, {total} made" + (f", {len(diffs)} differ" if diffs else ", equal") + varies,
            "detail": "system calls (lopi vs gdb): " + ", ".join(diffs[:8])}


def file_offset(module, addr, cache={}):
    """Where file address `addr` of the ELF file `module` lies in the file, and the byte there
    (None outside its loaded segments)."""
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
            return offset + addr - vaddr, data[offset + addr - vaddr]
    return None


def uprobe_safe(module, addr):
    """The kernel single-steps a uprobe's instruction out of line, and corrupts the program
    when that instruction is VEX- or EVEX-encoded (seen: libc's __strchr_evex, whose first
    instruction is `vpbroadcastb %esi,%ymm17`, then made sed fail): such points are not used."""
    at = file_offset(module, addr)
    return at is not None and at[1] not in (0x62, 0xC4, 0xC5)


def uprobe_counts(program, exe, d, points):
    """Executions of each (module, address) by perf uprobes, over a run of the rewritten program
    (`d/rw`) that records into `d/oracle.lopi`: perf and lopi count the same run."""
    points = [pt for pt in points if uprobe_safe(*pt)]
    clear_uprobes()
    names = {}
    try:
        # Through tracefs, by file offset: `perf probe -x FILE ADDR` takes a non-PIE program's
        # address for an offset (its probes at python3.11's functions never fired).
        for i, (module, addr) in enumerate(points):
            if tracefs_write(f"p:lopicorpus/p{i} {module}:{file_offset(module, addr)[0]:#x}\n"):
                names[f"p{i}"] = (module, addr)
        if not names:
            return {}
        stdin = open(d / program.stdin, "rb") if program.stdin else subprocess.DEVNULL
        # Only the program loads the rewritten libraries (perf itself would record too): env
        # sets them up for it alone.
        settings = [f"LD_LIBRARY_PATH={d / 'rw'}", f"LOPI_OUTPUT={d / 'oracle.lopi'}", "LC_ALL=C.UTF-8", f"PWD={d}",
                    *(f"{k}={v}" for k, v in program.env.items())]
        rewritten = str(d / "rw" / os.path.basename(exe))
        argv = ["env", *settings, rewritten, *program.argv[1:]]
        # System-wide (-a): counts inherited by a process tree are lost when a child outlives its
        # parent (bash's pipelines in command substitutions: 928 hits of 938); only this run
        # executes the rewritten files.
        p = subprocess.run(["perf", "stat", "-a", "-x", ",", "-e", "lopicorpus:*", "--", *argv], cwd=d, stdin=stdin,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
        counts = {}
        for line in p.stderr.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[2].startswith("lopicorpus:"):
                key = names.get(parts[2].split(":")[1])
                if key and parts[0].strip().isdigit():
                    counts[key] = int(parts[0])
        return counts
    finally:
        clear_uprobes()


UPROBE_EVENTS = "/sys/kernel/tracing/uprobe_events"


def tracefs_write(line):
    """Appends one command to uprobe_events (unbuffered: tracefs takes each write whole and
    refuses the seek a buffered append makes); False when the kernel refuses it."""
    try:
        fd = os.open(UPROBE_EVENTS, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def clear_uprobes():
    """Takes out the corpus's uprobes (`lopicorpus` group), leaving anyone else's."""
    try:
        with open(UPROBE_EVENTS) as f:
            ours = [line.split()[0][2:] for line in f if line.startswith("p:lopicorpus/")]
    except OSError:
        return
    for name in ours:
        tracefs_write(f"-:{name}\n")


def calls(h, program, exe, d):
    rep = report(h, d)
    if not rep:
        return {"equal": False, "summary": "no report", "detail": "calls: lopi report failed"}
    rng = random.Random(7)
    sample = []
    rewritten = str(d / "rw" / os.path.basename(exe))
    for module in (rewritten, next((m for m in rep["modules"] if "/libc.so" in m), None)):
        fs = [f for f in rep["functions"] if f["module"] == module and f["calls"] > 0]
        fs.sort(key=lambda f: -f["calls"])
        sample += fs[:12] + rng.sample(fs[12:], min(8, len(fs[12:])))
    key = lambda f: (f["module"], int(f["addr"], 16))  # noqa: E731
    got = uprobe_counts(program, exe, d, [key(f) for f in sample])
    lopi = {key(f): f["calls"] for f in (report_of(h, d / "oracle.lopi") or {}).get("functions", [])}
    diffs = [f"{f['name']} {lopi.get(key(f), 0)} vs {got[key(f)]}" for f in sample
             if key(f) in got and got[key(f)] != lopi.get(key(f), 0)]
    return {"equal": not diffs, "summary": f"{len(got)} functions" + (f", {len(diffs)} differ" if diffs else ", equal"),
            "detail": "calls (lopi vs perf uprobes, one run): " + ", ".join(diffs[:8])}


def block_counts(h, data, functions):
    """{(function, address): executions} of the functions' probed blocks in the record `data`."""
    out = {}
    for name in functions:
        p = subprocess.run([h.lopi, "report", str(data), "--blocks", name, "--format", "json"], capture_output=True,
                           text=True)
        if p.returncode == 0:
            for part in json.loads(p.stdout)[:1]:
                for b in part["blocks"]:
                    if b.get("no_probe") is None:
                        out[(name, b["address"])] = b["count"]
    return out


def blocks(h, program, exe, d):
    p = subprocess.run([h.lopi, "coverage", str(d / "data.lopi"), "--format", "json"], capture_output=True, text=True)
    if p.returncode != 0:
        return {"equal": False, "summary": "no report", "detail": "blocks: lopi coverage failed"}
    rewritten = str(d / "rw" / os.path.basename(exe))
    # Coverage names a rewritten program by the file it was rewritten from.
    name = os.path.basename(exe)
    fs = [f for f in json.loads(p.stdout)["functions"] if os.path.basename(f["module"]) == name and f["covered"] > 0]
    fs.sort(key=lambda f: -f["covered"])
    names = [f["name"] for f in fs[:6]]
    rng = random.Random(11)
    first = block_counts(h, d / "data.lopi", names)
    sample = rng.sample(sorted(first), min(40, len(first)))
    got = uprobe_counts(program, exe, d, [(rewritten, a) for _, a in sample])
    lopi = block_counts(h, d / "oracle.lopi", names)
    diffs = [f"{n}+{a:#x} {lopi.get((n, a), 0)} vs {got[(rewritten, a)]}" for n, a in sample
             if (rewritten, a) in got and got[(rewritten, a)] != lopi.get((n, a), 0)]
    return {"equal": not diffs, "summary": f"{len(got)} blocks" + (f", {len(diffs)} differ" if diffs else ", equal"),
            "detail": "block counts (lopi vs perf uprobes, one run): " + ", ".join(diffs[:8])}


def check(h, program, kind, mode, exe, libs, d):
    """The oracles that apply to this run, each {equal, summary, detail}."""
    if program.client is not None:
        return {}
    out = {}
    try:
        # A threaded program's calls depend on how its threads meet (xz -T2: reads and writes
        # vary from run to run): compared only where one run is like another.
        if kind == "syscall" and mode == "run" and "threads" not in program.kind:
            out["syscalls"] = syscalls(h, program, exe, d)
        elif kind == "entry" and mode == "rewrite":
            out["calls"] = calls(h, program, exe, d)
        elif kind == "block" and mode == "rewrite":
            out["blocks"] = blocks(h, program, exe, d)
    except (subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        out["error"] = {"equal": False, "summary": "oracle failed", "detail": f"oracle failed: {e!r}"}
    return out

