// SPDX-License-Identifier: MIT
// Scalar conversions between storage types and fp32. Portable C11 bit
// manipulation (no _Float16), round-to-nearest-even on the way down, so that
// every backend and the tests agree on the exact bits of a conversion.
#ifndef FA_CORE_DTYPE_H
#define FA_CORE_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "flashattn.h"
#include "fp8.h"

static inline uint32_t fa_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float fa_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float fa_bf16_to_f32(uint16_t h) {
  return fa_bits_f32((uint32_t)h << 16);
}

static inline uint16_t fa_f32_to_bf16(float f) {
  uint32_t u = fa_f32_bits(f);
  // NaN: the canonical quiet NaN with its sign, as fa_f32_to_f16 does (a
  // kept payload could equal a test's "never written" poison pattern).
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float fa_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return fa_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    // Subnormal (or zero): value = man * 2^-24, exact in fp32.
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return fa_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fa_f32_to_f16(float f) {
  uint32_t u = fa_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN stays NaN
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // rounds to inf
  if (a < 0x38800000u) {
    // Result is subnormal or zero: round a * 2^24 to an integer (RNE).
    if (a < 0x33000000u) return sign; // below half the smallest subnormal
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; // 14 ..< 24 + 1
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u); // RNE on the 13 dropped bits
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline int fa_dtype_valid(fa_dtype t) {
  return t == FA_F32 || t == FA_F16 || t == FA_BF16 || fa_dtype_is_fp8(t);
}

static inline size_t fa_dtype_size(fa_dtype t) {
  return t == FA_F32 ? 4 : fa_dtype_is_fp8(t) ? 1 : 2;
}

static inline const char *fa_dtype_name(fa_dtype t) {
  return t == FA_F32    ? "f32"
         : t == FA_F16  ? "f16"
         : t == FA_BF16 ? "bf16"
         : t == FA_E4M3 ? "e4m3"
         : t == FA_E5M2 ? "e5m2"
                        : "?";
}

/* An FP8 code decoded and multiplied by a factor x in one fp32 product,
   the route the vector decoders take (backends/cpu/simd): e5m2 is the upper
   byte of an f16; e4m3 placed 7 bits up is an f16 of 2^-8 times its value,
   so for e4m3 x carries a factor 256. Bit-identical to decoding and then
   multiplying by x (or x / 256), where x is finite. */
static inline float fa_fp8_scaled_f32(uint8_t c, int e5m2, float x) {
  if (e5m2) return fa_f16_to_f32((uint16_t)((unsigned)c << 8)) * x;
  if ((c & 0x7fu) == 0x7fu) return fa_bits_f32(0x7fc00000u);
  return fa_f16_to_f32((uint16_t)(((c & 0x80u) << 8) | ((c & 0x7fu) << 7))) * x;
}

/* Element idx of a buffer of type t, widened to fp32. Through memcpy (a
   plain load once compiled): the API asks no alignment of data, and an
   fp32 view may start 2 bytes into a buffer, where a float * load is
   undefined. */
static inline float fa_load(const void *base, fa_dtype t, int64_t idx) {
  const unsigned char *p = (const unsigned char *)base;
  if (t == FA_F32) {
    float x;
    memcpy(&x, p + idx * 4, 4);
    return x;
  }
  if (fa_dtype_is_fp8(t)) return fa_fp8_to_f32(p[idx], t);
  uint16_t h;
  memcpy(&h, p + idx * 2, 2);
  return t == FA_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

static inline void fa_store(void *base, fa_dtype t, int64_t idx, float x) {
  unsigned char *p = (unsigned char *)base;
  if (t == FA_F32) {
    memcpy(p + idx * 4, &x, 4);
  } else if (fa_dtype_is_fp8(t)) { // test data only: outputs are not FP8
    p[idx] = t == FA_E4M3 ? fa_f32_to_e4m3(x) : fa_f32_to_e5m2(x);
  } else {
    uint16_t h = t == FA_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
    memcpy(p + idx * 2, &h, 2);
  }
}

/* n contiguous elements starting at idx, widened to fp32 into dst. */
static inline void fa_load_row(float *dst, const void *base, fa_dtype t,
                               int64_t idx, int n) {
  if (t == FA_F32) {
    memcpy(dst, (const float *)base + idx, (size_t)n * 4);
  } else if (fa_dtype_is_fp8(t)) {
    const uint8_t *s = (const uint8_t *)base + idx;
    for (int i = 0; i < n; i++) dst[i] = fa_fp8_to_f32(s[i], t);
  } else if (t == FA_BF16) {
    const uint16_t *s = (const uint16_t *)base + idx;
    for (int i = 0; i < n; i++) dst[i] = fa_bf16_to_f32(s[i]);
  } else {
    const uint16_t *s = (const uint16_t *)base + idx;
    for (int i = 0; i < n; i++) dst[i] = fa_f16_to_f32(s[i]);
  }
}

static inline void fa_store_row(void *base, fa_dtype t, int64_t idx,
                                const float *src, int n) {
  if (t == FA_F32) {
    memcpy((float *)base + idx, src, (size_t)n * 4);
  } else {
    uint16_t *d = (uint16_t *)base + idx;
    if (t == FA_BF16)
      for (int i = 0; i < n; i++) d[i] = fa_f32_to_bf16(src[i]);
    else
      for (int i = 0; i < n; i++) d[i] = fa_f32_to_f16(src[i]);
  }
}

#endif
