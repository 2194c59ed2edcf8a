// SPDX-License-Identifier: MIT
// The planner's inputs of the CUDA kernels whose geometry is the core's
// (the sm80 tiles, cuda.generic). Plain C, so tests/gpu checks the plans
// they give on the host.
#include "cuda_internal.h"

void fa_cuda_caps(int num_sms, int block_q, int block_k, int pack_gqa,
                  fa_caps *caps) {
  // No memory budget: the blocks are the tile table's (sm80_tiles.c says
  // why). 16 GiB, not SIZE_MAX: the planner's tile search counts in int.
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
