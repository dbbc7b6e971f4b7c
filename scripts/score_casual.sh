#!/usr/bin/env bash
# Scores a model on a held-out file as written, as people type it and long (issue 37): the file
# itself (clean), its casual version (lowercase, no final punctuation), one typo per sentence
# (xf-join --modify ... --seed 1) and its long version (xf-join --seed 1), beam 4 with the
# model's length penalty. Prints xf-eval's table of clean and casual scores, the long score,
# and one summary line:
#   SUMMARY <split> clean <BLEU> casual <BLEU> typo <BLEU> long <BLEU>
#
#   scripts/score_casual.sh MODEL.xfm dev WORKDIR      # WORKDIR gets the sets and translations
#
# Environment: XF_DATA (folder with dev.tsv and test.tsv) [data/enfr], BUILD [build],
# THREADS (xf-run --threads) [1], BEAM [4].
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 MODEL.xfm dev|test WORKDIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$1
SPLIT=$2
WORK=$3
DATA=${XF_DATA:-$ROOT/data/enfr}
BIN=${BUILD:-$ROOT/build}/bin
THREADS=${THREADS:-1}
BEAM=${BEAM:-4}
[[ -f $DATA/$SPLIT.tsv ]] || { echo "$0: no $DATA/$SPLIT.tsv" >&2; exit 1; }
mkdir -p "$WORK"
name=$(basename "$MODEL" .xfm)

# The sets depend only on the data: made once per WORKDIR.
[[ -f $WORK/$SPLIT-long.tsv ]] || "$BIN/xf-join" --in "$DATA/$SPLIT.tsv" --out "$WORK/$SPLIT-long.tsv" --seed 1
[[ -f $WORK/$SPLIT-casual.tsv ]] || "$BIN/xf-join" --in "$DATA/$SPLIT.tsv" --out "$WORK/$SPLIT-casual.tsv" \
  --modify lowercase,no-final-punctuation
[[ -f $WORK/$SPLIT-typo.tsv ]] || "$BIN/xf-join" --in "$DATA/$SPLIT.tsv" --out "$WORK/$SPLIT-typo.tsv" \
  --modify typo --seed 1
cp "$DATA/$SPLIT.tsv" "$WORK/$SPLIT-clean.tsv"

for set in clean casual typo long; do
  "$BIN/xf-eval" --ref-tsv "$WORK/$SPLIT-$set.tsv" --print-sources > "$WORK/$SPLIT-$set.en"
  "$BIN/xf-run" --model "$MODEL" --beam "$BEAM" --threads "$THREADS" \
    < "$WORK/$SPLIT-$set.en" > "$WORK/$SPLIT-$set.$name.fr"
done
"$BIN/xf-eval" --ref-tsv "$WORK/$SPLIT-clean.tsv" --hyp "$WORK/$SPLIT-clean.$name.fr" \
  --casual-tsv "$WORK/$SPLIT-casual.tsv" --casual-hyp "$WORK/$SPLIT-casual.$name.fr" \
  --casual-tsv "$WORK/$SPLIT-typo.tsv" --casual-hyp "$WORK/$SPLIT-typo.$name.fr"
"$BIN/xf-eval" --ref-tsv "$WORK/$SPLIT-long.tsv" --hyp "$WORK/$SPLIT-long.$name.fr" --by-length

bleu() { "$BIN/xf-eval" --ref-tsv "$WORK/$SPLIT-$1.tsv" --hyp "$WORK/$SPLIT-$1.$name.fr" --json |
           sed 's/^{"bleu": \([0-9.e+-]*\),.*/\1/' | xargs printf '%.2f'; }
echo "SUMMARY $SPLIT clean $(bleu clean) casual $(bleu casual) typo $(bleu typo) long $(bleu long)"
