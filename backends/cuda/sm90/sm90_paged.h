// SPDX-License-Identifier: MIT
// Paged K/V in the sm90 forward: how the producer cuts a block of block_n
// keys into TMA boxes over the page pool, and which page and slot each box
// reads. Shared by the host (cuda_backend.c: admission) and the kernel
// (sm90_schedule.cuh's paged producer), so both apply one rule.
//
// The page pool [num_pages][page_size][heads_kv][d] is described to the
// copy engine as a 4-d tensor (d, page_size, heads_kv, num_pages) with
// boxes of (64 columns, box_rows, 1, 1): box_rows = min(page_size,
// block_n). A block is then block_n / box_rows boxes, each one whole page
// (pages no longer than a block) or one block_n-row slice of a page
// (longer pages). The boxes land block_n / box_rows x box_rows x 128 bytes
// apart in the 128-byte-swizzled stage, which equals one box of block_n
// rows only if every box starts on a swizzle atom (8 rows of 128 bytes):
// hence page sizes that are multiples of 8, and blocks that no page edge
// cuts inside a box. Other page sizes stay on the sm80 kernels.
#ifndef FA_CUDA_SM90_PAGED_H
#define FA_CUDA_SM90_PAGED_H

#include <stdint.h>

#include "gpu_params.h"

#if defined(__CUDACC__)
#define FA_SM90_PAGED_HD static __host__ __device__ inline
#else
#define FA_SM90_PAGED_HD static inline
#endif

/* Rows of one TMA box of a paged K/V block. */
FA_SM90_PAGED_HD int fa_sm90_paged_box_rows(int page_size, int block_n) {
  return page_size < block_n ? page_size : block_n;
}

/* Whether blocks of block_n keys are whole boxes over pages of page_size
   slots (see the header); 0 with the reason in *why otherwise. */
FA_SM90_PAGED_HD int fa_sm90_paged_geometry_ok(int page_size, int block_n,
                                               const char **why) {
  if (page_size % 8) {
    *why = "page_size is not a multiple of 8 (a TMA box must start on a "
           "128-byte swizzle atom of 8 rows)";
    return 0;
  }
  if (page_size < block_n ? block_n % page_size : page_size % block_n) {
    *why = "page_size neither divides the key block nor is a multiple of it "
           "(a page edge would cut a TMA box)";
    return 0;
  }
  return 1;
}

/* The box of a paged K/V block that starts at key key0 of sequence b (sk
   keys): its page and the slot of its first row. A box past the sequence's
   end reads no block-table entry; it and a box whose entry lies outside
   [0, num_pages) (the clamp of fa_seq_k_offset) get page = num_pages, a
   coordinate outside the tensor, which the copy engine fills with zeros
   without reading memory. */
typedef struct fa_sm90_paged_box {
  int page, slot;
} fa_sm90_paged_box;

FA_SM90_PAGED_HD fa_sm90_paged_box fa_sm90_paged_box_of(const fa_gpu_params *p,
                                                        int b, int sk,
                                                        int key0) {
  fa_sm90_paged_box r = {p->prob.num_pages, 0};
  if (key0 >= sk) return r;
  const int64_t e =
      p->prob.block_table[(int64_t)b * p->prob.max_blocks_per_seq +
                          key0 / p->prob.page_size];
  if (e >= 0 && e < p->prob.num_pages) {
    r.page = (int)e;
    r.slot = key0 % p->prob.page_size;
  }
  return r;
}

#endif
