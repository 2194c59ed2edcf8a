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
#define FA_VREGS 32 // vector registers: what register-resident tiles may hold

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
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) {
  return vfmaq_f32(c, a, b);
}
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
/* FA_VW FP8 codes decoded and multiplied by x (for e4m3: 256 times the
   factor), through binary16, as in simd_avx2.h. */
static inline fa_vf vf_fp8_scaled(const uint8_t *p, int e5m2, fa_vf x) {
  uint32_t four;
  memcpy(&four, p, 4);
  int16x4_t w = vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(four))));
  if (e5m2)
    return vmulq_f32(vcvt_f32_f16(vreinterpret_f16_s16(vshl_n_s16(w, 8))), x);
  uint16x4_t h =
      vand_u16(vreinterpret_u16_s16(vshl_n_s16(w, 7)), vdup_n_u16(0xbf80));
  fa_vf f = vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(h)), x);
  // Sign extension widens each all-ones 16-bit lane to 32 bits.
  uint16x4_t nan16 = vceq_u16(
      vand_u16(vreinterpret_u16_s16(w), vdup_n_u16(0x7f)), vdup_n_u16(0x7f));
  uint32x4_t nan =
      vreinterpretq_u32_s32(vmovl_s16(vreinterpret_s16_u16(nan16)));
  return vbslq_f32(nan, vdupq_n_f32(NAN), f);
}
static inline float vf_hsum(fa_vf v) { return vaddvq_f32(v); }
/* e4m3 codes decoded and multiplied by x (256 times the factor), NaN codes
   not set apart (they read as 480 x / 256): for rows known to hold none
   (vf_e4m3_any_nan). */
static inline fa_vf vf_e4m3_scaled_raw(const uint8_t *p, fa_vf x) {
  uint32_t four;
  memcpy(&four, p, 4);
  int16x4_t w = vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(four))));
  uint16x4_t h =
      vand_u16(vreinterpret_u16_s16(vshl_n_s16(w, 7)), vdup_n_u16(0xbf80));
  return vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(h)), x);
}
/* 1 if some of the n (a multiple of FA_VW) e4m3 codes at p is NaN. */
static inline int vf_e4m3_any_nan(const uint8_t *p, int n) {
  const uint8x16_t lo7 = vdupq_n_u8(0x7f);
  uint8x16_t any = vdupq_n_u8(0);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    any = vorrq_u8(any, vceqq_u8(vandq_u8(vld1q_u8(p + i), lo7), lo7));
  int hit = vmaxvq_u8(any) != 0;
  for (; i < n; i++) hit |= (p[i] & 0x7f) == 0x7f;
  return hit;
}
/* The four sums of a[0..3] at once (pairwise adds). */
static inline void vf_hsum4(const fa_vf *a, float *out) {
  vst1q_f32(out, vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3])));
}

#include "simd_common.h"
#endif
