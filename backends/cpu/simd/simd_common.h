// SPDX-License-Identifier: MIT
// What every vocabulary builds the same way from its primitives; included
// at the end of each simd_<isa>.h.
#ifndef FA_SIMD_COMMON_H
#define FA_SIMD_COMMON_H
#include <stdint.h>
#include <string.h>

#include "dtype.h"

/* n elements of a storage type from src[idx...], widened to fp32. */
static inline void vf_widen_row(float *dst, const void *src, fa_dtype t,
                                int64_t idx, int n) {
  if (t == FA_F32) {
    memcpy(dst, (const float *)src + idx, sizeof(float) * (size_t)n);
    return;
  }
  const uint16_t *s = (const uint16_t *)src + idx;
  const int f16 = t == FA_F16;
  int i = 0;
  for (; i + FA_VW <= n; i += FA_VW) vf_store(dst + i, vf_widen(s + i, f16));
  for (; i < n; i++) dst[i] = f16 ? fa_f16_to_f32(s[i]) : fa_bf16_to_f32(s[i]);
}
#endif
