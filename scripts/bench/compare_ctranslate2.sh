#!/usr/bin/env bash
# xf against CTranslate2 on the same weights: issue 3's performance goal.
#
#   scripts/bench/compare_ctranslate2.sh MODEL.xfm INPUT.txt
#
# Makes f32 and int8 versions of MODEL.xfm (xfm_convert_dtype.py: f16 widens exactly, int8 by
# xf's per-row rule), converts each to CTranslate2 (float32 / int8 holding the same int8 values),
# then runs, on the first LINES lines of INPUT.txt (one sentence a line):
#   batch 32, beam 4, 2 threads, f32 and int8      (throughput: tokens/s)
#   batch 1, greedy, 2 threads, f32 and int8       (latency: p50/p90 per sentence), first LINES_B1
# xf through `xf-bench --json`, CTranslate2 through `ct2_run.py --bench --json` (at batch 32
# CTranslate2 gets the whole input in one translate_batch call, max_batch_size=32, and sorts it
# by length itself, as xf-bench sorts its own; at batch 1 the same procedure as xf-bench's:
# tokenized first, requests in file order, one warm-up request, each request timed).
# Each configuration runs ROUNDS times, engines alternating; the table shows the round with the
# best tokens/s of each engine (the machine is shared; the best round is the least disturbed).
# Columns: allocs = heap allocations during decoding by xf + by oneDNN (xf-bench only); cpu =
# the run's CPU share, (user + sys) / wall over the whole process (2.0 = both cores: anything
# lower means other processes took CPU); load = 1-minute load average when the run started;
# wall s, cpu s = the whole process's wall and CPU (user + sys) seconds, model loading and (for
# CTranslate2) Python's start included: on a loaded machine cpu s is the steadier figure.
#
# Environment (defaults in brackets):
#   XF_BIN      directory with xf-bench              [REPO/build/bin]
#   PYTHON      a Python with ctranslate2, sentencepiece, numpy, flatbuffers  [python3]
#   WORK_DIR    converted models, inputs and results.jsonl  [a new directory under /tmp]
#   LINES       input lines for batch 32 [1000]    LINES_B1  input lines for batch 1 [200]
#   REPEAT      passes over the input per run [1]   ROUNDS    runs per configuration [2]
#   THREADS     [2]
#   NICE        run the measured processes at this nice level (e.g. -15 on a shared machine)
#   ISA         cap both engines at one instruction-set level: AVX2, AVX512_CORE or
#               AVX512_CORE_VNNI [no cap]. xf: ONEDNN_MAX_CPU_ISA (caps oneDNN and xf's own
#               kernels; xf-bench's "products" show what ran). CTranslate2: CT2_FORCE_CPU_ISA
#               (its own kernels: AVX2 or AVX512), MKL_ENABLE_INSTRUCTIONS (its GEMMs: Intel MKL
#               on Intel CPUs, which CT2_FORCE_CPU_ISA does not cap: AVX2, AVX512 or AVX512_E1,
#               MKL's AVX-512 with VNNI) and ONEDNN_MAX_CPU_ISA (its oneDNN, where MKL is off).
#   CT2_EXTRA   environment of a second CTranslate2 run per configuration, "" for none
#               [CT2_FORCE_CPU_ISA=AVX512 without ISA, none with it: CTranslate2 picks its AVX2
#               kernels on AMD CPUs by default; forcing AVX-512 was faster there].
#               WORK_DIR/stderr.log shows the ISA and GEMM backends each CTranslate2 run chose.
set -euo pipefail

usage() { echo "usage: $0 MODEL.xfm INPUT.txt   (see the comments at the top)" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
model=$1
input=$2
[[ -f $model ]] || { echo "$0: $model: no such model file" >&2; exit 1; }
[[ -s $input ]] || { echo "$0: $input: no such input file, or empty" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
xf_bin=${XF_BIN:-$repo/build/bin}
python=${PYTHON:-python3}
work=${WORK_DIR:-$(mktemp -d /tmp/xf-ct2-compare-XXXXXX)}
lines=${LINES:-1000}
lines_b1=${LINES_B1:-200}
repeat=${REPEAT:-1}
rounds=${ROUNDS:-2}
threads=${THREADS:-2}
isa=${ISA:-}
xf_env=()
ct2_env=()
case $isa in
  "") ;;
  AVX2) ct2_env=(CT2_FORCE_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) ;;
  AVX512_CORE) ct2_env=(CT2_FORCE_CPU_ISA=AVX512 MKL_ENABLE_INSTRUCTIONS=AVX512) ;;
  AVX512_CORE_VNNI) ct2_env=(CT2_FORCE_CPU_ISA=AVX512 MKL_ENABLE_INSTRUCTIONS=AVX512_E1) ;;
  *) echo "$0: ISA=$isa: expected AVX2, AVX512_CORE or AVX512_CORE_VNNI" >&2; exit 2 ;;
esac
if [[ -n $isa ]]; then
  xf_env=(ONEDNN_MAX_CPU_ISA="$isa")
  ct2_env+=(ONEDNN_MAX_CPU_ISA="$isa")
  ct2_extra=${CT2_EXTRA-}
else
  ct2_extra=${CT2_EXTRA-CT2_FORCE_CPU_ISA=AVX512}
fi
ct2_extra_label=$(sed -E 's/CT2_FORCE_CPU_ISA=/isa=/g; s/CT2_USE_MKL=/mkl=/g' <<< "$ct2_extra")

[[ -x $xf_bin/xf-bench ]] || { echo "$0: $xf_bin/xf-bench not found (set XF_BIN)" >&2; exit 1; }
"$python" -c "import ctranslate2, sentencepiece, numpy, flatbuffers" 2>/dev/null ||
  { echo "$0: $python lacks ctranslate2/sentencepiece/numpy/flatbuffers (set PYTHON)" >&2; exit 1; }
mkdir -p "$work"

# NICE: Linux groups a session's processes (sched_autogroup) and shares the CPU between groups,
# so a process's own nice value hardly matters against other sessions: set the group's too
# (negative values need root), restored on exit.
if [[ -n ${NICE:-} && -w /proc/self/autogroup ]]; then
  previous_group_nice=$(sed -E 's/.*nice (-?[0-9]+).*/\1/' /proc/self/autogroup)
  echo "$NICE" > /proc/self/autogroup
  trap 'echo "$previous_group_nice" > /proc/self/autogroup' EXIT
fi
results=$work/results.jsonl
: > "$results"

head -n "$lines" "$input" > "$work/input.txt"
head -n "$lines_b1" "$input" > "$work/input_b1.txt"

# Logs are committed: they name the work folder WORK_DIR and the repository's files relative to it,
# never a folder of the machine.
relative_paths() { sed -e "s|$work/|WORK_DIR/|g" -e "s|$repo/||g"; }
declare -A ct2_type=([f32]=float32 [int8]=int8)
for dtype in f32 int8; do
  "$python" "$here/xfm_convert_dtype.py" "$model" "$work/model_$dtype.xfm" --dtype "$dtype" 2>&1 |
    relative_paths >&2
  "$python" "$here/xfm_to_ctranslate2.py" "$work/model_$dtype.xfm" "$work/ct2_$dtype" \
    --quantization "${ct2_type[$dtype]}" --force 2>&1 | relative_paths >&2
done

# timed OUTPUT_VAR COMMAND...: runs COMMAND (at NICE when set) under /usr/bin/time; sets
# OUTPUT_VAR to its stdout, `cpu` to its CPU share (user + sys over wall: 2.0 = both cores),
# `wall` and `cpu_s` to the whole process's wall and CPU (user + sys) seconds, start included.
# stderr (CTranslate2's ISA and backend lines among it) goes to WORK_DIR/stderr.log.
timed() {
  local -n output=$1
  shift
  local prefix=()
  [[ -n ${NICE:-} ]] && prefix=(nice -n "$NICE")
  echo "== $*" >> "$work/stderr.log"
  output=$(/usr/bin/time -f '%e %U %S' -o "$work/time.txt" "${prefix[@]}" "$@" 2>> "$work/stderr.log") ||
    { tail -5 "$work/stderr.log" >&2; exit 1; }
  cpu=$(awk '{ printf "%.2f", ($2 + $3) / ($1 > 0 ? $1 : 1) }' "$work/time.txt")
  wall=$(awk '{ printf "%.2f", $1 }' "$work/time.txt")
  cpu_s=$(awk '{ printf "%.2f", $2 + $3 }' "$work/time.txt")
}

# run_config LABEL DTYPE BEAM BATCH INPUT
run_config() {
  local label=$1 dtype=$2 beam=$3 batch=$4 in=$5 round json load
  for ((round = 1; round <= rounds; round++)); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    # --length-penalty 0.6: ct2_run.py's; without it xf-bench takes the model's own (1.4).
    timed json env "${xf_env[@]}" "$xf_bin/xf-bench" --model "$work/model_$dtype.xfm" --input "$in" --beam "$beam" \
      --length-penalty 0.6 --max-batch "$batch" --threads "$threads" --repeat "$repeat" --json
    echo "{\"config\": \"$label\", \"engine_name\": \"xf\", \"round\": $round, \"load1\": $load, \"cpu_share\": $cpu, \"wall_s\": $wall, \"cpu_s\": $cpu_s, \"isa\": \"${isa:-none}\", \"result\": $json}" >> "$results"
    load=$(cut -d' ' -f1 /proc/loadavg)
    timed json env "${ct2_env[@]}" "$python" "$here/ct2_run.py" --model "$work/ct2_$dtype" --bench --input "$in" \
      --beam "$beam" --max-batch "$batch" --threads "$threads" --repeat "$repeat" --json
    echo "{\"config\": \"$label\", \"engine_name\": \"ct2\", \"round\": $round, \"load1\": $load, \"cpu_share\": $cpu, \"wall_s\": $wall, \"cpu_s\": $cpu_s, \"isa\": \"${isa:-none}\", \"result\": $json}" >> "$results"
    if [[ -n $ct2_extra ]]; then
      load=$(cut -d' ' -f1 /proc/loadavg)
      timed json env "${ct2_env[@]}" $ct2_extra "$python" "$here/ct2_run.py" --model "$work/ct2_$dtype" --bench \
        --input "$in" --beam "$beam" --max-batch "$batch" --threads "$threads" --repeat "$repeat" --json
      echo "{\"config\": \"$label\", \"engine_name\": \"ct2 $ct2_extra_label\", \"round\": $round, \"load1\": $load, \"cpu_share\": $cpu, \"wall_s\": $wall, \"cpu_s\": $cpu_s, \"isa\": \"${isa:-none}\", \"result\": $json}" >> "$results"
    fi
  done
}

run_config "batch 32 beam 4 f32" f32 4 32 "$work/input.txt"
run_config "batch 32 beam 4 int8" int8 4 32 "$work/input.txt"
run_config "batch 1 greedy f32" f32 1 1 "$work/input_b1.txt"
run_config "batch 1 greedy int8" int8 1 1 "$work/input_b1.txt"

"$python" - "$results" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
best = {}
for r in rows:
    key = (r["config"], r["engine_name"])
    if key not in best or r["result"]["tokens_per_s"] > best[key]["result"]["tokens_per_s"]:
        best[key] = r
print("ISA cap: %s" % (rows[0].get("isa", "none") if rows else "none"))
print("%-22s %-14s %10s %9s %10s %10s %8s %7s %9s %5s %5s %7s %7s" % (
    "configuration", "engine", "tokens/s", "sent/s", "p50 ms", "p90 ms", "RSS MB", "tokens",
    "allocs", "cpu", "load", "wall s", "cpu s"))
for (config, engine), r in best.items():
    x = r["result"]
    allocs = ("%d+%d" % (x["allocations_xf"], x["allocations_backend"])
              if "allocations_xf" in x else "-")
    # ct2_run.py times one call for a whole batch-32 input: no per-request latency there.
    latency = lambda v: "-" if v is None else "%.2f" % v
    print("%-22s %-14s %10.1f %9.2f %10s %10s %8.1f %7d %9s %5.2f %5.1f %7.2f %7.2f" % (
        config, engine, x["tokens_per_s"], x["sentences_per_s"], latency(x["latency_p50_ms"]),
        latency(x["latency_p90_ms"]), x["peak_rss_mb"], x["tokens"], allocs, r["cpu_share"], r["load1"],
        r["wall_s"], r["cpu_s"]))
    if "products" in x:
        print("%-22s %-14s kernels %s; products %s" % ("", "", x.get("kernels_isa", "?"),
              ", ".join("%s x%d" % kv for kv in x["products"].items())))
print()
print("xf peak RSS against issue 3's budget (model file + arena + 20 MB):")
for (config, engine), r in best.items():
    x = r["result"]
    if engine == "xf":
        budget = x["model_mb"] + x["arena_mb"] + 20.0
        print("  %-22s peak %.1f MB, budget %.1f + %.1f + 20 = %.1f MB: %s" % (
            config, x["peak_rss_mb"], x["model_mb"], x["arena_mb"], budget,
            "within" if x["peak_rss_mb"] <= budget else "OVER"))
EOF
echo "all runs: WORK_DIR/results.jsonl; their stderr: WORK_DIR/stderr.log (set WORK_DIR to keep them)"
