// SPDX-License-Identifier: MIT
// The float64 two-pass oracle and the naive same-precision attention. See
// oracle.h for what each computes. Written from the semantics in
// include/flashattn.h, independently of core/problem.h.
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h" // exact fp16/bf16 <-> fp32 conversions (shared on purpose)

/* ---- semantics ---------------------------------------------------------- */

int fa_oracle_len_q(const fa_attention *a, int b) {
  if (a->cu_seqlens_q) return a->cu_seqlens_q[b + 1] - a->cu_seqlens_q[b];
  return a->seqlen_q;
}

int fa_oracle_len_k(const fa_attention *a, int b) {
  if (a->seqused_k) return a->seqused_k[b];
  if (a->cu_seqlens_k) return a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
  return a->seqlen_k;
}

int fa_oracle_storage_k(const fa_attention *a, int b) {
  if (a->block_table) return a->max_blocks_per_seq * a->page_size;
  if (a->cu_seqlens_k) return a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
  return a->seqlen_k;
}

int64_t fa_oracle_q_index(const fa_attention *a, const fa_tensor *t, int b,
                          int i, int h) {
  int64_t row, base;
  if (a->cu_seqlens_q) {
    row = (int64_t)a->cu_seqlens_q[b] + i;
    base = 0; // varlen: the batch stride is 0 and unused
  } else {
    row = i;
    base = (int64_t)b * t->stride_batch;
  }
  return base + row * t->stride_seq + (int64_t)h * t->stride_head;
}

int64_t fa_oracle_k_index(const fa_attention *a, const fa_tensor *t, int b,
                          int j, int h) {
  if (a->block_table) {
    int64_t blk = j / a->page_size, slot = j % a->page_size;
    int64_t page = a->block_table[(int64_t)b * a->max_blocks_per_seq + blk];
    return page * t->stride_batch + slot * t->stride_seq +
           (int64_t)h * t->stride_head;
  }
  if (a->cu_seqlens_k)
    return ((int64_t)a->cu_seqlens_k[b] + j) * t->stride_seq +
           (int64_t)h * t->stride_head;
  return (int64_t)b * t->stride_batch + (int64_t)j * t->stride_seq +
         (int64_t)h * t->stride_head;
}

/* Where query i's diagonal meets the keys: key j with Pk = Pq, i.e. row
   i + shift with shift = qpos(b) - kpos(b) (the header's positions).
   Aligned: qpos = sk - sq (0 top-left) and kpos = 0; explicit: qpos(b) =
   q_position + q_positions[b], kpos(b) = k_position + k_positions[b]. Used
   by causal, windows and ALiBi alike. */
static int64_t diag_of(const fa_attention *a, int b, int i) {
  int64_t qpos, kpos;
  if (a->positions == FA_POSITIONS_EXPLICIT) {
    qpos = a->q_position + (a->q_positions ? a->q_positions[b] : 0);
    kpos = a->k_position + (a->k_positions ? a->k_positions[b] : 0);
  } else {
    qpos = a->causal == FA_CAUSAL_TOP_LEFT
               ? 0
               : (int64_t)fa_oracle_len_k(a, b) - fa_oracle_len_q(a, b);
    kpos = 0;
  }
  return (int64_t)i + (qpos - kpos);
}

static int visible_at(const fa_attention *a, int64_t diag, int sk, int j) {
  if (j < 0 || j >= sk) return 0;
  int wr = a->causal ? 0 : a->window_right;
  if (a->window_left >= 0 && (int64_t)j < diag - a->window_left) return 0;
  if (wr >= 0 && (int64_t)j > diag + wr) return 0;
  return 1;
}

int fa_oracle_visible(const fa_attention *a, int b, int i, int j) {
  return visible_at(a, diag_of(a, b, i), fa_oracle_len_k(a, b), j);
}

int fa_oracle_visible_count(const fa_attention *a, int b, int i) {
  int sk = fa_oracle_len_k(a, b), n = 0;
  int64_t diag = diag_of(a, b, i);
  for (int j = 0; j < sk; j++) n += visible_at(a, diag, sk, j);
  return n;
}

/* ---- shared plumbing ---------------------------------------------------- */

typedef struct dims {
  int B, SQ, SK, HQ, HKV, D, DV, group;
  double scale;
  float scale_f;
} dims;

static int check_args(const fa_attention *a, const fa_tensor *q,
                      const fa_tensor *k, const fa_tensor *v,
                      const fa_tensor *d_o, dims *d) {
  const char *why = NULL;
  if (!a)
    why = "problem is NULL";
  else if (a->batch < 0 || a->seqlen_q < 0 || a->seqlen_k < 0)
    why = "batch/seqlen_q/seqlen_k must be >= 0";
  else if (a->heads_q < 1 || a->heads_kv < 1 || a->heads_q % a->heads_kv)
    why = "heads_q must be a positive multiple of heads_kv";
  else if (a->head_dim < 1 || a->head_dim_v < 0)
    why = "head_dim must be >= 1 and head_dim_v >= 0";
  // (A NULL tensor is an empty view, which the loops never read.)
  else if (q->dtype != k->dtype || q->dtype != v->dtype ||
           !fa_dtype_valid(q->dtype) ||
           (d_o &&
            (!fa_dtype_valid(d_o->dtype) || fa_dtype_is_fp8(d_o->dtype))))
    why = "q, k, v dtypes differ, or a dtype is invalid (or d_o is FP8)";
  else if (a->block_table && a->page_size < 1)
    why = "page_size must be >= 1 with block_table";
  if (why) {
    fprintf(stderr, "oracle: %s\n", why);
    return -1;
  }
  d->B = a->batch;
  d->SQ = a->seqlen_q;
  d->SK = a->seqlen_k;
  d->HQ = a->heads_q;
  d->HKV = a->heads_kv;
  d->D = a->head_dim;
  d->DV = a->head_dim_v ? a->head_dim_v : a->head_dim;
  d->group = a->heads_q / a->heads_kv;
  d->scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)d->D);
  d->scale_f = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)d->D);
  // Key lengths must fit the dense [seqlen_k] outputs.
  for (int b = 0; b < d->B; b++) {
    int sq = fa_oracle_len_q(a, b), sk = fa_oracle_len_k(a, b);
    if (sq < 0 || sq > d->SQ || sk < 0 || sk > d->SK) {
      fprintf(stderr,
              "oracle: sequence %d has lengths q=%d k=%d outside the "
              "maxima seqlen_q=%d seqlen_k=%d\n",
              b, sq, sk, d->SQ, d->SK);
      return -1;
    }
  }
  return 0;
}

/* An FP8 code's value from the format's definition (OCP 8-bit floating
   point): e4m3 has bias 7, no infinities and NaN S.1111.111; e5m2 bias 15
   and IEEE-style infinities and NaNs. Not dtype.h's decoder: the oracle
   checks it. */
static double fp8_value(unsigned c, int e5m2) {
  const int man = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const unsigned e = (c & 0x7fu) >> man, m = c & ((1u << man) - 1u);
  double v;
  if (e5m2 && e == 31)
    v = m ? NAN : INFINITY;
  else if (!e5m2 && e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - bias - man);
  else
    v = ldexp(1.0 + ldexp((double)m, -man), (int)e - bias);
  return (c & 0x80u) ? -v : v;
}

/* Element idx of t, decoded exactly. */
static double load_d(const fa_tensor *t, int64_t idx) {
  if (fa_dtype_is_fp8(t->dtype))
    return fp8_value(((const unsigned char *)t->data)[idx],
                     t->dtype == FA_E5M2);
  return fa_load(t->data, t->dtype, idx);
}

/* The descale of input t for sequence b and kv head hk, as the header
   defines it: descale[0], or descale[b * heads_kv + hk] per head (a q head
   h uses hk = h / (heads_q / heads_kv)); 1 without one. */
static double descale_of(const fa_attention *a, const fa_tensor *t, int b,
                         int hk) {
  if (!t->descale) return 1.0;
  return t->descale[t->descale_per_head ? (int64_t)b * a->heads_kv + hk : 0];
}

/* n elements of input t from idx, decoded and descaled: exactly in double;
   in fp32 (the library's arithmetic) for the naive attention. */
static void load_input_d(const fa_attention *a, const fa_tensor *t, int b,
                         int hk, int64_t idx, int n, double *dst) {
  double x = descale_of(a, t, b, hk);
  // The product is exact in double (a value of at most 11 significant
  // bits times a float); the header rounds it to fp32 once, so a value
  // that overflows fp32 is inf and one below its normals is subnormal.
  for (int c = 0; c < n; c++)
    dst[c] =
        x == 1.0 ? load_d(t, idx + c) : (double)(float)(load_d(t, idx + c) * x);
}

static void load_input_f(const fa_attention *a, const fa_tensor *t, int b,
                         int hk, int64_t idx, int n, float *dst) {
  float x = (float)descale_of(a, t, b, hk);
  fa_load_row(dst, t->data, t->dtype, idx, n);
  for (int c = 0; c < n; c++) dst[c] *= x;
}

/* Load key rows 0..sk-1 of kv head h of sequence b into dense [sk][n]. */
static void load_keys_d(const fa_attention *a, const fa_tensor *t, int b, int h,
                        int sk, int n, double *dst) {
  for (int j = 0; j < sk; j++)
    load_input_d(a, t, b, h, fa_oracle_k_index(a, t, b, j, h), n,
                 dst + (size_t)j * n);
}

static void load_keys_f(const fa_attention *a, const fa_tensor *t, int b, int h,
                        int sk, int n, float *dst) {
  for (int j = 0; j < sk; j++)
    load_input_f(a, t, b, h, fa_oracle_k_index(a, t, b, j, h), n,
                 dst + (size_t)j * n);
}

static size_t o_index(const dims *d, int b, int i, int h, int n) {
  return (((size_t)b * d->SQ + i) * d->HQ + h) * (size_t)n;
}

static size_t k_index(const dims *d, int b, int j, int h, int n) {
  return (((size_t)b * d->SK + j) * d->HKV + h) * (size_t)n;
}

static size_t lse_index(const dims *d, int b, int h, int i) {
  return ((size_t)b * d->HQ + h) * d->SQ + i;
}

/* ---- the float64 oracle ------------------------------------------------- */

/* Scores of one query row in double: raw[j] = scale * q.k_j (before the
   softcap) and s[j] the final score; vis[j] marks visible keys. Returns
   the number of visible keys and the maximum final score in *mx. */
static int row_scores_d(const fa_attention *a, const dims *d, int b, int h,
                        int i, int sk, const double *qrow, const double *K,
                        double *raw, double *s, unsigned char *vis,
                        double *mx) {
  int64_t diag = diag_of(a, b, i);
  double cap = a->softcap, m = -INFINITY;
  int n = 0;
  for (int j = 0; j < sk; j++) {
    vis[j] = (unsigned char)visible_at(a, diag, sk, j);
    if (!vis[j]) continue;
    const double *kr = K + (size_t)j * d->D;
    double dot = 0.0;
    for (int c = 0; c < d->D; c++) dot += qrow[c] * kr[c];
    double x = d->scale * dot;
    raw[j] = x;
    if (cap > 0.0) x = cap * tanh(x / cap);
    if (a->alibi_slopes) {
      int64_t dist = diag - j;
      x -= (double)a->alibi_slopes[h] * (double)(dist < 0 ? -dist : dist);
    }
    s[j] = x;
    if (x > m) m = x;
    n++;
  }
  *mx = m;
  return n;
}

int fa_oracle_forward(const fa_attention *a, fa_tensor q, fa_tensor k,
                      fa_tensor v, double *o, double *lse) {
  dims d;
  if (check_args(a, &q, &k, &v, NULL, &d)) return -1;
  if (o) memset(o, 0, sizeof(double) * d.B * d.SQ * d.HQ * d.DV);
  if (lse)
    for (size_t x = 0; x < (size_t)d.B * d.HQ * d.SQ; x++) lse[x] = -INFINITY;

  size_t sk_max = (size_t)d.SK;
  double *K = malloc(sizeof(double) * (sk_max * d.D + 1));
  double *V = malloc(sizeof(double) * (sk_max * d.DV + 1));
  double *raw = malloc(sizeof(double) * (sk_max + 1));
  double *s = malloc(sizeof(double) * (sk_max + 1));
  unsigned char *vis = malloc(sk_max + 1);
  double *qrow = malloc(sizeof(double) * d.D);
  double *acc = malloc(sizeof(double) * d.DV);
  int rc = 0;
  if (!K || !V || !raw || !s || !vis || !qrow || !acc) {
    rc = -1;
    goto done;
  }
  for (int b = 0; b < d.B; b++) {
    int sq = fa_oracle_len_q(a, b), sk = fa_oracle_len_k(a, b);
    if (sq <= 0) continue;
    for (int kh = 0; kh < d.HKV; kh++) {
      load_keys_d(a, &k, b, kh, sk, d.D, K);
      load_keys_d(a, &v, b, kh, sk, d.DV, V);
      for (int hh = 0; hh < d.group; hh++) {
        int h = kh * d.group + hh;
        double sink = a->sinks ? (double)a->sinks[h] : -INFINITY;
        for (int i = 0; i < sq; i++) {
          load_input_d(a, &q, b, kh, fa_oracle_q_index(a, &q, b, i, h), d.D,
                       qrow);
          // Pass 1: every visible score and the row maximum.
          double m;
          int n = row_scores_d(a, &d, b, h, i, sk, qrow, K, raw, s, vis, &m);
          if (a->sinks && sink > m) m = sink;
          // O = 0, LSE = -inf (a -inf sink weighs nothing; a NaN one
          // makes the row NaN)
          if (n == 0 && sink == -INFINITY) continue;
          // Pass 2: exponentials, their sum and the weighted sum of V.
          double l = a->sinks ? exp(sink - m) : 0.0;
          for (int c = 0; c < d.DV; c++) acc[c] = 0.0;
          for (int j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            double p = exp(s[j] - m);
            l += p;
            const double *vr = V + (size_t)j * d.DV;
            for (int c = 0; c < d.DV; c++) acc[c] += p * vr[c];
          }
          if (o) {
            double *orow = o + o_index(&d, b, i, h, d.DV);
            for (int c = 0; c < d.DV; c++) orow[c] = acc[c] / l;
          }
          if (lse) lse[lse_index(&d, b, h, i)] = m + log(l);
        }
      }
    }
  }
done:
  free(K);
  free(V);
  free(raw);
  free(s);
  free(vis);
  free(qrow);
  free(acc);
  return rc;
}

/* The backward, or with mag != 0 the same sums with every term replaced by
   its magnitude (see fa_oracle_backward_magnitude). */
static int backward_impl(const fa_attention *a, fa_tensor q, fa_tensor k,
                         fa_tensor v, fa_tensor d_o, double *dq, double *dk,
                         double *dv, int mag) {
  dims d;
  if (check_args(a, &q, &k, &v, &d_o, &d)) return -1;
  if (dq) memset(dq, 0, sizeof(double) * d.B * d.SQ * d.HQ * d.D);
  if (dk) memset(dk, 0, sizeof(double) * d.B * d.SK * d.HKV * d.D);
  if (dv) memset(dv, 0, sizeof(double) * d.B * d.SK * d.HKV * d.DV);

  size_t sk_max = (size_t)d.SK;
  double *K = malloc(sizeof(double) * (sk_max * d.D + 1));
  double *V = malloc(sizeof(double) * (sk_max * d.DV + 1));
  double *dK = malloc(sizeof(double) * (sk_max * d.D + 1));
  double *dV = malloc(sizeof(double) * (sk_max * d.DV + 1));
  double *raw = malloc(sizeof(double) * (sk_max + 1));
  double *s = malloc(sizeof(double) * (sk_max + 1));
  double *dp = malloc(sizeof(double) * (sk_max + 1));
  unsigned char *vis = malloc(sk_max + 1);
  double *qrow = malloc(sizeof(double) * d.D);
  double *dorow = malloc(sizeof(double) * d.DV);
  double *dqrow = malloc(sizeof(double) * d.D);
  int rc = 0;
  if (!K || !V || !dK || !dV || !raw || !s || !dp || !vis || !qrow || !dorow ||
      !dqrow) {
    rc = -1;
    goto done;
  }
  for (int b = 0; b < d.B; b++) {
    int sq = fa_oracle_len_q(a, b), sk = fa_oracle_len_k(a, b);
    for (int kh = 0; kh < d.HKV; kh++) {
      load_keys_d(a, &k, b, kh, sk, d.D, K);
      load_keys_d(a, &v, b, kh, sk, d.DV, V);
      memset(dK, 0, sizeof(double) * ((size_t)sk * d.D + 1));
      memset(dV, 0, sizeof(double) * ((size_t)sk * d.DV + 1));
      for (int hh = 0; hh < d.group; hh++) {
        int h = kh * d.group + hh;
        double sink = a->sinks ? (double)a->sinks[h] : -INFINITY;
        for (int i = 0; i < sq; i++) {
          int64_t go = fa_oracle_q_index(a, &d_o, b, i, h);
          load_input_d(a, &q, b, kh, fa_oracle_q_index(a, &q, b, i, h), d.D,
                       qrow);
          for (int c = 0; c < d.DV; c++) dorow[c] = load_d(&d_o, go + c);
          double m;
          int n = row_scores_d(a, &d, b, h, i, sk, qrow, K, raw, s, vis, &m);
          if (n == 0) continue; // no key: no gradient flows (dq row = 0)
          if (a->sinks && sink > m) m = sink;
          double l = a->sinks ? exp(sink - m) : 0.0;
          for (int j = 0; j < sk; j++)
            if (vis[j]) l += exp(s[j] - m);
          double lse = m + log(l);
          // P_j = exp(s_j - lse); dP_j = do . v_j; D = sum_j P_j dP_j
          // (= do . O, the sink having no value vector).
          double D = 0.0;
          for (int j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            const double *vr = V + (size_t)j * d.DV;
            double t = 0.0;
            for (int c = 0; c < d.DV; c++) t += dorow[c] * vr[c];
            dp[j] = t;
            D += exp(s[j] - lse) * t;
          }
          for (int c = 0; c < d.D; c++) dqrow[c] = 0.0;
          for (int j = 0; j < sk; j++) {
            if (!vis[j]) continue;
            double p = exp(s[j] - lse);
            double ds = mag ? p * (fabs(dp[j]) + fabs(D)) : p * (dp[j] - D);
            if (a->softcap > 0.0f) {
              double th = tanh(raw[j] / (double)a->softcap);
              ds *= 1.0 - th * th;
            }
            ds *= mag ? fabs(d.scale) : d.scale; // d(raw)/d(q.k)
            const double *kr = K + (size_t)j * d.D;
            double *dkr = dK + (size_t)j * d.D;
            double *dvr = dV + (size_t)j * d.DV;
            if (mag) {
              for (int c = 0; c < d.D; c++) {
                dqrow[c] += ds * fabs(kr[c]);
                dkr[c] += ds * fabs(qrow[c]);
              }
              for (int c = 0; c < d.DV; c++) dvr[c] += p * fabs(dorow[c]);
              continue;
            }
            for (int c = 0; c < d.D; c++) {
              dqrow[c] += ds * kr[c];
              dkr[c] += ds * qrow[c];
            }
            for (int c = 0; c < d.DV; c++) dvr[c] += p * dorow[c];
          }
          if (dq)
            memcpy(dq + o_index(&d, b, i, h, d.D), dqrow, sizeof(double) * d.D);
        }
      }
      for (int j = 0; j < sk; j++) {
        if (dk)
          memcpy(dk + k_index(&d, b, j, kh, d.D), dK + (size_t)j * d.D,
                 sizeof(double) * d.D);
        if (dv)
          memcpy(dv + k_index(&d, b, j, kh, d.DV), dV + (size_t)j * d.DV,
                 sizeof(double) * d.DV);
      }
    }
  }
done:
  free(K);
  free(V);
  free(dK);
  free(dV);
  free(raw);
  free(s);
  free(dp);
  free(vis);
  free(qrow);
  free(dorow);
  free(dqrow);
  return rc;
}

int fa_oracle_backward(const fa_attention *a, fa_tensor q, fa_tensor k,
                       fa_tensor v, fa_tensor d_o, double *dq, double *dk,
                       double *dv) {
  return backward_impl(a, q, k, v, d_o, dq, dk, dv, 0);
}

int fa_oracle_backward_magnitude(const fa_attention *a, fa_tensor q,
                                 fa_tensor k, fa_tensor v, fa_tensor d_o,
                                 double *dq, double *dk, double *dv) {
  return backward_impl(a, q, k, v, d_o, dq, dk, dv, 1);
}

int fa_oracle_dsinks(const fa_attention *a, fa_tensor q, fa_tensor k,
                     fa_tensor v, fa_tensor d_o, double *dsinks, double *mag) {
  dims d;
  if (check_args(a, &q, &k, &v, &d_o, &d)) return -1;
  if (!a->sinks) {
    fprintf(stderr, "oracle: dsinks without sinks\n");
    return -1;
  }
  double *o = malloc(sizeof(double) * ((size_t)d.B * d.SQ * d.HQ * d.DV + 1));
  double *lse = malloc(sizeof(double) * ((size_t)d.B * d.HQ * d.SQ + 1));
  double *dorow = malloc(sizeof(double) * d.DV);
  int rc = -1;
  if (!o || !lse || !dorow || fa_oracle_forward(a, q, k, v, o, lse)) goto done;
  for (int h = 0; h < d.HQ; h++) {
    if (dsinks) dsinks[h] = 0.0;
    if (mag) mag[h] = 0.0;
  }
  // dsinks[h] = -sum over rows of P_sink (dO . O), P_sink = exp(sink - lse).
  for (int b = 0; b < d.B; b++)
    for (int i = 0; i < fa_oracle_len_q(a, b); i++)
      for (int h = 0; h < d.HQ; h++) {
        load_input_d(a, &d_o, b, h / d.group,
                     fa_oracle_q_index(a, &d_o, b, i, h), d.DV, dorow);
        const double *orow = o + o_index(&d, b, i, h, d.DV);
        double dot = 0.0, adot = 0.0;
        for (int c = 0; c < d.DV; c++) {
          dot += dorow[c] * orow[c];
          adot += fabs(dorow[c] * orow[c]);
        }
        double ps = exp((double)a->sinks[h] - lse[lse_index(&d, b, h, i)]);
        if (dsinks) dsinks[h] -= ps * dot;
        if (mag) mag[h] += ps * adot;
      }
  rc = 0;
done:
  free(o);
  free(lse);
  free(dorow);
  return rc;
}

/* ---- naive same-precision attention ------------------------------------- */

static float round_to(fa_dtype t, float x) {
  // e4m3 is only ever P's rounding (fa_naive_forward_p8): times 2^8, as
  // the FP8 tensor-core kernels store it.
  if (t == FA_E4M3)
    return fa_fp8_to_f32(fa_f32_to_e4m3(x * 256.0f), FA_E4M3) / 256.0f;
  if (t == FA_F16) return fa_f16_to_f32(fa_f32_to_f16(x));
  if (t == FA_BF16) return fa_bf16_to_f32(fa_f32_to_bf16(x));
  return x;
}

/* One row of the naive forward: fp32 scores, fp32 softmax (sink included).
   Fills raw[j] (scale*q.k), p[j] (fp32 probability) for visible keys and
   returns the visible count; *lse gets m + log(l). */
static int row_probs_f(const fa_attention *a, const dims *d, int b, int h,
                       int i, int sk, const float *qrow, const float *K,
                       float *raw, float *p, unsigned char *vis, float *lse) {
  int64_t diag = diag_of(a, b, i);
  float cap = a->softcap, m = -INFINITY;
  int n = 0;
  for (int j = 0; j < sk; j++) {
    vis[j] = (unsigned char)visible_at(a, diag, sk, j);
    if (!vis[j]) continue;
    const float *kr = K + (size_t)j * d->D;
    float dot = 0.0f;
    for (int c = 0; c < d->D; c++) dot += qrow[c] * kr[c];
    float x = d->scale_f * dot;
    raw[j] = x;
    if (cap > 0.0f) x = cap * tanhf(x / cap);
    if (a->alibi_slopes) {
      int64_t dist = diag - j;
      x -= a->alibi_slopes[h] * (float)(dist < 0 ? -dist : dist);
    }
    p[j] = x;
    if (x > m) m = x;
    n++;
  }
  float sink = a->sinks ? a->sinks[h] : -INFINITY;
  if (a->sinks && sink > m) m = sink;
  if (n == 0) {
    *lse = a->sinks ? sink : -INFINITY;
    return 0;
  }
  float l = a->sinks ? expf(sink - m) : 0.0f;
  for (int j = 0; j < sk; j++)
    if (vis[j]) {
      p[j] = expf(p[j] - m);
      l += p[j];
    }
  for (int j = 0; j < sk; j++)
    if (vis[j]) p[j] /= l;
  *lse = m + logf(l);
  return n;
}

typedef struct fbufs {
  float *K, *V, *raw, *p, *qrow, *acc, *dorow, *dK, *dV, *dqrow, *dp;
  unsigned char *vis;
} fbufs;

static void fbufs_free(fbufs *f) {
  free(f->K);
  free(f->V);
  free(f->raw);
  free(f->p);
  free(f->qrow);
  free(f->acc);
  free(f->dorow);
  free(f->dK);
  free(f->dV);
  free(f->dqrow);
  free(f->dp);
  free(f->vis);
}

static int fbufs_alloc(fbufs *f, const dims *d) {
  size_t sk = (size_t)d->SK + 1;
  memset(f, 0, sizeof *f);
  f->K = malloc(sizeof(float) * sk * d->D);
  f->V = malloc(sizeof(float) * sk * d->DV);
  f->dK = malloc(sizeof(float) * sk * d->D);
  f->dV = malloc(sizeof(float) * sk * d->DV);
  f->raw = malloc(sizeof(float) * sk);
  f->p = malloc(sizeof(float) * sk);
  f->dp = malloc(sizeof(float) * sk);
  f->vis = malloc(sk);
  f->qrow = malloc(sizeof(float) * d->D);
  f->dqrow = malloc(sizeof(float) * d->D);
  f->acc = malloc(sizeof(float) * d->DV);
  f->dorow = malloc(sizeof(float) * d->DV);
  if (!f->K || !f->V || !f->dK || !f->dV || !f->raw || !f->p || !f->dp ||
      !f->vis || !f->qrow || !f->dqrow || !f->acc || !f->dorow) {
    fbufs_free(f);
    return -1;
  }
  return 0;
}

/* O row (rounded to t) from probabilities: acc = sum_j round_tp(P_j) v_j
   (tp: the dtype P is rounded to as an operand of the product). */
static void row_output_f(const dims *d, fa_dtype tp, fa_dtype t, int sk,
                         const unsigned char *vis, const float *p,
                         const float *V, float *out) {
  for (int c = 0; c < d->DV; c++) out[c] = 0.0f;
  for (int j = 0; j < sk; j++) {
    if (!vis[j]) continue;
    float pr = round_to(tp, p[j]);
    const float *vr = V + (size_t)j * d->DV;
    for (int c = 0; c < d->DV; c++) out[c] += pr * vr[c];
  }
  for (int c = 0; c < d->DV; c++) out[c] = round_to(t, out[c]);
}

int fa_naive_forward(const fa_attention *a, fa_tensor q, fa_tensor k,
                     fa_tensor v, float *o, float *lse) {
  return fa_naive_forward_out(
      a, q, k, v, fa_dtype_is_fp8(q.dtype) ? FA_BF16 : q.dtype, o, lse);
}

static int naive_forward(const fa_attention *a, fa_tensor q, fa_tensor k,
                         fa_tensor v, fa_dtype tp, fa_dtype t, float *o,
                         float *lse);

int fa_naive_forward_out(const fa_attention *a, fa_tensor q, fa_tensor k,
                         fa_tensor v, fa_dtype t, float *o, float *lse) {
  return naive_forward(a, q, k, v, t, t, o, lse);
}

int fa_naive_forward_to(const fa_attention *a, fa_tensor q, fa_tensor k,
                        fa_tensor v, fa_dtype t, float *o, float *lse) {
  return naive_forward(a, q, k, v, fa_dtype_is_fp8(q.dtype) ? t : q.dtype, t, o,
                       lse);
}

int fa_naive_forward_p8(const fa_attention *a, fa_tensor q, fa_tensor k,
                        fa_tensor v, fa_dtype t, float *o, float *lse) {
  return naive_forward(a, q, k, v, FA_E4M3, t, o, lse);
}

int fa_naive_forward_pt(const fa_attention *a, fa_tensor q, fa_tensor k,
                        fa_tensor v, fa_dtype tp, fa_dtype t, float *o,
                        float *lse) {
  return naive_forward(a, q, k, v, tp, t, o, lse);
}

static int naive_forward(const fa_attention *a, fa_tensor q, fa_tensor k,
                         fa_tensor v, fa_dtype tp, fa_dtype t, float *o,
                         float *lse) {
  dims d;
  if (check_args(a, &q, &k, &v, NULL, &d)) return -1;
  fbufs f;
  if (fbufs_alloc(&f, &d)) return -1;
  if (o) memset(o, 0, sizeof(float) * d.B * d.SQ * d.HQ * d.DV);
  if (lse)
    for (size_t x = 0; x < (size_t)d.B * d.HQ * d.SQ; x++) lse[x] = -INFINITY;
  for (int b = 0; b < d.B; b++) {
    int sq = fa_oracle_len_q(a, b), sk = fa_oracle_len_k(a, b);
    if (sq <= 0) continue;
    for (int kh = 0; kh < d.HKV; kh++) {
      load_keys_f(a, &k, b, kh, sk, d.D, f.K);
      load_keys_f(a, &v, b, kh, sk, d.DV, f.V);
      for (int hh = 0; hh < d.group; hh++) {
        int h = kh * d.group + hh;
        for (int i = 0; i < sq; i++) {
          load_input_f(a, &q, b, kh, fa_oracle_q_index(a, &q, b, i, h), d.D,
                       f.qrow);
          float l;
          int n = row_probs_f(a, &d, b, h, i, sk, f.qrow, f.K, f.raw, f.p,
                              f.vis, &l);
          if (lse) lse[lse_index(&d, b, h, i)] = l;
          if (n && o)
            row_output_f(&d, tp, t, sk, f.vis, f.p, f.V,
                         o + o_index(&d, b, i, h, d.DV));
        }
      }
    }
  }
  fbufs_free(&f);
  return 0;
}

int fa_naive_backward(const fa_attention *a, fa_tensor q, fa_tensor k,
                      fa_tensor v, fa_tensor d_o, float *dq, float *dk,
                      float *dv) {
  dims d;
  if (check_args(a, &q, &k, &v, &d_o, &d)) return -1;
  fbufs f;
  if (fbufs_alloc(&f, &d)) return -1;
  fa_dtype t = d_o.dtype; // the output dtype: what P, dS and gradients round to
  if (dq) memset(dq, 0, sizeof(float) * d.B * d.SQ * d.HQ * d.D);
  if (dk) memset(dk, 0, sizeof(float) * d.B * d.SK * d.HKV * d.D);
  if (dv) memset(dv, 0, sizeof(float) * d.B * d.SK * d.HKV * d.DV);
  for (int b = 0; b < d.B; b++) {
    int sq = fa_oracle_len_q(a, b), sk = fa_oracle_len_k(a, b);
    for (int kh = 0; kh < d.HKV; kh++) {
      load_keys_f(a, &k, b, kh, sk, d.D, f.K);
      load_keys_f(a, &v, b, kh, sk, d.DV, f.V);
      memset(f.dK, 0, sizeof(float) * ((size_t)sk * d.D + 1));
      memset(f.dV, 0, sizeof(float) * ((size_t)sk * d.DV + 1));
      for (int hh = 0; hh < d.group; hh++) {
        int h = kh * d.group + hh;
        for (int i = 0; i < sq; i++) {
          load_input_f(a, &q, b, kh, fa_oracle_q_index(a, &q, b, i, h), d.D,
                       f.qrow);
          fa_load_row(f.dorow, d_o.data, t, fa_oracle_q_index(a, &d_o, b, i, h),
                      d.DV);
          float lse;
          int n = row_probs_f(a, &d, b, h, i, sk, f.qrow, f.K, f.raw, f.p,
                              f.vis, &lse);
          if (n == 0) continue;
          row_output_f(&d, t, t, sk, f.vis, f.p, f.V, f.acc); // O rounded to t
          float D = 0.0f;
          for (int c = 0; c < d.DV; c++) D += f.dorow[c] * f.acc[c];
          for (int c = 0; c < d.D; c++) f.dqrow[c] = 0.0f;
          for (int j = 0; j < sk; j++) {
            if (!f.vis[j]) continue;
            const float *vr = f.V + (size_t)j * d.DV;
            float dpj = 0.0f;
            for (int c = 0; c < d.DV; c++) dpj += f.dorow[c] * vr[c];
            float ds = f.p[j] * (dpj - D);
            if (a->softcap > 0.0f) {
              float th = tanhf(f.raw[j] / a->softcap);
              ds *= 1.0f - th * th;
            }
            ds = round_to(t, ds);
            float pr = round_to(t, f.p[j]);
            const float *kr = f.K + (size_t)j * d.D;
            float *dkr = f.dK + (size_t)j * d.D;
            float *dvr = f.dV + (size_t)j * d.DV;
            for (int c = 0; c < d.D; c++) {
              f.dqrow[c] += ds * kr[c];
              dkr[c] += ds * f.qrow[c];
            }
            for (int c = 0; c < d.DV; c++) dvr[c] += pr * f.dorow[c];
          }
          if (dq) {
            float *r = dq + o_index(&d, b, i, h, d.D);
            for (int c = 0; c < d.D; c++)
              r[c] = round_to(t, d.scale_f * f.dqrow[c]);
          }
        }
      }
      for (int j = 0; j < sk; j++) {
        if (dk) {
          float *r = dk + k_index(&d, b, j, kh, d.D);
          for (int c = 0; c < d.D; c++)
            r[c] = round_to(t, d.scale_f * f.dK[(size_t)j * d.D + c]);
        }
        if (dv) {
          float *r = dv + k_index(&d, b, j, kh, d.DV);
          for (int c = 0; c < d.DV; c++)
            r[c] = round_to(t, f.dV[(size_t)j * d.DV + c]);
        }
      }
    }
  }
  fbufs_free(&f);
  return 0;
}
