#!/bin/bash
# The sparse FFN product alone: xf-run of d63dc0e (A) against 26fbd51 (B, before it), f32,
# batch 32 beam 4, one thread, farm-bench -n 5 (3 pairs within its default 100 s bound); the xf-train run stopped meanwhile.
set -uo pipefail
kill -STOP $1; sleep 15
# OLD: xf-run built at 26fbd51 (copied aside before the change was built)
NEW=REPO/build/bin/xf-run OLD=OLD M=REPO/models/enfr.xfm
{ date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
  cd RUN_DIR/goal
  for isa in AVX512_CORE_BF16 AVX2; do
    echo "== bundled, f32 (--dtype f32), ONEDNN_MAX_CPU_ISA=$isa, test.tsv's 2,004 sources"
    farm-bench -n 5 --vs "sh -c 'exec env ONEDNN_MAX_CPU_ISA=$isa $OLD --model $M --dtype f32 --beam 4 --max-batch 32 --threads 1 --length-penalty 0.6 < in2004.txt'" \
      -- sh -c "exec env ONEDNN_MAX_CPU_ISA=$isa $NEW --model $M --dtype f32 --beam 4 --max-batch 32 --threads 1 --length-penalty 0.6 < in2004.txt"
  done
  cd RUN_DIR/base40
  A="--ids --max-decoding-length 18 --length-penalty 0 --disable-loop-guard"
  echo "== base size (random weights), f32, native, the first 64 of input256.ids"
  farm-bench -n 5 --vs "sh -c 'exec $OLD --model xf_f32.xfm --beam 4 --max-batch 32 --threads 1 $A < in64.ids'" \
    -- sh -c "exec $NEW --model xf_f32.xfm --beam 4 --max-batch 32 --threads 1 $A < in64.ids"
  date -u; uptime; } > RUN_DIR/g11/ab.log 2>&1
kill -CONT $1
