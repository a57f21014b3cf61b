#!/usr/bin/env bash
# Run a list of sqlite's own TCL test files with a given testfixture binary.
#
#   tests/real/sqlite-testfixture.sh TESTFIXTURE SQLITE_SRC_DIR [LIST_FILE] [JOBS]
#
# LIST_FILE defaults to tests/real/sqlite-tests.txt (one path a line relative to
# SQLITE_SRC_DIR, '#' comments).  Each file runs in a fresh scratch directory,
# JOBS (default: nproc) at a time, with a 300 s timeout.  Prints one line per
# file, in list order:
#     test/select1.test rc=0 errors=0 tests=193
# which does not depend on timing, host name or memory addresses, so the
# output of an original and a rewritten testfixture can be diffed.  The last
# line is a summary; the exit code is 0 only when every file had rc=0.
set -u
TF=${1:?usage: sqlite-testfixture.sh TESTFIXTURE SQLITE_SRC_DIR [LIST_FILE] [JOBS]}
SRC=${2:?usage: sqlite-testfixture.sh TESTFIXTURE SQLITE_SRC_DIR [LIST_FILE] [JOBS]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIST=${3:-$here/sqlite-tests.txt}
JOBS=${4:-$(nproc)}
case $TF in /*) ;; *) TF=$PWD/$TF ;; esac
SRC=$(cd "$SRC" && pwd)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
export TF SRC SCRATCH

run_one() {  # run_one INDEX PATH
    local i=$1 f=$2 d="$SCRATCH/w$1"
    mkdir -p "$d"
    ( cd "$d" && timeout 300 "$TF" "$SRC/$f" > out.txt 2>&1 ); local rc=$?
    local sum
    sum=$(grep -E -m1 '^[0-9]+ errors out of [0-9]+ tests' "$d/out.txt" | awk '{print "errors="$1" tests="$5}')
    [[ -n $sum ]] || sum="errors=? tests=?"
    printf '%s rc=%s %s\n' "$f" "$rc" "$sum" > "$SCRATCH/r$i"
    if [[ $rc != 0 ]]; then
        # keep the failing log for inspection, outside the scratch dir
        cp "$d/out.txt" "$SCRATCH/log$i"
    fi
    rm -rf "$d"
}
export -f run_one

grep -v -E '^[[:space:]]*(#|$)' "$LIST" | awk '{print NR" "$1}' \
    | xargs -P "$JOBS" -n 2 bash -c 'run_one "$0" "$1"'

n=0; bad=0
total_tests=0
for r in $(ls "$SCRATCH" | grep -E '^r[0-9]+$' | sed 's/^r//' | sort -n); do
    line=$(cat "$SCRATCH/r$r")
    echo "$line"
    n=$((n + 1))
    if [[ $line != *" rc=0 "* ]]; then
        bad=$((bad + 1))
        echo "----- log of ${line%% *} (last 30 lines)"
        tail -n 30 "$SCRATCH/log$r" | sed 's/^/    /'
    else
        t=${line##*tests=}
        total_tests=$((total_tests + t))
    fi
done
echo "testfixture summary: files=$n failed_files=$bad test_cases_in_passing_files=$total_tests"
[[ $bad == 0 ]]
