#!/usr/bin/env bash
# zstd's own test suites, run against a given zstd binary:
#
#   tests/real/zstd-playtests.sh ZSTD_BIN DATAGEN_BIN ZSTD_SRC_DIR [cli|play|all]
#
#  cli:  tests/cli-tests/run.py (37 cases; each compares exit code, stdout and
#        stderr with the expected files shipped in the source: exact, glob or
#        ignored per case).
#  play: tests/playTests.sh without --test-large-data (upstream's "shortest"
#        configuration: make -C tests shortest); `set -e` script, ~1800 lines of
#        round trips, dictionaries, formats, file handling, MT, LDM, benchmarks.
#        Its console output carries timings and progress meters, so what this
#        script prints is only the suite's own headings ("===> ...", "test : ...",
#        "roundTripTest: ...") and the exit code.  Nothing is excluded, except
#        what playTests itself skips without --test-large-data and without
#        sudo (DEVNULLRIGHTS, READFROMBLOCKDEVICE unset).
# Everything runs in a scratch directory; the source tree is not written to.
# The printed output is deterministic; the exit code is 0 when all passed.
set -u
ZSTD=${1:?usage: zstd-playtests.sh ZSTD_BIN DATAGEN_BIN ZSTD_SRC_DIR [cli|play|all]}
DATAGEN=${2:?}
SRC=${3:?}
WHAT=${4:-all}
case $ZSTD in /*) ;; *) ZSTD=$PWD/$ZSTD ;; esac
case $DATAGEN in /*) ;; *) DATAGEN=$PWD/$DATAGEN ;; esac
SRC=$(cd "$SRC" && pwd)
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
export LC_ALL=C
unset ZSTD_CLEVEL ZSTD_NBTHREADS
status=0

if [[ $WHAT == cli || $WHAT == all ]]; then
    # run.py finds the repository through its own location (../..)
    mkdir -p "$S/cli/tests" "$S/cli/programs"
    cp -a "$SRC/tests/cli-tests" "$SRC"/tests/golden-* "$SRC/tests/dict-files" "$S/cli/tests/"
    cp -a "$SRC/programs/zstdgrep" "$SRC/programs/zstdless" "$S/cli/programs/"
    (cd "$S/cli/tests/cli-tests" && python3 ./run.py --timeout 300 \
        --zstd "$ZSTD" --datagen "$DATAGEN" \
        --zstdgrep "$S/cli/programs/zstdgrep" --zstdless "$S/cli/programs/zstdless") \
        > "$S/cli.log" 2>&1
    rc=$?
    echo "=== cli-tests"
    grep -E '^(PASS|FAIL): [^ ]+$' "$S/cli.log" | sort -u
    grep -E '^(PASSED|FAILED) ' "$S/cli.log"
    echo "cli-tests rc=$rc"
    if [[ $rc != 0 ]]; then
        status=1
        echo "----- cli-tests failures:"
        awk '/^FAIL/{p=1} p' "$S/cli.log" | head -n 80 | sed 's/^/    /'
    fi
fi

if [[ $WHAT == play || $WHAT == all ]]; then
    mkdir -p "$S/play"
    (cd "$S/play" && ZSTD_BIN="$ZSTD" DATAGEN_BIN="$DATAGEN" bash "$SRC/tests/playTests.sh") \
        > "$S/play.log" 2>&1 < /dev/null
    rc=$?
    echo "=== playTests.sh (shortest)"
    grep -E '^(===>|test|roundTripTest:|fileRoundTripTest:|Skipping)' "$S/play.log"
    echo "playTests rc=$rc"
    if [[ $rc != 0 ]]; then
        status=1
        echo "----- playTests.sh: last 40 lines"
        tail -n 40 "$S/play.log" | sed 's/^/    /'
    fi
fi
exit $status
