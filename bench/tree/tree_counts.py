"""Counts of a whole process tree: `lopi run --probe syscall` against `strace -f -c`, name by name.

Each command runs once unrecorded (caches, Python's and node's compiled files), then under
strace, under lopi, and under strace again (and more, with --strace-runs): a system call whose
strace runs disagree depends on the scheduling or the threads' timing (how a pipe's bytes are
split into reads, futex waits) and is marked "varies between runs"; any other whose lopi count
differs from strace's is a difference. exit and exit_group are left out: they never return, and
strace -c counts a call when it returns.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Optional

import tree_explain
from tree_commands import Command, missing

import harness as h

NEVER_RETURN = ("exit", "exit_group")
TIMEOUT_S = 600


def strace_table(text: str) -> dict[str, int]:
    """{syscall: calls} from `strace -c`'s table (% time, seconds, usecs/call, calls, [errors,] syscall)."""
    counts = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 5 or f[-1] == "total":
            continue
        try:
            float(f[0])
            counts[f[-1]] = int(f[3])
        except ValueError:
            continue
    return counts


def lopi_json(lopi: Path, data: Path, *args: str) -> dict:
    p = subprocess.run([str(lopi), "report", str(data), *args, "--format", "json"], capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"lopi report {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)


def run(cmd: Command, argv: list[str], env: dict) -> dict:
    cmd.prepare()
    p = subprocess.run(argv, cwd=cmd.cwd, env=dict(env, **cmd.env), capture_output=True, timeout=TIMEOUT_S)
    out = hashlib.sha256(p.stdout).hexdigest()[:12]
    return {"status": p.returncode, "stdout": f"{len(p.stdout)} bytes, sha256 {out}",
            "stderr": p.stderr.decode(errors="replace")[-2000:]}


def lopi_run(cmd: Command, lopi: Path, data: Path, env: dict) -> dict:
    data.unlink(missing_ok=True)
    r = run(cmd, [str(lopi), "run", "-q", "--probe", "syscall", "--", *cmd.argv], env)
    r["whole"] = lopi_json(lopi, data, "--syscalls")
    r["counts"] = {s["name"]: int(s["calls"]) for s in r["whole"]["syscalls"]}
    r["tree"] = lopi_json(lopi, data, "--processes")["processes"]
    r["processes_text"] = subprocess.run([str(lopi), "report", str(data), "--processes"], capture_output=True,
                                         text=True, timeout=TIMEOUT_S).stdout
    return r


def compare_one(cmd: Command, lopi: Path, scratch: Path, env: dict, runs: int, rechecks: int) -> dict:
    """Every run of CMD (RUNS under strace and RUNS under lopi, alternating) and the verdict per
    system call name; the last lopi record's per-process views checked, and the differences
    explained (tree_explain.py) against a lopi run where they show."""
    res: dict = {"key": cmd.key, "title": cmd.title, "argv": cmd.argv}
    gone = missing(cmd)
    if gone:
        return dict(res, skipped=f"{', '.join(gone)} not installed")
    cmd.setup()
    # one record per lopi run, kept until the differences are explained; names of one length, so
    # that every run's environment (LOPI_OUTPUT included) has the same size
    data = [scratch / f"{cmd.key}.{i}.lopi" for i in range(runs)]
    log = scratch / f"{cmd.key}.strace"
    straces, lopis = [], []
    views: dict[int, tuple] = {}

    def views_of(i: int) -> tuple:
        if i not in views:
            views[i] = tree_explain.lopi_per_process(lambda *a: lopi_json(lopi, *a), data[i], lopis[i]["tree"],
                                                     lopis[i]["whole"])
        return views[i]

    try:
        run(cmd, cmd.argv, dict(env, LOPI_OUTPUT=str(data[0])))  # warm-up
        for i in range(runs):
            log.unlink(missing_ok=True)
            r = run(cmd, ["strace", "-f", "-c", "-o", str(log), *cmd.argv], dict(env, LOPI_OUTPUT=str(data[i])))
            r["counts"] = strace_table(log.read_text()) if log.exists() else {}
            straces.append(r)
            lopis.append(lopi_run(cmd, lopi, data[i], dict(env, LOPI_OUTPUT=str(data[i]))))
        last = lopis[-1]
        res.update(strace=straces, lopi=lopis, processes=len(last["tree"]), processes_text=last["processes_text"])
        res.update(verdicts(straces, lopis))
        per_pid, res["view_failures"] = views_of(runs - 1)
        res["view_sums"] = tree_explain.views_sum_check(per_pid, last["counts"])
        res["execve_elsewhere"] = tree_explain.execve_elsewhere(last["tree"], per_pid)
        if res["differ"]:
            looked_at = {}
            for name, d in res["differ"].items():
                i = next(i for i, c in enumerate(d["lopi"]) if c != d["strace"])
                looked_at[name] = (i + 1, lopis[i]["tree"], views_of(i)[0])
            why = tree_explain.explain(cmd, dict(env, LOPI_OUTPUT=str(data[0])), log,
                                       {n: d["strace"] for n, d in res["differ"].items()}, looked_at, TIMEOUT_S)
            for name, e in why.items():
                res["differ"][name]["why"] = e
            recheck(cmd, res["differ"], log, dict(env, LOPI_OUTPUT=str(data[0])), rechecks)
    finally:
        for f in data:
            f.unlink(missing_ok=True)
    for r in lopis:
        for k in ("processes_text", "whole", "tree"):
            r.pop(k)
    return res


def recheck(cmd: Command, differ: dict, log: Path, env: dict, rechecks: int) -> None:
    """Up to RECHECKS more strace -f -c runs for the differences left unexplained: a count that
    moves in one of them varies between strace's runs after all."""
    left = {n for n, d in differ.items() if not d["why"]["why"]}
    seen: dict[str, list[int]] = {n: [] for n in left}
    for _ in range(rechecks if left else 0):
        log.unlink(missing_ok=True)
        run(cmd, ["strace", "-f", "-c", "-o", str(log), *cmd.argv], env)
        counts = strace_table(log.read_text()) if log.exists() else {}
        for n in left:
            seen[n].append(counts.get(n, 0))
        if all(set(seen[n]) != {differ[n]["strace"]} for n in left):
            break
    for n in left:
        if set(seen[n]) - {differ[n]["strace"]}:
            more = tree_explain.plural(len(seen[n]), "more strace -c run")
            differ[n]["why"]["why"] = f"varies ({more} counted {counts_text(seen[n])})"


def verdicts(straces: list[dict], lopis: list[dict]) -> dict:
    names = sorted({n for r in [*straces, *lopis] for n in r["counts"]} - set(NEVER_RETURN))
    equal, varies, differ = [], {}, {}
    for name in names:
        s = [r["counts"].get(name, 0) for r in straces]
        got = [r["counts"].get(name, 0) for r in lopis]
        if len(set(s)) > 1:
            varies[name] = {"strace": s, "lopi": got}
        elif set(got) == {s[0]}:
            equal.append(name)
        else:
            differ[name] = {"strace": s[0], "lopi": got}
    problems = []
    if any(r["status"] != straces[0]["status"] for r in [*straces, *lopis]):
        problems.append("exit status differs: strace " + ", ".join(str(r["status"]) for r in straces)
                        + ", lopi " + ", ".join(str(r["status"]) for r in lopis))
    outs = {r["stdout"] for r in [*straces, *lopis]}
    if len(outs) > 1:
        problems.append(f"stdout differs between runs: {sorted(outs)}")
    return {"names": len(names), "equal": equal, "varies": varies, "differ": differ, "problems": problems}


def compare_all(cmds: list[Command], lopi: Optional[Path], scratch: Path, env: dict, runs: int, rechecks: int,
                skip: str) -> list[dict]:
    out = []
    for cmd in cmds:
        if skip:
            out.append({"key": cmd.key, "title": cmd.title, "argv": cmd.argv, "skipped": skip})
            continue
        h.log(f"=== counts: {cmd.title}")
        try:
            r = compare_one(cmd, lopi, scratch, env, runs, rechecks)
        except (OSError, subprocess.SubprocessError, RuntimeError, json.JSONDecodeError, KeyError) as e:
            r = {"key": cmd.key, "title": cmd.title, "argv": cmd.argv, "skipped": f"failed: {type(e).__name__}: {e}"}
        if "skipped" in r:
            h.log(f"  skipped: {r['skipped']}")
        else:
            h.log(f"  {r['names']} names: {len(r['equal'])} equal, {len(r['varies'])} vary between runs, "
                  f"{len(r['differ'])} differ {fmt_differ(r, True)}; {'; '.join(r['problems'])}")
        out.append(r)
    return out


def counts_text(values: list[int]) -> str:
    return "/".join(f"{c:,}" for c in values)


def unexplained(r: dict) -> dict:
    return {n: d for n, d in r.get("differ", {}).items() if not d.get("why", {}).get("why")}


def fmt_differ(r: dict, explained: bool) -> str:
    """The differences explained (EXPLAINED, with the reason) or not."""
    return ", ".join(f"{n} (strace {d['strace']:,}, lopi {counts_text(d['lopi'])}"
                     + (f"; {d['why']['why']})" if explained else ")") for n, d in r["differ"].items()
                     if bool(d.get("why", {}).get("why")) == explained)


def fmt_varies(r: dict) -> str:
    return ", ".join(f"{n} (strace {counts_text(v['strace'])}, lopi {counts_text(v['lopi'])})"
                     for n, v in r["varies"].items())


def argv_text(argv: list[str], width: int = 70) -> str:
    text = " ".join(a if a and " " not in a and "'" not in a else "'" + a.replace("'", "'\\''") + "'" for a in argv)
    return text if len(text) <= width else text[:width - 1] + "…"


def views_text(r: dict) -> str:
    bad = len(r["view_failures"])
    text = f"{r['processes'] - bad} of {r['processes']} work"
    text += "; sum = tree" if not r["view_sums"] else f"; SUM ≠ TREE: {', '.join(r['view_sums'])}"
    if r["execve_elsewhere"]:
        text += f"; {len(r['execve_elsewhere'])} executed a program but their execve is not in their view"
    return text


def count_section(results: list[dict], runs: int) -> list[str]:
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append([r["title"], "skipped", "-", "-", "-", "-", "-", "-", r["skipped"]])
            continue
        rows.append([r["title"], f"{r['processes']}", f"{r['names']}", f"{len(r['equal'])}",
                     fmt_varies(r) or "-", fmt_differ(r, True) or "-", fmt_differ(r, False) or "none",
                     views_text(r), "; ".join(r["problems"]) or "the same in every run"])
    header = ["command", "processes", "names compared", "equal", "varies between strace's runs (strace / lopi)",
              "differ, explained (strace / lopi; why)", "differ, UNEXPLAINED (strace / lopi)",
              "`--pid` views (sum of them = whole tree)", "exit status, stdout"]
    out = [h.markdown_table(header, rows), ""]
    done = [r for r in results if "skipped" not in r]
    other = sum(len(unexplained(r)) for r in done)
    explained = sum(len(r["differ"]) for r in done) - other
    out += [f"{len(done)} commands compared, {sum(r['names'] for r in done)} (command, system call) pairs: "
            f"{sum(len(r['equal']) for r in done)} equal in all {runs} strace and {runs} lopi runs, "
            f"{sum(len(r['varies']) for r in done)} vary between strace's own runs, {explained} differ for a reason "
            f"of timing found in one more run (below), {other} differ unexplained.", ""]
    out += ["Commands (each in a scratch directory of its own; processes: lopi's `report --processes` of its last run):",
            "", *(f"- {r['title']}: `{argv_text(r['argv'], 200)}`" for r in results), ""]
    for r in done:
        if not (r["differ"] or r["view_failures"] or r["view_sums"] or r["execve_elsewhere"]):
            continue
        out += [f"### {r['title']}", "", f"`{argv_text(r['argv'], 200)}`", ""]
        out += [f"- {n}: strace {d['strace']:,} (every run), lopi {counts_text(d['lopi'])}; per program, in one more "
                f"`strace -f -y` run and lopi's run {d['why']['run']}: {tree_explain.fmt(d['why'])}"
                for n, d in r["differ"].items()]
        out += [f"- {line}" for line in tree_explain.fmt_failures(r["view_failures"])]
        out += [f"- per-process views do not add up to the tree: {v}" for v in r["view_sums"]]
        if r["execve_elsewhere"]:
            out.append(f"- {tree_explain.plural(len(r['execve_elsewhere']), 'process')} executed a program (their "
                       "dynamic loader made start-up calls) but their `--pid` view has no execve: it, and what they did before it, is counted in "
                       "another process's view (the parent's, for children made by vfork or posix_spawn, which run "
                       "in the parent's memory until they execute): "
                       + ", ".join(f"{e['pid']} ({e['program']}, parent {e['parent']})" for e in r["execve_elsewhere"]))
        out += ["", "`lopi report --processes` of lopi's last run:", "", "```", r["processes_text"].rstrip(), "```", ""]
    return out
