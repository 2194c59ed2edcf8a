// SPDX-License-Identifier: MIT
// The problem as a GPU kernel reads it from fa_gpu_params: the device
// arrays (cu_seqlens, seqused_k, block_table), read only here and clamped,
// and the params-shaped calls of the core's rules. The rules themselves --
// the visible-key window, the score transform, the kv block ranges, the
// split ranges and work order (core/rules.h) and the online softmax's step,
// merge and finalisation (core/softmax.h) -- are the core's functions,
// compiled for the device (FA_HD), not copies. Every GPU kernel of the CUDA
// and HIP modules uses these. The header also compiles as plain C, and
// tests/gpu/test_gpu_mirror.c checks the clamps on wild arrays and the
// params-shaped calls against the core's on problems.
#ifndef FA_GPU_SEMANTICS_H
#define FA_GPU_SEMANTICS_H

#include <math.h>
#include <stdint.h>

#include "gpu_params.h"
#include "rules.h"   // windows, transform, work order (FA_HD)
#include "softmax.h" // the online softmax: step, merge, finalize (FA_HD)

#if defined(__CUDACC__) || defined(__HIP__)
#define FA_GPU_HD                                                              \
  static __host__ __device__ inline __attribute__((always_inline))
#else
#define FA_GPU_HD static inline
#endif

/* The device arrays (cu_seqlens, seqused_k, block_table) are not checked
   before a launch (only in checked mode, by the core): the helpers below
   are the one place where every GPU kernel reads them, and they clamp what
   they read so that no entry takes a kernel outside the tensors or the page
   pool. Row starts lie in [0, rows], a sequence's rows end by rows and
   number at most seqlen_q / seqlen_k, seqused_k lies in [0, the sequence's
   key rows], and a block-table entry outside [0, num_pages) gives offset
   -1, which every caller reads as a row of zeros (and never writes). For
   valid arrays every clamp is the identity: the core's fa_seq_len_q/k and
   fa_q_offset/fa_k_offset. */
FA_GPU_HD int64_t fa_gpu_clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* First storage row of sequence b of varlen Q (0 when dense). */
FA_GPU_HD int64_t fa_gpu_start_q(const fa_gpu_params *p, int b) {
  return p->varlen_q ? fa_gpu_clamp64(p->cu_seqlens_q[b], 0, p->rows_q) : 0;
}

/* First storage row of sequence b of varlen K/V (0 when dense or paged). */
FA_GPU_HD int64_t fa_gpu_start_k(const fa_gpu_params *p, int b) {
  return p->varlen_k ? fa_gpu_clamp64(p->cu_seqlens_k[b], 0, p->rows_k) : 0;
}

/* fa_seq_len_q */
FA_GPU_HD int fa_gpu_len_q(const fa_gpu_params *p, int b) {
  if (!p->varlen_q) return p->seqlen_q;
  const int64_t s = fa_gpu_start_q(p, b);
  const int64_t e = fa_gpu_clamp64(p->cu_seqlens_q[b + 1], s, p->rows_q);
  return (int)(e - s < p->seqlen_q ? e - s : p->seqlen_q);
}

/* Rows of K/V storage that sequence b owns (dense or varlen; not paged). */
FA_GPU_HD int fa_gpu_storage_k(const fa_gpu_params *p, int b) {
  if (!p->varlen_k) return p->seqlen_k;
  const int64_t s = fa_gpu_start_k(p, b);
  const int64_t e = fa_gpu_clamp64(p->cu_seqlens_k[b + 1], s, p->rows_k);
  return (int)(e - s < p->seqlen_k ? e - s : p->seqlen_k);
}

/* fa_seq_len_k: seqused_k first, then cu_seqlens_k. */
FA_GPU_HD int fa_gpu_len_k(const fa_gpu_params *p, int b) {
  const int storage = fa_gpu_storage_k(p, b);
  if (p->seqused_k) return (int)fa_gpu_clamp64(p->seqused_k[b], 0, storage);
  return storage;
}

/* fa_diag_shift, for positions given as one offset (shift_fixed) or the
   default alignment. */
FA_GPU_HD int fa_gpu_shift(const fa_gpu_params *p, int sq, int sk) {
  if (p->shift_fixed) return p->shift;
  return p->top_left ? 0 : sk - sq;
}

/* fa_visible_keys (the core's rule, fa_window_keys). */
FA_GPU_HD void fa_gpu_visible(const fa_gpu_params *p, int i, int sq, int sk,
                              int *lo, int *hi) {
  fa_window_keys((int64_t)i + fa_gpu_shift(p, sq, sk), p->window_left,
                 p->window_right, sk, lo, hi);
}

/* The inverse of fa_visible_keys: every query that sees key j lies in
   [*i0, *i1) (callers still test fa_gpu_visible). */
FA_GPU_HD void fa_gpu_queries_of_key(const fa_gpu_params *p, int j, int sq,
                                     int sk, int *i0, int *i1) {
  int64_t shift = fa_gpu_shift(p, sq, sk);
  int64_t a = p->window_right < 0 ? 0 : (int64_t)j - shift - p->window_right;
  int64_t b = p->window_left < 0 ? sq : (int64_t)j - shift + p->window_left + 1;
  if (a < 0) a = 0;
  if (b > sq) b = sq;
  if (b < a) b = a;
  *i0 = (int)a;
  *i1 = (int)b;
}

/* Queries that see some key of [col0, min(col0 + n, sk)): both edges of
   a key's range move right with the key, so the first and last keys bound
   them; [0, 0) when col0 >= sk. (The backward's key blocks.) */
FA_GPU_HD void fa_gpu_queries_of_keys(const fa_gpu_params *p, int col0, int n,
                                      int sq, int sk, int *i0, int *i1) {
  *i0 = *i1 = 0;
  if (col0 >= sk) return;
  int a0, a1, b0, b1;
  fa_gpu_queries_of_key(p, col0, sq, sk, &a0, &a1);
  fa_gpu_queries_of_key(p, (col0 + n < sk ? col0 + n : sk) - 1, sq, sk, &b0,
                        &b1);
  *i0 = a0;
  *i1 = b1;
}

/* fa_q_offset (i < fa_gpu_len_q: the row is inside the tensor) */
FA_GPU_HD int64_t fa_gpu_q_offset(const fa_gpu_params *p, const fa_gpu_view *t,
                                  int b, int i, int h) {
  int64_t row = fa_gpu_start_q(p, b) + i;
  int64_t base = p->varlen_q ? 0 : (int64_t)b * t->sb;
  return base + row * t->ss + (int64_t)h * t->sh;
}

/* fa_k_offset: through the block table when paged; -1 when the entry is
   not a page of the pool (callers read zeros, write nothing). */
FA_GPU_HD int64_t fa_gpu_k_offset(const fa_gpu_params *p, const fa_gpu_view *t,
                                  int b, int j, int h) {
  if (p->paged) {
    int ps = p->page_size;
    int64_t page = p->block_table[(int64_t)b * p->max_blocks_per_seq + j / ps];
    if (page < 0 || page >= p->num_pages) return -1;
    return page * t->sb + (int64_t)(j % ps) * t->ss + (int64_t)h * t->sh;
  }
  int64_t row = fa_gpu_start_k(p, b) + j;
  int64_t base = p->varlen_k ? 0 : (int64_t)b * t->sb;
  return base + row * t->ss + (int64_t)h * t->sh;
}

/* fa_score_transform (the core's rule, fa_transform_score); s is
   scale * q.k. */
FA_GPU_HD float fa_gpu_transform(const fa_gpu_params *p, float s, int h, int i,
                                 int j, int shift) {
  return fa_transform_score(s, p->softcap, p->alibi_slopes, h, i, j, shift);
}

/* fa_plan_kv_blocks (the core's rule, fa_kv_block_range), for `rows`
   query rows per block and key blocks of bk. */
FA_GPU_HD void fa_gpu_kv_blocks(const fa_gpu_params *p, int rows, int bk,
                                int sq, int sk, int qb, int *kb_begin,
                                int *kb_end) {
  fa_kv_block_range(qb, rows, bk, sq, sk, fa_gpu_shift(p, sq, sk),
                    p->window_left, p->window_right, kb_begin, kb_end);
}

/* fa_plan_work_item (the core's rule, fa_work_item_of). */
FA_GPU_HD void fa_gpu_work_item(const fa_gpu_params *p, int64_t w, int *b,
                                int *h, int *qb, int *split) {
  fa_work_item_of(
      w, p->batch, p->heads_q, p->pack_group, p->num_q_blocks, p->num_splits,
      fa_window_grows(p->window_left, p->window_right), b, h, qb, split);
}

/* Index of row (b, h, i) in lse / delta: [batch][heads_q][seqlen_q]. */
FA_GPU_HD int64_t fa_gpu_row_index(const fa_gpu_params *p, int b, int h,
                                   int i) {
  return ((int64_t)b * p->heads_q + h) * p->seqlen_q + i;
}

#endif
