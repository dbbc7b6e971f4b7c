#!/usr/bin/env bash
# The whole test command (scripts/test.sh: ctest, Python, aarch64 under qemu, ASan, TSan, fuzz)
# REPEATS times in a row, each beside a busy loop on every core (busy_cores.sh): issue 41's
# "whole suite 3 times under a busy loop" check. Each run's full output goes to
# LOGDIR/run-N.log; a line per run says its exit status, wall time and load. Exits non-zero when
# any run failed. The first run builds what is missing (build/, build-asan/, build-tsan/,
# build-fuzz/), the later ones find it built.
# Usage: scripts/stress/whole_suite.sh REPEATS LOGDIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repeats=${1:?usage: whole_suite.sh REPEATS LOGDIR}
logdir=${2:?usage: whole_suite.sh REPEATS LOGDIR}
mkdir -p "$logdir"
failed=0
for run in $(seq "$repeats"); do
  start=$(date +%s)
  "$here/busy_cores.sh" "$here/../test.sh" > "$logdir/run-$run.log" 2>&1
  status=$?
  echo "run $run: exit $status, $(( $(date +%s) - start )) s wall, load $(cut -d' ' -f1-3 /proc/loadavg)," \
       "$(grep -c 'Passed' "$logdir/run-$run.log") lines 'Passed', $(grep -cE '\*\*\*Failed|\*\*\*Timeout' "$logdir/run-$run.log") failed or timed out"
  [ "$status" -eq 0 ] || failed=$((failed + 1))
done
echo "whole_suite.sh: $failed of $repeats runs failed"
[ "$failed" -eq 0 ]
