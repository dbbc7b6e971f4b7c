#!/usr/bin/env bash
# Installs the Debian packages xf builds with. Idempotent: skips apt when everything is present.
# Usage: scripts/setup.sh            what the tools' build needs (README's first command)
#        scripts/setup.sh --tests    that and what the tests need (scripts/test.sh runs this):
#                                    GoogleTest, Python, OpenMPI (data-parallel training), the
#                                    aarch64 cross compiler, qemu-user and arm64 libraries
set -euo pipefail
with_tests=0
case "${1:-}" in
  "") ;;
  --tests) with_tests=1 ;;
  *) echo "setup: unknown option '$1' (usage: scripts/setup.sh [--tests])" >&2; exit 2 ;;
esac
packages=(
  build-essential cmake pkg-config
  libdnnl-dev ocl-icd-opencl-dev opencl-headers  # Debian's dnnl-config.cmake requires OpenCL
  libflatbuffers-dev flatbuffers-compiler
  libsentencepiece-dev
  nlohmann-json3-dev libyaml-cpp-dev libzip-dev  # importers/: Hugging Face JSON, Marian YAML and .npz
)
test_packages=(
  sentencepiece libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-dev  # the Python package (python/) and its tests
  libopenmpi-dev openmpi-bin  # data-parallel xf-train under mpirun (trainer/comm) and its tests
  g++-aarch64-linux-gnu  # scripts/check_aarch64.sh: the CPU code must compile for Jetson's CPU
  # scripts/test_aarch64.sh: the kernel and runtime tests for aarch64 under qemu-user, linked
  # against Debian's arm64 builds (multiarch). Runtime libraries only: libdnnl-dev:arm64 and the
  # arm64 SentencePiece packages cannot be installed beside their amd64 twins (below).
  qemu-user-static libdnnl2:arm64 libgtest-dev:arm64
)
[ "$with_tests" -eq 1 ] && packages+=("${test_packages[@]}")
# The runtime's tests for aarch64 (scripts/test_aarch64.sh) link SentencePiece, whose arm64
# packages cannot be installed beside the amd64 ones: their .debs are downloaded here (once, kept
# in XF_AARCH64_DEBS) and unpacked by the test into a sysroot under its build directory. Nothing
# downloads at test time.
aarch64_debs=${XF_AARCH64_DEBS:-/var/cache/xf/aarch64-debs}
aarch64_packages=(libsentencepiece0 libsentencepiece-dev libprotobuf-lite32)
fetch_aarch64_debs() {
  local package wanted=()
  for package in "${aarch64_packages[@]}"; do
    ls "$aarch64_debs/${package}_"*_arm64.deb >/dev/null 2>&1 || wanted+=("$package:arm64")
  done
  [ "$with_tests" -eq 1 ] && [ ${#wanted[@]} -gt 0 ] || return 0
  local sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: downloading ${wanted[*]} to $aarch64_debs" >&2
  $sudo_cmd mkdir -p "$aarch64_debs"
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo_cmd dpkg --add-architecture arm64
  $sudo_cmd apt-get update -qq
  # apt's download user cannot write to a root-owned folder; apt warns and downloads as root.
  (cd "$aarch64_debs" && $sudo_cmd apt-get download -qq "${wanted[@]}" 2>&1 |
    { grep -v "Download is performed unsandboxed" || true; }) >&2
  for package in "${aarch64_packages[@]}"; do
    ls "$aarch64_debs/${package}_"*_arm64.deb >/dev/null 2>&1 ||
      { echo "setup: could not download $package:arm64 to $aarch64_debs" >&2; exit 1; }
  done
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  fetch_aarch64_debs
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
fetch_aarch64_debs
echo "setup: done" >&2
