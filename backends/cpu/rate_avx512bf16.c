// SPDX-License-Identifier: MIT
// Whether vdpbf16ps pays on this CPU, measured: on some cores (Zen 4) it
// retires twice the fp32 FMA rate in FLOPs, on others (Sapphire Rapids) half
// of it, and widening bf16 to fp32 for the FMA kernel is then the faster
// path. The ISA name cannot tell them apart; a 1 ms probe can. Compiled with
// the avx512bf16 flags and called only where fa_cpu_has_avx512bf16() says so.
#define _POSIX_C_SOURCE 199309L // clock_gettime
#include <immintrin.h>
#include <time.h>

#include "cpu_detect.h"

#define FA_RATE_CHAINS 12 // independent accumulators: hide the latency
#define FA_RATE_ITERS 20000

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* FLOP/s of one run of each probe (the sums keep the loops alive). */
static double fma_rate(float *out) {
  __m512 acc[FA_RATE_CHAINS];
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
  for (int i = 0; i < FA_RATE_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
  const double t0 = seconds();
  for (int it = 0; it < FA_RATE_ITERS; it++)
#pragma GCC unroll 12
    for (int i = 0; i < FA_RATE_CHAINS; i++)
      acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  const double dt = seconds() - t0;
  for (int i = 1; i < FA_RATE_CHAINS; i++)
    acc[0] = _mm512_add_ps(acc[0], acc[i]);
  *out += _mm512_reduce_add_ps(acc[0]);
  return (double)FA_RATE_ITERS * FA_RATE_CHAINS * 16 * 2 / dt;
}

static double dpbf16_rate(float *out) {
  __m512 acc[FA_RATE_CHAINS];
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80),
                 b = (__m512bh)_mm512_set1_epi16(0x3a80);
  for (int i = 0; i < FA_RATE_CHAINS; i++) acc[i] = _mm512_setzero_ps();
  const double t0 = seconds();
  for (int it = 0; it < FA_RATE_ITERS; it++)
#pragma GCC unroll 12
    for (int i = 0; i < FA_RATE_CHAINS; i++)
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  const double dt = seconds() - t0;
  for (int i = 1; i < FA_RATE_CHAINS; i++)
    acc[0] = _mm512_add_ps(acc[0], acc[i]);
  *out += _mm512_reduce_add_ps(acc[0]);
  return (double)FA_RATE_ITERS * FA_RATE_CHAINS * 32 * 2 / dt;
}

/* Measured once per process (best of five alternating runs of each, so a
   time slice lost to another process spoils neither figure). */
static _Atomic int measured;
static double rate_fma, rate_dp;
static volatile float rate_sink;

void fa_cpu_bf16_rates(double *dpbf16, double *fma) {
  if (!measured) {
    float sink = 0.0f;
    double f = 0.0, d = 0.0;
    for (int rep = 0; rep < 5; rep++) {
      double x = fma_rate(&sink), y = dpbf16_rate(&sink);
      if (x > f) f = x;
      if (y > d) d = y;
    }
    rate_sink = sink;
    rate_fma = f;
    rate_dp = d;
    measured = 1; // (racing first calls measure twice: the same answer)
  }
  *dpbf16 = rate_dp;
  *fma = rate_fma;
}
