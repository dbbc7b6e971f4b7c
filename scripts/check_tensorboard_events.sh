#!/usr/bin/env bash
# Shows that TensorBoard's own reader accepts the event files xf-train writes: trains a tiny model
# for 60 steps with validation (stopped after 40 and resumed, so the run has two event files), then
# reads the run directory with tensorboard's EventAccumulator (PyPI `tensorboard`, in a venv
# outside the repository) and prints each scalar tag's points. Exits non-zero when a tag is
# missing or a step is read twice. Not part of the tests (it needs PyPI); its output is kept in
# docs/TRAINING.md.
# Usage: scripts/check_tensorboard_events.sh   (after a build into build/; VENV= picks the venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/build/bin}
venv=${VENV:-$HOME/.cache/xf-tensorboard-venv}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet tensorboard
fi

awk 'BEGIN { srand(7); for (i = 0; i < 600; i++) { len = 4 + int(rand() * 5); s = "";
  for (k = 0; k < len; k++) s = s sprintf("%c", 97 + int(rand() * 10)); r = "";
  for (k = len; k > 0; k--) r = r substr(s, k, 1); print s "\t" r } }' > "$work/all.tsv"
head -n 560 "$work/all.tsv" > "$work/train.tsv"
tail -n 40 "$work/all.tsv" > "$work/dev.tsv"
train=("$bin/xf-train" --train "$work/train.tsv" --dev "$work/dev.tsv" --out "$work/run"
  --spm-type char --vocab-size 100 --layers 1 --d-model 32 --heads 2 --d-ff 64 --warmup 20
  --batch-tokens 512 --valid-every 20 --save-every 20 --log-every 10 --threads 1 --seed 1)
"${train[@]}" --max-steps 40 2>"$work/train.log" || { tail -3 "$work/train.log" >&2; exit 1; }
"$bin/xf-train" --resume --out "$work/run" --max-steps 60 2>"$work/train.log" ||
  { tail -3 "$work/train.log" >&2; exit 1; }
ls "$work/run" | grep tfevents | sed 's/^/event file: /'

"$venv/bin/python" - "$work/run" <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
import tensorboard
acc = EventAccumulator(sys.argv[1])
acc.Reload()
print("tensorboard", tensorboard.__version__)
tags = acc.Tags()["scalars"]
expected = {"train/loss", "train/nll", "train/lr", "train/tokens_per_second", "valid/nll", "valid/bleu"}
missing = expected - set(tags)
for tag in sorted(tags):
    points = acc.Scalars(tag)
    steps = [p.step for p in points]
    assert len(steps) == len(set(steps)), f"{tag}: a step read twice: {steps}"
    shown = ", ".join(f"{p.step}: {p.value:.4g}" for p in points[:3])
    print(f"{tag}: {len(points)} points, steps {steps[0]}-{steps[-1]}; first {shown}")
if missing:
    sys.exit(f"missing tags: {sorted(missing)}")
print("TensorBoard read every tag")
PY
