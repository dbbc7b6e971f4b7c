#!/usr/bin/env bash
# xf against Marian (pymarian) and CTranslate2 on the same base-size Marian model: issue 26's
# speed table.
#
#   scripts/bench/compare_marian.sh [RUN_DIR]
#
# 1. make_base_marian.py makes (once; kept in RUN_DIR/base) a Marian transformer of OPUS-MT's
#    base size with random weights: 6+6 layers, d_model 512, 8 heads, FFN 2048, swish, tied, a
#    joint SentencePiece vocabulary of 32000 pieces learned from XF_DATA/train.tsv.
# 2. Each engine converts it with its own tool: `xf-convert --from marian` (f32, and --dtype int8),
#    Marian's converter (`python -m pymarian convert`, i.e. marian-conv: intgemm8 and
#    packed8avx512, Marian's two int8 CPU paths), CTranslate2's `ct2-opus-mt-converter` (float32,
#    int8). pymarian 1.12 pads the model's special:model.yml with several NUL bytes, which
#    CTranslate2's converter (it strips one) rejects: CTranslate2 converts a copy of the .npz
#    whose yml ends in one NUL, the weights untouched.
# 3. The input: the first LINES distinct English sentences of XF_DATA/test.tsv that are exactly
#    PIECES SentencePiece pieces long (LINES_B1 of them for batch 1). Every engine gets the
#    pieces (Marian) or their ids (xf-run --ids, ct2_run.py --ids), so none tokenizes, and every
#    batch has the same source length. Random weights never choose EOS, so each output runs to
#    the length limit, set equal in the three: Marian's --max-length-factor FACTOR (its limit is
#    FACTOR x (pieces + EOS) tokens), xf-run --max-decoding-length and ct2_run.py --max-len-b the
#    same number. Length penalty 0 in all three (scores are sums of log-probabilities), so the
#    f32 outputs can be compared token for token; the table says where they differ.
# 4. Each configuration (batch 32 beam 4, batch 1 greedy; f32, int8; THREADS) runs every engine
#    as one process over the whole input, engines alternating, ROUNDS times; the table keeps each
#    engine's round with the least CPU time. Figures are of the whole process (model loading and,
#    for Marian and CTranslate2, Python's start included; the "start-up + 1 sentence" rows are
#    the same processes on one sentence, greedy: Marian refuses an empty input): cpu s = user + sys seconds, the primary figure on a shared
#    machine (the load changes wall time far more than CPU time); wall s; peak RSS.
#    Threads: xf and CTranslate2 split each batch's work over the threads; Marian's --cpu-threads
#    are independent workers, each decoding its own batch on one thread.
#
# Environment (defaults in brackets):
#   PYTHON    a Python with pymarian, ctranslate2, sentencepiece, numpy, pyyaml  [python3]
#             (e.g. python3 -m venv VENV; VENV/bin/pip install pymarian ctranslate2
#             sentencepiece numpy pyyaml)
#   XF_BIN    directory with xf-run and xf-convert   [REPO/build/bin]
#   XF_DATA   folder with train.tsv and test.tsv (English TAB French)   (required)
#   LINES [128]  LINES_B1 [16]  PIECES [8]  FACTOR [2]  THREADS ["1 2"]  ROUNDS [2]
#   XF_ENV    environment of the xf runs, e.g. XF_SPIN_MICROSECONDS=0 (xf's workers sleep at
#             once instead of spinning up to 50 us; runtime/README.md "Threads") [""]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=comparison_common.sh
source "$here/comparison_common.sh"
comparison_setup xf-marian-compare "pymarian ctranslate2 sentencepiece numpy yaml" "$@"
lines=${LINES:-128}
lines_b1=${LINES_B1:-16}
pieces=${PIECES:-8}
factor=${FACTOR:-2}
threads_list=${THREADS:-1 2}
rounds=${ROUNDS:-2}
read -r -a xf_env <<< "${XF_ENV:-}"
ct2_converter=$(dirname "$python")/ct2-opus-mt-converter
[[ -x $ct2_converter ]] || ct2_converter=ct2-opus-mt-converter
base=$work/base
# Marian's limit is FACTOR x the batch's source width (pieces + EOS), rounded down; output
# tokens up to it, EOS included. xf: the same number; ct2_run.py: (pieces + EOS) + max_len_b.
max_len=$(awk -v f="$factor" -v p="$pieces" 'BEGIN { printf "%d", f * (p + 1) }')
max_len_b=$((max_len - pieces - 1))

"$python" "$here/make_base_marian.py" --data "$data" --out "$base"

# Inputs: pieces for Marian, ids for xf and CTranslate2 (vocab.yml lists the pieces in the
# SentencePiece model's order, so the ids are the model's).
"$python" - "$base/source.spm" "$data/test.tsv" "$pieces" "$lines" "$lines_b1" "$work" <<'EOF'
import sys
import sentencepiece as spm
spm_path, test, pieces, lines, lines_b1, work = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
sp = spm.SentencePieceProcessor(model_file=spm_path)
chosen = []
for line in open(test, encoding="utf-8"):
    source = line.split("\t")[0].strip()
    if source and source not in chosen and len(sp.encode(source)) == pieces:
        chosen.append(source)
if len(chosen) < max(lines, lines_b1):
    sys.exit("compare_marian: only %d distinct sentences of %d pieces in %s" % (len(chosen), pieces, test))
for name, count in (("input", lines), ("input_b1", lines_b1)):
    with open("%s/%s.pcs" % (work, name), "w", encoding="utf-8") as f:
        f.writelines(" ".join(sp.encode(s, out_type=str)) + "\n" for s in chosen[:count])
    with open("%s/%s.ids" % (work, name), "w") as f:
        f.writelines(" ".join(map(str, sp.encode(s))) + "\n" for s in chosen[:count])
EOF
head -n 1 "$work/input_b1.pcs" > "$work/one.pcs"
head -n 1 "$work/input_b1.ids" > "$work/one.ids"

# Conversions, each engine by its own tool (kept when present).
[[ -f $work/xf_f32.xfm ]] || "$xf_bin/xf-convert" --from marian "$base" -o "$work/xf_f32.xfm" 2>> "$work/convert.log"
[[ -f $work/xf_int8.xfm ]] || "$xf_bin/xf-convert" --from marian "$base" -o "$work/xf_int8.xfm" --dtype int8 2>> "$work/convert.log"
for gemm in intgemm8 packed8avx512; do
  [[ -f $work/marian_$gemm.bin ]] ||
    "$python" -m pymarian convert -f "$base/model.npz" -t "$work/marian_$gemm.bin" -g "$gemm" >> "$work/convert.log" 2>&1
done
if [[ ! -f $work/ct2_int8/model.bin ]]; then
  mkdir -p "$work/ct2_source"
  cp "$base/decoder.yml" "$base/vocab.yml" "$work/ct2_source/"
  "$python" - "$base/model.npz" "$work/ct2_source/model.npz" <<'EOF'
import sys
import numpy as np
weights = dict(np.load(sys.argv[1]))
yml = weights["special:model.yml"].tobytes().rstrip(b"\0") + b"\0"
weights["special:model.yml"] = np.frombuffer(yml, dtype=np.int8)
np.savez(sys.argv[2], **weights)
EOF
  for q in float32 int8; do
    "$ct2_converter" --model_dir "$work/ct2_source" --output_dir "$work/ct2_$q" --quantization "$q" --force >> "$work/convert.log" 2>&1
  done
  rm -rf "$work/ct2_source"
fi

results=$work/results.tsv
printf 'config\tdtype\tthreads\tengine\tround\tload1\twall_s\tcpu_s\trss_mb\toutput\n' > "$results"

# run LABEL DTYPE THREADS ENGINE ROUND OUTPUT COMMAND...: one timed process (comparison_common.sh); its
# stdout is the output (ids or pieces).
run() { timed_run "$work" "$6" "$1" "$2" "$3" "$4" "$5" -- "${@:7}"; }

# config LABEL BEAM BATCH INPUT_NAME THREADS
config() {
  local label=$1 beam=$2 batch=$3 in=$4 threads=$5 round dtype tag
  for ((round = 1; round <= rounds; round++)); do
    for dtype in f32 int8; do
      tag="${label// /_}.$dtype.t$threads.r$round"
      run "$label" "$dtype" "$threads" xf "$round" "$work/out.xf.$tag" \
        env "${xf_env[@]}" "$xf_bin/xf-run" --model "$work/xf_$dtype.xfm" --ids --input "$work/$in.ids" --beam "$beam" \
        --max-batch "$batch" --threads "$threads" --length-penalty 0 --max-decoding-length "$max_len"
      local models=("$base/model.npz")
      [[ $dtype == int8 ]] && models=("$work/marian_intgemm8.bin" "$work/marian_packed8avx512.bin")
      for model in "${models[@]}"; do
        local name=marian
        [[ $dtype == int8 ]] && name="marian $(basename "$model" .bin | sed 's/^marian_//')"
        run "$label" "$dtype" "$threads" "$name" "$round" "$work/out.${name// /_}.$tag" \
          "$python" -m pymarian decode -m "$model" -v "$base/vocab.yml" "$base/vocab.yml" \
          -i "$work/$in.pcs" --beam-size "$beam" --mini-batch "$batch" --maxi-batch 1 \
          --cpu-threads "$threads" --normalize 0 --max-length-factor "$factor" --quiet
      done
      local ct2=ct2_float32
      [[ $dtype == int8 ]] && ct2=ct2_int8
      run "$label" "$dtype" "$threads" ctranslate2 "$round" "$work/out.ct2.$tag" \
        "$python" "$here/ct2_run.py" --model "$work/$ct2" --ids --beam "$beam" --max-batch "$batch" \
        --threads "$threads" --length-penalty 0 --max-len-b "$max_len_b" < "$work/$in.ids"
    done
  done
}

{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
       "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512f|avx512_vnni|avx512_bf16|amx_int8|amx_bf16)$' | tr '\n' ' ')"
  echo "uptime before: $(uptime)"
  echo "software: $("$python" -c 'import pymarian, ctranslate2; print("pymarian", pymarian.__version__, "ctranslate2", ctranslate2.__version__)'), xf $("$xf_bin/xf-run" --version 2>&1 | head -1)"
  echo "input: $lines sentences (batch 1: $lines_b1) of $pieces pieces; outputs up to $max_len tokens; XF_ENV: ${XF_ENV:-none}"
} > "$work/machine.txt"

for threads in $threads_list; do
  config "batch 32 beam 4" 4 32 input "$threads"
  config "batch 1 greedy" 1 1 input_b1 "$threads"
done
rounds=1 config "start-up + 1 sentence" 1 1 one 1
echo "uptime after: $(uptime)" >> "$work/machine.txt"

"$python" - "$results" "$base/vocab.yml" "$work/machine.txt" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
vocab = {}
for line in open(sys.argv[2], encoding="utf-8"):
    import json
    key, value = line.rstrip("\n").rsplit(": ", 1)
    vocab[json.loads(key)] = value
def tokens(row):
    """The output as id lines (Marian writes pieces)."""
    out = []
    for line in open(row["output"], encoding="utf-8"):
        parts = line.split()
        out.append([vocab.get(p, p) for p in parts] if row["engine"].startswith("marian") else parts)
    return out
best = {}
for r in rows:
    key = (r["config"], r["dtype"], r["threads"], r["engine"])
    if key not in best or float(r["cpu_s"]) < float(best[key]["cpu_s"]):
        best[key] = r
print(open(sys.argv[3]).read().rstrip())
print()
print("| threads | configuration | dtype | engine | cpu s | wall s | peak RSS MB | output tokens | same as xf | xf cpu ÷ this | load |")
print("|---|---|---|---|---:|---:|---:|---:|---|---:|---:|")
for key, r in best.items():
    config, dtype, threads, engine = key
    out = tokens(r)
    xf = best[(config, dtype, threads, "xf")]
    xf_out = tokens(xf)
    same = "-" if engine == "xf" or config.startswith("start-up") else (
        "yes" if out == xf_out else "%d of %d lines" % (sum(a == b for a, b in zip(out, xf_out)), len(xf_out)))
    ratio = "" if engine == "xf" else "%.2f" % (float(xf["cpu_s"]) / float(r["cpu_s"]))
    print("| %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s |" % (
        threads, config, dtype, engine, r["cpu_s"], r["wall_s"], r["rss_mb"],
        sum(len(o) for o in out), same, ratio, r["load1"]))
print()
def cpu(config, engine, threads="1", dtype="int8"):
    return float(best[(config, dtype, threads, engine)]["cpu_s"])
for threads in sorted({k[2] for k in best if not k[0].startswith("start-up")}):
    marian_b32 = min(cpu("batch 32 beam 4", e, threads) for e in ("marian intgemm8", "marian packed8avx512"))
    marian_b1 = min(cpu("batch 1 greedy", e, threads) for e in ("marian intgemm8", "marian packed8avx512"))
    xf_b32, xf_b1 = cpu("batch 32 beam 4", "xf", threads), cpu("batch 1 greedy", "xf", threads)
    ct2_b32 = cpu("batch 32 beam 4", "ctranslate2", threads)
    print("%s thread(s), int8, CPU time: batch 32 beam 4: xf/Marian %.2f, xf/CTranslate2 %.2f (goal <= 0.8); "
          "batch 1 greedy: xf/Marian %.2f (goal <= 0.5)" % (
              threads, xf_b32 / marian_b32, xf_b32 / ct2_b32, xf_b1 / marian_b1))
EOF
echo "all runs: $results; outputs and stderr.log in $work"
