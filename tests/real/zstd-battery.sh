#!/usr/bin/env bash
# A battery of real zstd commands whose stdout is deterministic, for comparing
# an original zstd with a rewritten one byte for byte:
#
#   tests/real/zstd-battery.sh ZSTD_BIN DATAGEN_BIN [SCRATCH_DIR]
#
# It prints md5 sums of compressed frames (so the compressor's output must be
# bit-identical, not just round-trip), decompression checks, `zstd -l` listings,
# dictionary training results, frame-format conversions (gzip/xz/lz4 when the
# binary has them), error cases with their exit codes.  DATAGEN_BIN (zstd's
# tests/datagen) only makes the inputs: it is not the program under test.
set -u
ZSTD=${1:?usage: zstd-battery.sh ZSTD_BIN DATAGEN_BIN [SCRATCH_DIR]}
DATAGEN=${2:?usage: zstd-battery.sh ZSTD_BIN DATAGEN_BIN [SCRATCH_DIR]}
case $ZSTD in /*) ;; *) ZSTD=$PWD/$ZSTD ;; esac
case $DATAGEN in /*) ;; *) DATAGEN=$PWD/$DATAGEN ;; esac
if [[ -n ${3:-} ]]; then
    D=$3; mkdir -p "$D"; rm -rf "${D:?}"/*
else
    D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
fi
cd "$D" || exit 1
export LC_ALL=C
unset ZSTD_CLEVEL ZSTD_NBTHREADS

# every zstd run is bounded: a hang shows up as rc=124 (or 137)
T="timeout -k 5 ${BATTERY_TIMEOUT:-120}"
z() { $T "$ZSTD" "$@"; }
sum() { md5sum | cut -d' ' -f1; }
run() {  # run TITLE CMD... : print title, stdout+stderr of CMD, rc
    echo "--- $1"; shift
    if [[ $1 == z ]]; then shift; set -- "$ZSTD" "$@"; fi
    $T "$@" 2>&1
    echo "rc=$?"
}

battery() {
echo "=== inputs"
"$DATAGEN" -g1M -P50 -s1 > mixed.bin
"$DATAGEN" -g256K -P60 -s4 > small.bin
"$DATAGEN" -g3M -P90 -s2 > text.bin
"$DATAGEN" -g200K -P0 -s3 > random.bin
"$DATAGEN" -g0 > empty.bin
head -c 100000 /dev/zero > zeros.bin
for i in $(seq 1 3000); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000))"; done > lines.txt
for f in mixed.bin small.bin text.bin random.bin empty.bin zeros.bin lines.txt; do
    echo "$f $(wc -c < $f) $(sum < $f)"
done

echo "=== levels (single thread)"
for l in --fast=5 --fast=1 -1 -2 -3 -4 -5 -6 -7 -8 -9 -10 -11 -12 -13 -14 -15 -16 -17 -18 -19; do
    for f in small.bin lines.txt zeros.bin; do
        c=$(z -q -c --single-thread $l -- $f 2>&1 | sum)
        echo "level $l $f $c"
    done
done
echo "--- fast levels"
for l in 1 3 10 100; do echo "fast=$l $(z -q -c --fast=$l text.bin | sum)"; done
echo "--- ultra"
for l in 20 21 22; do echo "ultra $l $(z -q -c --ultra -$l --single-thread small.bin | sum)"; done

echo "=== round trips"
for opts in "-1" "-3" "-9" "-19" "--long -3" "--long=24 -12" "-T2 -3" "-T2 -19 -B256K" "--rsyncable -T2" \
            "--no-check -3" "--content-size" "--no-content-size" "-3 --zstd=wlog=17,hlog=16,clog=16,slog=4,mml=5,tlen=32,strat=5" \
            "--format=zstd --exclude-compressed" "-6 --adapt" "--zstd=strat=9,wlog=20 -3" "--zstd=ldmHashLog=20,ldmMinMatch=64 --long -4" \
            "--patch-from=mixed.bin -19" "--stream-size=3145728 -4" "--size-hint=1000 -7" "--target-compressed-block-size=2048 -5" ; do
    for f in text.bin random.bin; do
        case $opts in --patch-from*) dopts="--patch-from=mixed.bin" ;; --long=24*) dopts="--long=24" ;; *) dopts="" ;; esac
        # --adapt follows the measured speed: its frames may differ run to run
        case $opts in *--adapt*) csum=timing-dependent ;; *) csum=$(z -q -c $opts $f 2>&1 | sum) ;; esac
        dsum=$(z -q -c $opts $f 2>/dev/null | z -q -d -c $dopts 2>&1 | sum)
        echo "[$opts] $f c=$csum d=$dsum orig=$(sum < $f)"
    done
done
echo "--- deterministic multithreaded output"
# zstd's multithreaded output depends only on parameters, not on timing
for t in 2 3; do echo "T$t $(z -q -c -T$t -5 -B1M text.bin | sum)"; done

echo "=== files"
cp mixed.bin a.bin; cp lines.txt b.txt
run "compress file" z -q -f a.bin
run "compress with -o" z -q -f b.txt -o b.zst
run "list" z -l a.bin.zst b.zst
run "list -v" z -lv a.bin.zst
run "test" z -t a.bin.zst b.zst
rm -f a.bin
run "decompress" z -q -d a.bin.zst
echo "a.bin $(sum < a.bin)"
run "refuse overwrite" z -q -d a.bin.zst
run "force overwrite" z -q -d -f a.bin.zst
run "remove source" z -q --rm -f b.txt -o b2.zst
[[ -e b.txt ]] && echo "b.txt still there" || echo "b.txt removed"
mkdir -p dir/sub; cp lines.txt dir/x.txt; cp mixed.bin dir/sub/y.bin; cp zeros.bin dir/sub/z.bin
run "recursive" z -q -r dir
find dir -type f | sort | while read -r f; do echo "$f $(wc -c < "$f")"; done
mkdir -p out
echo "--- recursive decompress to output dir"
z -q -d -r dir --output-dir-flat out 2>&1 | sort
echo "rc=${PIPESTATUS[0]}"
ls out | sort
run "cat multiple" sh -c "'$ZSTD' -q -c lines.txt > m.zst; '$ZSTD' -q -c zeros.bin >> m.zst; '$ZSTD' -q -dc m.zst | md5sum | cut -d' ' -f1"
run "concatenated input sum" sh -c "cat lines.txt zeros.bin | md5sum | cut -d' ' -f1"
run "stdin to stdout" sh -c "'$ZSTD' -q < lines.txt | '$ZSTD' -q -d | md5sum | cut -d' ' -f1"
run "zstdcat-like -dcf passthrough" sh -c "'$ZSTD' -q -dcf lines.txt | md5sum | cut -d' ' -f1"

echo "=== dictionaries"
mkdir -p samples
for i in $(seq 1 300); do
    printf '{"id":%d,"name":"user%d","email":"user%d@example.org","tags":["a%d","b%d"],"score":%d}\n' \
        $i $i $i $((i % 7)) $((i % 11)) $((i * 37 % 1000)) > samples/s$i.json
done
run "train (cover default)" z -q --train samples/* -o dict.cover --maxdict=8K
echo "dict.cover $(wc -c < dict.cover) $(sum < dict.cover)"
run "train fastcover" z -q --train-fastcover=k=50,d=8,f=20,steps=4 samples/* -o dict.fast --maxdict=4K
echo "dict.fast $(wc -c < dict.fast) $(sum < dict.fast)"
run "train legacy" z -q --train-legacy=s=5 samples/* -o dict.legacy --maxdict=4K
echo "dict.legacy $(wc -c < dict.legacy) $(sum < dict.legacy)"
run "train cover k,d" z -q --train-cover=k=64,d=8 samples/* -o dict.cover2 --maxdict=4K
echo "dict.cover2 $(wc -c < dict.cover2) $(sum < dict.cover2)"
for d in dict.cover dict.fast dict.legacy; do
    c=$(cat samples/s1*.json | z -q -c -D $d -19 | sum)
    r=$(cat samples/s1*.json | z -q -c -D $d -3 | z -q -d -D $d | sum)
    echo "$d c=$c r=$r orig=$(cat samples/s1*.json | sum)"
done
run "wrong dictionary" sh -c "cat samples/s1.json | '$ZSTD' -q -c -D dict.cover 2>/dev/null | '$ZSTD' -q -d -D dict.fast > /dev/null"
run "missing dictionary" sh -c "cat samples/s1.json | '$ZSTD' -q -c -D dict.cover 2>/dev/null | '$ZSTD' -q -d > /dev/null"

echo "=== other formats"
for fmt in gzip xz lzma lz4; do
    if z --format=$fmt -V >/dev/null 2>&1 && z -q -c --format=$fmt lines.txt >/dev/null 2>&1; then
        c=$(z -q -c --format=$fmt lines.txt | sum)
        r=$(z -q -c --format=$fmt lines.txt | z -q -d -c | sum)
        echo "$fmt c=$c r=$r"
    else
        echo "$fmt unsupported"
    fi
done
if command -v gzip >/dev/null; then
    echo "gzip->zstd -d $(gzip -n -c lines.txt | z -q -d -c | sum)"
fi

echo "=== errors"
run "missing file" z -q nothere.bin
run "corrupt frame" sh -c "head -c 1000 a.bin.zst > cut.zst; '$ZSTD' -q -t cut.zst"
run "not zstd" z -q -t lines.txt
run "bad level" z -q -c --fast=0 lines.txt
run "bad option" z --no-such-option
run "memory limit" sh -c "'$ZSTD' -q -c --long=27 text.bin 2>/dev/null | '$ZSTD' -q -d --memory=1MB > /dev/null"
run "bench -b (only exit code)" sh -c "'$ZSTD' -q -b1 -i0 lines.txt > /dev/null 2>&1"
run "help" sh -c "'$ZSTD' -H | head -3"
run "version" sh -c "'$ZSTD' -V | sed 's/, by .*//'"
echo "=== end"
}
battery | sed "s|$D|@SCRATCH@|g; s|$ZSTD|@ZSTD@|g"
exit "${PIPESTATUS[0]}"
