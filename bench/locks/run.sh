#!/usr/bin/env bash
# What lopi's lock probes cost: `lopi run -q --probe locks` next to valgrind's drd and bpftrace
# uprobes on glibc's pthread_mutex_lock/unlock (mutex.bt), each recording every lock call.
#
#   bench/locks/run.sh [--quick] [extra locks_bench.py options]
#
# Measures the ns added per uncontended pthread_mutex_lock+unlock pair (pair.c, built here), and the
# run time of Debian's `sysbench mutex`, `sysbench threads` (2 threads each; sysbench's total time)
# and `pigz -p 2` compressing a deterministic 64 MiB corpus (wall time), with each tool; checks the
# programs' outputs (sysbench's event count, pigz's sha256) and the tools' lock counts, and lists
# the top locks of lopi's report. Installs sysbench, pigz, valgrind and bpftrace with apt-get when
# missing; a tool that cannot be installed or cannot run here is shown with the reason.
# lopi is $LOPI, else built here with `cargo build --release -p lopi-cli` (target/release/lopi).
# Writes bench/results/locks.md (+ locks.runs.json with every run).
# Full: n=5, ~2.5 min on 2 CPUs. --quick: n=3, a quarter of the work, a 16 MiB corpus, ~40 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3
bench_apt_tool sysbench sysbench || true
bench_apt_tool pigz pigz || true
bench_apt_tool valgrind valgrind || true
bench_apt_tool bpftrace bpftrace || true

bench_lopi "$repo"
exec python3 "$here/locks_bench.py" --lopi "$LOPI" "$@"
