// SPDX-License-Identifier: MIT
// fa_merge_states is the merge lemma: attention over disjoint key sets,
// computed separately by fa_forward and merged, equals fa_forward over the
// union (fp32: within 1e-5), in any order, and a part that saw no key at
// all (LSE -inf, O 0) contributes nothing.
#include "api_util.h"

enum { B = 2, SQ = 6, SK = 13, HQ = 4, HKV = 2, D = 16, DV = 8, CUT = 5 };
enum { NQ = B * SQ * HQ * D, NO = B * SQ * HQ * DV, NL = B * HQ * SQ };
enum { NK = B * SK * HKV * D, NV = B * SK * HKV * DV };

static fa_context *ctx;
static float q[NQ], k[NK], v[NV];

static fa_attention problem(int seqlen_k) {
  fa_attention a = ts_problem(B, SQ, seqlen_k, HQ, HKV, D);
  a.head_dim_v = DV;
  a.softcap = 4.0f; // position-independent, so splitting keys is exact
  return a;
}

// K/V views of rows [row0, row0 + n) of every batch of the dense tensors.
static fa_tensor kview(int row0) {
  fa_tensor t = au_bshd(k, SK, HKV, D);
  t.data = k + (size_t)row0 * HKV * D;
  return t;
}
static fa_tensor vview(int row0) {
  fa_tensor t = au_bshd(v, SK, HKV, DV);
  t.data = v + (size_t)row0 * HKV * DV;
  return t;
}

static void compare(const char *what, const float *o, const float *lse,
                    const float *o_ref, const float *lse_ref) {
  double worst = 0.0;
  for (int i = 0; i < NO; i++) {
    double e = fabs((double)o[i] - o_ref[i]);
    if (!(e <= worst)) worst = e; // NaN sticks
  }
  CHECK(worst <= 1e-5, "%s: max |O - O_ref| = %.3g", what, worst);
  if (!lse) return;
  double wl = 0.0;
  for (int i = 0; i < NL; i++) {
    if (isinf(lse_ref[i])) {
      CHECK(lse[i] == lse_ref[i], "%s: lse[%d] %g, want %g", what, i,
            (double)lse[i], (double)lse_ref[i]);
      continue;
    }
    double e = fabs((double)lse[i] - lse_ref[i]) /
               (fabs(lse_ref[i]) > 1.0 ? fabs(lse_ref[i]) : 1.0);
    if (!(e <= wl)) wl = e;
  }
  CHECK(wl <= 1e-5, "%s: max relative LSE error %.3g", what, wl);
}

static void test_dense_halves(void) {
  static float o_all[NO], l_all[NL], o_a[NO], l_a[NL], o_b[NO], l_b[NL];
  static float o_m[NO], l_m[NL];
  fa_attention all = problem(SK), first = problem(CUT),
               second = problem(SK - CUT);
  EXPECT_OK("forward, all keys",
            fa_forward(ctx, &all, au_bshd(q, SQ, HQ, D), kview(0), vview(0),
                       au_bshd(o_all, SQ, HQ, DV), l_all));
  EXPECT_OK("forward, keys [0, 5)",
            fa_forward(ctx, &first, au_bshd(q, SQ, HQ, D), kview(0), vview(0),
                       au_bshd(o_a, SQ, HQ, DV), l_a));
  EXPECT_OK("forward, keys [5, 13)",
            fa_forward(ctx, &second, au_bshd(q, SQ, HQ, D), kview(CUT),
                       vview(CUT), au_bshd(o_b, SQ, HQ, DV), l_b));
  fa_tensor parts[2] = {au_bshd(o_a, SQ, HQ, DV), au_bshd(o_b, SQ, HQ, DV)};
  const float *lses[2] = {l_a, l_b};
  EXPECT_OK("merge a, b", fa_merge_states(ctx, 2, parts, lses, B, SQ, HQ, DV,
                                          au_bshd(o_m, SQ, HQ, DV), l_m));
  compare("merge of two halves", o_m, l_m, o_all, l_all);

  fa_tensor rev[2] = {parts[1], parts[0]};
  const float *rlses[2] = {l_b, l_a};
  memset(o_m, 0xff, sizeof o_m);
  EXPECT_OK("merge b, a", fa_merge_states(ctx, 2, rev, rlses, B, SQ, HQ, DV,
                                          au_bshd(o_m, SQ, HQ, DV), NULL));
  compare("merge in reverse order, lse NULL", o_m, NULL, o_all, l_all);

  // One part: the identity.
  EXPECT_OK("merge one part",
            fa_merge_states(ctx, 1, parts, lses, B, SQ, HQ, DV,
                            au_bshd(o_m, SQ, HQ, DV), l_m));
  compare("merge of one part", o_m, l_m, o_a, l_a);

  // A strided output (BHSD) receives the same values.
  static float o_bhsd[NO];
  fa_tensor t = {0};
  t.data = o_bhsd;
  t.dtype = FA_F32;
  t.stride_batch = (int64_t)HQ * SQ * DV;
  t.stride_head = (int64_t)SQ * DV;
  t.stride_seq = DV;
  EXPECT_OK("merge into BHSD",
            fa_merge_states(ctx, 2, parts, lses, B, SQ, HQ, DV, t, NULL));
  double worst = 0.0;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < SQ; i++)
      for (int h = 0; h < HQ; h++)
        for (int d = 0; d < DV; d++) {
          double got = o_bhsd[((b * HQ + h) * SQ + i) * DV + d];
          double want = o_all[((b * SQ + i) * HQ + h) * DV + d];
          if (!(fabs(got - want) <= worst)) worst = fabs(got - want);
        }
  CHECK(worst <= 1e-5, "BHSD merge: max error %.3g", worst);
}

// Packed (varlen) keys let one part hold no key at all for sequence 1.
static void test_empty_part(void) {
  static float o_all[NO], l_all[NL], o_a[NO], l_a[NL], o_b[NO], l_b[NL];
  static float o_c[NO], l_c[NL], o_m[NO], l_m[NL];
  // Packed rows: sequence 0 at rows 0..12, sequence 1 at rows 13..25,
  // which is exactly the dense [2][13] layout read with batch stride 0.
  fa_tensor kp = au_bshd(k, SK, HKV, D), vp = au_bshd(v, SK, HKV, DV);
  kp.stride_batch = 0;
  vp.stride_batch = 0;
  int32_t cu_all[3] = {0, SK, 2 * SK};
  int32_t cu_a[3] = {0, CUT, CUT};     // seq 0: keys 0..4; seq 1: none
  int32_t cu_b[3] = {CUT, SK, 2 * SK}; // seq 0: keys 5..12; seq 1: all
  int32_t none[B] = {0, 0};
  fa_attention all = problem(SK), pa = problem(SK), pb = problem(SK),
               pc = problem(SK);
  all.cu_seqlens_k = cu_all;
  pa.cu_seqlens_k = cu_a;
  pb.cu_seqlens_k = cu_b;
  pc.cu_seqlens_k = cu_all;
  pc.seqused_k = none; // no key anywhere
  fa_tensor qt = au_bshd(q, SQ, HQ, D);
  EXPECT_OK(
      "varlen forward, all",
      fa_forward(ctx, &all, qt, kp, vp, au_bshd(o_all, SQ, HQ, DV), l_all));
  EXPECT_OK("varlen forward, part a",
            fa_forward(ctx, &pa, qt, kp, vp, au_bshd(o_a, SQ, HQ, DV), l_a));
  EXPECT_OK("varlen forward, part b",
            fa_forward(ctx, &pb, qt, kp, vp, au_bshd(o_b, SQ, HQ, DV), l_b));
  memset(o_c, 0x7f, sizeof o_c);
  EXPECT_OK("varlen forward, empty part",
            fa_forward(ctx, &pc, qt, kp, vp, au_bshd(o_c, SQ, HQ, DV), l_c));

  // Rows with no visible key: O = 0, LSE = -inf.
  int bad = 0;
  for (int i = 0; i < SQ; i++)
    for (int h = 0; h < HQ; h++) {
      bad += l_a[(1 * HQ + h) * SQ + i] != -INFINITY;
      bad += l_c[(0 * HQ + h) * SQ + i] != -INFINITY;
      for (int d = 0; d < DV; d++) {
        bad += o_a[((1 * SQ + i) * HQ + h) * DV + d] != 0.0f;
        bad += o_c[((0 * SQ + i) * HQ + h) * DV + d] != 0.0f;
      }
    }
  CHECK(bad == 0, "%d values of key-less rows are not O = 0 / LSE = -inf", bad);

  fa_tensor parts[3] = {au_bshd(o_a, SQ, HQ, DV), au_bshd(o_c, SQ, HQ, DV),
                        au_bshd(o_b, SQ, HQ, DV)};
  const float *lses[3] = {l_a, l_c, l_b};
  EXPECT_OK("merge with empty parts",
            fa_merge_states(ctx, 3, parts, lses, B, SQ, HQ, DV,
                            au_bshd(o_m, SQ, HQ, DV), l_m));
  compare("merge with an empty part", o_m, l_m, o_all, l_all);

  // Only empty parts: O = 0, LSE = -inf.
  fa_tensor empties[2] = {parts[1], parts[1]};
  const float *elses[2] = {l_c, l_c};
  memset(o_m, 0x7f, sizeof o_m);
  EXPECT_OK("merge of empty parts",
            fa_merge_states(ctx, 2, empties, elses, B, SQ, HQ, DV,
                            au_bshd(o_m, SQ, HQ, DV), l_m));
  bad = 0;
  for (int i = 0; i < NO; i++) bad += o_m[i] != 0.0f;
  for (int i = 0; i < NL; i++) bad += l_m[i] != -INFINITY;
  CHECK(bad == 0, "merge of empty parts: %d values not 0 / -inf", bad);
}

int main(void) {
  au_fill_uniform(q, NQ, -1.5, 1.5);
  au_fill_uniform(k, NK, -1.5, 1.5);
  au_fill_uniform(v, NV, -1.0, 1.0);
  // Every usable backend, each bound by name.
  int ran = 0;
  for (int bi = 0; bi < fa_backend_count(); bi++) {
    const char *name = fa_backend_name(bi);
    if (fa_context_create_by_name(&ctx, name) != FA_OK) {
      CHECK(0, "listed backend %s: %s", name, fa_last_error());
      continue;
    }
    printf("backend %s\n", name);
    test_dense_halves();
    test_empty_part();
    fa_context_destroy(ctx);
    ran++;
  }
  if (!ran) return 77;
  return ut_finish("test_api_merge");
}
