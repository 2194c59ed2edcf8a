#!/bin/bash
# run 69: O's rescale skipped where the warp's maxima stand (new) against
# main's module (old); the new fwd.fp8 case on the GPU kernels; pytest on
# CUDA; warp-stall sampling of d128 s1k; then ctest -L cuda.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
tar -C . -xJf build-carry/r69/pkg.tar.xz
export BUILD_DIR=build-h200 OUT_DIR=/tmp/logs
. bench/gpu/carried_env.sh
S=$OUT/summary.txt
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a $S; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
# 1. what changed, bound by name: every sm90 forward, every FP8 kernel
ctest --test-dir build-h200 -R 'xval\.cuda\.sm90\.|e4m3|e5m2|generic\.fwd' \
  -j 6 --timeout 200 --output-on-failure > /tmp/logs/ctest-changed.log 2>&1
log "changed: $(grep -E 'tests passed' /tmp/logs/ctest-changed.log)"
grep -E '\(Failed\)|\(Timeout\)' /tmp/logs/ctest-changed.log | head | tee -a $S
grep -E 'fp8.*#24|#24.*fp8' /tmp/logs/ctest-changed.log | head -3 | tee -a $S
# 2. bench old / new alternated
export PYTHONUNBUFFERED=1
B=$OUT/bench.log
for r in 1 2; do
  for v in old new; do
    lib=old/libflashattn.so; [ $v = new ] && lib=build-h200/libflashattn.so
    echo "=== bf16 $v run $r" >> $B
    LD_LIBRARY_PATH=$PWD/$(dirname $lib):$PWD/.rt:$LD_LIBRARY_PATH timeout 90 python3 bench/gpu/bench_sdpa.py \
      --lib $lib --dims 64,128 --json $OUT/bf16-$v-$r.json 2>&1 | grep -E '^d(64|128)|rror' >> $B
    echo "=== fp8 $v run $r" >> $B
    LD_LIBRARY_PATH=$PWD/$(dirname $lib):$PWD/.rt:$LD_LIBRARY_PATH timeout 60 python3 bench/gpu/bench_sdpa.py \
      --lib $lib --dtype e4m3 $([ $r = 1 ] && [ $v = old ] && echo --matmul) \
      --json $OUT/fp8-$v-$r.json 2>&1 | grep -vE '^\s*$' | tail -9 >> $B
    log "bench $v $r done"
  done
done
# 3. pytest of the Python package on CUDA tensors
ctest --test-dir build-h200 -R python.pytest --timeout 200 -V > /tmp/logs/pytest.log 2>&1
log "pytest: $(grep -E '[0-9]+ passed' /tmp/logs/pytest.log | tail -1)"
# 4. warp-stall sampling, ours (new) and cuDNN, d128 s1k full
for who in ours cudnn; do
  k=regex:fwd_kernel; extra=; [ $who = cudnn ] && { k=regex:fprop; extra=--cudnn; }
  timeout 100 ncu --clock-control none -k $k -c 1 --section WarpStateStats \
    --section SourceCounters --section SchedulerStats -f -o /tmp/logs/stall-$who \
    python3 bench/gpu/profile_one.py --lib build-h200/libflashattn.so $extra d128s1k > /tmp/logs/ncu-$who.log 2>&1
  ncu -i /tmp/logs/stall-$who.ncu-rep --page details > $OUT/stall-$who-details.txt 2>&1
  [ $who = ours ] && ncu -i /tmp/logs/stall-$who.ncu-rep --page source --csv --print-source sass \
    > $OUT/stall-ours-sass.csv 2>&1
  log "ncu $who: $(wc -l < $OUT/stall-$who-details.txt) lines"
done
[ $((SECONDS - t0)) -gt ${TLIM:-330} ] && { log "out of time: no ctest -L cuda"; tar -C /tmp -czf $OUT/logs.tar.gz logs; exit 0; }
# 5. everything else
ctest --test-dir build-h200 -L cuda -E 'xval\.cuda\.sm90\.|e4m3|e5m2|generic\.fwd' -j 4 --timeout 200 > /tmp/logs/ctest-cuda.log 2>&1
log "ctest -L cuda (rest): $(grep -E 'tests passed' /tmp/logs/ctest-cuda.log)"
grep -E '\(Failed\)|\(Timeout\)|Exception' /tmp/logs/ctest-cuda.log | head | tee -a $S
tar -C /tmp -czf $OUT/logs.tar.gz logs
log done
