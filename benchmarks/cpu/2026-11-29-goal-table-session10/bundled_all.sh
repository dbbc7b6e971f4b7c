#!/bin/bash
# Issue 40's bundled-model rows after this session's kernels: int8 and f32, best ISA and AVX2,
# farm-bench 3 pairs, test.tsv's 2,004 sources (nothing else running).
set -uo pipefail
P=VENV/bin/python
export PYTHON=$P RUNS=3
cd RUN_DIR/goal
{ date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
  echo "xf: $(cd REPO && git rev-parse --short HEAD); model $(sha256sum REPO/models/enfr.xfm | cut -c1-16)"
  REPO/scripts/bench/batch_vs_ct2.sh REPO/models/enfr.xfm in2004.txt ct2_f32 ct2_int8
  date -u; uptime; } > RUN_DIR/g10/goal_bundled.log 2>&1
