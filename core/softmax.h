// SPDX-License-Identifier: MIT
// The online-softmax state (m, l, O) of one query row and its two
// operations: update with a new block of scores, and merge of two partial
// states over disjoint key sets (the merge lemma). Both are written in the
// stable form (every exponent <= 0) and handle fully masked parts: a row
// that has seen no key has m = -inf, l = 0, O = 0. Every helper compiles
// for GPU device code too (FA_HD): the GPU kernels call these, not copies.
#ifndef FA_CORE_SOFTMAX_H
#define FA_CORE_SOFTMAX_H

#include <math.h>
#include <stddef.h>

#include "hd.h"

/* The NaN-sticky maximum: NaN when either operand is NaN. A NaN score
   must reach l, O and the LSE (include/flashattn.h's non-finite rule);
   fmaxf and the hardware's plain max return the other operand. On sm_80
   and newer it is one instruction (max.NaN). */
static inline FA_HD float fa_max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return isnan(a) ? a : (b > a || isnan(b)) ? b : a;
#endif
}

/* a * b rounded on its own, never fused with an addition that follows
   (device compilers contract a * b - c into an FMA by default). */
static inline FA_HD float fa_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/* The exponent of score s against the row's reference ref (from
   fa_softmax_step, same mul): s * mul - ref with the product rounded first.
   Rounding is monotone and ref is the row maximum's rounded product, so the
   maximum's exponent is exactly 0 and every other one <= 0: P in [0, 1] and
   l >= 1. Fused, the exponent would keep ref's rounding error, up to 2^-24
   |ref|: at base-2 logits of 1e10 that is 2^+-600, and l becomes 0 or inf. */
static inline FA_HD float fa_softmax_exponent(float s, float mul, float ref) {
  return fa_mul_rn(s, mul) - ref;
}

/* The fused form of fa_softmax_exponent, one FMA instead of a multiply and
   a subtraction: s * mul - ref exactly, then rounded. Its error is ref's
   own rounding (m * mul - ref for the row maximum m), a common offset of
   every exponent of the row that cancels in O = sum P v / sum P and in the
   LSE (which adds ref back), as long as it stays small: at |ref| < 2^24 it
   is at most 0.5, so P stays within 2^0.5 of its exact value and every
   16-bit P keeps its precision. Kernels take it for a warp whose rows all
   pass fa_softmax_fused_ok (always, short of logits near 2^24 / mul), and
   fa_softmax_exponent otherwise (f16 inputs near 65504 at the default
   scale reach |ref| ~ 1e10, where the offset is 2^+-600). */
static inline FA_HD int fa_softmax_fused_ok(float ref) {
  return fabsf(ref) < 0x1p24f;
}
static inline FA_HD float fa_softmax_exponent_fused(float s, float mul,
                                                    float ref) {
  return fmaf(s, mul, -ref);
}

/* The exponent x = s * mul - lse of a backward's recomputed P, clamped at 0:
   s <= lse holds in real arithmetic, but s is recomputed by another product
   order and lse is rounded, so at huge logits (f16 near 65504 at the
   default scale: |lse| ~ 1e9, ulp 128) x may round above 0, where P would
   overflow. A NaN stays NaN (the row saw one). */
static inline FA_HD float fa_backward_exponent(float x) {
  return x > 0.0f ? 0.0f : x;
}

/* One online-softmax step of a row, in any exponent base. *m is the running
   maximum of the row's raw scores (-inf: no key yet), blk this block's
   maximum (NaN-sticky: fa_max_nan), mul the factor from a raw score to the
   exponent's units (1 for exp of scaled scores, scale * log2(e) for exp2 of
   raw q.k). Updates *m and sets *ref, the reference every exponent
   subtracts (fa_softmax_exponent): 0 while the row has seen no key, so
   masked scores give exponent -inf and P = 0 and an all-masked block
   leaves the state unchanged. Returns the exponent of the rescale factor
   of l and O: exactly 0 while the maximum stands (alpha = 1: no drift of
   l and O by the rounding of ref, block after block), -inf when the row
   was empty (alpha = 0 on an O that is still 0), NaN once a score was NaN
   (the maximum stays NaN). */
static inline FA_HD float fa_softmax_step(float *m, float blk, float mul,
                                          float *ref) {
  const float m_old = *m, m_new = fa_max_nan(m_old, blk);
  *m = m_new;
  *ref = m_new == -INFINITY ? 0.0f : fa_mul_rn(m_new, mul);
  if (m_new == m_old) return 0.0f;
  return fa_mul_rn(m_old, mul) - *ref;
}

/* Update (m, l) with scores s[0..n) (masked entries = -INFINITY), turning s
   into the unnormalised probabilities exp(s - m_new) in place. Returns the
   factor alpha = exp(m_old - m_new) by which the caller rescales O before
   adding P.V. A block that is entirely masked leaves the state unchanged
   (alpha = 1, P = 0). The specification of the step every kernel takes
   (fa_softmax_step, fa_softmax_exponent), in the natural base. */
static inline FA_HD float fa_softmax_update(float *m, float *l, float *s,
                                            int n) {
  float blk = -INFINITY, ref;
  for (int j = 0; j < n; j++) blk = fa_max_nan(blk, s[j]);
  const float alpha = expf(fa_softmax_step(m, blk, 1.0f, &ref));
  float sum = 0.0f;
  for (int j = 0; j < n; j++) {
    s[j] = expf(fa_softmax_exponent(s[j], 1.0f, ref));
    sum += s[j];
  }
  *l = *l * alpha + sum;
  return alpha;
}

/* The merge lemma on the (m, l) pair: state b into state a. Returns 0 when
   b is empty (a unchanged), 1 when a was empty (a takes b's m and l; the
   caller copies O_b), 2 otherwise, with the weights of O_a and O_b in *wa
   and *wb. */
static inline FA_HD int fa_softmax_merge_weights(float *m_a, float *l_a,
                                                 float m_b, float l_b,
                                                 float *wa, float *wb) {
  if (m_b == -INFINITY) return 0;
  if (*m_a == -INFINITY) {
    *m_a = m_b;
    *l_a = l_b;
    return 1;
  }
  float mx = *m_a > m_b ? *m_a : m_b;
  *wa = expf(*m_a - mx);
  *wb = expf(m_b - mx);
  *l_a = *l_a * *wa + l_b * *wb;
  *m_a = mx;
  return 2;
}

/* Merge partial state b into a: (m, l, O[dv]). Exact: the result is the
   state over the union of both key sets. */
static inline FA_HD void fa_softmax_merge(float *m_a, float *l_a, float *o_a,
                                          float m_b, float l_b,
                                          const float *o_b, int dv) {
  float wa = 1.0f, wb = 0.0f;
  const int how = fa_softmax_merge_weights(m_a, l_a, m_b, l_b, &wa, &wb);
  if (how == 1)
    for (int d = 0; d < dv; d++) o_a[d] = o_b[d];
  else if (how == 2)
    for (int d = 0; d < dv; d++) o_a[d] = o_a[d] * wa + o_b[d] * wb;
}

/* Finalise a row: fold in a sink logit (NAN = none), return 1/l for O
   (0 for a row with no mass) and store the natural-log LSE. */
static inline FA_HD float fa_softmax_finalize(float m, float l, float sink,
                                              float *lse) {
  if (!isnan(sink)) {
    if (m == -INFINITY) {
      m = sink;
      l = 0.0f; // the sink has no value vector: O stays 0
      *lse = sink;
      return 0.0f;
    }
    float mx = m > sink ? m : sink;
    l = l * expf(m - mx) + expf(sink - mx);
    // O was accumulated relative to m: rescale through the factor below.
    *lse = mx + logf(l);
    return expf(m - mx) / l;
  }
  if (m == -INFINITY) {
    *lse = -INFINITY;
    return 0.0f;
  }
  *lse = m + logf(l);
  return 1.0f / l;
}

/* fa_softmax_finalize with head h's sink from sinks (NULL = none): a NaN
   or +inf sink makes the row NaN (O and LSE), a -inf one weighs nothing. */
static inline FA_HD float fa_softmax_finalize_sinks(float m, float l,
                                                    const float *sinks, int h,
                                                    float *lse) {
  const float sink = sinks ? sinks[h] : -INFINITY;
  if (isnan(sink) || sink == INFINITY) {
    *lse = NAN;
    return NAN;
  }
  return fa_softmax_finalize(m, l, sink == -INFINITY ? NAN : sink, lse);
}

/* LSE-form merge of n normalised parts (o_i, lse_i): out_lse = log sum
   exp(lse_i); weights w_i = exp(lse_i - out_lse) so out = sum w_i o_i.
   Parts with lse = -inf get weight 0; all -inf gives out_lse = -inf and all
   weights 0. NaN propagates. */
static inline FA_HD float fa_lse_merge_weights(int n, const float *lse,
                                               float *w) {
  float mx = -INFINITY;
  int nan = 0;
  for (int i = 0; i < n; i++) {
    if (isnan(lse[i]))
      nan = 1;
    else if (lse[i] > mx)
      mx = lse[i];
  }
  if (nan) {
    for (int i = 0; i < n; i++) w[i] = NAN;
    return NAN;
  }
  if (mx == -INFINITY) {
    for (int i = 0; i < n; i++) w[i] = 0.0f;
    return -INFINITY;
  }
  if (mx == INFINITY) { // degenerate input: keep it visible, never hide it
    for (int i = 0; i < n; i++) w[i] = lse[i] == INFINITY ? NAN : 0.0f;
    return INFINITY;
  }
  float sum = 0.0f;
  for (int i = 0; i < n; i++) {
    w[i] = lse[i] == -INFINITY ? 0.0f : expf(lse[i] - mx);
    sum += w[i];
  }
  float inv = 1.0f / sum;
  for (int i = 0; i < n; i++) w[i] *= inv;
  return mx + logf(sum);
}

#endif
