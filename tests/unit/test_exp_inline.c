// SPDX-License-Identifier: MIT
// The CPU kernels' inlined exp (backends/cpu/simd/exp_avx2.h and
// exp_avx512.h, the softmax's exp in cpu.avx2, cpu.avx512, cpu.avx512bf16
// and cpu.amxbf16) against exp in double: within 3 ulp of the nearest
// float wherever the result is normal (the Taylor polynomial's truncation,
// 1.2e-7 relative, plus Horner's roundings: 2.7 ulp measured where a
// binade's ulp is finest; SLEEF's u10 is 1 ulp, and the softmax's sums
// carry far more error than either), exactly 0 below FLT_MIN
// (x < -87.33, -inf included: every masked score), inf past FLT_MAX, NaN
// kept, and exp(0) exactly 1 (P = 1 for a row's maximum). Built twice,
// with each header's flags: FA_EXP_W 8 (test_exp_avx2) or 16
// (test_exp_avx512); exits 77 (skipped) on a CPU without that ISA.
#include "check.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if FA_EXP_W == 16
#include "simd/exp_avx512.h"
#define ISA_NAME "exp_avx512.h"
#define HAS_ISA                                                                \
  (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
static void expw(const float *in, float *out) {
  _mm512_storeu_ps(out, exp16_inline(_mm512_loadu_ps(in)));
}
#else
#include "simd/exp_avx2.h"
#define ISA_NAME "exp_avx2.h"
#define HAS_ISA                                                                \
  (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
static void expw(const float *in, float *out) {
  _mm256_storeu_ps(out, exp8_inline(_mm256_loadu_ps(in)));
}
#endif

/* The error of out = exp(in) in ulps of the float nearest exp(in). */
static double ulps(float in, float out) {
  const double e = exp((double)in);
  const float ef = (float)e;
  const double ulp = nextafterf(ef, INFINITY) - ef;
  return fabs((double)out - e) / ulp;
}

/* The header's exp against the bounds, FA_EXP_W values at a time. */
static void check(void) {
  const char *name = ISA_NAME;
  const int w = FA_EXP_W;
  float in[16], out[16];
  double worst = 0.0, at = 0.0;
  // Every 64th float bit pattern of [-87.33, 88.72], both signs: every
  // exponent of the range, 2^17 values in each binade.
  const float lo = -87.33f, hi = 88.72f;
  for (int sign = 0; sign < 2; sign++)
    for (uint32_t u = 0; u < 0x42b20000u; u += 64 * (uint32_t)w) {
      for (int j = 0; j < w; j++) {
        const uint32_t b = (u + 64u * (uint32_t)j) | (sign ? 0x80000000u : 0);
        memcpy(&in[j], &b, 4);
        if (!(in[j] >= lo && in[j] <= hi)) in[j] = 0.0f;
      }
      expw(in, out);
      for (int j = 0; j < w; j++) {
        const double e = ulps(in[j], out[j]);
        if (e > worst || isnan(out[j])) {
          worst = isnan(out[j]) ? INFINITY : e;
          at = in[j];
        }
      }
    }
  printf("%s: max error %.2f ulp (at x = %.9g)\n", name, worst, at);
  CHECK(worst <= 3.0, "%s: %.2f ulp at x = %.9g, above 3", name, worst, at);
  // The edges the softmax relies on, one value in every lane.
  const float edge[] = {0.0f,   -0.0f,   -INFINITY, -87.34f,  -100.0f,
                        -1e30f, 88.73f,  89.0f,     INFINITY, 1e30f,
                        NAN,    -87.33f, 88.72f};
  for (size_t x = 0; x < sizeof edge / sizeof edge[0]; x++) {
    for (int j = 0; j < w; j++) in[j] = edge[x];
    expw(in, out);
    const float v = out[w - 1], t = edge[x];
    if (isnan(t))
      CHECK(isnan(v), "%s: NaN not kept (%g)", name, (double)v);
    else if (t == 0.0f)
      CHECK(v == 1.0f, "%s: exp(%g) = %.9g, not 1", name, (double)t, (double)v);
    else if (t < -87.33f)
      CHECK(v == 0.0f, "%s: exp(%g) = %g, not flushed to 0", name, (double)t,
            (double)v);
    else if (t >= 88.73f)
      CHECK(isinf(v) && v > 0, "%s: exp(%g) = %g, not inf", name, (double)t,
            (double)v);
    else
      CHECK(isfinite(v) && ulps(t, v) <= 3.0, "%s: exp(%.9g) = %.9g", name,
            (double)t, (double)v);
  }
}

int main(void) {
  if (!HAS_ISA) {
    printf("skipped: this CPU lacks the ISA of %s\n", ISA_NAME);
    return 77;
  }
  check();
  return ut_finish(ISA_NAME);
}
