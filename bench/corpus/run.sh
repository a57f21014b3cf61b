#!/usr/bin/env bash
# Probe everything: Debian programs under every probe kind, live, rewritten and attached to.
#
#   bench/corpus/run.sh [--ci] [--programs a,b] [--kinds k,..] [--modes m,..] [--no-oracles] [--keep]
#
# Builds lopi (or uses $LOPI); corpus.py installs what it needs (gdb and perf, the oracles; each
# program's own package when missing) and writes bench/results/corpus.md (corpus-ci.md with --ci).
# Full: ~30 programs x 9 kinds x 3 modes; --ci: the subset CI runs (real_corpus.rs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/bench/lib/install.sh"
bench_require python3
bench_lopi "$repo"
export LOPI
exec python3 "$here/corpus.py" "$@"
