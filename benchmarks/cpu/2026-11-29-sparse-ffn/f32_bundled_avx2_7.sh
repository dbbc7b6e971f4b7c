#!/bin/bash
# Issue 40's bundled f32 rows after the sparse FFN product: AVX2 again, farm-bench 7 pairs,
# test.tsv's 2,004 sources; the xf-train run is stopped (SIGSTOP) meanwhile.
set -uo pipefail
P=VENV/bin/python
export PYTHON=$P RUNS=7 DTYPES=f32 ISAS=AVX2
kill -STOP $1; sleep 15
cd RUN_DIR/goal
{ date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
  echo "xf: $(cd REPO && git rev-parse --short HEAD); model $(sha256sum REPO/models/enfr.xfm | cut -c1-16)"
  REPO/scripts/bench/batch_vs_ct2.sh REPO/models/enfr.xfm in2004.txt ct2_f32 ct2_int8
  date -u; uptime; } > RUN_DIR/g11/goal_bundled_f32_avx2_7.log 2>&1
kill -CONT $1
