#!/usr/bin/env bash
# The Bergamot student recipe with xf alone (issue 39): teacher -> distilled corpus (xf-distill)
# -> student (xf-train, SSRU decoder by default) -> averaged checkpoints (xf-convert) ->
# shortlist (xf-shortlist) -> int8 with the shortlist stored (xf-convert) -> the student's card
# (BLEU of teacher and student on dev and test, by source length; sentences/s of each on one
# thread at batch 1 and 32, int8).
#
# Usage: scripts/train_student.sh --teacher T.xfm --train TRAIN.tsv --dev DEV.tsv --test TEST.tsv
#            --out DIR [options] [-- XF_TRAIN_OPTIONS...]
#   --subset N        distill a sample of N pairs of TRAIN (deterministic, in file order)
#   --n-best N        keep the best of the teacher's N best by sentence BLEU (default 1)
#   --threads N       threads of every step (default 2)
#   --minutes M       the student's training time (xf-train --max-minutes, default 60); 0 with
#                     checkpoints there: no more training, the later steps from those
#   --init-layers E/D start the student from the teacher's encoder layers E and decoder layers D
#                     (e.g. 0,2,4/1: xf-convert --keep-*-layers, then xf-train
#                     --init-matching-from; the shape options must say as many layers)
#   --target-vocabulary-from FILE   prune the student's target vocabulary to FILE's (as the
#                     bundled teacher's: xf-convert --target-vocabulary-from)
#   --average N       checkpoints averaged (default 3: the last N kept)
#   --length-penalty A  the student's decoding.length_penalty, stored in its file (default: none)
#   --top-k K, --frequent N   the shortlist (default 50, 50)
#   --isa "L1 L2"     speed also with ONEDNN_MAX_CPU_ISA=L (default: native only; e.g. AVX2)
#   --bin DIR         the tools (default build/bin)
# XF_TRAIN_OPTIONS after -- replace the student's shape (default: 6-layer encoder, 2-layer SSRU
# decoder, d_model 256, 4 heads, d_ff 1024, pre-norm, vocabulary 8000) and add training options.
# Run the same command again after a kill, or with a longer --minutes: distillation resumes by
# pair (or finds its run complete), training resumes from its last checkpoint with the options
# it saved; the later steps (minutes) are done again from the averaged checkpoints.
# Writes into DIR: distilled.tsv (+ .progress), train/ (xf-train's run), student.xfm (f32,
# averaged), lex.s2t, student-int8.xfm (int8 + shortlist), eval/ (hypotheses, scores, speed)
# and card.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin threads=2 minutes=60 average=3 top_k=50 frequent=50 subset=0 n_best=1
teacher="" train="" dev="" test="" out="" init_layers="" target_vocabulary="" isa_levels="" length_penalty=""
student=(--encoder-layers 6 --decoder-layers 2 --decoder-cell ssru --d-model 256 --heads 4 --d-ff 1024
         --norm pre --vocab-size 8000)
usage() { sed -n '8,27p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --teacher) teacher=$2; shift 2 ;;
    --train) train=$2; shift 2 ;;
    --dev) dev=$2; shift 2 ;;
    --test) test=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --subset) subset=$2; shift 2 ;;
    --n-best) n_best=$2; shift 2 ;;
    --init-layers) init_layers=$2; shift 2 ;;
    --target-vocabulary-from) target_vocabulary=$2; shift 2 ;;
    --isa) isa_levels=$2; shift 2 ;;
    --length-penalty) length_penalty=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --average) average=$2; shift 2 ;;
    --top-k) top_k=$2; shift 2 ;;
    --frequent) frequent=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; student=("$@"); break ;;
    *) echo "train_student.sh: unknown option '$1'" >&2; usage ;;
  esac
done
for name in teacher train dev test out; do
  [ -n "${!name}" ] || { echo "train_student.sh: --$name is required" >&2; usage; }
done
for file in "$teacher" "$train" "$dev" "$test"; do
  [ -r "$file" ] || { echo "train_student.sh: cannot read $file" >&2; exit 1; }
done
mkdir -p "$out/eval"
log() { echo "train_student.sh: $*" >&2; }

# 1. The corpus to distill: TRAIN, or a deterministic sample of --subset pairs (selection
#    sampling: every pair equally likely, the file's order kept).
corpus=$train
if [ "$subset" -gt 0 ]; then
  corpus=$out/train-subset.tsv
  if [ ! -s "$corpus" ]; then
    total=$(wc -l < "$train")
    awk -v n="$subset" -v total="$total" 'BEGIN { srand(39) }
      { if (rand() * (total - NR + 1) < n - kept) { print; ++kept } }' "$train" > "$corpus.tmp"
    mv "$corpus.tmp" "$corpus"
  fi
fi

# 2. Distillation (resumes by pair; a finished run says so).
log "distilling $corpus with $teacher"
"$bin/xf-distill" --model "$teacher" --in "$corpus" --out "$out/distilled.tsv" --threads "$threads" \
  --n-best "$n_best"

# 3. The student (a run that has checkpoints resumes from its last with the options it saved),
#    from the teacher's kept layers with --init-layers (its vocabulary shared again if pruned).
init=()
if [ -n "$init_layers" ]; then
  shared=()
  # Read whole before grep: grep -q leaving early broke xf-inspect's pipe, which pipefail then
  # took for "not found" now and then.
  inspected=$("$bin/xf-inspect" "$teacher")
  grep -Eq '^ *shared_embeddings +0$' <<< "$inspected" && shared=(--shared-vocabulary)
  "$bin/xf-convert" "$teacher" -o "$out/init.xfm" "${shared[@]}" \
    --keep-encoder-layers "${init_layers%/*}" --keep-decoder-layers "${init_layers#*/}"
  init=(--init-matching-from "$out/init.xfm")
fi
if ls -d "$out/train"/step-* > /dev/null 2>&1; then
  if [ "$minutes" != 0 ]; then
    log "training the student for $minutes more minutes"
    "$bin/xf-train" --resume --out "$out/train" --threads "$threads" --max-minutes "$minutes"
  fi
else
  log "training the student for $minutes minutes"
  "$bin/xf-train" --train "$out/distilled.tsv" --dev "$dev" --out "$out/train" \
    --threads "$threads" --max-minutes "$minutes" --keep "$average" "${init[@]}" "${student[@]}"
fi

# 4. The last --average checkpoints averaged.
mapfile -t checkpoints < <(ls -d "$out/train"/step-* | sort | tail -n "$average")
"$bin/xf-convert" "${checkpoints[@]}" -o "$out/student.xfm"

# 5. The shortlist, from the distilled corpus, for the student's pieces.
"$bin/xf-shortlist" --model "$out/student.xfm" --in "$out/distilled.tsv" --out "$out/lex.s2t" \
  --top-k "$top_k" --frequent "$frequent"

# 6. int8 with the shortlist stored (and the target vocabulary pruned, if asked).
prune=() penalty=()
[ -n "$target_vocabulary" ] && prune=(--target-vocabulary-from "$target_vocabulary")
[ -n "$length_penalty" ] && penalty=(--metadata "decoding.length_penalty=$length_penalty")
"$bin/xf-convert" "$out/student.xfm" -o "$out/student-int8.xfm" --dtype int8 --shortlist "$out/lex.s2t" \
  --shortlist-first "$frequent" --shortlist-best "$top_k" "${prune[@]}" "${penalty[@]}"

# 7. The card: BLEU (beam 4, each model's settings) on dev and test by source length, on test's
#    long version (2-4 pairs joined: xf-join --seed 1) and its casual one (lowercase, no final
#    punctuation); sentences/s on one thread at batch 1 and 32 (int8, the test sources), at the
#    native instruction set and each --isa level, and the student's speed over the teacher's.
score() {  # MODEL NAME SET FILE
  "$bin/xf-eval" --ref-tsv "$4" --print-sources > "$out/eval/$3.src"
  "$bin/xf-run" --model "$1" --threads "$threads" < "$out/eval/$3.src" > "$out/eval/$2.$3.hyp"
  "$bin/xf-eval" --hyp "$out/eval/$2.$3.hyp" --ref-tsv "$4" --by-length > "$out/eval/$2.$3.scores"
}
speed() {  # MODEL NAME BATCH ISA
  local cap=()
  [ "$4" != native ] && cap=(env "ONEDNN_MAX_CPU_ISA=$4")
  "${cap[@]}" "$bin/xf-bench" --model "$1" --input "$out/eval/test.src" --threads 1 --dtype int8 \
    --batch "$3" > "$out/eval/$2.speed$3.$4" 2>&1
  sed -n 's/^ *sentences\/s *//p' "$out/eval/$2.speed$3.$4" | head -1
}
[ -s "$out/eval/test-long.tsv" ] || "$bin/xf-join" --in "$test" --out "$out/eval/test-long.tsv" --seed 1
[ -s "$out/eval/test-casual.tsv" ] || "$bin/xf-join" --in "$test" --out "$out/eval/test-casual.tsv" \
  --modify lowercase,no-final-punctuation
sets=(dev:$dev test:$test test-long:$out/eval/test-long.tsv test-casual:$out/eval/test-casual.tsv)
for set in "${sets[@]}"; do
  score "$teacher" teacher "${set%%:*}" "${set#*:}"
  score "$out/student-int8.xfm" student "${set%%:*}" "${set#*:}"
done
{
  echo "# Student card ($(date -u +%Y-%m-%d), $(uname -m), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "Teacher: $teacher. Distilled: $out/distilled.tsv ($(wc -l < "$out/distilled.tsv") pairs of $corpus, n-best $n_best)."
  # The training as the averaged file records it (its last checkpoint's steps and wall time, over
  # every run that resumed it), not this run's --minutes (0 when only the later steps are redone).
  trained=$("$bin/xf-inspect" "$out/student.xfm")
  steps=$(sed -n 's/^ *training.steps *//p' <<< "$trained")
  trained_minutes=$(sed -n 's/^ *training.wall_seconds *//p' <<< "$trained" | awk '{ printf "%.0f", $1 / 60 }')
  echo "Student: xf-train ${init[*]} ${student[*]}, $steps steps in $trained_minutes minutes of training, ${#checkpoints[@]} checkpoints averaged;"
  echo "int8 with a shortlist (top $top_k per source piece, first $frequent target ids)${prune:+, target vocabulary of ${prune[1]}}."
  echo
  for set in "${sets[@]}"; do
    for who in teacher student; do
      echo "## $who, ${set%%:*} (beam 4)"
      echo
      cat "$out/eval/$who.${set%%:*}.scores"
      echo
    done
  done
  echo "## Speed, one thread, int8, $(wc -l < "$out/eval/test.src") test sources (xf-bench)"
  echo
  echo "| model | instruction set | batch 1 sentences/s | batch 32 sentences/s |"
  echo "| --- | --- | --- | --- |"
  for isa in native $isa_levels; do
    t1=$(speed "$teacher" teacher 1 "$isa") t32=$(speed "$teacher" teacher 32 "$isa")
    s1=$(speed "$out/student-int8.xfm" student 1 "$isa") s32=$(speed "$out/student-int8.xfm" student 32 "$isa")
    echo "| teacher | $isa | $t1 | $t32 |"
    echo "| student | $isa | $s1 | $s32 |"
    echo "| student / teacher | $isa | $(awk -v a="$s1" -v b="$t1" 'BEGIN { printf "%.2f", a / b }') | $(awk -v a="$s32" -v b="$t32" 'BEGIN { printf "%.2f", a / b }') |"
  done
} > "$out/card.md"
log "wrote $out/card.md"
