// SPDX-License-Identifier: MIT
// Self-test of the references (no backend involved), so that agreement
// between the library and the oracle means something:
//   1. closed-form cases: one key, equal scores, sinks, causal both ways,
//      windows, ALiBi, softcap, rows with no visible key;
//   2. addressing invariance: the same data in paged, varlen, seqused and
//      strided layouts gives bit-identical oracle results;
//   3. the naive attention in f32 agrees with the oracle (~1e-6), over
//      every feature, forward and backward;
//   4. the oracle's backward matches central differences of its forward
//      (L = sum(dO * O)), over every feature: softcap chain rule, ALiBi,
//      sinks, GQA sums, paged and varlen keys;
//   5. the 0.2 semantics: explicit positions that restate the aligned ones
//      (scalars and per-sequence arrays) are bit-identical to them, and
//      other ones are not; power-of-two descales (one value, per head) are
//      bit-identical to inputs scaled in storage, forward and backward; a
//      16-bit dO is read as its value; dsinks matches central differences
//      of the forward in the sinks and is bounded by its magnitude.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "oracle.h"
#include "tensor.h"
#include "ts_problem.h"
#include "xval.h"

static int close_to(double a, double b, double tol) {
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* A dense f32 BSHD tensor [nb][ns][nh][nd]. */
static fa_tensor dense(float *data, int ns, int nh, int nd) {
  return ts_bshd(data, FA_F32, ns, nh, nd);
}

static fa_attention base(int b, int sq, int sk, int hq, int hkv, int d,
                         int dv) {
  fa_attention a = ts_problem(b, sq, sk, hq, hkv, d);
  a.head_dim_v = dv;
  return a;
}

/* ---- 1. closed forms -------------------------------------------------------
 */

static void closed_forms(void) {
  double o[64], lse[16];
  { // one key: o = v, lse = s
    float q[2] = {1, 2}, k[2] = {3, -1}, v[2] = {5, 7};
    fa_attention a = base(1, 1, 1, 1, 1, 2, 2);
    a.scale = 0.5f;
    fa_oracle_forward(&a, dense(q, 1, 1, 2), dense(k, 1, 1, 2),
                      dense(v, 1, 1, 2), o, lse);
    CHECK(o[0] == 5 && o[1] == 7 && close_to(lse[0], 0.5, 1e-15),
          "one key: o=(%g,%g) lse=%g", o[0], o[1], lse[0]);
  }
  { // equal scores: the mean, lse = s + log 2
    float q[2] = {1, 0}, k[4] = {2, 0, 2, 5}, v[4] = {1, 2, 3, 6};
    fa_attention a = base(1, 1, 2, 1, 1, 2, 2);
    a.scale = 1.0f;
    fa_oracle_forward(&a, dense(q, 1, 1, 2), dense(k, 2, 1, 2),
                      dense(v, 2, 1, 2), o, lse);
    CHECK(close_to(o[0], 2, 1e-15) && close_to(o[1], 4, 1e-15) &&
              close_to(lse[0], 2 + log(2.0), 1e-15),
          "equal scores: o=(%g,%g) lse=%g", o[0], o[1], lse[0]);
  }
  { // sink equal to the only score: o = v/2, lse = log 2; no key: lse = sink
    float q[2] = {0, 0}, k[2] = {1, 1}, v[2] = {4, -2}, sink = 0.0f;
    fa_attention a = base(1, 1, 1, 1, 1, 2, 2);
    a.sinks = &sink;
    fa_oracle_forward(&a, dense(q, 1, 1, 2), dense(k, 1, 1, 2),
                      dense(v, 1, 1, 2), o, lse);
    CHECK(close_to(o[0], 2, 1e-15) && close_to(o[1], -1, 1e-15) &&
              close_to(lse[0], log(2.0), 1e-15),
          "sink: o=(%g,%g) lse=%g", o[0], o[1], lse[0]);
    float sk2 = 1.5f;
    a.sinks = &sk2;
    int32_t used = 0; // no key at all: o = 0, lse = the sink
    a.seqused_k = &used;
    fa_oracle_forward(&a, dense(q, 1, 1, 2), dense(k, 1, 1, 2),
                      dense(v, 1, 1, 2), o, lse);
    CHECK(o[0] == 0 && o[1] == 0 && lse[0] == 1.5,
          "sink, no key: o=(%g,%g) lse=%g", o[0], o[1], lse[0]);
  }
  { // causal, zero scores: rows average the keys they see
    float q[4] = {0}, k[6] = {0}, v[3] = {1, 2, 6};
    fa_attention a = base(1, 2, 3, 1, 1, 2, 1);
    a.causal = FA_CAUSAL_BOTTOM_RIGHT; // row 0 sees 0..1, row 1 sees 0..2
    fa_oracle_forward(&a, dense(q, 2, 1, 2), dense(k, 3, 1, 2),
                      dense(v, 3, 1, 1), o, lse);
    CHECK(close_to(o[0], 1.5, 1e-15) && close_to(o[1], 3, 1e-15) &&
              close_to(lse[0], log(2.0), 1e-15) &&
              close_to(lse[1], log(3.0), 1e-15),
          "causal br: o=(%g,%g) lse=(%g,%g)", o[0], o[1], lse[0], lse[1]);
    a.causal = FA_CAUSAL_TOP_LEFT; // row 0 sees 0, row 1 sees 0..1
    fa_oracle_forward(&a, dense(q, 2, 1, 2), dense(k, 3, 1, 2),
                      dense(v, 3, 1, 1), o, lse);
    CHECK(close_to(o[0], 1, 1e-15) && close_to(o[1], 1.5, 1e-15),
          "causal tl: o=(%g,%g)", o[0], o[1]);
  }
  { // more queries than keys, bottom-right: the first rows see nothing
    float q[6] = {0}, k[2] = {0}, v[1] = {3};
    fa_attention a = base(1, 3, 1, 1, 1, 2, 1);
    a.causal = FA_CAUSAL_BOTTOM_RIGHT;
    fa_oracle_forward(&a, dense(q, 3, 1, 2), dense(k, 1, 1, 2),
                      dense(v, 1, 1, 1), o, lse);
    CHECK(o[0] == 0 && o[1] == 0 && o[2] == 3 && isinf(lse[0]) && lse[0] < 0 &&
              isinf(lse[1]) && lse[2] == 0,
          "empty rows: o=(%g,%g,%g) lse=(%g,%g,%g)", o[0], o[1], o[2], lse[0],
          lse[1], lse[2]);
    CHECK(fa_oracle_visible_count(&a, 0, 0) == 0 &&
              fa_oracle_visible_count(&a, 0, 2) == 1,
          "visible counts");
  }
  { // window (1, 0), zero scores: row i averages keys max(0,i-1)..i
    float q[8] = {0}, k[8] = {0}, v[4] = {1, 2, 4, 8};
    fa_attention a = base(1, 4, 4, 1, 1, 2, 1);
    a.window_left = 1;
    a.window_right = 0;
    fa_oracle_forward(&a, dense(q, 4, 1, 2), dense(k, 4, 1, 2),
                      dense(v, 4, 1, 1), o, lse);
    CHECK(close_to(o[0], 1, 1e-15) && close_to(o[1], 1.5, 1e-15) &&
              close_to(o[2], 3, 1e-15) && close_to(o[3], 6, 1e-15),
          "window: o=(%g,%g,%g,%g)", o[0], o[1], o[2], o[3]);
  }
  { // ALiBi, zero q, sq=1 sk=3 bottom-right: distances 2, 1, 0
    float q[2] = {0}, k[6] = {0}, v[3] = {1, 10, 100}, slope = 0.7f;
    fa_attention a = base(1, 1, 3, 1, 1, 2, 1);
    a.alibi_slopes = &slope;
    fa_oracle_forward(&a, dense(q, 1, 1, 2), dense(k, 3, 1, 2),
                      dense(v, 3, 1, 1), o, lse);
    double m = (double)slope, w0 = exp(-2 * m), w1 = exp(-m), w2 = 1;
    double want = (w0 * 1 + w1 * 10 + w2 * 100) / (w0 + w1 + w2);
    CHECK(close_to(o[0], want, 1e-14) &&
              close_to(lse[0], log(w0 + w1 + w2), 1e-14),
          "alibi: o=%g want %g", o[0], want);
    a.causal = FA_CAUSAL_TOP_LEFT; // shift 0: distances 0, 1, 2 -> key 0 only
    fa_oracle_forward(&a, dense(q, 1, 1, 2), dense(k, 3, 1, 2),
                      dense(v, 3, 1, 1), o, lse);
    CHECK(close_to(o[0], 1, 1e-15) && close_to(lse[0], 0, 1e-15),
          "alibi tl causal: o=%g lse=%g", o[0], lse[0]);
  }
  { // softcap: scale*q.k = 10, cap 2 -> s = 2 tanh(5)
    float q[1] = {5}, k[1] = {2}, v[1] = {3};
    fa_attention a = base(1, 1, 1, 1, 1, 1, 1);
    a.scale = 1.0f;
    a.softcap = 2.0f;
    fa_oracle_forward(&a, dense(q, 1, 1, 1), dense(k, 1, 1, 1),
                      dense(v, 1, 1, 1), o, lse);
    CHECK(o[0] == 3 && close_to(lse[0], 2 * tanh(5.0), 1e-15),
          "softcap: lse=%g", lse[0]);
  }
  { // GQA: query head h reads kv head h / (heads_q / heads_kv)
    float q[6] = {0}, k[2] = {0}, v[2] = {10, 20};
    fa_attention a = base(1, 1, 1, 6, 2, 1, 1);
    fa_oracle_forward(&a, dense(q, 1, 6, 1), dense(k, 1, 2, 1),
                      dense(v, 1, 2, 1), o, lse);
    CHECK(o[0] == 10 && o[1] == 10 && o[2] == 10 && o[3] == 20 && o[4] == 20 &&
              o[5] == 20,
          "gqa mapping: o=(%g,%g,%g,%g,%g,%g)", o[0], o[1], o[2], o[3], o[4],
          o[5]);
  }
  { // default scale is 1/sqrt(d); head_dim_v 0 means head_dim
    float q[4] = {1, 1, 1, 1}, k[4] = {1, 1, 1, 1}, v[4] = {1, 2, 3, 4};
    fa_attention a = base(1, 1, 1, 1, 1, 4, 0);
    fa_oracle_forward(&a, dense(q, 1, 1, 4), dense(k, 1, 1, 4),
                      dense(v, 1, 1, 4), o, lse);
    CHECK(close_to(lse[0], 2.0, 1e-15) && o[3] == 4,
          "default scale: lse=%g (want 4/sqrt(4) = 2)", lse[0]);
  }
}

/* ---- random problems for 2-4 ------------------------------------------------
 */

typedef struct prob {
  fa_attention a;
  float *q, *k, *v, *d_o; /* dense BSHD, keys in logical order */
  int32_t cuq[8], cuk[8], used[8];
  float slopes[8], sinks[8];
} prob;

static void fill_rand(float *p, size_t n, ts_rng *r, double sd) {
  for (size_t i = 0; i < n; i++) p[i] = (float)(sd * ts_rng_normal(r));
}

static void prob_free(prob *p) {
  free(p->q);
  free(p->k);
  free(p->v);
  free(p->d_o);
}

/* b=2, sq=3, sk=5, hq=4, hkv=2, d=3, dv=2 with feature flags. */
enum {
  F_CAUSAL_BR = 1,
  F_CAUSAL_TL = 2,
  F_WINDOW = 4,
  F_CAP = 8,
  F_ALIBI = 16,
  F_SINK = 32,
  F_USED = 64
};

static void prob_make(prob *p, int flags, ts_rng *r) {
  memset(p, 0, sizeof *p);
  p->a = base(2, 3, 5, 4, 2, 3, 2);
  fa_attention *a = &p->a;
  a->scale = 0.8f;
  if (flags & F_CAUSAL_BR) a->causal = FA_CAUSAL_BOTTOM_RIGHT;
  if (flags & F_CAUSAL_TL) a->causal = FA_CAUSAL_TOP_LEFT;
  if (flags & F_WINDOW) {
    a->window_left = 1;
    a->window_right = a->causal ? -1 : 1;
  }
  if (flags & F_CAP) a->softcap = 1.5f;
  if (flags & F_ALIBI) {
    for (int h = 0; h < 4; h++) p->slopes[h] = 0.3f * (float)(h + 1);
    a->alibi_slopes = p->slopes;
  }
  if (flags & F_SINK) {
    for (int h = 0; h < 4; h++) p->sinks[h] = (float)ts_rng_normal(r);
    a->sinks = p->sinks;
  }
  if (flags & F_USED) {
    p->used[0] = 4;
    p->used[1] = 2;
    a->seqused_k = p->used;
  }
  size_t nq = 2 * 3 * 4 * 3, nk = 2 * 5 * 2 * 3, nv = 2 * 5 * 2 * 2,
         no = 2 * 3 * 4 * 2;
  p->q = malloc(sizeof(float) * nq);
  p->k = malloc(sizeof(float) * nk);
  p->v = malloc(sizeof(float) * nv);
  p->d_o = malloc(sizeof(float) * no);
  fill_rand(p->q, nq, r, 1.0);
  fill_rand(p->k, nk, r, 1.0);
  fill_rand(p->v, nv, r, 1.0);
  fill_rand(p->d_o, no, r, 1.0);
}

static fa_tensor tq(prob *p) { return dense(p->q, 3, 4, 3); }
static fa_tensor tk(prob *p) { return dense(p->k, 5, 2, 3); }
static fa_tensor tv(prob *p) { return dense(p->v, 5, 2, 2); }
static fa_tensor tdo(prob *p) { return dense(p->d_o, 3, 4, 2); }

/* ---- 2. addressing invariance ----------------------------------------------
 */

/* The same logical keys stored as a paged pool with page size 2 and
   shuffled pages must give bit-identical results; so must varlen packing
   and a BHSD strided copy. */
static void invariance(int flags, ts_rng *r) {
  prob p;
  prob_make(&p, flags, r);
  double o0[48], l0[24], o1[48], l1[24];
  fa_oracle_forward(&p.a, tq(&p), tk(&p), tv(&p), o0, l0);

  // Paged: pages of 2 slots; logical block j of sequence b in page
  // table[b][j]; 3 blocks per sequence, 6 pages + 2 unused (NaN).
  int32_t table[6] = {4, 0, 6, 7, 2, 5};
  float kp[8 * 2 * 2 * 3], vp[8 * 2 * 2 * 2];
  for (size_t i = 0; i < sizeof kp / 4; i++) kp[i] = NAN;
  for (size_t i = 0; i < sizeof vp / 4; i++) vp[i] = NAN;
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < 5; j++) {
      int page = table[b * 3 + j / 2], slot = j % 2;
      if (p.a.seqused_k && j >= p.a.seqused_k[b]) continue; // stays NaN
      memcpy(kp + ((page * 2 + slot) * 2) * 3, p.k + ((b * 5 + j) * 2) * 3,
             sizeof(float) * 6);
      memcpy(vp + ((page * 2 + slot) * 2) * 2, p.v + ((b * 5 + j) * 2) * 2,
             sizeof(float) * 4);
    }
  fa_attention ap = p.a;
  ap.block_table = table;
  ap.max_blocks_per_seq = 3;
  ap.page_size = 2;
  ap.num_pages = 8;
  fa_tensor kt = {kp, FA_F32, 2 * 2 * 3, 2 * 3, 3};
  fa_tensor vt = {vp, FA_F32, 2 * 2 * 2, 2 * 2, 2};
  fa_oracle_forward(&ap, tq(&p), kt, vt, o1, l1);
  CHECK(!memcmp(o0, o1, sizeof o0) && !memcmp(l0, l1, sizeof l0),
        "flags %d: paged != dense", flags);

  // Varlen: both sequences packed (q rows 0-2, 3-5; k rows 0-4, 5-9).
  fa_attention av = p.a;
  p.cuq[0] = 0, p.cuq[1] = 3, p.cuq[2] = 6;
  p.cuk[0] = 0, p.cuk[1] = 5, p.cuk[2] = 10;
  av.cu_seqlens_q = p.cuq;
  av.cu_seqlens_k = p.cuk;
  fa_tensor qv = tq(&p), kv = tk(&p), vv = tv(&p);
  qv.stride_batch = kv.stride_batch = vv.stride_batch = 0;
  fa_oracle_forward(&av, qv, kv, vv, o1, l1);
  CHECK(!memcmp(o0, o1, sizeof o0) && !memcmp(l0, l1, sizeof l0),
        "flags %d: varlen != dense", flags);

  // BHSD copy of q with padded strides.
  float qb[2 * 4 * 3 * 4];
  for (size_t i = 0; i < sizeof qb / 4; i++) qb[i] = NAN;
  fa_tensor qs = {qb, FA_F32, 4 * 3 * 4, 4, 3 * 4};
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 3; i++)
      for (int h = 0; h < 4; h++)
        memcpy(qb + b * qs.stride_batch + i * qs.stride_seq +
                   h * qs.stride_head,
               p.q + ((b * 3 + i) * 4 + h) * 3, sizeof(float) * 3);
  fa_oracle_forward(&p.a, qs, tk(&p), tv(&p), o1, l1);
  CHECK(!memcmp(o0, o1, sizeof o0) && !memcmp(l0, l1, sizeof l0),
        "flags %d: strided bhsd != dense", flags);

  // Backward through the paged pool equals backward on dense keys.
  double g0[3][72], g1[3][72];
  memset(g0, 0, sizeof g0);
  memset(g1, 0, sizeof g1);
  fa_oracle_backward(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), g0[0], g0[1],
                     g0[2]);
  fa_oracle_backward(&ap, tq(&p), kt, vt, tdo(&p), g1[0], g1[1], g1[2]);
  CHECK(!memcmp(g0, g1, sizeof g0), "flags %d: paged backward != dense", flags);
  prob_free(&p);
}

/* ---- 3. naive f32 vs oracle
 * -------------------------------------------------- */

static void naive_agrees(int flags, ts_rng *r) {
  prob p;
  prob_make(&p, flags, r);
  double o[48], l[24], g[3][72];
  float of[48], lf[24], gf[3][72];
  fa_oracle_forward(&p.a, tq(&p), tk(&p), tv(&p), o, l);
  fa_naive_forward(&p.a, tq(&p), tk(&p), tv(&p), of, lf);
  double eo = ts_rel_err_f(o, of, 48), el = ts_lse_err_f(l, lf, 24);
  size_t first = 0;
  double lfd[24];
  for (int i = 0; i < 24; i++) lfd[i] = lf[i];
  CHECK(eo < 1e-6 && el < 1e-6 && !ts_nonfinite_parity(l, lfd, 24, &first),
        "flags %d: naive f32 forward vs oracle: o %.2e lse %.2e", flags, eo,
        el);
  fa_oracle_backward(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), g[0], g[1], g[2]);
  fa_naive_backward(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), gf[0], gf[1], gf[2]);
  size_t n[3] = {72, 60, 40};
  for (int i = 0; i < 3; i++) {
    double e = ts_rel_err_f(g[i], gf[i], n[i]);
    CHECK(e < 1e-5, "flags %d: naive f32 backward vs oracle: grad %d %.2e",
          flags, i, e);
  }
  prob_free(&p);
}

/* ---- 4. oracle backward vs central differences
 * -------------------------------- */

static double loss(prob *p) {
  double o[48];
  fa_oracle_forward(&p->a, tq(p), tk(p), tv(p), o, NULL);
  double s = 0.0;
  for (int i = 0; i < 48; i++) s += o[i] * p->d_o[i];
  return s;
}

static void finite_diff(int flags, ts_rng *r) {
  prob p;
  prob_make(&p, flags, r);
  double g[3][72];
  fa_oracle_backward(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), g[0], g[1], g[2]);
  float *x[3] = {p.q, p.k, p.v};
  size_t n[3] = {72, 60, 40};
  double worst = 0.0, gmax = 0.0;
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < n[t]; i++) {
      // Step h, but divide by the steps the f32 storage really took.
      float x0 = x[t][i];
      float xp = x0 + 1e-2f, xm = x0 - 1e-2f;
      x[t][i] = xp;
      double lp = loss(&p);
      x[t][i] = xm;
      double lm = loss(&p);
      x[t][i] = x0;
      double fd = (lp - lm) / ((double)xp - (double)xm);
      double e = fabs(fd - g[t][i]);
      if (e > worst) worst = e;
      if (fabs(g[t][i]) > gmax) gmax = fabs(g[t][i]);
    }
  // The magnitudes bound the gradients elementwise, and are positive
  // wherever a gradient term exists (dv: every visible key).
  double mg[3][72];
  fa_oracle_backward_magnitude(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), mg[0],
                               mg[1], mg[2]);
  int bad = 0;
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < n[t]; i++)
      if (fabs(g[t][i]) > mg[t][i] * (1 + 1e-12) + 1e-300 ||
          (g[t][i] != 0.0 && mg[t][i] == 0.0))
        bad++;
  CHECK(!bad, "flags %d: %d gradients exceed their magnitudes", flags, bad);
  // Central differences with h = 1e-2 are accurate to O(h^2) ~ 1e-4 times
  // the third derivative; a wrong term (missing chain rule, group sum,
  // sink) is off by O(gradient) ~ 1e-1.
  CHECK(worst <= 2e-3 * (1.0 + gmax),
        "flags %d: oracle backward vs finite differences: max err %.3e "
        "(max |grad| %.3e)",
        flags, worst, gmax);
  prob_free(&p);
}

/* ---- 5. positions, descales, output dtype, dsinks ------------------------
 */

static void semantics_02(int flags, ts_rng *r) {
  prob p;
  prob_make(&p, flags, r);
  double o0[48], l0[24], o1[48], l1[24], g0[3][72], g1[3][72];
  fa_oracle_forward(&p.a, tq(&p), tk(&p), tv(&p), o0, l0);
  fa_oracle_backward(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), g0[0], g0[1],
                     g0[2]);

  // Explicit positions restating the aligned ones: per-sequence arrays
  // carry each sequence's len_k - len_q (0 top-left), the scalars a common
  // offset that cancels.
  int64_t qp[2], kp[2];
  for (int b = 0; b < 2; b++) {
    qp[b] = p.a.causal == FA_CAUSAL_TOP_LEFT
                ? 0
                : fa_oracle_len_k(&p.a, b) - fa_oracle_len_q(&p.a, b);
    kp[b] = 0;
  }
  fa_attention ae = p.a;
  ae.positions = FA_POSITIONS_EXPLICIT;
  ae.q_position = 1000 + 3;
  ae.k_position = 1000 + 3;
  ae.q_positions = qp;
  ae.k_positions = kp;
  fa_oracle_forward(&ae, tq(&p), tk(&p), tv(&p), o1, l1);
  CHECK(!memcmp(o0, o1, sizeof o0) && !memcmp(l0, l1, sizeof l0),
        "flags %d: explicit positions restating the aligned ones differ",
        flags);
  // The same shift added to q and k positions (per sequence): the same.
  for (int b = 0; b < 2; b++) {
    qp[b] -= 2 * b;
    kp[b] -= 2 * b;
  }
  fa_oracle_forward(&ae, tq(&p), tk(&p), tv(&p), o1, l1);
  CHECK(!memcmp(o0, o1, sizeof o0) && !memcmp(l0, l1, sizeof l0),
        "flags %d: a shift common to q and k positions changed the result",
        flags);
  if (p.a.causal || p.a.window_left >= 0 || p.a.alibi_slopes) {
    ae.q_position += 1; // the diagonal moves: masks and ALiBi see it
    fa_oracle_forward(&ae, tq(&p), tk(&p), tv(&p), o1, l1);
    CHECK(memcmp(o0, o1, sizeof o0) != 0,
          "flags %d: moving the queries by one changed nothing", flags);
  }

  // Descales: q x 2 (one value), k x 2^(e) per (batch, kv head), v x 0.5,
  // stored scaled vs decoded by the descale: bit-identical.
  float dq1 = 2.0f, dk[4] = {0.5f, 2.0f, 4.0f, 0.25f}, dv1 = 0.5f;
  float qs[72], ks[60], vs[40];
  for (int i = 0; i < 72; i++) qs[i] = p.q[i] * dq1;
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < 5; j++)
      for (int h = 0; h < 2; h++)
        for (int c = 0; c < 3; c++) {
          int x = ((b * 5 + j) * 2 + h) * 3 + c;
          ks[x] = p.k[x] * dk[b * 2 + h];
        }
  for (int i = 0; i < 40; i++) vs[i] = p.v[i] * dv1;
  fa_tensor qd = tq(&p), kd = tk(&p), vd = tv(&p);
  qd.descale = &dq1;
  kd.descale = dk;
  kd.descale_per_head = 1;
  vd.descale = &dv1;
  fa_tensor qx = dense(qs, 3, 4, 3), kx = dense(ks, 5, 2, 3),
            vx = dense(vs, 5, 2, 2);
  double o2[48], l2[24], g2[3][72];
  fa_oracle_forward(&p.a, qd, kd, vd, o1, l1);
  fa_oracle_forward(&p.a, qx, kx, vx, o2, l2);
  CHECK(!memcmp(o1, o2, sizeof o1) && !memcmp(l1, l2, sizeof l1),
        "flags %d: descaled inputs differ from inputs scaled in storage",
        flags);
  memset(g1, 0, sizeof g1);
  memset(g2, 0, sizeof g2);
  fa_oracle_backward(&p.a, qd, kd, vd, tdo(&p), g1[0], g1[1], g1[2]);
  fa_oracle_backward(&p.a, qx, kx, vx, tdo(&p), g2[0], g2[1], g2[2]);
  CHECK(!memcmp(g1, g2, sizeof g1),
        "flags %d: descaled gradients differ from those of inputs scaled "
        "in storage (they are with respect to the decoded inputs)",
        flags);
  // q per head: entry b * heads_kv + h / group.
  float dqh[4] = {2.0f, 0.5f, 1.0f, 4.0f};
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 3; i++)
      for (int h = 0; h < 4; h++)
        for (int c = 0; c < 3; c++) {
          int x = ((b * 3 + i) * 4 + h) * 3 + c;
          qs[x] = p.q[x] * dqh[b * 2 + h / 2];
        }
  qd = tq(&p);
  qd.descale = dqh;
  qd.descale_per_head = 1;
  fa_oracle_forward(&p.a, qd, tk(&p), tv(&p), o1, l1);
  fa_oracle_forward(&p.a, qx, tk(&p), tv(&p), o2, l2);
  CHECK(!memcmp(o1, o2, sizeof o1) && !memcmp(l1, l2, sizeof l1),
        "flags %d: q's per-head descale is not indexed by (batch, kv head)",
        flags);

  // A bf16 dO is read as its value.
  uint16_t dob[48];
  float dor[48];
  for (int i = 0; i < 48; i++) {
    ts_store(dob, FA_BF16, i, p.d_o[i]);
    dor[i] = (float)ts_load(dob, FA_BF16, i);
  }
  fa_tensor tb = dense((float *)(void *)dob, 3, 4, 2), tr = dense(dor, 3, 4, 2);
  tb.dtype = FA_BF16;
  fa_oracle_backward(&p.a, tq(&p), tk(&p), tv(&p), tb, g1[0], g1[1], g1[2]);
  fa_oracle_backward(&p.a, tq(&p), tk(&p), tv(&p), tr, g2[0], g2[1], g2[2]);
  CHECK(!memcmp(g1, g2, sizeof g1), "flags %d: a bf16 dO is misread", flags);

  // dsinks vs central differences in the sinks.
  if (p.a.sinks) {
    double ds[4], mag[4];
    CHECK(!fa_oracle_dsinks(&p.a, tq(&p), tk(&p), tv(&p), tdo(&p), ds, mag),
          "flags %d: fa_oracle_dsinks failed", flags);
    for (int h = 0; h < 4; h++) {
      float s0 = p.sinks[h], sp = s0 + 1e-2f, sm = s0 - 1e-2f;
      p.sinks[h] = sp;
      double lp = loss(&p);
      p.sinks[h] = sm;
      double lm = loss(&p);
      p.sinks[h] = s0;
      double fd = (lp - lm) / ((double)sp - (double)sm);
      CHECK(fabs(fd - ds[h]) <= 2e-3 * (1.0 + fabs(ds[h])),
            "flags %d: dsinks[%d] = %.6g, central differences %.6g", flags, h,
            ds[h], fd);
      CHECK(fabs(ds[h]) <= mag[h] * (1 + 1e-12) + 1e-300,
            "flags %d: |dsinks[%d]| = %.3g exceeds its magnitude %.3g", flags,
            h, fabs(ds[h]), mag[h]);
    }
  }
  prob_free(&p);
}

int xv_selftest(void) {
  static const int combos[] = {
      0,
      F_CAUSAL_BR,
      F_CAUSAL_TL,
      F_WINDOW,
      F_CAUSAL_BR | F_WINDOW,
      F_CAP,
      F_ALIBI,
      F_SINK,
      F_USED,
      F_CAUSAL_BR | F_USED,
      F_CAUSAL_TL | F_ALIBI,
      F_CAP | F_ALIBI | F_SINK | F_CAUSAL_BR,
      F_CAP | F_ALIBI | F_SINK | F_WINDOW | F_USED,
  };
  ts_rng r;
  ts_rng_seed(&r, 12345);
  ut_failures = 0;
  printf("oracle self-test: closed forms\n");
  closed_forms();
  for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
    printf("oracle self-test: features 0x%02x: invariance, naive, finite "
           "differences\n",
           combos[c]);
    invariance(combos[c], &r);
    naive_agrees(combos[c], &r);
    finite_diff(combos[c], &r);
    semantics_02(combos[c], &r);
  }
  printf("oracle self-test: %s (%ld of %ld checks failed)\n",
         ut_failures ? "FAIL" : "PASS", ut_failures, ut_checks);
  return ut_failures != 0;
}
