#!/usr/bin/env bash
# Marian's intgemm8 outputs against xf's on a student of compare_marian_student.sh (its RUN_DIR:
# the student in RUN_DIR/student; the input, the distinct lines of RUN_DIR/input.txt), for each of intgemm's Int8
# kernels that Marian picks by CPU (INTGEMM_CPUID=AVX2, AVX512BW, AVX512VNNI), one sentence a
# batch, greedy and beam 4, with the student's 50/50 shortlist: how many lines xf gives equal
# with its own int8 arithmetic and with Marian's for that kernel (xf-convert --metadata
# int8.arithmetic=marian-intgemm-avx2|avx512bw|avx512vnni; xf/model.h). The CPU must have the
# kernel's instructions for Marian to run it (xf's side runs on any CPU).
#
#   XF_DATA=... PYTHON=venv/bin/python scripts/bench/marian_student_agreement.sh RUN_DIR
#
# Environment: PYTHON (with pymarian) [python3], XF_BIN [REPO/build/bin], KERNELS ["AVX2 AVX512BW
# AVX512VNNI"], FACTOR (output limit, x the source) [1.5], PIECES (the inputs' length in pieces,
# compare_marian_student.sh's) [10]: xf's limit is FACTOR x PIECES + floor(FACTOR x (PIECES + 1))
# - floor(FACTOR x PIECES), Marian's FACTOR x (PIECES + EOS).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=comparison_common.sh
source "$here/comparison_common.sh"
comparison_setup xf-marian-agreement "pymarian" "$@"
student=$work/student
[[ -f $student/model.intgemm8.bin && -f $work/input.txt ]] ||
  { echo "$0: run compare_marian_student.sh $work first (it makes the student and the input)" >&2; exit 1; }
factor=${FACTOR:-1.5}
pieces=${PIECES:-10}
len_b=$(marian_len_b "$factor" "$pieces")
awk '!seen[$0]++' "$work/input.txt" > "$work/agree_input.txt"
lines=$(wc -l < "$work/agree_input.txt")
"$xf_bin/xf-convert" --from marian "$student/model.intgemm8.bin" -o "$work/agree_xf.xfm" --dtype int8 2> /dev/null
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "input: $lines distinct lines of RUN_DIR/input.txt; one sentence a batch; output limit $factor x the source; shortlist 50/50"
for kernel in ${KERNELS:-AVX2 AVX512BW AVX512VNNI}; do
  name=marian-intgemm-$(tr '[:upper:]' '[:lower:]' <<< "$kernel")
  "$xf_bin/xf-convert" --from marian "$student/model.intgemm8.bin" -o "$work/agree_$kernel.xfm" --dtype int8 \
    --metadata "int8.arithmetic=$name" 2> /dev/null
  for beam in 1 4; do
    INTGEMM_CPUID=$kernel "$python" -m pymarian decode -m "$student/model.intgemm8.bin" \
      -v "$student/vocab.enfr.spm" "$student/vocab.enfr.spm" --shortlist "$student/lex.50.50.s2t.bin" false \
      -i "$work/agree_input.txt" --beam-size "$beam" --mini-batch 1 --maxi-batch 1 --cpu-threads 1 --normalize 0 \
      --word-penalty 0 --max-length-factor "$factor" --quiet 2> /dev/null | sed 's/ *$//' > "$work/agree_marian_${kernel}_$beam.txt"
    counts=""
    for model in xf "$kernel"; do
      "$xf_bin/xf-run" --model "$work/agree_$model.xfm" --input "$work/agree_input.txt" --beam "$beam" --max-batch 1 \
        --threads 1 --length-penalty 0 --length-normalization power --max-len-a "$factor" --max-len-b "$len_b" \
        --disable-loop-guard > "$work/agree_xf_${model}_${kernel}_$beam.txt" 2> /dev/null
      equal=$(paste -d '\t' "$work/agree_xf_${model}_${kernel}_$beam.txt" "$work/agree_marian_${kernel}_$beam.txt" |
              awk -F '\t' '$1 == $2 { n++ } END { print n + 0 }')
      counts+=" $([[ $model == xf ]] && echo "xf's arithmetic" || echo "$name"): $equal of $lines;"
    done
    echo "Marian with intgemm's $kernel kernel, beam $beam: lines xf gives equal with$counts"
  done
done
