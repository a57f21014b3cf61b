#!/usr/bin/env bash
# The anchors next to lopi: gprof (gcc -pg), valgrind's callgrind (also the call-count oracle),
# bpftrace uprobes and Frida's Interceptor, on W1 and speedtest1.
#
#   bench/anchors/run.sh [--quick] [extra anchors.py options]
#
# Installs valgrind and bpftrace (apt-get) and frida (pip) when missing; an anchor that cannot be
# installed or cannot run here is shown as skipped with the reason. Writes bench/results/anchors.md
# (+ anchors.runs.json with every run, anchors.summary.json for bench/run.sh's summary).
# Full: n=5, fib(27)x10, loop 500k, speedtest1 --size 5. --quick: n=3, fib(24)x10, loop 100k, size 2.
# (bpftrace single-steps tiny()'s first instruction: ~10+ us per call in a VM, hence the small loop.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 flock
bench_apt_tool valgrind valgrind || true
bench_apt_tool bpftrace bpftrace || true
bench_pip_module frida frida || true

sqlite_dir=$("$repo/bench/lib/fetch_sqlite.sh")
exec python3 "$here/anchors.py" --sqlite-dir "$sqlite_dir" "$@"
