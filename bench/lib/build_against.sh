#!/usr/bin/env bash
# Builds lopi at git revision REV beside today's tree, for `bench/run.sh --against REV`:
#
#   bench/lib/build_against.sh REV      prints the path of REV's release lopi on stdout
#
# The source is REV's tree (`git archive`) in work-real/against/<commit>/, built once with its
# own Cargo.lock and target directory; a second call only prints the path.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
rev=${1:?usage: build_against.sh REV}
commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}") || { echo "build_against: no revision $rev" >&2; exit 1; }
dir="$repo/work-real/against/$commit"
lopi="$dir/target/release/lopi"
if [[ ! -x $lopi ]]; then
    echo "build_against: building lopi at $rev ($commit) in $dir" >&2
    rm -rf "$dir.tmp"
    mkdir -p "$dir.tmp"
    git -C "$repo" archive "$commit" | tar -x -C "$dir.tmp"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    (cd "$dir" && CARGO_TARGET_DIR="$dir/target" cargo build --release -q -p lopi-cli >&2)
fi
echo "$lopi"
