// SPDX-License-Identifier: MIT
// exp of 16 scores for P, which is rounded to bf16 (8 significant bits)
// right after: 2^t with t = s * mul * log2(e) - ref * log2(e) in one FMA,
// n = round(t), 2^(t - n) by its Taylor polynomial of degree 5 in
// (t - n) ln 2 (truncation below 2.4e-6 relative at |t - n| = 1/2, under a
// thousandth of bf16's rounding), times 2^n by vscalefps. 10 vector ops
// per 16 exps, against 15 for vf_exp_inline (which keeps fp32 accuracy and
// clamps for any input): here t <= 0 up to rounding (ref is the maximum),
// so only t < -126 (2^t below FLT_MIN, -inf included: masked scores) needs
// care: flushed to exactly 0, as vf_exp_inline does. NaN stays NaN.
#ifndef FA_AMX_EXP2_H
#define FA_AMX_EXP2_H
#include <immintrin.h>

static inline __m512 amx_exp2(__m512 t, __mmask16 keep) {
  const __mmask16 live =
      _mm512_mask_cmp_ps_mask(keep, t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  const __m512 n =
      _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);     // exact, in [-1/2, 1/2]
  __m512 q = _mm512_set1_ps(1.3333558e-3f); // ln2^5 / 5!
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.6181291e-3f)); // ln2^4 / 4!
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.5504109e-2f)); // ln2^3 / 3!
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.4022651e-1f)); // ln2^2 / 2
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.9314718e-1f)); // ln2
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, q, n);
}

/* P for the 16 scores at x of which the keys in `in` exist (and are
   visible): exp(x mul - ref) with k = mul log2(e) and refl = ref log2(e);
   the rest are 0 and never read. */
static inline __m512 amx_p16(const float *x, __mmask16 in, __m512 k,
                             __m512 refl) {
  if (!in) return _mm512_setzero_ps();
  if (in == (__mmask16)0xffff)
    return amx_exp2(_mm512_fmsub_ps(_mm512_loadu_ps(x), k, refl), in);
  return amx_exp2(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(in, x), k, refl), in);
}
#endif
