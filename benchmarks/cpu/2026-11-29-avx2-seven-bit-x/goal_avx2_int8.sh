#!/bin/bash
# Issue 40 goal cells changed by the 7-bit x kernel: int8 batch 32 beam 4 at AVX2, bundled and
# base-size model, xf against CTranslate2, farm-bench 3 pairs; the xf-train run is stopped
# (SIGSTOP) meanwhile.
set -uo pipefail
P=VENV/bin/python
export PYTHON=$P RUNS=3 ISAS=AVX2 DTYPES=int8
kill -STOP $1; sleep 15
{ date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
  echo "xf: $(cd REPO && git rev-parse --short HEAD); model $(sha256sum REPO/models/enfr.xfm | cut -c1-16)"
  cd RUN_DIR/goal && REPO/scripts/bench/batch_vs_ct2.sh REPO/models/enfr.xfm in2004.txt ct2_f32 ct2_int8
  cd RUN_DIR/base40
  XF_ARGS="--ids --max-decoding-length 18 --length-penalty 0 --disable-loop-guard" \
  CT2_ARGS="--ids --max-len-b 9 --length-penalty 0" \
    REPO/scripts/bench/batch_vs_ct2.sh xf_int8.xfm input256.ids ct2_float32 ct2_int8
  date -u; uptime; } > RUN_DIR/g10/avx2_int8.log 2>&1
kill -CONT $1
