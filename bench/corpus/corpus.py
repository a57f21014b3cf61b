#!/usr/bin/env python3
"""Probe everything: Debian programs nobody at lopi wrote, under every probe kind, over every
function of the program and of every library it loads, live (`lopi run`), rewritten (`lopi
rewrite` of the program and of its libraries, run with LD_LIBRARY_PATH) and attached to while
running (`lopi attach`, `lopi trace -p`).

Pass: the program's output (stdout, stderr) and exit status are identical to its native run's,
and lopi's record reads back with what the probe kind records; where an oracle exists
(oracles.py), its counts equal lopi's. A run lopi refuses before the program starts, with its
reason, is listed as refused.

    corpus.py [--ci] [--programs a,b] [--kinds k,..] [--modes m,..] [--no-oracles] [--out DIR]

Writes DIR/corpus.md and DIR/corpus.json (default bench/results/); exits 1 when a run failed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles  # noqa: E402
import programs as corpus  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HANDLER = HERE / "handler.c"
# A rewritten file's handler: its functions' callbacks only (system calls are libc's, which a
# rewritten program probes only when libc is rewritten too, and lopi refuses the others).
FUNCTION_HANDLER = HERE / "function_handler.c"

# Probe kinds: the options of `lopi run`/`attach`/`rewrite`; `script` runs under `lopi trace`.
KINDS = {
    "entry": ["--probe", "entry"],
    "time": ["--probe", "entry,exit"],
    "block": ["--probe", "block"],
    "coverage": ["--probe", "coverage"],
    "syscall": ["--probe", "syscall"],
    "locks": ["--probe", "locks"],
    "script": None,
    "handler": ["--handler", str(HANDLER)],
    "budget": ["--probe", "entry,exit", "--budget", "5%"],
    "sampled": ["--probe", "entry,exit", "--time", "sampled"],
}
MODES = ["run", "rewrite", "attach"]
# The CI subset: every kind live; rewritten and attached, the kinds whose code paths differ
# between installers (so that CI stays under 10 minutes; the full run has every combination).
CI_MODES = {"run": set(KINDS), "rewrite": {"entry", "time", "block", "coverage", "syscall", "budget", "sampled"},
            "attach": {"entry", "time", "coverage", "syscall", "locks", "script", "sampled"}}
ORACLE_TOOLS = {"gdb": "gdb", "perf": "linux-perf"}
# What lopi refuses by design, as it says it (docs/limits.md).
REFUSALS = ("static executables are not supported", "a rewritten file probes its own functions only",
            "which a rewritten file does not probe")
TIMEOUT = 300


@dataclass
class Outcome:
    program: str
    kind: str
    mode: str
    status: str  # same | differs | crash | refused | error | skipped
    detail: str = ""
    seconds: float = 0.0
    native_seconds: float = 0.0
    oracle: dict = field(default_factory=dict)


@dataclass
class Result:
    stdout: bytes
    stderr: bytes
    code: int


def lopi_bin():
    return os.environ.get("LOPI") or str(REPO / "target" / "release" / "lopi")


def run(cmd, cwd, stdin=None, env=None, executable=None, timeout=TIMEOUT):
    # The input as a file, as the oracles give it (a pipe's short reads change the calls made);
    # PWD right, as a shell sets it (bash calls getcwd and stats when it is not).
    env = dict(env or environment(), PWD=str(cwd))
    with open(cwd / stdin, "rb") if stdin else open(os.devnull, "rb") as f:
        p = subprocess.run(cmd, cwd=cwd, stdin=f, capture_output=True, env=env, executable=executable,
                           timeout=timeout)
    return Result(p.stdout, p.stderr, p.returncode)


def environment(extra=None):
    """The programs' environment, the same natively, under lopi and under the oracles."""
    env = dict(os.environ)
    env.pop("LOPI_OUTPUT", None)
    env.pop("_", None)
    env["LC_ALL"] = "C.UTF-8"
    env.update(extra or {})
    return env


def expand(argv, port):
    """The command line with its port, and the program named by its path (as gdb names it for
    the oracle: bash looks itself up in PATH when argv[0] has no slash, and that is system
    calls)."""
    argv = [a.replace("$PORT", str(port)) for a in argv]
    return [shutil.which(argv[0]) or argv[0], *argv[1:]]


def libraries(exe):
    """The shared libraries `exe` loads at start-up, as (file name, path); ld.so included."""
    p = subprocess.run(["ldd", exe], capture_output=True, text=True)
    libs = []
    for line in p.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append((parts[0], os.path.realpath(parts[2])))
        elif parts and parts[0].startswith("/") and "ld-linux" in parts[0]:
            libs.append((os.path.basename(parts[0]), os.path.realpath(parts[0])))
    return libs


def function_args(libs):
    args = ["--functions", "*"]
    for name, _ in libs:
        args += ["--functions", f"{name}:*"]
    return args


def script_text(libs, one_module=False):
    """The script: every function of the program and, unless `one_module` (a rewritten file's
    own script), of each library. Arguments are read, so that the probes are compiled ones,
    not the built-in count."""
    s = "func:* { @calls[func] = count(); @odd = sum(arg0 & 1); }\n"
    if not one_module:
        for name, _ in libs:
            s += f"func:{name}:* {{ @lib[\"{name}\"] = count(); @args = sum(arg1 & 1); }}\n"
        # System calls are libc's: a rewritten file has none of its own to probe.
        s += "syscall:* { @sys[probe] = count(); }\n"
    return s


def compare(native, probed, normalize, lopi_said=None):
    """`lopi_said`: what lopi printed when it shares the program's stderr (lopi trace), which
    is then the program's stderr without it."""
    norm = normalize or (lambda b: b)
    said = (probed.stderr if lopi_said is None else lopi_said).decode(errors="replace").strip().splitlines()
    if probed.code != native.code and not probed.stdout and said and said[0].startswith("lopi: error:"):
        # lopi said why before the program ran: a refusal, with its reason, when it is one of
        # the things lopi does not do (docs/limits.md); anything else is an error of lopi's.
        reason = said[0][len("lopi: error: "):]
        return ("refused" if any(r in reason for r in REFUSALS) else "error"), reason[:240]
    diffs = []
    if probed.code != native.code:
        if probed.code < 0:
            return "crash", f"killed by signal {-probed.code} (native exit {native.code})"
        diffs.append(f"exit {probed.code} != {native.code}")
    if norm(probed.stdout) != norm(native.stdout):
        diffs.append(f"stdout differs ({len(probed.stdout)} vs {len(native.stdout)} bytes)")
    if norm(probed.stderr) != norm(native.stderr):
        first = probed.stderr.decode(errors="replace").strip().splitlines()[:1]
        diffs.append(f"stderr differs: {first[0][:160] if first else '(empty)'}")
    return ("differs", "; ".join(diffs)) if diffs else ("same", "")


class Harness:
    def __init__(self, args):
        self.args = args
        self.lopi = lopi_bin()
        self.work = Path(args.work).resolve()
        self.port = 17000 + os.getpid() % 2000
        # Library path -> whether lopi finds functions in it.
        self.found = {}

    def env(self, extra=None):
        return environment(extra)

    def log(self, msg):
        print(f"corpus: {msg}", file=sys.stderr, flush=True)

    def install(self, packages):
        """Installs each {command: package} whose command is missing; the commands still missing."""
        for cmd, pkg in packages.items():
            if not shutil.which(cmd):
                self.log(f"installing {pkg} for {cmd}")
                subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg],
                               env=environment({"DEBIAN_FRONTEND": "noninteractive"}), capture_output=True)
        return [c for c in packages if not shutil.which(c)]

    def prepare(self, program):
        still = self.install(program.packages)
        if still:
            return f"{', '.join(still)} not installed (apt-get failed)"
        exe = shutil.which(program.argv[0])
        if not exe:
            return f"{program.argv[0]} not found"
        return None

    def with_functions(self, libs):
        """The libraries lopi finds functions in: a script's `func:LIB:*` that matches nothing
        is an error, and a library of data only (cmake's libicudata) has none."""
        for _, path in libs:
            if path not in self.found:
                p = subprocess.run([self.lopi, "info", path, "--format", "json"], capture_output=True, text=True)
                self.found[path] = p.returncode != 0 or json.loads(p.stdout)["summary"]["found"] > 0
        return [(n, p) for n, p in libs if self.found[p]]

    def dir_for(self, program, label):
        d = self.work / program.name / label
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        corpus.write_inputs(program, d)
        return d

    # --- one run of the program, natively or under lopi -------------------------------------

    def native(self, program):
        d = self.dir_for(program, "native")
        t0 = time.monotonic()
        res = self.execute(program, d, lambda argv: (argv, None, {}))
        return res, time.monotonic() - t0

    def execute(self, program, d, wrap):
        """Runs the program (or a server and its client) with `wrap(argv) -> (cmd, executable,
        env)` giving how the program itself is started."""
        port = self.port
        self.port += 1
        argv = expand(program.argv, port)
        cmd, executable, env = wrap(argv)
        env = {**program.env, **env}
        if program.client is None:
            return run(cmd, d, program.stdin, environment(env), executable)
        server = subprocess.Popen(cmd, cwd=d, executable=executable, env=environment({**env, "PWD": str(d)}),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            if not oracles.wait_for_port(port, 60, server):
                server.kill()
                out, err = server.communicate()
                return Result(b"", err, server.returncode if server.returncode is not None else -9)
            client = run(expand(program.client, port), d, env=environment({"PORT": str(port)}))
            stop = run(expand(program.stop, port), d, env=environment())
            server.communicate(timeout=TIMEOUT)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        return Result(client.stdout + stop.stdout, client.stderr + stop.stderr,
                      server.returncode if client.code == 0 else client.code)

    def live(self, program, kind, libs, d):
        data = d / "data.lopi"
        if kind == "script":
            (d / "script.bt").write_text(script_text(self.with_functions(libs)))
            lopi = [self.lopi, "trace", "-o", str(d / "trace.out"), "--record", str(data), str(d / "script.bt"), "--"]
        else:
            lopi = [self.lopi, "run", "-q", *KINDS[kind], *function_args(libs), "--"]
        res = self.execute(program, d, lambda argv: (lopi + argv, None, {}))
        if kind != "script":
            recs = sorted(d.glob("*.lopi"))
            if recs:
                recs[0].rename(data) if recs[0] != data else None
        return res

    def rewritten(self, program, kind, exe, libs, d):
        out = d / "rw"
        out.mkdir()
        # ld.so is the program's interpreter, not found through LD_LIBRARY_PATH: not rewritten.
        modules = [(os.path.basename(exe), exe)] + [(n, p) for n, p in libs if "ld-linux" not in n]
        for name, path in modules:
            if kind == "script":
                script = d / f"{name}.bt"
                script.write_text(script_text(libs, one_module=True))
                opts = ["--script", str(script)]
            elif kind == "handler":
                opts = ["--handler", str(FUNCTION_HANDLER)]
            else:
                opts = KINDS[kind]
            p = subprocess.run([self.lopi, "rewrite", path, "-o", str(out / name), *opts], capture_output=True,
                               text=True, timeout=TIMEOUT)
            if p.returncode != 0 and kind == "script" and path != exe and "no function matches" in p.stderr:
                # A library of data only (cmake's libicudata): nothing for its script to probe,
                # and the loader finds the original.
                continue
            if p.returncode != 0:
                return None, f"lopi rewrite {name}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}"
        env = {"LD_LIBRARY_PATH": str(out), "LOPI_OUTPUT": str(d / "data.lopi")}
        t0 = time.monotonic()
        res = self.execute(program, d, lambda argv: (argv, str(out / os.path.basename(exe)), env))
        self.run_seconds = time.monotonic() - t0
        return res, None

    def attached(self, program, kind, libs, d):
        """Starts the program natively, attaches while it waits for its input (or, a server,
        before its client runs), then lets it go on."""
        port = self.port
        self.port += 1
        argv = expand(program.argv, port)
        proc = subprocess.Popen(argv, cwd=d, env=environment({**program.env, "PWD": str(d)}), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        if program.client is not None and not oracles.wait_for_port(port, 60, proc):
            proc.kill()
            return None, "the server did not start"
        # Attached once its start-up is over, as a user attaches to a running program.
        if program.client is None and not oracles.wait_for_stdin_read(proc.pid, 60):
            proc.kill()
            return None, "the program did not wait for its input"
        if kind == "script":
            (d / "script.bt").write_text(script_text(self.with_functions(libs)))
            cmd = [self.lopi, "trace", "-p", str(proc.pid), "-o", str(d / "trace.out"), "--record",
                   str(d / "data.lopi"), str(d / "script.bt")]
        else:
            cmd = [self.lopi, "attach", str(proc.pid), *KINDS[kind], *function_args(libs)]
        lopi = subprocess.Popen(cmd, cwd=d, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        attached, log = oracles.wait_for_line(lopi.stderr, (b"attached to", b"tracing"), 120)
        if not attached:
            proc.kill()
            proc.wait()
            lopi.wait()
            return None, "lopi did not attach: " + log.decode(errors="replace").strip().splitlines()[-1:][0] \
                if log.strip() else "lopi did not attach"
        try:
            if program.client is None:
                stdin = (d / program.stdin).read_bytes()
                out, err = proc.communicate(stdin, timeout=TIMEOUT)
                res = Result(out, err, proc.returncode)
            else:
                client = run(expand(program.client, port), d, env=environment({"PORT": str(port)}))
                stop = run(expand(program.stop, port), d, env=environment())
                proc.communicate(timeout=TIMEOUT)
                res = Result(client.stdout + stop.stdout, client.stderr + stop.stderr,
                             proc.returncode if client.code == 0 else client.code)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rest = lopi.stderr.read()
        lopi.wait(timeout=TIMEOUT)
        if lopi.returncode not in (0, None) and kind != "script":
            return res, "lopi attach: " + (log + rest).decode(errors="replace").strip().splitlines()[-1]
        recs = [r for r in d.glob("*.lopi") if r.name != "data.lopi"]
        if recs:
            recs[0].rename(d / "data.lopi")
        return res, None

    # --- what the record says ---------------------------------------------------------------

    def check_record(self, kind, d):
        """The record reads back, with what the probe kind records. Returns a problem or None."""
        data = d / "data.lopi"
        if not data.exists():
            return "no record written"
        if kind == "script":
            if (d / "trace.out").exists():
                text = (d / "trace.out").read_text(errors="replace")
            else:
                # A rewritten file's script: its maps are in the record.
                p = subprocess.run([self.lopi, "report", str(data), "--script"], capture_output=True, text=True)
                text = p.stdout
            return None if "@calls" in text or "@sys" in text else "the script's maps are empty"
        args = {"syscall": ["--syscalls"], "locks": ["--locks"]}.get(kind, [])
        if kind in ("block", "coverage"):
            p = subprocess.run([self.lopi, "coverage", str(data), "--format", "json"], capture_output=True, text=True)
        else:
            p = subprocess.run([self.lopi, "report", str(data), "--format", "json", *args], capture_output=True,
                               text=True)
        if p.returncode != 0:
            return "lopi report: " + (p.stderr.strip().splitlines() or ["failed"])[-1]
        try:
            report = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            return f"lopi report: not JSON ({e})"
        if kind == "syscall" and not report.get("syscalls"):
            return "no system calls recorded"
        if kind in ("entry", "time", "handler", "budget") and not report.get("total_calls"):
            return "no calls recorded"
        if kind in ("block", "coverage") and not any(f["covered"] for f in report.get("functions", [])):
            return "no block recorded as run"
        return None

    def one(self, program, kind, mode, exe, libs, native):
        label = f"{kind}-{mode}"
        d = self.dir_for(program, label)
        t0 = time.monotonic()
        self.run_seconds = None
        problem = None
        try:
            if mode == "run":
                res = self.live(program, kind, libs, d)
            elif mode == "rewrite":
                res, problem = self.rewritten(program, kind, exe, libs, d)
            else:
                if program.stdin is None and program.client is None:
                    return Outcome(program.name, kind, mode, "skipped", "no input to wait for: nothing to attach to")
                res, problem = self.attached(program, kind, libs, d)
        except subprocess.TimeoutExpired as e:
            return Outcome(program.name, kind, mode, "error", f"timed out after {e.timeout} s", time.monotonic() - t0)
        # The run's wall time with lopi's set-up (a rewritten program's: its run alone).
        seconds = self.run_seconds if self.run_seconds is not None else time.monotonic() - t0
        if res is None:
            status = "refused" if problem and any(r in problem for r in REFUSALS) else "error"
            return Outcome(program.name, kind, mode, status, problem or "", seconds)
        said = b""
        if kind == "script":
            # lopi trace says what it probes on stderr, which the program shares.
            lines = res.stderr.splitlines(keepends=True)
            said = b"".join(l for l in lines if l.startswith(b"lopi: "))
            res.stderr = b"".join(l for l in lines if not l.startswith(b"lopi: "))
        status, detail = compare(native, res, program.normalize, said if kind == "script" else None)
        if status != "same" and said:
            detail += "; " + said.decode(errors="replace").strip().splitlines()[-1][:200]
        if problem:
            status, detail = "error", "; ".join(x for x in (problem, detail) if x)
        if status == "same":
            bad = self.check_record(kind, d)
            if bad:
                status, detail = "error", bad
        out = Outcome(program.name, kind, mode, status, detail, seconds)
        if status == "same" and not self.args.no_oracles:
            out.oracle = oracles.check(self, program, kind, mode, exe, libs, d)
            if any(not o.get("equal", True) for o in out.oracle.values()):
                out.status = "oracle"
                out.detail = "; ".join(o["detail"] for o in out.oracle.values() if not o.get("equal", True))
        if out.status == "same" and not self.args.keep:
            shutil.rmtree(d, ignore_errors=True)
        return out

    def program(self, program):
        problem = self.prepare(program)
        if problem:
            return [Outcome(program.name, k, m, "skipped", problem) for k in self.args.kinds for m in self.args.modes]
        exe = os.path.realpath(shutil.which(program.argv[0]))
        libs = libraries(exe)
        native, native_s = self.native(program)
        self.log(f"{program.name}: native exit {native.code} in {native_s:.2f} s, {len(libs)} libraries")
        outs = []
        for kind in self.args.kinds:
            for mode in self.args.modes:
                if self.args.ci and kind not in CI_MODES[mode]:
                    continue
                o = self.one(program, kind, mode, exe, libs, native)
                o.native_seconds = native_s
                self.log(f"{program.name} {kind} {mode}: {o.status} {o.detail} ({o.seconds:.1f} s)")
                outs.append(o)
        return outs


def table(outcomes, elapsed, args):
    lines = ["# Probe everything: real programs under every probe kind", "",
             f"`bench/corpus/run.sh {' '.join(args.argv)}` ({elapsed:.0f} s"
             + ("; it replaced the rows of the runs it made, the others come from the table before it" if args.update else "")
             + "). Each program runs natively, then "
             "under each probe kind over every function of the program and of every library it loads: live "
             "(`lopi run`), rewritten (`lopi rewrite` of the program and its libraries, run with "
             "`LD_LIBRARY_PATH`) and attached to (`lopi attach`/`lopi trace -p`) while it waits for its input. "
             "*same*: stdout, stderr and exit status identical to the native run's, and the record reads back "
             "with what the kind records; *oracle*: an oracle's counts differ (oracles.py); *refused*: lopi "
             "refused before the program started, with the reason; *skipped*: not applicable.", ""]
    counts = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    lines.append("Totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ".")
    lines += ["", "| program | kind | mode | result | x native | oracle | detail |", "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        ratio = f"{o.seconds / o.native_seconds:.1f}" if o.native_seconds > 0 and o.status == "same" else ""
        oracle = "; ".join(f"{k}: {v['summary']}" for k, v in o.oracle.items())
        detail = o.detail.replace("|", "\\|")
        lines.append(f"| {o.program} | {o.kind} | {o.mode} | {o.status} | {ratio} | {oracle} | {detail} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ci", action="store_true", help="the CI subset of programs")
    ap.add_argument("--programs", help="comma-separated program names")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--no-oracles", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directories of runs that passed")
    ap.add_argument("--update", action="store_true",
                    help="replace the rows of the runs made (program, kind, mode) in the table already in --out, keep the rest")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--work", default=str(REPO / "work-real" / "corpus"))
    args = ap.parse_args()
    args.argv = sys.argv[1:]
    args.kinds = args.kinds.split(",")
    args.modes = args.modes.split(",")
    for k in args.kinds:
        if k not in KINDS:
            ap.error(f"no kind {k} (kinds: {', '.join(KINDS)})")
    for m in args.modes:
        if m not in MODES:
            ap.error(f"no mode {m} (modes: {', '.join(MODES)})")
    if args.programs:
        selected = corpus.by_name(args.programs.split(","))
    else:
        selected = [p for p in corpus.PROGRAMS if p.ci or not args.ci]
    if not Path(lopi_bin()).exists():
        sys.exit(f"corpus: {lopi_bin()} not found: build lopi (cargo build --release) or set LOPI")
    h = Harness(args)
    if not args.no_oracles:
        missing = h.install(ORACLE_TOOLS)
        if missing:
            sys.exit(f"corpus: the oracles need {', '.join(missing)}, which apt-get could not install "
                     "(or run with --no-oracles)")
    t0 = time.monotonic()
    outcomes = []
    for p in selected:
        outcomes += h.program(p)
    elapsed = time.monotonic() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "corpus-ci" if args.ci else "corpus"
    if args.update and (out / f"{name}.json").exists():
        ran = {(o.program, o.kind, o.mode) for o in outcomes}
        kept = [Outcome(**o) for o in json.loads((out / f"{name}.json").read_text()) if (o["program"], o["kind"], o["mode"]) not in ran]
        order = {p.name: i for i, p in enumerate(corpus.PROGRAMS)}
        outcomes = sorted(kept + outcomes, key=lambda o: order.get(o.program, len(order)))
    (out / f"{name}.md").write_text(table(outcomes, elapsed, args))
    (out / f"{name}.json").write_text(json.dumps([o.__dict__ for o in outcomes], indent=1) + "\n")
    bad = [o for o in outcomes if o.status not in ("same", "skipped", "refused")]
    print(table(outcomes, elapsed, args))
    h.log(f"{len(outcomes)} runs in {elapsed:.0f} s, {len(bad)} failed; table in {out / (name + '.md')}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
