#!/usr/bin/env bash
# Trains the bundled English->French model (on the CPU, or a GPU with DEVICE=cuda), picks how
# many checkpoints to average and the length penalty on dev.tsv and its long version (xf-join),
# converts the model and scores it on the test set and its long version, by source length.
#
#   scripts/train_enfr.sh                # everything, default budget
#   MINUTES=600 THREADS=16 scripts/train_enfr.sh
#   CONTINUE_FROM=models/enfr.xfm RUN=build-enfr/run2 MINUTES=60 scripts/train_enfr.sh
#                                        # train a released model further (xf-train --init-from)
#
# Environment (defaults in brackets):
#   XF_DATA  folder with train.tsv, dev.tsv, test.tsv      [data/enfr in the repository,
#                                                           written by scripts/get_data.sh]
#   BUILD    build folder holding bin/xf-train etc.         [build]
#   RUN      run folder for checkpoints and logs            [build-enfr/run]
#   MINUTES  wall-time budget of the training itself        [92]
#   THREADS  CPU threads                                    [2]
#   MODEL    where the converted model goes                 [models/enfr.xfm]
#   DTYPE    f16 or int8                                    [int8]
#   AVERAGE  checkpoint counts to try averaging, on dev     ["1 4 8"]
#   PENALTY  length penalties to try, on dev                ["0.6 1.0"]
#   SPM      reuse this SentencePiece model instead of training one
#   CONTINUE_FROM  start from this model file's weights, architecture and vocabulary, with a
#            fresh optimizer warmed up to the rate the first stage ended at
#   CONTINUE_WARMUP, CONTINUE_LR_SCALE, CONTINUE_SEED, CONTINUE_DROPOUT  that stage's warmup
#            steps, learning-rate factor, seed and dropout [1000, 1, 2, 0.1]: peak rate =
#            factor * 256^-0.5 * warmup^-0.5
#   CONTINUE_RESHAPE  xf-convert options applied to CONTINUE_FROM before training from it, e.g.
#            "--shared-vocabulary --keep-encoder-layers 0,1,3,4,5" (a pruned file's vocabulary
#            shared again, encoder layer 2 left out)  [none]
#   BF16     1: xf-train --bf16 (bf16 matrix products, 1.5-1.9x the tokens/s where the CPU has
#            AVX512-BF16 or AMX); 0: f32; auto: 1 on such a CPU  [auto]
#   SCORE    0 skips the test-set scoring                   [1]
#   DEVICE   xf-train --device: cpu, or cuda (f16 mixed precision on a GPU; BF16 is then 0)  [cpu]
#   VOCAB, ENCODER_LAYERS, DECODER_LAYERS, D_MODEL, HEADS, D_FF, DROPOUT, BATCH_TOKENS, WARMUP,
#   LR_SCALE  the from-scratch model and schedule [8000, 3, 3, 256, 4, 1024, 0.1, 2500, 400, 2]
#   VALID_EVERY, VALID_BLEU, SAVE_EVERY, KEEP  validation and checkpoint cadence [500, 100, 250, 10]
#   PRUNE    1: convert with --target-vocabulary-from train.tsv (the target side keeps the pieces
#            French uses: a smaller output layer, faster decoding); 0: one shared vocabulary  [1]
#   JOIN     xf-train --join-probability: the share of training examples joined from 2..JOIN_MAX_PAIRS
#            pairs, for long sentences  [0]
#   JOIN_MAX_PAIRS  [4]
#   MODIFY   xf-train text modifier options (issue 37), e.g. "--modify-lowercase 0.25
#            --modify-no-final-punctuation 0.25 --modify-typo 0.1"  [none]
#   SHORT_FLOOR  the dev.tsv BLEU on sources of 1-10 words a chosen model must keep  [0]
#   MAX_LENGTH  xf-train --max-length: tokens a side, joins included  [64]
# The bundled model (docs/TRAINING.md, "The bundled English-French model"), in two stages: a
# 6+2 model, 5 minutes on one H100,
#   DEVICE=cuda MINUTES=5 VOCAB=12000 ENCODER_LAYERS=6 DECODER_LAYERS=2 DROPOUT=0.2 \
#   BATCH_TOKENS=12000 WARMUP=1000 SAVE_EVERY=500 KEEP=12 VALID_EVERY=1000 VALID_BLEU=0 \
#   AVERAGE=8 PENALTY="0.6 1.0 1.4" MODEL=enfr-6x2.xfm scripts/train_enfr.sh
# then that file without encoder layer 2, fine-tuned 70 minutes on a 2-core CPU:
#   CONTINUE_FROM=enfr-6x2.xfm CONTINUE_RESHAPE="--shared-vocabulary --keep-encoder-layers \
#   0,1,3,4,5" RUN=build-enfr/run-5p2 MINUTES=70 CONTINUE_WARMUP=500 CONTINUE_LR_SCALE=0.18 \
#   CONTINUE_SEED=3 CONTINUE_DROPOUT=0.2 BATCH_TOKENS=6000 VALID_BLEU=0 KEEP=16 \
#   AVERAGE="4 8 12" PENALTY="0.6 1.0 1.4" scripts/train_enfr.sh
# then (issue 29) that file continued on the CPU with 30% of the examples joined from 2-4 pairs,
# for long sentences (docs/TRAINING.md, "Long sentences"):
#   CONTINUE_FROM=enfr-5x2.xfm CONTINUE_RESHAPE=--shared-vocabulary RUN=build-enfr/run-long \
#   MINUTES=112 CONTINUE_WARMUP=300 CONTINUE_LR_SCALE=0.111 CONTINUE_SEED=5 CONTINUE_DROPOUT=0.2 \
#   BATCH_TOKENS=4000 MAX_LENGTH=96 JOIN=0.3 VALID_BLEU=0 SAVE_EVERY=200 KEEP=30 \
#   AVERAGE="4 8" PENALTY="1.0 1.4" SHORT_FLOOR=58.05 scripts/train_enfr.sh
# Re-running with an existing RUN resumes training from its newest checkpoint.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${XF_DATA:-$ROOT/data/enfr}
BUILD=${BUILD:-$ROOT/build}
RUN=${RUN:-$ROOT/build-enfr/run}
MINUTES=${MINUTES:-92}
THREADS=${THREADS:-2}
MODEL=${MODEL:-$ROOT/models/enfr.xfm}
DTYPE=${DTYPE:-int8}
AVERAGE=${AVERAGE:-1 4 8}
PENALTY=${PENALTY:-0.6 1.0}
BIN=$BUILD/bin
DEVICE=${DEVICE:-cpu}
BF16=${BF16:-auto}
[[ $DEVICE == cpu ]] || BF16=0
if [[ $BF16 == auto ]]; then
  grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && BF16=1 || BF16=0
fi

for tool in xf-train xf-convert xf-join xf-run xf-eval; do
  [[ -x $BIN/$tool ]] || { echo "train_enfr.sh: $BIN/$tool not found (build first)" >&2; exit 1; }
done

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== start: $(date -u +%FT%TZ)"
start=$(date +%s)

# d_model 256, 3+3 layers, 4 heads, d_ff 1024, shared 8k SentencePiece vocabulary. With a
# budget of an hour or two on two cores the run sees only a few epochs, so: small batches (more
# updates), a short warmup and twice the paper's learning rate (peak 2 * 256^-0.5 * 400^-0.5 =
# 6.3e-3), pre-norm (stable at that rate) and gradient clipping. docs/TRAINING.md gives the
# figures of each stage of the bundled model and the levers not yet measured.
TRAIN_ARGS=(
  --train "$DATA/train.tsv" --dev "$DATA/dev.tsv" --out "$RUN"
  --src-lang en --tgt-lang fr --vocab-size "${VOCAB:-8000}"
  --encoder-layers "${ENCODER_LAYERS:-3}" --decoder-layers "${DECODER_LAYERS:-3}"
  --d-model "${D_MODEL:-256}" --heads "${HEADS:-4}" --d-ff "${D_FF:-1024}" --norm pre
  --dropout "${DROPOUT:-0.1}" --label-smoothing 0.1 --warmup "${WARMUP:-400}"
  --lr-scale "${LR_SCALE:-2}" --clip-norm 1 --batch-tokens "${BATCH_TOKENS:-2500}"
  --max-length "${MAX_LENGTH:-64}" --join-probability "${JOIN:-0}" --join-max-pairs "${JOIN_MAX_PAIRS:-4}"
  --max-minutes "$MINUTES" --valid-every "${VALID_EVERY:-500}"
  --valid-bleu-sentences "${VALID_BLEU:-100}" --save-every "${SAVE_EVERY:-250}"
  --keep "${KEEP:-10}" --threads "$THREADS" --seed 1 --device "$DEVICE"
)
[[ -n ${SPM:-} ]] && TRAIN_ARGS+=(--spm "$SPM")   # reuse a SentencePiece model
# The continuation stage: the model's own architecture and vocabulary, a fresh Adam warmed up
# (by default over 1000 steps to 2.0e-3, the first stage's rate at its last step), a new batch
# order. Warm up to no more than the rate the model was last trained at.
CONTINUE_ARGS=(
  --init-from "${CONTINUE_FROM:-}" --train "$DATA/train.tsv" --dev "$DATA/dev.tsv" --out "$RUN"
  --src-lang en --tgt-lang fr
  --dropout "${CONTINUE_DROPOUT:-0.1}" --label-smoothing 0.1 --warmup "${CONTINUE_WARMUP:-1000}"
  --lr-scale "${CONTINUE_LR_SCALE:-1}" --clip-norm 1 --batch-tokens "${BATCH_TOKENS:-2500}"
  --max-length "${MAX_LENGTH:-64}" --join-probability "${JOIN:-0}" --join-max-pairs "${JOIN_MAX_PAIRS:-4}"
  --max-minutes "$MINUTES" --valid-every "${VALID_EVERY:-500}"
  --valid-bleu-sentences "${VALID_BLEU:-100}" --save-every "${SAVE_EVERY:-250}"
  --keep "${KEEP:-12}" --threads "$THREADS" --seed "${CONTINUE_SEED:-2}" --device "$DEVICE"
)
if [[ $BF16 == 1 ]]; then TRAIN_ARGS+=(--bf16); CONTINUE_ARGS+=(--bf16); fi
# shellcheck disable=SC2206  # the options are meant to split into words
MODIFY_ARGS=(${MODIFY:-})
TRAIN_ARGS+=("${MODIFY_ARGS[@]}")
CONTINUE_ARGS+=("${MODIFY_ARGS[@]}")
if compgen -G "$RUN/step-*" > /dev/null; then
  "$BIN/xf-train" --resume --out "$RUN" --max-minutes "$MINUTES" --threads "$THREADS"
elif [[ -n ${CONTINUE_FROM:-} ]]; then
  if [[ -n ${CONTINUE_RESHAPE:-} ]]; then
    mkdir -p "$(dirname "$RUN")"
    # shellcheck disable=SC2086  # the options are meant to split into words
    "$BIN/xf-convert" "$CONTINUE_FROM" -o "$(dirname "$RUN")/init.xfm" $CONTINUE_RESHAPE
    CONTINUE_ARGS[1]="$(dirname "$RUN")/init.xfm"  # the value of --init-from
  fi
  "$BIN/xf-train" "${CONTINUE_ARGS[@]}"
else
  "$BIN/xf-train" "${TRAIN_ARGS[@]}"
fi
trained=$(date +%s)
echo "== training wall time: $(( (trained - start) / 60 )) min"

# Choose on dev (beam 4, every reference of a source) how many of the newest checkpoints to
# average and the length penalty: the best BLEU on dev-long.tsv (dev.tsv's sources joined 2-4 at
# a time by xf-join: long sentences) among the candidates whose dev.tsv BLEU on sources of 1-10
# words is at least SHORT_FLOOR (short sentences kept; default 0: no floor); test.tsv stays
# unseen until the end.
SCORES=$(dirname "$RUN")
mkdir -p "$(dirname "$MODEL")"
CONVERT_ARGS=(--dtype "$DTYPE")
[[ ${PRUNE:-1} == 1 ]] && CONVERT_ARGS+=(--target-vocabulary-from "$DATA/train.tsv")
for set in dev test; do
  "$BIN/xf-join" --in "$DATA/$set.tsv" --out "$SCORES/$set-long.tsv" --seed 1
done
"$BIN/xf-eval" --ref-tsv "$DATA/dev.tsv" --print-sources > "$SCORES/dev.en"
"$BIN/xf-eval" --ref-tsv "$SCORES/dev-long.tsv" --print-sources > "$SCORES/dev-long.en"
best_bleu=-1 best_count="" best_penalty=""
echo "== dev.tsv + dev-long.tsv, beam 4: checkpoints averaged x length penalty"
for count in $AVERAGE; do
  mapfile -t checkpoints < <(ls -d "$RUN"/step-* | sort | tail -n "$count")
  "$BIN/xf-convert" "${checkpoints[@]}" -o "$SCORES/average-$count.xfm" "${CONVERT_ARGS[@]}" \
    >/dev/null
  for penalty in $PENALTY; do
    for set in dev dev-long; do
      "$BIN/xf-run" --model "$SCORES/average-$count.xfm" --beam 4 --length-penalty "$penalty" \
        --threads "$THREADS" < "$SCORES/$set.en" > "$SCORES/$set.avg$count.lp$penalty.fr"
    done
    short=$("$BIN/xf-eval" --hyp "$SCORES/dev.avg$count.lp$penalty.fr" --ref-tsv "$DATA/dev.tsv" --json \
            --by-length --length-buckets 10 | sed -E 's/.*"words": "1-10", "sentences": [0-9]+, "bleu": ([0-9.]+).*/\1/')
    long=$("$BIN/xf-eval" --hyp "$SCORES/dev-long.avg$count.lp$penalty.fr" --ref-tsv "$SCORES/dev-long.tsv" \
           --json | sed -E 's/.*"bleu": ([0-9.]+).*"bleu_ratio": ([0-9.]+).*/\1 \2/')
    bleu=${long% *}
    echo "== average of ${#checkpoints[@]} (${checkpoints[0]##*/} .. ${checkpoints[-1]##*/}), length penalty $penalty: dev.tsv 1-10 words BLEU $short; dev-long BLEU, ratio $long"
    if (( $(echo "$short >= ${SHORT_FLOOR:-0} && $bleu > $best_bleu" | bc) )); then
      best_bleu=$bleu best_count=$count best_penalty=$penalty
    fi
  done
done
[[ -n $best_count ]] || { echo "train_enfr.sh: no candidate keeps dev.tsv 1-10 words BLEU >= $SHORT_FLOOR" >&2; exit 1; }
echo "== chosen: average of the newest $best_count, length penalty $best_penalty (dev-long BLEU $best_bleu)"
mapfile -t checkpoints < <(ls -d "$RUN"/step-* | sort | tail -n "$best_count")
"$BIN/xf-convert" "${checkpoints[@]}" -o "$MODEL" "${CONVERT_ARGS[@]}" \
  --metadata "training.machine=$(nproc) cores, $THREADS threads" \
  --metadata "training.recipe=scripts/train_enfr.sh" \
  --metadata "training.data=train.tsv, dev.tsv of scripts/get_data.sh" \
  --metadata "selection.dev_long_bleu_beam4=$best_bleu" \
  --metadata "decoding.length_penalty=$best_penalty"
ls -l "$MODEL"

# Score on the test set when the runtime and xf-eval are built: greedy and beam 4, with every
# French translation of an English sentence as a reference (xf-eval groups the TSV's rows by
# their English side; the hypotheses hold one line per distinct English sentence), by source
# length; then the long test set at beam 4.
if [[ ${SCORE:-1} != 0 && -x $BIN/xf-run && -x $BIN/xf-eval ]]; then
  "$BIN/xf-eval" --ref-tsv "$DATA/test.tsv" --print-sources > "$SCORES/test.en"
  for beam in 1 4; do
    t0=$(date +%s.%N)
    "$BIN/xf-run" --model "$MODEL" --beam "$beam" --length-penalty "$best_penalty" \
      --threads "$THREADS" < "$SCORES/test.en" > "$SCORES/test.beam$beam.fr"
    t1=$(date +%s.%N)
    echo "== test, beam $beam ($(wc -l < "$SCORES/test.en") sentences, $(echo "$t1 - $t0" | bc) s):"
    "$BIN/xf-eval" --hyp "$SCORES/test.beam$beam.fr" --ref-tsv "$DATA/test.tsv" --by-length
  done
  "$BIN/xf-eval" --ref-tsv "$SCORES/test-long.tsv" --print-sources > "$SCORES/test-long.en"
  "$BIN/xf-run" --model "$MODEL" --beam 4 --length-penalty "$best_penalty" --threads "$THREADS" \
    < "$SCORES/test-long.en" > "$SCORES/test-long.beam4.fr"
  echo "== test-long.tsv (xf-join --seed 1 of test.tsv), beam 4:"
  "$BIN/xf-eval" --hyp "$SCORES/test-long.beam4.fr" --ref-tsv "$SCORES/test-long.tsv" --by-length
else
  echo "== xf-run or xf-eval not built: skipping the test-set scores"
fi
echo "== end: $(date -u +%FT%TZ), total $(( ($(date +%s) - start) / 60 )) min"
