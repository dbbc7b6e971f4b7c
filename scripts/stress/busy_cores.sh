#!/usr/bin/env bash
# Runs a command with a busy loop on every core beside it (the `stress` hog of issue 41), at the
# command's own niceness, so that the command gets the share of the cores it would get on a
# machine busy with other work. The loops end with the command; its exit status is returned.
# Usage: scripts/stress/busy_cores.sh COMMAND [ARGS...]
set -uo pipefail
hogs=()
for _ in $(seq "$(nproc)"); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
"$@"
