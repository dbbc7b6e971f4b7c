#!/usr/bin/env bash
# The CUDA checks in one call, for a session that has a GPU machine (issue 5).
#
#   scripts/gpu_check.sh prepare   on the development machine (Debian 12, network to its apt
#                                  registry): downloads the .deb files of the libraries xf builds
#                                  with into build-gpu-debs/ (git-ignored), because the GPU
#                                  machine's image has CUDA, CMake and Python but no oneDNN,
#                                  FlatBuffers, SentencePiece or GoogleTest, and no network.
#   scripts/gpu_check.sh           on the GPU machine (device tool: carry ["build-gpu-debs"]):
#                                  unpacks those packages, configures build-gpu/ with
#                                  XF_CUDA=ON and CMAKE_CUDA_ARCHITECTURES (default 90), builds,
#                                  runs `ctest -R cuda` (a skipped CUDA test counts as a failure
#                                  there: a GPU is present), then the CUDA benchmarks that exist.
#
# Logs go to $OUT when set (the device tool brings that folder back), else build-gpu/logs.
# Environment: XF_CUDA_ARCHS (default 90), XF_JOBS (default: all cores).
# Exit status: non-zero when configuring, building or any CUDA test failed; benchmark failures
# are reported in the summary but do not change it.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
debs="$root/build-gpu-debs"

# Packages (and what they need that a CUDA image lacks) for the top-level find_package calls.
packages=(
  libdnnl-dev libdnnl2 ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-headers opencl-c-headers
  opencl-clhpp-headers
  libflatbuffers-dev libflatbuffers2 flatbuffers-compiler flatbuffers-compiler-dev
  libsentencepiece-dev libsentencepiece0
  libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian
  pkgconf pkgconf-bin libpkgconf3 pkg-config
)

if [ "${1:-}" = "prepare" ]; then
  mkdir -p "$debs"
  (cd "$debs" && apt-get download "${packages[@]}") || {
    echo "gpu_check: apt-get download failed (run 'apt-get update' first?)" >&2
    exit 1
  }
  du -sh "$debs" >&2
  echo "gpu_check: now run 'bash scripts/gpu_check.sh' on the GPU machine with carry [\"build-gpu-debs\"]" >&2
  exit 0
fi

build="$root/build-gpu"
logs="${OUT:-$build/logs}"
mkdir -p "$logs"
archs="${XF_CUDA_ARCHS:-90}"
jobs="${XF_JOBS:-$(nproc 2>/dev/null || echo 4)}"
summary="$logs/summary.txt"
: >"$summary"
note() { echo "gpu_check: $*" | tee -a "$summary" >&2; }

{
  nvidia-smi || true
  nvcc --version || /usr/local/cuda/bin/nvcc --version || true
  cmake --version || true
} >"$logs/machine.txt" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# Unpack only what this machine does not have (dpkg -x into / registers nothing with dpkg).
if compgen -G "$debs/*.deb" >/dev/null; then
  for deb in "$debs"/*.deb; do
    name=$(dpkg-deb -f "$deb" Package)
    if dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "install ok installed"; then
      continue
    fi
    dpkg -x "$deb" / || note "could not unpack $deb"
  done
  ldconfig
  note "unpacked the packages from build-gpu-debs/ that this machine lacked"
  # SentencePiece's C++ ABI changes between versions. Where the image has its own
  # libsentencepiece0 but not its headers, xf is compiled against the carried Debian headers, so
  # the carried library must be the one loaded (the H100 image of 2026-11-25 loaded its own:
  # garbage special ids, a segmentation fault).
  if ! dpkg-query -W -f='${Status}' libsentencepiece-dev 2>/dev/null |
       grep -q "install ok installed" &&
     compgen -G "$debs/libsentencepiece0_*.deb" >/dev/null; then
    private="$build/private-libs"
    mkdir -p "$private"
    dpkg -x "$debs"/libsentencepiece0_*.deb "$private"
    export LD_LIBRARY_PATH="$private/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    note "SentencePiece: the carried library first on LD_LIBRARY_PATH (the image's has another ABI)"
  fi
else
  note "no build-gpu-debs/: assuming the build dependencies are installed (see 'prepare')"
fi

cuda_compiler=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXF_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$cuda_compiler" -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    >"$logs/configure.log" 2>&1; then
  note "configure FAILED (configure.log)"
  tail -30 "$logs/configure.log" >&2
  exit 1
fi
note "configured for sm $archs"

# The CUDA tests (kernels, then the runtime's CUDA backend against the CPU backend), then every
# benchmark-like tool that exists (absent targets are skipped).
targets=(xf_cuda_kernels_tests)
# (Every xf_cuda_*tests target must be built: ctest -R cuda counts an unbuilt one as a failure.)
for optional in xf_cuda_runtime_tests xf_cuda_runtime_emulated_tests xf-bench xf-run \
    xf_cuda_write_random_model cuda_kernels_bench \
    xf_cuda_trainer_tests xf_cuda_train_step_bench xf-train; do
  if cmake --build "$build" --target help 2>/dev/null | grep -q "$optional"; then
    targets+=("$optional")
  fi
done
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$logs/build.log" 2>&1; then
  note "build FAILED (build.log)"
  grep -E "error|Error" "$logs/build.log" | head -30 >&2
  exit 1
fi
note "built ${targets[*]}"

status=0
(cd "$build" && ctest -R cuda --output-on-failure --timeout 600) >"$logs/ctest_cuda.log" 2>&1 || status=1
grep -E "tests passed|tests failed" "$logs/ctest_cuda.log" | tee -a "$summary" >&2
if grep -q "(Skipped)" "$logs/ctest_cuda.log"; then
  note "CUDA tests were SKIPPED on a GPU machine: treated as a failure"
  grep "(Skipped)" "$logs/ctest_cuda.log" | head -5 >&2
  status=1
fi
[ "$status" -eq 0 ] && note "CUDA tests: PASSED" || note "CUDA tests: FAILED (ctest_cuda.log)"

# Kernel microbenchmarks, when the program exists.
if [ -x "$build/bin/cuda_kernels_bench" ]; then
  if "$build/bin/cuda_kernels_bench" >"$logs/cuda_kernels_bench.txt" 2>&1; then
    note "cuda_kernels_bench: done (cuda_kernels_bench.txt)"
  else
    note "cuda_kernels_bench: FAILED (cuda_kernels_bench.txt)"
  fi
fi

# Issue 5's end-to-end figures: a base-size random model (d_model 512, 6+6 layers), batch 1
# greedy and batch 32 beam 4, f32 and f16, when xf-bench knows --device.
bench="$build/bin/xf-bench"
if [ -x "$bench" ] && "$bench" --help 2>&1 | grep -q -- "--device"; then
  models="$build/bench-models"
  mkdir -p "$models"
  for dtype in f32 f16; do
    # The CUDA backend computes in f16 when the model's matrices are stored in f16.
    model="$models/base-$dtype.xfm"
    if [ ! -f "$model" ] && ! python3 scripts/bench/make_random_xfm.py --out "$model" \
        --d-model 512 --heads 8 --d-ff 2048 --layers 6 --vocab 32000 --dtype "$dtype" --seed 1 \
        >>"$logs/xf_bench.txt" 2>&1; then
      # No numpy on the machine: the C++ writer (random weights, no tokenizer) instead.
      rm -f "$model"
      if ! "$build/bin/xf_cuda_write_random_model" "$model" 512 8 2048 6 32000 "$dtype" 1 \
          >>"$logs/xf_bench.txt" 2>&1; then
        note "xf-bench: could not make the $dtype model (xf_bench.txt)"
        continue
      fi
      note "xf-bench: $dtype model written by xf_cuda_write_random_model (make_random_xfm.py failed)"
    fi
    for setting in "1 1" "32 4"; do
      set -- $setting
      echo "== xf-bench --device cuda $dtype batch $1 beam $2" >>"$logs/xf_bench.txt"
      # Random token ids as input (the random model has no tokenizer).
      input="$models/ids.txt"
      [ -f "$input" ] || python3 -c "
import random; random.seed(1)
for _ in range(512): print(' '.join(str(random.randrange(4, 32000)) for _ in range(random.randint(8, 40))))
" >"$input"
      if "$bench" --model "$model" --input "$input" --device cuda --ids --max-batch "$1" \
          --beam "$2" >>"$logs/xf_bench.txt" 2>&1; then
        note "xf-bench $dtype batch $1 beam $2: done (xf_bench.txt)"
      else
        note "xf-bench $dtype batch $1 beam $2: FAILED (xf_bench.txt)"
      fi
    done
  done
  # xf-run reaches the CUDA backend too: 16 lines greedy on both devices (f32). Reported, not
  # required: a random model may have near-ties that f32 rounding decides differently.
  run="$build/bin/xf-run"
  if [ -x "$run" ] && [ -f "$models/base-f32.xfm" ]; then
    head -16 "$models/ids.txt" >"$models/ids16.txt"
    if "$run" --model "$models/base-f32.xfm" --ids --beam 1 --device cuda <"$models/ids16.txt" \
        >"$logs/xf_run_cuda.txt" 2>>"$logs/xf_bench.txt" &&
       "$run" --model "$models/base-f32.xfm" --ids --beam 1 --device cpu --threads "$jobs" \
        <"$models/ids16.txt" >"$logs/xf_run_cpu.txt" 2>>"$logs/xf_bench.txt"; then
      same=$(paste "$logs/xf_run_cuda.txt" "$logs/xf_run_cpu.txt" | awk -F '\t' '$1 == $2' | wc -l)
      note "xf-run --device cuda: $same of 16 greedy outputs identical to --device cpu (f32)"
    else
      note "xf-run --device cuda: FAILED (xf_bench.txt)"
    fi
  fi
else
  note "xf-bench with --device is not there yet: no end-to-end CUDA figures"
fi

# ---- The trainer on the GPU (issue 4; its tests ran in ctest -R cuda above) ----------------------
# Training-step throughput of the base model (d_model 512, 6+6 layers, d_ff 2048, 8 heads,
# vocabulary 8000; 200 random sentence pairs of 24..31 tokens per step), f16 mixed precision and
# f32; then xf-train --device cuda for 300 steps of a small model on a synthetic reverse task.
# Reported in the summary; a failure here sets the exit status too.
step_bench="$build/bin/xf_cuda_train_step_bench"
if [ -x "$step_bench" ]; then
  for precision in mixed-f16 f32; do
    echo "== xf_cuda_train_step_bench --precision $precision" >>"$logs/cuda_train_step_bench.txt"
    if "$step_bench" --precision "$precision" --steps 10 >>"$logs/cuda_train_step_bench.txt" 2>&1
    then
      note "train step, base model: $(grep "^$precision seconds/step" \
        "$logs/cuda_train_step_bench.txt" | tail -1)"
    else
      note "xf_cuda_train_step_bench --precision $precision: FAILED (cuda_train_step_bench.txt)"
      status=1
    fi
  done
fi
train="$build/bin/xf-train"
if [ -x "$train" ]; then
  reverse="$build/reverse-task"
  mkdir -p "$reverse"
  python3 -c "
import random; random.seed(1)
for _ in range(4000):
    s = ''.join(random.choice('abcdefghij') for _ in range(random.randint(3, 12)))
    print(s + '\t' + s[::-1])
" >"$reverse/train.tsv"
  for device in cuda cuda-f32; do
    if "$train" --train "$reverse/train.tsv" --out "$reverse/run-$device" --device "$device" \
        --spm-type char --vocab-size 100 --layers 2 --d-model 64 --heads 4 --d-ff 256 \
        --dropout 0.1 --warmup 100 --batch-tokens 2048 --max-steps 300 --valid-every 0 \
        --save-every 0 --log-every 50 --seed 3 >"$logs/xf_train_$device.txt" 2>&1; then
      note "xf-train --device $device: $(grep '^step 300 ' "$logs/xf_train_$device.txt" | head -1)"
    else
      note "xf-train --device $device: FAILED (xf_train_$device.txt)"
      status=1
    fi
  done
fi

exit "$status"
