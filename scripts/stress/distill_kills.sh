#!/usr/bin/env bash
# xf-distill killed with SIGKILL at random moments (issue 39): a straight run of the tiny test
# model over PAIRS generated pairs (chunks of 3, so that most moments fall in a chunk's append,
# fsync or record), then KILLS runs into one output, each killed a random 0..T seconds after it
# starts (T: the straight run's time) and resumed by the next; a last run finishes it. The
# output and its counts must equal the straight run's byte for byte (no pair lost, none twice).
# Usage: scripts/stress/distill_kills.sh BUILD KILLS [PAIRS]
# Prints a summary line "N kills: M mid-run (progress between 0 and all), ... identical"; exits 1
# on any difference or a run that failed. Run it under load with scripts/stress/busy_cores.sh,
# at nice (a shared machine).
set -uo pipefail
build=$(cd "${1:?usage: distill_kills.sh BUILD KILLS [PAIRS]}" && pwd)
kills=${2:?kills}
pairs=${3:-1500}
distill="$build/bin/xf-distill"
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-stress-distill-XXXXXX")
trap 'rm -rf "$work"' EXIT

"$build/bin/xf_test_write_tiny_model" "$work/tiny.xfm" || exit 1
awk -v pairs="$pairs" 'BEGIN { srand(7); split("the a cat dog sat on mat house red big small runs sees "\
  "le la chat chien sur maison rouge grand petit voit", w, " ");
  for (i = 0; i < pairs; ++i) { line = ""; n = 2 + int(rand() * 10);
    for (k = 0; k < n; ++k) line = line (k ? " " : "") w[1 + int(rand() * 24)];
    print line "\t" line } }' > "$work/corpus.tsv"
options=(--model "$work/tiny.xfm" --in "$work/corpus.tsv" --beam 4 --chunk 3 --threads 1)

start=$(date +%s.%N)
"$distill" "${options[@]}" --out "$work/straight.tsv" 2> "$work/straight.log" || { cat "$work/straight.log" >&2; exit 1; }
seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')
done_of() { sed -n 's/^pairs_done \([0-9]*\)$/\1/p' "$1.progress" 2>/dev/null; }

failures=0 mid_run=0 finished_early=0
for ((kill_number = 1; kill_number <= kills; ++kill_number)); do
  before=$(done_of "$work/killed.tsv")
  "$distill" "${options[@]}" --out "$work/killed.tsv" 2> "$work/run.log" &
  pid=$!
  sleep "$(awk -v seed="$RANDOM$kill_number" -v max="$seconds" 'BEGIN { srand(seed); printf "%.3f", rand() * max }')"
  kill -KILL "$pid" 2>/dev/null
  { wait "$pid"; } 2>/dev/null  # no "Killed" line from bash
  status=$?
  after=$(done_of "$work/killed.tsv")
  if [ "$status" -eq 0 ]; then
    finished_early=$((finished_early + 1))
    # It finished before the kill: start again from nothing, so that later kills fall in runs.
    rm -f "$work/killed.tsv" "$work/killed.tsv.progress"
  elif [ "$status" -ne 137 ]; then
    echo "kill $kill_number: exit $status:" && tail -2 "$work/run.log" | sed 's/^/    /'
    failures=$((failures + 1))
  elif [ -n "$after" ] && [ "$after" -gt "${before:-0}" ] && [ "$after" -lt "$pairs" ]; then
    mid_run=$((mid_run + 1))
  fi
done
"$distill" "${options[@]}" --out "$work/killed.tsv" 2> "$work/run.log" || { tail -2 "$work/run.log"; failures=$((failures + 1)); }
counts() { grep -v '^settings\|^output_bytes' "$1.progress"; }
identical=yes
if ! cmp -s "$work/killed.tsv" "$work/straight.tsv" || [ "$(counts "$work/killed.tsv")" != "$(counts "$work/straight.tsv")" ]; then
  identical=NO
  failures=$((failures + 1))
fi
echo "$kills kills over a ${seconds} s run of $pairs pairs: $mid_run mid-run, $finished_early after the end," \
     "$failures failures; output and counts identical to the straight run's: $identical"
[ "$failures" -eq 0 ]
