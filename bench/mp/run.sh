#!/usr/bin/env bash
# lopi's multiprocessor analysis on the thesis's benchmark and on real Debian programs: `lopi scale
# --breakdown` (the program uninstrumented on 1, 2, ... CPUs; speedup, efficiency, Karp-Flatt, USL,
# the median serial fraction and Amdahl bound of up to three recorded runs) and `lopi run -q --probe syscall,locks` +
# `lopi report --breakdown` on 1 CPU (taskset -c 0) and on all CPUs (user, kernel, blocked, lock
# spin/blocked and other time per thread and summed; average parallelism, serial fraction); then
# `lopi whatif --kernel giant-lock`, `--kernel subsystem-locks` and `--kernel app-kernel` (the program
# recorded natively and under an emulated kernel, a spinlock around every system call that cannot
# sleep or one per subsystem, or every call made by a proxy thread on CPU 0, on 1 CPU and on all:
# speedup, user/kernel/spin shares of CPU, null system call, the app kernel's forwarded calls and
# their round trip, output identity), and mpbench calibrated to 30% user under the giant lock.
#
#   bench/mp/run.sh [--quick] [extra mp_bench.py options]
#
# Workloads: lopi's mpbench.c (the thesis's synthetic benchmark, Paper II: user loop + CPU-bound
# read of /dev/zero, calibrated to 64% user; shown beside the thesis's figures), Debian's
# `pigz -p CPUS` and `zstd -TCPUS -3` on a deterministic corpus, `postmark` (single-threaded, system-
# call heavy) and `sysbench threads`. Every recorded run's output is checked against plain runs
# (checksum line, sha256, postmark's counts, sysbench's event count). Installs pigz, zstd, postmark
# and sysbench with apt-get when missing; a workload that cannot run is shown as skipped, with why.
# lopi is $LOPI, else built here with `cargo build --release -p lopi-cli` (target/release/lopi).
# Writes bench/results/mp.md (+ mp.runs.json with every run and every breakdown report).
# Full: --runs 3 (lopi whatif --runs 3), mpbench 1 s (30:70 variant 600 ms), 64 MiB corpus, ~2 min on
# 2 CPUs without the app kernel, whose calls add more (each runs the program's calls through proxies).
# --quick: --runs 2, 300 ms (and 300 ms), 16 MiB, half the postmark and sysbench work, ~85 s, 54 s of
# it the app kernel's calls (plus lopi's build when it is out of date). A lopi whatif call that takes
# over 600 s counts as hung.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc taskset
bench_apt_tool pigz pigz || true
bench_apt_tool zstd zstd || true
bench_apt_tool postmark postmark || true
bench_apt_tool sysbench sysbench || true

py=python3
if ! command -v python3 >/dev/null || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    py=/usr/bin/python3.11
fi
bench_require "$py"

bench_lopi "$repo"
exec "$py" "$here/mp_bench.py" --lopi "$LOPI" "$@"
