"""The corpus: Debian programs nobody at lopi wrote, each with a deterministic workload.

A program reads its input files from the work directory the harness makes (`inputs`), and when
`stdin` names one of them, reads it from standard input: such a program can be attached to
while it waits for that input (the harness attaches, then writes it). `ci` marks the subset
`.ci/run` runs (through crates/lopi-cli/tests/real_corpus.rs).
"""
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


@dataclass
class Program:
    name: str
    kind: str
    argv: list
    # Files the workload reads, made in the work directory: {name: bytes}.
    inputs: Callable[[], dict] = lambda: {}
    # An input the program reads from stdin (attach mode writes it once the probes are in).
    stdin: Optional[str] = None
    # Debian packages to install when a command is missing: {command: package}.
    packages: dict = field(default_factory=dict)
    ci: bool = False
    env: dict = field(default_factory=dict)
    # A server: started with `argv`, then `client` runs against it, then `stop`; the outputs
    # compared are the client's and stop's.
    client: Optional[list] = None
    stop: Optional[list] = None
    # Output that is not the same from run to run (a timing line): taken out before comparing.
    normalize: Optional[Callable[[bytes], bytes]] = None
    # Shell commands run natively in the work directory before each run (state the program reads).
    setup: Optional[str] = None
    # System calls whose count depends on lopi being there, left out of the oracle's comparison,
    # and why.
    varies: tuple = ()
    varies_why: str = ""


def words(seed: int, lines: int) -> bytes:
    rng = random.Random(seed)
    vocab = ["alpha", "beta", "gamma", "delta", "lopi", "probe", "kernel", "lock", "thread", "x86",
             "trampoline", "counter", "émigré", "naïve", "日本", "0x7f", "42", "-3.5", "", "tab\tsep"]
    out = []
    for i in range(lines):
        n = rng.randint(0, 12)
        out.append(" ".join(rng.choice(vocab) for _ in range(n)) + f" {i} {rng.randint(0, 10**6)}")
    return ("\n".join(out) + "\n").encode()


def binary(seed: int, size: int) -> bytes:
    rng = random.Random(seed)
    # Compressible: runs and repeats among random bytes.
    chunks = []
    while sum(map(len, chunks)) < size:
        r = rng.random()
        if r < 0.3:
            chunks.append(bytes([rng.randrange(256)]) * rng.randint(1, 300))
        elif r < 0.6 and chunks:
            chunks.append(rng.choice(chunks)[: rng.randint(1, 200)])
        else:
            chunks.append(rng.randbytes(rng.randint(1, 120)))
    return b"".join(chunks)[:size]


TEXT = {"text.txt": words(1, 3000), "other.txt": words(2, 3000)}

# Why some programs' reads vary under lopi (gnulib's c-stack asks for the main thread's stack).
MAPS_READER = ("reads /proc/self/maps (glibc's pthread_getattr_np, for its stack-overflow handler), "
               "which lopi's mappings make longer")
BIN = {"data.bin": binary(3, 1 << 20)}

PY = b"""
import json, re, collections, hashlib
words = open('text.txt', encoding='utf-8').read().split()
c = collections.Counter(w for w in words if re.match(r'^[a-z]+$', w))
print(json.dumps(sorted(c.items())[:8]))
print(hashlib.sha256(' '.join(words).encode()).hexdigest())
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
print(fib(22))
try:
    {}['missing']
except KeyError as e:
    print('caught', e)
"""

PERL = b"""
my %c; open(my $f, '<', 'text.txt') or die; while (<$f>) { $c{$_}++ for /([a-z]+)/g }
print join(',', map { "$_=$c{$_}" } (sort keys %c)[0..5]), "\\n";
my $s = 0; $s += $_ * $_ for 1..200000; print "$s\\n";
eval { die "boom\\n" }; print "caught $@";
"""

TCL = b"""
set f [open text.txt]; set n 0; while {[gets $f line] >= 0} { incr n [llength $line] }; close $f
puts "words $n"
proc fib {n} { expr {$n < 2 ? $n : [fib [expr {$n-1}]] + [fib [expr {$n-2}]]} }
puts [fib 18]
if {[catch {error oops} msg]} { puts "caught $msg" }
"""

LUA = b"""
local n = 0
for line in io.lines('text.txt') do for _ in line:gmatch('%a+') do n = n + 1 end end
print('words', n)
local function fib(k) if k < 2 then return k end return fib(k - 1) + fib(k - 2) end
print(fib(22))
print(pcall(error, 'oops'))
"""

SQL = b"""
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 20000)
INSERT INTO t SELECT i, printf('row %d', i * 7919 % 10007), i / 3.0 FROM s;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(a), printf('%.3f', avg(c)) FROM t WHERE b LIKE 'row 1%';
SELECT b FROM t ORDER BY b DESC LIMIT 3;
"""

BC = b"scale=300\n4*a(1)\nsqrt(2)\n2^512\n"

JSON = ("[" + ",".join(f'{{"id": {i}, "name": "n{i * 37 % 101}", "tags": ["a{i % 7}", "b{i % 3}"], '
                       f'"v": {i * 1.5}}}' for i in range(5000)) + "]").encode()

GO = b"""package main

import ( "fmt"; "strings" )

type  point struct{ x, y int }
func main() {
	p := point{1,2}
	fmt.Println(strings.Repeat("lopi", 3), p)
	for i := 0; i < 3; i++ { if i%2==0 { fmt.Println(i) } }
}
"""

CPP = b"""
int main() { int x = 0; if (x = 1) { return x; }
struct S { S() { char buf[10]; buf[10] = 0; } };
"""

CMAKE = b"""
set(total 0)
foreach(i RANGE 1 400)
  math(EXPR total "${total} + ${i} * ${i}")
  string(SHA256 h "row ${i}")
endforeach()
message(STATUS "total ${total} ${h}")
file(READ text.txt content LIMIT 20000)
string(REGEX MATCHALL "[a-z]+" found "${content}")
list(LENGTH found n)
message(STATUS "words ${n}")
"""

GIT_SETUP = """set -e
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z' GIT_CONFIG_NOSYSTEM=1
git init -q -b main repo && cd repo
cp ../text.txt a.txt && git add a.txt && git commit -q -m one
sed -i 's/alpha/ALPHA/' a.txt && git commit -q -am two
cp ../other.txt b.txt && git add b.txt && git commit -q -m three
"""

SHELL = b"""
i=0; s=0
while [ $i -lt 3000 ]; do s=$((s + i * i % 7)); i=$((i + 1)); done
echo "sum $s"
for w in alpha beta gamma; do printf '%s %5.2f %x\\n' "$w" 2.5 255; done
case "lopi" in l*) echo matched;; esac
echo "$(echo nested | tr a-z A-Z)"
"""

REDIS_CLIENT = ["sh", "-c",
                "for i in $(seq 1 200); do echo \"SET k$i v$i\"; echo \"INCRBY n $i\"; done | redis-cli -p $PORT >/dev/null "
                "&& redis-benchmark -p $PORT -n 3000 -c 2 -q -t set,get,lpush,lpop >/dev/null "
                "&& redis-cli -p $PORT GET n && redis-cli -p $PORT GET k77 && redis-cli -p $PORT LLEN mylist >/dev/null"]

PROGRAMS = [
    Program("bash", "shell", ["bash", "-s"], lambda: {"script.sh": SHELL}, stdin="script.sh", ci=True),
    Program("dash", "shell", ["dash", "-s"], lambda: {"script.sh": SHELL}, stdin="script.sh"),
    Program("bash-printf", "shell", ["bash", "-c", 'printf "%s %5.2f\\n" a 2.5; printf "%d %e\\n" 42 1e300']),
    Program("sed", "text", ["sed", "-E", "s/([a-z]+) ([0-9]+)/\\2:\\1/g; /gamma/d"], lambda: TEXT, stdin="text.txt",
            ci=True),
    Program("grep", "text", ["grep", "-cE", "(lopi|probe)[^ ]* [0-9]+"], lambda: TEXT, stdin="text.txt",
            varies=("read", "mmap", "munmap"), varies_why=MAPS_READER),
    Program("mawk", "text", ["mawk", "{ n += NF; s[$1]++ } END { print n; for (k in s) c++; print c }"],
            lambda: TEXT, stdin="text.txt", ci=True),
    Program("sort", "text", ["sort", "-k2,2", "-t", " ", "-s"], lambda: TEXT, stdin="text.txt"),
    Program("diff", "text", ["diff", "text.txt", "other.txt"], lambda: TEXT,
            varies=("read", "lseek", "mmap", "munmap"), varies_why=MAPS_READER),
    Program("gzip", "compressor", ["gzip", "-9", "-n", "-c"], lambda: BIN, stdin="data.bin", ci=True),
    Program("bzip2", "compressor", ["bzip2", "-c"], lambda: BIN, stdin="data.bin"),
    Program("xz", "compressor (threads)", ["xz", "-T2", "-6", "-c"], lambda: BIN, stdin="data.bin", ci=True),
    Program("zstd", "compressor (threads)", ["zstd", "-T2", "-q", "-c", "--no-progress"], lambda: BIN,
            stdin="data.bin", packages={"zstd": "zstd"}),
    Program("pigz", "compressor (threads)", ["pigz", "-p", "2", "-n", "-c"], lambda: BIN, stdin="data.bin",
            packages={"pigz": "pigz"}),
    Program("lz4", "compressor", ["lz4", "-c", "-9"], lambda: BIN, stdin="data.bin", packages={"lz4": "lz4"}),
    Program("tar", "archiver", ["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "-cf", "-",
                                "text.txt", "other.txt", "data.bin"], lambda: {**TEXT, **BIN}),
    Program("git", "version control", ["git", "--no-pager", "-C", "repo", "log", "-p", "--stat", "--format=%H %s"],
            lambda: TEXT, setup=GIT_SETUP, packages={"git": "git"}, env={"GIT_CONFIG_NOSYSTEM": "1"}),
    Program("openssl", "crypto (assembly)", ["openssl", "enc", "-aes-256-cbc", "-K", "00" * 32, "-iv", "11" * 16],
            lambda: BIN, stdin="data.bin", ci=True, packages={"openssl": "openssl"}),
    Program("openssl-sha", "crypto (assembly)", ["openssl", "dgst", "-sha512"], lambda: BIN, stdin="data.bin",
            packages={"openssl": "openssl"}),
    Program("sha256sum", "crypto", ["sha256sum"], lambda: BIN, stdin="data.bin"),
    Program("python3.11", "interpreter", ["/usr/bin/python3.11", "-"], lambda: {"p.py": PY, **TEXT}, stdin="p.py", ci=True,
            packages={"python3.11": "python3.11"}),
    Program("perl", "interpreter", ["perl", "-"], lambda: {"p.pl": PERL, **TEXT}, stdin="p.pl"),
    Program("tclsh", "interpreter", ["tclsh"], lambda: {"p.tcl": TCL, **TEXT}, stdin="p.tcl",
            packages={"tclsh": "tcl"}),
    Program("lua", "interpreter", ["lua5.4", "-"], lambda: {"p.lua": LUA, **TEXT}, stdin="p.lua",
            packages={"lua5.4": "lua5.4"}),
    Program("sqlite3", "database", ["sqlite3", ":memory:"], lambda: {"q.sql": SQL}, stdin="q.sql", ci=True,
            packages={"sqlite3": "sqlite3"}),
    Program("bc", "calculator", ["bc", "-l", "-q"], lambda: {"in.bc": BC}, stdin="in.bc", packages={"bc": "bc"}),
    Program("jq", "json", ["jq", "-c", "[.[] | select(.id % 97 == 0) | {id, t: (.tags | join(\"+\"))}] | length, .[0]"],
            lambda: {"in.json": JSON}, stdin="in.json", packages={"jq": "jq"}),
    Program("cppcheck", "C++ (exceptions)", ["cppcheck", "--quiet", "--enable=all", "bad.cpp"],
            lambda: {"bad.cpp": CPP}, packages={"cppcheck": "cppcheck"}),
    Program("cmake", "C++", ["cmake", "-P", "script.cmake"], lambda: {"script.cmake": CMAKE, **TEXT},
            packages={"cmake": "cmake"}),
    Program("gofmt", "Go", ["/usr/local/go/bin/gofmt"], lambda: {"in.go": GO}, stdin="in.go"),
    Program("rg", "Rust", ["rg", "-c", "--no-config", "-e", "(lopi|probe) [0-9]+", "-"], lambda: TEXT,
            stdin="text.txt", packages={"rg": "ripgrep"},
            varies=("read",), varies_why=MAPS_READER),
    Program("redis", "server (threads)", ["redis-server", "--port", "$PORT", "--save", "", "--appendonly", "no",
                                          "--io-threads", "2", "--daemonize", "no"],
            packages={"redis-server": "redis-server", "redis-benchmark": "redis-tools"},
            client=REDIS_CLIENT, stop=["redis-cli", "-p", "$PORT", "shutdown", "nosave"], ci=True),
]


def by_name(names):
    table = {p.name: p for p in PROGRAMS}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"corpus: no program named {', '.join(unknown)} (known: {', '.join(table)})")
    return [table[n] for n in names]


def write_inputs(program: Program, workdir: Path):
    for name, data in program.inputs().items():
        (workdir / name).write_bytes(data)
    if program.setup:
        subprocess.run(["sh", "-c", program.setup], cwd=workdir, check=True, capture_output=True)
