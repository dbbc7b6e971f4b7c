#!/usr/bin/env bash
# Tests the Python package (python/) against an xf build: installs that build's SDK
# (BUILD/sdk), builds the package in a venv (BUILD/python-venv) against it, so only the binding
# compiles (incrementally, in BUILD/python), and runs the pytest tests, which compare with that
# build's xf-run. pip fetches scikit-build-core, nanobind and pytest from PyPI the first time.
# Usage: scripts/test_python.sh [BUILD]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=$(cd "${1:-build}" && pwd)
venv="$build/python-venv"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check scikit-build-core nanobind pytest
cmake --install "$build" --prefix "$build/sdk" --component xf_sdk >/dev/null
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation ./python \
  -Ccmake.define.xf_DIR="$build/sdk/lib/cmake/xf" -Cbuild-dir="$build/python"
# From outside the checkout, so that `import xf` finds the installed package, not python/xf.
# pytest's temporary files go under BUILD and are removed after the run.
trap 'rm -rf "$build/pytest-tmp"' EXIT
(cd "$build" && XF_RUN="$build/bin/xf-run" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --basetemp="$build/pytest-tmp" "$root/tests/python")
