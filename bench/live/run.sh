#!/usr/bin/env bash
# Live splicing: `lopi attach PID` on a running, busy process (10,000 small functions called in a
# loop by 2 threads), next to bpftrace uprobes and Frida's Interceptor attaching to the same process.
#
#   bench/live/run.sh [--quick] [extra live.py options]
#
# Measures, per tool and set of functions: the time from launching the tool until its probes are live,
# how long the process is paused (lopi's own figures; a ~1 ms sampling of the workload's counters for
# every tool), the detach time, the cost per probe hit (the workload's throughput with and without the
# probes, in the same process), the calls counted against the workload's own count, and that the code
# pages equal the file again after detaching (/proc/PID/mem vs the binary).
# Generates and builds the workload once (work-real/bench-build/live/, cached by a hash of its source);
# lopi is $LOPI, else built here with `cargo build --release -p lopi-cli` (target/release/lopi).
# Installs bpftrace (apt-get) and frida (pip) when missing; what cannot run is shown as skipped.
# Writes bench/results/live.md and live.json.
# Full: n=5, lopi entry and entry,exit on all functions and on the subset f0* (1,000 functions);
# bpftrace (f0*) n=1, as it removes its uprobes one by one (~0.3 s each here: ~5.5 min): ~9-10 min.
# --quick: n=3, entry probes, subset f00* (100 functions): ~2-3 min.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc nm python3
bench_apt_tool bpftrace bpftrace || true
bench_pip_module frida frida || true

bench_lopi "$repo"
exec python3 "$here/live.py" --lopi "$LOPI" "$@"
