// SPDX-License-Identifier: MIT
// exp(x) for 8 floats, inlined: exp_avx512.h's polynomial for AVX2, which
// has no vscalefps, so 2^n is built in the exponent bits as two factors
// 2^(n >> 1) and 2^(n - (n >> 1)), each a normal float over the clamped
// range, so that overflow still rounds to inf as exp does (within 3 ulp:
// tests/unit/test_exp_inline.c). Defines exp8_inline; the vocabulary uses
// it when FA_INLINE_EXP is defined (isa_avx2.c: on a Zen 3, where AVX2 is
// the best ISA, 3.5-4.5% faster forward than SLEEF's out-of-line expf8;
// bench/NOTES.md, 2026-12-03. On a Xeon with AVX-512, whose dispatch never
// picks cpu.avx2, it measured 2-3% slower: 2026-12-02).
#ifndef FA_EXP_AVX2_H
#define FA_EXP_AVX2_H
#include <immintrin.h>

static inline __m256 exp8_inline(__m256 x) {
  // x >= -87.33 or NaN: anything below is flushed to exactly 0.
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_NLT_UQ);
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(88.8f), x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 f1 = _mm256_castsi256_ps(
                   _mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)),
               f2 = _mm256_castsi256_ps(
                   _mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_and_ps(normal, _mm256_mul_ps(_mm256_mul_ps(p, f1), f2));
}
#endif
