#!/usr/bin/env bash
# What lopi's system-call probes cost: `lopi run --probe syscall` next to strace -c, perf trace -s and
# bpftrace (raw_syscalls tracepoints), all counting and timing every system call.
#
#   bench/syscall/run.sh [--quick] [extra syscall_bench.py options]
#
# Measures the ns added per getppid() (getppid.c, built here; under lopi with its catch of calls from
# unprobed code on and off, and alone with Syscall User Dispatch on), per getppid() from machine code
# written at run time (getppid_jit.c: lopi catches those calls with Syscall User Dispatch, following
# the tree or not, with --catch-unprobed, or leaves them out without it), and the wall time of Debian's zstd
# compressing 2,000 small files and of Debian's sqlite3 doing 3,000 INSERT transactions with
# synchronous=FULL (in a tmpfs scratch directory); compares lopi's per-syscall counts with strace's.
# Installs strace, zstd, sqlite3, perf and bpftrace with apt-get when missing; a tool that cannot be
# installed or cannot run here is shown with the reason.
# lopi is $LOPI, else built here with `cargo build --release -p lopi-cli` (target/release/lopi).
# Writes bench/results/syscall.md (+ syscall.runs.json with every run, syscall.summary.json).
# Full: n=5, ~3.5 min on 2 CPUs. --quick: n=3, a third of the getppid calls, 500 files, 1,000 inserts, ~1 min.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3
bench_apt_tool strace strace || true
bench_apt_tool zstd zstd || true
bench_apt_tool sqlite3 sqlite3 || true
bench_apt_tool perf linux-perf || true
bench_apt_tool bpftrace bpftrace || true

bench_lopi "$repo"
exec python3 "$here/syscall_bench.py" --lopi "$LOPI" "$@"
