#!/usr/bin/env bash
# Builds the CPU kernels' tests (kernels_test, cpu device) for aarch64 with Debian's cross compiler and
# runs them under qemu-user, twice: on an emulated CPU without the ARMv8.2 dot-product
# instructions (cortex-a57: xf's NEON int8 kernel) and with them (max: its sdot build). Correctness
# only; qemu says nothing about speed on a real ARM CPU. Needs a configured BUILD_DIR (for the
# generated FlatBuffers header) and scripts/setup.sh's aarch64 packages: qemu-user-static and the
# arm64 builds of oneDNN, OpenMP and GoogleTest (Debian multiarch; their headers are the host's).
# Usage: scripts/test_aarch64.sh [BUILD_DIR]   (default build; objects go to BUILD_DIR-aarch64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build}
out=$build-aarch64
cxx=aarch64-linux-gnu-g++
qemu=qemu-aarch64-static
arm_libs=/usr/lib/aarch64-linux-gnu
fail() { echo "test_aarch64: $*" >&2; exit 1; }
command -v $cxx >/dev/null || fail "$cxx not found (scripts/setup.sh)"
command -v $qemu >/dev/null || fail "$qemu not found (scripts/setup.sh)"
for lib in libdnnl.so.2 libgomp.so.1 libgtest.a libgtest_main.a; do
  [ -e "$arm_libs/$lib" ] || fail "$arm_libs/$lib missing (scripts/setup.sh installs the arm64 packages)"
done
[ -f "$build/format/generated/xf_model_generated.h" ] || fail "configure and build $build first"

# Only the architecture-independent third-party headers, so the cross compiler's own libc is used.
mkdir -p "$out/obj" "$out/include"
ln -sfn /usr/include/oneapi "$out/include/oneapi"
ln -sfn /usr/include/gtest "$out/include/gtest"
for f in /usr/include/dnnl*.h* /usr/include/flatbuffers; do ln -sfn "$f" "$out/include/"; done

sources=(common/src/*.cc format/src/*.cc kernels_cpu/src/*.cc
         tests/kernels/kernel_device.cc
         $(ls tests/kernels/*_test.cc | grep -v alloc_cpu_test))
launcher=""
command -v ccache >/dev/null && launcher=ccache
compile() {
  local source=$1 object
  object="$out/obj/$(echo "$source" | tr / _).o"
  $launcher $cxx -std=c++17 -O3 -fopenmp -DXF_SOURCE_DIR="\"$root\"" \
    -I common/include -I format/include -I kernels/include -I kernels_cpu/include \
    -I tests/kernels -I tests/trainer -I tests/common -I "$build/format/generated" -I "$out/include" \
    -c -o "$object" "$source" || { echo "test_aarch64: $source does not compile" >&2; return 1; }
}
export -f compile
export cxx launcher out build root
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} bash -c 'compile {}'
compile tests/kernels/cpu_isa_main.cc
library_objects=("$out"/obj/common_* "$out"/obj/format_* "$out"/obj/kernels_cpu_*)
test_objects=()  # exactly this checkout's tests (an earlier run's objects may linger)
for source in "${sources[@]}"; do
  if [[ $source == tests/* ]]; then test_objects+=("$out/obj/$(echo "$source" | tr / _).o"); fi
done
$cxx -fopenmp -o "$out/kernels_test" "${library_objects[@]}" "${test_objects[@]}" \
  "$arm_libs/libgtest_main.a" "$arm_libs/libgtest.a" "$arm_libs/libdnnl.so.2" -lpthread
$cxx -fopenmp -o "$out/xf_test_cpu_isa" "${library_objects[@]}" "$out/obj/tests_kernels_cpu_isa_main.cc.o" \
  "$arm_libs/libdnnl.so.2" -lpthread

# The arm64 libraries are where the dynamic loader looks (multiarch); -L / finds the loader.
for cpu in cortex-a57 max; do
  echo "test_aarch64: kernels_test under $qemu -cpu $cpu: xf's kernels at" \
    "$($qemu -cpu $cpu -L / "$out/xf_test_cpu_isa")" >&2
  XF_TEST=1 $qemu -cpu $cpu -L / "$out/kernels_test" --gtest_brief=1
done
echo "test_aarch64: passed on both emulated CPUs" >&2
