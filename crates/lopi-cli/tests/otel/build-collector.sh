#!/usr/bin/env bash
# Builds the OpenTelemetry Collector the OTLP tests push to (main.go beside this script: the
# OTLP receiver and the file exporter of collector v0.161.0, modules pinned by go.mod and
# go.sum) once per machine, and prints its path. The binary is cached under
# ${XDG_CACHE_HOME:-~/.cache}/lopi-tests/otelcol-VERSION-HASH (beside lopi's plan cache, not
# in it; HASH: of main.go, go.mod and go.sum, so that a change builds anew). Go:
# /usr/local/go/bin/go, else `go` on PATH (1.26 or newer). About two and a half minutes on a
# 2-core machine the first time (module downloads included; the Go module and build caches
# take about 1 GB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=0.161.0
hash=$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/lopi-tests/otelcol-$version-$hash
bin=$dir/otelcol
if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi

go=/usr/local/go/bin/go
[ -x "$go" ] || go=$(command -v go || true)
if [ -z "$go" ]; then
    echo "build-collector.sh: Go not found (/usr/local/go/bin/go, PATH): the tests build an OpenTelemetry Collector from its Go modules and need Go 1.26 or newer" >&2
    exit 1
fi

mkdir -p "$dir"
# One build at a time: test binaries run side by side.
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi
echo "build-collector.sh: building the OpenTelemetry Collector $version for the OTLP tests with $("$go" version) (once per machine, a few minutes)" >&2
start=$(date +%s)
# -mod=readonly: go.sum pins every module; -buildvcs=false: the work tree's git state is not
# the collector's.
(cd "$here" && "$go" build -mod=readonly -buildvcs=false -trimpath -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
echo "build-collector.sh: built $bin in $(($(date +%s) - start)) s" >&2
echo "$bin"
