// SPDX-License-Identifier: MIT
// Hostile and unusual inputs, on every CPU kernel, through the public
// header only. One group per argument:
//   overlap  outputs holding the problem's own arrays (cu_seqlens_q/k,
//            seqused_k, block_table, alibi_slopes, sinks) or a merge's lse
//            inputs are refused naming both parties, writing nothing;
//            interleaved views whose ranges meet but whose elements never
//            do are accepted: q, k, v, o in one [B, S, 4, H, D] buffer,
//            dq, dk, dv packed [B, S, 3, H, D], merge parts side by side,
//            each equal to the same call on separate buffers
//   sinks    a NaN or +inf sink makes every row of its head NaN (rows with
//            no key included), a -inf sink weighs nothing, other heads are
//            untouched
//   empty    batch 0 and seqlen_q 0 are no-ops at every entry point (NULL
//            tensors allowed); seqlen_k 0 gives O = 0 and LSE = -inf (or
//            the sink), dq = 0; seqlen_q 0 gives dk = dv = 0
//   misc     fa_backend_name(INT_MIN), devices a CPU context lacks
//   longrow  2^27 keys of one score: O is v (0.3 to 1e-6 in one row, 0.5
//            through kv splits) and LSE is log(2^27) + s (plain fp32 sums
//            of O stall at 2^24 terms: O came out 0.25 and 0.0625).
#include <float.h>
#include <limits.h>
#include <stdint.h>

#include "api_util.h"

static fa_context *ctx;
static const char *backend;

static float *alloc_floats(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  return p;
}

static void fill(float *x, size_t n) { au_fill_uniform(x, n, -1, 1); }

// ---- overlap -----------------------------------------------------------

enum { B = 2, S = 9, H = 3, D = 8 };

/* o (or lse) holding one of the problem's arrays: refused, naming both,
   nothing written (the array included). */
static void test_output_holds_array(void) {
  static float q[B * S * H * D], k[B * S * H * D], v[B * S * H * D];
  static float o[B * S * H * D + 64], lse[B * H * S + 64];
  fill(q, sizeof q / 4);
  fill(k, sizeof k / 4);
  fill(v, sizeof v / 4);
  const fa_tensor tq = au_bshd(q, S, H, D), tk = au_bshd(k, S, H, D),
                  tv = au_bshd(v, S, H, D);
  fa_tensor to = au_bshd(o + 16, S, H, D);
  static const char *names[6] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                                 "block_table",  "alibi_slopes", "sinks"};
  for (int which = 0; which < 6; which++)
    for (int in_lse = 0; in_lse < 2; in_lse++) {
      fa_attention a = ts_problem(B, S, S, H, H, D);
      float *host = in_lse ? lse + 3 : o + 16 + 5; // inside the first row
      int32_t *ints = (int32_t *)host;
      // Valid contents, so that only the overlap is wrong.
      fa_tensor q2 = tq, k2 = tk, v2 = tv, o2 = to;
      switch (which) {
      case 0:
      case 1:
        ints[0] = 0;
        ints[1] = S;
        ints[2] = 2 * S;
        if (which == 0) {
          a.cu_seqlens_q = ints;
          q2.stride_batch = o2.stride_batch = 0;
        } else {
          a.cu_seqlens_k = ints;
          k2.stride_batch = v2.stride_batch = 0;
        }
        break;
      case 2:
        ints[0] = S;
        ints[1] = S - 2;
        a.seqused_k = ints;
        break;
      case 3:
        ints[0] = 0;
        ints[1] = 1;
        a.block_table = ints;
        a.max_blocks_per_seq = 1;
        a.page_size = S;
        a.num_pages = 2;
        break;
      case 4:
      case 5:
        for (int h = 0; h < H; h++) host[h] = 0.25f * (float)(h + 1);
        if (which == 4)
          a.alibi_slopes = host;
        else
          a.sinks = host;
        break;
      }
      unsigned char snap_o[sizeof o], snap_l[sizeof lse];
      memcpy(snap_o, o, sizeof o);
      memcpy(snap_l, lse, sizeof lse);
      char what[96];
      snprintf(what, sizeof what, "%s: %s inside %s", backend, names[which],
               in_lse ? "lse" : "o");
      fa_status s = fa_forward(ctx, &a, q2, k2, v2, o2, lse);
      char fields[64];
      snprintf(fields, sizeof fields, "%s %s", in_lse ? "lse" : "o",
               names[which]);
      EXPECT_FAIL(what, s, FA_ERR_INVALID_ARGUMENT, fields, NULL);
      CHECK(!memcmp(snap_o, o, sizeof o) && !memcmp(snap_l, lse, sizeof lse),
            "%s: a refused call wrote", what);
      // The same through a plan: refused when it is made, or (the lse
      // comes with each run) when it runs.
      fa_plan *plan = NULL;
      s = fa_plan_create(ctx, &a, q2, k2, v2, o2, &plan);
      if (in_lse) {
        EXPECT_OK(what, s);
        if (plan) s = fa_plan_forward(plan, q2, k2, v2, o2, lse);
      }
      EXPECT_FAIL(what, s, FA_ERR_INVALID_ARGUMENT, fields, NULL);
      fa_plan_destroy(plan);
      // And a gradient holding it: the same contents, moved into dq.
      if (!in_lse) {
        static float dq[B * S * H * D + 64], g[B * S * H * D];
        static float gk[B * S * H * D], gv[B * S * H * D];
        fill(g, sizeof g / 4);
        float *moved = dq + 16 + 5;
        memcpy(moved, host, 4 * sizeof(float));
        const void **field[6] = {
            (const void **)&a.cu_seqlens_q, (const void **)&a.cu_seqlens_k,
            (const void **)&a.seqused_k,    (const void **)&a.block_table,
            (const void **)&a.alibi_slopes, (const void **)&a.sinks};
        *field[which] = moved;
        fa_tensor dqt = au_bshd(dq + 16, S, H, D), dkt = au_bshd(gk, S, H, D),
                  dvt = au_bshd(gv, S, H, D), do_in = au_bshd(g, S, H, D);
        dqt.stride_batch = do_in.stride_batch = o2.stride_batch;
        dkt.stride_batch = dvt.stride_batch = k2.stride_batch;
        fa_tensor o_in = o2;
        o_in.data = o + 16;
        snprintf(what, sizeof what, "%s: %s inside dq", backend, names[which]);
        snprintf(fields, sizeof fields, "dq %s", names[which]);
        s = fa_backward(ctx, &a, q2, k2, v2, o_in, do_in, lse, dqt, dkt, dvt);
        EXPECT_FAIL(what, s, FA_ERR_INVALID_ARGUMENT, fields, NULL);
      }
    }
}

/* Max |x - y| over n floats (NaN counts as infinite). */
static double max_diff(const float *x, const float *y, size_t n) {
  double w = 0.0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)x[i] - y[i]);
    if (!(e <= w)) w = isnan(e) ? INFINITY : e;
  }
  return w;
}

/* q, k, v, o interleaved in one [B, S, 4, H, D] buffer (and dq, dk, dv in
   one [B, S, 3, H, D] buffer): accepted, and the same as on separate
   buffers. */
static void test_packed_qkv(void) {
  const size_t row4 = 4 * H * D, row3 = 3 * H * D, n = (size_t)B * S * H * D;
  float *pack = alloc_floats(B * S * row4), *grad = alloc_floats(B * S * row3);
  float *q = alloc_floats(n), *k = alloc_floats(n), *v = alloc_floats(n),
        *o = alloc_floats(n), *d_o = alloc_floats(n), *dq = alloc_floats(n),
        *dk = alloc_floats(n), *dv = alloc_floats(n),
        *lse = alloc_floats(B * H * S), *lse2 = alloc_floats(B * H * S);
  fill(pack, B * S * row4);
  fill(d_o, n);
  fa_attention a = ts_problem(B, S, S, H, H, D);
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  fa_tensor part[4];
  for (int i = 0; i < 4; i++) {
    part[i] = au_bshd(pack + (size_t)i * H * D, S, H, D);
    part[i].stride_seq = (int64_t)row4;
    part[i].stride_batch = (int64_t)S * row4;
  }
  // The separate copies of q, k, v.
  float *sep[3] = {q, k, v};
  for (int x = 0; x < 3; x++)
    for (size_t r = 0; r < (size_t)B * S; r++)
      memcpy(sep[x] + r * H * D, pack + r * row4 + (size_t)x * H * D,
             sizeof(float) * H * D);
  char what[96];
  snprintf(what, sizeof what, "%s: q, k, v, o in one [B,S,4,H,D] buffer",
           backend);
  EXPECT_OK(what, fa_forward(ctx, &a, part[0], part[1], part[2], part[3], lse));
  EXPECT_OK(what, fa_forward(ctx, &a, au_bshd(q, S, H, D), au_bshd(k, S, H, D),
                             au_bshd(v, S, H, D), au_bshd(o, S, H, D), lse2));
  float *o_packed = alloc_floats(n);
  for (size_t r = 0; r < (size_t)B * S; r++)
    memcpy(o_packed + r * H * D, pack + r * row4 + 3 * H * D,
           sizeof(float) * H * D);
  CHECK(max_diff(o_packed, o, n) <= 1e-6 &&
            max_diff(lse, lse2, B * H * S) <= 1e-6,
        "%s: packed and separate forwards differ by %g", what,
        max_diff(o_packed, o, n));
  // o one element further on reaches the next row's q: refused, naming
  // both.
  fa_tensor o_shifted = part[3];
  o_shifted.data = (float *)o_shifted.data + 1;
  fa_status s = fa_forward(ctx, &a, part[0], part[1], part[2], o_shifted, lse);
  EXPECT_FAIL("o one element on in the packed buffer", s,
              FA_ERR_INVALID_ARGUMENT, "o q", NULL);

  // Packed gradients.
  fa_tensor g[3];
  for (int i = 0; i < 3; i++) {
    g[i] = au_bshd(grad + (size_t)i * H * D, S, H, D);
    g[i].stride_seq = (int64_t)row3;
    g[i].stride_batch = (int64_t)S * row3;
  }
  snprintf(what, sizeof what, "%s: dq, dk, dv packed [B,S,3,H,D]", backend);
  EXPECT_OK(what, fa_backward(ctx, &a, part[0], part[1], part[2], part[3],
                              au_bshd(d_o, S, H, D), lse, g[0], g[1], g[2]));
  EXPECT_OK(what, fa_backward(ctx, &a, au_bshd(q, S, H, D), au_bshd(k, S, H, D),
                              au_bshd(v, S, H, D), au_bshd(o, S, H, D),
                              au_bshd(d_o, S, H, D), lse2, au_bshd(dq, S, H, D),
                              au_bshd(dk, S, H, D), au_bshd(dv, S, H, D)));
  const float *gs[3] = {dq, dk, dv};
  double worst = 0.0;
  for (int x = 0; x < 3; x++)
    for (size_t r = 0; r < (size_t)B * S; r++) {
      double e = max_diff(grad + r * row3 + (size_t)x * H * D,
                          gs[x] + r * H * D, H * D);
      if (!(e <= worst)) worst = e;
    }
  CHECK(worst <= 1e-6, "%s: packed and separate gradients differ by %g", what,
        worst);
  // dq, dk, dv packed in the q, k, v buffer itself: refused.
  s = fa_backward(ctx, &a, part[0], part[1], part[2], part[3],
                  au_bshd(d_o, S, H, D), lse, part[1], part[0], part[2]);
  EXPECT_FAIL("gradients over the packed inputs", s, FA_ERR_INVALID_ARGUMENT,
              "dq k", NULL);

  // Merge: the two halves' parts and the result interleaved per row,
  // [B, S, 3, H, D]; lse_parts side by side in one array.
  fa_attention first = ts_problem(B, S, 4, H, H, D),
               second = ts_problem(B, S, S - 4, H, H, D);
  float *mbuf = alloc_floats(B * S * row3),
        *lsebuf = alloc_floats(3 * B * H * S);
  fa_tensor mp[3];
  for (int i = 0; i < 3; i++) {
    mp[i] = au_bshd(mbuf + (size_t)i * H * D, S, H, D);
    mp[i].stride_seq = (int64_t)row3;
    mp[i].stride_batch = (int64_t)S * row3;
  }
  fa_tensor k2 = part[1], v2 = part[2];
  k2.data = (float *)k2.data + 4 * row4;
  v2.data = (float *)v2.data + 4 * row4;
  float *l0 = lsebuf, *l1 = lsebuf + B * H * S, *l2 = lsebuf + 2 * B * H * S;
  EXPECT_OK("merge part 0",
            fa_forward(ctx, &first, part[0], part[1], part[2], mp[0], l0));
  EXPECT_OK("merge part 1",
            fa_forward(ctx, &second, part[0], k2, v2, mp[1], l1));
  fa_attention all = ts_problem(B, S, S, H, H, D);
  EXPECT_OK("unmasked forward", fa_forward(ctx, &all, part[0], part[1], part[2],
                                           au_bshd(o, S, H, D), lse2));
  const float *lp[2] = {l0, l1};
  snprintf(what, sizeof what, "%s: merge parts interleaved with o", backend);
  EXPECT_OK(what, fa_merge_states(ctx, 2, mp, lp, B, S, H, D, mp[2], l2));
  for (size_t r = 0; r < (size_t)B * S; r++)
    memcpy(o_packed + r * H * D, mbuf + r * row3 + 2 * H * D,
           sizeof(float) * H * D);
  CHECK(max_diff(o_packed, o, n) <= 1e-5 &&
            max_diff(l2, lse2, B * H * S) <= 1e-5,
        "%s: merged halves differ from the whole by %g", what,
        max_diff(o_packed, o, n));
  // The merge's output over one of its lse inputs: refused.
  unsigned char *snap = malloc(sizeof(float) * 3 * B * H * S);
  memcpy(snap, lsebuf, sizeof(float) * 3 * B * H * S);
  fa_tensor o_on_lse = au_bshd(l1, S, H, 1);
  s = fa_merge_states(ctx, 2,
                      (fa_tensor[2]){au_bshd(o, S, H, 1), au_bshd(q, S, H, 1)},
                      lp, B, S, H, 1, o_on_lse, NULL);
  EXPECT_FAIL("merge o over lse_parts[1]", s, FA_ERR_INVALID_ARGUMENT,
              "o lse_parts", NULL);
  s = fa_merge_states(ctx, 2, mp, lp, B, S, H, D, mp[2], l1 + 1);
  EXPECT_FAIL("merge lse over lse_parts[1] shifted", s, FA_ERR_INVALID_ARGUMENT,
              "lse lse_parts", NULL);
  CHECK(!memcmp(snap, lsebuf, sizeof(float) * 3 * B * H * S),
        "refused merges wrote an lse");
  free(snap);
  float *all_bufs[] = {pack, grad, q,   k,    v,        o,    d_o,   dq,
                       dk,   dv,   lse, lse2, o_packed, mbuf, lsebuf};
  for (size_t i = 0; i < sizeof all_bufs / sizeof all_bufs[0]; i++)
    free(all_bufs[i]);
}

// ---- sinks ---------------------------------------------------------------

static void test_sinks(void) {
  const int sq = 5, sk = 7, hq = 4;
  const size_t nq = (size_t)sq * hq * D, nk = (size_t)sk * 2 * D;
  float *q = alloc_floats(nq), *k = alloc_floats(nk), *v = alloc_floats(nk);
  float *o = alloc_floats(nq), *lse = alloc_floats((size_t)hq * sq);
  float *o_ref = alloc_floats(nq), *lse_ref = alloc_floats((size_t)hq * sq);
  fill(q, nq);
  fill(k, nk);
  fill(v, nk);
  fa_attention a = ts_problem(1, sq, sk, hq, 2, D);
  a.window_left = 1; // rows 0.. see few keys; with seqused_k below, some none
  a.window_right = 0;
  a.causal = 0;
  const float specials[3] = {NAN, INFINITY, -INFINITY};
  for (int x = 0; x < 3; x++) {
    float sinks[4] = {0.5f, specials[x], -1.0f, 2.0f};
    float ref_sinks[4] = {0.5f, 0.0f, -1.0f, 2.0f};
    a.sinks = sinks;
    EXPECT_OK("forward with a special sink",
              fa_forward(ctx, &a, au_bshd(q, sq, hq, D), au_bshd(k, sk, 2, D),
                         au_bshd(v, sk, 2, D), au_bshd(o, sq, hq, D), lse));
    fa_attention r = a;
    r.sinks = ref_sinks;
    if (x == 2) r.sinks = NULL; // -inf weighs nothing: as no sink ...
    EXPECT_OK("forward, reference sinks",
              fa_forward(ctx, &r, au_bshd(q, sq, hq, D), au_bshd(k, sk, 2, D),
                         au_bshd(v, sk, 2, D), au_bshd(o_ref, sq, hq, D),
                         lse_ref));
    for (int i = 0; i < sq; i++)
      for (int h = 0; h < hq; h++) {
        const float *orow = o + ((size_t)i * hq + h) * D,
                    *rrow = o_ref + ((size_t)i * hq + h) * D;
        float l = lse[h * sq + i], lr = lse_ref[h * sq + i];
        if (h == 1 && x < 2) {
          int all_nan = isnan(l);
          for (int d = 0; d < D; d++) all_nan &= isnan(orow[d]);
          CHECK(all_nan, "%s: sink %g, row %d: O and LSE must be NaN (lse %g)",
                backend, (double)specials[x], i, (double)l);
        } else if (h == 1 || x == 2) {
          // ... for its own head; the others keep their sinks, which the
          // reference without sinks lacks: compare only head 1.
          if (h != 1) continue;
          CHECK(max_diff(orow, rrow, D) <= 1e-6 &&
                    (l == lr || fabs((double)l - lr) <= 1e-6),
                "%s: a -inf sink must weigh nothing (row %d)", backend, i);
        } else {
          CHECK(max_diff(orow, rrow, D) == 0.0 && (l == lr),
                "%s: head %d changed by another head's sink", backend, h);
        }
      }
  }
  // A row with no key and a NaN sink: NaN, not -inf.
  int32_t used[1] = {0};
  float sinks[4] = {0.5f, NAN, -INFINITY, 2.0f};
  a.sinks = sinks;
  a.seqused_k = used;
  EXPECT_OK("forward, no keys, special sinks",
            fa_forward(ctx, &a, au_bshd(q, sq, hq, D), au_bshd(k, sk, 2, D),
                       au_bshd(v, sk, 2, D), au_bshd(o, sq, hq, D), lse));
  for (int i = 0; i < sq; i++) {
    CHECK(lse[0 * sq + i] == 0.5f && isnan(lse[1 * sq + i]) &&
              lse[2 * sq + i] == -INFINITY && lse[3 * sq + i] == 2.0f,
          "%s: empty row %d: LSE %g %g %g %g, want 0.5 nan -inf 2", backend, i,
          (double)lse[i], (double)lse[sq + i], (double)lse[2 * sq + i],
          (double)lse[3 * sq + i]);
    for (int h = 0; h < hq; h++)
      for (int d = 0; d < D; d++) {
        float x = o[((size_t)i * hq + h) * D + d];
        CHECK(h == 1 ? isnan(x) : x == 0.0f, "%s: empty row %d head %d: O %g",
              backend, i, h, (double)x);
      }
  }
  free(q);
  free(k);
  free(v);
  free(o);
  free(lse);
  free(o_ref);
  free(lse_ref);
}

// ---- empty problems --------------------------------------------------------

static void test_empty(void) {
  const fa_tensor none = {NULL, FA_F32, 0, 0, 0};
  char what[96];
  // batch 0 / seqlen_q 0: no-ops. Empty views may be NULL (with seqlen_q 0
  // the keys are a real, unread, cache).
  static float kv[2 * 7 * H * D];
  for (int x = 0; x < 2; x++) {
    fa_attention a = ts_problem(x ? 2 : 0, x ? 0 : 5, 7, H, H, D);
    const fa_tensor keys = x ? au_bshd(kv, 7, H, D) : none;
    snprintf(what, sizeof what, "%s: %s", backend,
             x ? "seqlen_q 0" : "batch 0");
    EXPECT_OK(what, fa_forward(ctx, &a, none, keys, keys, none, NULL));
    fa_plan *plan = NULL;
    EXPECT_OK(what, fa_plan_create(ctx, &a, none, keys, keys, none, &plan));
    if (plan)
      EXPECT_OK(what, fa_plan_forward(plan, none, keys, keys, none, NULL));
    fa_plan_destroy(plan);
    if (!x) {
      EXPECT_OK(what, fa_backward(ctx, &a, none, none, none, none, none, NULL,
                                  none, none, none));
    }
    const float *lp[1] = {NULL};
    fa_tensor parts[1] = {none};
    EXPECT_OK(what, fa_merge_states(ctx, 1, parts, lp, x ? 2 : 0, x ? 0 : 5, H,
                                    D, none, NULL));
  }
  // A problem that is still wrong is still refused.
  fa_attention bad = ts_problem(0, 5, 7, H, H, 0);
  EXPECT_FAIL("batch 0, head_dim 0",
              fa_forward(ctx, &bad, none, none, none, none, NULL),
              FA_ERR_INVALID_ARGUMENT, "head_dim", "0");

  // seqlen_k 0 (an empty KV cache): O = 0, LSE = -inf or the sink.
  const int sq = 3;
  float q[2 * sq * H * D], o[2 * sq * H * D], lse[2 * H * sq];
  fill(q, sizeof q / 4);
  float sinks[H] = {0.25f, -2.0f, 1.0f};
  for (int with_sinks = 0; with_sinks < 2; with_sinks++)
    for (int causal = 0; causal < 2; causal++) {
      fa_attention a = ts_problem(2, sq, 0, H, H, D);
      a.causal = causal;
      if (with_sinks) a.sinks = sinks;
      for (size_t i = 0; i < sizeof o / 4; i++) o[i] = NAN;
      for (size_t i = 0; i < sizeof lse / 4; i++) lse[i] = NAN;
      snprintf(what, sizeof what, "%s: seqlen_k 0%s%s", backend,
               with_sinks ? ", sinks" : "", causal ? ", causal" : "");
      EXPECT_OK(what, fa_forward(ctx, &a, au_bshd(q, sq, H, D), none, none,
                                 au_bshd(o, sq, H, D), lse));
      int ok = 1;
      for (size_t i = 0; i < sizeof o / 4; i++) ok &= o[i] == 0.0f;
      for (int b = 0; b < 2; b++)
        for (int h = 0; h < H; h++)
          for (int i = 0; i < sq; i++)
            ok &= lse[(b * H + h) * sq + i] ==
                  (with_sinks ? sinks[h] : -INFINITY);
      CHECK(ok, "%s: O must be 0 and LSE %s", what,
            with_sinks ? "the sink" : "-inf");
      fa_plan *plan = NULL;
      EXPECT_OK(what, fa_plan_create(ctx, &a, au_bshd(q, sq, H, D), none, none,
                                     au_bshd(o, sq, H, D), &plan));
      if (plan)
        EXPECT_OK(what, fa_plan_forward(plan, au_bshd(q, sq, H, D), none, none,
                                        au_bshd(o, sq, H, D), lse));
      fa_plan_destroy(plan);
      // Backward: dq = 0, no key gradient to write.
      float dq[2 * sq * H * D], d_o[2 * sq * H * D];
      fill(d_o, sizeof d_o / 4);
      for (size_t i = 0; i < sizeof dq / 4; i++) dq[i] = NAN;
      EXPECT_OK(what, fa_backward(ctx, &a, au_bshd(q, sq, H, D), none, none,
                                  au_bshd(o, sq, H, D), au_bshd(d_o, sq, H, D),
                                  lse, au_bshd(dq, sq, H, D), none, none));
      ok = 1;
      for (size_t i = 0; i < sizeof dq / 4; i++) ok &= dq[i] == 0.0f;
      CHECK(ok, "%s: dq must be 0", what);
    }
  // seqlen_q 0 with keys: dk = dv = 0.
  const int sk = 6;
  float k[2 * sk * H * D], dk[2 * sk * H * D], dv[2 * sk * H * D];
  fill(k, sizeof k / 4);
  for (size_t i = 0; i < sizeof dk / 4; i++) dk[i] = dv[i] = NAN;
  fa_attention a = ts_problem(2, 0, sk, H, H, D);
  snprintf(what, sizeof what, "%s: backward, seqlen_q 0", backend);
  EXPECT_OK(what, fa_backward(ctx, &a, none, au_bshd(k, sk, H, D),
                              au_bshd(k, sk, H, D), none, none, NULL, none,
                              au_bshd(dk, sk, H, D), au_bshd(dv, sk, H, D)));
  int ok = 1;
  for (size_t i = 0; i < sizeof dk / 4; i++)
    ok &= dk[i] == 0.0f && dv[i] == 0.0f;
  CHECK(ok, "%s: dk and dv must be 0", what);
}

// ---- misc ------------------------------------------------------------------

static void test_misc(void) {
  CHECK(fa_backend_name(INT_MIN) == NULL && fa_backend_name(-1) == NULL &&
            fa_backend_name(INT_MAX) == NULL,
        "fa_backend_name out of range must be NULL");
  static const int devices[3] = {1, 1000, INT_MAX};
  for (int i = 0; i < 3; i++) {
    fa_context *c = NULL;
    fa_status s = fa_context_create(&c, FA_BACKEND_CPU, devices[i]);
    EXPECT_FAIL("CPU context on a device the host lacks", s, FA_ERR_NO_DEVICE,
                "device", NULL);
    if (!s) fa_context_destroy(c);
  }
}

// ---- long rows -------------------------------------------------------------

/* Under ASan a 2^27-key row takes ~40 s of CPU a run: there the test runs
   the one case that needs both fixes (0.3 is inexact, and the splits
   merge) on the best backend only. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static void test_long_row(int first) {
  if (SANITIZED && !first) return;
  // 2^27 keys, all one key (stride_seq 0): one head, one query, d = 1.
  const int sk = 1 << 27;
  const float values[2] = {0.5f, 0.3f};
  // One thread: one row of 2^27 keys; two: kv splits of 2^25 keys merged.
  for (int threads = SANITIZED ? 2 : 1; threads <= 2; threads++) {
    const int x = SANITIZED ? 1 : threads - 1;
    float q = 0.75f, k = 0.5f, v = values[x], o = NAN, lse = NAN;
    fa_attention a = ts_problem(1, 1, sk, 1, 1, 1);
    fa_tensor tq = {&q, FA_F32, 1, 1, 1}, tk = {&k, FA_F32, 0, 0, 0},
              tv = {&v, FA_F32, 0, 0, 0}, to = {&o, FA_F32, 1, 1, 1};
    EXPECT_OK("threads", fa_context_set_threads(ctx, threads));
    char what[96];
    snprintf(what, sizeof what, "%s: 2^27 keys, v = %g, %d thread(s)", backend,
             (double)v, threads);
    EXPECT_OK(what, fa_forward(ctx, &a, tq, tk, tv, to, &lse));
    double want_lse = 27.0 * log(2.0) + 0.75 * 0.5;
    CHECK(fabs((double)o - v) <= 1e-6 * v, "%s: O = %.9g, want %.9g", what,
          (double)o, (double)v);
    CHECK(fabs((double)lse - want_lse) <= 1e-6 * want_lse,
          "%s: LSE = %.9g, want %.9g", what, (double)lse, want_lse);
  }
  fa_context_set_threads(ctx, 0);
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "overlap";
  int ran = 0;
  // Every CPU kernel of the fp32 problems these are, bound by name.
  static char kernels[16][64];
  const int nk = ts_kernels_accepting("cpu", FA_F32, kernels, 16);
  for (int i = 0; i < nk; i++) {
    const char *name = kernels[i];
    if (fa_context_create_by_name(&ctx, name) != FA_OK) continue;
    backend = name;
    ran++;
    if (!strcmp(group, "overlap")) {
      test_output_holds_array();
      test_packed_qkv();
    } else if (!strcmp(group, "sinks")) {
      test_sinks();
    } else if (!strcmp(group, "empty")) {
      test_empty();
    } else if (!strcmp(group, "misc")) {
      test_misc();
    } else if (!strcmp(group, "longrow")) {
      test_long_row(ran == 1);
    } else {
      fprintf(stderr, "unknown group %s\n", group);
      return 2;
    }
    fa_context_destroy(ctx);
  }
  if (!ran) {
    fprintf(stderr, "no CPU kernel here: skipping\n");
    return 77;
  }
  return ut_finish(group);
}
