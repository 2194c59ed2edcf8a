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
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) { return _mm256_fmadd_ps(a, b, c); }
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
static inline fa_vf vf_min0(fa_vf a) { return _mm256_min_ps(_mm256_setzero_ps(), a); }
static inline fa_vf vf_exp(fa_vf a) { return Sleef_expf8_u10avx2(a); }
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
             : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline float vf_hsum(fa_vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#include "simd_common.h"
#endif
