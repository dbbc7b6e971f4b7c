#!/usr/bin/env bash
# Installs the Debian packages xf builds with. Idempotent: skips apt when everything is present.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libdnnl-dev ocl-icd-opencl-dev opencl-headers  # Debian's dnnl-config.cmake requires OpenCL
  libflatbuffers-dev flatbuffers-compiler
  libsentencepiece-dev sentencepiece
  nlohmann-json3-dev libyaml-cpp-dev libzip-dev  # importers/: Hugging Face JSON, Marian YAML and .npz
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-dev  # the Python package (python/) and its tests
  libopenmpi-dev openmpi-bin  # data-parallel xf-train under mpirun (trainer/comm)
  g++-aarch64-linux-gnu  # scripts/check_aarch64.sh: the CPU code must compile for Jetson's CPU
  # scripts/test_aarch64.sh: the kernel tests for aarch64 under qemu-user, linked against Debian's
  # arm64 builds (multiarch). Runtime libraries only: libdnnl-dev:arm64 and the arm64
  # SentencePiece packages cannot be installed beside their amd64 twins (the host's headers serve).
  qemu-user-static libdnnl2:arm64 libgtest-dev:arm64
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present" >&2
  exit 0
fi
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]}" == *":arm64"* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo_cmd dpkg --add-architecture arm64
fi
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
