// SPDX-License-Identifier: MIT
// The sm80 kernels' tile table as data (sm80_tiles.def: one commented row
// per head dim) and the plans it gives. Plain C (no CUDA runtime), so
// tests/gpu checks it on the host.
//
// The sm80 kernels' geometry is the core's (fa_plan_compute): q blocks of
// (row, head) lanes with GQA packing, kv blocks, kv splits when the work
// items would leave SMs idle. Their plan is the core's with the tile's
// blocks as the largest (max_block_q / max_block_k) and no memory budget:
// the tile table, measured per row, is what bounds B_r and B_c. The core
// shrinks them only where one block covers the whole sequence; the kernel
// then runs its own tile over that block, so the plan names the tile's
// B_r and B_c.
#include <stdint.h>

#include "sm80_tiles.h"

// smem: Q, then `st` stages of K and `st` of V (sm80_fwd.cuh's layout);
// FP8 inputs: and the raw blocks where the codes are staged in smem.
#define FA_TILE(d, bq, bk, w, mt, qr, pitch, st)                               \
  {d,                                                                          \
   bq,                                                                         \
   bk,                                                                         \
   w,                                                                          \
   mt,                                                                         \
   qr,                                                                         \
   st,                                                                         \
   ((bq) + 2 * (st) * (bk)) * (pitch)*2,                                       \
   ((bq) + 2 * (st) * (bk)) * (pitch)*2 +                                      \
       FA_SM80_FP8_STAGE_BYTES(d, bk, w, mt, qr),                              \
   "cuda.sm80.bf16.d" #d,                                                      \
   "cuda.sm80.f16.d" #d},

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
  {d,                                                                          \
   bq,                                                                         \
   bk,                                                                         \
   w,                                                                          \
   mt,                                                                         \
   qr,                                                                         \
   st,                                                                         \
   ((bq) + 2 * (st) * (bk)) * (pitch)*2,                                       \
   ((bq) + 2 * (st) * (bk)) * (pitch)*2 +                                      \
       FA_SM80_FP8_STAGE_BYTES(d, bk, w, mt, qr),                              \
   "cuda.sm80.bf16.d" #d ".decode",                                            \
   "cuda.sm80.f16.d" #d ".decode"},
const fa_cuda_tile fa_cuda_decode_tiles[] = {
#include "sm80_tiles.def"
};
const int fa_cuda_num_decode_tiles =
    (int)(sizeof fa_cuda_decode_tiles / sizeof fa_cuda_decode_tiles[0]);
#undef FA_TILE
#undef FA_DECODE_TILE

const fa_cuda_tile *fa_cuda_tile_of(int decode, int head_dim) {
  const fa_cuda_tile *rows = decode ? fa_cuda_decode_tiles : fa_cuda_tiles;
  int n = decode ? fa_cuda_num_decode_tiles : fa_cuda_num_tiles;
  for (int i = 0; i < n; i++)
    if (rows[i].head_dim == head_dim) return &rows[i];
  return 0;
}

void fa_cuda_sm80_plan(const fa_problem *p, const fa_cuda_tile *t, int num_sms,
                       fa_plan_data *out) {
  fa_caps caps;
  fa_cuda_caps(num_sms, t->block_q, t->block_k, 1, &caps);
  fa_plan_compute(p, &caps, out);
  // Smaller blocks only where one block covers the sequence (above): the
  // counts stay those of the tile's blocks.
  out->block_q = t->block_q;
  out->block_k = t->block_k;
}
