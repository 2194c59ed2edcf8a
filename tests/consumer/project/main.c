// SPDX-License-Identifier: MIT
// A user's first program against an installed flashattn: one small causal
// GQA problem (seqlen_q != seqlen_k) through fa_forward(), checked against a
// naive attention written out here. Memory goes through fa_malloc() and the
// copy calls, so the program is right on any backend FLASHATTN_BACKEND picks.
#include <flashattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, SQ = 7, SK = 19, HQ = 4, HKV = 2, D = 24 };

#define NQ (B * SQ * HQ * D)
#define NK (B * SK * HKV * D)
#define NLSE (B * HQ * SQ)

static float q[NQ], k[NK], v[NK], o[NQ], lse[NLSE];

// Row-major BSHD offsets.
static int qo_at(int b, int i, int h) { return ((b * SQ + i) * HQ + h) * D; }
static int kv_at(int b, int j, int h) { return ((b * SK + j) * HKV + h) * D; }

static int check(fa_status s, const char *what) {
  if (s == FA_OK) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, fa_status_string(s), fa_last_error());
  return 1;
}

// Bottom-right causal attention in double; returns the largest error of o and
// lse against it.
static void naive_errors(double *err_o, double *err_lse) {
  const double scale = 1.0 / sqrt((double)D);
  double p[SK];
  *err_o = 0.0;
  *err_lse = 0.0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HQ; h++)
      for (int i = 0; i < SQ; i++) {
        const float *qi = q + qo_at(b, i, h);
        int hk = h / (HQ / HKV), last = i + (SK - SQ);
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= last; j++) {
          const float *kj = k + kv_at(b, j, hk);
          double s = 0.0;
          for (int d = 0; d < D; d++) s += (double)qi[d] * kj[d];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j <= last; j++) sum += exp(p[j] - mx);
        for (int d = 0; d < D; d++) {
          double acc = 0.0;
          for (int j = 0; j <= last; j++)
            acc += exp(p[j] - mx) / sum * v[kv_at(b, j, hk) + d];
          double e = fabs(acc - o[qo_at(b, i, h) + d]);
          if (!(e <= *err_o)) *err_o = e; // NaN sticks
        }
        double e = fabs(mx + log(sum) - lse[(b * HQ + h) * SQ + i]);
        if (!(e <= *err_lse)) *err_lse = e;
      }
}

int main(void) {
  unsigned x = 12345u;
  for (int i = 0; i < NQ; i++)
    q[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - .5f;
  for (int i = 0; i < NK; i++) {
    k[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - .5f;
    v[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - .5f;
  }

  fa_context *ctx = NULL;
  if (check(fa_context_create(&ctx, FA_BACKEND_AUTO, 0), "fa_context_create"))
    return 1;

  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
  int bad = check(fa_malloc(ctx, sizeof q, &dq), "fa_malloc") ||
            check(fa_malloc(ctx, sizeof k, &dk), "fa_malloc") ||
            check(fa_malloc(ctx, sizeof v, &dv), "fa_malloc") ||
            check(fa_malloc(ctx, sizeof o, &dout), "fa_malloc") ||
            check(fa_malloc(ctx, sizeof lse, &dlse), "fa_malloc") ||
            check(fa_copy_to_device(ctx, dq, q, sizeof q), "copy q") ||
            check(fa_copy_to_device(ctx, dk, k, sizeof k), "copy k") ||
            check(fa_copy_to_device(ctx, dv, v, sizeof v), "copy v");

  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = SQ;
  a.seqlen_k = SK;
  a.heads_q = HQ;
  a.heads_kv = HKV;
  a.head_dim = D;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  fa_tensor tq = {dq, FA_F32, SQ * HQ * D, HQ * D, D};
  fa_tensor tk = {dk, FA_F32, SK * HKV * D, HKV * D, D};
  fa_tensor tv = {dv, FA_F32, SK * HKV * D, HKV * D, D};
  fa_tensor to = {dout, FA_F32, SQ * HQ * D, HQ * D, D};
  if (!bad)
    bad = check(fa_forward(ctx, &a, tq, tk, tv, to, dlse), "fa_forward") ||
          check(fa_synchronize(ctx), "fa_synchronize") ||
          check(fa_copy_to_host(ctx, o, dout, sizeof o), "copy o") ||
          check(fa_copy_to_host(ctx, lse, dlse, sizeof lse), "copy lse");

  int status = bad;
  if (!bad) {
    double err_o, err_lse;
    naive_errors(&err_o, &err_lse);
    // The library it runs with is the one whose header it compiled with.
    int ok = err_o <= 1e-5 && err_lse <= 1e-5 &&
             fa_version_number() == FA_VERSION_NUMBER;
    printf("flashattn %s (header %d.%d.%d), backend %s: max |err| o %.2e, "
           "lse %.2e: %s\n",
           fa_version(), FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH,
           fa_context_backend(ctx), err_o, err_lse, ok ? "ok" : "WRONG");
    status = !ok;
  }
  fa_free(ctx, dq);
  fa_free(ctx, dk);
  fa_free(ctx, dv);
  fa_free(ctx, dout);
  fa_free(ctx, dlse);
  fa_context_destroy(ctx);
  return status;
}
