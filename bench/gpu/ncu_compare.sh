#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ncu of our kernels and cuDNN's on the same shapes, one profile per
# kernel launch (--clock-control none: the clocks the bench sees), for the
# questions the timings cannot answer: where the d128 forward and the
# backward lose to cuDNN while d64 wins (bench/gpu/NOTES-cuda.md, run 52).
#
#   LIB=build-h200/libflashattn.so OUT_DIR=out bench/gpu/ncu_compare.sh [shape ...]
#
# Shapes are profile_one.py's (default d64s4k d128s4k bwd128). Each
# shape writes $OUT_DIR/ncu-<shape>-{ours,cudnn}.txt (the details page).
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=${LIB:-build-h200/libflashattn.so}
out=${OUT_DIR:-ncu-out}
mkdir -p "$out"
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(d64s4k d128s4k bwd128)
sections=(SpeedOfLight MemoryWorkloadAnalysis ComputeWorkloadAnalysis
  WarpStateStats SchedulerStats LaunchStats Occupancy)
args=(--clock-control none --target-processes all)
for s in "${sections[@]}"; do args+=(--section "$s"); done
# Every launch is profiled: torch's own fills (randn) are in the logs too,
# named; the attention kernels are the long ones.
for shape in "${shapes[@]}"; do
  for who in ours cudnn; do
    extra=()
    [ $who = cudnn ] && extra=(--cudnn)
    log=$out/ncu-$shape-$who
    ncu "${args[@]}" \
      python3 bench/gpu/profile_one.py --lib "$lib" "${extra[@]}" "$shape" \
      >"$log.txt" 2>&1
    echo "$shape $who: rc $? $(grep -c '^  [a-zA-Z_].*(' "$log.txt") kernels"
  done
done
