#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# From a fresh checkout to a checked, timed attention run: install missing
# packages (Debian/Ubuntu), configure and build a Release tree in build/
# (BUILD_DIR overrides), then run fa-bench on a moderate shape, forward and
# backward, compared with the float64 oracle. Arguments, if any, replace the
# default fa-bench options (./scripts/quickstart.sh --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)

./scripts/install-deps.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"

if (($#)); then
  args=("$@")
else
  args=(-b 1 -h 8 -s 1024 -d 64 --bwd --iters 5 --warmup 1)
fi
echo "+ $build/bench/fa-bench ${args[*]}"
"$build/bench/fa-bench" "${args[@]}"
