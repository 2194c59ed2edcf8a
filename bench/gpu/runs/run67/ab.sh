#!/bin/bash
# run 67: the d128 wide tile (block_n 176) and the FP8 P scale in the exponent,
# old (main's module) against new, then the revalidation.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
tar -C . -xJf build-carry/r67/pkg.tar.xz
export BUILD_DIR=build-h200 OUT_DIR=/tmp/logs
. bench/gpu/carried_env.sh
S=$OUT/summary.txt
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a $S; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a $S
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())' | tee -a $S
# 1. correctness of what changed, bound by name
ctest --test-dir build-h200 -R 'xval\.cuda\.sm90\.(bf16|f16)\.d128|xval\.cuda\.sm90\.e4m3|xval\.cuda\.sm90\.e5m2' \
  -j 4 --timeout 300 --output-on-failure > $OUT/ctest-changed.log 2>&1
log "changed: $(grep -E 'tests passed' $OUT/ctest-changed.log)"
grep -hE 'passed|failed' $OUT/ctest-changed.log | grep -E '^[a-z].*(passed|failed)' | tail -4 | tee -a $S
# 2. bench old / new alternated
export PYTHONUNBUFFERED=1
B=$OUT/bench.log
for r in 1; do
  for v in old new; do
    lib=old/libflashattn.so; [ $v = new ] && lib=build-h200/libflashattn.so
    echo "=== bf16 $v run $r" >> $B
    timeout 150 python3 bench/gpu/bench_sdpa.py --lib $lib --dims 128 \
      --json /tmp/logs/bf16-$v-$r.json 2>&1 | grep -E '^d128|error|Error' >> $B
    [ $r = 2 ] && { log "bench $v $r done"; continue; }
    echo "=== fp8 $v run $r" >> $B
    timeout 100 python3 bench/gpu/bench_sdpa.py --lib $lib --dtype e4m3 \
      $([ $r = 1 ] && [ $v = old ] && echo --matmul) \
      --json /tmp/logs/fp8-$v-$r.json 2>&1 | grep -vE '^\s*$' | tail -8 >> $B
    log "bench $v $r done"
  done
done
[ $((SECONDS - t0)) -gt ${TLIM:-420} ] && { log "out of time: no ctest -L cuda"; tar -C /tmp -czf $OUT/logs.tar.gz logs; exit 0; }
# 3. revalidation: ctest -L cuda, sanitizers on the wide kernel
ctest --test-dir build-h200 -L cuda -j 4 --timeout 300 > $OUT/ctest-cuda.log 2>&1
log "ctest -L cuda: $(grep -E 'tests passed' $OUT/ctest-cuda.log)"
grep -E '\(Failed\)|\(Timeout\)|Exception' $OUT/ctest-cuda.log | head | tee -a $S
X=build-h200/tests/xval/test_xval
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $X --backend cuda.sm90.bf16.d128 \
    --group fwd.tensor-core > /tmp/logs/san-$tool.log 2>&1
  log "$tool fwd.tensor-core bf16 d128: rc $? $(grep -hE 'SUMMARY' /tmp/logs/san-$tool.log)"
done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $X --backend cuda.sm90.e4m3.d128 \
  --group fwd.fp8 > /tmp/logs/san-fp8.log 2>&1
log "memcheck fwd.fp8 e4m3: rc $? $(grep -hE 'SUMMARY' /tmp/logs/san-fp8.log)"
tar -C /tmp -czf $OUT/logs.tar.gz logs
log done
