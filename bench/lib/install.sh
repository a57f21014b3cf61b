# Shell functions shared by the benchmarks' run.sh scripts (source this file; bash).
#
#   bench_require CMD..            exit unless every CMD is on PATH
#   bench_apt_tool CMD PKG         install Debian's PKG with apt-get when CMD is not on PATH
#   bench_pip_module MODULE PKG..  pip-install PKG.. when python3 cannot import MODULE
#   bench_apt_source PKG DIR       `apt-get source PKG` into DIR (enables deb-src once if needed)
#   bench_lopi REPO                set LOPI (unless set) to REPO's release lopi, built first when cargo can
#
# None of them stops the caller: when something cannot be installed they print why on stderr and
# return 1, and the benchmark shows the configurations that need it as skipped, with the reason.

bench_log() { echo "bench: $*" >&2; }

bench_lopi() {
    [[ -n ${LOPI:-} ]] && return 0
    LOPI=${CARGO_TARGET_DIR:-$1/target}/release/lopi
    case $LOPI in /*) ;; *) LOPI=$1/$LOPI ;; esac
    if command -v cargo >/dev/null; then
        bench_log "building lopi (cargo build --release -p lopi-cli)"
        (cd "$1" && cargo build --release -q -p lopi-cli >&2) \
            || bench_log "cargo build failed: using the lopi binary already at $LOPI, if any"
    else
        bench_log "cargo not found: using the lopi binary already at $LOPI, if any"
    fi
}

bench_require() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { bench_log "$tool not found"; exit 1; }
    done
}

_BENCH_APT_UPDATED=0
bench_apt_update_once() {
    ((_BENCH_APT_UPDATED)) && return 0
    _BENCH_APT_UPDATED=1
    apt-get update -qq >&2
}

bench_apt_tool() {
    local cmd=$1 pkg=$2
    command -v "$cmd" >/dev/null && return 0
    bench_log "installing $pkg (apt-get) for $cmd"
    if ! { bench_apt_update_once && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2; }; then
        bench_log "could not install $pkg: the configurations that use $cmd will say so"
        return 1
    fi
    command -v "$cmd" >/dev/null || { bench_log "$pkg installed but $cmd is not on PATH"; return 1; }
}

bench_pip_module() {
    local mod=$1; shift
    python3 -c "import $mod" 2>/dev/null && return 0
    bench_log "installing $* (pip) for the python module $mod"
    if ! python3 -m pip install -q "$@" >&2; then
        bench_log "could not pip-install $*: the configurations that use $mod will say so"
        return 1
    fi
    python3 -c "import $mod" 2>/dev/null || { bench_log "$* installed but python3 cannot import $mod"; return 1; }
}

_bench_has_deb_src() {
    grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/
}

bench_apt_source() {
    local pkg=$1 dir=$2
    mkdir -p "$dir"
    if ! _bench_has_deb_src; then
        bench_log "enabling deb-src (/etc/apt/sources.list.d/lopi-deb-src.*)"
        if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
            sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
                > /etc/apt/sources.list.d/lopi-deb-src.sources
        else
            grep -hE '^deb[[:space:]]' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
                > /etc/apt/sources.list.d/lopi-deb-src.list
        fi
        _BENCH_APT_UPDATED=0
        bench_apt_update_once
    fi
    command -v dpkg-source >/dev/null || bench_apt_tool dpkg-source dpkg-dev || return 1
    bench_log "apt-get source $pkg -> $dir"
    if ! (cd "$dir" && apt-get source -q "$pkg" >&2); then
        _BENCH_APT_UPDATED=0
        bench_apt_update_once
        (cd "$dir" && apt-get source -q "$pkg" >&2) && return 0
        # The index can name a version the mirror does not serve (a security
        # update's source 404s): take the newest one that downloads.
        local version
        for version in $(apt-cache showsrc "$pkg" | sed -n 's/^Version: //p' | sort -rV | uniq); do
            bench_log "apt-get source $pkg=$version -> $dir"
            (cd "$dir" && apt-get source -q "$pkg=$version" >&2) && return 0
        done
        return 1
    fi
}
