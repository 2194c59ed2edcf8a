#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The FP8 forward on the lent H200, in as few device minutes as it takes:
# build only what FP8 needs (sm_90a, head dim 128, no CPU SIMD), check the
# sm90 FP8 kernel's registers, spills and SASS, run the FP8 xval groups on
# every GPU kernel that takes FP8 (by name, and through dispatch), then time
# the e4m3 forward at s = 4k, 8k, 16k beside the FP8 matmul ceiling.
#
#   STEPS="build sass xval bench" bench/gpu/run_fp8.sh     (the default)
# HEAD_DIMS (default 128) is the build's FA_CUDA_HEAD_DIMS (the sm80 FP8
# kernels exist for 64;96;128;192;256); ARCHS (default 90a) its
# FA_CUDA_ARCHITECTURES: ARCHS=80 runs the sm80 kernels' sm_80 path (the
# integer e4m3 decode) on an sm_90 device through the PTX JIT, without the
# sm90 kernels (their steps then SKIP); FP8_BOUND, comma-separated kernel
# names, adds bench_sdpa.py --fp8-bound (those kernels timed by name on the
# same shapes, e.g. cuda.sm80.e4m3.d128,cuda.generic,cuda.sm80.bf16.d128).
# Each step fits one device call (< 10 min); logs under OUT_DIR (default
# $OUT, else build-fp8/run). The last lines are a short summary. The sm90
# FP8 kernels (cuda.sm90.e4m3.d128, cuda.sm90.e5m2.d128) are in
# backends/cuda/sm90/ (sm90_fp8_fwd.cuh, host glue sm90_fp8_host.h); where
# they are not compiled in, their steps SKIP (77).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-fp8}
out=${OUT_DIR:-${OUT:-$build/run}}
steps=${STEPS:-build sass xval bench}
mkdir -p "$out"
summary=()
t0=$SECONDS
note() { summary+=("$*"); echo "--- $* ($((SECONDS - t0)) s)"; }
has() { [[ " $steps " == *" $1 "* ]]; }
export PATH=/usr/local/cuda/bin:$PATH

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem \
  --format=csv,noheader 2>&1 | head -2

if has build; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_ENABLE_CUDA=ON \
    "-DFA_CUDA_ARCHITECTURES=${ARCHS:-90a}" "-DFA_CUDA_HEAD_DIMS=${HEAD_DIMS:-128}" \
    -DFA_CUDA_PTXAS_VERBOSE=ON -DFA_ENABLE_SIMD=OFF -DFA_BUILD_TESTS=ON \
    -DFA_BUILD_BENCH=OFF >"$out/build.log" 2>&1 &&
    cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" --target flashattn \
      flashattn-cuda test_xval test_api_kernels test_gpu_admission \
      >>"$out/build.log" 2>&1
  rc=$?
  note "build: rc $rc; $(grep -c 'warning' "$out/build.log") warnings"
  [ $rc = 0 ] || { tail -30 "$out/build.log"; exit 1; }
fi

if has sass; then
  # ptxas -v of the FP8 kernels (registers, spills), then the SASS: the
  # FP8 warpgroup MMAs (QGMMA in SASS; HGMMA is the 16-bit form, IGMMA the
  # integer one) with E4M3/E5M2 operands, and no local memory (LDL/STL)
  # anywhere in them.
  grep -A3 "fa_sm90_fp8" "$out/build.log" | grep -E "Compiling|registers|spill" |
    sed 's/ptxas info *: //' | tee "$out/ptxas-fp8.txt"
  for t in e4m3 e5m2; do
    obj=$(find "$build" -name "sm90_fp8_fwd_${t}_d128.cu.o" | head -1)
    if command -v cuobjdump >/dev/null && [ -n "$obj" ]; then
      cuobjdump --dump-sass "$obj" >"$out/sass-$t.txt" 2>&1
      note "SASS $t: $(grep -cE '[HQ]GMMA.*E(4M3|5M2)' "$out/sass-$t.txt") FP8 GMMA of $(grep -cE '[HQI]GMMA' "$out/sass-$t.txt") GMMA, $(grep -cE '\b(LDL|STL)\b' "$out/sass-$t.txt") LDL/STL"
      grep -oE '[HQI]GMMA[.A-Z0-9]*' "$out/sass-$t.txt" | sort | uniq -c | head -4
    else
      note "SASS $t: no cuobjdump or object"
    fi
  done
fi

if has xval; then
  x="$build/tests/xval/test_xval"
  # The sm80 FP8 kernels compiled in (the head dims of HEAD_DIMS).
  sm80=$("$x" --list-kernels | awk '$1 == "kernel" && $2 ~ /^cuda[.]sm80[.]e(4m3|5m2)[.]/ {print $2}')
  for k in cuda.generic cuda.sm90.e4m3.d128 cuda.sm90.e5m2.d128 $sm80 cuda; do
    for g in fwd.fp8 fwd.fp8-decode; do
      timeout 240 "$x" --backend "$k" --group "$g" >"$out/xval-$k-$g.log" 2>&1
      note "xval $k $g: rc $? ($(grep -hoE '[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$out/xval-$k-$g.log" | tail -1))"
      grep -hE 'FAIL' "$out/xval-$k-$g.log" | head -6
    done
  done
  # The sm90 FP8 kernel over the whole grid (it skips what it declines),
  # and the generic forward's new descale and output-dtype cases.
  for k in cuda.sm90.e4m3.d128 cuda.sm90.e5m2.d128; do
    timeout 200 "$x" --backend $k --group all >"$out/xval-$k-all.log" 2>&1
    note "xval $k all: rc $? ($(grep -hoE '[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$out/xval-$k-all.log" | tail -1))"
    grep -hE 'FAIL' "$out/xval-$k-all.log" | head -6
  done
  for g in fwd.descale fwd.outdtype; do
    timeout 200 "$x" --backend cuda.generic --group "$g" >"$out/xval-generic-$g.log" 2>&1
    note "xval cuda.generic $g: rc $?"
  done
  timeout 120 "$build/tests/api/test_api_kernels" gpu >"$out/api-kernels.log" 2>&1
  note "api.kernels.gpu: rc $?"
  "$build/tests/gpu/test_gpu_admission" | tail -1
fi

if has bench; then
  export PYTHONUNBUFFERED=1
  timeout "${BENCH_LIMIT:-420}" python3 bench/gpu/bench_sdpa.py \
    --lib "$build/libflashattn.so" --dtype e4m3 --matmul \
    --fp8-seqs "${FP8_SEQS:-4096,8192,16384}" --fp8-bound "${FP8_BOUND:-}" \
    --json "$out/bench-fp8.json" >"$out/bench-fp8.log" 2>&1
  note "bench e4m3: rc $?"
  grep -E "^matmul|^e4m3|^  bound" "$out/bench-fp8.log"
  sed -n '/^forward e4m3/,$p' "$out/bench-fp8.log" | head -20
fi

echo
echo "=== summary ($((SECONDS - t0)) s)"
for line in "${summary[@]}"; do echo "$line"; done
