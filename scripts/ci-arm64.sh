#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# AArch64 leg of CI: cross-compile with Debian's gcc-aarch64-linux-gnu
# (SLEEF and libgomp from the arm64 multiarch packages), then run the unit
# tests and the cpu.neon.f32 cross-validation under qemu-aarch64
# (CMAKE_CROSSCOMPILING_EMULATOR; no -L: the multiarch libraries are where
# the dynamic loader looks). qemu is 20-80x slower than native, so only the
# tests that exercise the NEON kernels and the core run here.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-arm64}

if [ "$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi
if ! dpkg-query -W -f='${Status}' libsleef-dev:arm64 2>/dev/null | grep -q "ok installed"; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo dpkg --add-architecture arm64
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends gcc-aarch64-linux-gnu \
    libc6-dev-arm64-cross qemu-user-static libsleef-dev:arm64 libgomp1:arm64 \
    libc6:arm64
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
  -DFA_BUILD_TESTS=ON -DFA_BUILD_BENCH=OFF \
  -DFA_WERROR="${FA_WERROR:-OFF}" # ON in CI (.ci/run)
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)"
grep -q "xval[.]cpu[.]neon[.]f32[.]" <(ctest --test-dir "$build" -N) ||
  { echo "ci-arm64: no cpu.neon.f32 tests were built" >&2; exit 1; }
# -E longrow: 2^27-key rows take minutes under emulation; the long-row fold
# is the same kernel-body code on every ISA and runs natively in the x86
# trees (api.hostile.longrow, xval.<cpu kernel>.fwd.longrow).
ctest --test-dir "$build" --output-on-failure -j2 -L 'unit|cpu[.]neon|api' \
  -E longrow
