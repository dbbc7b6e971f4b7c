#!/bin/bash
# Issue 39's speed goal alone: the teacher (models/enfr.xfm, --dtype int8) against a student
# (STUDENT, default models/enfr-student.xfm), one build, farm-bench PAIRS pairs (default 7),
# test.tsv's distinct sources, one thread, beam 4, CPU seconds, native and AVX2, batch 1 and 32.
# Usage: ratio.sh BIN SOURCES
set -uo pipefail
bin=$1 src=$2
repo=$(cd "$(dirname "$0")/../../.." && pwd)
student=${STUDENT:-$repo/models/enfr-student.xfm} teacher=$repo/models/enfr.xfm pairs=${PAIRS:-7}
date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
echo "xf: $(cd "$repo" && git rev-parse --short HEAD); student sha256 $(sha256sum "$student" | cut -c1-16)"
for isa in native AVX2; do
  for b in 1 32; do
    cap=(); [ $isa = AVX2 ] && cap=(env ONEDNN_MAX_CPU_ISA=AVX2)
    echo "== $isa batch $b: A = teacher (int8), B = student: A/B = the student's speed over the teacher's"
    farm-bench -n "$pairs" --timeout 900 --vs "${cap[*]} $bin/xf-run --model $student --threads 1 --max-batch $b --input $src" \
      -- "${cap[@]}" "$bin/xf-run" --model "$teacher" --dtype int8 --threads 1 --max-batch $b --input "$src"
  done
done
date -u; uptime
