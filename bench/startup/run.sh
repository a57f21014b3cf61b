#!/usr/bin/env bash
# Start-up: the zstd battery (~245 short zstd processes) under `lopi run` (plan cache warm, and
# LOPI_CACHE=off) next to the rewritten zstd and the original; one short zstd process; `lopi
# rewrite` of gcc's cc1 with and without the plan cache.
#
#   bench/startup/run.sh [--quick] [extra startup.py options, e.g. --work DIR]
#
# The programs come from tests/real/prepare.sh (work-real/paths.env; run first when missing).
# lopi is $LOPI, else built here with `cargo build --release -p lopi-cli` (target/release/lopi).
# Writes bench/results/startup.md and startup.json.
# Full: n=5, the source-built and Debian's zstd, 50 processes per single-process run: ~15 min.
# --quick: n=3, the source-built zstd only, 20 processes: ~4-5 min.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 bash md5sum

if [[ ! -f $repo/work-real/paths.env ]]; then
    bench_log "preparing the programs (tests/real/prepare.sh)"
    bash "$repo/tests/real/prepare.sh" "$repo/work-real" >&2
fi
if [[ -z ${LOPI:-} ]]; then
    LOPI=${CARGO_TARGET_DIR:-$repo/target}/release/lopi
    case $LOPI in /*) ;; *) LOPI=$repo/$LOPI ;; esac
    bench_log "building lopi (cargo build --release -p lopi-cli)"
    (cd "$repo" && cargo build --release -q -p lopi-cli >&2)
fi
exec python3 "$here/startup.py" --lopi "$LOPI" "$@"
