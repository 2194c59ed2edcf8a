// SPDX-License-Identifier: MIT
// The two OCP 8-bit floating-point formats (OCP "8-bit Floating Point
// Specification (OFP8)" 1.0), scalar: exact decoding to fp32 and the
// rounding encoder the tests and benchmarks make their data with. Every
// FP8 value is exact in fp32 (and in f16 and bf16), so decoding never
// rounds. Written from the format definitions with fp32 bit arithmetic
// only: no table, no FPU state (a denormals-are-zero mode cannot change a
// decoded subnormal). The vector decoders (backends/cpu/simd/*) and the GPU
// one (backends/gpu/fp8.h) are tested against these for all 256 codes.
//
//        sign exp man  bias  subnormal step  max finite  inf        NaN
//   e4m3   1   4   3    7    2^-9            448         none       S.1111.111
//   e5m2   1   5   2   15    2^-16           57344       S.11111.00 S.11111.xx
#ifndef FA_CORE_FP8_H
#define FA_CORE_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashattn.h"

static inline int fa_dtype_is_fp8(fa_dtype t) {
  return t == FA_E4M3 || t == FA_E5M2;
}

static inline float fa_fp8_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float fa_e4m3_to_f32(uint8_t c) {
  const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xfu, m = c & 0x7u;
  if (e == 0xf && m == 0x7) return fa_fp8_bits_f32(sign | 0x7fc00000u);
  if (e == 0) { // zero or subnormal: m * 2^-9, exact
    float v = (float)m * 0.001953125f;
    return sign ? -v : v;
  }
  return fa_fp8_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

static inline float fa_e5m2_to_f32(uint8_t c) {
  const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  const uint32_t e = (c >> 2) & 0x1fu, m = c & 0x3u;
  if (e == 0x1f) // inf (m = 0) or NaN
    return fa_fp8_bits_f32(sign | 0x7f800000u | (m ? 0x400000u : 0u));
  if (e == 0) { // zero or subnormal: m * 2^-16, exact
    float v = (float)m * 1.52587890625e-5f;
    return sign ? -v : v;
  }
  return fa_fp8_bits_f32(sign | ((e + 112u) << 23) | (m << 21));
}

/* The bf16 bits of FP8 magnitude m (a code without its sign bit, which is
   bf16's bit 15): exact, every FP8 value having at most 3 significant bits
   and an exponent within bf16's, subnormals included (as bf16 normals).
   NaN codes give 0x7fc0, e5m2's infinity 0x7f80. Constant expressions, for
   the lookup tables of backends/cpu/cpu_rows_fp8_dp.h; tested against the
   format definitions for all 256 codes (tests/unit/test_fp8_decode.c). */
#define FA_E4M3_BF16_BITS(m)                                                   \
  ((m) == 127 ? 0x7fc0                                                         \
   : (m) >= 8 ? ((((m) >> 3) + 120) << 7) | (((m)&7) << 4)                     \
   : (m) == 0 ? 0                                                              \
   : (m) == 1 ? 118 << 7                                                       \
   : (m) < 4  ? (119 << 7) | (((m)&1) << 6)                                    \
              : (120 << 7) | (((m)&3) << 5))
#define FA_E5M2_BF16_BITS(m)                                                   \
  ((m) == 124  ? 0x7f80                                                        \
   : (m) > 124 ? 0x7fc0                                                        \
   : (m) >= 4  ? ((((m) >> 2) + 112) << 7) | (((m)&3) << 5)                    \
   : (m) == 0  ? 0                                                             \
   : (m) == 1  ? 111 << 7                                                      \
   : (m) == 2  ? 112 << 7                                                      \
               : (112 << 7) | (1 << 6))

static inline float fa_fp8_to_f32(uint8_t c, fa_dtype t) {
  return t == FA_E4M3 ? fa_e4m3_to_f32(c) : fa_e5m2_to_f32(c);
}

/* x rounded to nearest even in a format with mbits mantissa bits, smallest
   normal exponent emin and largest finite magnitude code max_mag,
   saturating: finite values beyond the largest finite one, and infinities
   where the format has none (inf_mag 0), become +-max; NaN becomes the
   format's NaN with x's sign. */
static inline uint8_t fa_fp8_encode(float x, int mbits, int emin,
                                    uint32_t max_mag, uint32_t inf_mag,
                                    uint32_t nan_mag) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | nan_mag);
  if (a == 0x7f800000u) return (uint8_t)(sign | (inf_mag ? inf_mag : max_mag));
  float f = fabsf(x);
  uint32_t mag;
  if (f < ldexpf(1.0f, emin)) {
    // Multiples of the subnormal step; 2^mbits steps is the smallest normal,
    // whose code is exactly that count.
    mag = (uint32_t)nearbyintf(ldexpf(f, mbits - emin));
  } else {
    const uint32_t sh = 23u - (uint32_t)mbits, bias_diff = 127u - (1u - emin);
    uint32_t r = (a + ((1u << (sh - 1u)) - 1u) + ((a >> sh) & 1u)) >> sh;
    mag = r - (bias_diff << mbits);
    if (r > max_mag + (bias_diff << mbits)) mag = max_mag;
  }
  if (mag > max_mag) mag = max_mag;
  return (uint8_t)(sign | mag);
}

static inline uint8_t fa_f32_to_e4m3(float x) {
  return fa_fp8_encode(x, 3, -6, 0x7eu, 0u, 0x7fu);
}

static inline uint8_t fa_f32_to_e5m2(float x) {
  return fa_fp8_encode(x, 2, -14, 0x7bu, 0x7cu, 0x7eu);
}

#endif
