// SPDX-License-Identifier: MIT
// Tile configurations of the sm80 tensor-core forward kernel, as data
// (sm80_tiles.def, one commented row per head dim).
//
// The core's planner chooses B_r and B_c (core/plan.c) from the
// capabilities a backend reports. The CUDA backend reports the planning
// budget below, for which the planner's formula yields exactly the
// B_r x B_c of every row (tests/gpu/test_gpu_mirror.c checks it). The
// formula counts fp32 tiles; the kernels keep 16-bit tiles, so a row uses
// under half the budget and fits an A100's 164 KB as well as an H100/H200's
// 227 KB. For short sequences the planner shrinks B_r/B_c below a row's;
// that happens only when one block covers the whole sequence, and the
// kernel then runs its own (larger) tile over it, with the same blocks.
#include "cuda_internal.h"

const size_t fa_cuda_plan_mem_bytes = 232448; // 227 KB: sm90's opt-in smem
const int fa_cuda_plan_align = 16;            // mma m16n8k16 granularity
const int fa_cuda_plan_max_bq = 128;
const int fa_cuda_plan_max_bk = 64;

// smem: Q, then `st` stages of K and `st` of V (sm80_fwd.cuh's layout).
#define FA_TILE(d, bq, bk, w, mt, qr, pitch, st)                               \
  {d,  bq, bk, w, mt, qr, st, ((bq) + 2 * (st) * (bk)) * (pitch) * 2,          \
   "cuda.sm80.bf16.d" #d, "cuda.sm80.f16.d" #d},

#define FA_DECODE_TILE(...)
const fa_cuda_tile fa_cuda_tiles[] = {
#include "sm80_tiles.def"
};
const int fa_cuda_num_tiles =
    (int)(sizeof fa_cuda_tiles / sizeof fa_cuda_tiles[0]);
#undef FA_TILE
#undef FA_DECODE_TILE

#define FA_TILE(...)
#define FA_DECODE_TILE(d, bq, bk, w, mt, qr, pitch, st)                        \
  {d,  bq, bk, w, mt, qr, st, ((bq) + 2 * (st) * (bk)) * (pitch) * 2,          \
   "cuda.sm80.bf16.d" #d ".decode", "cuda.sm80.f16.d" #d ".decode"},
const fa_cuda_tile fa_cuda_decode_tiles[] = {
#include "sm80_tiles.def"
};
const int fa_cuda_num_decode_tiles =
    (int)(sizeof fa_cuda_decode_tiles / sizeof fa_cuda_decode_tiles[0]);
