#!/usr/bin/env bash
# A toy run of the whole pipeline, for a checkout without a bundled model: makes a synthetic
# task (reverse a word of letters), trains a tiny model on it with xf-train (about a minute on
# 2 cores), converts it with xf-convert and translates held-out words with xf-run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/build/bin}
work=$root/build/toy
rm -rf "$work" && mkdir -p "$work"

# 4000 training pairs and 8 held-out words, 4-8 letters from a-j, with a fixed seed.
awk -v n=4008 'BEGIN { srand(7); for (i = 0; i < n; i++) { len = 4 + int(rand() * 5); s = "";
  for (k = 0; k < len; k++) s = s sprintf("%c", 97 + int(rand() * 10)); r = "";
  for (k = len; k > 0; k--) r = r substr(s, k, 1); print s "\t" r } }' > "$work/all.tsv"
head -n 4000 "$work/all.tsv" > "$work/train.tsv"
tail -n 8 "$work/all.tsv" | cut -f1 > "$work/heldout.txt"

echo "toy: training a 2+2-layer model to reverse letter sequences (about a minute)..." >&2
"$bin/xf-train" --train "$work/train.tsv" --out "$work/run" --spm-type char --vocab-size 100 \
  --layers 2 --d-model 64 --heads 4 --d-ff 256 --dropout 0 --label-smoothing 0 --warmup 200 \
  --lr-scale 0.5 --batch-tokens 1024 --max-steps 1500 --save-every 1500 --valid-every 0 \
  --log-every 500 --threads 2 --seed 3
"$bin/xf-convert" "$work/run/step-001500" -o "$work/toy.xfm" --dtype f32
echo "toy: input, then the model's output (greedy); each output should be its input reversed:" >&2
paste "$work/heldout.txt" <("$bin/xf-run" --model "$work/toy.xfm" --beam 1 --threads 2 < "$work/heldout.txt")
