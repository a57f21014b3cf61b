#!/usr/bin/env bash
# Cost of timing every call: lopi --probe entry,exit (exact and --time sampled, and --probe entry
# counting) vs uftrace vs gcc -finstrument-functions with a timing hook vs the uninstrumented program,
# next to the measured floor (two rdtsc per call).
#
#   bench/timing/run.sh [--quick] [extra timing.py options]
#
# Builds W1 (bench/workloads/w1.c) and sqlite's speedtest1 (bench/lib/fetch_sqlite.sh) plain, -pg,
# -fpatchable-function-entry=5 and -finstrument-functions (cached in work-real/bench-build/cache/),
# installs uftrace with apt-get when it is missing, rewrites with target/release/lopi (or $LOPI) when
# its `rewrite --help` lists --probe, runs everything interleaved (floor.c included, once per round)
# and writes bench/results/timing.md (+ timing.runs.json with every run).
# Full: n=5, fib(30)x10, loop 30M, speedtest1 --size 10. --quick: n=3, fib(28)x10, loop 10M, size 5.
# The first run also builds sqlite three more times (~3-5 min on 2 CPUs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 flock
bench_apt_tool uftrace uftrace || true

sqlite_dir=$("$repo/bench/lib/fetch_sqlite.sh")
exec python3 "$here/timing.py" --sqlite-dir "$sqlite_dir" "$@"
