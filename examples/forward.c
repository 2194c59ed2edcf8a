// SPDX-License-Identifier: MIT
// A plain forward pass: causal self-attention over a dense BSHD batch on
// the best backend here, checked against a naive loop. This file is the
// README's example (test examples.readme keeps the two identical).
#include <flashattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, S = 128, H = 4, D = 64 };

// The naive definition, in double: o[b,i,h] = sum_j p_j v[b,j,h] with
// p = softmax over the keys j <= i of q.k / sqrt(D).
static void naive_causal(const float *q, const float *k, const float *v,
                         double *o) {
  static double p[S];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++) {
        const float *qi = q + ((size_t)(b * S + i) * H + h) * D;
        double max = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
          const float *kj = k + ((size_t)(b * S + j) * H + h) * D;
          double s = 0;
          for (int c = 0; c < D; c++) s += (double)qi[c] * kj[c];
          p[j] = s / sqrt(D);
          max = fmax(max, p[j]);
        }
        for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - max);
        double *oi = o + ((size_t)(b * S + i) * H + h) * D;
        for (int c = 0; c < D; c++) {
          double acc = 0;
          for (int j = 0; j <= i; j++)
            acc += p[j] * v[((size_t)(b * S + j) * H + h) * D + c];
          oi[c] = acc / sum;
        }
      }
}

int main(void) {
  fa_context *ctx;
  if (fa_context_create(&ctx, FA_BACKEND_AUTO, 0) != FA_OK) {
    fprintf(stderr, "%s\n", fa_last_error());
    return 1;
  }

  // The problem: shapes and masks. fa_attention_init turns every feature
  // off (windows unbounded; scale 0 means 1/sqrt(head_dim)).
  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = a.seqlen_k = S;
  a.heads_q = a.heads_kv = H;
  a.head_dim = D;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;

  // Inputs on the host, uniform in [-1, 1).
  const size_t n = (size_t)B * S * H * D, bytes = n * sizeof(float);
  float *host = malloc(4 * bytes);
  double *want = malloc(n * sizeof(double));
  if (!host || !want) return 1;
  float *hq = host, *hk = host + n, *hv = host + 2 * n, *ho = host + 3 * n;
  srand(1);
  for (size_t i = 0; i < 3 * n; i++)
    host[i] = (float)(2.0 * rand() / RAND_MAX - 1);

  // Tensors live in the context's memory (host memory for CPU backends,
  // device memory for GPUs): allocate there and copy in. A tensor is a
  // strided [batch, seq, heads, dim] view, strides in elements; dim is
  // contiguous. Here: dense BSHD.
  void *q = NULL, *k = NULL, *v = NULL, *o = NULL;
  fa_status s = FA_OK;
  if (!s) s = fa_malloc(ctx, bytes, &q);
  if (!s) s = fa_malloc(ctx, bytes, &k);
  if (!s) s = fa_malloc(ctx, bytes, &v);
  if (!s) s = fa_malloc(ctx, bytes, &o);
  if (!s) s = fa_copy_to_device(ctx, q, hq, bytes);
  if (!s) s = fa_copy_to_device(ctx, k, hk, bytes);
  if (!s) s = fa_copy_to_device(ctx, v, hv, bytes);
  fa_tensor tq = {.data = q,
                  .dtype = FA_F32,
                  .stride_batch = S * H * D,
                  .stride_seq = H * D,
                  .stride_head = D};
  fa_tensor tk = tq, tv = tq, to = tq;
  tk.data = k;
  tv.data = v;
  to.data = o;

  if (!s) s = fa_forward(ctx, &a, tq, tk, tv, to, NULL); // NULL: no LSE
  if (!s) s = fa_copy_to_host(ctx, ho, o, bytes);
  double err = 0;
  if (!s) {
    naive_causal(hq, hk, hv, want);
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs(ho[i] - want[i]));
    printf("ran on %s: max |o - naive| = %.2e\n", fa_context_backend(ctx), err);
  } else {
    fprintf(stderr, "%s: %s\n", fa_status_string(s), fa_last_error());
  }

  fa_free(ctx, q);
  fa_free(ctx, k);
  fa_free(ctx, v);
  fa_free(ctx, o);
  fa_context_destroy(ctx);
  free(host);
  free(want);
  return s != FA_OK || !(err < 1e-4); // fp32 accumulation: ~1e-6 expected
}
