#!/usr/bin/env bash
# Training tokens/s of xf-train in one process against RANKS data-parallel ranks under mpirun on
# the same machine, THREADS threads each (issue 15's scaling figures).
#
#   scripts/bench/train_ranks_speed.sh [TRAIN.tsv]     (default $XF_DATA/train.tsv)
#
# Both train the same model (the bundled model's shape: d_model 256, 3+3 layers, 4 heads, d_ff
# 1024, pre-norm) on the same global batches (--batch-tokens BATCH_TOKENS; the ranks split each
# batch), 2*STEPS steps with --log-every STEPS: the progress line at step 2*STEPS is the tokens/s
# (source + target, padding excluded) of the last STEPS steps; the first STEPS are warm-up.
# ROUNDS rounds, each the two runs back to back, with the load average before each run and each
# run's CPU share, (user + sys) / wall of the whole job (2.0 = both cores; corpus loading
# included).
#
# Environment (defaults in brackets):
#   XF_DATA [REPO/data/enfr, see scripts/get_data.sh]
#   XF_BIN [REPO/build/bin]  WORK_DIR [a new directory under /tmp, removed at the end]
#   RANKS [2]  THREADS [1]  BATCH_TOKENS [2500]  STEPS [20]  ROUNDS [2]
#   SPM [train one with xf-train first: about 2 minutes on the EN-FR data]
#   NICE   run both at this nice level (e.g. -15 on a shared machine: see below)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/training_inputs.sh"  # here, repo, train, xf_bin
ranks=${RANKS:-2}
threads=${THREADS:-1}
batch_tokens=${BATCH_TOKENS:-2500}
steps=${STEPS:-20}
rounds=${ROUNDS:-2}
[[ -x $xf_bin/xf-train ]] || { echo "$0: $xf_bin/xf-train not found (set XF_BIN)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "$0: mpirun not found (scripts/setup.sh --tests installs OpenMPI)" >&2; exit 1; }
if [[ -n ${WORK_DIR:-} ]]; then
  work=$WORK_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/xf-train-ranks-XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# NICE: Linux groups a session's processes (sched_autogroup) and shares the CPU between groups,
# so on a busy machine a second rank of the same session gets no more CPU unless the group's
# nice value is raised too (negative values need root); restored on exit.
prefix=()
if [[ -n ${NICE:-} ]]; then
  prefix=(nice -n "$NICE")
  if [[ -w /proc/self/autogroup ]]; then
    previous_group_nice=$(sed -E 's/.*nice (-?[0-9]+).*/\1/' /proc/self/autogroup)
    echo "$NICE" > /proc/self/autogroup
    trap 'echo "$previous_group_nice" > /proc/self/autogroup; [[ -n ${WORK_DIR:-} ]] || rm -rf "$work"' EXIT
  fi
fi

spm=${SPM:-}
if [[ -z $spm ]]; then
  echo "training the SentencePiece model (one step of xf-train)" >&2
  "$xf_bin/xf-train" --train "$train" --out "$work/spm" --vocab-size 8000 --layers 1 --d-model 16 \
    --heads 2 --d-ff 16 --max-steps 1 --valid-every 0 --max-length 64 --batch-tokens "$batch_tokens" \
    2> "$work/spm.log"
  spm=$work/spm/sentencepiece.model
fi

options=(--train "$train" --spm "$spm" --layers 3 --d-model 256 --heads 4 --d-ff 1024 --norm pre
  --batch-tokens "$batch_tokens" --max-length 64 --warmup 400 --max-steps $((2 * steps))
  --log-every "$steps" --valid-every 0 --save-every 0 --keep 1 --threads "$threads" --seed 1)

# tokens/s of the progress line at the last step
tokens_per_second() {
  grep "^step $((2 * steps)) |" "$1" | sed 's/.*| \([0-9]*\) tok\/s.*/\1/'
}
cpu_share() { awk '{ printf "%.2f", ($2 + $3) / ($1 > 0 ? $1 : 1) }' "$work/time.txt"; }

# Runs one configuration: NAME LOG COMMAND...
measure() {
  local name=$1 log=$2 load
  shift 2
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/time -f '%e %U %S' -o "$work/time.txt" "${prefix[@]}" "$@" 2> "$log" ||
    { tail -5 "$log" >&2; exit 1; }
  printf '%-6s %-28s %10s %10s   %s\n' "$round" "$name" "$(tokens_per_second "$log")" "$(cpu_share)" "$load"
}

printf '%-6s %-28s %10s %10s   %s\n' round run tokens/s "CPU share" "load average before"
for round in $(seq 1 "$rounds"); do
  rm -rf "$work/one" "$work/ranks"
  measure "1 process, $threads thread(s)" "$work/one.log" \
    "$xf_bin/xf-train" "${options[@]}" --out "$work/one"
  measure "$ranks ranks, $threads thread(s) each" "$work/ranks.log" \
    mpirun --oversubscribe --bind-to none -np "$ranks" "$xf_bin/xf-train" "${options[@]}" --out "$work/ranks"
done
