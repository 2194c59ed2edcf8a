// SPDX-License-Identifier: MIT
// Split-KV and the merge lemma: attend to the keys in two disjoint parts
// (as flash-decoding, a shared-prefix cache or ring attention would), keep
// each part's log-sum-exp, and combine the partial outputs with
// fa_merge_states. The merged output and LSE equal attention over all the
// keys at once: checked against a naive loop.
#include <flashattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { SQ = 48, SK = 300, SPLIT = 120, H = 4, D = 32 };

// Naive attention of every query row over all SK keys, in double: the
// worst |o - naive| and |lse - naive lse| (natural log).
static double check(const float *q, const float *k, const float *v,
                    const float *o, const float *lse) {
  double err = 0, p[SK];
  for (int i = 0; i < SQ; i++)
    for (int h = 0; h < H; h++) {
      double max = -INFINITY, sum = 0;
      for (int j = 0; j < SK; j++) {
        double s = 0;
        for (int c = 0; c < D; c++)
          s += (double)q[(i * H + h) * D + c] * k[(j * H + h) * D + c];
        p[j] = s / sqrt(D);
        max = fmax(max, p[j]);
      }
      for (int j = 0; j < SK; j++) sum += p[j] = exp(p[j] - max);
      // lse is [batch][heads][seqlen]: head-major, unlike o.
      err = fmax(err, fabs(lse[h * SQ + i] - (max + log(sum))));
      for (int c = 0; c < D; c++) {
        double acc = 0;
        for (int j = 0; j < SK; j++) acc += p[j] * v[(j * H + h) * D + c];
        err = fmax(err, fabs(o[(i * H + h) * D + c] - acc / sum));
      }
    }
  return err;
}

int main(void) {
  fa_context *ctx;
  if (fa_context_create(&ctx, FA_BACKEND_AUTO, 0) != FA_OK) {
    fprintf(stderr, "%s\n", fa_last_error());
    return 1;
  }
  const size_t nq = SQ * H * D, nk = SK * H * D, nl = H * SQ;
  float *host = malloc((nq + 2 * nk + nq + nl) * sizeof(float));
  if (!host) return 1;
  float *q = host, *k = q + nq, *v = k + nk, *o = v + nk, *lse = o + nq;
  srand(3);
  for (size_t i = 0; i < nq + 2 * nk; i++)
    host[i] = (float)(2.0 * rand() / RAND_MAX - 1);

  // One query block; keys and values in one BSHD buffer each. The parts'
  // outputs and LSEs, and the merged ones, in the context's memory.
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout[3] = {0}, *dlse[3] = {0};
  fa_status s = FA_OK;
  if (!s) s = fa_malloc(ctx, nq * sizeof(float), &dq);
  if (!s) s = fa_malloc(ctx, nk * sizeof(float), &dk);
  if (!s) s = fa_malloc(ctx, nk * sizeof(float), &dv);
  for (int i = 0; i < 3 && !s; i++) {
    s = fa_malloc(ctx, nq * sizeof(float), &dout[i]);
    if (!s) s = fa_malloc(ctx, nl * sizeof(float), &dlse[i]);
  }
  if (!s) s = fa_copy_to_device(ctx, dq, q, nq * sizeof(float));
  if (!s) s = fa_copy_to_device(ctx, dk, k, nk * sizeof(float));
  if (!s) s = fa_copy_to_device(ctx, dv, v, nk * sizeof(float));

  // Part p sees keys [first[p], first[p] + count[p]): a view that starts
  // at that row, with seqlen_k = count. No mask: with causal or window
  // masks each part would also need the keys' positions.
  const int first[2] = {0, SPLIT}, count[2] = {SPLIT, SK - SPLIT};
  fa_tensor parts[2];
  const float *part_lse[2];
  for (int p = 0; p < 2 && !s; p++) {
    fa_attention a;
    fa_attention_init(&a);
    a.batch = 1;
    a.seqlen_q = SQ;
    a.seqlen_k = count[p];
    a.heads_q = a.heads_kv = H;
    a.head_dim = D;
    fa_tensor tq = {.data = dq,
                    .dtype = FA_F32,
                    .stride_batch = nq,
                    .stride_seq = H * D,
                    .stride_head = D};
    fa_tensor tk = tq, tv = tq, to = tq;
    tk.data = (float *)dk + (size_t)first[p] * H * D;
    tv.data = (float *)dv + (size_t)first[p] * H * D;
    tk.stride_batch = tv.stride_batch = nk;
    to.data = dout[p];
    s = fa_forward(ctx, &a, tq, tk, tv, to, dlse[p]);
    parts[p] = to;
    part_lse[p] = dlse[p];
  }
  fa_tensor merged = {.data = dout[2],
                      .dtype = FA_F32,
                      .stride_batch = nq,
                      .stride_seq = H * D,
                      .stride_head = D};
  if (!s)
    s = fa_merge_states(ctx, 2, parts, part_lse, 1, SQ, H, D, merged, dlse[2]);
  if (!s) s = fa_copy_to_host(ctx, o, dout[2], nq * sizeof(float));
  if (!s) s = fa_copy_to_host(ctx, lse, dlse[2], nl * sizeof(float));
  double err = 0;
  if (!s) {
    err = check(q, k, v, o, lse);
    printf("%d + %d keys merged on %s: max error vs naive = %.2e\n", count[0],
           count[1], fa_context_backend(ctx), err);
  } else {
    fprintf(stderr, "%s: %s\n", fa_status_string(s), fa_last_error());
  }

  fa_free(ctx, dq);
  fa_free(ctx, dk);
  fa_free(ctx, dv);
  for (int i = 0; i < 3; i++) {
    fa_free(ctx, dout[i]);
    fa_free(ctx, dlse[i]);
  }
  fa_context_destroy(ctx);
  free(host);
  return s != FA_OK || !(err < 1e-4);
}
