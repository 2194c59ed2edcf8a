#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite: install missing packages (Debian/Ubuntu), configure
# build/ if it is not configured yet (BUILD_DIR overrides), build it, then
#   ctest --test-dir build --output-on-failure -j2
# Extra arguments go to ctest (./scripts/test.sh -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)

./scripts/install-deps.sh
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j2 "$@"
