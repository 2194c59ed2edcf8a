// SPDX-License-Identifier: MIT
// Backward driver of cpu-scalar, from the saved LSE (P is recomputed, never
// stored). Three passes, each parallel without atomics:
//   1. D_i = rowsum(dO_i * O_i) for every query row;
//   2. dK, dV: one item per (batch, kv head, kv block), looping over the q
//      heads of its group and the q blocks that see the block;
//   3. dQ: one item per (batch, q head, q block), looping over its kv blocks.
// Splitting dQ from dK/dV recomputes Q.K^T and dO.V^T once more (7 tile
// products instead of 5) but needs no fp32 dQ accumulator the size of Q and
// no atomics, and is deterministic. Paged KV may share a page between
// sequences, so there pass 2 runs one item per kv head and adds into dK/dV.
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "error.h"

typedef struct bwd_tiles {
  int bq, bk, ld, ldv;
  size_t q, d_o, k, v, s, g, dp, acc, accv, total;
} bwd_tiles;

static bwd_tiles tiles_layout(const fa_plan_data *plan) {
  bwd_tiles t;
  t.bq = plan->block_q;
  t.bk = plan->block_k;
  t.ld = plan->head_dim_pad;
  t.ldv = plan->head_dim_v_pad;
#define GRAN(x) (((size_t)(x) + 15) / 16 * 16)
  t.q = 0;
  t.d_o = t.q + GRAN((size_t)t.bq * t.ld);
  t.k = t.d_o + GRAN((size_t)t.bq * t.ldv);
  t.v = t.k + GRAN((size_t)t.bk * t.ld);
  t.s = t.v + GRAN((size_t)t.bk * t.ldv);
  t.g = t.s + GRAN((size_t)t.bq * t.bk);
  t.dp = t.g + GRAN((size_t)t.bq * t.bk);
  // acc: dK [bk][ld] in pass 2, dQ [bq][ld] in pass 3; accv: dV [bk][ldv].
  size_t acc_rows = t.bk > t.bq ? (size_t)t.bk : (size_t)t.bq;
  t.acc = t.dp + GRAN((size_t)t.bq * t.bk);
  t.accv = t.acc + GRAN(acc_rows * t.ld);
  t.total = t.accv + GRAN((size_t)t.bk * t.ldv);
#undef GRAN
  return t;
}

typedef struct bwd_ctx {
  const fa_problem *p;
  const fa_plan_data *plan;
  const fa_bwd_args *args;
  bwd_tiles t;
  float *delta; // D, [batch][heads_q][seqlen_q]
} bwd_ctx;

static int64_t row_index(const fa_problem *p, int b, int h, int i) {
  return ((int64_t)b * p->a.heads_q + h) * p->a.seqlen_q + i;
}

static void compute_delta(const bwd_ctx *c, int b, int h) {
  const fa_problem *p = c->p;
  const fa_tensor *o = &c->args->o, *d_o = &c->args->d_o;
  const int sq = fa_seq_len_q(p, b), dv = p->a.head_dim_v;
  for (int i = 0; i < sq; i++) {
    int64_t oo = fa_q_offset(p, o, b, i, h), od = fa_q_offset(p, d_o, b, i, h);
    float acc = 0.0f;
    for (int d = 0; d < dv; d++)
      acc += fa_load(o->data, o->dtype, oo + d) *
             fa_load(d_o->data, d_o->dtype, od + d);
    c->delta[row_index(p, b, h, i)] = acc;
  }
}

/* For the tile (q rows row0.., keys col0..) already loaded into ws: scores
   -> P = exp(s - lse) (0 where masked), dP = dO.V^T, then
   dS = P * (dP - D) * dscore/d(q.k), left in the dp tile; P left in s. */
static void tile_grad(const bwd_ctx *c, float *ws, int b, int h, int sq,
                      int sk, int row0, int nr, int col0, int nc) {
  const fa_problem *p = c->p;
  const bwd_tiles *t = &c->t;
  float *s = ws + t->s, *g = ws + t->g, *dp = ws + t->dp;
  const float *q = ws + t->q, *d_o = ws + t->d_o, *k = ws + t->k,
              *v = ws + t->v;
  const int dv = p->a.head_dim_v;
  fa_cpu_scores(p, h, sq, sk, row0, nr, col0, nc, q, k, t->ld, s, g, t->bk);
  for (int r = 0; r < nr; r++) {
    const float lse = c->args->lse[row_index(p, b, h, row0 + r)];
    const float dl = c->delta[row_index(p, b, h, row0 + r)];
    float *sr = s + (size_t)r * t->bk, *gr = g + (size_t)r * t->bk,
          *dpr = dp + (size_t)r * t->bk;
    const float *dor = d_o + (size_t)r * t->ldv;
    for (int j = 0; j < nc; j++) {
      if (sr[j] == -INFINITY) { // masked: no probability, no gradient
        sr[j] = 0.0f;
        dpr[j] = 0.0f;
        continue;
      }
      float pr = expf(sr[j] - lse);
      const float *vj = v + (size_t)j * t->ldv;
      float acc = 0.0f;
      for (int d = 0; d < dv; d++) acc += dor[d] * vj[d];
      sr[j] = pr;
      dpr[j] = pr * (acc - dl) * gr[j];
    }
  }
}

static void load_q_side(const bwd_ctx *c, float *ws, int b, int h, int row0,
                        int nr) {
  const fa_problem *p = c->p;
  fa_cpu_load_q_rows(ws + c->t.q, c->t.ld, p, &c->args->q, b, h, row0, nr,
                     p->a.head_dim);
  fa_cpu_load_q_rows(ws + c->t.d_o, c->t.ldv, p, &c->args->d_o, b, h, row0, nr,
                     p->a.head_dim_v);
}

static void load_k_side(const bwd_ctx *c, float *ws, int b, int hk, int col0,
                        int nc) {
  const fa_problem *p = c->p;
  fa_cpu_load_k_rows(ws + c->t.k, c->t.ld, p, &c->args->k, b, hk, col0, nc,
                     p->a.head_dim);
  fa_cpu_load_k_rows(ws + c->t.v, c->t.ldv, p, &c->args->v, b, hk, col0, nc,
                     p->a.head_dim_v);
}

/* Accumulate dK, dV of keys [col0, col0+nc) of (b, hk) over every q head
   of the group and every q block that sees them; results in acc/accv. */
static void kv_block_grads(const bwd_ctx *c, float *ws, int b, int hk,
                           int kb) {
  const fa_problem *p = c->p;
  const bwd_tiles *t = &c->t;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  const int dim = p->a.head_dim, dv = p->a.head_dim_v;
  float *acc = ws + t->acc, *accv = ws + t->accv;
  memset(acc, 0, sizeof(float) * (size_t)t->bk * t->ld);
  memset(accv, 0, sizeof(float) * (size_t)t->bk * t->ldv);
  load_k_side(c, ws, b, hk, col0, nc);
  const int nqb = (sq + t->bq - 1) / t->bq;
  for (int h = hk * p->group; h < (hk + 1) * p->group; h++)
    for (int qb = 0; qb < nqb; qb++) {
      int kb0, kb1;
      fa_plan_kv_blocks(p, c->plan, sq, sk, qb, &kb0, &kb1);
      if (kb < kb0 || kb >= kb1) continue;
      const int row0 = qb * t->bq, nr = sq - row0 < t->bq ? sq - row0 : t->bq;
      load_q_side(c, ws, b, h, row0, nr);
      tile_grad(c, ws, b, h, sq, sk, row0, nr, col0, nc);
      const float *P = ws + t->s, *dS = ws + t->dp, *q = ws + t->q,
                  *d_o = ws + t->d_o;
      for (int r = 0; r < nr; r++)
        for (int j = 0; j < nc; j++) {
          const float pr = P[(size_t)r * t->bk + j];
          const float ds = dS[(size_t)r * t->bk + j];
          if (pr == 0.0f && ds == 0.0f) continue;
          float *dvj = accv + (size_t)j * t->ldv, *dkj = acc + (size_t)j * t->ld;
          const float *dor = d_o + (size_t)r * t->ldv, *qr = q + (size_t)r * t->ld;
          for (int d = 0; d < dv; d++) dvj[d] += pr * dor[d];
          for (int d = 0; d < dim; d++) dkj[d] += ds * qr[d];
        }
    }
}

/* Write (or add, for paged pools) the dK/dV rows of a kv block. */
static void store_kv_block(const bwd_ctx *c, const float *ws, int b, int hk,
                           int kb, int add) {
  const fa_problem *p = c->p;
  const bwd_tiles *t = &c->t;
  const fa_tensor *dk = &c->args->dk, *dvt = &c->args->dv;
  const int sk = fa_seq_len_k(p, b);
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  const float *acc = ws + t->acc, *accv = ws + t->accv;
  for (int j = 0; j < nc; j++) {
    int64_t ok = fa_k_offset(p, dk, b, col0 + j, hk);
    int64_t ov = fa_k_offset(p, dvt, b, col0 + j, hk);
    for (int d = 0; d < p->a.head_dim; d++) {
      float x = acc[(size_t)j * t->ld + d];
      if (add) x += fa_load(dk->data, dk->dtype, ok + d);
      fa_store(dk->data, dk->dtype, ok + d, x);
    }
    for (int d = 0; d < p->a.head_dim_v; d++) {
      float x = accv[(size_t)j * t->ldv + d];
      if (add) x += fa_load(dvt->data, dvt->dtype, ov + d);
      fa_store(dvt->data, dvt->dtype, ov + d, x);
    }
  }
}

/* Rows of dense dK/dV that no key of the problem occupies (past seqused_k)
   are part of the caller's tensor: they get zero gradient. */
static void zero_unused_rows(const bwd_ctx *c, int b, int hk) {
  const fa_problem *p = c->p;
  int rows = p->varlen_k ? p->a.cu_seqlens_k[b + 1] - p->a.cu_seqlens_k[b]
                         : p->a.seqlen_k;
  const fa_tensor *ts[2] = {&c->args->dk, &c->args->dv};
  const int dims[2] = {p->a.head_dim, p->a.head_dim_v};
  for (int j = fa_seq_len_k(p, b); j < rows; j++)
    for (int x = 0; x < 2; x++) {
      int64_t off = fa_k_offset(p, ts[x], b, j, hk);
      for (int d = 0; d < dims[x]; d++)
        fa_store(ts[x]->data, ts[x]->dtype, off + d, 0.0f);
    }
}

/* Zero the dK/dV slots of every key of every sequence (paged pools). */
static void zero_paged(const bwd_ctx *c, int hk) {
  const fa_problem *p = c->p;
  const fa_tensor *ts[2] = {&c->args->dk, &c->args->dv};
  const int dims[2] = {p->a.head_dim, p->a.head_dim_v};
  for (int b = 0; b < p->a.batch; b++)
    for (int j = 0; j < fa_seq_len_k(p, b); j++)
      for (int x = 0; x < 2; x++) {
        int64_t off = fa_k_offset(p, ts[x], b, j, hk);
        for (int d = 0; d < dims[x]; d++)
          fa_store(ts[x]->data, ts[x]->dtype, off + d, 0.0f);
      }
}

static void q_block_grads(const bwd_ctx *c, float *ws, int b, int h, int qb) {
  const fa_problem *p = c->p;
  const bwd_tiles *t = &c->t;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int row0 = qb * t->bq;
  if (row0 >= sq) return;
  const int nr = sq - row0 < t->bq ? sq - row0 : t->bq;
  const int dim = p->a.head_dim, hk = h / p->group;
  float *acc = ws + t->acc;
  memset(acc, 0, sizeof(float) * (size_t)t->bq * t->ld);
  load_q_side(c, ws, b, h, row0, nr);
  int kb0, kb1;
  fa_plan_kv_blocks(p, c->plan, sq, sk, qb, &kb0, &kb1);
  for (int kb = kb0; kb < kb1; kb++) {
    const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    load_k_side(c, ws, b, hk, col0, nc);
    tile_grad(c, ws, b, h, sq, sk, row0, nr, col0, nc);
    const float *dS = ws + t->dp, *k = ws + t->k;
    for (int r = 0; r < nr; r++) {
      float *dqr = acc + (size_t)r * t->ld;
      for (int j = 0; j < nc; j++) {
        const float ds = dS[(size_t)r * t->bk + j];
        if (ds == 0.0f) continue;
        const float *kj = k + (size_t)j * t->ld;
        for (int d = 0; d < dim; d++) dqr[d] += ds * kj[d];
      }
    }
  }
  const fa_tensor *dq = &c->args->dq;
  for (int r = 0; r < nr; r++)
    fa_store_row(dq->data, dq->dtype, fa_q_offset(p, dq, b, row0 + r, h),
                 acc + (size_t)r * t->ld, dim);
}

fa_status fa_cpu_scalar_backward(void *state, const fa_problem *p,
                                 const fa_plan_data *plan,
                                 const fa_bwd_args *args) {
  fa_cpu_state *st = state;
  bwd_ctx c = {p, plan, args, tiles_layout(plan), NULL};
  const int B = p->a.batch, HQ = p->a.heads_q, HK = p->a.heads_kv;
  const int nkb = plan->num_k_blocks, nqb = plan->num_q_blocks;
  int nt = fa_cpu_threads(st);
  if (nt < 1) nt = 1;
  size_t delta_floats = (size_t)B * HQ * p->a.seqlen_q;
  float *ws = fa_cpu_workspace(
      st, sizeof(float) * (delta_floats + 16 + c.t.total * (size_t)nt));
  if (!ws) return FA_ERR_OUT_OF_MEMORY;
  c.delta = ws;
  float *tiles = ws + (delta_floats + 15) / 16 * 16;
  const int64_t n_bh = (int64_t)B * HQ;
  const int64_t n_kv = p->paged ? HK : (int64_t)B * HK * nkb;
  const int64_t n_q = (int64_t)B * HQ * nqb;

#pragma omp parallel num_threads(nt)
  {
    int tid = 0;
#ifdef _OPENMP
    tid = omp_get_thread_num();
#endif
    float *mine = tiles + c.t.total * (size_t)tid;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_bh; i++)
      compute_delta(&c, (int)(i / HQ), (int)(i % HQ));
    // (implicit barrier: every D is ready)
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_kv; i++) {
      if (p->paged) {
        int hk = (int)i;
        zero_paged(&c, hk);
        for (int b = 0; b < B; b++)
          for (int kb = 0; kb * c.t.bk < fa_seq_len_k(p, b); kb++) {
            kv_block_grads(&c, mine, b, hk, kb);
            store_kv_block(&c, mine, b, hk, kb, 1);
          }
      } else {
        int kb = (int)(i % nkb), hk = (int)(i / nkb % HK),
            b = (int)(i / nkb / HK);
        if (kb == 0) zero_unused_rows(&c, b, hk);
        if (kb * c.t.bk < fa_seq_len_k(p, b)) {
          kv_block_grads(&c, mine, b, hk, kb);
          store_kv_block(&c, mine, b, hk, kb, 0);
        }
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_q; i++) {
      int qb = (int)(i % nqb), h = (int)(i / nqb % HQ), b = (int)(i / nqb / HQ);
      q_block_grads(&c, mine, b, h, qb);
    }
  }
  return FA_OK;
}
