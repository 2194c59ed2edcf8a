// SPDX-License-Identifier: MIT
// Vocabulary for the portable build: a "vector" is one float. The kernel
// body compiled against it is plain C11 (the compiler may still vectorise
// its independent loops for the baseline ISA).
#ifndef FA_SIMD_H
#define FA_SIMD_H
#include <math.h>
#include <stdint.h>

#define FA_ISA_NAME "scalar"
#define FA_VW 1     // floats per vector
#define FA_MR 4     // rows of the GEMM micro-tile
#define FA_NV 4     // vectors across the GEMM micro-tile
#define FA_VREGS 16 // vector registers: what register-resident tiles may hold

typedef float fa_vf;
static inline fa_vf vf_zero(void) { return 0.0f; }
static inline fa_vf vf_set1(float x) { return x; }
static inline fa_vf vf_load(const float *p) { return *p; }
static inline void vf_store(float *p, fa_vf v) { *p = v; }
static inline fa_vf vf_load_part(const float *p, int n) {
  return n ? *p : 0.0f;
}
static inline void vf_store_part(float *p, fa_vf v, int n) {
  if (n) *p = v;
}
static inline fa_vf vf_fma(fa_vf a, fa_vf b, fa_vf c) { return a * b + c; }
static inline fa_vf vf_add(fa_vf a, fa_vf b) { return a + b; }
static inline fa_vf vf_sub(fa_vf a, fa_vf b) { return a - b; }
static inline fa_vf vf_mul(fa_vf a, fa_vf b) { return a * b; }
/* NaN-sticky: NaN if either operand is NaN (a row max must never skip a
   NaN score), as in core/softmax.h. */
static inline fa_vf vf_max(fa_vf a, fa_vf b) {
  return (a > b || a != a) ? a : b;
}
/* min(a, 0), NaN kept. */
static inline fa_vf vf_min0(fa_vf a) { return a > 0.0f ? 0.0f : a; }
static inline fa_vf vf_exp(fa_vf a) { return expf(a); }
/* -inf lanes become 0: the reference point of a row that has seen no key. */
static inline fa_vf vf_neginf_to_zero(fa_vf a) {
  return a == -INFINITY ? 0.0f : a;
}

/* n elements of a storage type, widened to fp32. */
#include "dtype.h"
/* FA_VW 16-bit values (f16 if f16, else bf16) widened to fp32. */
static inline fa_vf vf_widen(const uint16_t *p, int f16) {
  return f16 ? fa_f16_to_f32(*p) : fa_bf16_to_f32(*p);
}
/* FA_VW FP8 codes decoded and multiplied by x (for e4m3: 256 times the
   factor): the vector ISAs' binary16 route, in C. */
static inline fa_vf vf_fp8_scaled(const uint8_t *p, int e5m2, fa_vf x) {
  return fa_fp8_scaled_f32(*p, e5m2, x);
}
static inline float vf_hsum(fa_vf v) { return v; }
/* e4m3 decoded times x (256 times the factor); NaN codes not set apart. */
static inline fa_vf vf_e4m3_scaled_raw(const uint8_t *p, fa_vf x) {
  const unsigned c = *p;
  return fa_f16_to_f32((uint16_t)(((c & 0x80u) << 8) | ((c & 0x7fu) << 7))) * x;
}
static inline int vf_e4m3_any_nan(const uint8_t *p, int n) {
  int hit = 0;
  for (int i = 0; i < n; i++) hit |= (p[i] & 0x7f) == 0x7f;
  return hit;
}
static inline void vf_hsum4(const fa_vf *a, float *out) {
  for (int i = 0; i < 4; i++) out[i] = a[i];
}

#include "simd_common.h"
#endif
