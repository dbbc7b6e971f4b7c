#!/usr/bin/env bash
# Builds xf (CUDA sources too whenever nvcc is present) and runs every test with ctest, then the
# format tests again under AddressSanitizer. Exits non-zero when any build step or test fails.
# Usage: scripts/test.sh            (from anywhere; builds into build/ and build-asan/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DXF_CUDA=AUTO
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs" --timeout 900)

# The reader must survive hostile files with no sanitizer report (issue 2).
cmake --preset asan >/dev/null
cmake --build build-asan -j "$jobs" --target xf_format_tests
(cd build-asan && ctest --output-on-failure -R '^format\.' --timeout 900)
echo "test.sh: all tests passed" >&2
