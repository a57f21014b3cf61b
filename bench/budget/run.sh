#!/usr/bin/env bash
# The perturbation budget: sqlite's speedtest1 with every function timed, with and without
# `--budget`, next to the uninstrumented program and to entry counting.
#
#   bench/budget/run.sh [--quick] [extra budget.py options]
#
# Builds speedtest1 (bench/lib/fetch_sqlite.sh), rewrites it with target/release/lopi (or $LOPI),
# runs every configuration interleaved and writes bench/results/budget.md (+ budget.runs.json):
# time, ratio to the uninstrumented run, functions switched, and how many of the full-timing
# run's top functions by inclusive time the budgeted run still names.
# Full: n=5, --size 25. --quick: n=3, --size 10.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 flock

sqlite_dir=$("$repo/bench/lib/fetch_sqlite.sh")
exec python3 "$here/budget.py" --sqlite-dir "$sqlite_dir" "$@"
