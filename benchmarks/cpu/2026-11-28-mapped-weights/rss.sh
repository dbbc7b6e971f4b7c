#!/usr/bin/env bash
# rss.sh BIN_DIR OUT_DIR: batch-1 peak RSS (xf-bench's VmHWM line) of the bundled model's int8
# and f32 files, rows (xf-convert --dtype D) and panels (xf-convert --dtype D --layout panels,
# made at each level: ONEDNN_MAX_CPU_ISA caps both), at the native level, AVX512_CORE, AVX2 and
# SSE41; beam 4, 1 thread, the first 300 of test.tsv's distinct sources. Three "cold" runs, the
# model file evicted from the page cache before each (posix_fadvise DONTNEED: it is read from disk
# as at a first start), then one "warm" run (the file cached as the previous run left it). Warm
# figures depend on how the cache holds the file (a file just written by xf-convert sat in larger
# folios, which a mapping maps whole: up to 8 MB more for the same bytes), cold ones do not.
# The files are made with BIN_DIR's xf-convert (a binary without --layout makes rows files only).
set -euo pipefail
bin=$1; out=$2; src=${SRC:?SRC: test.tsv distinct sources, one a line}; model=${MODEL:-models/enfr.xfm}
mkdir -p "$out"; head -300 "$src" > "$out/in300.txt"
for isa in native AVX512_CORE AVX2 SSE41; do
  if [ $isa = native ]; then unset ONEDNN_MAX_CPU_ISA; else export ONEDNN_MAX_CPU_ISA=$isa; fi
  for dtype in int8 f32; do
    [ -f "$out/rows_$dtype.xfm" ] || "$bin/xf-convert" "$model" -o "$out/rows_$dtype.xfm" --dtype $dtype 2>/dev/null
    files="rows_$dtype"
    if "$bin/xf-convert" --help 2>&1 | grep -q -- --layout; then
      "$bin/xf-convert" "$model" -o "$out/panels_${isa}_$dtype.xfm" --dtype $dtype --layout panels 2>/dev/null
      files="$files panels_${isa}_$dtype"
    fi
    for f in $files; do
      printf '%s %s %s %s bytes:' $isa $dtype $f "$(stat -c %s "$out/$f.xfm")"
      sync
      for i in cold cold cold warm; do
        [ $i = cold ] && python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$out/$f.xfm"
        printf ' %s' $i
        "$bin/xf-bench" --model "$out/$f.xfm" --input "$out/in300.txt" --batch 1 --beam 4 --threads 1 2>&1 |
          awk '/peak RSS/{printf " %s", $3} /products/{p=$0} END{if (i == "warm") printf "  |%s", p}' i=$i
      done
      echo
    done
  done
done
echo "load $(cat /proc/loadavg)"
