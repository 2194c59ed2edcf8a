// SPDX-License-Identifier: MIT
// Vocabulary for AVX-512 F/BW/VL/DQ: 16 floats per vector, 32 registers.
#ifndef FA_SIMD_H
#define FA_SIMD_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sleef.h>

#define FA_ISA_NAME "avx512"
#define FA_VW 16
#define FA_MR                                                                  \
  6 // 6 rows x 4 vectors = 24 accumulators + 4 B + 1 broadcast of 32
#define FA_NV 4
#define FA_VREGS 32 // vector registers: what register-resident tiles may hold

typedef __m512 fa_vf;
static inline fa_vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline fa_vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline fa_vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, fa_vf v) { _mm512_storeu_ps(p, v); }
static inline fa_vf vf_load_part(const float *p, int n) {
  return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}
static inline void vf_store_part(float *p, fa_vf v, int n) {
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) {
  return _mm512_fmadd_ps(a, b, c);
}
static inline fa_vf vf_add(fa_vf a, fa_vf b) { return _mm512_add_ps(a, b); }
static inline fa_vf vf_sub(fa_vf a, fa_vf b) { return _mm512_sub_ps(a, b); }
static inline fa_vf vf_mul(fa_vf a, fa_vf b) { return _mm512_mul_ps(a, b); }
/* NaN-sticky: NaN if either operand is NaN (maxps alone returns its
   second operand when one is NaN, which would drop a NaN held in a). */
static inline fa_vf vf_max(fa_vf a, fa_vf b) {
  return _mm512_mask_mov_ps(_mm512_max_ps(a, b),
                            _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
/* min(a, 0), NaN kept (minps returns its second operand on NaN). */
static inline fa_vf vf_min0(fa_vf a) {
  return _mm512_min_ps(_mm512_setzero_ps(), a);
}
#ifdef FA_INLINE_EXP
#include "exp_avx512.h"
static inline fa_vf vf_exp(fa_vf a) { return exp16_inline(a); }
#else
static inline fa_vf vf_exp(fa_vf a) { return Sleef_expf16_u10avx512f(a); }
#endif
static inline fa_vf vf_neginf_to_zero(fa_vf a) {
  __mmask16 k = _mm512_cmp_ps_mask(a, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_mov_ps(a, k, _mm512_setzero_ps());
}

#include "dtype.h"
/* FA_VW 16-bit values (f16 if f16, else bf16) widened to fp32. */
static inline fa_vf vf_widen(const uint16_t *p, int f16) {
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  return f16 ? _mm512_cvtph_ps(h)
             : _mm512_castsi512_ps(
                   _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* FA_VW FP8 codes decoded and multiplied by x (for e4m3: 256 times the
   factor), through binary16, as in simd_avx2.h. */
static inline fa_vf vf_fp8_scaled(const uint8_t *p, int e5m2, fa_vf x) {
  __m128i b = _mm_loadu_si128((const __m128i *)p);
  if (e5m2)
    return _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8)), x);
  __m256i w = _mm256_cvtepi8_epi16(b); // sign in bits 7..15
  __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, 7),
                               _mm256_set1_epi16((short)0xbf80));
  fa_vf f = _mm512_mul_ps(_mm512_cvtph_ps(h), x);
  __mmask16 nan = _mm256_cmpeq_epi16_mask(
      _mm256_and_si256(w, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
  return _mm512_mask_mov_ps(f, nan, _mm512_set1_ps(NAN));
}
static inline float vf_hsum(fa_vf v) { return _mm512_reduce_add_ps(v); }
/* e4m3 codes decoded and multiplied by x (256 times the factor), NaN codes
   not set apart (they read as 480 x / 256): for rows known to hold none
   (vf_e4m3_any_nan). */
static inline fa_vf vf_e4m3_scaled_raw(const uint8_t *p, fa_vf x) {
  __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
  __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, 7),
                               _mm256_set1_epi16((short)0xbf80));
  return _mm512_mul_ps(_mm512_cvtph_ps(h), x);
}
/* 1 if some of the n (a multiple of FA_VW) e4m3 codes at p is NaN. */
static inline int vf_e4m3_any_nan(const uint8_t *p, int n) {
  const __m512i lo7 = _mm512_set1_epi8(0x7f);
  __mmask64 any = 0;
  int i = 0;
  for (; i + 64 <= n; i += 64)
    any |= _mm512_cmpeq_epi8_mask(
        _mm512_and_si512(_mm512_loadu_si512((const void *)(p + i)), lo7), lo7);
  if (i < n) {
    __mmask64 part = ((__mmask64)1 << (n - i)) - 1;
    any |= _mm512_mask_cmpeq_epi8_mask(
        part, _mm512_and_si512(_mm512_maskz_loadu_epi8(part, p + i), lo7), lo7);
  }
  return any != 0;
}
/* The four sums of a[0..3] at once (halves added, then pairwise adds). */
static inline void vf_hsum4(const fa_vf *a, float *out) {
  __m256 h[4];
  for (int i = 0; i < 4; i++)
    h[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]),
                         _mm512_extractf32x8_ps(a[i], 1));
  __m256 s =
      _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
  _mm_storeu_ps(
      out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

#include "simd_common.h"
#endif
