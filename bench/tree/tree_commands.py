"""The commands bench/tree runs: a small C project built with `make -j2`, and ten commands that
fork, vfork and exec (each with what it needs set up once and what must be reset before every
run, so that every run does the same work)."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Callable


# ---------------------------------------------------------------- the C project


def c_project(d: Path, files: int, funcs: int) -> None:
    """FILES modules of FUNCS functions each (loops, a switch, a mixing function gcc -O2 unrolls
    and inlines: ~0.1-0.3 s of cc1 per module here), main.c calling them all, and a Makefile
    whose objects depend on the shared header. Deterministic: the same sources every run."""
    rng = random.Random(7)
    d.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(files):
        lines = ["#include <stdint.h>", '#include "proj.h"', ""]
        for j in range(funcs):
            k, m = rng.randint(3, 17), rng.randint(2, 9)
            lines += [
                f"static uint64_t mix{j}(uint64_t x) {{ x ^= x >> {k}; x *= 0x9e3779b97f4a7c15ull; return x ^ (x << {m}); }}",
                f"uint64_t m{i}_f{j}(const uint64_t *v, int n) {{",
                "    uint64_t acc[8] = {0};",
                "    for (int a = 0; a < n; a++) {",
                f"        switch ((v[a] + {j}) % 6) {{",
                f"        case 0: acc[a & 7] += mix{j}(v[a]); break;",
                f"        case 1: acc[(a + 1) & 7] ^= v[a] * {rng.randint(3, 999)}u; break;",
                f"        case 2: acc[(a + 2) & 7] -= v[a] >> {k}; break;",
                f"        case 3: for (int b = 0; b < {m}; b++) acc[b & 7] += mix{j}(v[a] + b); break;",
                f"        case 4: acc[3] = acc[3] * 31 + (v[a] % {rng.randint(3, 97)}); break;",
                "        default: acc[7] += acc[a & 7] | v[a];",
                "        }",
                "    }",
                "    uint64_t out = 0;",
                "    for (int a = 0; a < 8; a++) out = out * 131 + acc[a];",
                "    return out;",
                "}",
                ""]
            names.append(f"m{i}_f{j}")
        (d / f"mod{i}.c").write_text("\n".join(lines))
    (d / "proj.h").write_text("#include <stdint.h>\n" + "".join(f"uint64_t {n}(const uint64_t *v, int n);\n"
                                                               for n in names))
    calls = "".join(f"    h = h * 1000003u + {n}(v, 64);\n" for n in names)
    (d / "main.c").write_text('#include <stdio.h>\n#include "proj.h"\nint main(void) {\n'
                              "    uint64_t v[64], h = 0;\n    for (int i = 0; i < 64; i++) v[i] = i * 2654435761u;\n"
                              + calls + '    printf("%llu\\n", (unsigned long long)h);\n    return 0;\n}\n')
    objs = " ".join([f"mod{i}.o" for i in range(files)] + ["main.o"])
    (d / "Makefile").write_text(f"OBJS = {objs}\nprog: $(OBJS)\n\tgcc -o $@ $(OBJS)\n%.o: %.c proj.h\n"
                                "\tgcc -O2 -c -o $@ $<\nclean:\n\trm -f prog $(OBJS)\n")


def make_argv(project: Path) -> list[str]:
    # -C rather than a working directory: the harness runs every variant from its own directory
    return ["make", "-C", str(project), "--no-print-directory", "-s", "-j2"]


def make_clean(project: Path) -> None:
    subprocess.run(["make", "-C", str(project), "--no-print-directory", "-s", "clean"], check=True)


def project_output(project: Path) -> str:
    """What the program built prints: the same for every configuration's build."""
    p = subprocess.run([str(project / "prog")], capture_output=True, text=True, timeout=60)
    return f"exit {p.returncode}, prints {p.stdout.strip()}"


# ---------------------------------------------------------------- commands that spawn and exec


@dataclasses.dataclass
class Command:
    key: str
    title: str
    argv: list[str]
    cwd: Path
    needs: list[str]  # programs that must be on PATH, else the command is skipped
    setup: Callable[[], None] = lambda: None  # once
    prepare: Callable[[], None] = lambda: None  # before every run
    env: dict = dataclasses.field(default_factory=dict)  # added to every run's environment


PLUGIN_C = r"""
#include <stdlib.h>
#include <unistd.h>
int plugin_work(int n) {
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += getppid() > 0;
    return sum + system("true");
}
"""

HOST_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *plugin = dlopen(argv[1], RTLD_NOW);
    if (!plugin) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*work)(int) = (int (*)(int))dlsym(plugin, "plugin_work");
    printf("%d\n", work(50));
    return dlclose(plugin);
}
"""

PIPES_SH = """\
cat in.txt | sort | uniq -c | sort -rn | head -3 > top.txt
tr a-z A-Z < in.txt | grep -c O
ls > /dev/null
wc -l < in.txt
(echo sub; false) || echo failed
"""

NODE_JS = ("const cp = require('child_process');"
           "console.log(cp.execSync('echo hi; ls / > /dev/null').toString().trim());"
           "console.log(cp.execSync('true').length)")

PYTHON = ("import subprocess; subprocess.run(['true']); "
          "print(subprocess.check_output(['echo', 'hi']).decode().strip()); "
          "print(subprocess.run('ls | wc -l', shell=True, capture_output=True).returncode)")

PERL = 'system("true"); my $x = qx(echo hi); print $x; system("sh", "-c", "ls > /dev/null; echo sub")'

BASH_LOOP = 'for i in 1 2 3 4 5 6 7 8; do (echo $i > /dev/null); x=$(echo sub $i); done; echo "$x"'


# A commit's name depends on its dates: fixed, every run writes the same objects (and so finds the
# same .git/objects/XX directories already there or not)
GIT_DATES = {"GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=dict(os.environ, **GIT_DATES))


def commands(work: Path, project: Path) -> list[Command]:
    """The commands of the count comparison, their directories under WORK."""
    out = []

    def add(key: str, title: str, argv: list[str], needs: list[str], setup=lambda d: None, prepare=lambda d: None,
            env=None):
        d = work / key

        def setup_once() -> None:
            d.mkdir(parents=True, exist_ok=True)
            setup(d)

        out.append(Command(key, title, argv, d, needs, setup_once, lambda: prepare(d), env or {}))

    add("make", "make -j2 of the C project (make clean before each run)", make_argv(project), ["make", "gcc"],
        prepare=lambda d: make_clean(project))

    def git_setup(d: Path) -> None:
        pristine = d.with_name("git.pristine")
        pristine.mkdir()
        git(pristine, "init", "-q")
        for key, value in (("user.email", "bench@example.com"), ("user.name", "bench"),
                           ("maintenance.auto", "false"), ("gc.auto", "0")):
            git(pristine, "config", key, value)
        hook = pristine / ".git" / "hooks" / "pre-commit"
        hook.write_text("#!/bin/sh\ngit diff --cached --name-only > /dev/null\n")
        hook.chmod(0o755)
        for i in range(20):  # some history
            (pristine / f"file{i % 4}.txt").write_text(f"version {i:08d}\n")
            git(pristine, "add", ".")
            git(pristine, "commit", "-q", "-m", f"change {i}")

    def git_change(d: Path) -> None:
        # every run: the same repository, the same change staged, the same dates
        shutil.rmtree(d)
        shutil.copytree(d.with_name("git.pristine"), d, symlinks=True)
        f = d / "file0.txt"
        f.write_text("version 99999999\n")
        os.utime(f, (1.7e9, 1.7e9))  # older than the index: never "racily clean", never hashed again
        git(d, "add", "file0.txt")

    add("git", "git commit with a pre-commit hook (the same change in the same repository each run)",
        ["git", "commit", "-q", "-m", "change"], ["git"], git_setup, git_change, GIT_DATES)

    def files(d: Path) -> None:
        (d / "files").mkdir(exist_ok=True)
        for i in range(40):
            (d / "files" / f"f{i:02d}.txt").write_text(f"file {i} line\n" * (20 + 7 * i))

    add("tar", "tar czf of 40 files through gzip", ["tar", "czf", "files.tgz", "files"], ["tar", "gzip"], files,
        lambda d: (d / "files.tgz").unlink(missing_ok=True))

    def pipes_setup(d: Path) -> None:
        (d / "in.txt").write_text("".join(f"{w}\n" for w in ["one", "two", "three", "two", "four", "one", "two"] * 30))
        (d / "script.sh").write_text(PIPES_SH)

    add("sh-pipes", "sh running a script of pipelines", ["sh", "script.sh"],
        ["sh", "cat", "sort", "uniq", "head", "tr", "grep"], pipes_setup,
        lambda d: (d / "top.txt").unlink(missing_ok=True))  # ls then lists the same files every run
    add("python", "python3 -c: subprocess.run, check_output, shell=True", ["python3", "-c", PYTHON], ["python3"])

    def dlopen_setup(d: Path) -> None:
        (d / "plugin.c").write_text(PLUGIN_C)
        (d / "host.c").write_text(HOST_C)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", "plugin.so", "plugin.c"], cwd=d, check=True)
        subprocess.run(["gcc", "-O2", "-o", "host", "host.c", "-ldl"], cwd=d, check=True)

    add("dlopen", "a program that dlopens a plugin which calls system()", [str(work / "dlopen" / "host"),
                                                                         str(work / "dlopen" / "plugin.so")],
        ["gcc"], dlopen_setup)
    add("node", "node -e: child_process.execSync", ["node", "-e", NODE_JS], ["node"])
    add("find-xargs", "sh -c: find | sort | xargs wc -l", ["sh", "-c", "find . -name '*.txt' | sort | xargs wc -l | tail -1"],
        ["sh", "find", "sort", "xargs", "wc", "tail"], files)
    add("bash-subshells", "bash -c: a loop of subshells and $(...)", ["bash", "-c", BASH_LOOP], ["bash"])
    add("perl", "perl -e: system, qx, system with a list", ["perl", "-e", PERL], ["perl", "sh"])
    return out


def missing(cmd: Command) -> list[str]:
    return [p for p in cmd.needs if not shutil.which(p)]
