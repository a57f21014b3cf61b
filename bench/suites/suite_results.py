"""The correctness suite's rows (program x mode, battery) and bench/results/suites.md."""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Optional

from suite_programs import NOT_APPLICABLE, NOT_IMPLEMENTED, TRACE_EVENTS, VARIES
from suite_runs import DataCheck, Rewritten

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class BatteryRow:
    program: str
    battery: str
    mode: str
    result: str
    orig_s: Optional[float] = None
    rw_s: Optional[float] = None
    data: Optional[DataCheck] = None
    detail: str = ""


@dataclasses.dataclass
class Row:
    program: str
    mode: str
    result: str  # same | VARIES | DIFFERENT | ORIGINAL FAILS | REWRITE FAILED | not implemented yet
    data_ok: Optional[bool] = None
    orig_s: float = 0.0
    rw_s: float = 0.0
    rw: Optional[Rewritten] = None
    called: int = 0
    calls: int = 0
    trace_events: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def good(self) -> bool:
        return self.result in (NOT_IMPLEMENTED, NOT_APPLICABLE) or (self.result in ("same", VARIES) and self.data_ok is not False)


def fmt_s(s: Optional[float]) -> str:
    return "-" if not s else f"{s:.1f}"


def fmt_ratio(a: float, b: float) -> str:
    return f"x{b / a:.2f}" if a and b else "-"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    w = [max(len(x) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(x.ljust(n) for x, n in zip(r, w)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * n for n in w])] + [line(r) for r in rows])


SUMMARY_HEADER = ["program", "mode", "output", "data", "original s", "rewritten s", "ratio",
                  "probed/found", "timed", "called", "calls", "trace events"]


def summary_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        if r.result in (NOT_IMPLEMENTED, NOT_APPLICABLE):
            out.append([r.program, r.mode, r.result] + ["-"] * (len(SUMMARY_HEADER) - 3))
            continue
        rw = r.rw
        data = "-" if r.data_ok is None else ("ok" if r.data_ok else "BAD")
        out.append([
            r.program, r.mode, r.result, data, fmt_s(r.orig_s), fmt_s(r.rw_s), fmt_ratio(r.orig_s, r.rw_s),
            f"{rw.probed}/{rw.found}" if rw else "-",
            str(rw.timed) if rw and rw.timed is not None else "-",
            str(r.called) if r.calls else "-", f"{r.calls:,}" if r.calls else "-",
            f"{r.trace_events:,}" if r.trace_events else "-",
        ])
    return out


def battery_rows(brows: list[BatteryRow]) -> list[list[str]]:
    out = []
    for b in brows:
        d = b.data
        out.append([
            b.program, b.battery, b.mode, b.result, fmt_s(b.orig_s), fmt_s(b.rw_s), fmt_ratio(b.orig_s or 0, b.rw_s or 0),
            ("ok" if d.ok else "BAD: " + "; ".join(d.problems)) if d else "-",
            f"{d.threads}" if d and d.threads else "-",
            f"{d.bytes_on_disk / 1e6:.1f}" if d else "-",
            (f"{d.trace_dropped:,}" if d and d.trace_events else "-"),
            (d.exports if d and d.exports else "-"),
        ])
    return out


BATTERY_HEADER = ["program", "battery", "mode", "output", "original s", "rewritten s", "ratio", "data",
                  "timed threads", "data MB", "trace dropped", "exports"]


def cmd_out(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(lopi: str, paths: dict[str, str]) -> list[tuple[str, str]]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = cmd_out(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"]) or "?"
    if cmd_out(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]):
        commit += " (with uncommitted changes)"
    debian = ""
    try:
        debian = Path("/etc/debian_version").read_text().strip()
    except OSError:
        pass
    return [
        ("CPU", f"{cpu} ({os.cpu_count()} CPUs online)"),
        ("kernel", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("OS", f"Debian {debian}" if debian else platform.platform()),
        ("glibc", (cmd_out(["ldd", "--version"]).splitlines() or ["?"])[0]),
        ("gcc", (cmd_out(["gcc", "--version"]).splitlines() or ["?"])[0]),
        ("lopi", f"{cmd_out([lopi, '--version'])}, git {commit}"),
        ("sqlite", f"{paths.get('SQLITE_VERSION', '?')} (Debian source and binary packages)"),
        ("zstd", f"{paths.get('ZSTD_VERSION', '?')} (Debian source and binary packages)"),
    ]


def write_results(path: Path, args, argv: list[str], rows: list[Row], brows: list[BatteryRow],
                  varies: list[tuple[str, str, str, int, str]], mach: list[tuple[str, str]],
                  started: datetime.datetime, took: float) -> None:
    bad = [r for r in rows if not r.good]
    lines = [
        "# Correctness suite: real programs under every lopi mode",
        "",
        "Written by `bench/suites/run.sh`; do not edit by hand. What runs and how to read it:",
        "[bench/suites/README.md](../suites/README.md).",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}, {took / 60:.1f} min",
        f"- command: `{' '.join(['bench/suites/run.sh'] + argv)}`",
        f"- run: {'quick (--quick)' if args.quick else 'full'}; trace mode with LOPI_TRACE_EVENTS={TRACE_EVENTS}",
    ]
    lines += [f"- {k}: {v}" for k, v in mach]
    lines += [
        "",
        f"**{'ALL SAME' if not bad else f'{len(bad)} BAD ROW(S)'}**: "
        f"{sum(1 for r in rows if r.good and r.result not in (NOT_IMPLEMENTED, NOT_APPLICABLE))} of "
        f"{sum(1 for r in rows if r.result not in (NOT_IMPLEMENTED, NOT_APPLICABLE))} program x mode runs gave the original's output "
        "byte for byte with a good data file.",
        "",
        "## Programs x modes",
        "",
        md_table(SUMMARY_HEADER, summary_rows(rows)),
        "",
        "`output`: stdout + exit code of every battery identical to the original's (`same`), identical "
        f"to another run of the original whose output varies (`{VARIES}`, see below), or not "
        "(`DIFFERENT`). `data`: the data file(s) parse and hold what the mode records. Times are the "
        "batteries' wall-clock seconds, summed. `probed/found`, `timed`: from `lopi rewrite` (summed "
        "over the rewritten modules). `called`, `calls`: functions with calls and all calls in "
        "`lopi report`, summed over the batteries.",
        "",
        "## Batteries",
        "",
        md_table(BATTERY_HEADER, battery_rows(brows)),
        "",
    ]
    if varies:
        lines += ["## Original varies", "",
                  "The rewritten run's output differed from the original's first run but equals, byte for "
                  "byte, another run of the original: the battery is not deterministic there. The diff "
                  "(original run 1 -> rewritten):", ""]
        for prog_name, mode_name, bat, k, diff in varies:
            body = [l for l in diff.splitlines() if l.startswith(("+", "-")) and not l.startswith(("+++", "---"))]
            lines += [f"- {prog_name} / {mode_name} / {bat} (= original run {k}):", "", "  ```"]
            lines += ["  " + l for l in body[:20]] + ["  ```", ""]
    if bad:
        lines += ["## Problems", ""]
        for r in bad:
            lines += [f"- {r.program} / {r.mode}: {r.result}; " + "; ".join(r.problems)]
        lines.append("")
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
