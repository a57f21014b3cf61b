#!/usr/bin/env bash
# A service under `lopi agent`: the throughput of a TCP server (server.c, one thread per connection,
# loaded by client.c's 2 connections) natively, under `lopi agent --probe entry,exit --push URL
# --every 5s` with the push's default budget (2% of CPU time; issue 32's goal: within 5% of native), under the
# agent with --probe entry, and under `lopi attach --probe entry,exit` (no push, no budget), the
# agent's own CPU use and the windows it pushed to a real OpenTelemetry Collector.
#
#   bench/agent/run.sh [--quick] [extra agent_bench.py options, e.g. --seconds 30]
#
# The collector is built once per machine by crates/lopi-cli/tests/otel/build-collector.sh (Go at
# /usr/local/go/bin or on PATH; cached in ~/.cache/lopi-tests/); without it the agent's
# configurations are shown as skipped, with the reason. lopi is $LOPI, else built here with
# `cargo build --release -p lopi-cli` (target/release/lopi, or $CARGO_TARGET_DIR's).
# Writes bench/results/agent.md (+ agent.runs.json with every run, agent.summary.json).
# Full: n=5, 15 s of load per run, ~6.5 min on 2 CPUs. --quick: n=3, 8 s, ~2.5 min.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3 flock

bench_lopi "$repo"
# One run at a time on this machine, whichever work tree it runs from: they pin the same CPU.
exec 9>/tmp/lopi-bench-agent.lock
flock -n 9 || { bench_log "another bench/agent runs; waiting for it"; flock 9; }
quick=()
[[ ${1:-} == --quick ]] && { quick=(--quick); shift; }
exec python3 "$here/agent_bench.py" --lopi "$LOPI" "${quick[@]}" "$@"
