// SPDX-License-Identifier: MIT
// Per-element error bounds (see fz_tol.h for the analysis they implement).
// Reads the problem through the oracle's exposed semantics (visibility,
// indexing), never through core/.
#include "fz_tol.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "tensor.h"

#define FZ_EPS 0x1p-24 /* fp32 unit roundoff: the accumulation type */
#define FZ_K 8.0       /* safety factor on every first-order term */

double fz_round_rel(fa_dtype t) {
  return t == FA_F16 ? 0x1p-11 : t == FA_BF16 ? 0x1p-8 : 0.0;
}

double fz_round_abs(fa_dtype t) { return t == FA_F16 ? 0x1p-24 : 1e-37; }

/* max that keeps a NaN once one was seen (fmax would drop it). */
static double nmax(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a > b ? a : b;
}

typedef struct dims {
  int B, SQ, SK, HQ, HKV, D, DV, G;
  double scale; // as the library resolves it, in float
} dims;

static void get_dims(const fa_attention *a, dims *d) {
  d->B = a->batch;
  d->SQ = a->seqlen_q;
  d->SK = a->seqlen_k;
  d->HQ = a->heads_q;
  d->HKV = a->heads_kv;
  d->D = a->head_dim;
  d->DV = a->head_dim_v ? a->head_dim_v : a->head_dim;
  d->G = a->heads_q / a->heads_kv;
  d->scale = a->scale != 0.0f ? (double)a->scale
                              : (double)(1.0f / sqrtf((float)a->head_dim));
}

static int64_t diag_shift(const fa_attention *a, int b) {
  if (a->causal == FA_CAUSAL_TOP_LEFT) return 0;
  return (int64_t)fa_oracle_len_k(a, b) - fa_oracle_len_q(a, b);
}

/* The logit error bound of row (b, h, i) over its visible keys, divided by
   eps: (d+4)|scale| sum|q k| + 4 (cap + |alibi| + |s|); and the number of
   visible keys. */
typedef struct row_info {
  double es; // logit error / eps (NaN if a visible input is NaN)
  int nk;    // visible keys
  int over;  // a scaled product overflows fp32: nothing can be promised
} row_info;

static row_info row_logits(const fa_attention *a, const dims *dm,
                           const fa_tensor *q, const fa_tensor *k, int b, int h,
                           int i) {
  row_info r = {0.0, 0, 0};
  const int sk = fa_oracle_len_k(a, b), hk = h / dm->G;
  const int64_t qo = fa_oracle_q_index(a, q, b, i, h);
  const int64_t diag = (int64_t)i + diag_shift(a, b);
  const double cap = a->softcap,
               slope = a->alibi_slopes ? fabs((double)a->alibi_slopes[h]) : 0.0;
  for (int j = 0; j < sk; j++) {
    if (!fa_oracle_visible(a, b, i, j)) continue;
    r.nk++;
    const int64_t ko = fa_oracle_k_index(a, k, b, j, hk);
    double abs_dot = 0.0, dot = 0.0;
    for (int c = 0; c < dm->D; c++) {
      double x = ts_load(q->data, q->dtype, qo + c),
             y = ts_load(k->data, k->dtype, ko + c);
      abs_dot += fabs(x * y);
      dot += x * y;
    }
    double s = dm->scale * dot;
    // fp32 holds q * scale and the partial sums only below FLT_MAX: a scale
    // of 1e38 overflows them to inf (inf - inf = NaN downstream).
    if (fabs(dm->scale) * abs_dot > 1e37 || fabs(dm->scale) > 1e30) r.over = 1;
    if (cap > 0.0) s = cap * tanh(s / cap);
    int64_t dist = diag - j;
    double al = slope * (double)(dist < 0 ? -dist : dist);
    double e = (dm->D + 4) * fabs(dm->scale) * abs_dot +
               4.0 * (cap + al + fabs(s - al));
    r.es = nmax(r.es, e);
  }
  return r;
}

int fz_fwd_tol(const fa_attention *a, fa_tensor q, fa_tensor k, fa_tensor v,
               const double *oref, const double *lref, double *otol,
               double *ltol) {
  dims dm;
  get_dims(a, &dm);
  const double ur = fz_round_rel(q.dtype), ua = fz_round_abs(q.dtype);
  double *vmax = malloc(sizeof(double) * (size_t)dm.DV);
  if (!vmax) return -1;
  for (int b = 0; b < dm.B; b++)
    for (int h = 0; h < dm.HQ; h++)
      for (int i = 0; i < dm.SQ; i++) {
        size_t li = ((size_t)b * dm.HQ + h) * dm.SQ + i;
        double *ot = otol + (((size_t)b * dm.SQ + i) * dm.HQ + h) * dm.DV;
        const double *orow =
            oref + (((size_t)b * dm.SQ + i) * dm.HQ + h) * dm.DV;
        if (i >= fa_oracle_len_q(a, b)) { // varlen padding: not compared
          for (int c = 0; c < dm.DV; c++) ot[c] = 0.0;
          ltol[li] = 0.0;
          continue;
        }
        row_info r = row_logits(a, &dm, &q, &k, b, h, i);
        if (r.nk == 0) { // no visible key: exact 0 and -inf / the sink
          for (int c = 0; c < dm.DV; c++) ot[c] = 0.0;
          ltol[li] = 0.0;
          continue;
        }
        const int sk = fa_oracle_len_k(a, b), hk = h / dm.G;
        for (int c = 0; c < dm.DV; c++) vmax[c] = 0.0;
        for (int j = 0; j < sk; j++) {
          if (!fa_oracle_visible(a, b, i, j)) continue;
          int64_t vo = fa_oracle_k_index(a, &v, b, j, hk);
          for (int c = 0; c < dm.DV; c++)
            vmax[c] = nmax(vmax[c], fabs(ts_load(v.data, v.dtype, vo + c)));
        }
        if (r.over) { // fp32 overflow: unconstrained
          for (int c = 0; c < dm.DV; c++) ot[c] = -1.0;
          ltol[li] = -1.0;
          continue;
        }
        if (FZ_K * FZ_EPS * r.es >= 1.0) {
          // Logits fp32 cannot resolve (|s| ~ 1/eps): any finite result.
          for (int c = 0; c < dm.DV; c++) ot[c] = INFINITY;
          ltol[li] = INFINITY;
          continue;
        }
        double sink = a->sinks ? fabs((double)a->sinks[h]) : 0.0;
        double lt = FZ_EPS * (r.es + r.nk + 8 + 4 * sink + fabs(lref[li]));
        double ep = 2.0 * FZ_EPS * r.es + lt + FZ_EPS * (r.nk + 16);
        ltol[li] = FZ_K * lt;
        // A kernel may round P to the storage dtype once before P.V (as a
        // same-precision attention and FlashAttention's GPU kernels do):
        // each weight moves by u_t relative, O by up to 2 u_t max |v|.
        for (int c = 0; c < dm.DV; c++)
          ot[c] = FZ_K * (ep + FZ_EPS * (r.nk + 8)) * vmax[c] +
                  2.0 * ur * vmax[c] + ur * fabs(orow[c]) + ua;
      }
  free(vmax);
  return 0;
}

int fz_bwd_tol(const fa_attention *a, fa_tensor q, fa_tensor k, fa_tensor v,
               fa_tensor d_o, const double *oref, const double *lref,
               const double *otol, const double *ltol, const double *dqref,
               const double *dkref, const double *dvref, double *dqtol,
               double *dktol, double *dvtol) {
  dims dm;
  get_dims(a, &dm);
  const double ur = fz_round_rel(q.dtype), ua = fz_round_abs(q.dtype);
  const size_t nq = (size_t)dm.B * dm.SQ * dm.HQ * dm.D;
  const size_t nk = (size_t)dm.B * dm.SK * dm.HKV * dm.D;
  const size_t nv = (size_t)dm.B * dm.SK * dm.HKV * dm.DV;
  memset(dqtol, 0, sizeof(double) * nq);
  memset(dktol, 0, sizeof(double) * nk);
  memset(dvtol, 0, sizeof(double) * nv);
  double *kmax = malloc(sizeof(double) * (size_t)dm.D);
  if (!kmax) return -1;
  const double sc = fabs(dm.scale);
  int any_unresolved = 0;
  for (int b = 0; b < dm.B; b++) {
    const int sq = fa_oracle_len_q(a, b), sk = fa_oracle_len_k(a, b);
    for (int h = 0; h < dm.HQ; h++)
      for (int i = 0; i < sq; i++) {
        row_info r = row_logits(a, &dm, &q, &k, b, h, i);
        if (r.nk == 0) continue; // P = 0: every gradient term vanishes
        const int hk = h / dm.G;
        const size_t orow = (((size_t)b * dm.SQ + i) * dm.HQ + h);
        const size_t li = ((size_t)b * dm.HQ + h) * dm.SQ + i;
        const int64_t doo = fa_oracle_q_index(a, &d_o, b, i, h);
        const int64_t qo = fa_oracle_q_index(a, &q, b, i, h);
        // D = dO.O with the forward's O as stored (its error otol + its
        // rounding), and max_j |dO|.|v_j| over the visible keys.
        double D = 0.0, Dabs = 0.0, dD = 0.0;
        for (int c = 0; c < dm.DV; c++) {
          double g = ts_load(d_o.data, d_o.dtype, doo + c),
                 o = oref[orow * dm.DV + c];
          D += g * o;
          Dabs += fabs(g * o);
          dD += fabs(g) * (otol[orow * dm.DV + c] + ur * fabs(o));
        }
        double dpmax = 0.0;
        for (int c = 0; c < dm.D; c++) kmax[c] = 0.0;
        for (int j = 0; j < sk; j++) {
          if (!fa_oracle_visible(a, b, i, j)) continue;
          int64_t vo = fa_oracle_k_index(a, &v, b, j, hk),
                  ko = fa_oracle_k_index(a, &k, b, j, hk);
          double dp = 0.0;
          for (int c = 0; c < dm.DV; c++)
            dp += fabs(ts_load(d_o.data, d_o.dtype, doo + c) *
                       ts_load(v.data, v.dtype, vo + c));
          dpmax = nmax(dpmax, dp);
          for (int c = 0; c < dm.D; c++)
            kmax[c] = nmax(kmax[c], fabs(ts_load(k.data, k.dtype, ko + c)));
        }
        // Logits fp32 cannot resolve: the backward recomputes P = exp(s -
        // lse) from them, so any value (even inf/NaN) is possible; flagged
        // +inf here and turned into "unconstrained" below. Likewise when
        // dP = dO.v or D = dO.O themselves overflow fp32 (16-bit inputs near
        // their maximum: the float64 oracle resolves what fp32 cannot).
        const int unresolved =
            FZ_K * FZ_EPS * r.es >= 1.0 || r.over || dpmax + Dabs > 1e37;
        const double sink = a->sinks ? fabs((double)a->sinks[h]) : 0.0;
        // (+ u_t: P and dS may be rounded to the storage dtype once.)
        const double ep = 2.0 * FZ_EPS * r.es + ltol[li] +
                          FZ_EPS * (r.nk + 16 + 4 * sink + fabs(lref[li])) + ur;
        const double G = dpmax + fabs(D);
        // Error of dS_ij / P_ij (dS = P (dP - D) g, |dP - D| <= G).
        double E = ep * G + FZ_EPS * (dm.DV * (dpmax + Dabs) + G) + dD + ur * G;
        if (unresolved) E = INFINITY;
        any_unresolved |= unresolved;
        if (a->softcap > 0.0f) E += G * FZ_EPS * r.es / a->softcap;
        const int nrows = sq * dm.G; // query rows that reach one key
        double *dqt = dqtol + orow * dm.D;
        // (unresolved: open, also where max |k| is 0, where inf * 0 would
        // make the bound NaN, "finite only", yet 0 * NaN reaches dq too)
        for (int c = 0; c < dm.D; c++)
          dqt[c] = unresolved
                       ? INFINITY
                       : dqt[c] + FZ_K * sc * (E + FZ_EPS * (r.nk + 8) * G) *
                                      kmax[c];
        const double ek = FZ_K * sc * (E + FZ_EPS * (nrows + 8) * G);
        const double ev =
            unresolved ? INFINITY : FZ_K * (ep + FZ_EPS * (nrows + 8));
        for (int j = 0; j < sk; j++) {
          if (!fa_oracle_visible(a, b, i, j)) continue;
          size_t kr = (((size_t)b * dm.SK + j) * dm.HKV + hk);
          for (int c = 0; c < dm.D; c++)
            dktol[kr * dm.D + c] += ek * fabs(ts_load(q.data, q.dtype, qo + c));
          for (int c = 0; c < dm.DV; c++)
            dvtol[kr * dm.DV + c] +=
                ev * fabs(ts_load(d_o.data, d_o.dtype, doo + c));
        }
      }
  }
  double *all[3] = {dqtol, dktol, dvtol};
  const double *refs[3] = {dqref, dkref, dvref};
  size_t cnt[3] = {nq, nk, nv};
  // A row whose logits fp32 cannot hold turns its whole tile into inf/NaN,
  // masked entries included (0 * NaN): every dk and dv is then open.
  if (any_unresolved)
    for (int t = 1; t < 3; t++)
      for (size_t x = 0; x < cnt[t]; x++) all[t][x] = INFINITY;
  for (int t = 0; t < 3; t++)
    for (size_t x = 0; x < cnt[t]; x++) {
      double e = all[t][x] + ur * fabs(refs[t][x]) + ua;
      all[t][x] = isinf(e) && e > 0 ? -1.0 : e; // -1: unconstrained
    }
  free(kmax);
  return 0;
}

static double max_finite(fa_dtype t) {
  return t == FA_F16 ? 65504.0 : t == FA_BF16 ? 0x1.fep127 : 0x1.fffffep127;
}

static double last_margin; // fz_compare's worst |diff| / tol (finite pairs)

double fz_last_margin(void) { return last_margin; }

size_t
fz_compare(const char *name, fa_dtype t, const double *ref, const double *got,
           const double *tol, size_t n, int leak_ok, FILE *log,
           void (*index_name)(size_t i, char *buf, size_t len, const void *ctx),
           const void *ctx) {
  size_t bad = 0;
  last_margin = 0.0;
  for (size_t i = 0; i < n; i++) {
    double r = ref[i], g = got[i], e = tol[i];
    int ok;
    if (isfinite(r) && isfinite(g) && isfinite(e) && e > 0.0 &&
        fabs(g - r) / e > last_margin)
      last_margin = fabs(g - r) / e;
    if (e < 0.0) { // unconstrained (logits fp32 cannot resolve)
      continue;
    } else if (isnan(r)) {
      ok = isnan(g) || ((leak_ok & 2) && g == -INFINITY) ||
           ((leak_ok & 4) && !isnan(g));
    } else if (isinf(r)) {
      ok = g == r || ((leak_ok & 1) && isnan(g));
    } else if (isinf(g) && !isnan(e) && fabs(r) + e >= max_finite(t)) {
      ok = (g > 0) == (r > 0); // rounded past the dtype's largest value
    } else if (!isfinite(g)) {
      ok = (leak_ok & 1) && isnan(g);
    } else {
      ok = isnan(e) || isinf(e) || fabs(g - r) <= e;
    }
    if (ok) continue;
    if (bad++ < 4 && log) {
      char at[128] = "";
      if (index_name)
        index_name(i, at, sizeof at, ctx);
      else
        snprintf(at, sizeof at, "[%zu]", i);
      fprintf(log, "  %s%s: got %.9g, oracle %.9g, |diff| %.3g > tol %.3g\n",
              name, at, g, r, fabs(g - r), e);
    }
  }
  if (bad > 4 && log) fprintf(log, "  %s: %zu violations in all\n", name, bad);
  return bad;
}
