// SPDX-License-Identifier: MIT
// The AMX forward's and backward's exp2 for P (backends/cpu/amx/amx_exp2.h)
// against exp2 in double: the bound its comment states (3.5e-6 relative),
// which is what the row sums carry into l and the LSE (xval's LSE bound is
// 1e-5), exact powers of two at integers (P = 1 for a row's maximum), and
// the special values the softmax relies on. Built with the AVX-512 flags of
// the kernels; exits 77 (skipped) on a CPU without AVX-512 F/DQ.
#include "check.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "amx/amx_exp2.h"

static float exp2_lane0(float t, __mmask16 keep) {
  return _mm512_cvtss_f32(amx_exp2(_mm512_set1_ps(t), keep));
}

int main(void) {
  if (!__builtin_cpu_supports("avx512f") ||
      !__builtin_cpu_supports("avx512dq")) {
    printf("skipped: this CPU has no AVX-512 F/DQ\n");
    return 77;
  }
  // Every f of a 2^-20 grid in [0, 1), at integer parts across the range
  // that is not flushed, 16 at a time.
  double worst = 0.0, at = 0.0;
  for (int ip = 0; ip <= 125; ip += 5)
    for (uint32_t b = 0; b < (1u << 20); b += 16) {
      float in[16], out[16];
      for (int j = 0; j < 16; j++)
        in[j] = -(float)ip - (float)(b + (uint32_t)j) / (float)(1u << 20);
      _mm512_storeu_ps(out, amx_exp2(_mm512_loadu_ps(in), 0xffff));
      for (int j = 0; j < 16; j++) {
        const double e = fabs(out[j] / exp2((double)in[j]) - 1.0);
        if (e > worst) {
          worst = e;
          at = in[j];
        }
      }
    }
  printf("max relative error %.3e (at t = %.9g)\n", worst, at);
  CHECK(worst <= 3.5e-6, "relative error %.3e above 3.5e-6", worst);
  for (int n = 0; n >= -126; n--)
    CHECK(exp2_lane0((float)n, 0xffff) == ldexpf(1.0f, n), "2^%d inexact", n);
  CHECK(exp2_lane0(-INFINITY, 0xffff) == 0.0f, "2^-inf is not 0");
  CHECK(isnan(exp2_lane0(NAN, 0xffff)), "NaN not kept");
  CHECK(exp2_lane0(-126.5f, 0xffff) == 0.0f, "2^-126.5 not flushed");
  CHECK(exp2_lane0(-1000.0f, 0xffff) == 0.0f, "2^-1000 not flushed");
  CHECK(exp2_lane0(-0.5f, 0) == 0.0f, "a lane outside keep is not 0");
  return ut_finish("amx_exp2");
}
