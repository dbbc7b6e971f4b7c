#!/usr/bin/env bash
# Training tokens/s of xf-train against PyTorch on the CPU: issue 4's performance goal.
#
#   scripts/bench/compare_train_speed.sh [TRAIN.tsv]     (default $XF_DATA/train.tsv)
#
# The same model (d_model 256, 3+3 layers, 4 heads, d_ff 1024, shared SentencePiece vocabulary of
# VOCAB pieces, tied embeddings, dropout 0.1, label smoothing 0.1, Adam), the same batches rule
# (rows * max(source, target length) <= BATCH_TOKENS), the same threads, the same SentencePiece
# model (xf-train trains it; PyTorch reuses it) and the same token count (source tokens with EOS
# plus target tokens + 1 per pair, padding excluded).
#   xf-train: 2*STEPS steps with --log-every STEPS; the progress line at step 2*STEPS is the
#             tokens/s of the last STEPS steps (the first STEPS are warm-up).
#   PyTorch:  pytorch_train_speed.py, WARMUP_STEPS untimed steps, then STEPS timed steps.
#
# Environment (defaults in brackets):
#   XF_DATA [REPO/data/enfr, see scripts/get_data.sh]
#   XF_BIN [REPO/build/bin]  PYTHON [python3, with torch, sentencepiece, numpy]
#   WORK_DIR [a new directory under /tmp]  THREADS [2]  BATCH_TOKENS [4096]  NORM [post]
#   VOCAB [8000]  STEPS [20]  WARMUP_STEPS [5]  SPM [train one with xf-train]
#   NICE   run both at this nice level (e.g. -15 on a shared machine)
#   BF16=1 bf16 matrix products in both: xf-train --bf16 and PyTorch --autocast bf16 (a CPU with
#          AVX512-BF16 or AMX)
# Also printed: each process's CPU share, (user + sys) / wall (2.0 = both cores; xf-train's
# includes its single-threaded corpus loading), and the load average before each run.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/training_inputs.sh"  # here, repo, train, xf_bin
python=${PYTHON:-python3}
work=${WORK_DIR:-$(mktemp -d /tmp/xf-train-compare-XXXXXX)}
threads=${THREADS:-2}
batch_tokens=${BATCH_TOKENS:-4096}
norm=${NORM:-post}
vocab=${VOCAB:-8000}
steps=${STEPS:-20}
warmup_steps=${WARMUP_STEPS:-5}
bf16=${BF16:-0}

[[ -x $xf_bin/xf-train ]] || { echo "$0: $xf_bin/xf-train not found (set XF_BIN)" >&2; exit 1; }
"$python" -c "import torch, sentencepiece, numpy" 2>/dev/null ||
  { echo "$0: $python lacks torch/sentencepiece/numpy (set PYTHON)" >&2; exit 1; }
mkdir -p "$work"

# NICE: Linux groups a session's processes (sched_autogroup) and shares the CPU between groups,
# so a process's own nice value hardly matters against other sessions: set the group's too
# (negative values need root), restored on exit.
if [[ -n ${NICE:-} && -w /proc/self/autogroup ]]; then
  previous_group_nice=$(sed -E 's/.*nice (-?[0-9]+).*/\1/' /proc/self/autogroup)
  echo "$NICE" > /proc/self/autogroup
  trap 'echo "$previous_group_nice" > /proc/self/autogroup' EXIT
fi
rm -rf "$work/xf-run"

model_args=(--encoder-layers 3 --decoder-layers 3 --d-model 256 --heads 4 --d-ff 1024
            --norm "$norm" --dropout 0.1 --label-smoothing 0.1)
spm_args=()
[[ -n ${SPM:-} ]] && spm_args=(--spm "$SPM")
xf_command=("$xf_bin/xf-train" --train "$train" --out "$work/xf-run" "${model_args[@]}"
            --vocab-size "$vocab" "${spm_args[@]}" --batch-tokens "$batch_tokens"
            --threads "$threads" --max-steps $((2 * steps)) --log-every "$steps"
            --valid-every 0 --save-every 0 --valid-bleu-sentences 0 --seed 1)
[[ $bf16 == 1 ]] && xf_command+=(--bf16)
prefix=()
[[ -n ${NICE:-} ]] && prefix=(nice -n "$NICE")
cpu_share() { awk '{ printf "%.2f", ($2 + $3) / ($1 > 0 ? $1 : 1) }' "$work/time.txt"; }

echo "== load $(cut -d' ' -f1-3 /proc/loadavg); ${xf_command[*]}"
/usr/bin/time -f '%e %U %S' -o "$work/time.txt" "${prefix[@]}" "${xf_command[@]}" \
  2> "$work/xf-train.log" || { tail -5 "$work/xf-train.log" >&2; exit 1; }
xf_cpu=$(cpu_share)
xf_line=$(grep "^step $((2 * steps)) |" "$work/xf-train.log")
xf_tokens_per_s=$(sed -E 's/.*\| ([0-9.]+) tok\/s.*/\1/' <<< "$xf_line")
echo "$xf_line"

spm_model=${SPM:-$work/xf-run/sentencepiece.model}
torch_command=("$python" "$here/pytorch_train_speed.py" --train "$train" --spm "$spm_model"
               --norm "$norm" --batch-tokens "$batch_tokens" --threads "$threads"
               --warmup-steps "$warmup_steps" --steps "$steps" --json)
[[ $bf16 == 1 ]] && torch_command+=(--autocast bf16)
echo "== load $(cut -d' ' -f1-3 /proc/loadavg); ${torch_command[*]}"
torch_json=$(/usr/bin/time -f '%e %U %S' -o "$work/time.txt" "${prefix[@]}" "${torch_command[@]}")
torch_cpu=$(cpu_share)
echo "$torch_json" > "$work/pytorch.json"
torch_tokens_per_s=$("$python" -c 'import json,sys; print("%.0f" % json.loads(sys.argv[1])["tokens_per_s"])' "$torch_json")

printf "training tokens/s (source + target, %s threads, batch %s tokens, %s-norm, %s products):\n" \
  "$threads" "$batch_tokens" "$norm" "$([[ $bf16 == 1 ]] && echo bf16 || echo f32)"
printf "  xf-train  %s   (process CPU share %s)\n  PyTorch   %s   (process CPU share %s)\n" \
  "$xf_tokens_per_s" "$xf_cpu" "$torch_tokens_per_s" "$torch_cpu"
echo "logs: $work/xf-train.log $work/pytorch.json"
