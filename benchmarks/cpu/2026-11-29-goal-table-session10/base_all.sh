#!/bin/bash
# Issue 40's base-size rows after this session's kernels: f32 and int8, best ISA and AVX2,
# farm-bench 3 pairs; the xf-train run is stopped (SIGSTOP) meanwhile.
set -uo pipefail
P=VENV/bin/python
export PYTHON=$P RUNS=3
kill -STOP $1; sleep 15
cd RUN_DIR/base40
export XF_ARGS="--ids --max-decoding-length 18 --length-penalty 0 --disable-loop-guard"
export CT2_ARGS="--ids --max-len-b 9 --length-penalty 0"
{ date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
  echo "xf: $(cd REPO && git rev-parse --short HEAD)"
  DTYPES=int8 REPO/scripts/bench/batch_vs_ct2.sh xf_int8.xfm input256.ids ct2_float32 ct2_int8
  DTYPES=f32 REPO/scripts/bench/batch_vs_ct2.sh xf_f32.xfm input256.ids ct2_float32 ct2_int8
  date -u; uptime; } > RUN_DIR/g10/goal_base.log 2>&1
kill -CONT $1
