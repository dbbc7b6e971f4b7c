#!/usr/bin/env bash
# README's main job: build xf-run, translate examples/sentences.en with the bundled English-French
# model (models/enfr.xfm) and its student (models/enfr-student.xfm), then build xf-train and xf-convert. Without a bundled model it runs a toy pipeline instead
# (trains a tiny sequence-reversal model, converts it, translates with it) and says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc 2>/dev/null || echo 2)
# A first build leaves the tests out (GoogleTest is installed by `scripts/setup.sh --tests`, which
# scripts/test.sh runs); an existing build keeps its choice.
tests=()
[ -f build/CMakeCache.txt ] || tests=(-DXF_BUILD_TESTS=OFF)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DXF_CUDA=AUTO "${tests[@]}" >/dev/null

if [ -f models/enfr.xfm ]; then
  # xf-run first (half the build's CPU time): the translation comes before the other tools build.
  cmake --build build -j "$jobs" --target xf-run >/dev/null
  # The length penalty chosen for this model on dev.tsv (docs/TRAINING.md) is in the file's
  # metadata as decoding.length_penalty, which xf-run takes as its default.
  # With the bundled student (models/enfr-student.xfm: an SSRU decoder and a shortlist, about 3x
  # faster on one CPU thread, a little less good: models/README.md), its translation in a third column.
  translate() { build/bin/xf-run --model "$1" --beam 4 --threads "$jobs" <examples/sentences.en; }
  if [ -f models/enfr-student.xfm ]; then
    echo "Translating examples/sentences.en with models/enfr.xfm (beam 4, length penalty 1.4) and the student models/enfr-student.xfm (beam 4):" >&2
    paste examples/sentences.en <(translate models/enfr.xfm) <(translate models/enfr-student.xfm)
  else
    echo "Translating examples/sentences.en with models/enfr.xfm (beam 4, length penalty 1.4):" >&2
    paste examples/sentences.en <(translate models/enfr.xfm)
  fi
  echo "Building xf-train and xf-convert (build/bin/)..." >&2
  cmake --build build -j "$jobs" --target xf-train xf-convert >/dev/null
else
  cmake --build build -j "$jobs" --target xf-run xf-train xf-convert >/dev/null
  echo "NOTE: no bundled model (models/enfr.xfm) yet: running the toy pipeline (reverse a sequence of letters)." >&2
  exec scripts/toy_pipeline.sh
fi
