#!/usr/bin/env bash
# xf-run at 1 and 2 threads, on a quiet machine and with a busy loop on every core beside it
# (scripts/stress/busy_cores.sh): issue 40's "threads that yield" goal, --threads 2 at most 1.3x
# the wall time of --threads 1 when the cores are busy, and no slower than before when idle.
#
#   scripts/bench/threads_busy.sh MODEL.xfm INPUT.txt
#
# Runs `xf-run --beam BEAM --dtype DTYPE` over INPUT.txt (one sentence a line) ROUNDS times per
# configuration, 1 and 2 threads alternating, and prints each run's wall and CPU seconds (user +
# sys), the 1-minute load average when it started, and the md5 of its output (every run must
# print the same translations). Last, per configuration, the median wall and CPU seconds and the
# ratio of the medians (2 threads / 1 thread).
#
# Environment (defaults in brackets): XF_BIN [REPO/build/bin], ROUNDS [3], BEAM [4],
# DTYPE [int8], XF_ENV (environment for xf-run, e.g. XF_SPIN_MICROSECONDS=0) [none].
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 MODEL.xfm INPUT.txt" >&2; exit 2; }
model=$1 input=$2
[[ -s $model ]] || { echo "$0: $model: no such model" >&2; exit 1; }
[[ -s $input ]] || { echo "$0: $input: no such input, or empty" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
xf_bin=${XF_BIN:-$repo/build/bin}
rounds=${ROUNDS:-3} beam=${BEAM:-4} dtype=${DTYPE:-int8}
read -r -a xf_env <<< "${XF_ENV:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run LABEL THREADS [busy]: one timed run, one line of results.
run() {
  local label=$1 threads=$2 wrap=()
  [[ ${3:-} == busy ]] && wrap=("$repo/scripts/stress/busy_cores.sh")
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  env "${xf_env[@]}" "${wrap[@]}" /usr/bin/time -f "%e %U %S" -o "$work/time" \
    "$xf_bin/xf-run" --model "$model" --beam "$beam" --dtype "$dtype" --threads "$threads" \
    < "$input" > "$work/out" 2> "$work/err" || { cat "$work/err" >&2; exit 1; }
  read -r wall user sys < "$work/time"
  printf '%s %s %s %.2f %s %s\n' "$label" "$threads" "$wall" "$(echo "$user + $sys" | bc)" "$load" \
    "$(md5sum < "$work/out" | cut -c1-12)" | tee -a "$work/results"
}

echo "configuration threads wall_s cpu_s load md5"
for round in $(seq "$rounds"); do
  for mode in quiet busy; do
    run "$mode" 1 "$mode"
    run "$mode" 2 "$mode"
  done
done
echo
echo "configuration median_wall_1 median_wall_2 wall_ratio median_cpu_1 median_cpu_2 outputs"
for mode in quiet busy; do
  median() { grep "^$mode $1 " "$work/results" | awk "{print \$$2}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  w1=$(median 1 3) w2=$(median 2 3) c1=$(median 1 4) c2=$(median 2 4)
  same=$(awk '{print $6}' "$work/results" | sort -u | wc -l)
  printf '%s %s %s %.2f %s %s %s\n' "$mode" "$w1" "$w2" "$(echo "$w2 / $w1" | bc -l)" "$c1" "$c2" \
    "$([[ $same == 1 ]] && echo identical || echo DIFFER)"
done
