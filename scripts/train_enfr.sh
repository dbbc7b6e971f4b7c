#!/usr/bin/env bash
# Trains the bundled English->French model on CPU, converts it and scores it on the test set.
#
#   scripts/train_enfr.sh                # everything, default budget
#   MINUTES=600 THREADS=16 scripts/train_enfr.sh
#
# Environment (defaults in brackets):
#   XF_DATA  folder with train.tsv, dev.tsv, test.tsv      [data/enfr: scripts/get_data.sh]
#   BUILD    build folder holding bin/xf-train etc.         [build]
#   RUN      run folder for checkpoints and logs            [build-enfr/run]
#   MINUTES  wall-time budget of the training itself        [92]
#   THREADS  CPU threads                                    [2]
#   MODEL    where the converted model goes                 [models/enfr.xfm]
#   DTYPE    f16 or int8                                    [int8]
#   AVERAGE  how many of the newest checkpoints to average  [3]
#   SPM      reuse this SentencePiece model instead of training one
#   SCORE    0 skips the test-set scoring                   [1]
# Re-running with an existing RUN resumes training from its newest checkpoint.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
XF_DATA=${XF_DATA:-$ROOT/data/enfr}
BUILD=${BUILD:-$ROOT/build}
RUN=${RUN:-$ROOT/build-enfr/run}
MINUTES=${MINUTES:-92}
THREADS=${THREADS:-2}
MODEL=${MODEL:-$ROOT/models/enfr.xfm}
DTYPE=${DTYPE:-int8}
AVERAGE=${AVERAGE:-3}
BIN=$BUILD/bin

for tool in xf-train xf-convert; do
  [[ -x $BIN/$tool ]] || { echo "train_enfr.sh: $BIN/$tool not found (build first)" >&2; exit 1; }
done
for split in train dev; do
  [[ -s $XF_DATA/$split.tsv ]] || {
    echo "train_enfr.sh: $XF_DATA/$split.tsv not found (run scripts/get_data.sh, or set XF_DATA)" >&2
    exit 1
  }
done

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== start: $(date -u +%FT%TZ)"
start=$(date +%s)

# d_model 256, 3+3 layers, 4 heads, d_ff 1024, shared 8k SentencePiece vocabulary. With a
# budget of an hour or two on two cores the run sees only one or two epochs, so: small batches
# (more updates), a short warmup and twice the paper's learning rate (peak 2 * 256^-0.5 *
# 400^-0.5 = 6.3e-3), pre-norm (stable at that rate) and gradient clipping.
TRAIN_ARGS=(
  --train "$XF_DATA/train.tsv" --dev "$XF_DATA/dev.tsv" --out "$RUN"
  --src-lang en --tgt-lang fr --vocab-size 8000
  --encoder-layers 3 --decoder-layers 3 --d-model 256 --heads 4 --d-ff 1024 --norm pre
  --dropout 0.1 --label-smoothing 0.1 --warmup 400 --lr-scale 2 --clip-norm 1
  --batch-tokens 2500 --max-length 64
  --max-minutes "$MINUTES" --valid-every 200 --valid-bleu-sentences 100 --save-every 200
  --keep 5 --threads "$THREADS" --seed 1
)
[[ -n ${SPM:-} ]] && TRAIN_ARGS+=(--spm "$SPM")   # reuse a SentencePiece model
if compgen -G "$RUN/step-*" > /dev/null; then
  "$BIN/xf-train" --resume --out "$RUN" --max-minutes "$MINUTES" --threads "$THREADS"
else
  "$BIN/xf-train" "${TRAIN_ARGS[@]}"
fi
trained=$(date +%s)
echo "== training wall time: $(( (trained - start) / 60 )) min"

# Average the newest checkpoints and convert.
mapfile -t checkpoints < <(ls -d "$RUN"/step-* | sort | tail -n "$AVERAGE")
mkdir -p "$(dirname "$MODEL")"
"$BIN/xf-convert" "${checkpoints[@]}" -o "$MODEL" --dtype "$DTYPE" \
  --metadata "training.machine=$(nproc) cores, $THREADS threads" \
  --metadata "training.recipe=scripts/train_enfr.sh"
ls -l "$MODEL"

# Score on the test set when the runtime and xf-eval are built: greedy and beam 4, with every
# French translation of an English sentence as a reference (xf-eval groups the TSV's rows by
# their English side; the hypotheses hold one line per distinct English sentence).
if [[ ${SCORE:-1} != 0 && -x $BIN/xf-run && -x $BIN/xf-eval ]]; then
  SCORES=$(dirname "$RUN")
  "$BIN/xf-eval" --ref-tsv "$XF_DATA/test.tsv" --print-sources > "$SCORES/test.en"
  for beam in 1 4; do
    t0=$(date +%s.%N)
    "$BIN/xf-run" --model "$MODEL" --beam "$beam" --threads "$THREADS" \
      < "$SCORES/test.en" > "$SCORES/test.beam$beam.fr"
    t1=$(date +%s.%N)
    echo "== test, beam $beam ($(wc -l < "$SCORES/test.en") sentences, $(echo "$t1 - $t0" | bc) s):"
    "$BIN/xf-eval" --hyp "$SCORES/test.beam$beam.fr" --ref-tsv "$XF_DATA/test.tsv"
  done
else
  echo "== xf-run or xf-eval not built: skipping the test-set scores"
fi
echo "== end: $(date -u +%FT%TZ), total $(( ($(date +%s) - start) / 60 )) min"
