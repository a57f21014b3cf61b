#!/usr/bin/env bash
# Following a process tree: what `lopi run` costs when it follows every fork and exec of a
# `make -j2` build (next to strace -f, strace -f -c, lopi --no-follow and lopi --probe entry; lopi's
# --log FILE next to strace -f -o FILE, there and on one process's loop of getppid + write), and
# whether lopi's system-call counts for a whole tree equal strace -f -c's, name by name, for ten
# commands that spawn and exec (make, git commit with a hook, tar through gzip, sh pipes, python3
# subprocess, dlopen, node child_process, find | xargs, bash subshells, perl system).
#
#   bench/tree/run.sh [--quick] [extra tree_bench.py options, e.g. --strace-runs 3]
#
# Installs strace, make, git, gzip and perl with apt-get when missing (node is used when installed,
# else its command is shown as skipped). lopi is $LOPI, else built here with
# `cargo build --release -p lopi-cli` (target/release/lopi, or $CARGO_TARGET_DIR's).
# Writes bench/results/tree.md (+ tree.runs.json with every run, tree.summary.json).
# Full: n=5, ~4-6 min on 2 CPUs. --quick: n=3, ~3 min (more on a loaded machine, and when strace's
# unpinned loop meets an idle second CPU: up to 30 s a run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc python3
bench_apt_tool strace strace || true
bench_apt_tool make make || true
bench_apt_tool git git || true
bench_apt_tool gzip gzip || true
bench_apt_tool perl perl || true

bench_lopi "$repo"
quick=()
[[ ${1:-} == --quick ]] && { quick=(--quick); shift; }
exec python3 "$here/tree_bench.py" --lopi "$LOPI" "${quick[@]}" "$@"
