// SPDX-License-Identifier: MIT
// The scalar rules of masking, score transform and work order, on plain
// numbers, for host and device (FA_HD): the core's helpers (problem.h,
// plan.c) and the flat problem's that the GPU kernels call
// (flat_problem.h) are both these functions.
#ifndef FA_CORE_RULES_H
#define FA_CORE_RULES_H

#include <math.h>
#include <stdint.h>

#include "hd.h"

/* The keys a query whose diagonal key is diag (= i + shift) sees with the
   window (window_left, window_right; < 0 = unbounded): [*lo, *hi) clipped
   to [0, sk), empty when *lo >= *hi. In 64 bits: windows near INT_MAX
   cannot overflow. */
static inline FA_HD void fa_window_keys(int64_t diag, int window_left,
                                        int window_right, int sk, int *lo,
                                        int *hi) {
  int64_t l = window_left < 0 ? 0 : diag - window_left;
  int64_t h = window_right < 0 ? sk : diag + window_right + 1;
  if (l < 0) l = 0;
  if (l > sk) l = sk;
  if (h > sk) h = sk;
  if (h < l) h = l;
  *lo = (int)l;
  *hi = (int)h;
}

/* The diagonal offset of aligned positions for a sequence with lengths
   (sq, sk): 0 when top-left aligned, else sk - sq (bottom-right). */
static inline FA_HD int fa_aligned_shift(int top_left, int sq, int sk) {
  return top_left ? 0 : sk - sq;
}

/* The score pipeline after the dot product (s = scale * q.k): softcap
   (softcap > 0), then ALiBi (slopes != NULL: slope of head h times the
   distance |i + shift - j|). */
static inline FA_HD float fa_transform_score(float s, float softcap,
                                             const float *slopes, int h, int i,
                                             int j, int64_t shift) {
  if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
  if (slopes) {
    int64_t d = (int64_t)i + shift - j;
    s -= slopes[h] * (float)(d < 0 ? -d : d);
  }
  return s;
}

/* The kv blocks (of bk keys) that q block qb (rows [qb * rows, +rows) of
   sq) must visit, with diagonal offset shift and the window: both window
   edges move right by one key per row, so the rows' keys form one interval
   from the first row's lower edge to the last row's upper edge (rows
   clipped empty lie only at the block's ends). [*kb_begin, *kb_end), empty
   when begin >= end. */
static inline FA_HD void fa_kv_block_range(int qb, int rows, int bk, int sq,
                                           int sk, int64_t shift,
                                           int window_left, int window_right,
                                           int *kb_begin, int *kb_end) {
  int r0 = qb * rows;
  int r1 = (int64_t)r0 + rows < sq ? r0 + rows : sq;
  *kb_begin = *kb_end = 0;
  if (r0 >= r1 || sk <= 0) return;
  int lo, hi_first, lo_last, hi;
  fa_window_keys((int64_t)r0 + shift, window_left, window_right, sk, &lo,
                 &hi_first);
  fa_window_keys((int64_t)r1 - 1 + shift, window_left, window_right, sk,
                 &lo_last, &hi);
  if (hi <= lo) return;
  *kb_begin = lo / bk;
  *kb_end = (int)(((int64_t)hi + bk - 1) / bk); // no overflow near INT_MAX
}

/* Split `split` of num_splits over the blocks [begin, end): contiguous,
   balanced to within one block (the first n % num_splits take one more),
   possibly empty. */
static inline FA_HD void fa_split_range(int begin, int end, int num_splits,
                                        int split, int *s_begin, int *s_end) {
  int n = end > begin ? end - begin : 0;
  int base = n / num_splits, extra = n % num_splits;
  int start = begin + split * base + (split < extra ? split : extra);
  *s_begin = start;
  *s_end = start + base + (split < extra ? 1 : 0);
}

/* Work item w as (batch, first head, q block, split) for `batch` sequences
   of heads_q heads in tiles of pack_group heads, num_q_blocks q blocks and
   num_splits splits: splits innermost, then (batch, head tile); `grows`
   (causal, or a left-unbounded window: later q blocks see more keys) hands
   the longest q blocks out first, so dynamic scheduling ends with the
   short items. */
static inline FA_HD void fa_work_item_of(int64_t w, int batch, int heads_q,
                                         int pack_group, int num_q_blocks,
                                         int num_splits, int grows, int *b,
                                         int *h, int *qb, int *split) {
  const int units = heads_q / pack_group;
  int64_t bh_count = (int64_t)batch * units;
  *split = (int)(w % num_splits);
  int64_t r = w / num_splits;
  int64_t bh = r % bh_count;
  int qi = (int)(r / bh_count);
  *qb = grows ? num_q_blocks - 1 - qi : qi;
  *h = (int)(bh % units) * pack_group;
  *b = (int)(bh / units);
}

/* Whether the window grows with the query (causal, or window_left
   unbounded with a right edge): fa_work_item_of's `grows`. */
static inline FA_HD int fa_window_grows(int window_left, int window_right) {
  return window_left < 0 && window_right >= 0;
}

#endif
