// SPDX-License-Identifier: MIT
// The validated problem and plan geometry as plain C types (no pointer to
// a host structure, no enum), for code that cannot hold an fa_problem: a
// GPU kernel takes them by value inside its launch parameters. The core
// fills them (fa_problem_flat, fa_plan_flat) and owns every rule on them:
// the accessors below call core/rules.h, the array reads are
// core/seq_rows.h. Host and device (FA_HD).
#ifndef FA_CORE_FLAT_PROBLEM_H
#define FA_CORE_FLAT_PROBLEM_H

#include <stdint.h>

#include "hd.h"
#include "rules.h"

/* A strided [batch|page, seq|slot, heads, dim] tensor; strides in
   elements. */
typedef struct fa_tensor_view {
  void *data;
  int64_t sb, ss, sh;
} fa_tensor_view;

/* fa_problem with defaults resolved (head_dim_v, scale) and causal folded
   into window_right, as numbers and device-visible pointers. */
typedef struct fa_flat_problem {
  int batch, seqlen_q, seqlen_k; // maximum lengths when varlen
  int heads_q, heads_kv, group;
  int head_dim, head_dim_v;
  float scale, softcap;
  int window_left, window_right; // -1 unbounded
  int top_left;                  // diagonal offset 0 instead of sk - sq
  int shift_fixed, shift;        // explicit positions: every sequence's
                                 // diagonal offset is `shift` (q_position -
                                 // k_position; per-sequence arrays and
                                 // offsets past int are not represented:
                                 // readers of the flat problem decline them)
  int varlen_q, varlen_k, paged;
  // Bounds that no array entry may take a reader past (core/seq_rows.h
  // clamps to them): storage rows of varlen Q and K/V (fa_problem.rows_q /
  // rows_k) and the pages of the pool.
  int64_t rows_q, rows_k;
  int num_pages;
  int dtype;     // fa_dtype of q, k, v
  int dtype_out; // fa_dtype of o
  const float *alibi_slopes, *sinks;
  const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k, *block_table;
  int max_blocks_per_seq, page_size;
} fa_flat_problem;

/* fa_plan_data's work geometry. */
typedef struct fa_flat_plan {
  int block_q, block_k;         // B_r (query lanes of a tile), B_c
  int pack_group;               // q heads per tile (GQA packing), else 1
  int block_rows;               // query rows per tile (lanes = rows x heads,
                                // head fastest)
  int num_q_blocks, num_splits; // per (batch, head unit), at max lengths
  int64_t num_work;             // batch * heads_q / pack * q blocks * splits
} fa_flat_plan;

/* fa_diag_shift of a sequence with lengths (sq, sk). */
static inline FA_HD int fa_flat_shift(const fa_flat_problem *f, int sq,
                                      int sk) {
  if (f->shift_fixed) return f->shift;
  return fa_aligned_shift(f->top_left, sq, sk);
}

/* fa_visible_keys of query row i. */
static inline FA_HD void fa_flat_visible(const fa_flat_problem *f, int i,
                                         int sq, int sk, int *lo, int *hi) {
  fa_window_keys((int64_t)i + fa_flat_shift(f, sq, sk), f->window_left,
                 f->window_right, sk, lo, hi);
}

/* The inverse of fa_visible_keys: the queries of [0, sq) that see key j
   (0 <= j < sk) are exactly [*i0, *i1), with 0 <= *i0 <= *i1 <= sq also
   when none does (a key past every query's window gives [sq, sq), not
   [j, j): the backwards size their q blocks from these edges). */
static inline FA_HD void fa_flat_queries_of_key(const fa_flat_problem *f, int j,
                                                int sq, int sk, int *i0,
                                                int *i1) {
  int64_t shift = fa_flat_shift(f, sq, sk);
  int64_t a = f->window_right < 0 ? 0 : (int64_t)j - shift - f->window_right;
  int64_t b = f->window_left < 0 ? sq : (int64_t)j - shift + f->window_left + 1;
  if (a < 0) a = 0;
  if (a > sq) a = sq;
  if (b > sq) b = sq;
  if (b < a) b = a;
  *i0 = (int)a;
  *i1 = (int)b;
}

/* Queries that see some key of [col0, min(col0 + n, sk)): both edges of a
   key's range move right with the key, so the first and last keys bound
   them; [0, 0) when col0 >= sk. (The backward's key blocks.) */
static inline FA_HD void fa_flat_queries_of_keys(const fa_flat_problem *f,
                                                 int col0, int n, int sq,
                                                 int sk, int *i0, int *i1) {
  *i0 = *i1 = 0;
  if (col0 >= sk) return;
  int a0, a1, b0, b1;
  fa_flat_queries_of_key(f, col0, sq, sk, &a0, &a1);
  fa_flat_queries_of_key(f, (col0 + n < sk ? col0 + n : sk) - 1, sq, sk, &b0,
                         &b1);
  *i0 = a0;
  *i1 = b1;
}

/* fa_score_transform; s is scale * q.k. */
static inline FA_HD float fa_flat_transform(const fa_flat_problem *f, float s,
                                            int h, int i, int j, int shift) {
  return fa_transform_score(s, f->softcap, f->alibi_slopes, h, i, j, shift);
}

/* fa_plan_kv_blocks, for `rows` query rows per block and key blocks of
   bk. */
static inline FA_HD void fa_flat_kv_blocks(const fa_flat_problem *f, int rows,
                                           int bk, int sq, int sk, int qb,
                                           int *kb_begin, int *kb_end) {
  fa_kv_block_range(qb, rows, bk, sq, sk, fa_flat_shift(f, sq, sk),
                    f->window_left, f->window_right, kb_begin, kb_end);
}

/* fa_plan_work_item. */
static inline FA_HD void fa_flat_work_item(const fa_flat_problem *f,
                                           const fa_flat_plan *g, int64_t w,
                                           int *b, int *h, int *qb,
                                           int *split) {
  fa_work_item_of(
      w, f->batch, f->heads_q, g->pack_group, g->num_q_blocks, g->num_splits,
      fa_window_grows(f->window_left, f->window_right), b, h, qb, split);
}

/* Index of row (b, h, i) in lse / delta: [batch][heads_q][seqlen_q]. */
static inline FA_HD int64_t fa_flat_row_index(const fa_flat_problem *f, int b,
                                              int h, int i) {
  return ((int64_t)b * f->heads_q + h) * f->seqlen_q + i;
}

#endif
