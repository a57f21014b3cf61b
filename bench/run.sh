#!/usr/bin/env bash
# All of lopi's benchmarks, one command:
#
#   bench/run.sh [--quick] [--against REV]
#
# --against REV builds lopi at git revision REV beside today's tree (bench/lib/build_against.sh)
# and runs the same probes with it in the same rounds in the entry-count and timing benchmarks:
# their tables get its column and an "Against REV" section, where a regression shows as a ratio
# measured in one run (today's fastest run slower than REV's slowest: **REGRESSION**).
#
# 1. installs the anchors it can: uftrace, valgrind, bpftrace (apt-get), frida and matplotlib (pip);
#    what cannot be installed is shown as skipped, with the reason, in the tables;
# 2. runs bench/entry-count, bench/timing, bench/zstd and bench/anchors (each fetches and builds its
#    workloads once: sqlite and zstd from Debian's sources, Debian's stripped zstd; cached in work-real/),
#    then bench/live, bench/syscall (system calls vs strace/perf/bpftrace), bench/trace (lopi trace
#    scripts vs bpftrace/Frida/SystemTap), bench/trace/corpus.sh (bpftrace's own scripts run
#    unchanged under lopi trace and bpftrace, results compared), bench/tree (following a make -j2 tree vs strace -f; whole
#    trees' system-call counts vs strace -f -c) and bench/agent (a TCP server's throughput under
#    `lopi agent --push` against native; builds the tests' OpenTelemetry Collector once), their own
#    tables only;
# 3. writes bench/results/summary.md (one table: workload x tool, median [min-max], x baseline, calls,
#    ns/call, output check; machine and versions) and bench/results/overhead.png (ns/call by tool, log).
#
# Full: ~15-25 min on 2 CPUs, + ~8 min of bench/agent; --quick: ~5 min, + ~3 min of bench/agent
# (first run: + ~5-10 min of builds, + ~3 min for the collector when Go is there).
# A benchmark that fails does not stop the others; the summary says which one has no results, and
# bench/run.sh exits non-zero. Each benchmark's stdout (its table) is kept in
# work-real/bench-build/logs/<name>.out; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

quick=()
against=""
while (($#)); do
    case $1 in
        --quick) quick=(--quick) ;;
        --against) against=${2:?--against needs a revision}; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "usage: bench/run.sh [--quick] [--against REV]" >&2; exit 2 ;;
    esac
    shift
done
if [[ -n $against ]]; then
    LOPI_AGAINST=$("$here/lib/build_against.sh" "$against")
    LOPI_AGAINST_REV=$(git -C "$repo" rev-parse --short "$against")
    export LOPI_AGAINST LOPI_AGAINST_REV
fi

. "$repo/bench/lib/install.sh"
bench_require gcc make python3 flock
bench_apt_tool uftrace uftrace || true
bench_apt_tool valgrind valgrind || true
bench_apt_tool bpftrace bpftrace || true
bench_pip_module frida frida || true
bench_pip_module matplotlib matplotlib || true

export LOPI_BENCH_RUN_ID="$(date +%Y%m%d-%H%M%S)-$$"
load=$(cut -d' ' -f1-3 /proc/loadavg)
logs="$repo/work-real/bench-build/logs"
mkdir -p "$logs"
t0=$(date +%s)
failed=()
for b in entry-count timing zstd anchors live syscall trace trace-corpus tree agent; do
    bench_log "=== $b ${quick[*]} ($(( $(date +%s) - t0 )) s so far, load $(cut -d' ' -f1-3 /proc/loadavg))"
    runner=$here/$b/run.sh
    [[ $b == trace-corpus ]] && runner=$here/trace/corpus.sh
    if ! "$runner" "${quick[@]}" > "$logs/$b.out"; then
        bench_log "$b FAILED (its table is not in the summary; output in $logs/$b.out)"
        failed+=("$b")
    fi
done
elapsed=$(( $(date +%s) - t0 ))
python3 "$here/lib/summary.py" --run-id "$LOPI_BENCH_RUN_ID" "${quick[@]}" --elapsed "$elapsed" --load "$load" \
    || failed+=(summary)
bench_log "done in ${elapsed} s${failed:+; failed: ${failed[*]}}"
((${#failed[@]} == 0))
