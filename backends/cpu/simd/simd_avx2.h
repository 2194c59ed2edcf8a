// SPDX-License-Identifier: MIT
// Vocabulary for AVX2 + FMA (+F16C): 8 floats per vector, 16 registers.
#ifndef FA_SIMD_H
#define FA_SIMD_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sleef.h>

#define FA_ISA_NAME "avx2"
#define FA_VW 8
// 6 rows x 2 vectors: 12 accumulators (enough to cover the FMA latency on
// two ports) + 2 B vectors + 1 broadcast = 15 of the 16 registers.
#define FA_MR 6
#define FA_NV 2
#define FA_VREGS 16 // vector registers: what register-resident tiles may hold

typedef __m256 fa_vf;
static inline fa_vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline fa_vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline fa_vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, fa_vf v) { _mm256_storeu_ps(p, v); }
static inline __m256i vf_part_mask(int n) {
  // Lane i is active iff i < n.
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline fa_vf vf_load_part(const float *p, int n) {
  return _mm256_maskload_ps(p, vf_part_mask(n));
}
static inline void vf_store_part(float *p, fa_vf v, int n) {
  _mm256_maskstore_ps(p, vf_part_mask(n), v);
}
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) {
  return _mm256_fmadd_ps(a, b, c);
}
static inline fa_vf vf_add(fa_vf a, fa_vf b) { return _mm256_add_ps(a, b); }
static inline fa_vf vf_sub(fa_vf a, fa_vf b) { return _mm256_sub_ps(a, b); }
static inline fa_vf vf_mul(fa_vf a, fa_vf b) { return _mm256_mul_ps(a, b); }
/* NaN-sticky: NaN if either operand is NaN (maxps alone returns its
   second operand when one is NaN, which would drop a NaN held in a). */
static inline fa_vf vf_max(fa_vf a, fa_vf b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a,
                          _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
/* min(a, 0), NaN kept (minps returns its second operand on NaN). */
static inline fa_vf vf_min0(fa_vf a) {
  return _mm256_min_ps(_mm256_setzero_ps(), a);
}
#ifdef FA_INLINE_EXP
#include "exp_avx2.h"
static inline fa_vf vf_exp(fa_vf a) { return exp8_inline(a); }
#else
static inline fa_vf vf_exp(fa_vf a) { return Sleef_expf8_u10avx2(a); }
#endif
static inline fa_vf vf_neginf_to_zero(fa_vf a) {
  fa_vf is_ninf = _mm256_cmp_ps(a, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm256_andnot_ps(is_ninf, a);
}

#include "dtype.h"
/* FA_VW 16-bit values (f16 if f16, else bf16) widened to fp32: F16C for
   f16, a 16-bit shift for bf16. */
static inline fa_vf vf_widen(const uint16_t *p, int f16) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  return f16 ? _mm256_cvtph_ps(h)
             : _mm256_castsi256_ps(
                   _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* FA_VW FP8 codes decoded and multiplied by x, through binary16 (F16C):
   an e5m2 code is the upper byte of its f16; an e4m3 code placed 7 bits up
   (sign at 15) is an f16 of 2^-8 times its value, subnormals included, so
   for e4m3 x must be 256 times the wanted factor (fa_fp8_unit). One fp32
   product: bit-identical to decoding, then multiplying by the factor.
   e4m3's NaN codes would read as 480 x: they are set apart. */
static inline fa_vf vf_fp8_scaled(const uint8_t *p, int e5m2, fa_vf x) {
  __m128i b = _mm_loadl_epi64((const __m128i *)p);
  if (e5m2)
    return _mm256_mul_ps(
        _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 8)), x);
  // Sign-extended, 7 bits up: bit 15 is the sign, bit 14 (a copy of it)
  // is cleared, bits 7..13 are the magnitude.
  __m128i w = _mm_cvtepi8_epi16(b);
  __m128i h =
      _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16((short)0xbf80));
  fa_vf f = _mm256_mul_ps(_mm256_cvtph_ps(h), x);
  __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7f)),
                                _mm_set1_epi16(0x7f));
  return _mm256_blendv_ps(f, _mm256_set1_ps(NAN),
                          _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)));
}
static inline float vf_hsum(fa_vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* e4m3 codes decoded and multiplied by x (256 times the factor), NaN codes
   not set apart (they read as 480 x / 256): for rows known to hold none
   (vf_e4m3_any_nan). */
static inline fa_vf vf_e4m3_scaled_raw(const uint8_t *p, fa_vf x) {
  __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p));
  __m128i h =
      _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16((short)0xbf80));
  return _mm256_mul_ps(_mm256_cvtph_ps(h), x);
}
/* 1 if some of the n (a multiple of FA_VW) e4m3 codes at p is NaN. */
static inline int vf_e4m3_any_nan(const uint8_t *p, int n) {
  const __m256i lo7 = _mm256_set1_epi8(0x7f);
  __m256i any = _mm256_setzero_si256();
  int i = 0;
  for (; i + 32 <= n; i += 32)
    any = _mm256_or_si256(
        any,
        _mm256_cmpeq_epi8(
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), lo7),
            lo7));
  int hit = !_mm256_testz_si256(any, any);
  for (; i < n; i++) hit |= (p[i] & 0x7f) == 0x7f;
  return hit;
}

/* The four sums of a[0..3] at once (pairwise adds, then the halves). */
static inline void vf_hsum4(const fa_vf *a, float *out) {
  __m256 s =
      _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  _mm_storeu_ps(
      out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

#include "simd_common.h"
#endif
