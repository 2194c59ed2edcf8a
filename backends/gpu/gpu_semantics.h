// SPDX-License-Identifier: MIT
// The core's semantics as functions a GPU kernel can call: sequence
// lengths, the visible-key window, row addressing (varlen, paged), the score
// transform, the plan's block ranges and work order, the merge and the
// finalisation of the online softmax. Each mirrors the core function named
// in its comment (core/problem.h, core/plan.c, core/softmax.h); a module
// cannot call the core's inline helpers from device code. Every GPU kernel
// of the CUDA and HIP modules uses these. The header also compiles as plain
// C, and tests/gpu/test_gpu_mirror.c checks every function against the
// core's on a grid of problems and on random ones.
#ifndef FA_GPU_SEMANTICS_H
#define FA_GPU_SEMANTICS_H

#include <math.h>
#include <stdint.h>

#include "gpu_params.h"

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

/* fa_diag_shift */
FA_GPU_HD int fa_gpu_shift(const fa_gpu_params *p, int sq, int sk) {
  if (p->shift_fixed) return p->shift;
  return p->top_left ? 0 : sk - sq;
}

/* fa_visible_keys: [*lo, *hi) within [0, sk), in 64-bit arithmetic. */
FA_GPU_HD void fa_gpu_visible(const fa_gpu_params *p, int i, int sq, int sk,
                              int *lo, int *hi) {
  int64_t diag = (int64_t)i + fa_gpu_shift(p, sq, sk);
  int64_t l = p->window_left < 0 ? 0 : diag - p->window_left;
  int64_t h = p->window_right < 0 ? sk : diag + p->window_right + 1;
  if (l < 0) l = 0;
  if (l > sk) l = sk;
  if (h > sk) h = sk;
  if (h < l) h = l;
  *lo = (int)l;
  *hi = (int)h;
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

/* fa_score_transform: softcap, then ALiBi; s is scale * q.k. */
FA_GPU_HD float fa_gpu_transform(const fa_gpu_params *p, float s, int h, int i,
                                 int j, int shift) {
  if (p->softcap > 0.0f) s = p->softcap * tanhf(s / p->softcap);
  if (p->alibi_slopes) {
    int64_t d = (int64_t)i + shift - j;
    s -= p->alibi_slopes[h] * (float)(d < 0 ? -d : d);
  }
  return s;
}

/* fa_plan_kv_blocks, for `rows` query rows per block and key blocks of bk. */
FA_GPU_HD void fa_gpu_kv_blocks(const fa_gpu_params *p, int rows, int bk,
                                int sq, int sk, int qb, int *kb_begin,
                                int *kb_end) {
  int r0 = qb * rows;
  int r1 = r0 + rows < sq ? r0 + rows : sq;
  *kb_begin = *kb_end = 0;
  if (r0 >= r1 || sk <= 0) return;
  int lo, hi_first, lo_last, hi;
  fa_gpu_visible(p, r0, sq, sk, &lo, &hi_first);
  fa_gpu_visible(p, r1 - 1, sq, sk, &lo_last, &hi);
  if (hi <= lo) return;
  *kb_begin = lo / bk;
  *kb_end = (int)(((int64_t)hi + bk - 1) / bk); // no overflow near INT_MAX
}

/* fa_plan_split_range */
FA_GPU_HD void fa_gpu_split_range(int begin, int end, int num_splits, int split,
                                  int *s_begin, int *s_end) {
  int n = end > begin ? end - begin : 0;
  int base = n / num_splits, extra = n % num_splits;
  int start = begin + split * base + (split < extra ? split : extra);
  *s_begin = start;
  *s_end = start + base + (split < extra ? 1 : 0);
}

/* fa_plan_work_item */
FA_GPU_HD void fa_gpu_work_item(const fa_gpu_params *p, int64_t w, int *b,
                                int *h, int *qb, int *split) {
  const int units = p->heads_q / p->pack_group;
  int64_t bh_count = (int64_t)p->batch * units;
  *split = (int)(w % p->num_splits);
  int64_t r = w / p->num_splits;
  int64_t bh = r % bh_count;
  int qi = (int)(r / bh_count);
  int grows = p->window_left < 0 && p->window_right >= 0;
  *qb = grows ? p->num_q_blocks - 1 - qi : qi;
  *h = (int)(bh % units) * p->pack_group;
  *b = (int)(bh / units);
}

/* Index of row (b, h, i) in lse / delta: [batch][heads_q][seqlen_q]. */
FA_GPU_HD int64_t fa_gpu_row_index(const fa_gpu_params *p, int b, int h,
                                   int i) {
  return ((int64_t)b * p->heads_q + h) * p->seqlen_q + i;
}

/* fa_softmax_merge for the (m, l) pair: 0 when b is empty (a unchanged),
   1 when a was empty (the caller copies O_b), 2 otherwise with the
   weights of a and b in *wa, *wb. */
FA_GPU_HD int fa_gpu_merge_weights(float *m_a, float *l_a, float m_b, float l_b,
                                   float *wa, float *wb) {
  if (m_b == -INFINITY) return 0;
  if (*m_a == -INFINITY) {
    *m_a = m_b;
    *l_a = l_b;
    return 1;
  }
  float mx = *m_a > m_b ? *m_a : m_b;
  *wa = expf(*m_a - mx);
  *wb = expf(m_b - mx);
  *l_a = *l_a * *wa + l_b * *wb;
  *m_a = mx;
  return 2;
}

/* fa_softmax_finalize: fold in a sink logit (NAN = none); returns the
   factor for O and stores the natural-log LSE. */
FA_GPU_HD float fa_gpu_finalize(float m, float l, float sink, float *lse) {
  if (!isnan(sink)) {
    if (m == -INFINITY) {
      *lse = sink;
      return 0.0f;
    }
    float mx = m > sink ? m : sink;
    l = l * expf(m - mx) + expf(sink - mx);
    *lse = mx + logf(l);
    return expf(m - mx) / l;
  }
  if (m == -INFINITY) {
    *lse = -INFINITY;
    return 0.0f;
  }
  *lse = m + logf(l);
  return 1.0f / l;
}

/* fa_gpu_finalize with head h's sink from sinks (NULL = none): a NaN or
   +inf sink makes the row NaN (O and LSE), a -inf one weighs nothing, as
   on the CPU backends. */
FA_GPU_HD float fa_gpu_finalize_sinks(float m, float l, const float *sinks,
                                      int h, float *lse) {
  const float sink = sinks ? sinks[h] : -INFINITY;
  if (isnan(sink) || sink == INFINITY) {
    *lse = NAN;
    return NAN;
  }
  return fa_gpu_finalize(m, l, sink == -INFINITY ? NAN : sink, lse);
}

#endif
