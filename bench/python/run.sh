#!/usr/bin/env bash
# lopi's Python-level profile next to cProfile (issue 31: the same top five Python functions by
# inclusive time as cProfile, at a fraction of cProfile's cost, both measured), on Debian's
# /usr/bin/python3.11: fixtures/python/profile_work.py (few calls, long loops) and calls_work.py
# (call-heavy), each natively, under `python3.11 -m cProfile`, `lopi pyprofile` (199 Hz) and
# `lopi pyprofile --calls`, interleaved round-robin; the costs, the top five by inclusive time and
# lopi's call counts against cProfile's.
#
#   bench/python/run.sh [--quick] [extra profile_bench.py options, e.g. -n 3, --only calls_work]
#
# Installs Debian's python3.11 with apt-get when /usr/bin/python3.11 is missing (`python3.11` on
# PATH may be pyenv's: lopi pyprofile reads Debian's build). lopi is $LOPI, else built here with
# `cargo build --release -p lopi-cli` (target/release/lopi, or $CARGO_TARGET_DIR's).
# Writes bench/results/python-profile.md (+ python-profile.runs.json with every run).
# Full: n=5, ~20 min on 2 CPUs (lopi --calls on calls_work: ~3 min a run). --quick: n=2, ~4 min.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
if [[ ! -x /usr/bin/python3.11 ]]; then
    bench_log "installing python3.11 (apt-get): /usr/bin/python3.11 not found"
    bench_apt_update_once && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 >&2 \
        || { bench_log "could not install python3.11"; exit 1; }
fi

bench_lopi "$repo"
quick=()
[[ ${1:-} == --quick ]] && { quick=(--quick); shift; }
exec /usr/bin/python3.11 "$here/profile_bench.py" --lopi "$LOPI" "${quick[@]}" "$@"
