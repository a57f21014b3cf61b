#!/usr/bin/env bash
# What a `lopi trace` probe script costs per call, against the issue's two criteria: the count script
# `func:* { @[func] = count(); }` at most 2x `lopi run --probe entry`, the hist script
# `func:F:return { @h = hist(elapsed); }` at most `lopi run --probe entry,exit --functions F` + 10 ns;
# next to the same scripts in bpftrace (uprobes/uretprobes), Frida (Interceptor + CModule) and
# SystemTap's dyninst runtime (`stap --dyninst`).
#
#   bench/trace/run.sh [--quick] [extra trace.py options]
#
# Installs bpftrace and systemtap (apt-get) and frida (pip) when missing; a tool that cannot be
# installed or cannot run here is shown as skipped with the reason. lopi is $LOPI, else built here
# with `cargo build --release -p lopi-cli`. Writes bench/results/trace.md (+ trace.runs.json with
# every run, trace.summary.json). Runs as root (apt-get, bpftrace).
# Full: n=5, W1 loop 10M, fib(27)x20, speedtest1 --size 5 (bpftrace, Frida, SystemTap: loop 100k,
# fib(22)x10). --quick: n=3, loop 2M, fib(25)x5, size 2 (loop 20k, fib(20)x5).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 flock
bench_apt_tool bpftrace bpftrace || true
bench_apt_tool stap systemtap || true
bench_pip_module frida frida || true

bench_lopi "$repo"
sqlite_dir=$("$repo/bench/lib/fetch_sqlite.sh")
exec python3 "$here/trace.py" --lopi "$LOPI" --sqlite-dir "$sqlite_dir" "$@"
