#!/usr/bin/env bash
# lopi's multiprocessor analysis on the thesis's benchmark and on real Debian programs, and lopi's predictions
# checked against measurement. Per workload: `lopi scale --breakdown` (the program uninstrumented on 1, 2, ...
# CPUs: speedup, Karp-Flatt, USL; three recorded runs give the serial fraction and Amdahl's bound) and `lopi
# run -q --probe syscall,locks` + `lopi report --breakdown` / `--syscalls` on 1 CPU (taskset -c 0) and on all
# CPUs; for mpbench (64% and 20% user), pigz, zstd, postmark and sysbench threads also `lopi whatif --kernel
# giant-lock|subsystem-locks|app-kernel` (the program recorded natively and under an emulated kernel).
#
#   bench/mp/run.sh [--quick] [extra mp_bench.py options]
#
# Writes bench/results/mp.md (+ mp.runs.json with every run and every breakdown report), whose tables are:
#   Predicted vs measured (predict.py): the speedup on 2 CPUs lopi predicts (Amdahl's bound from the serial
#     fraction of scale's recorded runs; the USL fit where lopi makes one) beside scale's measured one, the
#     error, and past 15% why, from lopi's own reports; 4 and 8 CPUs extrapolated.
#   The thesis's tables side by side (thesis.py): Paper II's Table 3.1 and §3.5 (giant-lock breakdown,
#     speedup, Amdahl) and Paper III's Table 4.2 (null system call) beside lopi's emulation on mpbench at
#     64:36, with what a user-space emulation cannot model; issue 29's criteria at 20:80.
#   Summary, What-if kernels (whatif.py), application kernel (app_kernel.py), one section per workload.
#
# Workloads (workloads.py): lopi's mpbench.c (the thesis's synthetic benchmark, Paper II) calibrated on one
# CPU to 64% user and to 80, 50 and 20%; Debian's `pigz -p N`, `zstd -TN -3` and `xz -TN -1` of a
# deterministic corpus; `make -jN` of zstd's library (Debian's source, bench/lib/fetch_zstd.sh); memcached -t
# N under memcaslap -T N; sysbench oltp_read_only --threads=N against a PostgreSQL cluster made for the run;
# postmark (single-threaded) and sysbench threads. Every recorded run's output is checked against plain runs.
# Installs pigz, zstd, xz-utils, postmark, sysbench, memcached and libmemcached-tools with apt-get when
# missing (not postgresql, whose package starts a system cluster); a workload that cannot run is shown as
# skipped, with why. lopi is $LOPI, else built here with `cargo build --release -p lopi-cli`.
# Full: --runs 3, mpbench 1 s (its other splits 500 ms), 64 MiB corpus (xz 16), ~8 min on 2 CPUs (478 s).
# --quick: --runs 2, 300 ms (200 ms), 16 MiB (xz 8), about half the other work, ~3.5 min. A lopi whatif call
# that takes over 600 s counts as hung.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

. "$repo/bench/lib/install.sh"
bench_require gcc taskset
bench_apt_tool pigz pigz || true
bench_apt_tool zstd zstd || true
bench_apt_tool postmark postmark || true
bench_apt_tool sysbench sysbench || true
bench_apt_tool xz xz-utils || true
bench_apt_tool memcached memcached || true
bench_apt_tool memcaslap libmemcached-tools || true
zstd_src=""
if zstd_env=$(bash "$repo/bench/lib/fetch_zstd.sh"); then
    zstd_src=$(grep -E '^ZSTD_SRC=' "$zstd_env" | cut -d= -f2-)
else
    bench_log "fetch_zstd.sh failed: the make workload will say so"
fi

py=python3
if ! command -v python3 >/dev/null || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    py=/usr/bin/python3.11
fi
bench_require "$py"

bench_lopi "$repo"
exec "$py" "$here/mp_bench.py" --lopi "$LOPI" --zstd-src "$zstd_src" "$@"
