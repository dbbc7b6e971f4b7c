#!/usr/bin/env bash
# xf against Marian (pymarian) on a Firefox Translations (Bergamot) student of the tiny11 shape:
# issue 38's speed table.
#
#   scripts/bench/compare_marian_student.sh [RUN_DIR]
#
# 1. make_student_marian.py makes (once; kept in RUN_DIR/student) the student with Marian's own
#    tools: 6-layer encoder, d_model 256, FFN 1536, a 2-layer SSRU decoder, a joint SentencePiece
#    vocabulary of 32,000 pieces, all embeddings tied (random weights unless UPDATES > 1), its
#    intgemm8 model (marian-conv --gemm-type intgemm8) and its 50/50 binary shortlist.
# 2. xf imports Marian's intgemm8 file with its shortlist (decoder.yml names it): `xf-convert
#    --from marian RUN_DIR/student/model.intgemm8.bin --dtype int8`, Marian's own int8 values.
# 3. The input: the first LINES distinct English sentences of XF_DATA/test.tsv that are exactly
#    PIECES pieces long (LINES_B1 for batch 1), each REPEAT times, as text: each engine tokenizes
#    with the same .spm. Greedy (Bergamot's students decode with beam 1). The outputs' length
#    limit is set equal: Marian's --max-length-factor FACTOR (FACTOR x the source's pieces and
#    its EOS), xf-run --max-len-a FACTOR --max-len-b B with B = floor(FACTOR x (PIECES + 1)) -
#    floor(FACTOR x PIECES) (the same count for sources of PIECES pieces; 1 by default; the
#    tables before 2026-11-29 had B = 0, one token fewer than Marian's), and xf's loop guard off
#    (Marian has none; random weights repeat a token to
#    the limit). The engines' int8 products differ, so their outputs do (the table counts the
#    lines that agree and the output tokens of each).
# 4. Each configuration (ISA: AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 for xf; INTGEMM_CPUID=AVX2 and
#    MKL_ENABLE_INSTRUCTIONS=AVX2 for Marian) and the CPU's own (AVX-512 here); batch 32 and
#    batch 1; one thread) runs both engines as one process over the whole input, alternating,
#    ROUNDS times; the table keeps each engine's round with the least CPU time. Figures are of
#    the whole process (model loading and, for Marian, Python's start included; the "start-up +
#    1 sentence" rows are the same processes on one sentence): cpu s = user + sys, wall s, peak
#    RSS, sentences per second of CPU time, and the same net of the start-up row's CPU time.
#
# Environment (defaults in brackets):
#   PYTHON    a Python with pymarian, sentencepiece  [python3]
#   XF_BIN    directory with xf-run and xf-convert   [REPO/build/bin]
#   XF_DATA   folder with train.tsv and test.tsv (English TAB French)   (required)
#   LINES [96]  LINES_B1 [32]  REPEAT [4]  PIECES [10]  FACTOR [1.5]  ROUNDS [2]  UPDATES [1]
#   ISAS ["AVX2 native"]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=comparison_common.sh
source "$here/comparison_common.sh"
comparison_setup xf-marian-student "pymarian sentencepiece" "$@"
lines=${LINES:-96}
lines_b1=${LINES_B1:-32}
repeat=${REPEAT:-4}
pieces=${PIECES:-10}
factor=${FACTOR:-1.5}
rounds=${ROUNDS:-2}
len_b=$(marian_len_b "$factor" "$pieces")
updates=${UPDATES:-1}
isas=${ISAS:-AVX2 native}
student=$work/student

"$python" "$here/make_student_marian.py" --data "$data" --out "$student" --updates "$updates"

"$python" - "$student/vocab.enfr.spm" "$data/test.tsv" "$pieces" "$lines" "$lines_b1" "$repeat" "$work" <<'EOF'
import sys
import sentencepiece as spm
spm_path, test, pieces, lines, lines_b1, repeat, work = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7]), sys.argv[7]
sp = spm.SentencePieceProcessor(model_file=spm_path)
chosen = []
for line in open(test, encoding="utf-8"):
    source = line.split("\t")[0].strip()
    if source and source not in chosen and len(sp.encode(source)) == pieces:
        chosen.append(source)
if len(chosen) < max(lines, lines_b1):
    sys.exit("compare_marian_student: only %d distinct sentences of %d pieces in %s" % (len(chosen), pieces, test))
for name, count, times in (("input", lines, repeat), ("input_b1", lines_b1, repeat), ("one", 1, 1)):
    with open("%s/%s.txt" % (work, name), "w", encoding="utf-8") as f:
        f.writelines(s + "\n" for _ in range(times) for s in chosen[:count])
EOF

[[ -f $work/xf_int8.xfm ]] ||
  "$xf_bin/xf-convert" --from marian "$student/model.intgemm8.bin" -o "$work/xf_int8.xfm" --dtype int8 2>> "$work/convert.log"

results=$work/results.tsv
printf 'config\tisa\tengine\tround\tlines\tload1\twall_s\tcpu_s\trss_mb\toutput\n' > "$results"

# run LABEL ISA ENGINE ROUND LINES OUTPUT COMMAND...: one timed process (comparison_common.sh), its
# stdout the output.
run() { timed_run "$work" "$6" "$1" "$2" "$3" "$4" "$5" -- "${@:7}"; }

# config LABEL BATCH INPUT_NAME ISA
config() {
  local label=$1 batch=$2 in=$3 isa=$4 round xf_env=() marian_env=()
  if [[ $isa == AVX2 ]]; then
    xf_env=(ONEDNN_MAX_CPU_ISA=AVX2)
    marian_env=(INTGEMM_CPUID=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
  fi
  local count
  count=$(wc -l < "$work/$in.txt")
  for ((round = 1; round <= rounds; round++)); do
    local tag="${label// /_}.$isa.r$round"
    run "$label" "$isa" xf "$round" "$count" "$work/out.xf.$tag" \
      env "${xf_env[@]}" "$xf_bin/xf-run" --model "$work/xf_int8.xfm" --input "$work/$in.txt" --beam 1 \
      --max-batch "$batch" --threads 1 --length-penalty 0 --max-len-a "$factor" --max-len-b "$len_b" --disable-loop-guard
    run "$label" "$isa" marian "$round" "$count" "$work/out.marian.$tag" \
      env "${marian_env[@]}" "$python" -m pymarian decode -m "$student/model.intgemm8.bin" \
      -v "$student/vocab.enfr.spm" "$student/vocab.enfr.spm" --shortlist "$student/lex.50.50.s2t.bin" false \
      -i "$work/$in.txt" --beam-size 1 --mini-batch "$batch" --maxi-batch 1 --cpu-threads 1 --normalize 0 \
      --max-length-factor "$factor" --quiet
  done
}

{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
       "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_vnni|avx512_bf16)$' | tr '\n' ' ')"
  echo "uptime before: $(uptime)"
  echo "software: $("$python" -c 'import pymarian; print("pymarian", pymarian.__version__)'), xf $("$xf_bin/xf-run" --version 2>&1 | head -1)"
  echo "student: $([[ $updates == 1 ]] && echo 'random weights' || echo "$updates updates"); input: $lines sentences (batch 1: $lines_b1) of $pieces pieces, each $repeat times; outputs up to $factor x the source; greedy, int8 with the 50/50 shortlist, one thread"
} > "$work/machine.txt"

for isa in $isas; do
  config "batch 32" 32 input "$isa"
  config "batch 1" 1 input_b1 "$isa"
  rounds=1 config "start-up + 1 sentence" 1 one "$isa"
done
echo "uptime after: $(uptime)" >> "$work/machine.txt"

"$python" - "$results" "$work/machine.txt" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
best = {}
for r in rows:
    key = (r["config"], r["isa"], r["engine"])
    if key not in best or float(r["cpu_s"]) < float(best[key]["cpu_s"]):
        best[key] = r
print(open(sys.argv[2]).read().rstrip())
print()
print("| ISA | configuration | engine | lines | output tokens | cpu s | wall s | peak RSS MB | sentences / cpu s "
      "| the same net of start-up | same output as xf | xf cpu ÷ Marian cpu (net of start-up) | load |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
for key, r in best.items():
    config, isa, engine = key
    xf = best[(config, isa, "xf")]
    out, xf_out = open(r["output"]).read().splitlines(), open(xf["output"]).read().splitlines()
    tokens = sum(len(line.split()) for line in out)
    same = "-" if engine == "xf" else "%d of %d lines" % (sum(a == b for a, b in zip(out, xf_out)), len(xf_out))
    cpu = float(r["cpu_s"])
    def net_of(row):
        start = best.get(("start-up + 1 sentence", isa, row["engine"]))
        if config.startswith("start-up") or not start:
            return None
        net = float(row["cpu_s"]) - float(start["cpu_s"])
        return net if net > 0 else None
    net = net_of(r)
    ratio = ""
    if engine != "xf":
        ratio = "%.2f" % (float(xf["cpu_s"]) / cpu)
        if net and net_of(xf):
            ratio += " (%.2f)" % (net_of(xf) / net)
    print("| %s | %s | %s | %s | %d | %s | %s | %s | %.1f | %s | %s | %s | %s |" % (
        isa, config, engine, r["lines"], tokens, r["cpu_s"], r["wall_s"], r["rss_mb"],
        int(r["lines"]) / max(cpu, 1e-3), "%.1f" % (int(r["lines"]) / net) if net else "-", same, ratio, r["load1"]))
EOF
echo "all runs: $results; outputs and stderr.log in $work"
