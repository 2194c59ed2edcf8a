// SPDX-License-Identifier: MIT
// The CUDA module's device-side copy of the core's semantics
// (backends/cuda/cuda_semantics.h) against the core itself, compiled as
// plain C on the host: visible-key windows and their inverse, lengths, row
// addressing (varlen, paged), the score transform, the plan's kv block
// ranges, split ranges and work order, the softmax finalise/merge. Also the
// tile table (sm80_tiles.def) against the core's planner: for every row the
// planner, given the backend's capabilities, must choose exactly the row's
// B_r x B_c. Needs no GPU: runs in CI.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_semantics.h"
#include "plan.h"
#include "problem.h"
#include "softmax.h"
#include "tensor.h"

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      if (failures++ < 20) {                                                   \
        printf("FAIL %s:%d: ", __FILE__, __LINE__);                            \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
      }                                                                        \
    }                                                                          \
  } while (0)

/* The module's view of a core problem, as cuda_backend.c fills it. */
static void to_params(const fa_problem *p, const fa_plan_data *plan,
                      fa_cuda_params *q) {
  const fa_attention *a = &p->a;
  memset(q, 0, sizeof *q);
  q->batch = a->batch;
  q->seqlen_q = a->seqlen_q;
  q->seqlen_k = a->seqlen_k;
  q->heads_q = a->heads_q;
  q->heads_kv = a->heads_kv;
  q->group = p->group;
  q->head_dim = a->head_dim;
  q->head_dim_v = a->head_dim_v;
  q->scale = a->scale;
  q->softcap = a->softcap;
  q->window_left = a->window_left;
  q->window_right = a->window_right;
  q->top_left = p->top_left;
  q->varlen_q = p->varlen_q;
  q->varlen_k = p->varlen_k;
  q->paged = p->paged;
  q->alibi_slopes = a->alibi_slopes;
  q->cu_seqlens_q = a->cu_seqlens_q;
  q->cu_seqlens_k = a->cu_seqlens_k;
  q->seqused_k = a->seqused_k;
  q->block_table = a->block_table;
  q->max_blocks_per_seq = a->max_blocks_per_seq;
  q->page_size = a->page_size;
  q->block_q = plan->block_q;
  q->block_k = plan->block_k;
  q->pack_group = plan->pack_group;
  q->block_rows = plan->block_rows;
  q->num_q_blocks = plan->num_q_blocks;
  q->num_splits = plan->num_splits;
  q->num_work = plan->num_work;
}

static void check_problem(ts_rng *r, int case_no) {
  int B = ts_rng_int(r, 1, 4), sq = ts_rng_int(r, 1, 300),
      sk = ts_rng_int(r, 1, 300);
  int hkv = ts_rng_int(r, 1, 3), hq = hkv * ts_rng_int(r, 1, 4);
  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = sq;
  a.seqlen_k = sk;
  a.heads_q = hq;
  a.heads_kv = hkv;
  a.head_dim = 64;
  int mask = ts_rng_int(r, 0, 5);
  if (mask == 1) a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  if (mask == 2) a.causal = FA_CAUSAL_TOP_LEFT;
  if (mask == 3) {
    a.window_left = ts_rng_int(r, 0, 40);
    a.window_right = ts_rng_int(r, 0, 40);
  }
  if (mask == 4) {
    a.causal = ts_rng_int(r, 1, 2);
    a.window_left = ts_rng_int(r, 0, 100);
  }
  if (mask == 5) a.window_right = ts_rng_int(r, 0, 5);
  float slopes[12];
  for (int h = 0; h < 12; h++) slopes[h] = 0.1f * (float)(h + 1);
  if (ts_rng_int(r, 0, 1)) a.alibi_slopes = slopes;
  if (ts_rng_int(r, 0, 1)) a.softcap = 5.0f;
  int32_t cuq[5], cuk[5], used[4], table[4 * 400];
  int layout = ts_rng_int(r, 0, 3); // dense, varlen, varlen+seqused, paged
  if (layout == 1 || layout == 2) {
    cuq[0] = cuk[0] = ts_rng_int(r, 0, 7);
    for (int b = 0; b < B; b++) {
      cuq[b + 1] = cuq[b] + ts_rng_int(r, 0, sq);
      cuk[b + 1] = cuk[b] + ts_rng_int(r, 0, sk);
    }
    a.cu_seqlens_q = cuq;
    a.cu_seqlens_k = cuk;
    if (layout == 2) {
      for (int b = 0; b < B; b++)
        used[b] = ts_rng_int(r, 0, cuk[b + 1] - cuk[b]);
      a.seqused_k = used;
    }
  } else if (layout == 3) {
    a.page_size = ts_rng_int(r, 1, 40);
    a.max_blocks_per_seq = (sk + a.page_size - 1) / a.page_size;
    a.num_pages = 1000;
    for (int i = 0; i < B * a.max_blocks_per_seq; i++)
      table[i] = ts_rng_int(r, 0, 999);
    a.block_table = table;
    for (int b = 0; b < B; b++) used[b] = ts_rng_int(r, 0, sk);
    a.seqused_k = used;
  }
  fa_problem p;
  if (fa_problem_init(&p, &a, FA_BF16) || fa_problem_check_arrays(&p)) {
    CHECK(0, "case %d: problem rejected: %s", case_no, fa_last_error());
    return;
  }
  fa_caps caps = {fa_cuda_plan_mem_bytes, 132, fa_cuda_plan_align,
                  fa_cuda_plan_max_bq, fa_cuda_plan_max_bk, 128,
                  ts_rng_int(r, 0, 1), 0};
  fa_plan_data plan;
  fa_plan_compute(&p, &caps, &plan);
  fa_cuda_params q;
  to_params(&p, &plan, &q);
  fa_tensor t = {NULL, FA_BF16, 7777, 123, 17};
  fa_cuda_view v = {NULL, 7777, 123, 17};

  for (int b = 0; b < B; b++) {
    int lq = fa_seq_len_q(&p, b), lk = fa_seq_len_k(&p, b);
    CHECK(fa_cu_len_q(&q, b) == lq, "case %d: len_q", case_no);
    CHECK(fa_cu_len_k(&q, b) == lk, "case %d: len_k", case_no);
    int shift = fa_diag_shift(&p, lq, lk);
    CHECK(fa_cu_shift(&q, lq, lk) == shift, "case %d: shift", case_no);
    for (int i = 0; i < lq; i++) {
      int lo, hi, clo, chi;
      fa_visible_keys(&p, i, lq, lk, &lo, &hi);
      fa_cu_visible(&q, i, lq, lk, &clo, &chi);
      CHECK(lo == clo && hi == chi, "case %d: visible(b=%d, i=%d)", case_no,
            b, i);
      for (int h = 0; h < hq; h += 2)
        CHECK(fa_q_offset(&p, &t, b, i, h) == fa_cu_q_offset(&q, &v, b, i, h),
              "case %d: q offset", case_no);
    }
    for (int j = 0; j < lk; j++) {
      int i0, i1, first = -1, last = -1;
      fa_cu_queries_of_key(&q, j, lq, lk, &i0, &i1);
      for (int i = 0; i < lq; i++) {
        int lo, hi;
        fa_visible_keys(&p, i, lq, lk, &lo, &hi);
        if (lo <= j && j < hi) {
          if (first < 0) first = i;
          last = i;
          CHECK(i >= i0 && i < i1, "case %d: query %d sees key %d outside "
                "[%d, %d)", case_no, i, j, i0, i1);
        }
      }
      if (first >= 0)
        CHECK(i0 == first && i1 == last + 1, "case %d: key %d: queries "
              "[%d, %d), expected [%d, %d]", case_no, j, i0, i1, first, last);
      else
        CHECK(i0 >= i1, "case %d: key %d seen by none, range [%d, %d)",
              case_no, j, i0, i1);
      for (int h = 0; h < hkv; h++)
        CHECK(fa_k_offset(&p, &t, b, j, h) == fa_cu_k_offset(&q, &v, b, j, h),
              "case %d: k offset", case_no);
      float s = (float)ts_rng_normal(r) * 4.0f;
      int i = lq ? ts_rng_int(r, 0, lq - 1) : 0;
      float x = fa_score_transform(&p, s, hq - 1, i, j, shift);
      float y = fa_cu_transform(&q, s, hq - 1, i, j, shift);
      CHECK(memcmp(&x, &y, 4) == 0, "case %d: transform %g vs %g", case_no,
            (double)x, (double)y);
    }
    for (int qb = 0; qb < plan.num_q_blocks; qb++) {
      int k0, k1, c0, c1;
      fa_plan_kv_blocks(&p, &plan, lq, lk, qb, &k0, &k1);
      fa_cu_kv_blocks(&q, plan.block_rows, plan.block_k, lq, lk, qb, &c0, &c1);
      CHECK(k0 == c0 && k1 == c1, "case %d: kv blocks of q block %d",
            case_no, qb);
    }
  }
  for (int64_t w = 0; w < plan.num_work; w++) {
    int b, h, qb, sp, cb, ch, cqb, csp;
    fa_plan_work_item(&p, &plan, w, &b, &h, &qb, &sp);
    fa_cu_work_item(&q, w, &cb, &ch, &cqb, &csp);
    CHECK(b == cb && h == ch && qb == cqb && sp == csp,
          "case %d: work item %lld", case_no, (long long)w);
  }
  for (int n = 1; n < 9; n++)
    for (int sp = 0; sp < n; sp++) {
      int a0, a1, c0, c1, lo = ts_rng_int(r, 0, 5), hi = ts_rng_int(r, 0, 30);
      fa_plan_split_range(lo, hi, n, sp, &a0, &a1);
      fa_cu_split_range(lo, hi, n, sp, &c0, &c1);
      CHECK(a0 == c0 && a1 == c1, "case %d: split range", case_no);
    }
}

static void check_softmax(ts_rng *r) {
  const float specials[] = {-INFINITY, 0.0f, 1.5f, -3.0f, 40.0f};
  for (int n = 0; n < 2000; n++) {
    float m = n % 7 == 0 ? -INFINITY : (float)ts_rng_normal(r) * 5.0f;
    float l = m == -INFINITY ? 0.0f : (float)ts_rng_uniform(r) * 10.0f + 0.1f;
    float sink = n % 3 == 0 ? NAN : specials[n % 5];
    float lse1, lse2;
    float f1 = fa_softmax_finalize(m, l, sink, &lse1);
    float f2 = fa_cu_finalize(m, l, sink, &lse2);
    CHECK(memcmp(&f1, &f2, 4) == 0 && memcmp(&lse1, &lse2, 4) == 0,
          "finalize(%g, %g, %g)", (double)m, (double)l, (double)sink);
    float mb = n % 5 == 0 ? -INFINITY : (float)ts_rng_normal(r) * 5.0f;
    float lb = mb == -INFINITY ? 0.0f : 2.0f;
    float ma = m, la = l, oa = 1.0f, ob = 3.0f, mc = m, lc = l, oc = 1.0f;
    fa_softmax_merge(&ma, &la, &oa, mb, lb, &ob, 1);
    float wa = 1.0f, wb = 1.0f;
    int how = fa_cu_merge_weights(&mc, &lc, mb, lb, &wa, &wb);
    if (how == 1) oc = ob;
    if (how == 2) oc = oc * wa + ob * wb;
    CHECK(memcmp(&ma, &mc, 4) == 0 && memcmp(&la, &lc, 4) == 0 &&
              memcmp(&oa, &oc, 4) == 0,
          "merge(%g, %g) with (%g, %g)", (double)m, (double)l, (double)mb,
          (double)lb);
  }
}

/* Every tile row is what the core's planner picks for long sequences. */
static void check_tiles(void) {
  fa_caps caps = {fa_cuda_plan_mem_bytes, 132, fa_cuda_plan_align,
                  fa_cuda_plan_max_bq, fa_cuda_plan_max_bk, 128, 1, 0};
  for (int i = 0; i < fa_cuda_num_tiles; i++) {
    const fa_cuda_tile *t = &fa_cuda_tiles[i];
    fa_attention a;
    fa_attention_init(&a);
    a.batch = 2;
    a.seqlen_q = a.seqlen_k = 4096;
    a.heads_q = a.heads_kv = 4;
    a.head_dim = t->head_dim;
    fa_problem p;
    CHECK(fa_problem_init(&p, &a, FA_BF16) == FA_OK, "tile d%d: problem",
          t->head_dim);
    fa_plan_data plan;
    fa_plan_compute(&p, &caps, &plan);
    CHECK(plan.block_q == t->block_q && plan.block_k == t->block_k,
          "tile d%d: planner chose %dx%d, the table says %dx%d", t->head_dim,
          plan.block_q, plan.block_k, t->block_q, t->block_k);
    CHECK(t->block_q == 16 * t->m_tiles * t->warps,
          "tile d%d: block_q != 16 * m_tiles * warps", t->head_dim);
    CHECK(t->smem_bytes <= 163 * 1024, "tile d%d: %d bytes of smem exceed "
          "an A100's 163 KB", t->head_dim, t->smem_bytes);
    printf("tile d%-3d: %3d x %2d, %d warps x %d m-tiles, Q in %s, %6d "
           "bytes smem: matches the planner\n",
           t->head_dim, t->block_q, t->block_k, t->warps, t->m_tiles,
           t->q_in_regs ? "registers" : "smem", t->smem_bytes);
  }
}

int main(void) {
  uint64_t seed = ts_seed_base();
  ts_rng r;
  ts_rng_seed(&r, seed);
  printf("test_cuda_mirror: seed 0x%llx\n", (unsigned long long)seed);
  for (int c = 0; c < 400; c++) check_problem(&r, c);
  check_softmax(&r);
  check_tiles();
  if (failures) {
    printf("%d checks failed (FA_TEST_SEED=0x%llx reproduces)\n", failures,
           (unsigned long long)seed);
    return 1;
  }
  printf("all mirror checks passed\n");
  return 0;
}
