// SPDX-License-Identifier: MIT
// fa_backward against finite differences of L = sum(w .* O), w random, on
// tiny fp32 problems (plain, causal both ways, softcap, windows with GQA,
// ALiBi, sinks, head_dim_v != head_dim).
//
// Two references, each with its own tolerance:
//  1. Central differences of fa_forward itself (fp32), eps = 1e-2: checks
//     that backward is the derivative of the forward the library computes.
//     Error budget: truncation eps^2/6 * |L'''|, with |L'''| <= ~1 for these
//     scores (|s| <= ~5 through scale 1/2), is <= 2e-5; rounding: each O
//     element carries <= ~4 ulp (5e-7 at |O| <= 1), so L, a sum of 40..80
//     terms weighted by |w| <= 1, is off by <= 4e-5 in the worst case, and the
//     difference quotient by <= 2 * 4e-5 / (2 * 1e-2) = 4e-3 -- typically
//     sqrt(n) times less. Tolerance: 4e-3 absolute.
//  2. Central differences (eps = 1e-5) of a float64 forward written here
//     from the header's semantics: truncation and rounding are below 1e-9,
//     so it is the exact gradient for the purpose of an fp32 backward,
//     whose own error is a few hundred fp32 roundings at most: 1e-4
//     absolute plus 1e-4 relative.
#include "api_util.h"

enum { MAXE = 4 * 8 * 4 * 8 };

typedef struct variant {
  const char *name;
  int batch, sq, sk, hq, hkv, d, dv;
  int causal, wl, wr, alibi, sinks;
  float softcap;
} variant;

typedef struct problem {
  const variant *vr;
  fa_attention a;
  float q[MAXE], k[MAXE], v[MAXE], w[MAXE];
  float slopes[8], sinks[8];
  int nq, nk, nv, no;
} problem;

static fa_context *ctx;

static int dv_of(const variant *vr) { return vr->dv ? vr->dv : vr->d; }

static void setup(problem *p, const variant *vr) {
  memset(p, 0, sizeof *p);
  p->vr = vr;
  fa_attention_init(&p->a);
  p->a.batch = vr->batch;
  p->a.seqlen_q = vr->sq;
  p->a.seqlen_k = vr->sk;
  p->a.heads_q = vr->hq;
  p->a.heads_kv = vr->hkv;
  p->a.head_dim = vr->d;
  p->a.head_dim_v = vr->dv;
  p->a.causal = vr->causal;
  p->a.window_left = vr->wl;
  p->a.window_right = vr->wr;
  p->a.softcap = vr->softcap;
  int dv = dv_of(vr);
  p->nq = vr->batch * vr->sq * vr->hq * vr->d;
  p->nk = vr->batch * vr->sk * vr->hkv * vr->d;
  p->nv = vr->batch * vr->sk * vr->hkv * dv;
  p->no = vr->batch * vr->sq * vr->hq * dv;
  au_fill_uniform(p->q, (size_t)p->nq, -1.5, 1.5);
  au_fill_uniform(p->k, (size_t)p->nk, -1.5, 1.5);
  au_fill_uniform(p->v, (size_t)p->nv, -1.0, 1.0);
  au_fill_uniform(p->w, (size_t)p->no, -1.0, 1.0);
  for (int h = 0; h < vr->hq; h++) {
    p->slopes[h] = 0.25f * (float)(h + 1);
    p->sinks[h] = (float)ut_rand_uniform(-1.0, 2.0);
  }
  if (vr->alibi) p->a.alibi_slopes = p->slopes;
  if (vr->sinks) p->a.sinks = p->sinks;
}

static fa_tensor tq(problem *p, float *x) {
  return au_bshd(x, p->vr->sq, p->vr->hq, p->vr->d);
}
static fa_tensor tk(problem *p, float *x, int dim) {
  return au_bshd(x, p->vr->sk, p->vr->hkv, dim);
}

// L = sum(w .* O) with O from fa_forward.
static double loss_library(problem *p) {
  static float o[MAXE];
  int dv = dv_of(p->vr);
  fa_status s =
      fa_forward(ctx, &p->a, tq(p, p->q), tk(p, p->k, p->vr->d),
                 tk(p, p->v, dv), au_bshd(o, p->vr->sq, p->vr->hq, dv), NULL);
  if (s != FA_OK) {
    CHECK(0, "%s: forward failed: %s", p->vr->name, fa_last_error());
    return NAN;
  }
  double l = 0.0;
  for (int i = 0; i < p->no; i++) l += (double)p->w[i] * o[i];
  return l;
}

// The same loss from a float64 forward written from the header's text.
static double loss_reference(const problem *p, const double *q, const double *k,
                             const double *v, double *o) {
  const variant *vr = p->vr;
  int dv = dv_of(vr), group = vr->hq / vr->hkv;
  double scale = 1.0 / sqrt((double)vr->d), l = 0.0;
  int wr = vr->causal ? 0 : vr->wr;
  for (int b = 0; b < vr->batch; b++)
    for (int i = 0; i < vr->sq; i++)
      for (int h = 0; h < vr->hq; h++) {
        int hk = h / group;
        long shift = vr->causal == FA_CAUSAL_TOP_LEFT ? 0 : vr->sk - vr->sq;
        double s[64], mx = vr->sinks ? p->sinks[h] : -INFINITY;
        for (int j = 0; j < vr->sk; j++) {
          long diag = i + shift;
          int vis =
              (vr->wl < 0 || j >= diag - vr->wl) && (wr < 0 || j <= diag + wr);
          if (!vis) {
            s[j] = -INFINITY;
            continue;
          }
          double dot = 0.0;
          for (int d = 0; d < vr->d; d++)
            dot += q[((b * vr->sq + i) * vr->hq + h) * vr->d + d] *
                   k[((b * vr->sk + j) * vr->hkv + hk) * vr->d + d];
          double x = scale * dot;
          if (vr->softcap > 0) x = vr->softcap * tanh(x / vr->softcap);
          if (vr->alibi) x -= p->slopes[h] * fabs((double)(diag - j));
          s[j] = x;
          if (x > mx) mx = x;
        }
        double den = vr->sinks ? exp(p->sinks[h] - mx) : 0.0;
        double acc[64] = {0};
        if (mx != -INFINITY)
          for (int j = 0; j < vr->sk; j++) {
            if (s[j] == -INFINITY) continue;
            double e = exp(s[j] - mx);
            den += e;
            for (int d = 0; d < dv; d++)
              acc[d] += e * v[((b * vr->sk + j) * vr->hkv + hk) * dv + d];
          }
        for (int d = 0; d < dv; d++) {
          int oi = ((b * vr->sq + i) * vr->hq + h) * dv + d;
          double od = den > 0.0 ? acc[d] / den : 0.0;
          if (o) o[oi] = od;
          l += p->w[oi] * od;
        }
      }
  return l;
}

typedef struct grads {
  double dq[MAXE], dk[MAXE], dv[MAXE];
} grads;

static void fd_library(problem *p, grads *g) {
  const float eps = 1e-2f;
  float *arr[3] = {p->q, p->k, p->v};
  double *out[3] = {g->dq, g->dk, g->dv};
  int n[3] = {p->nq, p->nk, p->nv};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < n[t]; i++) {
      float x = arr[t][i];
      float xp = x + eps, xm = x - eps;
      arr[t][i] = xp;
      double lp = loss_library(p);
      arr[t][i] = xm;
      double lm = loss_library(p);
      arr[t][i] = x;
      out[t][i] = (lp - lm) / ((double)xp - (double)xm);
    }
}

static void fd_reference(const problem *p, grads *g) {
  static double q[MAXE], k[MAXE], v[MAXE];
  for (int i = 0; i < p->nq; i++) q[i] = p->q[i];
  for (int i = 0; i < p->nk; i++) k[i] = p->k[i];
  for (int i = 0; i < p->nv; i++) v[i] = p->v[i];
  const double eps = 1e-5;
  double *arr[3] = {q, k, v};
  double *out[3] = {g->dq, g->dk, g->dv};
  int n[3] = {p->nq, p->nk, p->nv};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < n[t]; i++) {
      double x = arr[t][i];
      arr[t][i] = x + eps;
      double lp = loss_reference(p, q, k, v, NULL);
      arr[t][i] = x - eps;
      double lm = loss_reference(p, q, k, v, NULL);
      arr[t][i] = x;
      out[t][i] = (lp - lm) / (2 * eps);
    }
}

static double compare(const char *vname, const char *what, const char *which,
                      const float *got, const double *want, int n, double atol,
                      double rtol) {
  double worst = 0.0;
  int bad = -1;
  for (int i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]);
    if (!(e <= atol + rtol * fabs(want[i])) && bad < 0) bad = i;
    if (!(e <= worst)) worst = e;
  }
  CHECK(bad < 0, "%s: %s[%d] = %.7g, %s says %.7g (max error %.3g)", vname,
        what, bad, bad >= 0 ? (double)got[bad] : 0.0, which,
        bad >= 0 ? want[bad] : 0.0, worst);
  return worst;
}

// Returns 1 if the backend ran the variant (0 if it has no backward).
static int run_variant(const variant *vr) {
  static problem p;
  static grads fl, fr;
  static float o[MAXE], lse[64], dq[MAXE], dk[MAXE], dv[MAXE];
  static double o_ref[MAXE], q64[MAXE], k64[MAXE], v64[MAXE];
  setup(&p, vr);
  int dvd = dv_of(vr);

  // Forward, and its agreement with the float64 forward.
  fa_tensor to = au_bshd(o, vr->sq, vr->hq, dvd);
  fa_status s = fa_forward(ctx, &p.a, tq(&p, p.q), tk(&p, p.k, vr->d),
                           tk(&p, p.v, dvd), to, lse);
  EXPECT_OK(vr->name, s);
  if (s != FA_OK) return 0;
  for (int i = 0; i < p.nq; i++) q64[i] = p.q[i];
  for (int i = 0; i < p.nk; i++) k64[i] = p.k[i];
  for (int i = 0; i < p.nv; i++) v64[i] = p.v[i];
  loss_reference(&p, q64, k64, v64, o_ref);
  double fe = 0.0;
  for (int i = 0; i < p.no; i++)
    if (!(fabs(o[i] - o_ref[i]) <= fe)) fe = fabs(o[i] - o_ref[i]);
  CHECK(fe <= 1e-5, "%s: forward differs from float64 by %.3g", vr->name, fe);

  // Backward with d_o = w; gradients poisoned with NaN beforehand.
  for (int i = 0; i < MAXE; i++) dq[i] = dk[i] = dv[i] = NAN;
  fa_tensor d_o = au_bshd(p.w, vr->sq, vr->hq, dvd); // dL/dO = w
  s = fa_backward(ctx, &p.a, tq(&p, p.q), tk(&p, p.k, vr->d), tk(&p, p.v, dvd),
                  to, d_o, lse, tq(&p, dq), tk(&p, dk, vr->d), tk(&p, dv, dvd));
  if (s == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "backward")) {
    printf("  %s: no backward here (%s)\n", vr->name, fa_last_error());
    return 0;
  }
  EXPECT_OK(vr->name, s);
  if (s != FA_OK) return 0;

  fd_library(&p, &fl);
  fd_reference(&p, &fr);
  double e1 = 0.0, e2 = 0.0, e;
  e = compare(vr->name, "dq", "fp32 FD", dq, fl.dq, p.nq, 4e-3, 0.0);
  e1 = e > e1 ? e : e1;
  e = compare(vr->name, "dk", "fp32 FD", dk, fl.dk, p.nk, 4e-3, 0.0);
  e1 = e > e1 ? e : e1;
  e = compare(vr->name, "dv", "fp32 FD", dv, fl.dv, p.nv, 4e-3, 0.0);
  e1 = e > e1 ? e : e1;
  e = compare(vr->name, "dq", "float64 FD", dq, fr.dq, p.nq, 1e-4, 1e-4);
  e2 = e > e2 ? e : e2;
  e = compare(vr->name, "dk", "float64 FD", dk, fr.dk, p.nk, 1e-4, 1e-4);
  e2 = e > e2 ? e : e2;
  e = compare(vr->name, "dv", "float64 FD", dv, fr.dv, p.nv, 1e-4, 1e-4);
  e2 = e > e2 ? e : e2;
  printf("%-28s forward err %.2g; backward vs fp32 FD %.2g, vs float64 FD "
         "%.2g\n",
         vr->name, fe, e1, e2);
  return 1;
}

int main(void) {
  static const variant vs[] = {
      // name               b sq sk hq hkv d dv causal wl wr alibi sinks cap
      {"plain", 1, 5, 7, 2, 2, 4, 0, 0, -1, -1, 0, 0, 0.0f},
      {"causal bottom-right", 1, 5, 7, 2, 2, 4, 0, 1, -1, -1, 0, 0, 0.0f},
      {"causal sq>sk", 1, 7, 5, 2, 2, 4, 0, 1, -1, -1, 0, 0, 0.0f},
      {"softcap 1.5", 1, 5, 7, 2, 2, 4, 0, 0, -1, -1, 0, 0, 1.5f},
      {"causal + softcap", 1, 5, 7, 2, 2, 4, 0, 1, -1, -1, 0, 0, 1.5f},
      {"GQA 4:2 + window 2,1", 2, 5, 7, 4, 2, 4, 0, 0, 2, 1, 0, 0, 0.0f},
      {"top-left + ALiBi", 1, 5, 7, 2, 1, 4, 0, 2, -1, -1, 1, 0, 0.0f},
      {"causal + sinks", 1, 5, 7, 2, 2, 4, 0, 1, -1, -1, 0, 1, 0.0f},
      {"head_dim_v 3", 1, 5, 7, 2, 2, 4, 3, 0, -1, -1, 0, 0, 2.0f},
  };
  // Every usable backend, each bound by name (no fallback between them).
  int ran = 0;
  for (int bi = 0; bi < fa_backend_count(); bi++) {
    const char *name = fa_backend_name(bi);
    if (fa_context_create_by_name(&ctx, name) != FA_OK) {
      CHECK(0, "listed backend %s: %s", name, fa_last_error());
      continue;
    }
    printf("backend %s\n", name);
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
      ran += run_variant(&vs[i]);
    fa_context_destroy(ctx);
  }
  if (!ran) {
    fprintf(stderr, "no backend here runs fa_backward: skipping\n");
    return 77;
  }
  return ut_finish("test_api_backward");
}
