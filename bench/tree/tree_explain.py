"""Per-process views of a lopi record, and where a count that differs between lopi and
strace -f -c comes from.

Per process: `lopi report --syscalls --pid P` of every process of the tree; their sum must be the
whole tree's counts, and a process that executed a program must have its execve in its own view.
When a view fails, the process's threads in the whole report (which carry no start-up calls)
stand in for it, and the failure is kept: it is a finding of its own.

A difference is looked at in one more run under `strace -f -y` (every call, with what each file
descriptor is), its calls summed per program (the file name of the last program the process
executed, a forked child's calls with its parent's program until it executes its own), next to
lopi's per-process counts summed the same way. When that run's count is not the one of the
strace -c runs, the name varies between strace's runs after all. Otherwise the programs whose
counts differ are put down to (every reason that fits is given):
- pipes: the program made that call (a read, a write, a poll...) on pipes. A read returns what
  the writer has written so far; strace, which stops both ends at every call, changes how a
  transfer is split;
- signals: a program that received signals and ran a different number of signal handlers
  (rt_sigreturn) in the two runs: a standard signal that arrives while the same one is pending
  is merged with it, and how many arrive together depends on the timing (SIGCHLD from children
  that end close together); each handler run adds its rt_sigreturn and repeats the wait it
  interrupted (make: pselect6, then wait4);
- threads: the program ran several threads (in strace's run): which thread does a piece of work
  (and so allocates its malloc arena, waits on a futex, polls) depends on the timing;
- maps: the program read /proc/PID/maps (glibc's pthread_getattr_np does, for the main
  thread's stack): lopi's own mappings (its data file, its probes' code) make it longer under
  lopi, so reading it takes more reads;
anything else is left unexplained.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable

from tree_commands import Command

# strace -f pads the pid column: `123   read(3<pipe:[9]>, ...`
CALL = re.compile(r"^(\d+)\s+(\w+)\(")
EXECVE_OK = re.compile(r'^(\d+)\s+execve\("([^"]*)".*= 0$')
EXECVE_START = re.compile(r'^(\d+)\s+execve\("([^"]*)".*<unfinished \.\.\.>$')
EXECVE_DONE = re.compile(r"^(\d+)\s+<\.\.\. execve resumed>.*= 0$")
# a fork's result: `123 clone(...) = 456`, `123 <... vfork resumed>) = 456`, clone3 likewise
FORKED = re.compile(r"^(\d+)\s+(?:<\.\.\. )?(clone3?|fork|vfork)\b(.*)\) += (\d+)$")
SIGNAL = re.compile(r"^(\d+)\s+--- SIG")
MAPS = re.compile(r"</proc/\d+/maps>")

Json = Callable[..., dict]  # lopi_json(data, *args)


# Calls whose number depends on how a pipe's data arrives: the transfers and the waits for them
TRANSFER = {"read", "write", "readv", "writev", "splice", "poll", "ppoll", "select", "pselect6", "epoll_wait",
            "epoll_pwait"}


def base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def program_name(path: str, cwd: Path) -> str:
    """The name lopi gives a process that executed PATH: a script's is its interpreter's."""
    try:
        with open(cwd / path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return base(path)
    if first.startswith(b"#!") and first[2:].split():
        return base(first[2:].split()[0].decode(errors="replace"))
    return base(path)


def lopi_per_process(lopi_json: Json, data: Path, tree: list[dict], whole: dict) -> tuple[dict[int, dict], list[dict]]:
    """({pid: {syscall: calls}}, the views that failed: the process and lopi's message)."""
    out, failed = {}, []
    for p in tree:
        pid = p["pid"]
        try:
            out[pid] = {s["name"]: int(s["calls"]) for s in lopi_json(data, "--syscalls", "--pid", str(pid))["syscalls"]}
        except RuntimeError as e:
            failed.append({"pid": pid, "program": p["program"], "ended": p["ended"], "startup_calls": p["startup_calls"],
                           "error": str(e).splitlines()[0].split("lopi: error: ")[-1].replace(str(data), "DATA")})
            mine: dict[str, int] = {}
            for t in whole["threads"]:
                if t["pid"] == pid:
                    for s in t["syscalls"]:
                        mine[s["name"]] = mine.get(s["name"], 0) + int(s["calls"])
            out[pid] = mine
    return out, failed


def views_sum_check(per_pid: dict[int, dict], whole: dict[str, int]) -> list[str]:
    """The names whose per-process counts do not add up to the whole tree's."""
    total: dict[str, int] = {}
    for counts in per_pid.values():
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    return [f"{n}: whole {whole.get(n, 0):,}, sum of --pid views {total.get(n, 0):,}"
            for n in sorted(set(total) | set(whole)) if total.get(n, 0) != whole.get(n, 0)]


def execve_elsewhere(tree: list[dict], per_pid: dict[int, dict]) -> list[dict]:
    """The processes that executed a program (their dynamic loader ran: start-up calls) but whose
    view has no execve: it, and what the process did before it, is in another process's view."""
    return [{"pid": p["pid"], "program": p["program"], "parent": p["parent"]} for p in tree
            if p["startup_calls"] > 0 and not per_pid.get(p["pid"], {}).get("execve")]


def strace_per_program(text: str, cwd: Path) -> tuple[dict[str, dict[str, list[int]]], dict[str, dict[str, int]]]:
    """({program: {syscall: [calls, on pipes, on /proc/PID/maps]}}, {program: {"threads", "signals"}})
    of a `strace -f -y -o` trace of a command run in CWD."""
    parent, prog, threads = {}, {}, set()
    pending: dict[int, str] = {}
    calls: dict[int, dict[str, list[int]]] = {}
    signals: dict[int, int] = {}
    for line in text.splitlines():
        if m := FORKED.match(line):
            parent[int(m.group(4))] = int(m.group(1))
            if "CLONE_THREAD" in m.group(3):
                threads.add(int(m.group(4)))
        if m := EXECVE_OK.match(line):
            prog[int(m.group(1))] = program_name(m.group(2), cwd)
        elif m := EXECVE_START.match(line):
            pending[int(m.group(1))] = program_name(m.group(2), cwd)
        elif (m := EXECVE_DONE.match(line)) and int(m.group(1)) in pending:
            prog[int(m.group(1))] = pending[int(m.group(1))]
        if m := SIGNAL.match(line):
            signals[int(m.group(1))] = signals.get(int(m.group(1)), 0) + 1
        if m := CALL.match(line):
            c = calls.setdefault(int(m.group(1)), {}).setdefault(m.group(2), [0, 0, 0])
            c[0] += 1
            c[1] += "<pipe:[" in line
            c[2] += bool(MAPS.search(line))

    def program(pid: int) -> str:
        seen = set()
        while pid not in prog and pid in parent and pid not in seen:
            seen.add(pid)
            pid = parent[pid]
        return prog.get(pid, "?")

    out: dict[str, dict[str, list[int]]] = {}
    facts: dict[str, dict[str, int]] = {}
    for pid in set(calls) | set(signals):
        name = program(pid)
        f = facts.setdefault(name, {"threads": 0, "signals": 0})
        f["threads"] += pid in threads
        f["signals"] += signals.get(pid, 0)
        mine = out.setdefault(name, {})
        for sc, counts in calls.get(pid, {}).items():
            c = mine.setdefault(sc, [0, 0, 0])
            for i, n in enumerate(counts):
                c[i] += n
    return out, facts


# Calls a signal handler's run adds one of: its return, and the wait it interrupts, which the
# program makes again (make's main loop: pselect6 -> EINTR -> wait4 -> pselect6)
AFTER_SIGNAL = {"rt_sigreturn", "wait4", "waitid", "pselect6", "select", "poll", "ppoll", "epoll_wait", "epoll_pwait"}


def reason(name: str, piped: int, maps: int, facts: dict[str, int], handlers: tuple[int, int]) -> str:
    """Why a program's count of NAME may differ, every reason that fits ("" if none): PIPED and
    MAPS = its calls of NAME on pipes and on /proc/PID/maps in strace's run, HANDLERS = its
    rt_sigreturn calls (strace, lopi) in the runs compared."""
    why = []
    if piped and name in TRANSFER:
        why.append("pipes")
    if maps:
        why.append("maps")
    if name in AFTER_SIGNAL and facts.get("signals") and handlers[0] != handlers[1]:
        why.append("signals")
    if facts.get("threads"):
        why.append("threads")
    return " or ".join(why)


def explain(cmd: Command, env: dict, log: Path, strace_count: dict[str, int],
            lopi_views: dict[str, tuple[int, list[dict], dict[int, dict]]], timeout: float) -> dict[str, dict]:
    """{syscall: {"programs": [[program, strace calls, on pipes, on maps, lopi calls, reason]], "run": the
    lopi run looked at, "why": the reasons, "" when one program's is unknown}} for the names of
    STRACE_COUNT (strace -c's count, the same in every run), each against the lopi run of
    LOPI_VIEWS[name] (its index, its tree, its per-process counts: one whose count differs). When
    the extra strace run's count of a name is not strace -c's, the name varies between strace's runs
    after all."""
    cmd.prepare()
    log.unlink(missing_ok=True)
    subprocess.run(["strace", "-f", "-y", "-o", str(log), *cmd.argv], cwd=cmd.cwd, env=dict(env, **cmd.env),
                   capture_output=True, timeout=timeout)
    traced, facts = strace_per_program(log.read_text(), cmd.cwd)
    log.unlink()
    out = {}
    for name, count in strace_count.items():
        run, tree, per_pid = lopi_views[name]
        total = sum(c.get(name, [0])[0] for c in traced.values())
        if total != count:
            # strace's own count moved: the -c runs agreed by chance
            out[name] = {"programs": [], "run": run, "why": f"varies (one more strace run counted {total:,})"}
            continue
        seen: dict[str, dict[str, int]] = {}
        for p in tree:
            mine = seen.setdefault(p["program"], {})
            for sc in {name, "rt_sigreturn"}:
                mine[sc] = mine.get(sc, 0) + per_pid.get(p["pid"], {}).get(sc, 0)
        rows = []
        for prog in sorted(set(traced) | set(seen)):
            n, piped, maps = traced.get(prog, {}).get(name, [0, 0, 0])
            got = seen.get(prog, {}).get(name, 0)
            handlers = (traced.get(prog, {}).get("rt_sigreturn", [0])[0], seen.get(prog, {}).get("rt_sigreturn", 0))
            if n != got:
                rows.append([prog, n, piped, maps, got, reason(name, piped, maps, facts.get(prog, {}), handlers)])
        why = sorted({r[5] for r in rows})
        out[name] = {"programs": rows, "run": run, "why": "" if not rows or "" in why else ", ".join(why)}
    return out


def fmt(e: dict) -> str:
    if not e["programs"]:
        return e["why"] or "every program's count equal in that run → UNEXPLAINED"
    parts = []
    for prog, n, piped, maps, got, why in e["programs"]:
        on = [f"{piped:,} on pipes"] * bool(piped) + [f"{maps:,} on /proc/PID/maps"] * bool(maps)
        detail = f" ({', '.join(on)})" if on else ""
        parts.append(f"{prog}: strace {n:,}{detail}, lopi {got:,} [{why or '?'}]")
    return "; ".join(parts) + (f" → {e['why']}" if e["why"] else " → UNEXPLAINED")


def fmt_failures(failed: list[dict]) -> list[str]:
    """The failed views, one line per message."""
    by_error: dict[str, list[dict]] = {}
    for f in failed:
        by_error.setdefault(f["error"], []).append(f)
    return [f"`lopi report DATA --syscalls --pid P` failed for {plural(len(fs), 'process')} "
            f"(\"{msg}\"): "
            + ", ".join(f"{f['pid']} ({f['program']}, {f['ended']}, {f['startup_calls']} start-up calls)" for f in fs)
            for msg, fs in by_error.items()]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("s") else "s")
