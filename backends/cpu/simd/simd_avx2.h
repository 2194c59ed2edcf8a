// SPDX-License-Identifier: MIT
// Vocabulary for AVX2 + FMA (+F16C): 8 floats per vector, 16 registers.
#ifndef FA_SIMD_H
#define FA_SIMD_H
#include <immintrin.h>
#include <math.h>
#include <sleef.h>

#define FA_ISA_NAME "avx2"
#define FA_VW 8
#define FA_MR 4 // 4 rows x 2 vectors = 8 accumulators + 2 B + 1 broadcast
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
static inline fa_vf vf_max(fa_vf a, fa_vf b) { return _mm256_max_ps(a, b); }
static inline fa_vf vf_exp(fa_vf a) { return Sleef_expf8_u10avx2(a); }
static inline fa_vf vf_neginf_to_zero(fa_vf a) {
  fa_vf is_ninf = _mm256_cmp_ps(a, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm256_andnot_ps(is_ninf, a);
}
#endif
