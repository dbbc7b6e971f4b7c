#!/bin/bash
# Issue 39's speed ratio after the shortlist's column layout and the vectorized gather:
#   1. the student with this build (A) against the build before (B: 5b28718), same file;
#   2. the teacher (models/enfr.xfm, --dtype int8) against the student, this build: A/B = the
#      student's speed over the teacher's.
# test.tsv's 1,385 distinct sources, one thread, beam 4 (both models' default), whole xf-run
# processes, farm-bench 5 pairs, CPU seconds; native (AVX-512 VNNI) and ONEDNN_MAX_CPU_ISA=AVX2.
# Usage: run.sh NEW_BIN OLD_BIN SOURCES
set -uo pipefail
new=$1 old=$2 src=$3
repo=$(cd "$(dirname "$0")/../../.." && pwd)
student=$repo/models/enfr-student.xfm teacher=$repo/models/enfr.xfm
date -u; grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo; uptime
echo "xf: $(cd "$repo" && git rev-parse --short HEAD)"
for isa in native AVX2; do
  for b in 1 32; do
    cap=(); [ $isa = AVX2 ] && cap=(env ONEDNN_MAX_CPU_ISA=AVX2)
    echo "== $isa batch $b: A = student, this build; B = student, 5b28718"
    farm-bench -n 5 --timeout 600 --vs "${cap[*]} $old/xf-run --model $student --threads 1 --max-batch $b --input $src" \
      -- "${cap[@]}" "$new/xf-run" --model "$student" --threads 1 --max-batch $b --input "$src"
  done
done
for isa in native AVX2; do
  for b in 1 32; do
    cap=(); [ $isa = AVX2 ] && cap=(env ONEDNN_MAX_CPU_ISA=AVX2)
    echo "== $isa batch $b: A = teacher (int8), B = student, both this build"
    farm-bench -n 5 --timeout 600 --vs "${cap[*]} $new/xf-run --model $student --threads 1 --max-batch $b --input $src" \
      -- "${cap[@]}" "$new/xf-run" --model "$teacher" --dtype int8 --threads 1 --max-batch $b --input "$src"
  done
done
date -u; uptime
