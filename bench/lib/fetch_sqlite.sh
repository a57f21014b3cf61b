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
out="$top/amalg"
log() { echo "fetch_sqlite: $*" >&2; }

mkdir -p "$top"
exec 9>"$top/.lock"
flock 9

if [[ -s "$out/sqlite3.c" && -s "$out/speedtest1.c" && -s "$out/SOURCE.txt" ]]; then
    echo "$out"
    exit 0
fi

need_pkgs=()
command -v dpkg-source >/dev/null || need_pkgs+=(dpkg-dev)
command -v tclsh >/dev/null || need_pkgs+=(tcl)
command -v make >/dev/null || need_pkgs+=(make)
if ((${#need_pkgs[@]})); then
    log "installing ${need_pkgs[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >&2
fi

# An unpacked source tree already in work-real/ (ours or the one tests/real fetched) is reused.
src=""
for cand in "$top"/sqlite3-*/ "$repo"/work-real/*/sqlite3-*/ "$repo"/work-real/sqlite3-*/; do
    if [[ -f "$cand/test/speedtest1.c" && -f "$cand/tool/mksqlite3c.tcl" ]]; then
        src=${cand%/}
        break
    fi
done

if [[ -z "$src" ]]; then
    has_deb_src() {
        grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/
    }
    if ! has_deb_src; then
        log "enabling deb-src (/etc/apt/sources.list.d/lopi-deb-src.sources)"
        if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
            sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
                > /etc/apt/sources.list.d/lopi-deb-src.sources
        else
            grep -hE '^deb[[:space:]]' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
                > /etc/apt/sources.list.d/lopi-deb-src.list
        fi
        apt-get update -qq >&2
    fi
    log "apt-get source sqlite3 -> $top"
    if ! (cd "$top" && apt-get source sqlite3 >&2); then
        apt-get update -qq >&2
        (cd "$top" && apt-get source sqlite3 >&2)
    fi
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
