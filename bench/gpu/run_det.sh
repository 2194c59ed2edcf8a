#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One device call from a carried build (bench/gpu/carried_env.sh;
# BUILD_DIR, default build-carry/h200): the steps in STEPS, logs under
# OUT_DIR (default $OUT). Written for the deterministic backward (run 46):
#   ctest     ctest -L cuda (every GPU kernel by name, the oracle grid,
#             cuda.gpu.deterministic)
#   bwd       bench_sdpa.py --bwd --quick, atomic then deterministic dQ
#             (FA_CUDA_DETERMINISTIC is read once per process), REPS times
#   memcheck  compute-sanitizer memcheck of test_cuda_gpu --deterministic
#   fp8       the sm80 FP8 forward timed by name beside the sm90 FP8 and
#             bf16 kernels and the FP8 matmul ceiling (issue 20)
set -uo pipefail
cd "$(dirname "$0")/../.."
export BUILD_DIR=${BUILD_DIR:-build-carry/h200} RT_DIR=${RT_DIR:-.rt}
export OUT_DIR=${OUT_DIR:-${OUT:-/tmp/out}}
. bench/gpu/carried_env.sh
steps=${STEPS:-ctest bwd}
has() { [[ " $steps " == *" $1 "* ]]; }
t0=$SECONDS
note() { echo "--- $* ($((SECONDS - t0)) s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem \
  --format=csv,noheader
export PYTHONUNBUFFERED=1
b=(python3 bench/gpu/bench_sdpa.py --lib "$build/libflashattn.so")
if has ctest; then
  timeout "${CTEST_LIMIT:-300}" ctest --test-dir "$build" -L cuda -j 6 \
    --timeout 290 --output-on-failure >"$out/ctest-cuda.log" 2>&1
  note "ctest -L cuda: rc $?; $(grep -hE 'tests passed' "$out/ctest-cuda.log")"
  grep -hE '\((Failed|Timeout)\)|\*\*\*Exception' "$out/ctest-cuda.log" | head
  grep -h 'deterministic:' "$out/ctest-cuda.log" | head -40 |
    sed 's/  */ /g' >"$out/det-cases.txt"
fi
if has memcheck; then
  timeout "${MEMCHECK_LIMIT:-200}" compute-sanitizer --tool memcheck \
    --error-exitcode 9 "$build/tests/cuda/test_cuda_gpu" --deterministic \
    >"$out/memcheck-det.log" 2>&1
  note "memcheck deterministic: rc $?; $(grep -hE 'ERROR SUMMARY|checks' "$out/memcheck-det.log" | tail -2 | paste -sd' ')"
fi
if has bwd; then
  for r in $(seq "${REPS:-1}"); do
    timeout 150 "${b[@]}" --no-forward --bwd --quick \
      --json "$out/bwd-$r.json" >"$out/bwd-$r.log" 2>&1
    note "bwd atomic $r: rc $?"
    FA_CUDA_DETERMINISTIC=1 timeout 150 "${b[@]}" --no-forward --bwd --quick \
      --json "$out/bwd-det-$r.json" >"$out/bwd-det-$r.log" 2>&1
    note "bwd deterministic $r: rc $?"
  done
  grep -h '^bwd' "$out"/bwd-*.log | sed -E 's/ +/ /g' | cut -c1-150
fi
if has fp8; then
  timeout 240 "${b[@]}" --dtype e4m3 --fp8-seqs 4096,16384 --matmul \
    --fp8-bound cuda.sm80.e4m3.d128,cuda.generic,cuda.sm80.bf16.d128 \
    --json "$out/fp8.json" >"$out/fp8.log" 2>&1
  note "fp8: rc $?"
  tail -25 "$out/fp8.log"
fi
