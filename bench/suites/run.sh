#!/usr/bin/env bash
# Correctness suite: every real program (sqlite3, sqlite's testfixture, zstd, their Debian
# builds and libraries) rewritten at every function in every lopi mode, run through its own
# tests or a battery of real commands next to the original; any difference fails.
#
#   bench/suites/run.sh [--quick] [--mode entry|timing|trace|live|all] [--program NAME ...]
#                       [--keep] [--timeout SECS] [--list]
#
# --quick: without zstd's playTests.sh and with 1 in 10 of sqlite's test files (~6 min);
# the full run takes ~13-15 min on 2 CPUs.  Programs are prepared (fetched, built, cached in
# work-real/ or $LOPI_REAL_WORK) by tests/real/prepare.sh; lopi is $LOPI, else built here with
# `cargo build --release -p lopi-cli` (target dir: $CARGO_TARGET_DIR or target/).
# Writes bench/results/suites.md; exit 1 when anything differs.  See bench/suites/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
WORK=${LOPI_REAL_WORK:-$repo/work-real}

for a in "$@"; do
    case $a in -h|--help|--list) exec python3 "$here/suites.py" --lopi=lopi --work="$WORK" "$@" ;; esac
done

for tool in python3 bash diff flock; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 1; }
done

mkdir -p "$WORK/logs"
echo "[suites] preparing the programs (tests/real/prepare.sh $WORK; log in $WORK/logs/suites-prepare.log)"
if ! bash "$repo/tests/real/prepare.sh" "$WORK" > "$WORK/logs/suites-prepare.log" 2>&1; then
    tail -n 30 "$WORK/logs/suites-prepare.log" >&2
    echo "run.sh: tests/real/prepare.sh failed (it needs Debian's apt repositories and root)" >&2
    exit 1
fi

if [[ -z ${LOPI:-} ]]; then
    echo "[suites] building lopi (cargo build --release -p lopi-cli)"
    (cd "$repo" && cargo build --release -q -p lopi-cli)
    LOPI=${CARGO_TARGET_DIR:-$repo/target}/release/lopi
    case $LOPI in /*) ;; *) LOPI=$repo/$LOPI ;; esac
fi
[[ -x $LOPI ]] || { echo "run.sh: no lopi binary at $LOPI" >&2; exit 1; }
echo "[suites] lopi: $LOPI ($("$LOPI" --version))"

exec python3 "$here/suites.py" --lopi="$LOPI" --work="$WORK" "$@"
