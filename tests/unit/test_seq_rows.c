// SPDX-License-Identifier: MIT
// core/seq_rows.h and core/flat_problem.h -- the problem as every kernel
// (CPU and GPU) reads it: fa_problem_flat, the clamped reads of cu_seqlens,
// seqused_k and block_table, and the flat problem's calls of the rules --
// on problems the core validated (a fixed grid of every mask x layout, and
// random ones with explicit positions), where every clamp must be the
// identity: lengths and offsets equal the arrays read as the header defines
// them, and the rules' calls equal the core's (fa_diag_shift,
// fa_visible_keys and its exact inverse, fa_plan_kv_blocks,
// fa_plan_work_item, fa_score_transform). Then arrays nobody checked (a GPU
// context's device arrays): every sequence stays inside its tensors and
// every paged offset inside the pool, or is -1.
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "plan.h"
#include "problem.h"
#include "seq_rows.h"

/* The header's definitions, read without clamps. */
static int want_len_q(const fa_attention *a, int b) {
  return a->cu_seqlens_q ? a->cu_seqlens_q[b + 1] - a->cu_seqlens_q[b]
                         : a->seqlen_q;
}

static int want_len_k(const fa_attention *a, int b) {
  if (a->seqused_k) return a->seqused_k[b];
  return a->cu_seqlens_k ? a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b]
                         : a->seqlen_k;
}

static int64_t want_q_offset(const fa_attention *a, const fa_tensor_view *t,
                             int b, int i, int h) {
  if (a->cu_seqlens_q)
    return ((int64_t)a->cu_seqlens_q[b] + i) * t->ss + (int64_t)h * t->sh;
  return (int64_t)b * t->sb + (int64_t)i * t->ss + (int64_t)h * t->sh;
}

static int64_t want_k_offset(const fa_attention *a, const fa_tensor_view *t,
                             int b, int j, int h) {
  if (a->block_table) {
    int64_t page =
        a->block_table[(int64_t)b * a->max_blocks_per_seq + j / a->page_size];
    return page * t->sb + (int64_t)(j % a->page_size) * t->ss +
           (int64_t)h * t->sh;
  }
  if (a->cu_seqlens_k)
    return ((int64_t)a->cu_seqlens_k[b] + j) * t->ss + (int64_t)h * t->sh;
  return (int64_t)b * t->sb + (int64_t)j * t->ss + (int64_t)h * t->sh;
}

/* Everything on a validated problem p, planned with caps. */
static void compare(const fa_problem *p, const fa_caps *caps,
                    const char *what) {
  fa_plan_data plan;
  fa_plan_compute(p, caps, &plan);
  const fa_flat_problem f = fa_problem_flat(p);
  const fa_flat_plan g = fa_plan_flat(&plan);
  const fa_attention *a = &p->a;
  const fa_tensor_view t = {NULL, 7777, 123, 17};
  for (int b = 0; b < a->batch; b++) {
    const int lq = fa_seq_rows_q(&f, b), lk = fa_seq_rows_k(&f, b);
    CHECK(lq == want_len_q(a, b) && lk == want_len_k(a, b),
          "%s: lengths of sequence %d: %d %d, want %d %d", what, b, lq, lk,
          want_len_q(a, b), want_len_k(a, b));
    CHECK(fa_seq_len_q(p, b) == lq && fa_seq_len_k(p, b) == lk,
          "%s: fa_seq_len_q/k", what);
    const int64_t shift = fa_diag_shift(p, b, lq, lk);
    CHECK(fa_flat_shift(&f, lq, lk) == shift, "%s: shift %d, want %lld", what,
          fa_flat_shift(&f, lq, lk), (long long)shift);
    for (int i = 0; i < lq; i++) {
      int lo, hi, flo, fhi;
      fa_visible_keys(p, shift, i, lk, &lo, &hi);
      fa_flat_visible(&f, i, lq, lk, &flo, &fhi);
      CHECK(lo == flo && hi == fhi, "%s: visible keys (b=%d, i=%d)", what, b,
            i);
      for (int h = 0; h < a->heads_q; h += 2)
        CHECK(fa_seq_q_offset(&f, &t, b, i, h) == want_q_offset(a, &t, b, i, h),
              "%s: q offset (b=%d, i=%d, h=%d)", what, b, i, h);
    }
    for (int j = 0; j < lk; j++) {
      int i0, i1, first = -1, last = -1;
      fa_flat_queries_of_key(&f, j, lq, lk, &i0, &i1);
      CHECK(0 <= i0 && i0 <= i1 && i1 <= lq,
            "%s: key %d: queries [%d, %d) outside [0, %d]", what, j, i0, i1,
            lq);
      for (int i = 0; i < lq; i++) {
        int lo, hi;
        fa_visible_keys(p, shift, i, lk, &lo, &hi);
        if (lo <= j && j < hi) {
          if (first < 0) first = i;
          last = i;
        }
      }
      if (first >= 0)
        CHECK(i0 == first && i1 == last + 1,
              "%s: key %d: queries [%d, %d), want [%d, %d]", what, j, i0, i1,
              first, last);
      else
        CHECK(i0 >= i1, "%s: key %d is seen by none, range [%d, %d)", what, j,
              i0, i1);
      for (int h = 0; h < a->heads_kv; h++)
        CHECK(fa_seq_k_offset(&f, &t, b, j, h) == want_k_offset(a, &t, b, j, h),
              "%s: k offset (b=%d, j=%d, h=%d)", what, b, j, h);
      const float s = (float)ut_rand_uniform(-20.0, 20.0);
      const int i = lq ? ut_rand_int(0, lq - 1) : 0;
      const float x = fa_score_transform(p, s, a->heads_q - 1, i, j, shift);
      const float y =
          fa_flat_transform(&f, s, a->heads_q - 1, i, j, (int)shift);
      CHECK(memcmp(&x, &y, sizeof x) == 0, "%s: transform %g, want %g", what,
            (double)y, (double)x);
    }
    for (int qb = 0; qb < plan.num_q_blocks; qb++) {
      int k0, k1, f0, f1;
      fa_plan_kv_blocks(p, &plan, shift, lq, lk, qb, &k0, &k1);
      fa_flat_kv_blocks(&f, g.block_rows, g.block_k, lq, lk, qb, &f0, &f1);
      CHECK(k0 == f0 && k1 == f1, "%s: kv blocks of q block %d", what, qb);
    }
  }
  for (int64_t w = 0; w < plan.num_work; w++) {
    int b, h, qb, sp, fb, fh, fqb, fsp;
    fa_plan_work_item(p, &plan, w, &b, &h, &qb, &sp);
    fa_flat_work_item(&f, &g, w, &fb, &fh, &fqb, &fsp);
    CHECK(b == fb && h == fh && qb == fqb && sp == fsp, "%s: work item %lld",
          what, (long long)w);
  }
}

/* As the core hands the problem to a kernel: arrays checked, the storage
   rows filled in. */
static int validated(fa_problem *p, const fa_attention *a, const char *what) {
  if (fa_problem_init(p, a, FA_BF16) || fa_problem_check_arrays(p)) {
    FAIL("%s: problem rejected: %s", what, fa_last_error());
    return 0;
  }
  p->rows_q = p->varlen_q ? a->cu_seqlens_q[a->batch] : 0;
  p->rows_k = p->varlen_k ? a->cu_seqlens_k[a->batch] : 0;
  return 1;
}

/* Planner inputs: wide (one split), and a small budget that splits. */
static fa_caps caps_of(int which, int pack) {
  fa_caps wide = {(size_t)1 << 34, 2 * 304, 32, 128, 64, 128, pack, 0};
  fa_caps small = {4096, 4, 32, 128, 64, 8, pack, 0};
  return which ? small : wide;
}

/* Every mask kind x dense, varlen and paged layouts. */
static void check_grid(void) {
  static const int32_t cu_q[] = {0, 5, 5, 40}, cu_k[] = {0, 9, 30, 95};
  static const int32_t used[] = {7, 0, 33};
  static const int32_t table[] = {3, 1, 4, 0, 5, 2, 7, 6, 8, 9, 10, 11};
  static const float slopes[] = {0.5f, 0.25f, 0.125f, 0.0625f};
  const int causal[] = {0, FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT};
  const int wins[][2] = {{-1, -1}, {8, 0}, {3, 5}, {0, -1}};
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
        (void)snprintf(what, sizeof what, "grid causal=%d window=%d,%d mode=%d",
                       a.causal, a.window_left, a.window_right, mode);
        fa_problem p;
        if (!validated(&p, &a, what)) continue;
        for (int which = 0; which < 2; which++) {
          fa_caps caps = caps_of(which, 1);
          compare(&p, &caps, what);
        }
      }
}

/* Random problems: masks, ALiBi, softcap, one explicit diagonal offset,
   layouts, GQA, sizes. */
static void check_random(int case_no) {
  const int B = ut_rand_int(1, 4), sq = ut_rand_int(1, 300),
            sk = ut_rand_int(1, 300);
  const int hkv = ut_rand_int(1, 3), hq = hkv * ut_rand_int(1, 4);
  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = sq;
  a.seqlen_k = sk;
  a.heads_q = hq;
  a.heads_kv = hkv;
  a.head_dim = 64;
  const int mask = ut_rand_int(0, 5);
  if (mask == 1) a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  if (mask == 2) a.causal = FA_CAUSAL_TOP_LEFT;
  if (mask == 3) {
    a.window_left = ut_rand_int(0, 40);
    a.window_right = ut_rand_int(0, 40);
  }
  if (mask == 4) {
    a.causal = ut_rand_int(1, 2);
    a.window_left = ut_rand_int(0, 100);
  }
  if (mask == 5) a.window_right = ut_rand_int(0, 5);
  float slopes[12];
  for (int h = 0; h < 12; h++) slopes[h] = 0.1f * (float)(h + 1);
  if (ut_rand_int(0, 1)) a.alibi_slopes = slopes;
  if (ut_rand_int(0, 1)) a.softcap = 5.0f;
  if (ut_rand_int(0, 3) == 0) { // one offset for every sequence
    a.positions = FA_POSITIONS_EXPLICIT;
    a.q_position = ut_rand_int(0, 500);
    a.k_position = ut_rand_int(0, 500);
  }
  int32_t cuq[5], cuk[5], used[4], table[4 * 300];
  const int layout = ut_rand_int(0, 3); // dense, varlen, +seqused_k, paged
  if (layout == 1 || layout == 2) {
    cuq[0] = cuk[0] = ut_rand_int(0, 7);
    for (int b = 0; b < B; b++) {
      cuq[b + 1] = cuq[b] + ut_rand_int(0, sq);
      cuk[b + 1] = cuk[b] + ut_rand_int(0, sk);
    }
    a.cu_seqlens_q = cuq;
    a.cu_seqlens_k = cuk;
    if (layout == 2) {
      for (int b = 0; b < B; b++) used[b] = ut_rand_int(0, cuk[b + 1] - cuk[b]);
      a.seqused_k = used;
    }
  } else if (layout == 3) {
    a.page_size = ut_rand_int(1, 40);
    a.max_blocks_per_seq = (sk + a.page_size - 1) / a.page_size;
    a.num_pages = 1000;
    for (int i = 0; i < B * a.max_blocks_per_seq; i++)
      table[i] = ut_rand_int(0, 999);
    a.block_table = table;
    for (int b = 0; b < B; b++) used[b] = ut_rand_int(0, sk);
    a.seqused_k = used;
  }
  char what[48];
  (void)snprintf(what, sizeof what, "random case %d", case_no);
  fa_problem p;
  if (!validated(&p, &a, what)) return;
  fa_caps caps = caps_of(ut_rand_int(0, 1), ut_rand_int(0, 1));
  compare(&p, &caps, what);
}

/* Arrays nobody checked: whatever the entries, every sequence stays inside
   its tensors (rows in [0, rows_q/rows_k], at most seqlen_q/seqlen_k of
   them, seqused_k within the sequence's keys) and every paged offset inside
   the pool of 20 pages, or is -1. */
static void check_clamps(void) {
  static const int32_t wild[] = {INT32_MIN, -1,  0,   1,       50,
                                 99,        100, 101, 1 << 30, INT32_MAX};
  for (int n = 0; n < 2000; n++) {
    fa_flat_problem f;
    memset(&f, 0, sizeof f);
    int32_t cq[5], ck[5], used[4], table[4 * 8];
    f.batch = ut_rand_int(1, 4);
    f.seqlen_q = ut_rand_int(1, 100);
    f.seqlen_k = ut_rand_int(1, 100);
    f.heads_q = f.heads_kv = f.group = 1;
    for (int i = 0; i < 5; i++) {
      cq[i] = ut_rand_int(0, 1) ? wild[ut_rand_int(0, 9)] : ut_rand_int(0, 300);
      ck[i] = ut_rand_int(0, 1) ? wild[ut_rand_int(0, 9)] : ut_rand_int(0, 300);
    }
    for (int i = 0; i < 4; i++) used[i] = wild[ut_rand_int(0, 9)];
    for (int i = 0; i < 32; i++)
      table[i] =
          ut_rand_int(0, 1) ? wild[ut_rand_int(0, 9)] : ut_rand_int(0, 20);
    const int paged = ut_rand_int(0, 1);
    if (!paged) {
      f.varlen_q = f.varlen_k = 1;
      f.cu_seqlens_q = cq;
      f.cu_seqlens_k = ck;
      f.rows_q = ut_rand_int(0, 300);
      f.rows_k = ut_rand_int(0, 300);
    } else {
      f.paged = 1;
      f.page_size = 16;
      f.max_blocks_per_seq = 8;
      f.seqlen_k = ut_rand_int(1, 128);
      f.block_table = table;
      f.num_pages = 20;
    }
    if (ut_rand_int(0, 1)) f.seqused_k = used;
    const fa_tensor_view v = {NULL, 16 * 3, 3, 1}; // pages of 16 slots x 3
    for (int b = 0; b < f.batch; b++) {
      const int lq = fa_seq_rows_q(&f, b), lk = fa_seq_rows_k(&f, b);
      const int sk = fa_seq_storage_k(&f, b);
      const int64_t q0 = fa_seq_start_q(&f, b), k0 = fa_seq_start_k(&f, b);
      CHECK(lq >= 0 && lq <= f.seqlen_q && lk >= 0 && lk <= sk &&
                sk <= f.seqlen_k,
            "clamp %d: lengths %d %d %d", n, lq, lk, sk);
      if (!paged)
        CHECK(q0 >= 0 && q0 + lq <= f.rows_q && k0 >= 0 && k0 + sk <= f.rows_k,
              "clamp %d: rows [%lld, +%d) of %lld, [%lld, +%d) of %lld", n,
              (long long)q0, lq, (long long)f.rows_q, (long long)k0, sk,
              (long long)f.rows_k);
      else
        for (int j = 0; j < lk; j++) {
          const int64_t off = fa_seq_k_offset(&f, &v, b, j, 0);
          CHECK(off == -1 || (off >= 0 && off < 20 * 16 * 3),
                "clamp %d: paged offset %lld outside the pool", n,
                (long long)off);
        }
    }
  }
}

int main(void) {
  check_grid();
  for (int c = 0; c < 400; c++) check_random(c);
  check_clamps();
  return ut_finish("test_seq_rows");
}
