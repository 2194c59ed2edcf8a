// SPDX-License-Identifier: MIT
// The validated problem every backend receives, and the one place that
// defines masking, lengths and row addressing. Backends must use these
// helpers (or provably equivalent code) so that semantics never drift.
#ifndef FA_CORE_PROBLEM_H
#define FA_CORE_PROBLEM_H

#include <math.h>
#include <stdint.h>

#include "flashattn.h"
#include "flat_problem.h" // the problem as numbers, for device code
#include "rules.h"        // the scalar rules below, shared with device code
#include "seq_rows.h"     // lengths and row offsets: the arrays' one reader

typedef struct fa_problem {
  fa_attention a;     // the caller's problem, defaults resolved:
                      // head_dim_v != 0, scale != 0, causal folded into
                      // window_right (0) so masks are one window test.
  fa_dtype dtype;     // input dtype (q, k, v)
  fa_dtype dtype_out; // output dtype (o, do, dq, dk, dv); the input dtype
                      // until a layout says otherwise
  int top_left;       // aligned positions: diagonal offset 0 instead of sk - sq
  int explicit_positions; // positions == FA_POSITIONS_EXPLICIT
  int descaled;           // some input tensor of the layout has a descale
  int varlen_q, varlen_k, paged;
  int group; // heads_q / heads_kv
  // Storage rows of varlen Q and K/V (cu_seqlens_q/k[batch]): the caller's
  // rows_q/rows_k, or read from host-visible cu_seqlens by the core before
  // the tensors are checked (0 when not varlen). Kernels that hand a copy
  // engine tensor bounds use them.
  int64_t rows_q, rows_k;
} fa_problem;

/* Validate the scalar fields and pointers' presence (not array contents).
   On error returns FA_ERR_INVALID_ARGUMENT with the field named. */
fa_status fa_problem_init(fa_problem *p, const fa_attention *a, fa_dtype dtype);

/* Validate the contents of cu_seqlens, seqused_k and block_table. They must
   be host-readable (CPU memory space; GPU backends copy them first). */
fa_status fa_problem_check_arrays(const fa_problem *p);

/* Validate a tensor's descale_per_head (0 or 1, and 1 only with a
   descale): before anything reads or copies a descale array, whose length
   it decides. */
fa_status fa_tensor_check_descale_flags(const char *name, const fa_tensor *t);

/* Validate the values of the inputs' descales (host-readable): finite and
   > 0. The flags must have passed fa_tensor_check_descale_flags. */
fa_status fa_problem_check_descales(const fa_problem *p, const fa_tensor *q,
                                    const fa_tensor *k, const fa_tensor *v);

/* The descale of tensor t for sequence b, kv head hkv (1 without one). */
static inline float fa_tensor_descale(const fa_tensor *t, int heads_kv, int b,
                                      int hkv) {
  if (!t->descale) return 1.0f;
  return t->descale_per_head ? t->descale[(int64_t)b * heads_kv + hkv]
                             : t->descale[0];
}

/* Validate the forward tensors (dtype, strides, self-overlap of o) and that
   no output shares a byte with any other party of the call (overlap.h).
   Reads no array: varlen extents come from rows_q / rows_k, which must be
   filled in; the arrays' addresses are parties. */
fa_status fa_problem_check_forward(const fa_problem *p, const fa_tensor *q,
                                   const fa_tensor *k, const fa_tensor *v,
                                   const fa_tensor *o, const float *lse);

/* Validate the backward tensors (all of the forward's plus do, dq, dk, dv). */
fa_status fa_problem_check_backward(const fa_problem *p, const fa_tensor *q,
                                    const fa_tensor *k, const fa_tensor *v,
                                    const fa_tensor *o, const fa_tensor *d_o,
                                    const float *lse, const fa_tensor *dq,
                                    const fa_tensor *dk, const fa_tensor *dv);

/* Check one tensor viewing extents n[] = {batch, seq, heads, dim}: data set,
   dtype valid, strides >= 0, offsets fit 64 bits; an output must also not
   overlap itself. Used where no fa_problem exists (fa_merge_states). */
fa_status fa_tensor_check(const char *name, const fa_tensor *t,
                          const int64_t n[4], int is_output);

/* No query row at all (batch 0 or seqlen_q 0): the forward is a no-op the
   core answers without a kernel; the backward still runs when there are
   keys, whose gradients are then 0. */
static inline int fa_problem_empty(const fa_problem *p) {
  return p->a.batch == 0 || p->a.seqlen_q == 0;
}

/* Offset of the diagonal for sequence b with real lengths (sq, sk): query
   row i faces key row i + shift (shift = qpos(b) - kpos(b), see the
   header's positions). |shift| < 2^41: the positions are bounded. */
static inline int64_t fa_diag_shift(const fa_problem *p, int b, int sq,
                                    int sk) {
  if (p->explicit_positions) {
    const fa_attention *a = &p->a;
    int64_t qp = a->q_position + (a->q_positions ? a->q_positions[b] : 0);
    int64_t kp = a->k_position + (a->k_positions ? a->k_positions[b] : 0);
    return qp - kp;
  }
  return fa_aligned_shift(p->top_left, sq, sk);
}

/* Visible keys of query row i of a sequence with sk keys whose diagonal
   offset is shift (fa_diag_shift): [*lo, *hi) clipped to [0, sk). Empty
   when *lo >= *hi. In 64 bits: windows near INT_MAX cannot overflow. */
static inline void fa_visible_keys(const fa_problem *p, int64_t shift, int i,
                                   int sk, int *lo, int *hi) {
  fa_window_keys((int64_t)i + shift, p->a.window_left, p->a.window_right, sk,
                 lo, hi);
}

/* The flat problem of p (flat_problem.h): what a GPU kernel reads, and
   what the lengths and offsets below read. */
static inline fa_flat_problem fa_problem_flat(const fa_problem *p) {
  const fa_attention *a = &p->a;
  fa_flat_problem f = {0};
  f.batch = a->batch;
  f.seqlen_q = a->seqlen_q;
  f.seqlen_k = a->seqlen_k;
  f.heads_q = a->heads_q;
  f.heads_kv = a->heads_kv;
  f.group = p->group;
  f.head_dim = a->head_dim;
  f.head_dim_v = a->head_dim_v;
  f.scale = a->scale;
  f.softcap = a->softcap;
  f.window_left = a->window_left;
  f.window_right = a->window_right;
  f.top_left = p->top_left;
  f.shift_fixed = p->explicit_positions;
  f.shift = p->explicit_positions ? (int)(a->q_position - a->k_position) : 0;
  f.varlen_q = p->varlen_q;
  f.varlen_k = p->varlen_k;
  f.paged = p->paged;
  f.rows_q = p->rows_q;
  f.rows_k = p->rows_k;
  f.num_pages = a->num_pages;
  f.dtype = (int)p->dtype;
  f.dtype_out = (int)p->dtype_out;
  f.alibi_slopes = a->alibi_slopes;
  f.sinks = a->sinks;
  f.cu_seqlens_q = a->cu_seqlens_q;
  f.cu_seqlens_k = a->cu_seqlens_k;
  f.seqused_k = a->seqused_k;
  f.block_table = a->block_table;
  f.max_blocks_per_seq = a->max_blocks_per_seq;
  f.page_size = a->page_size;
  return f;
}

static inline fa_tensor_view fa_tensor_view_of(const fa_tensor *t) {
  fa_tensor_view v = {t->data, t->stride_batch, t->stride_seq, t->stride_head};
  return v;
}

/* Real lengths of sequence b (fa_seq_rows_q/k; rows_q/rows_k must be
   filled in). */
static inline int fa_seq_len_q(const fa_problem *p, int b) {
  const fa_flat_problem f = fa_problem_flat(p);
  return fa_seq_rows_q(&f, b);
}

static inline int fa_seq_len_k(const fa_problem *p, int b) {
  const fa_flat_problem f = fa_problem_flat(p);
  return fa_seq_rows_k(&f, b);
}

/* Element offset of row i, head h, of q-like tensors (q, o, do, dq):
   fa_seq_q_offset. */
static inline int64_t fa_q_offset(const fa_problem *p, const fa_tensor *t,
                                  int b, int i, int h) {
  const fa_flat_problem f = fa_problem_flat(p);
  const fa_tensor_view v = fa_tensor_view_of(t);
  return fa_seq_q_offset(&f, &v, b, i, h);
}

/* Element offset of key j, kv head h, of k-like tensors (k, v, dk, dv),
   following the block table when paged: fa_seq_k_offset. */
static inline int64_t fa_k_offset(const fa_problem *p, const fa_tensor *t,
                                  int b, int j, int h) {
  const fa_flat_problem f = fa_problem_flat(p);
  const fa_tensor_view v = fa_tensor_view_of(t);
  return fa_seq_k_offset(&f, &v, b, j, h);
}

/* The score pipeline after the dot product: softcap, then ALiBi. Masking is
   the caller's job (via fa_visible_keys). s is scale * q.k. */
static inline float fa_score_transform(const fa_problem *p, float s, int h,
                                       int i, int j, int64_t shift) {
  return fa_transform_score(s, p->a.softcap, p->a.alibi_slopes, h, i, j, shift);
}

#endif
