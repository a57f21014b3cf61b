#!/usr/bin/env bash
# zstd (Debian's source package built with Debian's flags, and Debian's stripped binary) under lopi
# --probe entry / entry,exit, uftrace and gcc -finstrument-functions hooks, next to the
# uninstrumented program: compression and decompression of a fixed datagen corpus.
#
#   bench/zstd/run.sh [--quick] [extra zstd_bench.py options]
#
# Fetches zstd (bench/lib/fetch_zstd.sh, reusing tests/real/prepare.sh's work-real/ when present),
# builds the -finstrument-functions variants once (cached in work-real/bench-build/cache/), rewrites
# with target/release/lopi (or $LOPI), runs everything interleaved and writes bench/results/zstd.md
# (+ zstd.runs.json with every run, zstd.summary.json for bench/run.sh's summary).
# Full: n=5, 64 MB corpus. --quick: n=3, 16 MB. The first run builds zstd twice (~3-5 min on 2 CPUs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc make python3 flock
bench_apt_tool uftrace uftrace || true

paths=$("$repo/bench/lib/fetch_zstd.sh")
exec python3 "$here/zstd_bench.py" --paths "$paths" "$@"
