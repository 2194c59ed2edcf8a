#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI for the HIP backend, on a Debian 12 machine without an AMD GPU (called
# from .ci/run). Installs the HIP toolchain (ROCm 5.2 runtime and headers
# from Debian; clang-19 for device code, which knows gfx942), configures
# build-hip with -DFA_ENABLE_HIP=ON, builds libflashattn-hip.so for gfx90a
# and gfx942, then runs `ctest -L hip`: the MFMA fragment-map and semantics
# tests, the module test (loads, reports "no usable AMD GPU" via fa_explain)
# and the device tests, which SKIP (exit 77) here. Nothing runs on an AMD GPU
# here; scripts/hip-check.sh is the procedure for a ROCm machine.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
t0=$SECONDS

if ! command -v clang++-19 >/dev/null || ! command -v clang-offload-bundler-19 >/dev/null ||
   [ ! -f /usr/include/hip/hip_runtime_api.h ]; then
  export DEBIAN_FRONTEND=noninteractive
  sudo_=""
  [ "$(id -u)" = 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq
  # hipcc pulls in clang-15 and the Debian ROCm device libraries;
  # clang-tools-19 has the clang-offload-bundler that clang-19 -x hip needs.
  $sudo_ apt-get install -y -qq --no-install-recommends hipcc \
    libamdhip64-dev rocm-device-libs clang-19 clang-tools-19 llvm-19 lld-19 >/dev/null
fi
echo "--- HIP toolchain ready: $((SECONDS - t0)) s"

cmake -S . -B build-hip -DCMAKE_BUILD_TYPE=Release -DFA_ENABLE_HIP=ON \
  -DFA_BUILD_TESTS=ON -DFA_BUILD_BENCH=OFF -DFA_HIP_ARCHITECTURES="gfx90a;gfx942" \
  -DFA_WERROR="${FA_WERROR:-OFF}" # ON in CI (.ci/run)
cmake --build build-hip -j "$jobs"
echo "--- HIP module built (gfx90a, gfx942): $((SECONDS - t0)) s"

# The module must contain code objects for both targets.
for arch in gfx90a gfx942; do
  if ! grep -q -a "amdgcn-amd-amdhsa--$arch" build-hip/libflashattn-hip.so; then
    echo "libflashattn-hip.so has no $arch code object" >&2
    exit 1
  fi
done
ctest --test-dir build-hip -L hip --output-on-failure
echo "--- HIP tests: $((SECONDS - t0)) s"
