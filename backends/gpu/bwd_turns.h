// SPDX-License-Identifier: MIT
// The order in which a tensor-core backward's key blocks add to one q
// block's dQ, as plain C (FA_HD): the rule the deterministic mode's kernels
// follow (backends/cuda/common/dq_turns.cuh says how they wait for it and
// why this order), here so that a host test checks it on any machine
// (tests/gpu/test_dq_turns.c).
#ifndef FA_GPU_BWD_TURNS_H
#define FA_GPU_BWD_TURNS_H

#include "flat_problem.h"

/* The q blocks of bq rows that the keys [col0, col0 + bk) are seen by:
   *nrb of them from row *r_first (0: none, and the key block adds to no q
   block). Keys that no query sees have an empty range: no q block then.
   (Until run 46 the kernels tested i_end > r_first instead, and the empty
   range of a key past every query was [j, j), not [sq, sq): they walked q
   blocks past the sequence, where the sm90 backward zeroed rows at a
   negative offset in shared memory, an illegal instruction on the H200.) */
static inline FA_HD void fa_gpu_bwd_q_blocks(const fa_flat_problem *f, int col0,
                                             int bq, int bk, int sq, int sk,
                                             int *r_first, int *nrb) {
  int i_begin, i_end;
  fa_flat_queries_of_keys(f, col0, bk, sq, sk, &i_begin, &i_end);
  *r_first = i_begin / bq * bq;
  *nrb = i_end > i_begin ? (i_end - *r_first + bq - 1) / bq : 0;
}

/* The turn of key block jb (of nkb) at the q block starting at row r0,
   which it adds to: how many key blocks after it add to that q block too.
   Those are a run jb + 1 .. last: both edges of a key block's query range
   move right with the block, so a later block that still starts at or
   before r0 also reaches past it, and the first one that starts after r0
   (or adds to nothing) ends the run. A binary search for its end. */
static inline FA_HD int fa_gpu_dq_turn(const fa_flat_problem *f, int jb,
                                       int nkb, int r0, int bq, int bk, int sq,
                                       int sk) {
  int lo = jb, hi = nkb - 1; // the run's last block is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    int r_first, nrb;
    fa_gpu_bwd_q_blocks(f, mid * bk, bq, bk, sq, sk, &r_first, &nrb);
    if (nrb > 0 && r_first <= r0)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo - jb;
}

#endif
