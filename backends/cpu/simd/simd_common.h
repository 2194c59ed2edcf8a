// SPDX-License-Identifier: MIT
// What every vocabulary builds the same way from its primitives; included
// at the end of each simd_<isa>.h.
#ifndef FA_SIMD_COMMON_H
#define FA_SIMD_COMMON_H
#include <stdint.h>
#include <string.h>

#include "dtype.h"

/* What vf_fp8_scaled's factor carries besides the descale: e4m3 codes
   decode through an f16 of 2^-8 times their value. */
static inline float fa_fp8_unit(int e5m2) { return e5m2 ? 1.0f : 256.0f; }

/* n elements of a storage type from src[idx...], widened to fp32. */
static inline void vf_widen_row(float *dst, const void *src, fa_dtype t,
                                int64_t idx, int n) {
  if (t == FA_F32) {
    memcpy(dst, (const float *)src + idx, sizeof(float) * (size_t)n);
    return;
  }
  if (fa_dtype_is_fp8(t)) {
    const uint8_t *s = (const uint8_t *)src + idx;
    const int e5m2 = t == FA_E5M2;
    const fa_vf unit = vf_set1(fa_fp8_unit(e5m2));
    int i = 0;
    for (; i + FA_VW <= n; i += FA_VW)
      vf_store(dst + i, vf_fp8_scaled(s + i, e5m2, unit));
    for (; i < n; i++) dst[i] = fa_fp8_to_f32(s[i], t);
    return;
  }
  const uint16_t *s = (const uint16_t *)src + idx;
  const int f16 = t == FA_F16;
  int i = 0;
  for (; i + FA_VW <= n; i += FA_VW) vf_store(dst + i, vf_widen(s + i, f16));
  for (; i < n; i++) dst[i] = f16 ? fa_f16_to_f32(s[i]) : fa_bf16_to_f32(s[i]);
}
#endif
