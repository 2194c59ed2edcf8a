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
# shape writes $OUT_DIR/ncu-<shape>-{ours,cudnn}[-SET].txt. SET picks what
# is collected:
#   sections  (default) the details page of the sections below, every launch
#   opcodes   executed SASS instructions per opcode, attention kernels only
#   traffic   L2 sectors by source unit and operation, L1 global and shared
#             instructions, attention kernels only
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=${LIB:-build-h200/libflashattn.so}
out=${OUT_DIR:-ncu-out}
mkdir -p "$out"
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(d64s4k d128s4k bwd128)
sections=(SpeedOfLight MemoryWorkloadAnalysis ComputeWorkloadAnalysis
  WarpStateStats SchedulerStats LaunchStats Occupancy)
set_=${SET:-sections}
args=(--clock-control none --target-processes all)
attention='regex:fwd_kernel|bwd_kernel|fprop|bprop'
case $set_ in
sections) for s in "${sections[@]}"; do args+=(--section "$s"); done ;;
opcodes) args+=(-k "$attention" --metrics sass__inst_executed_per_opcode
  --print-metric-instances details) ;;
traffic) args+=(-k "$attention" --metrics "$(printf %s, \
  lts__t_sectors.sum lts__t_sectors_srcunit_tex.sum \
  lts__t_sectors_srcunit_tex_op_read.sum lts__t_sectors_srcunit_tex_op_write.sum \
  lts__t_sectors_srcunit_tex_op_red.sum lts__t_sectors_srcunit_tex_op_atom.sum \
  l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum \
  l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum \
  l1tex__t_sectors_pipe_lsu_mem_global_op_red.sum \
  smsp__inst_executed.sum smsp__inst_executed_op_shared_ld.sum \
  smsp__inst_executed_op_shared_st.sum smsp__inst_executed_op_global_ld.sum \
  smsp__inst_executed_op_global_st.sum smsp__inst_executed_op_global_red.sum \
  gpu__time_duration.sum | sed 's/,$//')") ;;
*) echo "ncu_compare: SET must be sections, opcodes or traffic" >&2; exit 2 ;;
esac
# With SET=sections every launch is profiled: torch's own fills (randn)
# are in the logs too, named; the attention kernels are the long ones.
for shape in "${shapes[@]}"; do
  for who in ours cudnn; do
    extra=()
    [ $who = cudnn ] && extra=(--cudnn)
    log=$out/ncu-$shape-$who
    [ "$set_" = sections ] || log=$log-$set_
    ncu "${args[@]}" \
      python3 bench/gpu/profile_one.py --lib "$lib" "${extra[@]}" "$shape" \
      >"$log.txt" 2>&1
    echo "$shape $who: rc $? $(grep -c '^  [a-zA-Z_].*(' "$log.txt") kernels"
  done
done
