// SPDX-License-Identifier: MIT
// The one place where any kernel, CPU or GPU, reads the problem's arrays
// (cu_seqlens, seqused_k, block_table): sequence lengths and row offsets,
// on the flat problem (flat_problem.h), for host and device (FA_HD). The
// core's fa_seq_len_q/k and fa_q_offset/fa_k_offset (problem.h) are these
// functions.
//
// On a GPU context the arrays are device memory the core does not check
// before a launch (only in checked mode), so every read is clamped: no entry
// takes a kernel outside the tensors or the page pool. Row starts lie in
// [0, rows], a sequence's rows end by rows and number at most seqlen_q /
// seqlen_k, seqused_k lies in [0, the sequence's key rows], and a
// block-table entry outside [0, num_pages) gives offset -1, which every
// reader takes as a row of zeros (and never writes). For arrays that pass
// fa_problem_check_arrays (the CPU's, always) every clamp is the identity.
#ifndef FA_CORE_SEQ_ROWS_H
#define FA_CORE_SEQ_ROWS_H

#include <stdint.h>

#include "flat_problem.h"
#include "hd.h"

static inline FA_HD int64_t fa_clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* First storage row of sequence b of varlen Q (0 when dense). */
static inline FA_HD int64_t fa_seq_start_q(const fa_flat_problem *f, int b) {
  return f->varlen_q ? fa_clamp64(f->cu_seqlens_q[b], 0, f->rows_q) : 0;
}

/* First storage row of sequence b of varlen K/V (0 when dense or paged). */
static inline FA_HD int64_t fa_seq_start_k(const fa_flat_problem *f, int b) {
  return f->varlen_k ? fa_clamp64(f->cu_seqlens_k[b], 0, f->rows_k) : 0;
}

/* Query rows of sequence b. */
static inline FA_HD int fa_seq_rows_q(const fa_flat_problem *f, int b) {
  if (!f->varlen_q) return f->seqlen_q;
  const int64_t s = fa_seq_start_q(f, b);
  const int64_t e = fa_clamp64(f->cu_seqlens_q[b + 1], s, f->rows_q);
  return (int)(e - s < f->seqlen_q ? e - s : f->seqlen_q);
}

/* Rows of K/V storage that sequence b owns (dense or varlen; not paged). */
static inline FA_HD int fa_seq_storage_k(const fa_flat_problem *f, int b) {
  if (!f->varlen_k) return f->seqlen_k;
  const int64_t s = fa_seq_start_k(f, b);
  const int64_t e = fa_clamp64(f->cu_seqlens_k[b + 1], s, f->rows_k);
  return (int)(e - s < f->seqlen_k ? e - s : f->seqlen_k);
}

/* Keys of sequence b: seqused_k first, then its storage rows. */
static inline FA_HD int fa_seq_rows_k(const fa_flat_problem *f, int b) {
  const int storage = fa_seq_storage_k(f, b);
  if (f->seqused_k) return (int)fa_clamp64(f->seqused_k[b], 0, storage);
  return storage;
}

/* Element offset of row i (< fa_seq_rows_q: inside the tensor), head h, of
   q-like tensors (q, o, do, dq). */
static inline FA_HD int64_t fa_seq_q_offset(const fa_flat_problem *f,
                                            const fa_tensor_view *t, int b,
                                            int i, int h) {
  int64_t row = fa_seq_start_q(f, b) + i;
  int64_t base = f->varlen_q ? 0 : (int64_t)b * t->sb;
  return base + row * t->ss + (int64_t)h * t->sh;
}

/* Element offset of key j, kv head h, of k-like tensors (k, v, dk, dv),
   through the block table when paged; -1 when the entry is not a page of
   the pool. */
static inline FA_HD int64_t fa_seq_k_offset(const fa_flat_problem *f,
                                            const fa_tensor_view *t, int b,
                                            int j, int h) {
  if (f->paged) {
    int ps = f->page_size;
    int64_t page = f->block_table[(int64_t)b * f->max_blocks_per_seq + j / ps];
    if (page < 0 || page >= f->num_pages) return -1;
    return page * t->sb + (int64_t)(j % ps) * t->ss + (int64_t)h * t->sh;
  }
  int64_t row = fa_seq_start_k(f, b) + j;
  int64_t base = f->varlen_k ? 0 : (int64_t)b * t->sb;
  return base + row * t->ss + (int64_t)h * t->sh;
}

#endif
