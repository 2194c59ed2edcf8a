// SPDX-License-Identifier: MIT
// The CUDA kernels' tile tables as data (sm80_tiles.def, sm90_tiles.def:
// one commented row per head dim) and the plans they give. Plain C (no
// CUDA runtime), so tests/gpu/test_gpu_mirror.c checks it on the host.
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

#include "cuda_internal.h"

// smem: Q, then `st` stages of K and `st` of V (sm80_fwd.cuh's layout).
#define FA_TILE(d, bq, bk, w, mt, qr, pitch, st)                               \
  {d,                                                                          \
   bq,                                                                         \
   bk,                                                                         \
   w,                                                                          \
   mt,                                                                         \
   qr,                                                                         \
   st,                                                                         \
   ((bq) + 2 * (st) * (bk)) * (pitch)*2,                                       \
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
   "cuda.sm80.bf16.d" #d ".decode",                                            \
   "cuda.sm80.f16.d" #d ".decode"},
const fa_cuda_tile fa_cuda_decode_tiles[] = {
#include "sm80_tiles.def"
};
const int fa_cuda_num_decode_tiles =
    (int)(sizeof fa_cuda_decode_tiles / sizeof fa_cuda_decode_tiles[0]);
#undef FA_TILE
#undef FA_DECODE_TILE

#define FA_SM90_TILE(d, bm, bn, st) {d, bm, bn, st},
const fa_cuda_sm90_tile fa_cuda_sm90_tiles[] = {
#include "sm90_tiles.def"
};
const int fa_cuda_num_sm90_tiles =
    (int)(sizeof fa_cuda_sm90_tiles / sizeof fa_cuda_sm90_tiles[0]);
#undef FA_SM90_TILE

const fa_cuda_tile *fa_cuda_tile_of(int decode, int head_dim) {
  const fa_cuda_tile *rows = decode ? fa_cuda_decode_tiles : fa_cuda_tiles;
  int n = decode ? fa_cuda_num_decode_tiles : fa_cuda_num_tiles;
  for (int i = 0; i < n; i++)
    if (rows[i].head_dim == head_dim) return &rows[i];
  return 0;
}

const fa_cuda_sm90_tile *fa_cuda_sm90_tile_of(int head_dim) {
  for (int i = 0; i < fa_cuda_num_sm90_tiles; i++)
    if (fa_cuda_sm90_tiles[i].head_dim == head_dim)
      return &fa_cuda_sm90_tiles[i];
  return 0;
}

void fa_cuda_caps(int num_sms, int block_q, int block_k, int pack_gqa,
                  fa_caps *caps) {
  // No memory budget: the blocks are the table's (see above). 16 GiB, not
  // SIZE_MAX: the planner's tile search counts in int.
  caps->fast_mem_bytes = (size_t)1 << 34;
  // Work items that keep the GPU busy: 2 per SM (the d128 main tile's
  // residency on sm90). The planner splits the keys only below that many
  // items, into at most two items per worker, rounded down: 4 per SM, which
  // is one whole wave of the decode tiles (4 resident per sm90 SM,
  // sm80_tiles.def; measured best against 1-8 per SM, NOTES-cuda run 24).
  caps->num_workers = 2 * num_sms;
  caps->tile_align = 16; // mma m16n8k16 granularity
  caps->max_block_q = block_q;
  caps->max_block_k = block_k;
  caps->max_splits = 128;
  caps->pack_gqa = pack_gqa; // the forward kernels take (row, head) lanes
  caps->max_small_lanes = 0; // a tile spans one kv head
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
