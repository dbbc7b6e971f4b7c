#!/usr/bin/env bash
# scripts/train_student.sh end to end at a toy size: the tiny test model as teacher, a corpus of
# a few hundred lines, a tiny student trained for a few steps. Checks that every step wrote what
# the next reads and that the card holds both models' scores and speeds; then that a second run
# of the same command redoes nothing (each step resumes or finds its output).
# Usage: train_student_toy_test.sh BIN_DIR SCRIPT
set -euo pipefail
bin=${1:?BIN_DIR}
script=${2:?SCRIPT}
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-train-student-XXXXXX")
trap '[ -n "${XF_KEEP:-}" ] || rm -rf "$work"' EXIT
words=(the a cat dog sat on mat house red big small runs sees le la chat chien sur maison rouge)
make_tsv() {  # LINES SEED
  awk -v n="$1" -v seed="$2" -v words="${words[*]}" 'BEGIN { srand(seed); split(words, w, " ");
    for (i = 0; i < n; ++i) { line = ""; k = 2 + int(rand() * 6);
      for (j = 0; j < k; ++j) line = line (j ? " " : "") w[1 + int(rand() * 20)];
      print line "\t" line } }'
}
make_tsv 300 1 > "$work/train.tsv"
make_tsv 20 2 > "$work/dev.tsv"
make_tsv 20 3 > "$work/test.tsv"
# The teacher as the bundled one is: trained a few steps with tied embeddings, then its target
# vocabulary pruned, so source and target pieces differ (shared_embeddings 0) and the student's
# init must share them again (a random test model's untied output could not be).
"$bin/xf-train" --train "$work/train.tsv" --out "$work/teacher-run" --encoder-layers 2 --decoder-layers 1 \
  --d-model 32 --heads 4 --d-ff 64 --norm post --max-positions 128 --vocab-size 60 --max-steps 10 \
  --save-every 10 --valid-every 0 --batch-tokens 400 --threads 1 > "$work/teacher.log" 2>&1 ||
  { cat "$work/teacher.log" >&2; exit 1; }
"$bin/xf-convert" "$work/teacher-run"/step-* -o "$work/tied.xfm" 2> /dev/null
"$bin/xf-convert" "$work/tied.xfm" -o "$work/teacher.xfm" --target-vocabulary-from "$work/train.tsv" 2> /dev/null
"$bin/xf-inspect" "$work/teacher.xfm" > "$work/teacher-inspect.txt"
grep -Eq '^ *shared_embeddings +0$' "$work/teacher-inspect.txt" ||
  { echo "FAIL: the teacher's vocabulary is still shared" >&2; exit 1; }
# The student: one layer a side with the recipe's SSRU decoder, started from the teacher's second
# encoder layer and first decoder layer (the teacher's width, vocabulary and norm position), 30
# steps; the runtime decodes it (with its stored shortlist, its target vocabulary pruned) for the
# card, natively and at AVX2.
student=(--encoder-layers 1 --decoder-layers 1 --decoder-cell ssru --d-model 32
         --heads 4 --d-ff 64 --norm post --max-positions 128 --max-length 60
         --max-steps 30 --save-every 10 --valid-every 0 --log-every 10 --batch-tokens 400)
run() {
  "$script" --teacher "$work/teacher.xfm" --train "$work/train.tsv" --dev "$work/dev.tsv" --test "$work/test.tsv" \
    --out "$work/out" --subset 200 --n-best 2 --threads 1 --minutes 5 --bin "$bin" --top-k 5 --frequent 10 \
    --init-layers 1/0 --target-vocabulary-from "$work/train.tsv" --isa AVX2 --length-penalty 1.2 -- "${student[@]}"
}
run 2> "$work/first.log" || { cat "$work/first.log" >&2; exit 1; }
for file in train-subset.tsv distilled.tsv distilled.tsv.progress init.xfm student.xfm lex.s2t student-int8.xfm card.md; do
  [ -s "$work/out/$file" ] || { echo "FAIL: $file missing or empty" >&2; exit 1; }
done
[ "$(wc -l < "$work/out/train-subset.tsv")" -eq 200 ] || { echo "FAIL: the subset is not 200 pairs" >&2; exit 1; }
grep -q '^pairs_done 200$' "$work/out/distilled.tsv.progress" || { echo "FAIL: distillation incomplete" >&2; exit 1; }
grep -q 'n_best=2' "$work/out/distilled.tsv.progress" || { echo "FAIL: not distilled with --n-best 2" >&2; exit 1; }
grep -q 'from .*init.xfm: [0-9]* of [0-9]* parameter tensors' "$work/first.log" ||
  { echo "FAIL: the student did not start from the teacher's layers" >&2; exit 1; }
# Both models scored on dev, test, test's long and casual versions, and both timed at both
# batches at both instruction-set levels.
[ "$(grep -c '^BLEU = ' "$work/out/card.md")" -eq 8 ] || { echo "FAIL: the card lacks scores" >&2; cat "$work/out/card.md" >&2; exit 1; }
for who in teacher student; do
  for isa in native AVX2; do
    grep -Eq "^\| $who \| $isa \| [0-9.]+ \| [0-9.]+ \|$" "$work/out/card.md" ||
      { echo "FAIL: no $who speed at $isa" >&2; cat "$work/out/card.md" >&2; exit 1; }
  done
done
grep -Eq '^\| student / teacher \| AVX2 \| [0-9.]+ \| [0-9.]+ \|$' "$work/out/card.md" || { echo "FAIL: no ratio" >&2; exit 1; }
# The student file: an SSRU decoder and a stored shortlist, as xf-inspect reads them.
"$bin/xf-inspect" "$work/out/student-int8.xfm" > "$work/inspect.txt"
# The card's training: the steps the file records (not the run's --minutes).
steps=$(sed -n 's/^ *training.steps *//p' "$work/inspect.txt")
grep -Eq "^Student: .*, $steps steps in [0-9]+ minutes of training, " "$work/out/card.md" ||
  { echo "FAIL: the card does not give the $steps steps trained" >&2; cat "$work/out/card.md" >&2; exit 1; }
grep -Eq 'decoder_layer_kind +ssru' "$work/inspect.txt" || { echo "FAIL: not an SSRU decoder" >&2; cat "$work/inspect.txt" >&2; exit 1; }
grep -qi 'shortlist' "$work/inspect.txt" || { echo "FAIL: no stored shortlist" >&2; cat "$work/inspect.txt" >&2; exit 1; }
grep -Eq '^ *shared_embeddings +0$' "$work/inspect.txt" || { echo "FAIL: the target vocabulary is not pruned" >&2; exit 1; }
grep -Eq '^ *length_penalty +1.2 ' "$work/inspect.txt" || { echo "FAIL: no stored length penalty" >&2; cat "$work/inspect.txt" >&2; exit 1; }
# Run again: distillation finds its run complete, training resumes at its last step.
run 2> "$work/second.log" || { cat "$work/second.log" >&2; exit 1; }
grep -q 'is already complete' "$work/second.log" || { echo "FAIL: distillation was redone" >&2; exit 1; }
echo "train_student.sh toy run: ok"
