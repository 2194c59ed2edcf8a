// SPDX-License-Identifier: MIT
// exp(x) for 16 floats, inlined: a translation unit whose softmax is next to
// tile products far faster than the vector units (AMX) spends most of its
// time in exp, and SLEEF's out-of-line call per 16 values (with its wide
// range handling) is several times the cost of this one. Defines
// exp16_inline; the vocabulary uses it when FA_INLINE_EXP is defined.
//
// x = n ln2 + r, |r| <= ln2 / 2 (n = round(x log2 e), ln2 in two parts so r
// is exact), e^r by its Taylor polynomial of degree 6 (truncation below
// 1.2e-7 relative, with the roundings within 3 ulp: test_exp_inline.c),
// then times 2^n by vscalefps, which overflows to inf as exp does. x is clamped
// to [-104, 88.8] first (exp is 0 or inf beyond), NaN kept: maxps and minps
// return their second operand when one is NaN, and x is the second. Results
// below FLT_MIN (x < -87.33, -inf included: every masked score) are flushed to
// exactly 0: a denormal would cost a microcode assist in each later add of it
// (the masked half of a causal diagonal tile ran several times slower).
#ifndef FA_EXP_AVX512_H
#define FA_EXP_AVX512_H
#include <immintrin.h>

static inline __m512 exp16_inline(__m512 x) {
  const __mmask16 normal =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_NLT_UQ); // or NaN
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(88.8f), x);
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}
#endif
