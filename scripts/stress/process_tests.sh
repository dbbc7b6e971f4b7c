#!/usr/bin/env bash
# The tests that start processes (MPI ranks, xf-train's signals and lock, the tools) REPEATS
# times in a row, ctest -j JOBS, beside a busy loop on every core (busy_cores.sh), with TMPDIR
# checked empty after (ctest_leaves_no_files.sh). Each test bounds the processes it starts
# (tests/common/run_command.h, tests/trainer/parallel_runs.h), so a hang fails its own test.
# Usage: scripts/stress/process_tests.sh BUILD REPEATS [JOBS [REGEX]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: process_tests.sh BUILD REPEATS [JOBS [REGEX]]}
repeats=${2:?repeats}
jobs=${3:-2}
regex=${4:-'ParallelMpi|XfTrain|Ranks\.|XfRun|XfBench|XfEval|XfInspect|XfJoin|ModelFiles|ToolOutput|ToolResults|EveryTool'}
# ReverseTask (end to end: minutes of training) is left out.
exec "$here/busy_cores.sh" "$here/../ctest_leaves_no_files.sh" "$build" -R "$regex" -E ReverseTask -j "$jobs" \
  --repeat "until-fail:$repeats" --timeout 300 --output-on-failure
