// SPDX-License-Identifier: MIT
// exp of 16 scores for P, which is rounded to bf16 (8 significant bits)
// right after: 2^t with t = s * mul * log2(e) - ref * log2(e) in one FMA,
// then
//   f = t - floor(t) in [0, 1) by vreduceps (one uop, where vrndscaleps
//       and the subtraction are three),
//   2^f by a degree-4 polynomial, 1 + f (c1 + f (c2 + f (c3 + f c4))),
//       fitted for the least maximum relative error with p(0) = 1 and
//       p(1) = 2 held exact (a row that sees one key gets P = 1 and l = 1
//       exactly, and 2^t is continuous across integers),
//   times 2^floor(t) by vscalefps on t itself (it scales by the floor of
//       its second operand, so the integer part is never formed).
// Error (every f of a 2^-24 grid, the fp32 FMAs as they run): below
// 3.5e-6 relative, mean 4e-8; bf16 rounds P by up to 2^-8 = 3.9e-3, and
// the row sums, which add these fp32 values, carry at most the same
// 3.5e-6 into l and so into the LSE (its bound is 1e-5): the degree-5
// Taylor polynomial this replaces was at 3.3e-6. 7 vector uops per 16
// exps, against 10 before and 15 for exp16_inline (which keeps fp32
// accuracy and clamps for any input): here t <= 0 up to rounding (ref is
// the maximum), so only t < -126 (2^t below FLT_MIN) needs care: flushed
// to exactly 0 (a denormal would cost a microcode assist in each later
// add), as exp16_inline does. t = -inf (a masked score) gives 0 (vreduceps
// of an infinity is 0, scaled by 2^-inf); NaN stays NaN.
#ifndef FA_AMX_EXP2_H
#define FA_AMX_EXP2_H
#include <immintrin.h>

static inline __m512 amx_exp2(__m512 t, __mmask16 keep) {
  const __mmask16 live =
      _mm512_mask_cmp_ps_mask(keep, t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  const __m512 f =
      _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 q = _mm512_set1_ps(0.013555747f);
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.0520323688f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.241379764f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.693032121f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, q, t);
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
