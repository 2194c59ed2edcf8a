// SPDX-License-Identifier: MIT
// Vocabulary for AVX-512 F/BW/VL/DQ: 16 floats per vector, 32 registers.
#ifndef FA_SIMD_H
#define FA_SIMD_H
#include <immintrin.h>
#include <math.h>
#include <sleef.h>

#define FA_ISA_NAME "avx512"
#define FA_VW 16
#define FA_MR 4 // 4 rows x 4 vectors = 16 accumulators, 8 loads per 16 FMAs
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
static inline fa_vf vf_max(fa_vf a, fa_vf b) { return _mm512_max_ps(a, b); }
static inline fa_vf vf_exp(fa_vf a) { return Sleef_expf16_u10avx512f(a); }
static inline fa_vf vf_neginf_to_zero(fa_vf a) {
  __mmask16 k = _mm512_cmp_ps_mask(a, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_mov_ps(a, k, _mm512_setzero_ps());
}
#endif
