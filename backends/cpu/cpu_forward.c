// SPDX-License-Identifier: MIT
// Forward driver of cpu-scalar: OpenMP over the plan's work items
// (batch, head, q block, kv split); per item a tiled online softmax over the
// visible kv blocks. With kv splits, items leave partial (m, l, O) states
// and a second pass merges them (the merge lemma), row by row.
#include <math.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "error.h"
#include "softmax.h"

/* Per-thread tiles, in floats. */
typedef struct fwd_tiles {
  int bq, bk, ld, ldv;
  size_t q, k, v, s, o, m, l, total;
} fwd_tiles;

static fwd_tiles tiles_layout(const fa_plan_data *plan) {
  fwd_tiles t;
  t.bq = plan->block_q;
  t.bk = plan->block_k;
  t.ld = plan->head_dim_pad;
  t.ldv = plan->head_dim_v_pad;
  // 16-float (64-byte) granules keep every tile cache-line aligned.
#define GRAN(x) (((size_t)(x) + 15) / 16 * 16)
  t.q = 0;
  t.k = t.q + GRAN((size_t)t.bq * t.ld);
  t.v = t.k + GRAN((size_t)t.bk * t.ld);
  t.s = t.v + GRAN((size_t)t.bk * t.ldv);
  t.o = t.s + GRAN((size_t)t.bq * t.bk);
  t.m = t.o + GRAN((size_t)t.bq * t.ldv);
  t.l = t.m + GRAN(t.bq);
  t.total = t.l + GRAN(t.bq);
#undef GRAN
  return t;
}

/* Partial states of split-KV items: [item][row] (m, l) and O rows. */
typedef struct partials {
  float *ml;  // [num_work][block_q][2]
  float *o;   // [num_work][block_q][head_dim_v]
} partials;

static float sink_of(const fa_problem *p, int h) {
  return p->a.sinks ? p->a.sinks[h] : NAN;
}

static void store_row(const fa_problem *p, const fa_fwd_args *args, int b,
                      int h, int i, const float *o_row, float scale_o,
                      float lse) {
  const int dv = p->a.head_dim_v;
  const fa_tensor *o = &args->o;
  int64_t off = fa_q_offset(p, o, b, i, h);
  for (int d = 0; d < dv; d++)
    fa_store(o->data, o->dtype, off + d, o_row[d] * scale_o);
  if (args->lse)
    args->lse[((int64_t)b * p->a.heads_q + h) * p->a.seqlen_q + i] = lse;
}

static void run_item(const fa_problem *p, const fa_plan_data *plan,
                     const fa_fwd_args *args, const fwd_tiles *t, float *ws,
                     int64_t w, partials *part) {
  int b, h, qb, split;
  fa_plan_work_item(p, plan, w, &b, &h, &qb, &split);
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int row0 = qb * t->bq;
  if (row0 >= sq) return;
  const int nr = sq - row0 < t->bq ? sq - row0 : t->bq;
  const int hk = h / p->group, dv = p->a.head_dim_v;
  float *q = ws + t->q, *k = ws + t->k, *v = ws + t->v, *s = ws + t->s;
  float *o = ws + t->o, *m = ws + t->m, *l = ws + t->l;

  fa_cpu_load_q_rows(q, t->ld, p, &args->q, b, h, row0, nr, p->a.head_dim);
  for (int r = 0; r < nr; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int d = 0; d < dv; d++) o[(size_t)r * t->ldv + d] = 0.0f;
  }

  int kb0, kb1, s0, s1;
  fa_plan_kv_blocks(p, plan, sq, sk, qb, &kb0, &kb1);
  fa_plan_split_range(kb0, kb1, plan->num_splits, split, &s0, &s1);
  for (int kb = s0; kb < s1; kb++) {
    const int col0 = kb * t->bk;
    const int nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    fa_cpu_load_k_rows(k, t->ld, p, &args->k, b, hk, col0, nc, p->a.head_dim);
    fa_cpu_load_k_rows(v, t->ldv, p, &args->v, b, hk, col0, nc, dv);
    fa_cpu_scores(p, h, sq, sk, row0, nr, col0, nc, q, k, t->ld, s, NULL,
                  t->bk);
    for (int r = 0; r < nr; r++) {
      float *sr = s + (size_t)r * t->bk, *orow = o + (size_t)r * t->ldv;
      float alpha = fa_softmax_update(&m[r], &l[r], sr, nc);
      if (alpha != 1.0f)
        for (int d = 0; d < dv; d++) orow[d] *= alpha;
      for (int c = 0; c < nc; c++) {
        const float pc = sr[c];
        if (pc == 0.0f) continue;
        const float *vc = v + (size_t)c * t->ldv;
        for (int d = 0; d < dv; d++) orow[d] += pc * vc[d];
      }
    }
  }

  if (plan->num_splits == 1) {
    for (int r = 0; r < nr; r++) {
      float lse, inv = fa_softmax_finalize(m[r], l[r], sink_of(p, h), &lse);
      store_row(p, args, b, h, row0 + r, o + (size_t)r * t->ldv, inv, lse);
    }
    return;
  }
  float *pml = part->ml + (size_t)w * t->bq * 2;
  float *po = part->o + (size_t)w * t->bq * dv;
  for (int r = 0; r < nr; r++) {
    pml[2 * r] = m[r];
    pml[2 * r + 1] = l[r];
    for (int d = 0; d < dv; d++)
      po[(size_t)r * dv + d] = o[(size_t)r * t->ldv + d];
  }
}

/* Merge the splits of (b, h, qb) row by row, in split order. */
static void merge_item(const fa_problem *p, const fa_plan_data *plan,
                       const fa_fwd_args *args, const partials *part,
                       float *acc, int64_t w0) {
  int b, h, qb, split;
  fa_plan_work_item(p, plan, w0, &b, &h, &qb, &split);
  const int sq = fa_seq_len_q(p, b), bq = plan->block_q, dv = p->a.head_dim_v;
  const int row0 = qb * bq;
  if (row0 >= sq) return;
  const int nr = sq - row0 < bq ? sq - row0 : bq;
  for (int r = 0; r < nr; r++) {
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < dv; d++) acc[d] = 0.0f;
    for (int sp = 0; sp < plan->num_splits; sp++) {
      int64_t w = w0 + sp;
      const float *pml = part->ml + ((size_t)w * bq + r) * 2;
      const float *po = part->o + ((size_t)w * bq + r) * dv;
      fa_softmax_merge(&m, &l, acc, pml[0], pml[1], po, dv);
    }
    float lse, inv = fa_softmax_finalize(m, l, sink_of(p, h), &lse);
    store_row(p, args, b, h, row0 + r, acc, inv, lse);
  }
}

fa_status fa_cpu_scalar_forward(void *state, const fa_problem *p,
                                const fa_plan_data *plan,
                                const fa_fwd_args *args) {
  fa_cpu_state *st = state;
  const fwd_tiles t = tiles_layout(plan);
  int nt = fa_cpu_threads(st);
  if ((int64_t)nt > plan->num_work) nt = (int)plan->num_work;
  if (nt < 1) nt = 1;
  const int dv = p->a.head_dim_v;
  size_t part_floats = plan->num_splits > 1
                           ? (size_t)plan->num_work * plan->block_q * (2 + dv)
                           : 0;
  size_t merge_floats = plan->num_splits > 1 ? (size_t)nt * (dv + 16) : 0;
  float *ws = fa_cpu_workspace(
      st, sizeof(float) * (t.total * nt + part_floats + merge_floats));
  if (!ws) return FA_ERR_OUT_OF_MEMORY;
  partials part = {ws + t.total * nt,
                   ws + t.total * nt + (size_t)plan->num_work * plan->block_q * 2};
  float *merge_acc = ws + t.total * nt + part_floats;
  const int64_t nwork = plan->num_work;

#pragma omp parallel num_threads(nt)
  {
    int tid = 0;
#ifdef _OPENMP
    tid = omp_get_thread_num();
#endif
    float *mine = ws + t.total * (size_t)tid;
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < nwork; w++)
      run_item(p, plan, args, &t, mine, w, &part);
    if (plan->num_splits > 1) {
      float *acc = merge_acc + (size_t)tid * (dv + 16);
#pragma omp for schedule(dynamic, 1)
      for (int64_t w = 0; w < nwork; w += plan->num_splits)
        merge_item(p, plan, args, &part, acc, w);
    }
  }
  return FA_OK;
}
