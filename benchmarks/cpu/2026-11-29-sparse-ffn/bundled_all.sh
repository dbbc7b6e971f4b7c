#!/bin/bash
# Issue 40's bundled-model rows with the interpolated file and the sparse FFN product: int8 and
# f32, best ISA and AVX2, farm-bench 5 pairs, test.tsv's 2,004 sources, nothing else running.
set -uo pipefail
P=VENV/bin/python
export PYTHON=$P RUNS=5
cd RUN_DIR/goal
$P REPO/scripts/bench/xfm_to_ctranslate2.py REPO/models/enfr.xfm ct2_f32 --quantization float32 --force > RUN_DIR/g11/conv.log 2>&1
$P REPO/scripts/bench/xfm_to_ctranslate2.py REPO/models/enfr.xfm ct2_int8 --quantization int8 --force >> RUN_DIR/g11/conv.log 2>&1
{ date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
  echo "xf: $(cd REPO && git rev-parse --short HEAD); model $(sha256sum REPO/models/enfr.xfm | cut -c1-16)"
  REPO/scripts/bench/batch_vs_ct2.sh REPO/models/enfr.xfm in2004.txt ct2_f32 ct2_int8
  date -u; uptime; } > RUN_DIR/g11/goal_bundled_final.log 2>&1
