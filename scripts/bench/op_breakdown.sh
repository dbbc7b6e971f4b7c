#!/usr/bin/env bash
# Where a batch translation's CPU time goes, op by op (issue 40's breakdown): perf samples one
# xf-run process (or, with CT2_MODEL, one ct2_run.py process on the same input) and
# perf_ops.py groups the samples into ops.
#
#   scripts/bench/op_breakdown.sh OUT_DIR MODEL.xfm INPUT [XF-RUN OPTIONS...]
#
# Writes OUT_DIR/xf.perf.txt (perf's report by symbol) and OUT_DIR/xf.ops.txt (the ops), and with
# CT2_MODEL=DIR (a model made by xfm_to_ctranslate2.py) OUT_DIR/ct2.perf.txt and ct2.ops.txt too.
# Options after INPUT go to xf-run (e.g. --beam 4 --max-batch 32 --dtype int8 --ids); ct2_run.py
# gets the same --beam/--max-batch/--ids from BEAM [4], BATCH [32], IDS [unset], and CT2_ARGS
# [""] after them (e.g. "--max-len-b 9 --length-penalty 0" to match xf-run's
# --max-decoding-length 18 --length-penalty 0 on sources of 8 pieces). ISA=AVX2 caps
# both (ONEDNN_MAX_CPU_ISA, which xf's own kernels follow; CTranslate2: CT2_FORCE_CPU_ISA and its
# oneDNN's ONEDNN_MAX_CPU_ISA). One thread each (perf's shares are of CPU time, so the
# machine's load moves them little). perf: Debian's linux-perf, a measurement tool that nothing
# in the build or the tests needs (not in scripts/setup.sh).
# Environment: XF_BIN [REPO/build/bin], PYTHON (with ctranslate2) [python3], FREQ [999 Hz],
# XF_TOOL [xf-run; xf-bench: INPUT given as --input, e.g. for --ids on a model without a
# tokenizer, which xf-run refuses since its paragraph joining (it decodes text)].
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 OUT_DIR MODEL.xfm INPUT [XF-RUN OPTIONS...]" >&2; exit 2; }
out=$1 model=$2 input=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
xf_bin=${XF_BIN:-$repo/build/bin}
python=${PYTHON:-python3}
freq=${FREQ:-999}
command -v perf > /dev/null || { echo "$0: perf not found (Debian: apt-get install linux-perf)" >&2; exit 1; }
mkdir -p "$out"
isa_env=()
[[ -n ${ISA:-} ]] && isa_env=(ONEDNN_MAX_CPU_ISA="$ISA")
# ONEDNN_JIT_PROFILE=2 names oneDNN's JIT code for perf through /tmp/perf-PID.map (removed after).
profile() {
  local name=$1
  shift
  perf record -q -F "$freq" -o "$out/$name.data" -- env ONEDNN_JIT_PROFILE=2 "${isa_env[@]}" "$@" \
    < "$input" > "$out/$name.output" 2> "$out/$name.stderr"
  perf report -i "$out/$name.data" --stdio --no-children --sort dso,symbol 2> /dev/null \
    > "$out/$name.perf.txt"
  "$python" "$here/perf_ops.py" < "$out/$name.perf.txt" > "$out/$name.ops.txt"
  local pid
  pid=$(perf report -i "$out/$name.data" --stdio --sort pid 2> /dev/null | awk '/%/ {print $2; exit}' | cut -d: -f1)
  rm -f "$out/$name.data" "/tmp/perf-$pid.map"
}
if [[ ${XF_TOOL:-xf-run} == xf-bench ]]; then
  profile xf "$xf_bin/xf-bench" --model "$model" --threads 1 --input "$input" "$@"
else
  profile xf "$xf_bin/xf-run" --model "$model" --threads 1 "$@"
fi
if [[ -n ${CT2_MODEL:-} ]]; then
  ct2_isa=()
  [[ -n ${ISA:-} ]] && ct2_isa=(CT2_FORCE_CPU_ISA="${ISA%%_*}")
  ids=()
  [[ -n ${IDS:-} ]] && ids=(--ids)
  isa_env+=("${ct2_isa[@]}")
  profile ct2 "$python" "$here/ct2_run.py" --model "$CT2_MODEL" --threads 1 --beam "${BEAM:-4}" \
    --max-batch "${BATCH:-32}" "${ids[@]}" ${CT2_ARGS:-}
fi
head -30 "$out"/*.ops.txt
