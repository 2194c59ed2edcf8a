// SPDX-License-Identifier: MIT
// FP8 (OCP e4m3, e5m2) decoding for the GPU loaders: a code to the f16 or
// bf16 bits the tensor-core kernels multiply, or to fp32, exactly (every
// FP8 value is an f16 and a bf16 normal number or zero). Integer bit
// arithmetic only: no vendor FP8 type, no table in memory, the same code
// on CUDA, HIP and the host. Outside a GPU compiler the functions are plain
// static inline C, so tests/unit/test_fp8_decode.c checks all 256 codes of
// both formats against the CPU decoder (core/fp8.h).
//
// A loader that reads FP8 rows fetches 2, 4 or 8 codes per load and calls
// the x2 forms per pair (an f16x2 / bf16x2 register), or the branch-free x4
// form (f16, e4m3 times 2^-8) per 32-bit word of codes.
#ifndef FA_GPU_FP8_H
#define FA_GPU_FP8_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIP__)
#define FA_FP8_FN static __host__ __device__ __forceinline__
#else
#define FA_FP8_FN static inline
#endif

/* A nonzero subnormal mantissa m of `mbits` bits, normalised: the shift
   that brings its top bit to the implicit position, so the value
   m * 2^(1 - bias - mbits) becomes 1.(m << sh) * 2^(1 - bias - sh). */
FA_FP8_FN uint32_t fa_fp8_norm_shift(uint32_t m, uint32_t mbits) {
  uint32_t sh = 1;
  while (!((m << sh) & (1u << mbits))) sh++;
  return sh;
}

/* Magnitude bits (no sign) of an e4m3 code's value in a float format with
   `fm` mantissa bits and exponent bias `fbias`; nan_bits for the NaN code. */
FA_FP8_FN uint32_t fa_e4m3_mag(uint32_t c, uint32_t fm, uint32_t fbias,
                               uint32_t nan_bits) {
  uint32_t e = (c >> 3) & 0xfu, m = c & 0x7u;
  if (e == 0xfu && m == 0x7u) return nan_bits;
  if (e == 0) {
    if (m == 0) return 0;
    uint32_t sh = fa_fp8_norm_shift(m, 3);
    return ((fbias - 7u + 1u - sh) << fm) | (((m << sh) & 0x7u) << (fm - 3u));
  }
  return ((e + fbias - 7u) << fm) | (m << (fm - 3u));
}

/* The same for e5m2; inf and NaN codes keep their class. */
FA_FP8_FN uint32_t fa_e5m2_mag(uint32_t c, uint32_t fm, uint32_t fbias,
                               uint32_t inf_bits, uint32_t nan_bits) {
  uint32_t e = (c >> 2) & 0x1fu, m = c & 0x3u;
  if (e == 0x1fu) return m ? nan_bits : inf_bits;
  if (e == 0) {
    if (m == 0) return 0;
    uint32_t sh = fa_fp8_norm_shift(m, 2);
    return ((fbias - 15u + 1u - sh) << fm) | (((m << sh) & 0x3u) << (fm - 2u));
  }
  return ((e + fbias - 15u) << fm) | (m << (fm - 2u));
}

/* f16 bits of one code (e5m2: the code is the f16's upper byte). */
FA_FP8_FN uint16_t fa_gpu_e4m3_to_f16(uint8_t c) {
  return (uint16_t)(((uint32_t)(c & 0x80u) << 8) |
                    fa_e4m3_mag(c, 10, 15, 0x7e00u));
}
FA_FP8_FN uint16_t fa_gpu_e5m2_to_f16(uint8_t c) {
  return (uint16_t)((uint32_t)c << 8);
}

/* bf16 bits of one code. */
FA_FP8_FN uint16_t fa_gpu_e4m3_to_bf16(uint8_t c) {
  return (uint16_t)(((uint32_t)(c & 0x80u) << 8) |
                    fa_e4m3_mag(c, 7, 127, 0x7fc0u));
}
FA_FP8_FN uint16_t fa_gpu_e5m2_to_bf16(uint8_t c) {
  return (uint16_t)(((uint32_t)(c & 0x80u) << 8) |
                    fa_e5m2_mag(c, 7, 127, 0x7f80u, 0x7fc0u));
}

/* fp32 of one code, through its bf16 bits (the upper half of an fp32). */
FA_FP8_FN float fa_gpu_fp8_to_f32(uint8_t c, int e5m2) {
  union {
    uint32_t u;
    float f;
  } x;
  x.u = (uint32_t)(e5m2 ? fa_gpu_e5m2_to_bf16(c) : fa_gpu_e4m3_to_bf16(c))
        << 16;
  return x.f;
}

/* Two codes (the low byte first, as loaded from memory) to an f16x2 or
   bf16x2 register: element 0 in the low half. */
FA_FP8_FN uint32_t fa_gpu_fp8x2_to_f16x2(uint16_t two, int e5m2) {
  uint8_t lo = (uint8_t)(two & 0xffu), hi = (uint8_t)(two >> 8);
  if (e5m2)
    return ((uint32_t)two & 0xffu) << 8 | ((uint32_t)two & 0xff00u) << 16;
  return (uint32_t)fa_gpu_e4m3_to_f16(lo) | (uint32_t)fa_gpu_e4m3_to_f16(hi)
                                                << 16;
}
FA_FP8_FN uint32_t fa_gpu_fp8x2_to_bf16x2(uint16_t two, int e5m2) {
  uint8_t lo = (uint8_t)(two & 0xffu), hi = (uint8_t)(two >> 8);
  return e5m2 ? (uint32_t)fa_gpu_e5m2_to_bf16(lo) |
                    (uint32_t)fa_gpu_e5m2_to_bf16(hi) << 16
              : (uint32_t)fa_gpu_e4m3_to_bf16(lo) |
                    (uint32_t)fa_gpu_e4m3_to_bf16(hi) << 16;
}

/* ---- whole rows: four codes per call, no branch ----------------------------
   For loaders that decode every code of a tile (the sm80 forward's FP8
   rows), where fa_e4m3_mag's subnormal loop and NaN test would cost more
   than the copy. The e4m3 values come out times 2^-8 (FA_GPU_E4M3X4_UNIT):
   the code's 4 exponent and 3 mantissa bits placed under an f16's top
   exponent and mantissa bits read as a number 2^(15 - 7) smaller, for
   normal and subnormal codes alike (e4m3's subnormals become f16
   subnormals, exactly). Only the NaN code (magnitude 0x7f, which would
   read 1.875) needs a fix: its exponent is filled to all ones. The caller
   folds the 2^8 back into a scale. */
#define FA_GPU_E4M3X4_UNIT (1.0f / 256.0f)

/* Two codes in the upper bytes of the halves of y (code 0 in bits 8..15)
   to f16x2: e5m2 as they are, e4m3 times 2^-8 (above). */
FA_FP8_FN uint32_t fa_gpu_fp8_hi2_to_f16x2(uint32_t y, int e5m2) {
  if (e5m2) return y;
  uint32_t f = (y & 0x80008000u) | ((y >> 1) & 0x3f803f80u);
  // Bit 15 of a half of `nan`: its magnitude was 0x7f (no carry leaves the
  // half: the largest magnitude plus one is 0x8000).
  uint32_t nan = (y & 0x7f007f00u) + 0x01000100u;
  return f | ((nan >> 1) & 0x40004000u);
}

/* Four codes (a 32-bit load, byte 0 first) to two f16x2 registers: *lo
   codes 0 and 1, *hi codes 2 and 3, the lower code in the lower half. */
FA_FP8_FN void fa_gpu_fp8x4_to_f16x2(uint32_t w, int e5m2, uint32_t *lo,
                                     uint32_t *hi) {
  *lo = fa_gpu_fp8_hi2_to_f16x2((w & 0xffu) << 8 | (w & 0xff00u) << 16, e5m2);
  *hi = fa_gpu_fp8_hi2_to_f16x2((w >> 8 & 0xff00u) | (w & 0xff000000u), e5m2);
}

#endif
