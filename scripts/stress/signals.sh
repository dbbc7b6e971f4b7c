#!/usr/bin/env bash
# Stop signals at random moments of training (issue 41): each run of xf-train (two threads) gets
# one SIGTERM or SIGHUP (two SIGTERMs to one SIGHUP) a random 0-DELAY_MS after its first step,
# and must exit 0 with one checkpoint at the step it names ("interrupted at step S"); resumed to
# S + 2 it must exit 0. Then one straight run of the same options saves every step, and every
# interrupted checkpoint (step S) and every resumed one (S + 2) must equal the straight run's
# parameters.bin and adam.bin byte for byte.
# Usage: scripts/stress/signals.sh BUILD MODEL RUNS [DELAY_MS]
#   MODEL: tiny (d_model 16) or d256 (d_model 256, d_ff 1024, 4 heads); RUNS: signals sent, or
#   fewer when XF_STRESS_SECONDS is set and that many seconds have gone (then compared as usual).
# Prints one line a run and a summary line "MODEL: N runs: ... crashes ..."; exits 1 on any failure.
# Run it under load with scripts/stress/busy_cores.sh, at nice (a shared machine).
set -uo pipefail
build=$(cd "${1:?usage: signals.sh BUILD MODEL RUNS [DELAY_MS]}" && pwd)
model=${2:?tiny or d256}
runs=${3:?runs}
delay_ms=${4:-1500}
train_bin="$build/bin/xf-train"
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-stress-signals-XXXXXX")
trap 'rm -rf "$work"' EXIT

# The toy task of the trainer tests: reverse a letter sequence.
awk 'BEGIN { srand(3); for (i = 0; i < 400; ++i) { n = 3 + int(rand() * 4); s = "";
       for (k = 0; k < n; ++k) s = s sprintf("%c", 97 + int(rand() * 6));
       r = ""; for (k = n; k >= 1; --k) r = r substr(s, k, 1); print s "\t" r } }' > "$work/train.tsv"
options=(--train "$work/train.tsv" --spm-type char --vocab-size 20 --layers 1 --dropout 0.1
         --batch-tokens 120 --warmup 10 --threads 2 --log-every 1 --valid-every 0 --save-every 0
         --max-length 20 --max-positions 32 --seed 5)
case "$model" in
  tiny) options+=(--d-model 16 --heads 2 --d-ff 32) ;;
  d256) options+=(--d-model 256 --heads 4 --d-ff 1024) ;;
  *) echo "signals.sh: MODEL is tiny or d256, got '$model'" >&2; exit 2 ;;
esac

hashes() { sha256sum "$1/parameters.bin" "$1/adam.bin" | awk '{ printf "%s ", $1 }'; }

failures=0 crashes=0 max_step=0
declare -A saved resumed  # step -> hashes, from the interrupted and the resumed runs
deadline=${XF_STRESS_SECONDS:-0}
for ((run = 1; run <= runs; ++run)); do
  if [ "$deadline" -gt 0 ] && [ "$SECONDS" -ge "$deadline" ]; then runs=$((run - 1)); break; fi
  signal=$([ $((run % 3)) -eq 0 ] && echo HUP || echo TERM)
  out="$work/run" log="$work/run.log"
  rm -rf "$out" "$log"  # the wait below must not see the last run's "step" lines
  # Signalled itself (timeout(1) would pass the signal on twice: to it and to its group, and a
  # second SIGTERM ends xf-train at once); a run still there after 300 s is killed.
  "$train_bin" "${options[@]}" --out "$out" --max-steps 1000000 2> "$log" &
  pid=$!
  (sleep 300 && kill -KILL "$pid" 2>/dev/null) 2>/dev/null &  # quiet: no "Terminated" when ended
  bound=$!
  for ((wait = 0; wait < 6000; ++wait)); do grep -qs '^step ' "$log" && break; sleep 0.01; done
  sleep "$(awk -v seed="$RANDOM" -v max="$delay_ms" 'BEGIN { srand(seed); printf "%.3f", rand() * max / 1000 }')"
  kill -s "$signal" "$pid"
  wait "$pid"
  status=$?
  kill $(pgrep -P "$bound") "$bound" 2>/dev/null  # the bound's sleep, then the bound
  step=$(sed -n 's/^interrupted at step \([0-9]*\);.*/\1/p' "$log")
  checkpoints=$(find "$out" -maxdepth 1 -name 'step-*' -type d | wc -l)
  verdict=ok
  if [ "$status" -ne 0 ] || [ -z "$step" ] || [ "$checkpoints" -ne 1 ] || [ -e "$out/xf-train.lock" ]; then
    verdict="FAILED (exit $status, step '${step}', $checkpoints checkpoints)"
    [ "$status" -gt 128 ] && crashes=$((crashes + 1))
    failures=$((failures + 1))
    tail -3 "$log" | sed 's/^/    /'
  else
    saved[$step]="${saved[$step]:-}$(hashes "$out/$(printf 'step-%06d' "$step")")|"
    if timeout -k 5 300 "$train_bin" --resume --out "$out" --max-steps $((step + 2)) 2> "$log.resume"; then
      resumed[$((step + 2))]="${resumed[$((step + 2))]:-}$(hashes "$out/$(printf 'step-%06d' $((step + 2)))")|"
    else
      verdict="FAILED (resume exit $?)"
      failures=$((failures + 1))
      tail -3 "$log.resume" | sed 's/^/    /'
    fi
    [ "$step" -gt "$max_step" ] && max_step=$step
  fi
  echo "$model run $run: SIG$signal, step ${step:-?}: $verdict"
done

# The straight run, saving every step up to the furthest resumed one.
last=$((max_step + 2)) different=0 compared=0
out="$work/straight"
if ! "$train_bin" "${options[@]}" --out "$out" --max-steps "$last" --save-every 1 --keep 0 2> "$work/straight.log"; then
  echo "signals.sh: the straight run failed:" >&2
  tail -3 "$work/straight.log" >&2
  exit 1
fi
for step in $(printf '%s\n' "${!saved[@]}" "${!resumed[@]}" | sort -un); do
  expected=$(hashes "$out/$(printf 'step-%06d' "$step")")
  IFS='|' read -ra found <<< "${saved[$step]:-}|${resumed[$step]:-}"
  for got in "${found[@]}"; do
    [ -z "$got" ] && continue
    compared=$((compared + 1))
    if [ "$got" != "$expected" ]; then
      different=$((different + 1))
      echo "step $step: a checkpoint differs from the straight run's"
    fi
  done
done
echo "$model: $runs runs: $((runs - failures)) saved and resumed, $failures failed ($crashes crashes);" \
     "$compared checkpoints compared with a straight run to step $last: $different differ"
[ "$failures" -eq 0 ] && [ "$different" -eq 0 ]
