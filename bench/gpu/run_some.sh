#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Part of the GPU check from a carried build (see run_carried.sh), for
# iterating on one kernel: the CTest tests matching TESTS (a regex; none if
# empty), then bench_sdpa.py with BENCH (its arguments; skipped if empty).
# Logs go to OUT_DIR (default $BUILD_DIR/run).
#
#   TESTS='cuda.gpu|bwd' BENCH='--no-forward --bwd --quick' bench/gpu/run_some.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/gpu/carried_env.sh
rc=0
if [ -n "${TESTS:-}" ]; then
  ctest --test-dir "$build" -R "$TESTS" -j 4 --timeout 300 \
    --output-on-failure >"$out/ctest.log" 2>&1 || rc=1
  grep -E "tests passed|\(Failed\)|\(Timeout\)|Exception" "$out/ctest.log" | head -20
fi
if [ -n "${BENCH:-}" ]; then
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 bench/gpu/bench_sdpa.py \
    --lib "$build/libflashattn.so" $BENCH --json "$out/bench.json" \
    2>&1 | tee "$out/bench.log" | grep -vE "^\s*$" || rc=1
fi
exit $rc
