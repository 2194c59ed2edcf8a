// SPDX-License-Identifier: MIT
// The online-softmax algebra (core/softmax.h) against a two-pass softmax in
// float64: block updates over adversarial rows, merges of partial states in
// any split and any order (the merge lemma), sinks, the LSE-form merge,
// and the step rules every kernel takes (fa_softmax_step).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "softmax.h"

enum { MAXN = 64, DV = 5, MAXPARTS = 8 };

// Float error model, used for every tolerance below. Each path does O(1)
// roundings per term plus a float sum of at most MAXN terms; with expf/logf
// good to a few ulps, observed errors stay near 1e-7 and the worst case
// (n * 2^-24 for n = 64) is 4e-6. 2e-6 relative, measured against the
// largest |v| that contributes (the scale O cannot exceed), is a realistic
// bound that a wrong rescale (errors of order 1) can never meet.
static const double kTol = 2e-6;

typedef struct row {
  const char *name;
  int n;
  float s[MAXN];     // scores, -INFINITY = masked
  float v[MAXN][DV]; // value vectors
} row;

// ---- float64 reference: plain two-pass softmax -----------------------------

typedef struct result {
  double o[DV];
  double lse;
} result;

static void ref_softmax(const row *r, const unsigned char *keep, double sink,
                        result *out) {
  double mx = -INFINITY;
  int nan = 0;
  for (int j = 0; j < r->n; j++) {
    if (keep && !keep[j]) continue;
    if (isnan(r->s[j]))
      nan = 1;
    else if (r->s[j] > mx)
      mx = r->s[j];
  }
  if (!isnan(sink) && sink > mx) mx = sink;
  if (nan) {
    for (int d = 0; d < DV; d++) out->o[d] = NAN;
    out->lse = NAN;
    return;
  }
  if (mx == -INFINITY) { // no visible key and no (finite) sink
    for (int d = 0; d < DV; d++) out->o[d] = 0.0;
    out->lse = isnan(sink) ? -INFINITY : sink;
    return;
  }
  double sum = isnan(sink) ? 0.0 : exp(sink - mx);
  double acc[DV] = {0};
  for (int j = 0; j < r->n; j++) {
    if ((keep && !keep[j]) || r->s[j] == -INFINITY) continue;
    double p = exp((double)r->s[j] - mx);
    sum += p;
    for (int d = 0; d < DV; d++) acc[d] += p * r->v[j][d];
  }
  for (int d = 0; d < DV; d++) out->o[d] = acc[d] / sum;
  out->lse = mx + log(sum);
}

// ---- the code under test -------------------------------------------------

typedef struct state {
  float m, l, o[DV]; // o unnormalised, relative to m
} state;

static void state_init(state *st) {
  st->m = -INFINITY;
  st->l = 0.0f;
  for (int d = 0; d < DV; d++) st->o[d] = 0.0f;
}

// Visit the keys of r in [begin, end) (those kept) in blocks whose sizes
// come from `cuts` (random when NULL), updating st as a kernel would.
static void run_blocks(const row *r, const unsigned char *keep, int begin,
                       int end, int max_block, state *st) {
  int j = begin;
  while (j < end) {
    int len = ut_rand_int(1, max_block);
    if (len > end - j) len = end - j;
    float s[MAXN];
    for (int t = 0; t < len; t++)
      s[t] = (keep && !keep[j + t]) ? -INFINITY : r->s[j + t];
    float alpha = fa_softmax_update(&st->m, &st->l, s, len);
    for (int d = 0; d < DV; d++) {
      float acc = st->o[d] * alpha;
      for (int t = 0; t < len; t++) acc += s[t] * r->v[j + t][d];
      st->o[d] = acc;
    }
    j += len;
  }
}

static void finalize(const state *st, float sink, result *out) {
  float lse = 12345.0f;
  float f = fa_softmax_finalize(st->m, st->l, sink, &lse);
  for (int d = 0; d < DV; d++) out->o[d] = (double)(st->o[d] * f);
  out->lse = lse;
}

// ---- comparison ----------------------------------------------------------

static double vmax(const row *r) {
  double mx = 0.0;
  for (int j = 0; j < r->n; j++)
    for (int d = 0; d < DV; d++)
      if (fabs(r->v[j][d]) > mx) mx = fabs(r->v[j][d]);
  return mx > 0.0 ? mx : 1.0;
}

static int close_to(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol;
}

static double g_worst; // largest error seen, relative to its scale

// extra: additional relative tolerance a path is entitled to (see callers).
static void compare(const char *what, const row *r, const result *got,
                    const result *want, double extra) {
  double sv = vmax(r);
  for (int d = 0; d < DV; d++) {
    CHECK(close_to(got->o[d], want->o[d], (kTol + extra) * sv),
          "%s, row '%s' (n=%d): O[%d] = %.9g, want %.9g", what, r->name, r->n,
          d, got->o[d], want->o[d]);
    if (isfinite(want->o[d]) && isfinite(got->o[d]) &&
        fabs(got->o[d] - want->o[d]) / sv > g_worst && extra == 0.0)
      g_worst = fabs(got->o[d] - want->o[d]) / sv;
  }
  double sl = fabs(want->lse) > 1.0 ? fabs(want->lse) : 1.0;
  CHECK(close_to(got->lse, want->lse, (kTol + extra) * sl),
        "%s, row '%s' (n=%d): lse = %.9g, want %.9g", what, r->name, r->n,
        got->lse, want->lse);
  if (isfinite(want->lse) && isfinite(got->lse) &&
      fabs(got->lse - want->lse) / sl > g_worst && extra == 0.0)
    g_worst = fabs(got->lse - want->lse) / sl;
}

// ---- adversarial rows ----------------------------------------------------

static void fill_values(row *r) {
  for (int j = 0; j < r->n; j++)
    for (int d = 0; d < DV; d++) r->v[j][d] = (float)ut_rand_uniform(-1.0, 1.0);
}

static int make_rows(row *rows) {
  int k = 0;
  row *r;
#define NEW_ROW(nm, len) (r = &rows[k++], r->name = (nm), r->n = (len))

  NEW_ROW("random", 48);
  for (int j = 0; j < r->n; j++) r->s[j] = (float)ut_rand_uniform(-6, 6);

  NEW_ROW("all masked", 40);
  for (int j = 0; j < r->n; j++) r->s[j] = -INFINITY;

  NEW_ROW("masked first", 40);
  for (int j = 0; j < r->n; j++)
    r->s[j] = j < 24 ? -INFINITY : (float)ut_rand_uniform(-3, 3);

  NEW_ROW("masked middle", 40);
  for (int j = 0; j < r->n; j++)
    r->s[j] = (j >= 8 && j < 32) ? -INFINITY : (float)ut_rand_uniform(-3, 3);

  NEW_ROW("masked last", 40);
  for (int j = 0; j < r->n; j++)
    r->s[j] = j >= 16 ? -INFINITY : (float)ut_rand_uniform(-3, 3);

  NEW_ROW("one visible key", 33);
  for (int j = 0; j < r->n; j++) r->s[j] = j == 29 ? 0.75f : -INFINITY;

  NEW_ROW("logits +-1e4", 48);
  for (int j = 0; j < r->n; j++)
    r->s[j] =
        (ut_rand64() & 1 ? 1.0e4f : -1.0e4f) + (float)ut_rand_uniform(-2, 2);

  NEW_ROW("all +1e4", 20);
  for (int j = 0; j < r->n; j++) r->s[j] = 1.0e4f;

  NEW_ROW("all -1e4", 20);
  for (int j = 0; j < r->n; j++) r->s[j] = -1.0e4f;

  NEW_ROW("ties", 36);
  for (int j = 0; j < r->n; j++) r->s[j] = 2.5f;

  NEW_ROW("ties at the max", 36);
  for (int j = 0; j < r->n; j++)
    r->s[j] = j % 5 == 0 ? 7.0f : (float)ut_rand_uniform(-3, 3);

  NEW_ROW("length 1", 1);
  r->s[0] = -3.25f;

  NEW_ROW("length 1 masked", 1);
  r->s[0] = -INFINITY;

  // A block far above everything before it: exp(s - m_old) would overflow
  // float if the update were not written in the stable form.
  NEW_ROW("max jumps by 200", 48);
  for (int j = 0; j < r->n; j++)
    r->s[j] =
        j >= 20 && j < 28 ? 200.0f + (float)j : (float)ut_rand_uniform(-1, 1);

  NEW_ROW("max jumps from -1e4 to 1e4", 30);
  for (int j = 0; j < r->n; j++) r->s[j] = j < 15 ? -1.0e4f : 1.0e4f - j;

  NEW_ROW("rising ramp", 48);
  for (int j = 0; j < r->n; j++) r->s[j] = 3.0f * j;

  NEW_ROW("falling ramp", 48);
  for (int j = 0; j < r->n; j++) r->s[j] = -3.0f * j;

  NEW_ROW("huge finite negatives", 24);
  for (int j = 0; j < r->n; j++)
    r->s[j] = j % 3 ? -1.0e30f : (float)ut_rand_uniform(-1, 1);

  NEW_ROW("one NaN", 40);
  for (int j = 0; j < r->n; j++) r->s[j] = (float)ut_rand_uniform(-3, 3);
  r->s[17] = NAN;

  NEW_ROW("NaN among masked", 40);
  for (int j = 0; j < r->n; j++) r->s[j] = j >= 30 ? 1.0f : -INFINITY;
  r->s[5] = NAN;

  // Every score NaN, e.g. a query row that holds a NaN: the output must be
  // NaN (as the reference's), not silently O = 0, LSE = -inf.
  NEW_ROW("all NaN", 24);
  for (int j = 0; j < r->n; j++) r->s[j] = NAN;
#undef NEW_ROW
  for (int i = 0; i < k; i++) fill_values(&rows[i]);
  return k;
}

// ---- tests ---------------------------------------------------------------

// fa_softmax_update's own contract, step by step in float64.
static void test_update_contract(void) {
  float m = -INFINITY, l = 0.0f;
  float s0[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  float a = fa_softmax_update(&m, &l, s0, 4);
  CHECK(a == 1.0f && m == -INFINITY && l == 0.0f,
        "masked block on empty state: alpha %g m %g l %g", (double)a, (double)m,
        (double)l);
  for (int j = 0; j < 4; j++)
    CHECK(s0[j] == 0.0f, "P[%d] = %g", j, (double)s0[j]);

  float s1[3] = {1.0f, 3.0f, -INFINITY};
  a = fa_softmax_update(&m, &l, s1, 3);
  CHECK(a == 0.0f, "first real block: alpha %g, want 0", (double)a);
  CHECK(m == 3.0f, "m %g, want 3", (double)m);
  CHECK(fabs(s1[0] - exp(-2.0)) < 1e-7 && s1[1] == 1.0f && s1[2] == 0.0f,
        "P = %g %g %g", (double)s1[0], (double)s1[1], (double)s1[2]);
  CHECK(fabs(l - (1.0 + exp(-2.0))) < 1e-6, "l %g", (double)l);

  float l_before = l;
  float s2[2] = {-INFINITY, -INFINITY};
  a = fa_softmax_update(&m, &l, s2, 2);
  CHECK(a == 1.0f && m == 3.0f && l == l_before,
        "masked block on live state: alpha %g m %g l %g", (double)a, (double)m,
        (double)l);
  CHECK(s2[0] == 0.0f && s2[1] == 0.0f, "masked P %g %g", (double)s2[0],
        (double)s2[1]);

  float s3[2] = {2.0f, 10.0f};
  a = fa_softmax_update(&m, &l, s3, 2);
  CHECK(fabs(a - exp(-7.0)) < 1e-9, "alpha %g, want e^-7", (double)a);
  CHECK(m == 10.0f, "m %g", (double)m);
  double lw = (1.0 + exp(-2.0)) * exp(-7.0) + exp(-8.0) + 1.0;
  CHECK(fabs(l - lw) < 1e-6 * lw, "l %.9g, want %.9g", (double)l, lw);

  float s4[1] = {4.0f}; // below the max: alpha 1, state grows
  a = fa_softmax_update(&m, &l, s4, 1);
  CHECK(a == 1.0f && m == 10.0f, "lower block: alpha %g m %g", (double)a,
        (double)m);
  CHECK(fabs(s4[0] - exp(-6.0)) < 1e-9, "P %g", (double)s4[0]);

  // n = 0 is a no-op.
  float before_m = m, before_l = l;
  a = fa_softmax_update(&m, &l, NULL, 0);
  CHECK(a == 1.0f && m == before_m && l == before_l, "n = 0 changed state");
}

// One row, many random blockings, against the reference.
static void test_online(const row *r) {
  result want, got;
  ref_softmax(r, NULL, NAN, &want);
  int sizes[] = {1, 2, 3, 7, 8, 16, MAXN};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    for (int rep = 0; rep < 4; rep++) {
      state st;
      state_init(&st);
      run_blocks(r, NULL, 0, r->n, sizes[t], &st);
      finalize(&st, NAN, &got);
      compare("online", r, &got, &want, 0.0);
    }
  }
}

// Weights against float64 from the very same fp32 LSEs.
static void check_weights(int n, const float *lse, const float *w,
                          float out_lse) {
  double mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if (lse[i] > mx) mx = lse[i];
  for (int i = 0; i < n; i++)
    if (isnan(lse[i])) mx = NAN;
  if (isnan(mx)) {
    CHECK(isnan(out_lse), "NaN part: merged lse %g", (double)out_lse);
    return;
  }
  if (mx == -INFINITY) {
    CHECK(out_lse == -INFINITY, "empty parts: merged lse %g", (double)out_lse);
    for (int i = 0; i < n; i++)
      CHECK(w[i] == 0.0f, "w[%d] %g", i, (double)w[i]);
    return;
  }
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += exp((double)lse[i] - mx);
  double out = mx + log(sum);
  CHECK(fabs(out_lse - out) <= 4e-7 * (fabs(out) > 1.0 ? fabs(out) : 1.0),
        "merged lse %.9g, want %.9g", (double)out_lse, out);
  for (int i = 0; i < n; i++) {
    if (lse[i] == -INFINITY) {
      CHECK(w[i] == 0.0f, "empty part %d has weight %g", i, (double)w[i]);
      continue;
    }
    double wi = exp((double)lse[i] - mx) / sum;
    // lse[i] - max is rounded in fp32 before expf: |lse[i] - max| * 2^-24
    // absolute, the same relative error in the weight.
    double tol = (1e-6 + fabs((double)lse[i] - mx) * 0x1.0p-23) * wi;
    CHECK(fabs(w[i] - wi) <= tol + 1e-37, "w[%d] = %.9g, want %.9g", i,
          (double)w[i], wi);
  }
}

// Split the keys into parts (contiguous ranges or arbitrary subsets), run
// each part, merge the states in a random order and tree shape.
static void test_merge(const row *r) {
  for (int rep = 0; rep < 60; rep++) {
    int nparts = ut_rand_int(1, r->n < MAXPARTS ? r->n + 1 : MAXPARTS);
    unsigned char owner[MAXN];
    int contiguous = rep % 2;
    if (contiguous) { // cut points: part p owns [cut[p], cut[p+1])
      int cut = 0;
      for (int p = 0; p < nparts; p++) {
        int left = r->n - cut, parts_left = nparts - p;
        int len =
            p == nparts - 1 ? left : ut_rand_int(0, left / parts_left + 2);
        if (len > left) len = left;
        for (int j = cut; j < cut + len; j++) owner[j] = (unsigned char)p;
        cut += len;
      }
    } else {
      for (int j = 0; j < r->n; j++)
        owner[j] = (unsigned char)ut_rand_int(0, nparts - 1);
    }
    state st[MAXPARTS] = {0};
    result part_res[MAXPARTS];
    for (int p = 0; p < nparts; p++) {
      unsigned char keep[MAXN];
      for (int j = 0; j < r->n; j++) keep[j] = owner[j] == p;
      state_init(&st[p]);
      run_blocks(r, keep, 0, r->n, ut_rand_int(1, 9), &st[p]);
      finalize(&st[p], NAN, &part_res[p]);
    }

    // (m, l, O) merge: pick two live states, fold one into the other.
    int live[MAXPARTS];
    for (int p = 0; p < nparts; p++) live[p] = p;
    int nlive = nparts;
    state work[MAXPARTS];
    memcpy(work, st, sizeof work);
    while (nlive > 1) {
      int i = ut_rand_int(0, nlive - 1), j = ut_rand_int(0, nlive - 2);
      if (j >= i) j++;
      state *dst = &work[live[i]];
      const state *src = &work[live[j]];
      fa_softmax_merge(&dst->m, &dst->l, dst->o, src->m, src->l, src->o, DV);
      live[j] = live[--nlive];
    }
    result want, got;
    ref_softmax(r, NULL, NAN, &want);
    finalize(&work[live[0]], NAN, &got);
    compare(contiguous ? "merge, contiguous parts" : "merge, scattered parts",
            r, &got, &want, 0.0);

    // LSE-form merge of the normalised parts. The weights themselves must
    // match float64 on the same fp32 inputs to a few ulps.
    float lse[MAXPARTS], w[MAXPARTS];
    double lse_mag = 0.0;
    for (int p = 0; p < nparts; p++) {
      lse[p] = (float)part_res[p].lse;
      if (isfinite(lse[p]) && fabs(lse[p]) > lse_mag) lse_mag = fabs(lse[p]);
    }
    float out_lse = fa_lse_merge_weights(nparts, lse, w);
    check_weights(nparts, lse, w, out_lse);
    result lm;
    for (int d = 0; d < DV; d++) {
      float acc = 0.0f;
      for (int p = 0; p < nparts; p++) {
        if (w[p] == 0.0f) continue; // an empty part's O is 0 anyway
        acc += w[p] * (float)part_res[p].o[d];
      }
      lm.o[d] = isnan(out_lse) ? NAN : acc;
    }
    lm.lse = out_lse;
    // Storing a part's LSE in fp32 rounds it by up to |lse| * 2^-24 in
    // absolute terms, which perturbs its weight by that much relatively
    // (for |lse| = 1e4: 6e-4). That error is in the inputs, not the merge;
    // allow it (twice: the part's and the total's).
    compare("lse merge", r, &lm, &want, 2.0 * lse_mag * 0x1.0p-24);
  }
}

// Sinks: joining the denominator without a value vector.
static void test_sinks(const row *r) {
  float sinks[] = {0.0f, -5.0f, 4.0f, 1.0e4f, -1.0e4f, 250.0f, -INFINITY};
  for (size_t t = 0; t < sizeof sinks / sizeof sinks[0]; t++) {
    result want, got;
    ref_softmax(r, NULL, sinks[t], &want);
    state st;
    state_init(&st);
    run_blocks(r, NULL, 0, r->n, 5, &st);
    finalize(&st, sinks[t], &got);
    compare("with sink", r, &got, &want, 0.0);
  }
}

static void test_finalize_edges(void) {
  float lse = 0.0f;
  float f = fa_softmax_finalize(-INFINITY, 0.0f, NAN, &lse);
  CHECK(f == 0.0f && lse == -INFINITY, "empty row: factor %g lse %g", (double)f,
        (double)lse);
  f = fa_softmax_finalize(-INFINITY, 0.0f, 1.5f, &lse);
  CHECK(f == 0.0f && lse == 1.5f, "empty row + sink: factor %g lse %g",
        (double)f, (double)lse);
  f = fa_softmax_finalize(-INFINITY, 0.0f, -7.0f, &lse);
  CHECK(f == 0.0f && lse == -7.0f, "empty row + sink -7: factor %g lse %g",
        (double)f, (double)lse);
  f = fa_softmax_finalize(2.0f, 4.0f, NAN, &lse);
  CHECK(f == 0.25f && fabs(lse - (2.0 + log(4.0))) < 1e-6,
        "m 2 l 4: factor %g lse %g", (double)f, (double)lse);
  // Sink equal to the max: l doubles at the sink's weight.
  f = fa_softmax_finalize(2.0f, 1.0f, 2.0f, &lse);
  CHECK(fabs(f - 0.5) < 1e-7 && fabs(lse - (2.0 + log(2.0))) < 1e-6,
        "m 2 l 1 sink 2: factor %g lse %g", (double)f, (double)lse);
}

static void test_merge_edges(void) {
  float m = 1.0f, l = 2.0f, o[DV] = {1, 2, 3, 4, 5};
  float ob[DV] = {9, 9, 9, 9, 9};
  fa_softmax_merge(&m, &l, o, -INFINITY, 0.0f, ob, DV);
  CHECK(m == 1.0f && l == 2.0f && o[0] == 1.0f && o[4] == 5.0f,
        "merging an empty part changed the state");
  float me = -INFINITY, le = 0.0f, oe[DV] = {0};
  fa_softmax_merge(&me, &le, oe, 1.0f, 2.0f, o, DV);
  CHECK(me == 1.0f && le == 2.0f && oe[0] == 1.0f && oe[4] == 5.0f,
        "merging into an empty state did not copy");
  float mz = -INFINITY, lz = 0.0f, oz[DV] = {0};
  fa_softmax_merge(&mz, &lz, oz, -INFINITY, 0.0f, ob, DV);
  CHECK(mz == -INFINITY && lz == 0.0f && oz[0] == 0.0f,
        "empty + empty is not empty");
  // NaN in either part propagates.
  float mn = 1.0f, ln = 1.0f, on[DV] = {1, 1, 1, 1, 1};
  fa_softmax_merge(&mn, &ln, on, NAN, 1.0f, ob, DV);
  CHECK(isnan(mn) || isnan(ln) || isnan(on[0]), "NaN m_b vanished");
  float mm = 1.0f, lm = 1.0f, om[DV] = {1, 1, 1, 1, 1};
  fa_softmax_merge(&mm, &lm, om, 0.5f, NAN, ob, DV);
  CHECK(isnan(lm), "NaN l_b vanished: l %g", (double)lm);
}

static void test_lse_weights_edges(void) {
  float w[4];
  float lse1[1] = {3.5f};
  float out = fa_lse_merge_weights(1, lse1, w);
  CHECK(out == 3.5f && w[0] == 1.0f, "n = 1: lse %g w %g", (double)out,
        (double)w[0]);
  float all_empty[3] = {-INFINITY, -INFINITY, -INFINITY};
  out = fa_lse_merge_weights(3, all_empty, w);
  CHECK(out == -INFINITY && w[0] == 0.0f && w[1] == 0.0f && w[2] == 0.0f,
        "all -inf: lse %g", (double)out);
  float one_empty[3] = {1.0f, -INFINITY, 1.0f};
  out = fa_lse_merge_weights(3, one_empty, w);
  CHECK(fabs(out - (1.0 + log(2.0))) < 1e-6 && w[1] == 0.0f &&
            fabs(w[0] - 0.5) < 1e-7 && fabs(w[2] - 0.5) < 1e-7,
        "one empty part: lse %g w %g %g %g", (double)out, (double)w[0],
        (double)w[1], (double)w[2]);
  float with_nan[3] = {1.0f, NAN, 2.0f};
  out = fa_lse_merge_weights(3, with_nan, w);
  CHECK(isnan(out) && isnan(w[0]) && isnan(w[2]), "NaN part: lse %g",
        (double)out);
  float with_inf[2] = {INFINITY, 0.0f};
  out = fa_lse_merge_weights(2, with_inf, w);
  CHECK(out == INFINITY && isnan(w[0]) && w[1] == 0.0f,
        "+inf part: lse %g w %g %g", (double)out, (double)w[0], (double)w[1]);
  float far[2] = {1.0e4f, -1.0e4f};
  out = fa_lse_merge_weights(2, far, w);
  CHECK(out == 1.0e4f && w[0] == 1.0f && w[1] == 0.0f,
        "far apart: lse %g w %g %g", (double)out, (double)w[0], (double)w[1]);
  float sum_w = 0.0f;
  float many[4] = {-2.0f, 0.5f, 3.0f, 3.0f};
  out = fa_lse_merge_weights(4, many, w);
  double ref = log(exp(-2.0) + exp(0.5) + 2.0 * exp(3.0));
  for (int i = 0; i < 4; i++) sum_w += w[i];
  CHECK(fabs(out - ref) < 1e-6 * ref, "lse %g want %g", (double)out, ref);
  CHECK(fabs(sum_w - 1.0f) < 1e-6, "weights sum to %g", (double)sum_w);
  CHECK(fabs(w[0] - exp(-2.0 - ref)) < 1e-7, "w0 %g", (double)w[0]);
}

/* fa_max_nan, fa_softmax_step and fa_softmax_exponent: the rules every
   kernel's online-softmax step takes from them. */
static void test_step_rules(void) {
  CHECK(isnan(fa_max_nan(NAN, 1.0f)) && isnan(fa_max_nan(1.0f, NAN)) &&
            isnan(fa_max_nan(-INFINITY, NAN)) && isnan(fa_max_nan(NAN, NAN)),
        "fa_max_nan dropped a NaN");
  CHECK(fa_max_nan(-INFINITY, -INFINITY) == -INFINITY &&
            fa_max_nan(2.0f, -3.0f) == 2.0f && fa_max_nan(-3.0f, 2.0f) == 2.0f,
        "fa_max_nan of numbers");
  const float mul = 0.125f * 1.4426950408889634f; // d64's scale * log2(e)
  // All-masked block on an empty row: state unchanged, alpha = 1, P = 0.
  float m = -INFINITY, ref = 7.0f;
  float ae = fa_softmax_step(&m, -INFINITY, mul, &ref);
  CHECK(m == -INFINITY && ref == 0.0f && ae == 0.0f &&
            fa_softmax_exponent(-INFINITY, mul, ref) == -INFINITY,
        "all-masked block: m %g ref %g alpha exponent %g", (double)m,
        (double)ref, (double)ae);
  // First keys: alpha exponent -inf (O is still 0); the maximum stands:
  // exactly 0 (no drift); a NaN sticks.
  ae = fa_softmax_step(&m, 3.0f, mul, &ref);
  CHECK(m == 3.0f && ae == -INFINITY, "first block: alpha exponent %g",
        (double)ae);
  ae = fa_softmax_step(&m, 1.0f, mul, &ref);
  CHECK(m == 3.0f && ae == 0.0f, "max stands: alpha exponent %g", (double)ae);
  ae = fa_softmax_step(&m, NAN, mul, &ref);
  CHECK(isnan(m) && isnan(ae), "NaN block: m %g alpha exponent %g", (double)m,
        (double)ae);
  ae = fa_softmax_step(&m, 5.0f, mul, &ref);
  CHECK(isnan(m) && isnan(ae), "NaN max did not stick: m %g", (double)m);
  // Raw q.k of f16 inputs near 65504 at d64 (up to 2.7e11; base-2 logits
  // ~1e10, where ref's rounding error is ~1e3): the maximum's exponent is
  // exactly 0 and no other is positive, so l >= 1 (the fused form gave
  // exponents of +-800, l = 0 or inf, on the H200: issue 19).
  uint64_t seed = 11;
  for (int n = 0; n < 1000; n++) {
    float s[33], mx = -INFINITY, l = 0.0f;
    for (int j = 0; j < 33; j++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      s[j] = (float)((double)(seed >> 11) * 0x1p-53 * 2.0 - 1.0) * 1e11f;
      mx = fa_max_nan(mx, s[j]);
    }
    float mm = -INFINITY, rf;
    (void)fa_softmax_step(&mm, mx, mul, &rf);
    int pos = 0;
    for (int j = 0; j < 33; j++) {
      const float e = fa_softmax_exponent(s[j], mul, rf);
      pos += e > 0.0f;
      l += exp2f(e);
    }
    CHECK(fa_softmax_exponent(mx, mul, rf) == 0.0f && !pos && l >= 1.0f &&
              l <= 33.0f,
          "logits ~1e10: max exponent %g, %d positive, l %g",
          (double)fa_softmax_exponent(mx, mul, rf), pos, (double)l);
  }
}

int main(void) {
  static row rows[40];
  int nrows = make_rows(rows);
  test_update_contract();
  test_step_rules();
  test_finalize_edges();
  test_merge_edges();
  test_lse_weights_edges();
  for (int i = 0; i < nrows; i++) {
    test_online(&rows[i]);
    test_merge(&rows[i]);
    test_sinks(&rows[i]);
  }
  printf("worst error relative to its scale: %.3g (tolerance %.3g)\n", g_worst,
         kTol);
  return ut_finish("test_softmax");
}
