// SPDX-License-Identifier: MIT
// fa-peak: the ceilings fa-bench figures are measured against, on this
// machine: fp32 FMA rate per ISA (and the bf16 rates where the CPU has
// AVX512-BF16 or AMX-BF16 tiles), on one thread and on all, and the read
// bandwidth of memory. Each probe runs independent accumulator chains long
// enough to hide latency; each ISA's code is compiled for that ISA only
// (target attributes) and run only if the CPU says it can.
#define _DEFAULT_SOURCE 1 // syscall (arch_prctl for AMX)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Each probe returns FLOPs done; sink keeps the compiler from removing it. */
static volatile float sink;
#define CHAINS 12

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double probe_avx512(long iters) {
  __m512 acc[CHAINS], x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(1e-4f);
  for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
  sink = _mm512_reduce_add_ps(s);
  return (double)iters * CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double probe_avx2(long iters) {
  __m256 acc[CHAINS], x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(1e-4f);
  for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, acc[i]);
  _mm256_storeu_ps(out, s);
  sink = out[0];
  return (double)iters * CHAINS * 8 * 2;
}

#if defined(__GNUC__) && (__GNUC__ >= 10 || defined(__clang__))
#define FA_PEAK_HAVE_BF16 1
/* vdpbf16ps: 32 bf16 products summed in pairs into 16 fp32 lanes = 64 FLOPs. */
__attribute__((target("avx512f,avx512bf16"))) static double
probe_bf16(long iters) {
  __m512 acc[CHAINS];
  __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80),
           b = (__m512bh)_mm512_set1_epi16(0x3a80);
  for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_setzero_ps();
  for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
  sink = _mm512_reduce_add_ps(s);
  return (double)iters * CHAINS * 32 * 2;
}
#endif

#if defined(__GNUC__) && __GNUC__ >= 11 && defined(__linux__)
#define FA_PEAK_HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
/* TDPBF16PS on four accumulator tiles from two A and two B tiles, no
   loads in the loop: 16 x 16 x 32 products = 16384 FLOPs each. The tile
   configuration is per thread, so each thread loads it. */
__attribute__((target("amx-tile,amx-bf16"))) static double
probe_amx(long iters) {
  struct {
    unsigned char palette, start, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
  } cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  _tile_zero(4); // zeros: finite, and the rate does not depend on values
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  iters /= 16; // a step here is 170x the work of an FMA probe's step
  for (long it = 0; it < iters; it++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float out[256];
  _tile_stored(0, out, 64);
  _tile_release();
  sink = out[0];
  return (double)iters * 4 * 16 * 16 * 32 * 2;
}
#endif
#endif

typedef struct probe {
  const char *name;
  double (*run)(long);
  int (*usable)(void);
} probe;

#if defined(__x86_64__)
static int has_avx2(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#ifdef FA_PEAK_HAVE_BF16
static int has_bf16(void) {
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
  return has_avx512() && ((a >> 5) & 1); // CPUID.(7,1):EAX bit 5
}
#endif
#ifdef FA_PEAK_HAVE_AMX
/* CPUID.(7,0):EDX bits 24 (AMX-TILE), 22 (AMX-BF16); then the OS's grant
   of the tile state to this process (Linux: arch_prctl, XTILEDATA = 18). */
static int has_amx(void) {
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  if (!((d >> 24) & 1) || !((d >> 22) & 1)) return 0;
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}
#endif
#endif

static double run_probe(const probe *p, int threads) {
  const long iters = 20000000;
  double flops = 0.0, best = 0.0;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += p->run(iters);
    double r = flops / (now() - t0);
    if (r > best) best = r;
    flops = 0.0;
  }
  return best;
}

/* Read bandwidth: sum a buffer far larger than the caches, all threads. */
static double read_bandwidth(int threads, size_t bytes) {
  size_t n = bytes / sizeof(float);
  float *buf = malloc(bytes);
  if (!buf) return 0.0;
#pragma omp parallel for num_threads(threads)
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
  double best = 0.0;
  for (int rep = 0; rep < 5; rep++) {
    float total = 0.0f;
    double t0 = now();
    // simd reduction: many partial sums, so the loop is bound by loads.
#pragma omp parallel for simd num_threads(threads) reduction(+ : total)
    for (size_t i = 0; i < n; i++) total += buf[i];
    double dt = now() - t0;
    sink = total;
    if (bytes / dt > best) best = (double)bytes / dt;
  }
  free(buf);
  return best;
}

int main(int argc, char **argv) {
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  int json = argc > 1 && strcmp(argv[1], "--json") == 0;
  probe probes[5];
  int n = 0;
#if defined(__x86_64__)
  probes[n++] = (probe){"avx2 fp32 fma", probe_avx2, has_avx2};
  probes[n++] = (probe){"avx512 fp32 fma", probe_avx512, has_avx512};
#ifdef FA_PEAK_HAVE_BF16
  probes[n++] = (probe){"avx512 bf16 dpbf16", probe_bf16, has_bf16};
#endif
#ifdef FA_PEAK_HAVE_AMX
  probes[n++] = (probe){"amx bf16 tdpbf16ps", probe_amx, has_amx};
#endif
#endif
  if (json) printf("{\"threads\": %d, \"probes\": [", threads);
  int first = 1;
  for (int i = 0; i < n; i++) {
    if (!probes[i].usable()) {
      if (!json) printf("%-20s  not available on this CPU\n", probes[i].name);
      continue;
    }
    double one = run_probe(&probes[i], 1), all = run_probe(&probes[i], threads);
    if (json)
      printf("%s{\"name\": \"%s\", \"gflops_1\": %.1f, \"gflops_all\": %.1f}",
             first ? "" : ", ", probes[i].name, one * 1e-9, all * 1e-9);
    else
      printf("%-20s  %8.1f GFLOP/s on 1 thread, %8.1f on %d\n", probes[i].name,
             one * 1e-9, all * 1e-9, threads);
    first = 0;
  }
  double bw = read_bandwidth(threads, (size_t)1 << 30);
  if (json)
    printf("], \"read_gbs\": %.1f}\n", bw * 1e-9);
  else
    printf("%-20s  %8.1f GB/s on %d threads (1 GiB buffer)\n", "memory read",
           bw * 1e-9, threads);
  return 0;
}
