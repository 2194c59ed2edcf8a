#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One command for a ROCm machine with an MI200 (gfx90a) or MI300 (gfx942):
# build the HIP module with ROCm's own compiler and run every HIP test --
# the host-side ones, the module test (which then expects a usable device),
# hip.gpu (HIP vs CPU) and the float64-oracle grid xval.hip.* and xval.hip.<kernel>.* (forward
# on the MFMA kernels, backward on the generic ones). Exits non-zero if any
# test fails, and also if the device tests SKIPPED (no usable device found:
# nothing was verified).
#
#   scripts/hip-check.sh [--no-build]
# Environment: BUILD_DIR (default build-hip-rocm), ROCM_PATH (default
# /opt/rocm), HIP_ARCHS (default: the device's own, from rocminfo, else
# "gfx90a;gfx942"), JOBS (default: all cores).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-hip-rocm}
rocm=${ROCM_PATH:-/opt/rocm}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
archs=${HIP_ARCHS:-}
if [ -z "$archs" ] && command -v rocminfo >/dev/null; then
  archs=$(rocminfo 2>/dev/null | grep -o 'gfx9[0-9a-f]*' | sort -u | grep -E '^gfx(90a|942)$' | paste -sd ';')
fi
archs=${archs:-gfx90a;gfx942}
echo "=== device"
rocm-smi --showproductname 2>/dev/null || rocminfo 2>/dev/null | grep -E 'Marketing|gfx' | head -4 || true
if [ "${1:-}" != "--no-build" ]; then
  echo "=== build $build for $archs with $rocm/llvm/bin/clang++"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_ENABLE_HIP=ON \
    -DFA_BUILD_TESTS=ON -DFA_BUILD_BENCH=ON -DFA_HIP_ROCM_PATH="$rocm" \
    -DFA_HIP_CLANG="$rocm/llvm/bin/clang++" -DFA_HIP_DEVICE_LIB_PATH= \
    -DFA_HIP_ARCHITECTURES="$archs" || exit 1
  cmake --build "$build" -j "$jobs" || exit 1
fi
echo "=== ctest -L hip"
ctest --test-dir "$build" -L hip --output-on-failure 2>&1 | tee "$build/hip-check.log"
status=${PIPESTATUS[0]}
if grep -q "(Skipped)" "$build/hip-check.log"; then
  echo "hip-check: some HIP tests SKIPPED: no usable AMD GPU was found," \
       "so the device code is NOT verified (see the SKIP lines above)"
  [ "$status" = 0 ] && status=3
fi
[ "$status" = 0 ] && echo "hip-check: every HIP test passed on this device"
exit "$status"
