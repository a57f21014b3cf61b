#!/usr/bin/env bash
# Prepare the "real programs" used by lopi's real-program tests.
#
#   tests/real/prepare.sh [WORKDIR]        (default: <repo>/work-real, git-ignored)
#
# What it does (each step is skipped when its stamp file says it is done):
#   1. apt-get installs the few build tools it needs (one `apt-get update`).
#   2. enables deb-src for the configured Debian suites (idempotent:
#      /etc/apt/sources.list.d/lopi-deb-src.sources).
#   3. `apt-get source sqlite3 zstd` (Debian bookworm's source packages; the newest
#      version the mirror serves, as the index can name one it does not yet).
#   4. builds from those sources, with Debian's own build flags
#      (dpkg-buildflags, hardening=+all: -g -O2 ... ; nothing is stripped):
#        - sqlite3 shell (shell.c + amalgamation, one PIE executable)
#        - libsqlite3.so.0 (the same amalgamation as a shared library)
#        - testfixture (sqlite's TCL test harness)
#        - zstd program (lib compiled in, as Debian does) and tests/datagen,
#          and the program once more with --coverage (gcov's reference)
#   5. `apt-get download` Debian's stripped binary packages sqlite3,
#      libsqlite3-0, zstd, libzstd1 and extracts them with `dpkg-deb -x`.
#   6. writes WORKDIR/paths.env (KEY=VALUE, one a line) naming everything.
#
# Notes: Debian's /usr/bin/zstd links libzstd statically (ldd: libz, liblzma,
# liblz4, libc only), so libzstd.so.1 is not exercised by the zstd program.
# Debian's /usr/bin/sqlite3 is a thin shell: the engine is libsqlite3.so.0.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
WORK=${1:-$repo/work-real}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
STAMPS=$WORK/stamps
mkdir -p "$STAMPS" "$WORK/src" "$WORK/build" "$WORK/debs" "$WORK/logs"

# One prepare at a time per WORKDIR (cargo may run two test processes).
exec 9>"$WORK/.prepare.lock"
if ! flock -n 9; then
    echo "[prepare] another prepare.sh is running on $WORK; waiting for it"
    flock 9
fi

T_START=$(date +%s)
log() { printf '[prepare %4ds] %s\n' "$(( $(date +%s) - T_START ))" "$*"; }
die() { printf '[prepare] ERROR: %s\n' "$*" >&2; exit 1; }

# step NAME CMD...: run CMD unless stamps/NAME exists; time it.
step() {
    local name=$1; shift
    if [[ -e $STAMPS/$name ]]; then
        log "skip  $name (done $(cat "$STAMPS/$name"))"
        return 0
    fi
    local t0; t0=$(date +%s)
    log "start $name"
    "$@"
    local dt=$(( $(date +%s) - t0 ))
    echo "in ${dt}s at $(date -u +%FT%TZ)" > "$STAMPS/$name"
    log "done  $name in ${dt}s"
}

# Run a command with its output in a log file; on failure show the tail.
logged() {
    local logf=$WORK/logs/$1; shift
    if ! "$@" >"$logf" 2>&1; then
        tail -n 40 "$logf" >&2
        die "command failed: $* (full log: $logf)"
    fi
}

export DEBIAN_FRONTEND=noninteractive
# The lock the Rust tests' installer (crates/lopi-cli/tests/common/tools.rs) takes: one
# apt-get at a time, whichever test started it.
APT_LOCK=${TMPDIR:-/tmp}/lopi-tests-apt.lock
APT_UPDATED=0
apt_update_once() {
    if [[ $APT_UPDATED == 0 ]]; then
        log "apt-get update"
        logged apt-update.log flock "$APT_LOCK" apt-get update -q || die "apt-get update failed (no network to Debian's mirrors?)"
        APT_UPDATED=1
    fi
}

SUDO=
if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || die "must run as root (or have sudo) to install packages"
    SUDO=sudo
fi

# ---------------------------------------------------------------- 1. tools
# dpkg-dev: apt-get source / dpkg-source / dpkg-buildflags / dpkg-architecture
# tcl8.6-dev + tcl: amalgamation generation (tclsh) and testfixture
# libreadline-dev: sqlite3 shell, as Debian builds it
# zlib1g-dev liblzma-dev liblz4-dev: zstd's optional formats, as Debian builds it
# python3: zstd's tests/cli-tests runner and libzstd-battery.py; less: the
# zstdless cli-test (a build-dependency of zstd's test suite); file: summary
PKGS=(dpkg-dev build-essential xz-utils tcl tcl8.6-dev libreadline-dev
      zlib1g-dev liblzma-dev liblz4-dev python3 less gzip file binutils)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if (( ${#missing[@]} )); then
    apt_update_once
    log "apt-get install ${missing[*]}"
    logged apt-install.log $SUDO flock "$APT_LOCK" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "build tools already installed"
fi

# ---------------------------------------------------------------- 2. deb-src
enable_deb_src() {
    local out=/etc/apt/sources.list.d/lopi-deb-src.sources tmp
    tmp=$(mktemp)
    # deb822 files: copy each stanza with Types: deb-src
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -e $f && $f != "$out" ]] || continue
        # only stanzas that are Debian's (deb.debian.org / security / snapshot)
        awk 'BEGIN{RS="";ORS="\n\n"} /URIs:[^\n]*debian/ && /Types:[^\n]*deb/ {print}' "$f" \
            | sed -E 's/^Types:.*/Types: deb-src/' >> "$tmp"
    done
    # one-line format
    if [[ -f /etc/apt/sources.list ]]; then
        grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed -E 's/^deb([[:space:]])/deb-src\1/' > "$tmp.list" || true
        if [[ -s $tmp.list ]]; then
            $SUDO cp "$tmp.list" /etc/apt/sources.list.d/lopi-deb-src.list
        fi
        rm -f "$tmp.list"
    fi
    if [[ -s $tmp ]]; then
        $SUDO cp "$tmp" "$out"
    fi
    rm -f "$tmp"
}
if grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    log "deb-src already enabled"
else
    log "enabling deb-src"
    enable_deb_src
    grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/ \
        || die "could not enable deb-src (no Debian apt source found)"
    APT_UPDATED=0
    apt_update_once
fi

# ---------------------------------------------------------------- 3. sources
fetch_sources() {
    apt_update_once_if_no_sources
    cd "$WORK/src"
    rm -rf sqlite3-* libzstd-* sqlite3_* libzstd_*
    : >"$WORK/logs/apt-source.log"
    local pkg
    for pkg in sqlite3 zstd; do
        source_any_version "$pkg" || die "apt-get source $pkg failed in every version apt lists"
    done
}
# The index can name a version the mirror does not serve yet (a new security
# update's source 404s while its index is out), so each version apt lists is
# tried, newest first, and the first that downloads is used.
source_any_version() {
    local pkg=$1 version logf=$WORK/logs/apt-source.log
    for version in $(apt-cache showsrc "$pkg" | sed -n 's/^Version: //p' | sort -rV | uniq); do
        log "apt-get source $pkg=$version"
        apt-get source -q "$pkg=$version" >>"$logf" 2>&1 && return 0
        tail -n 5 "$logf" >&2
    done
    return 1
}
apt_update_once_if_no_sources() {
    # after a fresh deb-src enable, the Sources lists may be missing
    local out; out=$(apt-cache showsrc sqlite3 2>/dev/null || true)
    if ! grep -q '^Package:' <<<"$out"; then
        apt_update_once
    fi
}
step sources fetch_sources
SQLITE_SRC=$(ls -d "$WORK"/src/sqlite3-*/ 2>/dev/null | head -n1); SQLITE_SRC=${SQLITE_SRC%/}
ZSTD_SRC=$(ls -d "$WORK"/src/libzstd-*/ 2>/dev/null | head -n1); ZSTD_SRC=${ZSTD_SRC%/}
[[ -d $SQLITE_SRC && -d $ZSTD_SRC ]] || die "sources missing under $WORK/src (delete $STAMPS/sources and retry)"
log "sqlite source: $SQLITE_SRC"
log "zstd source:   $ZSTD_SRC"

# Debian's build flags (hardening=+all, as both packages' debian/rules ask).
export DEB_BUILD_MAINT_OPTIONS="hardening=+all"
DEB_CFLAGS=$(dpkg-buildflags --get CFLAGS)
DEB_CPPFLAGS=$(dpkg-buildflags --get CPPFLAGS)
DEB_LDFLAGS=$(dpkg-buildflags --get LDFLAGS)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
JOBS=$(nproc)

# ---------------------------------------------------------------- 4a. sqlite
# The -D list is the one in sqlite3's debian/rules.
SQLITE_DEFS="-O2 -fno-strict-aliasing \
 -DSQLITE_SECURE_DELETE -DSQLITE_ENABLE_COLUMN_METADATA \
 -DSQLITE_ENABLE_FTS3 -DSQLITE_ENABLE_FTS3_PARENTHESIS \
 -DSQLITE_ENABLE_RTREE=1 -DSQLITE_SOUNDEX=1 \
 -DSQLITE_ENABLE_UNLOCK_NOTIFY \
 -DSQLITE_OMIT_LOOKASIDE=1 -DSQLITE_ENABLE_DBSTAT_VTAB \
 -DSQLITE_ALLOW_ROWID_IN_VIEW \
 -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1 \
 -DSQLITE_ENABLE_LOAD_EXTENSION \
 -DSQLITE_ENABLE_JSON1 \
 -DSQLITE_LIKE_DOESNT_MATCH_BLOBS \
 -DSQLITE_THREADSAFE=1 \
 -DSQLITE_ENABLE_FTS3_TOKENIZER=1 \
 -DSQLITE_USE_URI=1 \
 -DSQLITE_MAX_SCHEMA_RETRY=25 \
 -DSQLITE_ENABLE_PREUPDATE_HOOK \
 -DSQLITE_ENABLE_SESSION \
 -DSQLITE_ENABLE_STMTVTAB \
 -DSQLITE_MAX_VARIABLE_NUMBER=250000"
SQLB=$WORK/build/sqlite3

sqlite_configure() {
    rm -rf "$SQLB"; mkdir -p "$SQLB"; cd "$SQLB"
    logged sqlite-configure.log env \
        CFLAGS="$DEB_CFLAGS $SQLITE_DEFS" CPPFLAGS="$DEB_CPPFLAGS" \
        LDFLAGS="$DEB_LDFLAGS -Wl,--as-needed" \
        "$SQLITE_SRC/configure" --prefix=/usr \
        --with-tcl="/usr/lib/$MULTIARCH/tcl8.6" \
        --enable-threadsafe --enable-load-extension --enable-json \
        --enable-fts4 --enable-fts5 --disable-static \
        CONFIG_SHELL=/bin/bash SHELL=/bin/bash
}
sqlite_amalgamation() {
    cd "$SQLB"
    logged sqlite-amalgamation.log make -j"$JOBS" sqlite3.c shell.c sqlite3.h
}
mkvar() { make -s --no-print-directory --eval 'lopi-print-%: ; @echo $($*)' "lopi-print-$1"; }
sqlite_objects() {
    cd "$SQLB"
    # libsqlite3.so exactly as the Makefile builds it (libtool, -fPIC, -DNDEBUG,
    # config.h, the feature flags configure derived from CFLAGS)
    logged sqlite-lib.log make -j"$JOBS" libsqlite3.la
}
sqlite_link() {
    cd "$SQLB"
    mkdir -p lopi-lib
    cp -L .libs/libsqlite3.so.0 lopi-lib/libsqlite3.so.0
    # The shell as one executable: shell.c + the library's own object
    # (Debian links the shell against libsqlite3.so.0 instead; the engine code
    # and its compile options are the same).
    local tcc ro rl tl so
    tcc=$(mkvar TCC); ro=$(mkvar READLINE_FLAGS); rl=$(mkvar LIBREADLINE)
    tl=$(mkvar TLIBS); so=$(mkvar SHELL_OPT)
    logged sqlite-link-shell.log $tcc $ro $so $DEB_LDFLAGS -Wl,--as-needed \
        -o lopi-sqlite3 shell.c .libs/sqlite3.o $rl $tl -lpthread -ldl
    ./lopi-sqlite3 :memory: 'select sqlite_version()' >/dev/null || die "built sqlite3 does not run"
}
sqlite_testfixture() {
    cd "$SQLB"
    logged sqlite-testfixture.log make -j"$JOBS" testfixture
    [[ $(head -c4 testfixture) == $'\x7fELF' ]] || die "testfixture is not an ELF executable (libtool wrapper?)"
}
step sqlite-configure sqlite_configure
step sqlite-amalgamation sqlite_amalgamation

# ---------------------------------------------------------------- 4b. zstd
ZB=$WORK/build/zstd
zstd_copy() {
    rm -rf "$ZB"
    cp -a "$ZSTD_SRC" "$ZB"
}
zstd_build() {
    cd "$ZB"
    # Debian: dh_auto_build runs upstream's default goal (lib-release
    # zstd-release) with dpkg-buildflags in the environment; programs/zstd
    # compiles libzstd's sources in (it does not use libzstd.so.1).
    logged zstd-build.log env CFLAGS="$DEB_CFLAGS" CPPFLAGS="$DEB_CPPFLAGS" \
        LDFLAGS="$DEB_LDFLAGS" PREFIX=/usr V=1 \
        make -j"$JOBS" -C programs zstd-release
    logged zstd-lib.log env CFLAGS="$DEB_CFLAGS" CPPFLAGS="$DEB_CPPFLAGS" \
        LDFLAGS="$DEB_LDFLAGS" PREFIX=/usr V=1 \
        make -j"$JOBS" -C lib libzstd
    logged zstd-datagen.log env CFLAGS="$DEB_CFLAGS" CPPFLAGS="$DEB_CPPFLAGS" \
        LDFLAGS="$DEB_LDFLAGS" make -j"$JOBS" -C tests datagen
    ./programs/zstd -V >/dev/null || die "built zstd does not run"
    mkdir -p lopi-lib
    cp -L lib/libzstd.so.1 lopi-lib/libzstd.so.1 2>/dev/null || cp -L lib/libzstd.so.1.* lopi-lib/libzstd.so.1
}
step zstd-copy zstd_copy
# The same program built with --coverage: gcov's verdicts, which lopi coverage's
# are checked against (real_programs.rs, real_zstd_coverage_agrees_with_gcov).
ZG=$WORK/build/zstd-gcov
zstd_gcov_build() {
    rm -rf "$ZG"
    cp -a "$ZSTD_SRC" "$ZG"
    cd "$ZG"
    logged zstd-gcov-build.log env CFLAGS="$DEB_CFLAGS --coverage" CPPFLAGS="$DEB_CPPFLAGS" \
        LDFLAGS="$DEB_LDFLAGS --coverage" PREFIX=/usr V=1 \
        make -j"$JOBS" -C programs zstd-release
    ./programs/zstd -V >/dev/null || die "zstd built with --coverage does not run"
}

# sqlite3.c is one translation unit and testfixture is linked by a single
# gcc command, so the three builds run side by side to use both cores.
pids=()
( step sqlite-objects sqlite_objects && step sqlite-link sqlite_link ) & pids+=($!)
( step sqlite-testfixture sqlite_testfixture ) & pids+=($!)
( step zstd-build zstd_build && step zstd-gcov-build zstd_gcov_build ) & pids+=($!)
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
(( fail == 0 )) || die "a build step failed (see messages above and $WORK/logs)"

# ---------------------------------------------------------------- 5. debs
deb_fetch() {
    apt_update_once_if_no_debs
    cd "$WORK/debs"
    rm -f ./*.deb
    logged apt-download.log apt-get download -q sqlite3 libsqlite3-0 zstd libzstd1 \
        || die "apt-get download failed"
    rm -rf "$WORK/deb-root"; mkdir -p "$WORK/deb-root"
    for d in ./*.deb; do dpkg-deb -x "$d" "$WORK/deb-root"; done
}
apt_update_once_if_no_debs() {
    local out; out=$(apt-cache policy sqlite3 2>/dev/null || true)
    grep -q 'Candidate: [0-9]' <<<"$out" || apt_update_once
}
step debs deb_fetch
DR=$WORK/deb-root
# A directory holding only libsqlite3.so.0 for LD_LIBRARY_PATH use
mkdir -p "$WORK/deb-lib"
cp -L "$DR/usr/lib/$MULTIARCH/libsqlite3.so.0" "$WORK/deb-lib/libsqlite3.so.0"
cp -L "$DR/usr/lib/$MULTIARCH/libzstd.so.1" "$WORK/deb-lib/libzstd.so.1"

# ---------------------------------------------------------------- 6. summary
cat > "$WORK/paths.env" <<EOF
WORK=$WORK
SQLITE_SRC=$SQLITE_SRC
SQLITE_VERSION=$(basename "$(ls "$WORK"/debs/sqlite3_*.deb)" | cut -d_ -f2)
SQLITE3_SRC_BIN=$SQLB/lopi-sqlite3
LIBSQLITE3_SRC=$SQLB/lopi-lib/libsqlite3.so.0
TESTFIXTURE=$SQLB/testfixture
ZSTD_SRC=$ZSTD_SRC
ZSTD_VERSION=$(basename "$(ls "$WORK"/debs/zstd_*.deb)" | cut -d_ -f2)
ZSTD_SRC_BIN=$ZB/programs/zstd
LIBZSTD_SRC=$ZB/lopi-lib/libzstd.so.1
DATAGEN=$ZB/tests/datagen
ZSTD_GCOV_BIN=$ZG/programs/zstd
DEB_SQLITE3=$DR/usr/bin/sqlite3
DEB_LIBSQLITE3=$WORK/deb-lib/libsqlite3.so.0
DEB_ZSTD=$DR/usr/bin/zstd
DEB_LIBZSTD=$WORK/deb-lib/libzstd.so.1
EOF
for v in $(cut -d= -f2 "$WORK/paths.env" | grep "^$WORK/.*/"); do
    [[ -e $v ]] || die "expected file missing: $v"
done

log "everything is in $WORK (paths in $WORK/paths.env):"
while IFS='=' read -r k v; do
    if [[ -f $v ]]; then
        printf '  %-16s %s  [%s]\n' "$k" "$v" "$(file -b "$v" | cut -d, -f1-2,6- | sed 's/BuildID[^,]*, //')"
    else
        printf '  %-16s %s\n' "$k" "$v"
    fi
done < "$WORK/paths.env"
log "build times:"
for s in "$STAMPS"/*; do printf '  %-20s %s\n' "$(basename "$s")" "$(cat "$s")"; done
log "prepare finished in $(( $(date +%s) - T_START ))s"
