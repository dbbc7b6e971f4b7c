#!/usr/bin/env bash
# xf-run against CTranslate2 (ct2_run.py: the whole input in one translate_batch call,
# max_batch_size = BATCH, so CTranslate2 sorts by length and cuts its own batches, as xf-run
# does), whole processes side by side with farm-bench (A: xf, B: CTranslate2, alternating):
# issue 40's goal table, batch 32 beam 4 at one thread by default.
#
#   scripts/bench/batch_vs_ct2.sh MODEL.xfm INPUT.txt CT2_F32_DIR CT2_INT8_DIR
#
# The CTranslate2 models: xfm_to_ctranslate2.py MODEL.xfm DIR --quantization float32 / int8 (the
# same weights). Each of f32 and int8 runs at the CPU's best ISA (CTranslate2 with
# CT2_FORCE_CPU_ISA=AVX512, faster on AMD CPUs than its AVX2 default) and capped at AVX2 (xf and
# CTranslate2's oneDNN by ONEDNN_MAX_CPU_ISA, CTranslate2's own kernels by CT2_FORCE_CPU_ISA).
# Length penalty 0.6 in both. Prints farm-bench's report per configuration; quote the A/B cpu
# median (CPU seconds: the steadier figure on a shared machine).
# Environment: XF_BIN [REPO/build/bin], PYTHON (with ctranslate2) [python3], RUNS [3],
# THREADS [1], BEAM [4], BATCH [32], ISAS ["best AVX2"], DTYPES ["int8 f32"];
# XF_ARGS, CT2_ARGS: more options of each engine, after the ones above (a repeated option's
# last value wins) [""]. A model with random weights seldom chooses EOS and repeats tokens,
# which xf's loop guard would cut: give both id input and the same output length, e.g. for
# sources of 8 pieces and 18 output tokens XF_ARGS="--ids --max-decoding-length 18
# --length-penalty 0 --disable-loop-guard" CT2_ARGS="--ids --max-len-b 9 --length-penalty 0"
# (ct2_run.py's limit is the source's tokens + EOS + max_len_b).
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 MODEL.xfm INPUT.txt CT2_F32_DIR CT2_INT8_DIR" >&2; exit 2; }
model=$1 input=$2 ct2_f32=$3 ct2_int8=$4
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
xf_bin=${XF_BIN:-$repo/build/bin}
python=${PYTHON:-python3}
threads=${THREADS:-1} beam=${BEAM:-4} batch=${BATCH:-32}
for isa in ${ISAS:-best AVX2}; do
  for dtype in ${DTYPES:-int8 f32}; do
    ct2=$ct2_f32
    [[ $dtype == int8 ]] && ct2=$ct2_int8
    if [[ $isa == best ]]; then xf_env="" ct2_env="CT2_FORCE_CPU_ISA=AVX512"
    else xf_env="ONEDNN_MAX_CPU_ISA=$isa" ct2_env="ONEDNN_MAX_CPU_ISA=$isa CT2_FORCE_CPU_ISA=$isa"; fi
    echo "== $dtype, ISA $isa, batch $batch, beam $beam, $threads thread(s); load $(cut -d' ' -f1-3 /proc/loadavg)"
    farm-bench -n "${RUNS:-3}" --timeout 3600 \
      --vs "sh -c 'exec env $ct2_env $python $here/ct2_run.py --model $ct2 --beam $beam --max-batch $batch --threads $threads --length-penalty 0.6 ${CT2_ARGS:-} < $input'" \
      -- sh -c "exec env $xf_env $xf_bin/xf-run --model $model --dtype $dtype --beam $beam --max-batch $batch --threads $threads --length-penalty 0.6 ${XF_ARGS:-} < $input"
  done
done
