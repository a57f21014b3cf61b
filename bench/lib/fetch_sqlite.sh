#!/usr/bin/env bash
# Provide sqlite's amalgamation (sqlite3.c, sqlite3.h) and test/speedtest1.c from Debian's source
# package (`apt-get source sqlite3`), built into the git-ignored work-real/ directory.
#
# Usage: bench/lib/fetch_sqlite.sh     prints the directory holding sqlite3.c, sqlite3.h,
#                                      speedtest1.c and SOURCE.txt (package version) on stdout.
# Idempotent: a second call only prints the directory. Enables deb-src once if apt has none.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
top="$repo/work-real/bench-sqlite"
. "$repo/bench/lib/install.sh"
out="$top/amalg"
log() { echo "fetch_sqlite: $*" >&2; }

mkdir -p "$top"
exec 9>"$top/.lock"
flock 9

if [[ -s "$out/sqlite3.c" && -s "$out/speedtest1.c" && -s "$out/SOURCE.txt" ]]; then
    echo "$out"
    exit 0
fi

bench_apt_tool dpkg-source dpkg-dev && bench_apt_tool tclsh tcl && bench_apt_tool make make || exit 1

# An unpacked source tree already in work-real/ (ours or the one tests/real fetched) is reused.
src=""
for cand in "$top"/sqlite3-*/ "$repo"/work-real/*/sqlite3-*/ "$repo"/work-real/sqlite3-*/; do
    if [[ -f "$cand/test/speedtest1.c" && -f "$cand/tool/mksqlite3c.tcl" ]]; then
        src=${cand%/}
        break
    fi
done

if [[ -z "$src" ]]; then
    bench_apt_source sqlite3 "$top" || { log "apt-get source sqlite3 failed"; exit 1; }
    for cand in "$top"/sqlite3-*/; do
        [[ -f "$cand/test/speedtest1.c" ]] && src=${cand%/}
    done
    [[ -n "$src" ]] || { log "no sqlite source tree after apt-get source"; exit 1; }
fi

log "building the amalgamation from $src"
bld="$top/bld"
rm -rf "$bld"
mkdir -p "$bld"
(cd "$bld" && "$src/configure" --disable-tcl >configure.log 2>&1 && make sqlite3.c >make.log 2>&1) || {
    log "amalgamation build failed, see $bld/configure.log and $bld/make.log"
    exit 1
}
mkdir -p "$out.tmp"
cp "$bld/sqlite3.c" "$bld/sqlite3.h" "$src/test/speedtest1.c" "$out.tmp/"
pkgver=$(cd "$src" && dpkg-parsechangelog -S Version 2>/dev/null || true)
echo "sqlite $(cat "$src/VERSION") (Debian source package ${pkgver:-unknown}, $(basename "$src"))" > "$out.tmp/SOURCE.txt"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
