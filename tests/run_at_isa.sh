#!/usr/bin/env bash
# Runs a test program with xf and oneDNN capped at one instruction-set level, so that every level
# this CPU has is tested on it (the AVX2 path on an AVX-512 machine).
#   run_at_isa.sh LEVEL EXPECTED PROBE PROGRAM [ARGS...]
# LEVEL: an ONEDNN_MAX_CPU_ISA value (AVX2, ...); EXPECTED: the xf::cpu::cpu_isa_name() it must
# give; PROBE: xf_test_cpu_isa, which prints it. Exit 77 (ctest: skipped) where the CPU lacks the
# level, since the cap then changes nothing the plain run does not test.
set -euo pipefail
level=$1 expected=$2 probe=$3
shift 3
export ONEDNN_MAX_CPU_ISA=$level
got=$("$probe")
if [[ $got != "$expected" ]]; then
  echo "skipped: under ONEDNN_MAX_CPU_ISA=$level this CPU runs $got, not $expected"
  exit 77
fi
echo "ONEDNN_MAX_CPU_ISA=$level: xf's kernels at $got"
exec "$@"
