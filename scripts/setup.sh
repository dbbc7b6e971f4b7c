#!/usr/bin/env bash
# Installs the Debian packages xf builds with. Idempotent: skips apt when everything is present.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libdnnl-dev ocl-icd-opencl-dev opencl-headers  # Debian's dnnl-config.cmake requires OpenCL
  libflatbuffers-dev flatbuffers-compiler
  libsentencepiece-dev sentencepiece
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-dev  # the Python package (python/) and its tests
  libopenmpi-dev openmpi-bin  # data-parallel xf-train under mpirun (trainer/comm)
  g++-aarch64-linux-gnu  # scripts/check_aarch64.sh: the CPU code must compile for Jetson's CPU
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
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
