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
#define FA_MR 6 // 6 rows x 4 vectors = 24 accumulators + 4 B + 1 broadcast of 32
#define FA_NV 4

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
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) { return _mm512_fmadd_ps(a, b, c); }
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
static inline fa_vf vf_min0(fa_vf a) { return _mm512_min_ps(_mm512_setzero_ps(), a); }
#ifdef FA_INLINE_EXP
#include "exp_avx512.h"
static inline fa_vf vf_exp(fa_vf a) { return vf_exp_inline(a); }
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
             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline float vf_hsum(fa_vf v) { return _mm512_reduce_add_ps(v); }

#include "simd_common.h"
#endif
