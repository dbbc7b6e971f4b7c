#!/usr/bin/env bash
# Builds the CPU kernels' tests (kernels_test, cpu device; kernels_cpu_alloc_test) and the
# runtime's tests (translator, golden, decoding options, weight store, backend registry, threads,
# C API, allocation, the bundled model's int8 batch independence) for aarch64 with Debian's cross compiler and runs them all under qemu-user
# twice: on an emulated CPU without the ARMv8.2 dot-product instructions (cortex-a57: xf's NEON
# int8 kernel) and with them (max: its sdot build). Correctness only; qemu says nothing about
# speed on a real ARM CPU. Needs a configured BUILD_DIR (for the generated FlatBuffers header) and
# what scripts/setup.sh --tests provides: qemu-user-static, the arm64 builds of oneDNN, OpenMP and
# GoogleTest (Debian multiarch; their headers are the host's), and the arm64 SentencePiece and
# protobuf-lite .debs (downloaded once to XF_AARCH64_DEBS, default /var/cache/xf/aarch64-debs),
# which this script unpacks into BUILD_DIR-aarch64/sysroot. Anything missing fails with one line.
# Usage: scripts/test_aarch64.sh [BUILD_DIR]   (default build; objects go to BUILD_DIR-aarch64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build}
out=$build-aarch64
cxx=aarch64-linux-gnu-g++
qemu=qemu-aarch64-static
arm_libs=/usr/lib/aarch64-linux-gnu
debs=${XF_AARCH64_DEBS:-/var/cache/xf/aarch64-debs}
sentencepiece_debs=(libsentencepiece0 libsentencepiece-dev libprotobuf-lite32)
fail() { echo "test_aarch64: $*" >&2; exit 1; }
command -v $cxx >/dev/null || fail "$cxx not found (scripts/setup.sh --tests)"
command -v $qemu >/dev/null || fail "$qemu not found (scripts/setup.sh --tests)"
for lib in libdnnl.so.2 libgomp.so.1 libgtest.a libgtest_main.a; do
  [ -e "$arm_libs/$lib" ] || fail "$arm_libs/$lib missing (scripts/setup.sh --tests installs the arm64 packages)"
done
for package in "${sentencepiece_debs[@]}"; do
  ls "$debs/${package}_"*_arm64.deb >/dev/null 2>&1 ||
    fail "$debs/${package}_*_arm64.deb missing (scripts/setup.sh --tests downloads it; XF_AARCH64_DEBS)"
done
[ -f "$build/format/generated/xf_model_generated.h" ] || fail "configure and build $build first"

# Only the architecture-independent third-party headers, so the cross compiler's own libc is used;
# SentencePiece's headers and libraries from its arm64 .debs, unpacked afresh (a few MB).
mkdir -p "$out/obj" "$out/include"
ln -sfn /usr/include/oneapi "$out/include/oneapi"
ln -sfn /usr/include/gtest "$out/include/gtest"
for f in /usr/include/dnnl*.h* /usr/include/flatbuffers; do ln -sfn "$f" "$out/include/"; done
sysroot=$(cd "$out" && pwd)/sysroot
rm -rf "$sysroot"
for package in "${sentencepiece_debs[@]}"; do
  dpkg-deb -x "$debs/${package}_"*_arm64.deb "$sysroot"
done
sysroot_libs=$sysroot/usr/lib/aarch64-linux-gnu

library_sources=(common/src/*.cc format/src/*.cc kernels_cpu/src/*.cc modules/src/*.cc
                 runtime/src/memory_plan.cc runtime/src/cpu_backend.cc runtime/src/search.cc
                 runtime/src/model.cc runtime/src/translator.cc runtime/src/backend_registry.cc
                 runtime/src/weight_store.cc runtime/src/c_api.cc runtime/src/sentences.cc
                 runtime/src/output_shortlist.cc
                 tests/common/tiny_model.cc tests/common/run_command.cc)
kernel_test_sources=(tests/kernels/kernel_device.cc
                     $(ls tests/kernels/*_test.cc | grep -v alloc_cpu_test))
runtime_tests=(translator golden decoding_options weight_store backend_registry threads c_api
               allocation batch_independence)
# The malloc-counting hook: an object of its own, linked into the allocation tests only.
alloc_counter=runtime/alloc_counter/alloc_counter.cc
sources=("${library_sources[@]}" "${kernel_test_sources[@]}" tests/kernels/cpu_isa_main.cc
         tests/kernels/matmul_alloc_cpu_test.cc "$alloc_counter"
         $(printf 'tests/runtime/%s_test.cc ' "${runtime_tests[@]}"))
object_of() { echo "$out/obj/$(echo "$1" | tr / _).o"; }
version=$(sed -nE 's/^#define XF_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)$/\2/p' runtime/include/xf/xf.h |
          paste -sd.)
launcher=""
command -v ccache >/dev/null && launcher=ccache
# What the CMake targets define (runtime/, modules/, tests/): Release's -O3 -DNDEBUG.
compile() {
  local source=$1 object
  object="$out/obj/$(echo "$source" | tr / _).o"
  $launcher $cxx -std=c++17 -O3 -DNDEBUG -fopenmp -DXF_SOURCE_DIR="\"$root\"" \
    -DXF_BINARY_DIR="\"$root/$out\"" -DXF_GOLDEN_DIR="\"$root/tests/reference/golden\"" \
    -DXF_VERSION_STRING="\"$version\"" -DXF_MODULE_ABI="\"$version aarch64\"" \
    -I common/include -I format/include -I modules/include -I kernels/include \
    -I kernels_cpu/include -I runtime/include -I runtime/src -I runtime/alloc_counter/include \
    -I tests/common -I tests/kernels -I tests/trainer -I kernels_cpu/src -I "$build/format/generated" \
    -I "$out/include" -I "$sysroot/usr/include" \
    -c -o "$object" "$source" || { echo "test_aarch64: $source does not compile" >&2; return 1; }
}
export -f compile
export cxx launcher out build root version sysroot
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} bash -c 'compile {}'

# The libraries as one archive, so that each test links only what it uses.
library_objects=()
for source in "${library_sources[@]}"; do library_objects+=("$(object_of "$source")"); done
rm -f "$out/libxf_aarch64.a"
aarch64-linux-gnu-ar rcs "$out/libxf_aarch64.a" "${library_objects[@]}"
kernel_test_objects=()  # exactly this checkout's tests (an earlier run's objects may linger)
for source in "${kernel_test_sources[@]}"; do kernel_test_objects+=("$(object_of "$source")"); done
link() {
  local exe=$1; shift
  $cxx -fopenmp -o "$out/$exe" "$@" "$out/libxf_aarch64.a" "$arm_libs/libgtest_main.a" \
    "$arm_libs/libgtest.a" "$arm_libs/libdnnl.so.2" "$sysroot_libs/libsentencepiece.so" \
    "$sysroot_libs/libsentencepiece_train.so" -Wl,-rpath,"$sysroot_libs" \
    -Wl,-rpath-link,"$sysroot_libs" -lpthread -ldl
}
link kernels_test "${kernel_test_objects[@]}"
link kernels_cpu_alloc_test "$(object_of tests/kernels/matmul_alloc_cpu_test.cc)" \
  "$(object_of "$alloc_counter")"
link xf_test_cpu_isa "$(object_of tests/kernels/cpu_isa_main.cc)"
for test in "${runtime_tests[@]}"; do
  hook=()
  [ "$test" = allocation ] && hook=("$(object_of "$alloc_counter")")
  link "xf_runtime_${test}_test" "$(object_of "tests/runtime/${test}_test.cc")" "${hook[@]}"
done

# The arm64 libraries are where the dynamic loader looks (multiarch; SentencePiece's by the
# rpath above); -L / finds the loader.
for cpu in cortex-a57 max; do
  echo "test_aarch64: under $qemu -cpu $cpu, xf's kernels at" \
    "$($qemu -cpu $cpu -L / "$out/xf_test_cpu_isa")" >&2
  for test in kernels_test kernels_cpu_alloc_test \
              $(printf 'xf_runtime_%s_test ' "${runtime_tests[@]}"); do
    # The bundled model in int8 only (xf's NEON kernel, 30 s a CPU): its f32 case takes 4-5
    # minutes under qemu (oneDNN's f32 products; passed when run by hand, docs/KERNELS_CPU.md).
    filter=()
    [ "$test" = xf_runtime_batch_independence_test ] &&
      filter=(--gtest_filter=BatchIndependence.Int8ModelAloneOrInABatchOf32)
    echo "test_aarch64: $test under $qemu -cpu $cpu${filter:+ (${filter[*]})}" >&2
    # ONEDNN_JIT_PROFILE=0: oneDNN's aarch64 build otherwise writes /tmp/perf-PID.map for its JIT
    # kernels (Linux perf's symbol maps), files no test may leave behind.
    XF_TEST=1 ONEDNN_JIT_PROFILE=0 $qemu -cpu $cpu -L / "$out/$test" --gtest_brief=1 "${filter[@]}"
  done
done
echo "test_aarch64: kernel and runtime tests passed on cortex-a57 and max" >&2
