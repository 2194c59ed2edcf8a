// SPDX-License-Identifier: MIT
// A case's problem and buffers: lengths, cu_seqlens, pages and their
// shuffle, masks, features, descales, tensor views in every layout, the
// upload to the context's memory and the snapshots of the inputs.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xval_run.h"

size_t xv_alloc_bytes(const ts_buf *b) {
  return b->bytes + 2 * (size_t)TS_GUARD_BYTES;
}

int xv_rows_of(const xs *s, int klike, int b) {
  return klike ? s->lk[b] : s->lq[b];
}

int64_t xv_elem_index(const xs *s, const xt *x, int b, int r, int h) {
  return x->klike ? fa_oracle_k_index(&s->a, &x->t, b, r, h)
                  : fa_oracle_q_index(&s->a, &x->t, b, r, h);
}

static int xt_init(xt *x, ts_buf *buf, fa_dtype dt, int layout, int nb, int ns,
                   int nh, int nd, int pad, int varlen, int klike) {
  memset(x, 0, sizeof *x);
  x->t.dtype = dt;
  size_t n = ts_make_strides(layout, nb, ns, nh, nd, pad, &x->t);
  if (varlen) x->t.stride_batch = 0;
  if (ts_buf_alloc(buf, n * ts_dtype_size(dt))) return -1;
  ts_poison(buf->host, dt, n);
  x->buf = buf;
  x->t.data = buf->host;
  x->klike = klike;
  x->heads = nh;
  x->dim = nd;
  return 0;
}

static void xt_dev(xt *x) {
  x->d = x->t;
  x->d.data =
      (unsigned char *)ts_buf_dev(x->buf) + x->off * ts_dtype_size(x->t.dtype);
}

void xv_xs_free(xs *s) {
  for (int i = 0; i < NBUF; i++) {
    if (s->buf[i].alloc) ts_buf_free(s->ctx, &s->buf[i]);
    free(s->snap[i]);
  }
  for (int i = 0; i < XV_MAX_SHARD; i++) {
    if (s->shard_o[i].alloc) ts_buf_free(s->ctx, &s->shard_o[i]);
    if (s->shard_l[i].alloc) ts_buf_free(s->ctx, &s->shard_l[i]);
  }
  if (s->shard_lse.alloc) ts_buf_free(s->ctx, &s->shard_lse);
  free(s->lq);
  free(s->lk);
  free(s->store_k);
  free(s->cuq);
  free(s->cuk);
  free(s->used);
  free(s->table);
  free(s->slopes);
  free(s->sinks);
  free(s->qpos);
  free(s->kpos);
  for (int i = 0; i < 3; i++) free(s->dsc[i]);
}

/* An int/float array of the problem as a guarded buffer; the device pointer
   is patched in after the upload. */
static int arr_buf(xs *s, int id, const void *src, size_t bytes) {
  if (ts_buf_alloc(&s->buf[id], bytes)) return -1;
  memcpy(s->buf[id].host, src, bytes);
  return 0;
}

uint64_t xv_str_hash(const char *str) {
  uint64_t h = 1469598103934665603ull;
  for (; *str; str++) h = (h ^ (unsigned char)*str) * 1099511628211ull;
  return h;
}

/* Build the problem and every buffer of case c. Structure (lengths, page
   shuffles) comes from the case's identity; data from the run's seed. */
int xv_xs_setup(xs *s, fa_context *ctx, const xcase *c, uint64_t struct_seed,
                uint64_t data_seed) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->ctx = ctx;
  s->seed = data_seed;
  ts_rng sr, dr;
  ts_rng_seed(&sr, struct_seed);
  ts_rng_seed(&dr, data_seed);
  int B = c->b;
  s->lq = calloc((size_t)B, sizeof(int));
  s->lk = calloc((size_t)B, sizeof(int));
  s->store_k = calloc((size_t)B, sizeof(int));
  if (!s->lq || !s->lk || !s->store_k) return -1;

  // Lengths: sequence 0 has the maxima; with 3+ sequences one has no
  // queries, one no keys (storage or seqused), the rest are random.
  // With slack, sequence 0 falls short of the maxima too (so no sequence
  // reaches seqlen_q / seqlen_k).
  int mq = c->sq - (c->varlen ? c->slack : 0);
  int mk = c->sk - (c->varlen == 1 ? c->slack : 0);
  for (int b = 0; b < B; b++) {
    s->lq[b] = c->varlen ? mq : c->sq;
    if (c->varlen && b > 0)
      s->lq[b] = (B >= 3 && b == 1) ? 0 : ts_rng_int(&sr, 0, mq);
    s->store_k[b] = c->varlen == 1 ? mk : c->sk;
    if (c->varlen == 1 && b > 0)
      s->store_k[b] = (B >= 3 && b == 2) ? 0 : ts_rng_int(&sr, 0, mk);
    s->lk[b] = s->store_k[b];
    if (c->seqused) {
      int top = s->store_k[b] - (c->varlen == 1 ? 0 : c->slack);
      s->lk[b] = b == 0                   ? top
                 : (B >= 3 && b == B - 1) ? 0
                                          : ts_rng_int(&sr, 0, top);
    }
  }

  fa_attention *a = &s->a;
  fa_attention_init(a);
  a->batch = B;
  a->seqlen_q = c->sq;
  a->seqlen_k = c->sk;
  a->heads_q = c->hq;
  a->heads_kv = c->hkv;
  a->head_dim = c->d;
  a->head_dim_v = c->hdv0 ? 0 : c->dv;
  a->scale = c->scale;
  a->causal = c->causal;
  a->window_left = c->wl;
  a->window_right = c->wr;
  a->softcap = c->cap;

  if (c->varlen) {
    s->cuq = malloc(sizeof(int32_t) * (B + 1));
    if (!s->cuq) return -1;
    s->cuq[0] = 0;
    for (int b = 0; b < B; b++) s->cuq[b + 1] = s->cuq[b] + s->lq[b];
    a->cu_seqlens_q = s->cuq;
    if (arr_buf(s, B_CUQ, s->cuq, sizeof(int32_t) * (B + 1))) return -1;
  }
  if (c->varlen == 1) {
    s->cuk = malloc(sizeof(int32_t) * (B + 1));
    if (!s->cuk) return -1;
    s->cuk[0] = 0;
    for (int b = 0; b < B; b++) s->cuk[b + 1] = s->cuk[b] + s->store_k[b];
    a->cu_seqlens_k = s->cuk;
    if (arr_buf(s, B_CUK, s->cuk, sizeof(int32_t) * (B + 1))) return -1;
  }
  if (c->seqused) {
    s->used = malloc(sizeof(int32_t) * B);
    if (!s->used) return -1;
    for (int b = 0; b < B; b++) s->used[b] = s->lk[b];
    a->seqused_k = s->used;
    if (arr_buf(s, B_USED, s->used, sizeof(int32_t) * B)) return -1;
  }
  if (c->page) {
    // Pages for each sequence's real keys in shuffled order, plus two decoy
    // pages (all NaN) that the block table names past the real length
    // (bad_tail: entries there outside the pool instead, of every kind).
    static const int32_t bad[] = {-1, INT32_MAX, INT32_MIN, -(1 << 20)};
    int ps = c->page, needed = 0;
    s->mbps = (c->sk + ps - 1) / ps + (int)(struct_seed & 1);
    for (int b = 0; b < B; b++) needed += (s->lk[b] + ps - 1) / ps;
    s->num_pages = needed + 2;
    int *perm = malloc(sizeof(int) * s->num_pages);
    s->table = malloc(sizeof(int32_t) * B * s->mbps);
    if (!perm || !s->table) {
      free(perm);
      return -1;
    }
    for (int p = 0; p < s->num_pages; p++) perm[p] = p;
    ts_rng_shuffle(&sr, perm, s->num_pages);
    int next = 0;
    for (int b = 0; b < B; b++) {
      int nb = (s->lk[b] + ps - 1) / ps;
      for (int blk = 0; blk < s->mbps; blk++)
        s->table[b * s->mbps + blk] =
            blk < nb        ? perm[next++]
            : !c->bad_tail  ? perm[needed + (b + blk) % 2]
            : (b + blk) % 5 ? bad[(b + blk) % 4]
                            : s->num_pages; // the first page past the pool
    }
    free(perm);
    a->block_table = s->table;
    a->max_blocks_per_seq = s->mbps;
    a->page_size = ps;
    a->num_pages = s->num_pages;
    if (arr_buf(s, B_TABLE, s->table, sizeof(int32_t) * B * s->mbps)) return -1;
  }
  if (c->alibi) {
    s->slopes = malloc(sizeof(float) * c->hq);
    if (!s->slopes) return -1;
    for (int h = 0; h < c->hq; h++)
      s->slopes[h] = (float)pow(2.0, -8.0 * (h + 1) / c->hq);
    a->alibi_slopes = s->slopes;
    if (arr_buf(s, B_SLOPES, s->slopes, sizeof(float) * c->hq)) return -1;
  }
  if (c->sinks) {
    s->sinks = malloc(sizeof(float) * c->hq);
    if (!s->sinks) return -1;
    for (int h = 0; h < c->hq; h++)
      s->sinks[h] = (float)(1.5 * ts_rng_normal(&dr) + (h == 0 ? 3.0 : 0.0));
    a->sinks = s->sinks;
    if (arr_buf(s, B_SINKS, s->sinks, sizeof(float) * c->hq)) return -1;
    if (c->dsinks) {
      if (ts_buf_alloc(&s->buf[B_DSINKS], sizeof(float) * c->hq)) return -1;
      ts_poison_f32((float *)s->buf[B_DSINKS].host, (size_t)c->hq);
    }
  }
  if (c->pos) {
    a->positions = FA_POSITIONS_EXPLICIT;
    a->q_position = c->qoff;
    a->k_position = c->koff;
    if (c->pos == 2) {
      // Per sequence: where each shard's queries and keys sit, negative
      // offsets and offsets that leave some rows with no key included.
      s->qpos = malloc(sizeof(int64_t) * B);
      s->kpos = malloc(sizeof(int64_t) * B);
      if (!s->qpos || !s->kpos) return -1;
      for (int b = 0; b < B; b++) {
        s->qpos[b] = ts_rng_int(&sr, -40, 60);
        s->kpos[b] = ts_rng_int(&sr, -40, 40);
      }
      a->q_positions = s->qpos;
      a->k_positions = s->kpos;
      if (arr_buf(s, B_QPOS, s->qpos, sizeof(int64_t) * B) ||
          arr_buf(s, B_KPOS, s->kpos, sizeof(int64_t) * B))
        return -1;
    }
  }
  if (c->descale) {
    // 2^u, u uniform in [-1.5, 1.5): far from 1, decoded values stay O(1).
    const int per[3] = {c->descale == 2, c->descale >= 2, c->descale == 2};
    const int on[3] = {1, 1, c->descale != 3};
    for (int i = 0; i < 3; i++) {
      if (!on[i]) continue;
      size_t n = per[i] ? (size_t)B * c->hkv : 1;
      s->dsc[i] = malloc(sizeof(float) * n);
      if (!s->dsc[i]) return -1;
      for (size_t j = 0; j < n; j++)
        s->dsc[i][j] = (float)pow(2.0, 3.0 * ts_rng_uniform(&dr) - 1.5);
      if (arr_buf(s, B_DSQ + i, s->dsc[i], sizeof(float) * n)) return -1;
    }
  }

  // Tensors.
  fa_dtype dt = c->dt, dto = xv_out_dtype(c);
  s->dto = dto;
  int vq = c->varlen != 0, vk = c->varlen == 1;
  int tq = 0, tk = 0;
  for (int b = 0; b < B; b++) {
    tq += s->lq[b];
    tk += s->store_k[b];
  }
  int qnb = vq ? 1 : B, qns = vq ? tq : c->sq;
  int knb = c->page ? s->num_pages : vk ? 1 : B;
  int kns = c->page ? c->page : vk ? tk : c->sk;
  int ql = c->layout == XV_LAYOUT_PACKED ? TS_BSHD : c->layout;
  int kl = c->mixed ? (ql + 1) % 3 : ql;
  int ol = c->mixed ? (ql + 2) % 3 : ql; // o, do, dq

  if (c->layout == XV_LAYOUT_PACKED) {
    // [b][s][hq + 2 hkv][d]: q, k and v are head ranges of one buffer.
    int H = c->hq + 2 * c->hkv;
    if (xt_init(&s->q, &s->buf[B_Q], dt, TS_BSHD, B, c->sq, H, c->d, c->pad, 0,
                0))
      return -1;
    s->k = s->q;
    s->v = s->q;
    s->k.klike = s->v.klike = 1;
    s->q.heads = c->hq;
    s->k.heads = s->v.heads = c->hkv;
    size_t sz = ts_dtype_size(dt), sh = (size_t)s->q.t.stride_head;
    s->k.off = c->hq * sh;
    s->v.off = (size_t)(c->hq + c->hkv) * sh;
    s->k.t.data = s->buf[B_Q].host + s->k.off * sz;
    s->v.t.data = s->buf[B_Q].host + s->v.off * sz;
  } else {
    if (xt_init(&s->q, &s->buf[B_Q], dt, ql, qnb, qns, c->hq, c->d, c->pad, vq,
                0) ||
        xt_init(&s->k, &s->buf[B_K], dt, kl, knb, kns, c->hkv, c->d, c->pad, vk,
                1) ||
        xt_init(&s->v, &s->buf[B_V], dt, kl, knb, kns, c->hkv, c->dv, c->pad,
                vk, 1))
      return -1;
  }
  if (xt_init(&s->o, &s->buf[B_O], dto, ol, qnb, qns, c->hq, c->dv, c->pad, vq,
              0))
    return -1;
  if (c->gen) {
    xv_fill_edge(s, &s->q, &dr, c->gen, 0);
    xv_fill_edge(s, &s->k, &dr, c->gen, 1);
    xv_fill_edge(s, &s->v, &dr, c->gen, 2);
  } else {
    xv_fill(s, &s->q, &dr, c->qamp > 0.0f ? (double)c->qamp : 1.0);
    xv_fill(s, &s->k, &dr, 1.0);
    xv_fill(s, &s->v, &dr, 1.0);
  }
  if (c->bwd) {
    if (xt_init(&s->d_o, &s->buf[B_DO], dto, ol, qnb, qns, c->hq, c->dv, c->pad,
                vq, 0) ||
        xt_init(&s->dq, &s->buf[B_DQ], dto, ol, qnb, qns, c->hq, c->d, c->pad,
                vq, 0) ||
        xt_init(&s->dk, &s->buf[B_DK], dto, kl, knb, kns, c->hkv, c->d, c->pad,
                vk, 1) ||
        xt_init(&s->dv, &s->buf[B_DV], dto, kl, knb, kns, c->hkv, c->dv, c->pad,
                vk, 1))
      return -1;
    xv_fill(s, &s->d_o, &dr, 1.0);
    if (c->gen == XV_GEN_NAN_DO) xv_place_nan(s, &s->d_o, 3);
  }
  if (ts_buf_alloc(&s->buf[B_LSE], sizeof(float) * B * c->hq * c->sq))
    return -1;
  ts_poison_f32((float *)s->buf[B_LSE].host, (size_t)B * c->hq * c->sq);

  // Upload every buffer; the library's problem points at the mirrors.
  for (int i = 0; i < NBUF; i++) {
    if (!s->buf[i].alloc) continue;
    if (ts_buf_upload(ctx, &s->buf[i])) return -1;
    if (i == B_Q || i == B_K || i == B_V || i == B_DO || i >= B_CUQ) {
      s->snap[i] = malloc(xv_alloc_bytes(&s->buf[i]));
      if (!s->snap[i]) return -1;
      memcpy(s->snap[i], s->buf[i].alloc, xv_alloc_bytes(&s->buf[i]));
    }
  }
  // Storage rows of varlen tensors: what a GPU context needs (it reads no
  // device array); a CPU context checks them against cu_seqlens.
  if (c->varlen) s->a.rows_q = s->cuq[B];
  if (c->varlen == 1) s->a.rows_k = s->cuk[B];
  s->ad = s->a;
  if (c->varlen) s->ad.cu_seqlens_q = ts_buf_dev(&s->buf[B_CUQ]);
  if (c->varlen == 1) s->ad.cu_seqlens_k = ts_buf_dev(&s->buf[B_CUK]);
  if (c->seqused) s->ad.seqused_k = ts_buf_dev(&s->buf[B_USED]);
  if (c->page) s->ad.block_table = ts_buf_dev(&s->buf[B_TABLE]);
  if (c->alibi) s->ad.alibi_slopes = ts_buf_dev(&s->buf[B_SLOPES]);
  if (c->sinks) s->ad.sinks = ts_buf_dev(&s->buf[B_SINKS]);
  if (c->dsinks && c->sinks) s->ad.dsinks = ts_buf_dev(&s->buf[B_DSINKS]);
  if (s->qpos) s->ad.q_positions = ts_buf_dev(&s->buf[B_QPOS]);
  if (s->kpos) s->ad.k_positions = ts_buf_dev(&s->buf[B_KPOS]);
  xt *all[] = {&s->q, &s->k, &s->v, &s->o, &s->d_o, &s->dq, &s->dk, &s->dv};
  for (int i = 0; i < 8; i++)
    if (all[i]->buf) xt_dev(all[i]);
  // Descales (after xt_dev: the host views get host arrays, the library's
  // views the mirrors); per head = per (batch, kv head).
  xt *in[3] = {&s->q, &s->k, &s->v};
  const int per[3] = {c->descale == 2, c->descale >= 2, c->descale == 2};
  for (int i = 0; i < 3; i++) {
    if (!s->dsc[i]) continue;
    in[i]->t.descale = s->dsc[i];
    in[i]->d.descale = ts_buf_dev(&s->buf[B_DSQ + i]);
    in[i]->t.descale_per_head = in[i]->d.descale_per_head = per[i];
  }
  return 0;
}
