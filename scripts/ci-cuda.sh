#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CUDA leg of CI (no GPU here): build libflashattn-cuda.so with device code
# for sm_80 and sm_90a, then run `ctest -L cuda`: the module and semantics
# tests run; the device tests SKIP (exit 77) with a message. On a GPU machine
# use scripts/gpu-check.sh instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
command -v nvcc >/dev/null ||
  { echo "ci-cuda: nvcc not found (install the CUDA toolkit)" >&2; exit 1; }
build=${BUILD_DIR:-build-cuda}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_ENABLE_CUDA=ON \
  -DFA_BUILD_TESTS=ON -DFA_BUILD_BENCH=OFF \
  -DFA_WERROR="${FA_WERROR:-OFF}" # ON in CI (.ci/run)
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)"
test -f "$build/libflashattn-cuda.so" ||
  { echo "ci-cuda: the module was not built" >&2; exit 1; }
# The fatbinary names each target; cuobjdump is not always installed.
for arch in sm_80 sm_90a; do
  grep -a -q "$arch" "$build/libflashattn-cuda.so" ||
    { echo "ci-cuda: no $arch code in the module" >&2; exit 1; }
done
ctest --test-dir "$build" --output-on-failure -j2 -L cuda
