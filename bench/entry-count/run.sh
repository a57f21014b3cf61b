#!/usr/bin/env bash
# Entry-count probe cost: lopi vs uninstrumented vs gcc -finstrument-functions (count hook).
#
#   bench/entry-count/run.sh [--quick] [extra entry_count.py options]
#
# Builds W1 (bench/workloads/w1.c) and sqlite's speedtest1 (fetched with `apt-get source sqlite3`
# into work-real/, built once and cached in work-real/bench-build/), rewrites them with
# target/release/lopi (or $LOPI) when it exists, runs everything interleaved and writes
# bench/results/entry-count.md (+ entry-count.runs.json with every run).
# Full: n=5, fib(32)x10, loop 100M, speedtest1 --size 25. --quick: n=3, fib(30)x10, loop 30M, size 10.
# The first run also builds sqlite twice (~2 min on 2 CPUs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 flock

sqlite_dir=$("$repo/bench/lib/fetch_sqlite.sh")
exec python3 "$here/entry_count.py" --sqlite-dir "$sqlite_dir" "$@"
