#!/usr/bin/env bash
# Builds xf (CUDA sources too whenever nvcc is present) and runs every test with ctest (which must
# leave no file in TMPDIR: scripts/ctest_leaves_no_files.sh), tests the
# Python package (scripts/test_python.sh), compiles the CPU sources for aarch64 and runs the kernel
# and runtime tests under qemu-user (scripts/test_aarch64.sh), runs the format
# tests again under AddressSanitizer and the threads test under ThreadSanitizer, then a bounded
# libFuzzer run of the model reader. Exits non-zero when any build step or test fails. Where OpenMPI is installed (scripts/setup.sh --tests),
# ctest includes the data-parallel runs under mpirun.
# Usage: scripts/test.sh   (from anywhere; builds into build/, build-asan/, build-tsan/, build-fuzz/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc 2>/dev/null || echo 2)

# What only the tests need (GoogleTest, Python, OpenMPI, the aarch64 cross compiler, qemu-user,
# arm64 libraries): installed here, not by README's first command (nothing when present).
scripts/setup.sh --tests
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DXF_CUDA=AUTO -DXF_BUILD_TESTS=ON
cmake --build build -j "$jobs"
# Every test removes what it made, pass or fail: ctest runs with TMPDIR at a fresh folder that
# must stay empty.
scripts/ctest_leaves_no_files.sh build --output-on-failure -j "$jobs" --timeout 900

# The Python package, built against the libraries just built, and its pytest tests.
scripts/test_python.sh build

# The CPU side must build on aarch64 (Jetson): compile it with the cross compiler, then run the
# kernel and runtime tests under qemu-user, without and with the dot-product instructions.
scripts/check_aarch64.sh build
scripts/test_aarch64.sh build

# The reader must survive hostile files with no sanitizer report (issue 2).
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan

# Translators on several threads, and one shared by two threads, under ThreadSanitizer (issue 13).
cmake --preset tsan >/dev/null
cmake --build --preset tsan
ctest --preset tsan

# The libFuzzer target for the reader, a bounded run, where clang and its fuzzer runtime exist.
if command -v clang++ >/dev/null && compgen -G '/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a' >/dev/null; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
  ctest --preset fuzz
else
  echo "test.sh: clang's libFuzzer runtime not found: fuzz target skipped" >&2
fi
echo "test.sh: all tests passed" >&2
