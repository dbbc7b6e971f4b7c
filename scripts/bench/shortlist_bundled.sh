#!/usr/bin/env bash
# The bundled model with a lexical shortlist learned by xf-shortlist (issue 38's goal: test.tsv
# BLEU within 0.3 of the model without it, and int8 batch-32 beam-4 one-thread time cut by at
# least 20%). Regenerates the figures of models/README.md ("A lexical shortlist") and
# docs/BENCHMARKS.md; the logs of 2026-11-28: benchmarks/cpu/2026-11-28-shortlist-bundled/.
#
#   XF_DATA=data/enfr scripts/bench/shortlist_bundled.sh WORK_DIR > log.txt
#
# 1. xf-shortlist over XF_DATA/train.tsv with the model's tokenizers: text lex files of up to 100
#    targets a source piece (pruned as they are read, for the dev sweep): plain (the K sweep) and
#    --skip-frequent (targets below FIRST take no place; the probability sweep); and the chosen
#    list as a binary file, WORK_DIR/enfr.s2t.bin (--top-k 100 --frequent FIRST --min-probability
#    MIN_P --skip-frequent --binary).
# 2. dev.tsv (the choice): BLEU, int8, the model's beam 4 and length penalty, without a shortlist,
#    with the plain lex read as --shortlist-best B (B in BESTS) --shortlist-first FIRST, with the
#    skip-frequent lex read with --shortlist-threshold P (P in THRESHOLDS), and with the chosen
#    file; for each, the lines that differ from the output without a shortlist.
# 3. test.tsv (once): BLEU, int8 and f32 (--dtype f32), without and with the chosen shortlist,
#    and int8 with the first choice (the plain lex, best 30: dev's choice before the
#    probability sweep, which test.tsv showed 0.59 BLEU under the model without a shortlist).
# 4. Time: test.tsv's sources, xf-run --threads 1 --max-batch 32 (beam 4, int8), without and with
#    the chosen shortlist in turn, ROUNDS runs each (/usr/bin/time: user + sys CPU seconds and
#    wall of the whole process, the 1-minute load average at each start); medians and the ratio
#    of the median CPU seconds. Outputs of every round must be the same (md5).
#
# Environment (defaults in brackets): XF_DATA [required], XF_BIN [REPO/build/bin], MODEL
# [REPO/models/enfr.xfm], FIRST [100], MIN_P [0.0002],
# BESTS ["20 30 50 100"], THRESHOLDS ["0.003 0.002 0.001 0.0005 0.0002 0.0001"], ROUNDS [5],
# THREADS (for the BLEU runs) [2]. Paths in the log are written as XF_DATA, WORK_DIR and REPO.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: XF_DATA=DIR $0 WORK_DIR" >&2; exit 2; }
work=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
data=${XF_DATA:?XF_DATA must name the folder of train.tsv, dev.tsv and test.tsv}
xf_bin=${XF_BIN:-$repo/build/bin}
model=${MODEL:-$repo/models/enfr.xfm}
first=${FIRST:-100} min_p=${MIN_P:-0.0002} bests=${BESTS:-20 30 50 100} rounds=${ROUNDS:-5} threads=${THREADS:-2}
thresholds=${THRESHOLDS:-0.003 0.002 0.001 0.0005 0.0002 0.0001}
for f in train dev test; do [[ -s $data/$f.tsv ]] || { echo "$0: $data/$f.tsv: missing" >&2; exit 1; }; done
mkdir -p "$work"
hide() { sed -e "s#$work#WORK_DIR#g" -e "s#$data#XF_DATA#g" -e "s#$repo#REPO#g"; }

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "xf $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'), model $(sha256sum "$model" | cut -c1-16)"

echo
echo "== 1. shortlists from train.tsv"
"$xf_bin/xf-shortlist" --model "$model" --in "$data/train.tsv" --out "$work/lex100.s2t" --top-k 100 --frequent "$first" 2>&1 | hide
"$xf_bin/xf-shortlist" --model "$model" --in "$data/train.tsv" --out "$work/lex100-skip.s2t" --top-k 100 --frequent "$first" \
  --skip-frequent 2>&1 | hide
"$xf_bin/xf-shortlist" --model "$model" --in "$data/train.tsv" --out "$work/enfr.s2t.bin" --top-k 100 --frequent "$first" \
  --min-probability "$min_p" --skip-frequent --binary 2>&1 | hide
chosen=$work/enfr.s2t.bin
echo "chosen: WORK_DIR/enfr.s2t.bin, $(stat -c %s "$chosen") bytes, sha256 $(sha256sum "$chosen" | cut -c1-16)"

for set in dev test; do "$xf_bin/xf-eval" --ref-tsv "$data/$set.tsv" --print-sources > "$work/$set.en"; done

# translate SET NAME XF-RUN-OPTIONS...: WORK_DIR/SET.NAME.fr
translate() {
  local set=$1 name=$2
  shift 2
  "$xf_bin/xf-run" --model "$model" --threads "$threads" --input "$work/$set.en" "$@" > "$work/$set.$name.fr" 2>/dev/null
}
# score SET NAME [BASE]: BLEU, chrF2 and the lines that differ from SET.BASE.fr
score() {
  local set=$1 name=$2 base=${3:-}
  local bleu; bleu=$("$xf_bin/xf-eval" --hyp "$work/$set.$name.fr" --ref-tsv "$data/$set.tsv" | tr '\n' ' ')
  local changed=""
  [[ -n $base ]] && changed="; lines not as $base: $(paste -d '\t' "$work/$set.$name.fr" "$work/$set.$base.fr" | awk -F'\t' '$1 != $2' | wc -l) of $(wc -l < "$work/$set.en")"
  echo "$set $name: $bleu$changed"
}

echo
echo "== 2. dev.tsv, int8, beam 4 (the model's), first $first"
translate dev none --shortlist none
score dev none
for best in $bests; do
  translate dev "best$best" --shortlist "$work/lex100.s2t" --shortlist-first "$first" --shortlist-best "$best"
  score dev "best$best" none
done
for threshold in $thresholds; do
  translate dev "skip-p$threshold" --shortlist "$work/lex100-skip.s2t" --shortlist-first "$first" --shortlist-best 100 \
    --shortlist-threshold "$threshold"
  score dev "skip-p$threshold" none
done
translate dev chosen --shortlist "$chosen"
score dev chosen none

echo
echo "== 3. test.tsv, beam 4 (the model's), without and with the chosen shortlist"
for dtype in int8 f32; do
  translate test "none-$dtype" --dtype "$dtype" --shortlist none
  score test "none-$dtype"
  translate test "chosen-$dtype" --dtype "$dtype" --shortlist "$chosen"
  score test "chosen-$dtype" "none-$dtype"
done
translate test first-choice --shortlist "$work/lex100.s2t" --shortlist-first "$first" --shortlist-best 30
score test first-choice none-int8

echo
echo "== 4. time: test.tsv's $(wc -l < "$work/test.en") sources, xf-run --threads 1 --max-batch 32 --dtype int8 (beam 4), $rounds rounds in turn"
echo "run shortlist cpu_s wall_s load md5"
for round in $(seq "$rounds"); do
  for shortlist in none chosen; do
    file=none
    [[ $shortlist == chosen ]] && file=$chosen
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "%U %S %e" -o "$work/time" "$xf_bin/xf-run" --model "$model" --threads 1 --max-batch 32 \
      --dtype int8 --shortlist "$file" --input "$work/test.en" > "$work/timed.fr" 2>/dev/null
    read -r user sys wall < "$work/time"
    printf '%s %s %.2f %s %s %s\n' "$round" "$shortlist" "$(echo "$user + $sys" | bc)" "$wall" "$load" \
      "$(md5sum < "$work/timed.fr" | cut -c1-12)" | tee -a "$work/times"
  done
done
median() { grep " $1 " "$work/times" | awk "{print \$$2}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cpu_none=$(median none 3) cpu_chosen=$(median chosen 3)
echo "median cpu s: without $cpu_none, with $cpu_chosen: with / without $(echo "scale=3; $cpu_chosen / $cpu_none" | bc) (a cut of $(echo "scale=1; 100 * (1 - $cpu_chosen / $cpu_none)" | bc)%)"
echo "median wall s: without $(median none 4), with $(median chosen 4)"
for shortlist in none chosen; do
  [[ $(grep " $shortlist " "$work/times" | awk '{print $6}' | sort -u | wc -l) == 1 ]] && echo "$shortlist: every round the same output" || echo "$shortlist: OUTPUTS DIFFER between rounds"
done
echo "== end $(date -u '+%H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
