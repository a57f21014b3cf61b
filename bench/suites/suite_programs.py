"""The correctness suite's modes (how lopi instruments a program) and its programs with their
batteries (what runs them: the scripts of tests/real/)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Optional

REAL = Path(__file__).resolve().parents[2] / "tests" / "real"


# ---------------------------------------------------------------- modes


@dataclasses.dataclass
class Mode:
    name: str
    what: str
    # `lopi rewrite` arguments; None: the mode does not exist in lopi yet (reported, not run)
    rewrite_args: Optional[list[str]]
    timing: bool = False  # the data file must hold timing (calling-context trees)
    trace: bool = False  # ... and trace events
    live: bool = False  # `lopi run` through a wrapper script instead of rewritten files


MODES = [
    Mode("entry", "`lopi rewrite` (entry counts)", []),
    Mode("timing", "`lopi rewrite --probe entry,exit`", ["--probe", "entry,exit"], timing=True),
    Mode("trace", "`lopi rewrite --trace`", ["--trace"], timing=True, trace=True),
    # Live splicing: every process the battery starts runs under `lopi run` (probes spliced in at
    # its entry point), through a wrapper script where the rewritten executable would be.
    Mode("live", "`lopi run --probe entry,exit` (no rewritten file)", ["--probe", "entry,exit"], timing=True, live=True),
]
NOT_IMPLEMENTED = "not implemented yet"
# Live mode needs a program to start: a library driven by a program the suite does not rewrite
# (or loaded with dlopen, as ctypes does) has no live form.
NOT_APPLICABLE = "n/a (library only)"
# A rewritten run whose output differs from the original's is compared with up to this many more
# runs of the original: when the original itself gives exactly the rewritten run's output, the row
# says VARIES (shown, with the original's own diff, but not a failure); otherwise DIFFERENT.
ORIGINAL_RERUNS = 2
VARIES = "same, original varies"

# Trace mode: per-thread event capacity.  lopi's default (1M events, 16 MiB a thread) makes the
# zstd battery write ~1 GB of trace (14 GB sparse) over its ~800 threads; 16K events keep every
# thread's first 16K events (and exercise the counted drop path) in ~100 MB.
TRACE_EVENTS = os.environ.get("LOPI_SUITE_TRACE_EVENTS", "16384")


# ---------------------------------------------------------------- programs and batteries


@dataclasses.dataclass
class Battery:
    name: str
    # (targets, scratch directory) -> (argv, extra environment); targets maps a program's roles
    # ("bin", "lib") to the original or the rewritten files.
    command: Callable[[dict[str, Path], Path], tuple[list[str], dict[str, str]]]
    quick: bool = True  # part of --quick
    full: bool = True  # part of the full run


@dataclasses.dataclass
class Program:
    name: str
    what: str
    # role -> (paths.env key of the original, file name of the rewritten copy)
    rewrite: dict[str, tuple[str, str]]
    batteries: list[Battery]
    # role -> paths.env key: files the batteries use but that are not rewritten
    fixed: dict[str, str] = dataclasses.field(default_factory=dict)


def script(name: str) -> list[str]:
    return ["bash", str(REAL / name)]


def quick_sqlite_tests(out: Path) -> Path:
    """1 in 10 of tests/real/sqlite-tests.txt (the 1st, 11th, 21st... file: ~50 files across
    every family, since the list is sorted by name)."""
    lines = [l for l in (REAL / "sqlite-tests.txt").read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
    out.write_text("".join(l + "\n" for l in lines[::10]))
    return out


def libdir(t: dict[str, Path]) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(t["lib"].parent)}


def programs(paths: dict[str, str], work: Path) -> list[Program]:
    P = lambda key: paths[key]  # noqa: E731
    quick_list = quick_sqlite_tests(work / "sqlite-tests-quick.txt")
    n_quick = len(quick_list.read_text().splitlines())
    sqlite_battery = Battery("sqlite-battery.sh", lambda t, s: (script("sqlite-battery.sh") + [str(t["bin"]), str(s)], {}))
    sqlite_battery_lib = Battery("sqlite-battery.sh", lambda t, s: (script("sqlite-battery.sh") + [str(t["bin"]), str(s)], libdir(t)))
    zstd_batteries = [
        Battery("zstd-battery.sh", lambda t, s: (script("zstd-battery.sh") + [str(t["bin"]), P("DATAGEN"), str(s)], {})),
        Battery("cli-tests", lambda t, s: (script("zstd-playtests.sh") + [str(t["bin"]), P("DATAGEN"), P("ZSTD_SRC"), "cli"], {})),
        Battery("playTests.sh", lambda t, s: (script("zstd-playtests.sh") + [str(t["bin"]), P("DATAGEN"), P("ZSTD_SRC"), "play"], {}), quick=False),
    ]
    libzstd = [Battery("libzstd-battery.py", lambda t, s: (["python3", str(REAL / "libzstd-battery.py"), str(t["lib"])], {}))]
    return [
        Program("sqlite3-src", "sqlite3 shell from source (engine compiled in, symbols)",
                {"bin": ("SQLITE3_SRC_BIN", "sqlite3")}, [sqlite_battery]),
        Program("testfixture", "sqlite's TCL test harness from source, sqlite's own test/*.test",
                {"bin": ("TESTFIXTURE", "testfixture")}, [
                    Battery(f"{n_quick} test files (1 in 10)",
                            lambda t, s: (script("sqlite-testfixture.sh") + [str(t["bin"]), P("SQLITE_SRC"), str(quick_list)], {}),
                            quick=True, full=False),
                    Battery("491 test files", lambda t, s: (script("sqlite-testfixture.sh") + [str(t["bin"]), P("SQLITE_SRC")], {}),
                            quick=False, full=True),
                ]),
        Program("sqlite3-deb", "Debian's stripped sqlite3 + libsqlite3.so.0, both rewritten",
                {"bin": ("DEB_SQLITE3", "sqlite3"), "lib": ("DEB_LIBSQLITE3", "lib/libsqlite3.so.0")}, [sqlite_battery_lib]),
        Program("libsqlite3-src", "libsqlite3.so.0 from source (symbols) under Debian's sqlite3",
                {"lib": ("LIBSQLITE3_SRC", "lib/libsqlite3.so.0")}, [sqlite_battery_lib], fixed={"bin": "DEB_SQLITE3"}),
        Program("zstd-src", "zstd from source (libzstd compiled in, symbols)",
                {"bin": ("ZSTD_SRC_BIN", "zstd")}, zstd_batteries),
        Program("zstd-deb", "Debian's stripped zstd (libzstd linked statically)",
                {"bin": ("DEB_ZSTD", "zstd")}, zstd_batteries),
        Program("libzstd-src", "libzstd.so.1 from source (symbols), C API through ctypes",
                {"lib": ("LIBZSTD_SRC", "libzstd.so.1")}, libzstd),
        Program("libzstd-deb", "Debian's stripped libzstd.so.1, C API through ctypes",
                {"lib": ("DEB_LIBZSTD", "libzstd.so.1")}, libzstd),
    ]
