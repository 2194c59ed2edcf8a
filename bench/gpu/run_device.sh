#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One call on the lent GPU machine: build there (16 cores; sm_90a device
# code only, cpu.scalar.f32 as the CPU reference: the image has no SLEEF), then
# the steps named in STEPS (default: all of them), each under its own time
# limit, logs under OUT_DIR (default $OUT, else build-dev/run). The last
# lines are a short summary.
#
#   STEPS="build ctest sanitizer bench" bench/gpu/run_device.sh
# Steps:
#   build      configure and build build-dev (BUILD_JOBS, default nproc)
#   ctest      ctest -L cuda (module, cuda.gpu with the capture and
#              bad-array cases, leak, the float64-oracle grid through
#              dispatch and through every kernel bound by name)
#   sanitizer  compute-sanitizer memcheck and racecheck (ctest -L
#              gpu-sanitizer: cuda.gpu --quick, xval fwd.paged), in
#              parallel, each within SANITIZER_LIMIT s (default 540): run
#              it as a call of its own
#   large      ctest -L gpu-large (16 GiB KV cache, 64-bit offsets)
#   bench      bench_sdpa.py: forward d64/d128 (quick), backward, decode
#              (BENCH_ARGS: other bench_sdpa.py arguments)
#   tests=RE   ctest -R RE only (iterating on a failure)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-dev}
out=${OUT_DIR:-${OUT:-$build/run}}
steps=${STEPS:-build ctest sanitizer bench}
mkdir -p "$out"
summary=()
t0=$SECONDS
note() { summary+=("$*"); echo "--- $* ($((SECONDS - t0)) s)"; }
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem \
  --format=csv,noheader 2>&1 | head -2

if has build; then
  export PATH=/usr/local/cuda/bin:$PATH
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_ENABLE_CUDA=ON \
    -DFA_CUDA_ARCHITECTURES=90a -DFA_ENABLE_SIMD=OFF -DFA_BUILD_TESTS=ON \
    -DFA_BUILD_BENCH=OFF >"$out/build.log" 2>&1 &&
    cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" >>"$out/build.log" 2>&1
  rc=$?
  note "build: rc $rc; $(grep -cE 'warning' "$out/build.log") warnings"
  [ $rc = 0 ] || { tail -30 "$out/build.log"; exit 1; }
fi

ctest_line() { grep -hE "tests passed|No tests were found" "$@" | tail -1; }

if has ctest; then
  # -V: the passing tests' output too, where xval prints its case counts
  # (lines prefixed "N: " by ctest).
  timeout "${CTEST_LIMIT:-330}" ctest --test-dir "$build" -L cuda -j 12 --timeout 320 \
    -V >"$out/ctest-cuda.log" 2>&1
  note "ctest -L cuda: rc $?; $(ctest_line "$out/ctest-cuda.log")"
  cases=$(sed -E 's/^[0-9]+: //' "$out/ctest-cuda.log" |
    grep -hoE "^cuda[a-z0-9._]* [a-z.]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped" |
    awk '{p+=$3; f+=$5; s+=$7} END {printf "%d passed, %d failed, %d skipped", p, f, s}')
  note "oracle grid cases (dispatch and every kernel by name): $cases"
  grep -hE "\(Failed\)|\(Timeout\)|\*\*\*Exception" "$out/ctest-cuda.log" | head -20
fi

for s in $steps; do
  case $s in tests=*)
    re=${s#tests=}
    timeout 400 ctest --test-dir "$build" -R "$re" -j 10 --timeout 380 -V \
      >"$out/ctest-some.log" 2>&1
    note "ctest -R '$re': rc $?; $(ctest_line "$out/ctest-some.log")"
    grep -hE "FAIL|\(Failed\)|\(Timeout\)" "$out/ctest-some.log" | head -30 ;;
  esac
done

if has sanitizer; then
  # The three sanitizer runs in parallel, each under its own limit: the
  # racecheck of the sm90 cases alone takes minutes (every shared-memory
  # access and mbarrier poll is instrumented).
  lim=${SANITIZER_LIMIT:-540}
  timeout $((lim + 20)) ctest --test-dir "$build" -L gpu-sanitizer -j 3 \
    --timeout "$lim" --output-on-failure >"$out/sanitizer.log" 2>&1
  note "ctest -L gpu-sanitizer: rc $?; $(ctest_line "$out/sanitizer.log"); $(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
fi

if has large; then
  timeout 400 ctest --test-dir "$build" -L gpu-large -V --timeout 380 \
    >"$out/large.log" 2>&1
  note "ctest -L gpu-large: rc $?; $(ctest_line "$out/large.log")"
fi

if has bench; then
  export PYTHONUNBUFFERED=1
  # BENCH_ARGS replaces the default selection of suites and shapes.
  read -r -a bargs <<<"${BENCH_ARGS:---dims 64,128 --quick --sm80 --matmul --bwd --decode}"
  timeout "${BENCH_LIMIT:-330}" python3 bench/gpu/bench_sdpa.py \
    --lib "$build/libflashattn.so" "${bargs[@]}" \
    --json "$out/bench.json" >"$out/bench.log" 2>&1
  note "bench: rc $?"
  sed -n '/^forward .* TFLOPS/,$p' "$out/bench.log" | head -60
  tail -5 "$out/bench.log"
fi

echo
echo "=== summary ($((SECONDS - t0)) s)"
for line in "${summary[@]}"; do echo "$line"; done
