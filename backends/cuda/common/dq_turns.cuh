// SPDX-License-Identifier: MIT
// The deterministic dQ of the tensor-core backwards (sm80 and sm90,
// FA_CUDA_DETERMINISTIC=1). A CTA owns one block of keys of one (batch, kv
// head) and adds its share of dQ = dS K into the fp32 accumulator of every
// q block its keys are seen by. fp32 addition does not associate, so the
// result is bit-reproducible only if every q block receives those adds in
// one fixed order: a counter per (batch, q head, q block) says how many key
// blocks have added so far, and a CTA waits until the count is its turn,
// adds, and passes the turn on.
//
// The order is the highest key block first, and the CTAs of a head are
// numbered so that blockIdx ascending is key block descending
// (bwd_key_block). Why:
//  - a CTA waits only for CTAs of lower blockIdx, which the hardware
//    dispatched before it (each is resident or done), so the waits cannot
//    deadlock however many CTAs the grid has;
//  - under a causal or sliding-window mask the queries of key block jb + 1
//    begin later than jb's, so walking its q blocks upwards it reaches any
//    q block in fewer steps than jb: in the steady state the turn has
//    already come and nobody waits.
// Without a mask every key block starts at q block 0, and CTA x runs one
// step behind CTA x - 1: a skew of (key blocks - 1) steps per head, the
// cost this mode pays there (bench/gpu/NOTES-cuda.md).
#ifndef FA_CUDA_COMMON_DQ_TURNS_CUH
#define FA_CUDA_COMMON_DQ_TURNS_CUH

#include <stdint.h>

#include "bwd_turns.h"
#include "flat_problem.h"
#include "gpu_params.h"

namespace fa_cuda {

/* The key block of CTA x of a head's nkb: in order, or (deterministic) the
   last first. */
__device__ __forceinline__ int bwd_key_block(int x, int nkb, bool turns) {
  return turns ? nkb - 1 - x : x;
}

/* The counter of q block r0 (of the q head h, sequence b): one per
   FA_GPU_TURN_ROWS rows, which divide every kernel's q block (32 or 64
   rows at sm80, 64 or 128 at sm90), so that one layout serves both. */
__device__ __forceinline__ int *dq_turn_counter(const fa_gpu_params &p, int b,
                                                int h, int r0) {
  const int64_t per_head =
      (p.prob.seqlen_q + FA_GPU_TURN_ROWS - 1) / FA_GPU_TURN_ROWS;
  return p.dq_turns + ((int64_t)b * p.prob.heads_q + h) * per_head +
         r0 / FA_GPU_TURN_ROWS;
}

/* The first look at a q block's counter (lane 0 of each warp; the other
   lanes get 0), issued before the dQ product is waited for, so that its
   latency hides under the tensor cores' work. */
__device__ __forceinline__ int dq_turn_peek(const int *counter) {
  int v = 0;
  if ((threadIdx.x & 31) == 0)
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n"
                 : "=r"(v)
                 : "l"(counter)
                 : "memory");
  return v;
}

/* Waits until `turn` key blocks have added to the q block of `counter`
   (`seen`: dq_turn_peek's value), one thread polling (acquire): the sm90
   backward's thread that issues the copy engine's adds. */
__device__ __forceinline__ void dq_wait_turn_one(const int *counter, int turn,
                                                 int seen) {
  while (seen < turn) {
    __nanosleep(32);
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n"
                 : "=r"(seen)
                 : "l"(counter)
                 : "memory");
  }
}

/* The same for a warp whose lanes all add (sm80): lane 0 polls, then
   releases its warp. */
__device__ __forceinline__ void dq_wait_turn(const int *counter, int turn,
                                             int seen) {
  if ((threadIdx.x & 31) == 0) dq_wait_turn_one(counter, turn, seen);
  __syncwarp();
}

/* One thread, after a CTA barrier that every thread passed after its adds
   to the q block of `counter`: the next key block's turn. The fence is
   cumulative: with the barrier, it orders the whole CTA's adds before the
   count (the pattern of a grid-wide barrier). The kernels pass a turn at
   the first barrier of their next step, not right after the adds: by then
   the reductions have long reached L2 and the fence costs little, while
   the next key block, whose turn it is, is still computing. */
__device__ __forceinline__ void dq_pass_turn(int *counter) {
  __threadfence();
  atomicAdd(counter, 1);
}

} // namespace fa_cuda

#endif
