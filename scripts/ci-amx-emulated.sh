#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# AMX leg of CI for machines without AMX: a tree built with
# FA_CPU_AMX_EMULATE=ON (backends/cpu/amx/amx_emulate.h: the tile
# instructions in scalar C, the rest of cpu.amxbf16.bf16 native AVX-512),
# then `ctest -L amxbf16`: the AMX forward, backward and decode against the
# float64 oracle. Only the tile instructions are emulated, so the kernels'
# packing, masks, softmax and dQ ranges are what runs; their speed is not.
# Where the CPU has AMX the main tree already ran these tests on hardware,
# and where it lacks AVX512-BF16 the kernel cannot run at all: both exit 0
# saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-amx-emulated}

if grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then
  echo "ci-amx-emulated: this CPU has AMX-BF16; the main tree's" \
    "xval.cpu.amxbf16.* ran on hardware"
  exit 0
fi
if ! grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  echo "ci-amx-emulated: this CPU lacks AVX512-BF16 (the softmax between" \
    "the tiles): nothing to run"
  exit 0
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_TESTS=ON \
  -DFA_BUILD_BENCH=OFF -DFA_BUILD_PYTHON=OFF -DFA_BUILD_EXAMPLES=OFF \
  -DFA_CPU_AMX_EMULATE=ON -DFA_XVAL_BACKENDS=cpu.amxbf16.bf16 \
  -DFA_WERROR="${FA_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" \
  --target test_xval test_xval_tests test_amxbf16_exp2
grep -q "xval[.]cpu[.]amxbf16[.]bf16[.]" <(ctest --test-dir "$build" -N) ||
  { echo "ci-amx-emulated: no cpu.amxbf16.bf16 tests were built" >&2; exit 1; }
ctest --test-dir "$build" --output-on-failure -j2 -L amxbf16
