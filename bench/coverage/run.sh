#!/usr/bin/env bash
# What lopi's basic-block probes cost: `--probe coverage` (whether each block ran) and `--probe block`
# (every block counted) written into a copy of the program by `lopi rewrite`, and coverage spliced in
# at start-up by `lopi run -q`, next to the native program, gcc's `--coverage` build (gcov) and
# valgrind (lackey --basic-counts=yes, callgrind --collect-jumps=yes; full mode only, once each).
# At the function level: `--probe entry:mark` (whether each function ran), rewritten and under
# `lopi run -q`, beside `--probe entry` (every call counted); which functions ran is checked against
# coverage mode's entry blocks (functions_ran.py).
#
#   bench/coverage/run.sh [--quick] [extra coverage.py options]
#
# Workloads: sqlite's speedtest1 (bench/lib/fetch_sqlite.sh, built -O2 as bench/budget, and once more
# with --coverage) and Debian's /usr/bin/zstd `-q -T1 -3 -c` of a deterministic corpus in /dev/shm
# (gcov: zstd's Debian source package, bench/lib/fetch_zstd.sh, built with and without --coverage).
# Every configuration runs interleaved with the native program; outputs are checked (speedtest1's
# output without times, zstd's sha256). Also measures `lopi run`'s start-up on a trivial run.
# lopi is $LOPI, else built here with `cargo build --release -p lopi-cli` (target/release/lopi).
# Writes bench/results/coverage.md (+ coverage.runs.json with every run).
# Full: n=5, speedtest1 --size 120 (~1.5 s), 64 MiB corpus, valgrind once per workload, every block of
# coverage mode checked against block mode's counts; ~15 min on 2 CPUs (33 min on a slower Xeon,
# 20 of them valgrind's lackey). --quick: n=3, --size 40, 16 MiB, no valgrind, blocks screened by
# function totals; ~2 min. (First run: + the builds, ~2 min on 2 CPUs.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc make flock
bench_apt_tool zstd zstd || true
bench_apt_tool valgrind valgrind || true

py=python3
if ! command -v python3 >/dev/null || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    py=/usr/bin/python3.11
fi
bench_require "$py"

bench_lopi "$repo"
sqlite_dir=$("$repo/bench/lib/fetch_sqlite.sh")
# zstd's source package is for the gcov column only: without it that cell says n/a
zstd_paths=()
if paths=$("$repo/bench/lib/fetch_zstd.sh"); then
    zstd_paths=(--zstd-paths "$paths")
else
    bench_log "no zstd source (bench/lib/fetch_zstd.sh failed): zstd's gcov cell will say n/a"
fi
exec "$py" "$here/coverage.py" --lopi "$LOPI" --sqlite-dir "$sqlite_dir" "${zstd_paths[@]}" "$@"
