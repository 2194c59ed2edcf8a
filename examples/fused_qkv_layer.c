// SPDX-License-Identifier: MIT
// A GPT-2 attention layer on one packed buffer, as llm.c lays it out: the
// QKV projection writes qkv (B, T, 3C) with Q, K, V side by side in each
// row, the layer's output is (B, T, C), and the backward writes the
// gradient of qkv into one packed (B, T, 3C) buffer too. flashattn takes
// the packed views as they are (strides, no copies): q, k, v are three
// interleaved views of qkv, dq, dk, dv three of dqkv. The result is checked
// against a naive causal attention written out in loops (double).
//
//   fused_qkv_layer [B T C NH]     (default 2 64 96 4)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flashattn.h"

/* Head h of part (0 q, 1 k, 2 v) of a packed (B, T, 3C) buffer. */
static fa_tensor packed_part(float *buf, int part, int T, int C, int HS) {
  fa_tensor t = {0};
  t.data = buf + (size_t)part * C;
  t.dtype = FA_F32;
  t.stride_head = HS;
  t.stride_seq = 3 * (int64_t)C;
  t.stride_batch = (int64_t)T * 3 * C;
  return t;
}

static float rand_unit(unsigned *state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* The naive layer: out = causal softmax(q k^T / sqrt(HS)) v per head, and
   from dout the gradient of qkv, all in double. */
static void naive_layer(const float *qkv, const float *dout, int B, int T,
                        int C, int NH, double *out, double *dqkv) {
  const int HS = C / NH, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)HS);
  double *att = malloc(sizeof(double) * T), *datt = malloc(sizeof(double) * T);
  for (size_t i = 0; i < (size_t)B * T * C3; i++) dqkv[i] = 0.0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + ((size_t)b * T + t) * C3 + h * HS;
        double mx = -INFINITY, sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
          double s = 0.0;
          for (int i = 0; i < HS; i++) s += (double)q[i] * k[i];
          att[t2] = s * scale;
          if (att[t2] > mx) mx = att[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += att[t2] = exp(att[t2] - mx);
        double *o = out + ((size_t)b * T + t) * C + h * HS;
        const float *g = dout + ((size_t)b * T + t) * C + h * HS;
        for (int i = 0; i < HS; i++) o[i] = 0.0;
        double dot = 0.0; // sum_t2 att * datt
        for (int t2 = 0; t2 <= t; t2++) {
          att[t2] /= sum;
          const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
          double *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
          datt[t2] = 0.0;
          for (int i = 0; i < HS; i++) {
            o[i] += att[t2] * v[i];
            datt[t2] += (double)g[i] * v[i];
            dv[i] += att[t2] * g[i];
          }
          dot += att[t2] * datt[t2];
        }
        double *dq = dqkv + ((size_t)b * T + t) * C3 + h * HS;
        for (int t2 = 0; t2 <= t; t2++) {
          const double ds = att[t2] * (datt[t2] - dot) * scale;
          const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
          double *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * HS;
          for (int i = 0; i < HS; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
  free(att);
  free(datt);
}

/* max |got - want| / max |want| over n values. */
static double rel_error(const float *got, const double *want, size_t n) {
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (!(e <= err)) err = e; // NaN sticks
    if (fabs(want[i]) > mag) mag = fabs(want[i]);
  }
  return err / (mag > 0.0 ? mag : 1.0);
}

int main(int argc, char **argv) {
  int B = 2, T = 64, C = 96, NH = 4;
  if (argc == 5) {
    B = atoi(argv[1]);
    T = atoi(argv[2]);
    C = atoi(argv[3]);
    NH = atoi(argv[4]);
  }
  if (B < 1 || T < 1 || NH < 1 || C < NH || C % NH) {
    fprintf(stderr, "usage: %s [B T C NH] (C a multiple of NH)\n", argv[0]);
    return 2;
  }
  const int HS = C / NH;
  const size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
  float *qkv = malloc(sizeof(float) * n3), *dqkv = malloc(sizeof(float) * n3);
  float *out = malloc(sizeof(float) * n1), *dout = malloc(sizeof(float) * n1);
  float *lse = malloc(sizeof(float) * (size_t)B * NH * T);
  double *ref_out = malloc(sizeof(double) * n1);
  double *ref_dqkv = malloc(sizeof(double) * n3);
  if (!qkv || !dqkv || !out || !dout || !lse || !ref_out || !ref_dqkv) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  unsigned seed = 12345u;
  for (size_t i = 0; i < n3; i++) qkv[i] = rand_unit(&seed);
  for (size_t i = 0; i < n1; i++) dout[i] = rand_unit(&seed);

  fa_context *ctx = NULL;
  if (fa_context_create(&ctx, FA_BACKEND_CPU, 0) != FA_OK) {
    fprintf(stderr, "no CPU backend: %s\n", fa_last_error());
    return 77;
  }
  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = a.seqlen_k = T;
  a.heads_q = a.heads_kv = NH;
  a.head_dim = HS;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT; // T == T: plain GPT-2 causality
  const fa_tensor q = packed_part(qkv, 0, T, C, HS),
                  k = packed_part(qkv, 1, T, C, HS),
                  v = packed_part(qkv, 2, T, C, HS);
  fa_tensor o = {0};
  o.data = out;
  o.dtype = FA_F32;
  o.stride_head = HS;
  o.stride_seq = C;
  o.stride_batch = (int64_t)T * C;
  fa_tensor d_o = o;
  d_o.data = dout;

  fa_status s = fa_forward(ctx, &a, q, k, v, o, lse);
  if (s == FA_OK)
    s = fa_backward(
        ctx, &a, q, k, v, o, d_o, lse, packed_part(dqkv, 0, T, C, HS),
        packed_part(dqkv, 1, T, C, HS), packed_part(dqkv, 2, T, C, HS));
  if (s != FA_OK) {
    fprintf(stderr, "flashattn: %s: %s\n", fa_status_string(s),
            fa_last_error());
    return 1;
  }
  naive_layer(qkv, dout, B, T, C, NH, ref_out, ref_dqkv);
  const double e_out = rel_error(out, ref_out, n1);
  const double e_grad = rel_error(dqkv, ref_dqkv, n3);
  printf("fused QKV layer B=%d T=%d C=%d NH=%d on %s: out error %.2e, "
         "dqkv error %.2e\n",
         B, T, C, NH, fa_context_backend(ctx), e_out, e_grad);
  fa_context_destroy(ctx);
  free(qkv);
  free(dqkv);
  free(out);
  free(dout);
  free(lse);
  free(ref_out);
  free(ref_dqkv);
  return e_out <= 1e-5 && e_grad <= 1e-5 ? 0 : 1;
}
