#!/usr/bin/env bash
# Provide zstd for bench/zstd: Debian's source package (`apt-get source zstd`) and Debian's
# stripped binary (`apt-get download zstd`), reusing what tests/real/prepare.sh left in work-real/
# (work-real/paths.env: source tree, its Debian-flags build of programs/zstd and tests/datagen,
# the extracted package).
#
# Usage: bench/lib/fetch_zstd.sh    prints the path of an env file (KEY=VALUE a line):
#   ZSTD_SRC          unpacked source tree          ZSTD_SRC_VERSION   its Debian version
#   ZSTD_BUILT        programs/zstd built by prepare.sh with Debian's flags, or empty
#   DATAGEN           tests/datagen of that build, or empty (bench/zstd builds both when empty)
#   DEB_ZSTD          Debian's /usr/bin/zstd        DEB_ZSTD_VERSION   the package's version
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
top="$repo/work-real/bench-zstd"
. "$repo/bench/lib/install.sh"
log() { echo "fetch_zstd: $*" >&2; }
mkdir -p "$top"
exec 9>"$top/.lock"
flock 9

ZSTD_SRC="" ZSTD_BUILT="" DATAGEN="" DEB_ZSTD=""
if [[ -f "$repo/work-real/paths.env" ]]; then
    prep() { grep -E "^$1=" "$repo/work-real/paths.env" | head -n1 | cut -d= -f2-; }
    [[ -d $(prep ZSTD_SRC) ]] && ZSTD_SRC=$(prep ZSTD_SRC)
    [[ -x $(prep ZSTD_SRC_BIN) ]] && ZSTD_BUILT=$(prep ZSTD_SRC_BIN)
    [[ -x $(prep DATAGEN) ]] && DATAGEN=$(prep DATAGEN)
    [[ -x $(prep DEB_ZSTD) ]] && DEB_ZSTD=$(prep DEB_ZSTD)
fi
[[ -n $ZSTD_BUILT && -n $DATAGEN ]] || ZSTD_BUILT="" DATAGEN=""

bench_apt_tool dpkg-source dpkg-dev && bench_apt_tool make make || exit 1
if [[ -z $ZSTD_SRC ]]; then
    for cand in "$top"/libzstd-*/; do
        [[ -f $cand/programs/zstdcli.c ]] && ZSTD_SRC=${cand%/}
    done
fi
if [[ -z $ZSTD_SRC ]]; then
    bench_apt_source zstd "$top" || { log "apt-get source zstd failed"; exit 1; }
    for cand in "$top"/libzstd-*/; do
        [[ -f $cand/programs/zstdcli.c ]] && ZSTD_SRC=${cand%/}
    done
    [[ -n $ZSTD_SRC ]] || { log "no zstd source tree after apt-get source"; exit 1; }
fi
src_version=$(cd "$ZSTD_SRC" && dpkg-parsechangelog -S Version 2>/dev/null || echo unknown)

if [[ -z $DEB_ZSTD && -x $top/deb-root/usr/bin/zstd ]]; then
    DEB_ZSTD=$top/deb-root/usr/bin/zstd
fi
if [[ -z $DEB_ZSTD ]]; then
    log "apt-get download zstd -> $top/debs"
    rm -rf "$top/debs" "$top/deb-root"
    mkdir -p "$top/debs" "$top/deb-root"
    (cd "$top/debs" && apt-get download -q zstd >&2) || {
        bench_apt_update_once
        (cd "$top/debs" && apt-get download -q zstd >&2)
    } || { log "apt-get download zstd failed"; exit 1; }
    dpkg-deb -x "$top"/debs/zstd_*.deb "$top/deb-root"
    DEB_ZSTD=$top/deb-root/usr/bin/zstd
fi
# the package's version: from the .deb it was extracted from (ours, or prepare.sh's work-real/debs/)
debs=$repo/work-real/debs
[[ $DEB_ZSTD == "$top"/* ]] && debs=$top/debs
deb_version=""
for d in "$debs"/zstd_*.deb; do
    [[ -f $d ]] && deb_version=$(dpkg-deb -f "$d" Version)
done
[[ -n $deb_version ]] || deb_version="unknown ($("$DEB_ZSTD" -V 2>&1 | head -n1))"

cat > "$top/paths.env.tmp" <<EOT
ZSTD_SRC=$ZSTD_SRC
ZSTD_SRC_VERSION=$src_version
ZSTD_BUILT=$ZSTD_BUILT
DATAGEN=$DATAGEN
DEB_ZSTD=$DEB_ZSTD
DEB_ZSTD_VERSION=$deb_version
EOT
mv "$top/paths.env.tmp" "$top/paths.env"
echo "$top/paths.env"
