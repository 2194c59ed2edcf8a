// SPDX-License-Identifier: MIT
// The tiling plan: plain data computed from a problem and a backend's
// capabilities, testable without any backend. Backends read it; they do not
// re-decide tile sizes, block skipping or the number of kv splits.
#ifndef FA_CORE_PLAN_H
#define FA_CORE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "problem.h"

/* What a backend tells the planner about its hardware. */
typedef struct fa_caps {
  size_t fast_mem_bytes; // per worker: L2 per core, shared memory per SM
  int num_workers;       // threads or SMs that run work items at once
  int tile_align;        // block sizes are multiples of this (vector, mma)
  int max_block_q;       // largest B_r the kernel handles
  int max_block_k;       // largest B_c the kernel handles
  int max_splits;        // largest kv split count (1: no split-KV)
  int pack_gqa;          // 1: the kernel can put the q heads that share a kv
                         // head into one tile (forward only)
  int max_small_lanes;   // >0: tiles of at most this many query lanes may
                         // hold every head of a sequence (several kv heads:
                         // the kernel streams K/V rows for them)
} fa_caps;

typedef struct fa_plan_data {
  int block_q, block_k;             // B_r (query lanes of a tile), B_c
  int pack_group;                   // q heads per tile (GQA packing), else 1
  int block_rows;                   // query rows per tile: block_q / pack_group
  int kv_heads_per_tile;            // kv heads a tile spans (> 1: all heads)
  int head_dim_pad, head_dim_v_pad; // dims rounded up to tile_align
  int num_q_blocks, num_k_blocks;   // per (batch, head) at the max lengths
  int num_splits;                   // kv splits per q block (split-KV)
  int64_t num_work;                 // work items: batch * (heads_q /
                                    // pack_group) * q_blocks * splits
  int64_t blocks_total;             // (q block, k block) pairs without skipping
  int64_t blocks_visited; // pairs visited after causal/window skipping
                          // (= blocks_total past 2^20 q blocks)
                          // (at the max lengths; varlen varies)
  size_t workspace_bytes; // scratch the kernel uses per call (the
                          // context's workspace grows to it once)
} fa_plan_data;

/* Fill *out for problem p on hardware caps. Never fails. */
void fa_plan_compute(const fa_problem *p, const fa_caps *caps,
                     fa_plan_data *out);

/* The kv blocks q block qb of a sequence with lengths (sq, sk) and diagonal
   offset shift (fa_diag_shift) must visit: [*kb_begin, *kb_end); empty when
   begin >= end. Blocks wholly outside every row's window are skipped. */
void fa_plan_kv_blocks(const fa_problem *p, const fa_plan_data *plan,
                       int64_t shift, int sq, int sk, int qb, int *kb_begin,
                       int *kb_end);

/* The diagonal offset a plan's counts assume: the problem's at the maximum
   lengths, per-sequence position arrays left out (they may be device
   memory). */
int64_t fa_plan_shift(const fa_problem *p);

/* Split `split` of num_splits over the blocks [begin, end): contiguous,
   balanced to within one block, possibly empty. */
void fa_plan_split_range(int begin, int end, int num_splits, int split,
                         int *s_begin, int *s_end);

/* Work item w (0 <= w < num_work) as (batch, head, q block, split); with
   GQA packing, head is the first of the pack_group heads of the item. The
   order puts splits innermost and, for causal problems, q blocks longest
   first, so dynamic scheduling ends with the short items. */
void fa_plan_work_item(const fa_problem *p, const fa_plan_data *plan, int64_t w,
                       int *b, int *h, int *qb, int *split);

/* The plan's work geometry as a GPU kernel reads it (flat_problem.h). */
static inline fa_flat_plan fa_plan_flat(const fa_plan_data *d) {
  fa_flat_plan g = {d->block_q,    d->block_k,      d->pack_group,
                    d->block_rows, d->num_q_blocks, d->num_splits,
                    d->num_work};
  return g;
}

/* Human-readable one-line summary, snprintf-style. */
size_t fa_plan_data_describe(const fa_plan_data *plan, char *buf, size_t len);

#endif
