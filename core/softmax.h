// SPDX-License-Identifier: MIT
// The online-softmax state (m, l, O) of one query row and its two
// operations: update with a new block of scores, and merge of two partial
// states over disjoint key sets (the merge lemma). Both are written in the
// stable form (every exponent <= 0) and handle fully masked parts: a row
// that has seen no key has m = -inf, l = 0, O = 0.
#ifndef FA_CORE_SOFTMAX_H
#define FA_CORE_SOFTMAX_H

#include <math.h>
#include <stddef.h>

/* Update (m, l) with scores s[0..n) (masked entries = -INFINITY), turning s
   into the unnormalised probabilities exp(s - m_new) in place. Returns the
   factor alpha = exp(m_old - m_new) by which the caller rescales O before
   adding P.V. A block that is entirely masked leaves the state unchanged
   (alpha = 1, P = 0). */
static inline float fa_softmax_update(float *m, float *l, float *s, int n) {
  float mx = *m;
  // A NaN score must reach O and l, never be skipped as "not larger".
  for (int j = 0; j < n; j++) mx = (s[j] > mx || isnan(s[j])) ? s[j] : mx;
  if (mx == -INFINITY) {
    for (int j = 0; j < n; j++) s[j] = 0.0f;
    return 1.0f;
  }
  // m_old = -inf gives exp(-inf) = 0: the empty previous state vanishes.
  float alpha = expf(*m - mx);
  float sum = 0.0f;
  for (int j = 0; j < n; j++) {
    s[j] = expf(s[j] - mx);
    sum += s[j];
  }
  *l = *l * alpha + sum;
  *m = mx;
  return alpha;
}

/* Merge partial state b into a: (m, l, O[dv]). Exact: the result is the
   state over the union of both key sets. */
static inline void fa_softmax_merge(float *m_a, float *l_a, float *o_a,
                                    float m_b, float l_b, const float *o_b,
                                    int dv) {
  if (m_b == -INFINITY) return;
  if (*m_a == -INFINITY) {
    *m_a = m_b;
    *l_a = l_b;
    for (int d = 0; d < dv; d++) o_a[d] = o_b[d];
    return;
  }
  float mx = *m_a > m_b ? *m_a : m_b;
  float wa = expf(*m_a - mx), wb = expf(m_b - mx);
  *l_a = *l_a * wa + l_b * wb;
  *m_a = mx;
  for (int d = 0; d < dv; d++) o_a[d] = o_a[d] * wa + o_b[d] * wb;
}

/* Finalise a row: fold in a sink logit (NAN = none), return 1/l for O
   (0 for a row with no mass) and store the natural-log LSE. */
static inline float fa_softmax_finalize(float m, float l, float sink,
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

/* LSE-form merge of n normalised parts (o_i, lse_i): out_lse = log sum
   exp(lse_i); weights w_i = exp(lse_i - out_lse) so out = sum w_i o_i.
   Parts with lse = -inf get weight 0; all -inf gives out_lse = -inf and all
   weights 0. NaN propagates. */
static inline float fa_lse_merge_weights(int n, const float *lse, float *w) {
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
