#!/usr/bin/env bash
# Issue 29 on a lent GPU: the bundled model continued with joined examples (xf-train
# --join-probability), a few minutes on one GPU instead of hours on two CPU cores.
#
#   scripts/gpu/finetune_enfr_long.sh prepare BUILD_DIR   here: packs gpu-pack-29/ (git-ignored):
#       xf-train and xf-convert of BUILD_DIR (configured with -DXF_CUDA=ON), the CUDA trainer
#       module, and train.tsv / dev.tsv of $XF_DATA (gzip). The Debian libraries come from
#       gpu-pack/libs.tar.gz (scripts/gpu_check.sh prepare).
#   scripts/gpu/finetune_enfr_long.sh                     on the GPU machine, carry
#       ["gpu-pack", "gpu-pack-29"]: xf-convert --shared-vocabulary models/enfr.xfm (the pruned
#       file back to a trainable checkpoint), xf-train --device cuda for MINUTES (default 2.5),
#       then the averages of the last 4 and 8 checkpoints as int8 files with the target vocabulary
#       pruned from train.tsv, as the bundled file is. $OUT gets the two model files, the training
#       log and metrics.csv. The choice between them (and the CPU run) is made on dev, here.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
pack="$root/gpu-pack-29"

if [ "${1:-}" = "prepare" ]; then
  set -e
  build="$2"
  data="${XF_DATA:-$root/data/enfr}"
  rm -rf "$pack" && mkdir -p "$pack/xf/bin" "$pack/xf/lib"
  cp "$build/bin/xf-train" "$build/bin/xf-convert" "$pack/xf/bin/"
  cp "$build/lib/libxf_cuda_trainer.so" "$pack/xf/lib/"
  strip --strip-unneeded "$pack"/xf/bin/* "$pack"/xf/lib/*
  gzip -c "$data/train.tsv" >"$pack/train.tsv.gz"
  gzip -c "$data/dev.tsv" >"$pack/dev.tsv.gz"
  git -C "$build/.." rev-parse HEAD >"$pack/commit.txt"
  du -sh "$pack" >&2
  exit 0
fi

out="${OUT:-$root/gpu-work-29/out}"
work="$root/gpu-work-29"
mkdir -p "$out" "$work"
minutes="${MINUTES:-2.5}"
tar -xzf "$root/gpu-pack/libs.tar.gz" -C "$work"
gunzip -c "$pack/train.tsv.gz" >"$work/train.tsv"
gunzip -c "$pack/dev.tsv.gz" >"$work/dev.tsv"
cuda_dirs=""
for name in libcublas.so.13 libcudart.so.13; do
  found=$(find /usr/local/cuda/lib64/ /usr/lib/x86_64-linux-gnu/ /opt/ -name "$name" 2>/dev/null | head -1)
  [ -n "$found" ] && cuda_dirs="$cuda_dirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$work/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$pack/xf/bin"
log="$out/finetune.log"
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "xf commit: $(cat "$pack/commit.txt")"
} >"$log" 2>&1

"$bin/xf-convert" models/enfr.xfm -o "$work/init.xfm" --shared-vocabulary >>"$log" 2>&1 ||
  { echo "finetune: xf-convert --shared-vocabulary failed" | tee -a "$log"; exit 1; }
# SIGINT at the time limit saves a checkpoint too (the run stops itself after MINUTES first).
timeout -s INT 200 "$bin/xf-train" --device cuda --init-from "$work/init.xfm" \
  --train "$work/train.tsv" --dev "$work/dev.tsv" --out "$work/run" --src-lang en --tgt-lang fr \
  --dropout 0.2 --label-smoothing 0.1 --warmup 300 --lr-scale 0.2 --clip-norm 1 \
  --batch-tokens 12000 --max-length 96 --join-probability 0.3 --join-max-pairs 4 \
  --max-minutes "$minutes" --valid-every 1000 --valid-bleu-sentences 0 --save-every 500 \
  --keep 8 --seed 5 --log-every 200 >>"$log" 2>&1
echo "xf-train exit $?" >>"$log"
cp "$work/run/metrics.csv" "$out/" 2>/dev/null
mapfile -t steps < <(ls -d "$work"/run/step-* 2>/dev/null | sort)
echo "checkpoints: ${steps[*]##*/}" >>"$log"
[ "${#steps[@]}" -ge 4 ] || { echo "finetune: fewer than 4 checkpoints" | tee -a "$log"; exit 1; }
for n in 4 8; do
  [ "${#steps[@]}" -ge "$n" ] || continue
  "$bin/xf-convert" "${steps[@]: -$n}" -o "$out/enfr-gpu-avg$n.xfm" --dtype int8 \
    --target-vocabulary-from "$work/train.tsv" >>"$log" 2>&1 ||
    echo "finetune: averaging the last $n failed" | tee -a "$log"
done
# The log is committed: the checkout's files relative to it, the scratch folder as WORK and $OUT
# as OUT, never a folder of the machine (tests/scripts/outside_paths_test.py).
sed -i -e "s|$work/|WORK/|g" -e "s|$out/|OUT/|g" -e "s|$root/||g" "$log"
tail -5 "$log"
ls -la "$out"
