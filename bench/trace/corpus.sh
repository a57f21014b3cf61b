#!/usr/bin/env bash
# bpftrace's own scripts, run unchanged under `lopi trace` and under bpftrace on the same
# deterministic workloads, their results compared (issue 31's corpus criterion):
#
#   bench/trace/corpus.sh [--quick] [--only NAME,...] [--out FILE]   (--quick: no -p runs)
#
# bench/trace/corpus/*.bt: the user-space and system-call one-liners of bpftrace's tutorial and
# reference guide, bpftrace's tools as Debian ships them (opensnoop.bt, killsnoop.bt,
# bashreadline.bt, gethostlatency.bt, ...), one-liners on a fixture, scripts for Debian programs
# (bash, sqlite3, grep -P, jq, sort). Each runs as `lopi trace --format json FILE -- PROG` and
# `bpftrace -f json FILE -c PROG`, some also both attached (`-p PID`); see corpus.py.
#
# Installs bpftrace, sqlite3 and jq (apt-get) when missing; without bpftrace lopi's side still
# runs and the table says why bpftrace's did not. lopi is $LOPI, else built here with
# `cargo build --release -p lopi-cli`. Builds its fixtures in /tmp/lopi-corpus (the scripts name
# them by that path). Writes bench/results/trace-corpus.md (+ .json). Runs as root (apt-get,
# bpftrace); ~1-2 min on 2 CPUs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 bash grep sort
bench_apt_tool bpftrace bpftrace || true
bench_apt_tool sqlite3 sqlite3
bench_apt_tool jq jq

bench_lopi "$repo"
export LOPI
exec python3 "$here/corpus.py" "$@"
