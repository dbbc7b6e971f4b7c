#!/usr/bin/env bash
# Compiles every CPU-side source (format, kernels_cpu, runtime, trainer, metrics, and the parts of
# trainer/comm that need neither MPI nor NCCL) for aarch64 (Jetson's CPU) with Debian's cross
# compiler, to catch x86-only code. Compile only: linking would need aarch64 builds of oneDNN
# and SentencePiece. Needs a configured build dir for the generated FlatBuffers header.
# Usage: scripts/check_aarch64.sh [BUILD_DIR]   (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build}
cxx=aarch64-linux-gnu-g++
command -v $cxx >/dev/null || { echo "check_aarch64: $cxx not found (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }
[ -f "$build/format/generated/xf_model_generated.h" ] || { echo "check_aarch64: configure and build $build first" >&2; exit 1; }

# Only the architecture-independent third-party headers, so the cross compiler's own libc is used.
headers=$(mktemp -d)
out=$(mktemp -d)
trap 'rm -rf "$headers" "$out"' EXIT
ln -s /usr/include/oneapi "$headers/oneapi"
for f in /usr/include/dnnl*.h* /usr/include/flatbuffers /usr/include/sentencepiece*.h; do ln -s "$f" "$headers/"; done

failures=0
count=0
for f in common/src/*.cc format/src/*.cc modules/src/*.cc kernels_cpu/src/*.cc runtime/src/*.cc metrics/src/*.cc \
         trainer/src/*.cc trainer/src/*/*.cc trainer/comm/src/ranks.cc trainer/comm/src/watchdog.cc; do
  [ -f "$f" ] || continue
  case $f in *cuda*) continue ;; esac
  count=$((count + 1))
  # XF_VERSION_STRING, XF_MODULE_ABI: what runtime/ and modules/CMakeLists.txt define.
  if ! $cxx -std=c++17 -O2 -fopenmp -DXF_VERSION_STRING='"0.0.0"' -DXF_MODULE_ABI='"0.0.0"' -c -o "$out/object.o" \
      -I common/include -I format/include -I modules/include -I kernels/include -I kernels_cpu/include \
      -I runtime/include -I metrics/include -I trainer/include -I trainer/comm/include -I runtime/src \
      -I "$build/format/generated" -I "$headers" "$f" 2>"$out/errors.txt"; then
    echo "check_aarch64: $f does not compile for aarch64:" >&2
    head -20 "$out/errors.txt" >&2
    failures=$((failures + 1))
  fi
done
echo "check_aarch64: $count sources compiled for aarch64, $failures failed" >&2
[ "$failures" -eq 0 ]
