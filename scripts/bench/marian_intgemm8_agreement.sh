#!/usr/bin/env bash
# How many lines xf's int8 import of the marian-student fixture gives equal to Marian's intgemm8
# outputs (recorded by scripts/fixtures/make_marian_fixtures.py --only intgemm8-lines: pymarian,
# AVX2, one sentence a batch, on 200 test.tsv sources), greedy and beam 4, with xf's own int8
# arithmetic and with Marian's (int8.arithmetic marian-intgemm-avx2), and the BLEU of xf's
# lines with Marian's as the reference; with XF_DATA, both engines' BLEU against test.tsv's first
# reference of each source. With PYTHON (a python with pymarian), also Marian's own outputs at
# mini-batch 16 against its mini-batch 1 ones (how much Marian's per-batch activation scale moves
# them). Usage: [XF_DATA=...] [PYTHON=venv/bin/python] marian_intgemm8_agreement.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?usage: marian_intgemm8_agreement.sh BUILD_DIR OUT_DIR}
out=${2:?usage: marian_intgemm8_agreement.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
fixture=$here/../../tests/import/data/marian-student
mkdir -p "$out"
"$build/bin/xf-convert" --from marian "$fixture/model.intgemm8.bin" -o "$out/int8.xfm" --dtype int8 \
  > /dev/null 2> "$out/convert.log" || { cat "$out/convert.log" >&2; exit 1; }
# The same import computing Marian's arithmetic (one activation multiplier a product, AVX2's
# saturating 16-bit sums: xf/model.h, Int8Arithmetic).
"$build/bin/xf-convert" --from marian "$fixture/model.intgemm8.bin" -o "$out/int8-marian.xfm" --dtype int8 \
  --metadata int8.arithmetic=marian-intgemm-avx2 > /dev/null 2>> "$out/convert.log" || { cat "$out/convert.log" >&2; exit 1; }
python3 - "$fixture/intgemm8_lines.json" "$out" "${XF_DATA:-}" <<'PY'
import json, os, sys
recorded = json.load(open(sys.argv[1], encoding="utf-8"))
out, data = sys.argv[2], sys.argv[3]
with open(os.path.join(out, "sources.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(recorded["sentences"]) + "\n")
for name in ("greedy", "beam4"):
    with open(os.path.join(out, "marian_" + name + ".txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(t.rstrip(" ") for t in recorded["intgemm8_" + name]["text"]) + "\n")
if data:
    first = {}
    for line in open(os.path.join(data, "test.tsv"), encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 2:
            first.setdefault(parts[0], parts[1])
    with open(os.path.join(out, "references.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(first[s] for s in recorded["sentences"]) + "\n")
PY
lines=$(wc -l < "$out/sources.txt")
for beam in 1 4; do
  name=$([ "$beam" = 1 ] && echo greedy || echo beam4)
  # xf's arithmetic (any batch gives the same lines), then Marian's at one sentence a batch (as
  # Marian's lines were recorded) and at 32.
  for run in xf:int8:32 xf_marian_arithmetic:int8-marian:1 xf_marian_arithmetic_batch32:int8-marian:32; do
    IFS=: read -r label model batch <<< "$run"
    "$build/bin/xf-run" --model "$out/$model.xfm" --beam "$beam" --shortlist none --length-penalty 0 \
      --length-normalization power --max-len-a 3 --max-len-b 0 --disable-loop-guard \
      --disable-sentence-splitting --max-batch "$batch" < "$out/sources.txt" > "$out/${label}_$name.txt" 2> /dev/null
    equal=$(paste -d '\t' "$out/${label}_$name.txt" "$out/marian_$name.txt" | awk -F '\t' '$1 == $2 { n++ } END { print n + 0 }')
    echo "$name: $label (--max-batch $batch) equals Marian's intgemm8 on $equal of $lines lines;" \
         "against Marian: $("$build/bin/xf-eval" --hyp "$out/${label}_$name.txt" --ref "$out/marian_$name.txt" | head -1)"
  done
  if [ -f "$out/references.txt" ]; then
    echo "  against test.tsv: xf $("$build/bin/xf-eval" --hyp "$out/xf_$name.txt" --ref "$out/references.txt" | head -1)"
    echo "  against test.tsv: xf_marian_arithmetic $("$build/bin/xf-eval" --hyp "$out/xf_marian_arithmetic_$name.txt" \
      --ref "$out/references.txt" | head -1)"
    echo "  against test.tsv: Marian $("$build/bin/xf-eval" --hyp "$out/marian_$name.txt" --ref "$out/references.txt" | head -1)"
  fi
  if [ -n "${PYTHON:-}" ]; then
    INTGEMM_CPUID=AVX2 "$PYTHON" -m pymarian decode -m "$fixture/model.intgemm8.bin" -v "$fixture/vocab.enfr.spm" \
      "$fixture/vocab.enfr.spm" --beam-size "$beam" --normalize 0 --word-penalty 0 --max-length-factor 3 \
      --cpu-threads 1 --mini-batch 16 --maxi-batch 1 --quiet < "$out/sources.txt" 2> /dev/null |
      sed 's/ *$//' > "$out/marian_minibatch16_$name.txt"
    equal=$(paste -d '\t' "$out/marian_minibatch16_$name.txt" "$out/marian_$name.txt" | awk -F '\t' '$1 == $2 { n++ } END { print n + 0 }')
    echo "  Marian at mini-batch 16 equals its mini-batch 1 on $equal of $lines lines;" \
         "$("$build/bin/xf-eval" --hyp "$out/marian_minibatch16_$name.txt" --ref "$out/marian_$name.txt" | head -1)"
  fi
done
