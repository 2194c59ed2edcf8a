// SPDX-License-Identifier: MIT
// backends/gpu/gpu_semantics.h (the device copy of the core's semantics that
// the HIP kernels use) against the core, compiled as plain C, on a grid of
// problems: lengths, visible keys and their inverse, row offsets (dense,
// varlen, paged), the score transform, kv blocks, split ranges, the work
// order, merge weights and finalisation. No GPU needed; label hip + unit.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu_semantics.h"
#include "plan.h"
#include "problem.h"
#include "softmax.h"

static int failures;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      if (failures++ < 20) {                                                   \
        printf("FAIL line %d: ", __LINE__);                                    \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
      }                                                                        \
    }                                                                          \
  } while (0)

static void to_gpu(const fa_problem *p, const fa_plan_data *pl,
                   fa_gpu_params *g) {
  const fa_attention *a = &p->a;
  memset(g, 0, sizeof *g);
  g->batch = a->batch;
  g->seqlen_q = a->seqlen_q;
  g->seqlen_k = a->seqlen_k;
  g->heads_q = a->heads_q;
  g->heads_kv = a->heads_kv;
  g->group = p->group;
  g->head_dim = a->head_dim;
  g->head_dim_v = a->head_dim_v;
  g->scale = a->scale;
  g->softcap = a->softcap;
  g->window_left = a->window_left;
  g->window_right = a->window_right;
  g->top_left = p->top_left;
  g->varlen_q = p->varlen_q;
  g->varlen_k = p->varlen_k;
  g->paged = p->paged;
  g->alibi_slopes = a->alibi_slopes;
  g->cu_seqlens_q = a->cu_seqlens_q;
  g->cu_seqlens_k = a->cu_seqlens_k;
  g->seqused_k = a->seqused_k;
  g->block_table = a->block_table;
  g->max_blocks_per_seq = a->max_blocks_per_seq;
  g->page_size = a->page_size;
  g->block_q = pl->block_q;
  g->block_k = pl->block_k;
  g->pack_group = pl->pack_group;
  g->block_rows = pl->block_rows;
  g->num_q_blocks = pl->num_q_blocks;
  g->num_splits = pl->num_splits;
  g->num_work = pl->num_work;
}

static void check_problem(const fa_attention *a, const char *what) {
  fa_problem p;
  if (fa_problem_init(&p, a, FA_BF16) != FA_OK) {
    CHECK(0, "%s: fa_problem_init failed", what);
    return;
  }
  // The HIP module's capabilities (hip_backend.c), plus a small one.
  fa_caps caps[2] = {{512 * 1024, 608, 32, 128, 64, 128, 1, 0},
                     {4096, 4, 32, 128, 64, 8, 1, 0}};
  for (int c = 0; c < 2; c++) {
    fa_plan_data pl;
    fa_plan_compute(&p, &caps[c], &pl);
    fa_gpu_params g;
    to_gpu(&p, &pl, &g);
    fa_tensor t = {NULL, FA_BF16, 1000, 37, 5};
    fa_gpu_view v = {NULL, 1000, 37, 5};
    for (int b = 0; b < a->batch; b++) {
      int sq = fa_seq_len_q(&p, b), sk = fa_seq_len_k(&p, b);
      CHECK(fa_gpu_len_q(&g, b) == sq && fa_gpu_len_k(&g, b) == sk,
            "%s: lengths of sequence %d", what, b);
      CHECK(fa_gpu_shift(&g, sq, sk) == fa_diag_shift(&p, sq, sk), "%s: shift",
            what);
      for (int i = 0; i < sq; i++) {
        int lo, hi, glo, ghi;
        fa_visible_keys(&p, i, sq, sk, &lo, &hi);
        fa_gpu_visible(&g, i, sq, sk, &glo, &ghi);
        CHECK(lo == glo && hi == ghi, "%s: visible keys of row %d", what, i);
        for (int h = 0; h < a->heads_q; h += 3)
          CHECK(fa_q_offset(&p, &t, b, i, h) == fa_gpu_q_offset(&g, &v, b, i, h),
                "%s: q offset", what);
      }
      for (int j = 0; j < sk; j++) {
        int i0, i1;
        fa_gpu_queries_of_key(&g, j, sq, sk, &i0, &i1);
        for (int i = 0; i < sq; i++) {
          int lo, hi;
          fa_visible_keys(&p, i, sq, sk, &lo, &hi);
          if (lo <= j && j < hi)
            CHECK(i >= i0 && i < i1, "%s: query %d sees key %d outside [%d, %d)",
                  what, i, j, i0, i1);
        }
        for (int h = 0; h < a->heads_kv; h++)
          CHECK(fa_k_offset(&p, &t, b, j, h) == fa_gpu_k_offset(&g, &v, b, j, h),
                "%s: k offset of key %d", what, j);
        float s = 0.37f * (float)(j % 7) - 1.0f;
        CHECK(fa_score_transform(&p, s, 1 % a->heads_q, 3, j, sk - sq) ==
                  fa_gpu_transform(&g, s, 1 % a->heads_q, 3, j, sk - sq),
              "%s: score transform", what);
      }
      for (int qb = 0; qb < pl.num_q_blocks; qb++) {
        int k0, k1, g0, g1;
        fa_plan_kv_blocks(&p, &pl, sq, sk, qb, &k0, &k1);
        fa_gpu_kv_blocks(&g, pl.block_rows, pl.block_k, sq, sk, qb, &g0, &g1);
        CHECK(k0 == g0 && k1 == g1, "%s: kv blocks of q block %d", what, qb);
        for (int sp = 0; sp < pl.num_splits; sp++) {
          fa_plan_split_range(k0, k1, pl.num_splits, sp, &k0, &k1);
          fa_gpu_split_range(g0, g1, pl.num_splits, sp, &g0, &g1);
          CHECK(k0 == g0 && k1 == g1, "%s: split %d", what, sp);
          fa_plan_kv_blocks(&p, &pl, sq, sk, qb, &k0, &k1);
          fa_gpu_kv_blocks(&g, pl.block_rows, pl.block_k, sq, sk, qb, &g0, &g1);
        }
      }
    }
    for (int64_t w = 0; w < pl.num_work; w++) {
      int b, h, qb, sp, gb, gh, gqb, gsp;
      fa_plan_work_item(&p, &pl, w, &b, &h, &qb, &sp);
      fa_gpu_work_item(&g, w, &gb, &gh, &gqb, &gsp);
      CHECK(b == gb && h == gh && qb == gqb && sp == gsp, "%s: work item %lld",
            what, (long long)w);
    }
  }
}

static void check_softmax(void) {
  const float ms[] = {-INFINITY, -3.0f, 0.0f, 2.5f, 40.0f};
  const float sinks[] = {NAN, -1.0f, 3.0f};
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++) {
      float ma = ms[a], la = ma == -INFINITY ? 0.0f : 1.5f, oa = 2.0f;
      float mb = ms[b], lb = mb == -INFINITY ? 0.0f : 0.7f, ob = -1.0f;
      fa_softmax_merge(&ma, &la, &oa, mb, lb, &ob, 1);
      float gm = ms[a], gl = ms[a] == -INFINITY ? 0.0f : 1.5f, wa = 1, wb = 1;
      int how = fa_gpu_merge_weights(&gm, &gl, mb, lb, &wa, &wb);
      float go = how == 0 ? 2.0f : how == 1 ? ob : 2.0f * wa + ob * wb;
      CHECK(gm == ma && gl == la && go == oa, "merge %d %d", a, b);
      for (int s = 0; s < 3; s++) {
        float l1, l2;
        float f1 = fa_softmax_finalize(ms[a], la, sinks[s], &l1);
        float f2 = fa_gpu_finalize(ms[a], la, sinks[s], &l2);
        CHECK(f1 == f2 && (l1 == l2 || (isnan(l1) && isnan(l2))),
              "finalize m=%g sink=%g", ms[a], sinks[s]);
      }
    }
}

int main(void) {
  static const int32_t cu_q[] = {0, 5, 5, 40}, cu_k[] = {0, 9, 30, 95};
  static const int32_t used[] = {7, 0, 33};
  static const int32_t table[] = {3, 1, 4, 0, 5, 2, 7, 6, 8, 9, 10, 11};
  static const float slopes[] = {0.5f, 0.25f, 0.125f, 0.0625f};
  const int causal[] = {0, FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT};
  const int wins[][2] = {{-1, -1}, {8, 0}, {3, 5}, {0, -1}};
  int n = 0;
  for (int c = 0; c < 3; c++)
    for (int wi = 0; wi < 4; wi++)
      for (int mode = 0; mode < 3; mode++) { // dense, varlen, paged
        fa_attention a;
        fa_attention_init(&a);
        a.batch = 3;
        a.seqlen_q = mode == 1 ? 35 : 37;
        a.seqlen_k = mode == 1 ? 65 : mode == 2 ? 33 : 130;
        a.heads_q = 4;
        a.heads_kv = 2;
        a.head_dim = 64;
        a.causal = causal[c];
        if (!c) {
          a.window_left = wins[wi][0];
          a.window_right = wins[wi][1];
        }
        a.softcap = wi == 2 ? 30.0f : 0.0f;
        a.alibi_slopes = wi == 3 ? slopes : NULL;
        if (mode == 1) {
          a.cu_seqlens_q = cu_q;
          a.cu_seqlens_k = cu_k;
        }
        if (mode == 2) {
          a.block_table = table;
          a.max_blocks_per_seq = 4;
          a.page_size = 9;
          a.num_pages = 12;
          a.seqused_k = used;
        }
        char what[96];
        snprintf(what, sizeof what, "causal=%d window=%d,%d mode=%d", a.causal,
                 a.window_left, a.window_right, mode);
        check_problem(&a, what);
        n++;
      }
  check_softmax();
  if (failures) {
    printf("%d checks failed\n", failures);
    return 1;
  }
  printf("gpu_semantics.h agrees with the core on %d problems\n", n);
  return 0;
}
