#!/usr/bin/env bash
# The outputs check of the CPU benchmarks: md5 (first 12 hex) of xf-run's output on test.tsv's
# distinct sources (1,385, in first-seen order), int8 and f32 x beam 1 and 4, one thread, so that a
# change that must not move the outputs can be shown to move none, level by level.
#
#   XF_DATA=data/enfr scripts/bench/outputs_md5.sh [BIN_DIR] [LEVEL]
#
# BIN_DIR [REPO/build/bin]; LEVEL caps oneDNN and xf's kernels (ONEDNN_MAX_CPU_ISA: AVX2, ...);
# MODEL [models/enfr.xfm]. The bundled model's figures at each level are in docs/BENCHMARKS.md
# ("Threads that yield ...": the md5 table, of the file bundled until 2026-11-29, sha256
# afc25006...; the second issue-37 file's: "A base-size model against CTranslate2 again"; the
# current file's: "The goal table with the interpolated file").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
: "${XF_DATA:?set XF_DATA to the folder of test.tsv}"
bin=${1:-$root/build/bin}; model=${MODEL:-$root/models/enfr.xfm}
[ -n "${2:-}" ] && export ONEDNN_MAX_CPU_ISA=$2
sources=$(mktemp); trap 'rm -f "$sources"' EXIT
cut -f1 "$XF_DATA/test.tsv" | awk '!seen[$0]++' > "$sources"
for dtype in int8 f32; do
  for beam in 1 4; do
    printf '%s b%s %s\n' $dtype $beam "$("$bin/xf-run" --model "$model" --dtype $dtype --beam $beam \
      --threads 1 < "$sources" 2>/dev/null | md5sum | cut -c1-12)"
  done
done
