#!/usr/bin/env bash
# Runs ctest in BUILD with TMPDIR at a fresh folder and fails, listing them, when the tests left
# anything there: every test removes what it made, pass or fail. Other processes' temporary
# files do not count, since the folder is this run's alone. The tests make their folders through
# TMPDIR (tests/common/temp_dir.h, GoogleTest's TempDir(), Python's tempfile, mktemp).
# Usage: scripts/ctest_leaves_no_files.sh BUILD [ctest arguments...]
#   e.g. scripts/ctest_leaves_no_files.sh build -j 2 -R '^Format'
set -euo pipefail
build=${1:?usage: scripts/ctest_leaves_no_files.sh BUILD [ctest arguments...]}
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xf-ctest-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
(cd "$build" && TMPDIR=$tmp ctest "$@") || status=$?
left=$(cd "$tmp" && find . -mindepth 1 -maxdepth 2 | sort)
if [ -n "$left" ]; then
  echo "ctest_leaves_no_files: the tests left these in TMPDIR (shown relative to it):" >&2
  echo "$left" >&2
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
