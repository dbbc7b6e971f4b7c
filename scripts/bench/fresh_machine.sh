#!/usr/bin/env bash
# README's main command on a fresh machine (issue 41's goal: under 90 s to the first
# translation). A fresh Debian bookworm (debootstrap --variant=minbase, with git and
# ca-certificates only) is made in a chroot, the repository's COMMIT is cloned into it (the clone
# is not timed: a user has it before the command), /usr/local/cuda is bound read-only where this
# machine has it (CI's machines do, so XF_CUDA=AUTO configures as it does there), and
# `./scripts/setup.sh && ./scripts/translate_example.sh` runs with nothing else installed: every
# output line is printed with the seconds since the start. The chroot is removed after.
# Needs root, debootstrap and the Debian mirror (apt installs from it, as on a fresh machine).
# Usage: sudo scripts/bench/fresh_machine.sh [COMMIT] > LOG   (default HEAD)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
commit=$(git -C "$root" rev-parse "${1:-HEAD}")
[ "$(id -u)" -eq 0 ] || { echo "fresh_machine.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh_machine.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-fresh-machine.XXXXXX")
chroot_dir=$work/root
mounts=()
cleanup() {
  local m
  for m in "${mounts[@]}"; do umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

debootstrap --variant=minbase --include=git,ca-certificates bookworm "$chroot_dir" \
  http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 ||
  { cat "$work/debootstrap.log" >&2; exit 1; }
cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
mount -t proc proc "$chroot_dir/proc" && mounts+=("$chroot_dir/proc")
mount --rbind /dev "$chroot_dir/dev" && mounts+=("$chroot_dir/dev")
mount --rbind /sys "$chroot_dir/sys" && mounts+=("$chroot_dir/sys")
if [ -d /usr/local/cuda ]; then
  mkdir -p "$chroot_dir/usr/local/cuda"
  mount --bind -o ro /usr/local/cuda "$chroot_dir/usr/local/cuda" && mounts+=("$chroot_dir/usr/local/cuda")
fi
git clone -q "$root" "$chroot_dir/root/xf"
git -C "$chroot_dir/root/xf" checkout -q "$commit"

echo "commit $commit"
echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cuda toolkit bound: $([ -d /usr/local/cuda ] && echo yes || echo no)"
start=$(date +%s.%N)
set +e
chroot "$chroot_dir" /usr/bin/env -i HOME=/root TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'cd /root/xf && ./scripts/setup.sh && ./scripts/translate_example.sh' 2>&1 |
  while IFS= read -r line; do
    printf '%6.1f %s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$line"
  done
status=${PIPESTATUS[0]}
set -e
printf '%6.1f (end, exit %d)\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$status"
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
