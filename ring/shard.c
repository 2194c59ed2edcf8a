// SPDX-License-Identifier: MIT
// Shard geometry: which global rows each rank holds, where they sit in the
// local tensors, their global positions, and which (query part, key part)
// blocks a mask hides wholly. Everything here is host arithmetic on the
// global problem, so every rank computes every other rank's geometry
// without a message.
#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"

size_t ring_dtype_size(fa_dtype t) {
  return t == FA_F32 ? 4 : t == FA_E4M3 || t == FA_E5M2 ? 1 : 2; // FP8: 1
}

int ring_len_q(const fa_attention *g, int b) {
  return g->cu_seqlens_q ? g->cu_seqlens_q[b + 1] - g->cu_seqlens_q[b]
                         : g->seqlen_q;
}

int ring_len_k(const fa_attention *g, int b) {
  return g->cu_seqlens_k ? g->cu_seqlens_k[b + 1] - g->cu_seqlens_k[b]
                         : g->seqlen_k;
}

// The global position of row 0 of sequence b (the header's qpos / kpos),
// with per-sequence position arrays refused at creation.
static int64_t base_position(const fa_attention *g, int b, int side) {
  if (g->positions == FA_POSITIONS_EXPLICIT)
    return side == 'q' ? g->q_position : g->k_position;
  if (side == 'k' || g->causal == FA_CAUSAL_TOP_LEFT) return 0;
  return (int64_t)ring_len_k(g, b) - ring_len_q(g, b);
}

fa_status ring_shard_make(const fa_attention *g, int N, int shard, int r,
                          int side, ring_shard *s) {
  memset(s, 0, sizeof *s);
  const int B = g->batch, varlen = g->cu_seqlens_q != NULL;
  s->nparts = shard == FA_SHARD_ZIGZAG ? 2 : 1;
  const int64_t C = (int64_t)N * s->nparts;
  int64_t row = 0;
  for (int p = 0; p < s->nparts; p++) {
    ring_part *pt = &s->part[p];
    const int64_t c = p == 0 ? r : 2 * (int64_t)N - 1 - r;
    pt->cu = calloc((size_t)B + 1, sizeof *pt->cu);
    pt->pos = calloc((size_t)B, sizeof *pt->pos);
    pt->len = calloc((size_t)B, sizeof *pt->len);
    pt->lo = calloc((size_t)B, sizeof *pt->lo);
    if (!pt->cu || !pt->pos || !pt->len || !pt->lo)
      return ring_fail(FA_ERR_OUT_OF_MEMORY, "shard geometry: out of memory");
    pt->row0 = row;
    for (int b = 0; b < B; b++) {
      const int64_t L = side == 'q' ? ring_len_q(g, b) : ring_len_k(g, b);
      const int64_t lo = L * c / C, hi = L * (c + 1) / C;
      pt->len[b] = hi - lo;
      pt->lo[b] = lo;
      pt->pos[b] = base_position(g, b, side) + lo;
      pt->cu[b + 1] = pt->cu[b] + (int32_t)(hi - lo);
      if (hi - lo > pt->maxlen) pt->maxlen = (int)(hi - lo);
    }
    pt->rows = varlen ? pt->cu[B] : pt->maxlen;
    row += pt->rows;
  }
  s->rows = row;
  return FA_OK;
}

void ring_shard_free(fa_context *ctx, ring_shard *s) {
  for (int p = 0; p < 2; p++) {
    free(s->part[p].cu);
    free(s->part[p].pos);
    free(s->part[p].len);
    free(s->part[p].lo);
    if (ctx) {
      fa_free(ctx, s->part[p].cu_dev);
      fa_free(ctx, s->part[p].pos_dev);
    }
  }
  memset(s, 0, sizeof *s);
}

// The sub-problems read their index arrays from the context's memory space.
fa_status ring_shard_upload(fa_context *ctx, int batch, ring_shard *s) {
  for (int p = 0; p < s->nparts; p++) {
    ring_part *pt = &s->part[p];
    const size_t cu_b = sizeof(int32_t) * ((size_t)batch + 1),
                 pos_b = sizeof(int64_t) * (size_t)batch;
    if (fa_malloc(ctx, cu_b, (void **)&pt->cu_dev) ||
        fa_malloc(ctx, pos_b, (void **)&pt->pos_dev) ||
        fa_copy_to_device(ctx, pt->cu_dev, pt->cu, cu_b) ||
        fa_copy_to_device(ctx, pt->pos_dev, pt->pos, pos_b))
      return ring_fail(FA_ERR_OUT_OF_MEMORY, "shard index arrays: %s",
                       fa_last_error());
  }
  return FA_OK;
}

int ring_part_visible(const fa_attention *g, int batch, const ring_part *q,
                      const ring_part *k) {
  const int64_t wl = g->window_left, wr = g->causal ? 0 : g->window_right;
  for (int b = 0; b < batch; b++) {
    if (q->len[b] == 0 || k->len[b] == 0) continue;
    const int64_t q0 = q->pos[b], q1 = q0 + q->len[b] - 1;
    const int64_t k0 = k->pos[b], k1 = k0 + k->len[b] - 1;
    // Query Pq sees Pk iff Pq - wl <= Pk <= Pq + wr: the block is visible
    // iff its nearest corners are.
    if (wr >= 0 && k0 > q1 + wr) continue;
    if (wl >= 0 && k1 < q0 - wl) continue;
    return 1;
  }
  return 0;
}

fa_tensor ring_part_view(fa_tensor t, const ring_part *p) {
  t.data = (char *)t.data +
           (size_t)(p->row0 * t.stride_seq) * ring_dtype_size(t.dtype);
  return t;
}

void ring_block_problem(const fa_attention *g, int varlen, const ring_part *q,
                        const ring_part *k, fa_attention *a) {
  *a = *g;
  a->sinks = NULL; // merged once as a part of their own (forward.c)
  a->dsinks = NULL;
  a->positions = FA_POSITIONS_EXPLICIT;
  a->backward_mode = FA_BACKWARD_ACCUMULATE;
  a->seqlen_q = q->maxlen;
  a->seqlen_k = k->maxlen;
  if (varlen) {
    a->cu_seqlens_q = q->cu_dev;
    a->cu_seqlens_k = k->cu_dev;
    a->rows_q = q->rows;
    a->rows_k = k->rows;
    a->q_position = a->k_position = 0;
    a->q_positions = q->pos_dev;
    a->k_positions = k->pos_dev;
  } else {
    a->q_position = q->pos[0];
    a->k_position = k->pos[0];
    a->q_positions = a->k_positions = NULL;
  }
}

// A packed block is K as a dense [nb, rows, heads_kv, head_dim] tensor
// followed by V as [nb, rows, heads_kv, head_dim_v] (nb = batch, or 1 with
// stride_batch 0 for varlen rows).
void ring_kv_views(const fa_ring *r, int src, void *buf, fa_dtype dt,
                   fa_tensor *k, fa_tensor *v) {
  const int64_t rows = r->k[src].rows, nb = r->varlen ? 1 : r->g.batch;
  memset(k, 0, sizeof *k);
  memset(v, 0, sizeof *v);
  k->data = buf;
  k->dtype = dt;
  k->stride_head = r->d;
  k->stride_seq = (int64_t)r->hkv * r->d;
  k->stride_batch = r->varlen ? 0 : rows * k->stride_seq;
  v->data =
      (char *)buf + (size_t)(nb * rows * k->stride_seq) * ring_dtype_size(dt);
  v->dtype = dt;
  v->stride_head = r->dv;
  v->stride_seq = (int64_t)r->hkv * r->dv;
  v->stride_batch = r->varlen ? 0 : rows * v->stride_seq;
}

size_t ring_kv_block_bytes(const fa_ring *r, int src, fa_dtype dt) {
  const int64_t nb = r->varlen ? 1 : r->g.batch;
  return (size_t)(nb * r->k[src].rows * r->hkv * (r->d + r->dv)) *
         ring_dtype_size(dt);
}

fa_tensor ring_acc_view(const fa_ring *r, float *base, int rows_side, int heads,
                        int dim) {
  const int64_t rows = rows_side == 'q' ? r->q.rows : r->k[r->rank].rows;
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = base;
  t.dtype = FA_F32;
  t.stride_head = dim;
  t.stride_seq = (int64_t)heads * dim;
  t.stride_batch = r->varlen ? 0 : rows * t.stride_seq;
  return t;
}
