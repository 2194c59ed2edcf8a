#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One command for a GPU machine: build the CUDA module and the tests, run
# `ctest -L cuda` (module checks, GPU-vs-CPU tests, the float64-oracle grid
# through dispatch, xval.cuda.*, and through every kernel bound by name,
# xval.cuda.<kernel>.all), compute-sanitizer memcheck/racecheck on a subset
# (ctest -L gpu-sanitizer), then the benchmark against PyTorch SDPA
# (FlashAttention-2 and cuDNN) and decode; a short table comes last.
# --large adds `ctest -L gpu-large` (cuda.large: 64-bit offsets over a
# 16 GiB KV cache; needs 17 GiB free on the device, 40 GiB of host memory).
#
#   scripts/gpu-check.sh [--quick] [--no-build] [--no-sanitizer]
#                        [--no-bench] [--no-tests] [--large]
# Environment: BUILD_DIR (default build-cuda), OUT_DIR (logs and JSON;
# default $BUILD_DIR/gpu-check), JOBS (default: all cores), BENCH_ARGS
# (more options for bench/gpu/bench_sdpa.py).
set -uo pipefail
cd "$(dirname "$0")/.."

build=${BUILD_DIR:-build-cuda}
out=${OUT_DIR:-$build/gpu-check}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
quick=0 do_build=1 do_san=1 do_bench=1 do_tests=1 do_large=0
for arg in "$@"; do
  case $arg in
  --quick) quick=1 ;;
  --no-build) do_build=0 ;;
  --no-sanitizer) do_san=0 ;;
  --no-bench) do_bench=0 ;;
  --no-tests) do_tests=0 ;;
  --large) do_large=1 ;;
  *) echo "usage: $0 [--quick] [--no-build] [--no-sanitizer] [--no-bench] [--no-tests] [--large]" >&2
     exit 2 ;;
  esac
done
mkdir -p "$out"
status=0
summary=()
t0=$SECONDS

step() { echo; echo "=== $* ($((SECONDS - t0)) s)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv 2>&1 | tee "$out/device.txt" || true

if [ $do_build = 1 ]; then
  step "configure and build $build"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DFA_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
      >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  fi
  if ! cmake --build "$build" -j "$jobs" >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    echo "BUILD FAILED"
    exit 1
  fi
  tail -2 "$out/build.log"
fi

ctest_line() { # the "N% tests passed, ..." line of a ctest log
  grep -E "tests passed|No tests were found" "$1" | tail -1
}

if [ $do_tests = 1 ]; then
  step "ctest -L cuda"
  ctest --test-dir "$build" -L cuda -j "$jobs" -V \
    >"$out/ctest-cuda.log" 2>&1 || status=1
  grep -E "Test +#|tests passed" "$out/ctest-cuda.log" | tail -60
  skipped=$(grep -c "\*\*\*Skipped" "$out/ctest-cuda.log" || true)
  # Cases of the oracle grid: test_xval's "<backend> <group>: N passed, ..."
  cases=$(grep -hoE "cuda[a-z0-9.]* [a-z.-]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped" \
    "$out/ctest-cuda.log" | awk '{p+=$3; f+=$5; s+=$7} END {printf "%d passed, %d failed, %d skipped", p, f, s}')
  summary+=("ctest -L cuda: $(ctest_line "$out/ctest-cuda.log"); skipped $skipped")
  summary+=("xval cases on cuda and its kernels (vs the float64 oracle): $cases")
fi

if [ $do_san = 1 ]; then
  step "compute-sanitizer (ctest -L gpu-sanitizer)"
  ctest --test-dir "$build" -L gpu-sanitizer --output-on-failure \
    >"$out/ctest-sanitizer.log" 2>&1 || status=1
  grep -E "Test +#|ERROR SUMMARY|tests passed" "$out/ctest-sanitizer.log" | tail -20
  errs=$(grep -h "ERROR SUMMARY" "$out/ctest-sanitizer.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  summary+=("sanitizer: $(ctest_line "$out/ctest-sanitizer.log"); ${errs:-no summary lines}")
fi

if [ $do_large = 1 ]; then
  step "64-bit offsets on the GPU (ctest -L gpu-large)"
  ctest --test-dir "$build" -L gpu-large -V >"$out/ctest-large.log" 2>&1 ||
    status=1
  grep -E "^[0-9]+: (==|gpu|cpu|oracle|fill|upload|SKIP|FAIL)|tests passed" \
    "$out/ctest-large.log" | tail -60
  summary+=("ctest -L gpu-large: $(ctest_line "$out/ctest-large.log")")
fi

if [ $do_bench = 1 ]; then
  step "bench: flashattn vs torch SDPA (FA2, cuDNN)"
  bargs=(--lib "$build/libflashattn.so" --dims 64,128,256 --sm80 --matmul
         --bwd --decode --json "$out/bench.json")
  [ $quick = 1 ] && bargs+=(--quick)
  # BENCH_ARGS: more bench_sdpa.py options (e.g. "--dims 64,128,256 --sm80
  # --matmul": the sm90 comparison with its sm80 column and the ceiling).
  read -r -a extra <<<"${BENCH_ARGS:-}"
  bargs+=("${extra[@]}")
  PYTHONUNBUFFERED=1 python3 bench/gpu/bench_sdpa.py "${bargs[@]}" \
    2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

echo
echo "=== summary ($((SECONDS - t0)) s; logs in $out)"
for line in "${summary[@]}"; do echo "$line"; done
if [ $do_bench = 1 ] && [ -f "$out/bench.log" ]; then
  # The bench's own tables (its last lines).
  sed -n '/^forward .* TFLOPS/,$p' "$out/bench.log"
fi
[ $status = 0 ] && echo "gpu-check: OK" || echo "gpu-check: FAILED"
exit $status
