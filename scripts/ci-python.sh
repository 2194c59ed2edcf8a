#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI for the Python package (issue 17), on the system python3 with Debian's
# numpy, pytest and matplotlib: build the package's build-tree copy, run the
# `python` ctest label (pytest against the build tree's library), install
# the package offline with pip into a scratch folder and run
# `python3 -m flashattn` from there, and render the H200 chart from the
# committed bench JSON. BUILD_DIR overrides the tree (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=/usr/bin/python3

sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
  --no-install-recommends python3 python3-numpy python3-pytest \
  python3-matplotlib python3-pip python3-setuptools >/dev/null

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_PYTHON=ON \
  -DFA_PYTHON="$py" -DFA_WERROR="${FA_WERROR:-OFF}" >/dev/null # ON in CI
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" \
  --target flashattn flashattn_python
ctest --test-dir "$build" -L python --output-on-failure

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# pip writes build/ and *.egg-info beside pyproject.toml: build from a copy.
cp -r python "$tmp/src"
PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --no-build-isolation --no-deps --no-index \
  --target "$tmp/site" "$tmp/src"
lib=$(find "$PWD/$build" -maxdepth 1 -name 'libflashattn.so.*.*.*' | head -n 1)
(cd "$tmp" && FLASHATTN_LIBRARY="$lib" PYTHONPATH="$tmp/site" "$py" -m flashattn)
"$py" bench/plot.py bench/gpu/runs/final-bf16.json -o "$tmp/h200.png"
