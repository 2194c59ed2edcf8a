// SPDX-License-Identifier: MIT
// Vocabulary for AArch64 Advanced SIMD (NEON): 4 floats, 32 registers.
#ifndef FA_SIMD_H
#define FA_SIMD_H
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sleef.h>

#define FA_ISA_NAME "neon"
#define FA_VW 4
#define FA_MR 4 // 4 rows x 4 vectors = 16 accumulators of 32 registers
#define FA_NV 4

typedef float32x4_t fa_vf;
static inline fa_vf vf_zero(void) { return vdupq_n_f32(0.0f); }
static inline fa_vf vf_set1(float x) { return vdupq_n_f32(x); }
static inline fa_vf vf_load(const float *p) { return vld1q_f32(p); }
static inline void vf_store(float *p, fa_vf v) { vst1q_f32(p, v); }
static inline fa_vf vf_load_part(const float *p, int n) {
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < n; i++) t[i] = p[i];
  return vld1q_f32(t);
}
static inline void vf_store_part(float *p, fa_vf v, int n) {
  float t[4];
  vst1q_f32(t, v);
  for (int i = 0; i < n; i++) p[i] = t[i];
}
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) { return vfmaq_f32(c, a, b); }
static inline fa_vf vf_add(fa_vf a, fa_vf b) { return vaddq_f32(a, b); }
static inline fa_vf vf_sub(fa_vf a, fa_vf b) { return vsubq_f32(a, b); }
static inline fa_vf vf_mul(fa_vf a, fa_vf b) { return vmulq_f32(a, b); }
/* NaN-sticky: FMAX gives NaN if either operand is NaN (unlike FMAXNM). */
static inline fa_vf vf_max(fa_vf a, fa_vf b) { return vmaxq_f32(a, b); }
/* min(a, 0), NaN kept (FMIN propagates NaN). */
static inline fa_vf vf_min0(fa_vf a) { return vminq_f32(a, vdupq_n_f32(0.0f)); }
static inline fa_vf vf_exp(fa_vf a) { return Sleef_expf4_u10advsimd(a); }
static inline fa_vf vf_neginf_to_zero(fa_vf a) {
  uint32x4_t ninf = vceqq_f32(a, vdupq_n_f32(-INFINITY));
  return vbslq_f32(ninf, vdupq_n_f32(0.0f), a);
}

#include "dtype.h"
/* FA_VW 16-bit values (f16 if f16, else bf16) widened to fp32. */
static inline fa_vf vf_widen(const uint16_t *p, int f16) {
  uint16x4_t h = vld1_u16(p);
  return f16 ? vcvt_f32_f16(vreinterpret_f16_u16(h))
             : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
static inline float vf_hsum(fa_vf v) { return vaddvq_f32(v); }

#include "simd_common.h"
#endif
