// SPDX-License-Identifier: MIT
// 64-bit safety on the GPU: decode over a KV cache whose K and V each span
// 2^32 elements or more (8 GiB of bf16 each), the GPU against the CPU
// backend on the same host data and against the float64 oracle on a few
// rows (SKIP, exit 77, without a device, 17 GiB of free device memory or
// 40 GiB of host memory).
//
// One cache of 2 x 2^20 rows x 32 heads x 128 = 2^33 bf16 elements (16 GiB)
// is filled once with random values (no zeros, no repeated tiles: a key read
// from a wrong offset is another random key, so any misaddressed part of the
// cache changes the result) and uploaded once; every case views it:
//   dense b1     K = rows [0, 2^20), V = rows [2^20, 2^21), seqlen_k 2^20,
//                32/32 heads, 4 query rows, causal: keys j >= 2^19 lie past
//                element 2^31 (the last key at 2^32 - 4096);
//   dense b2     the same halves as two sequences of 2^19 keys: the batch
//                stride is 2^31 elements;
//   packed gqa   K and V interleaved row by row (stride_seq 8192: each spans
//                2^33 elements, beyond 32-bit unsigned offsets too), 32
//                query heads over 8 kv heads (stride_head 512);
//   causal 640   640 query rows, causal, dense b1: 160 q blocks, more than
//                an H200's SMs, so the sm90 kernel runs (its TMA descriptors
//                over a 2^32-element tensor); the CPU checks its first and
//                last 4 rows (a slice of a bottom-right causal problem is a
//                bottom-right causal problem over a prefix of the keys).
// Each case runs the GPU's best kernel, the sm80 kernel where the best is
// sm90 and the generic kernel (contexts bound to cuda.sm80.bf16.d128 and
// cuda.generic by name); outputs
// and LSE are compared with the CPU's (the bf16 tolerance of cuda.gpu) and
// a few (row, head) pairs with the float64 oracle, read through one-head
// views with the same strides (the oracle's offsets pass 2^32 too).
//
// Run: ctest -L gpu-large (label large too; not in -L cuda). Phase times
// are printed (fill, upload, gpu, cpu, oracle); about a minute on an H200
// host.
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "flashattn.h"
#include "oracle.h"
#include "tensor.h"

enum { D = 128, HEADS = 32, ROW = HEADS * D }; // one cache row: 4096
#define SK_MAX (1 << 20)
#define CACHE_ELEMS ((int64_t)2 * SK_MAX * ROW) /* 2^33 */
#define CACHE_BYTES ((size_t)CACHE_ELEMS * 2)
#define GIB ((size_t)1 << 30)

static fa_context *cpu, *gpu, *bound[3]; // bound: gpu, then by name
static ts_rng rng;

/* ---- the cache fill: fixed 2^24-element chunks, each from its own seed, so
   the data depend on the seed only (not on the thread count) -------------- */

#define CHUNK ((int64_t)1 << 24)

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint16_t bf16_bits(float f) { // round to nearest even (finite f)
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Uniform in [-sqrt 3, sqrt 3] (unit variance), four values per xorshift64*
   step. */
static void fill_chunk(uint16_t *p, int64_t n, uint64_t seed) {
  uint64_t s = mix64(seed) | 1u;
  const float scale = 1.7320508f / 32768.0f;
  for (int64_t i = 0; i + 4 <= n; i += 4) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    uint64_t r = s * 0x2545f4914f6cdd1dULL;
    for (int k = 0; k < 4; k++)
      p[i + k] = bf16_bits((float)(int16_t)(uint16_t)(r >> (16 * k)) * scale);
  }
}

typedef struct fill_job {
  uint16_t *p;
  int64_t chunks;
  uint64_t seed;
  int first, step;
} fill_job;

static void *fill_thread(void *arg) {
  const fill_job *j = arg;
  for (int64_t c = j->first; c < j->chunks; c += j->step)
    fill_chunk(j->p + c * CHUNK, CHUNK, j->seed ^ ((uint64_t)c << 32));
  return NULL;
}

static int fill_cache(uint16_t *p, uint64_t seed) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  int nt = n < 1 ? 1 : n > 64 ? 64 : (int)n;
  pthread_t th[64];
  fill_job jobs[64];
  int started = 0;
  for (int t = 0; t < nt; t++) {
    jobs[t] = (fill_job){p, CACHE_ELEMS / CHUNK, seed, t, nt};
    if (pthread_create(&th[t], NULL, fill_thread, &jobs[t])) break;
    started++;
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  // Chunks of threads that did not start: this thread does them.
  for (int t = started; t < nt; t++) fill_thread(&jobs[t]);
  return started;
}

/* ---- the cases ------------------------------------------------------------
 */

typedef struct kase {
  const char *name;
  int b, sq, sk, hq, hkv, causal;
  int packed;   // K and V rows interleaved (stride_seq 2 x 4096)
  int cpu_rows; // 0: the CPU runs it all; else its first and last cpu_rows
  int ob, oh, oi, on; // oracle: batch, query head, first row, rows
} kase;

/* K and V views of the cache at base (host or device). */
static void kv_views(const kase *c, void *base, fa_tensor *k, fa_tensor *v) {
  const int64_t ss = c->packed ? 2 * ROW : ROW;
  const int64_t sh = (int64_t)D * (HEADS / c->hkv);
  uint16_t *p = base;
  *k = (fa_tensor){p, FA_BF16, ss * c->sk, ss, sh};
  *v = (fa_tensor){p + (c->packed ? ROW : (int64_t)SK_MAX * ROW), FA_BF16,
                   ss * c->sk, ss, sh};
}

/* The rows of a case the CPU computes. */
static int covered(const kase *c, int i) {
  return !c->cpu_rows || i < c->cpu_rows || i >= c->sq - c->cpu_rows;
}

static int all_finite(const uint16_t *o, size_t n, const float *l, size_t m) {
  for (size_t x = 0; x < n; x++)
    if (!isfinite(ts_load(o, FA_BF16, (int64_t)x))) return 0;
  for (size_t x = 0; x < m; x++)
    if (!isfinite(l[x])) return 0;
  return 1;
}

/* got against ref over the rows the CPU covered: relative Frobenius and
   max error of O, LSE error (ts_lse_err); +inf on non-finite mismatches. */
static void compare(const kase *c, const uint16_t *ro, const float *rl,
                    const uint16_t *go, const float *gl, double err[3]) {
  size_t n = (size_t)c->b * c->sq * c->hq * D, m = (size_t)c->b * c->hq * c->sq;
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
  double *lx = malloc(sizeof(double) * m), *ly = malloc(sizeof(double) * m);
  err[0] = err[1] = err[2] = INFINITY;
  if (x && y && lx && ly) {
    size_t k = 0, kl = 0, first = 0;
    for (int b = 0; b < c->b; b++)
      for (int i = 0; i < c->sq; i++) {
        if (!covered(c, i)) continue;
        for (int h = 0; h < c->hq; h++) {
          size_t at = (((size_t)b * c->sq + i) * c->hq + h) * D;
          for (int d = 0; d < D; d++, k++) {
            x[k] = ts_load(ro, FA_BF16, (int64_t)(at + d));
            y[k] = ts_load(go, FA_BF16, (int64_t)(at + d));
          }
          size_t li = ((size_t)b * c->hq + h) * c->sq + i;
          lx[kl] = rl[li];
          ly[kl++] = gl[li];
        }
      }
    if (!ts_nonfinite_parity(x, y, k, &first)) {
      err[0] = ts_rel_err(x, y, k);
      err[1] = ts_max_err(x, y, k);
    }
    if (!ts_nonfinite_parity(lx, ly, kl, &first))
      err[2] = ts_lse_err(lx, ly, kl);
  }
  free(x);
  free(y);
  free(lx);
  free(ly);
}

static double tol_o = 2.5e-2; // bf16, as cuda.gpu
static double tol_lse = 1e-5; // ts_lse_err, as cuda.gpu

enum { NVAR = 3 };
static const struct {
  const char *name, *kernel; // the kernel a context is bound to, by name
} variants[NVAR] = {{"best", NULL},
                    {"sm80", "cuda.sm80.bf16.d128"},
                    {"generic", "cuda.generic"}};

static void run_case(const kase *c, void *hcache, void *dcache) {
  const size_t nq = (size_t)c->b * c->sq * c->hq * D;
  const size_t nl = (size_t)c->b * c->hq * c->sq;
  fa_tensor hk, hv, gk, gv;
  kv_views(c, hcache, &hk, &hv);
  kv_views(c, dcache, &gk, &gv);
  const int64_t last = (c->b - 1) * hk.stride_batch +
                       (int64_t)(c->sk - 1) * hk.stride_seq +
                       (int64_t)(c->hkv - 1) * hk.stride_head + D - 1;
  printf("\n== %s: b%d sq%d sk%d hq%d hkv%d d%d causal=%d; k/v strides "
         "%lld/%lld/%lld, largest element offset %lld (%.2f x 2^31)\n",
         c->name, c->b, c->sq, c->sk, c->hq, c->hkv, D, c->causal,
         (long long)hk.stride_batch, (long long)hk.stride_seq,
         (long long)hk.stride_head, (long long)last,
         (double)(last + 1) / 2147483648.0);
  if ((int64_t)c->b * c->sk * hk.stride_seq > CACHE_ELEMS) {
    CHECK(0, "%s: the views overrun the cache", c->name);
    return;
  }

  uint16_t *q = malloc(nq * 2), *o_cpu = malloc(nq * 2), *o_g[NVAR];
  float *l_cpu = malloc(nl * 4), *l_g[NVAR], *l_part = malloc(nl * 4);
  void *dq = NULL, *dout = NULL, *dlse = NULL;
  double *oo = malloc(sizeof(double) * c->on * D),
         *ol = malloc(sizeof(double) * c->on);
  int ran[NVAR] = {0};
  for (int v = 0; v < NVAR; v++) {
    o_g[v] = malloc(nq * 2);
    l_g[v] = malloc(nl * 4);
  }
  int ok = q && o_cpu && l_cpu && l_part && oo && ol;
  for (int v = 0; v < NVAR; v++) ok = ok && o_g[v] && l_g[v];
  if (!ok || fa_malloc(gpu, nq * 2, &dq) || fa_malloc(gpu, nq * 2, &dout) ||
      fa_malloc(gpu, nl * 4, &dlse)) {
    CHECK(0, "%s: setup: out of memory (%s)", c->name, fa_last_error());
    goto done;
  }
  for (size_t x = 0; x < nq; x++)
    ts_store(q, FA_BF16, (int64_t)x, ts_rng_normal(&rng));
  if (fa_copy_to_device(gpu, dq, q, nq * 2)) {
    CHECK(0, "%s: upload q: %s", c->name, fa_last_error());
    goto done;
  }

  fa_attention a;
  fa_attention_init(&a);
  a.batch = c->b;
  a.seqlen_q = c->sq;
  a.seqlen_k = c->sk;
  a.heads_q = c->hq;
  a.heads_kv = c->hkv;
  a.head_dim = D;
  a.causal = c->causal;
  const int64_t qs = (int64_t)c->hq * D, qb = qs * c->sq;
  fa_tensor hq_ = {q, FA_BF16, qb, qs, D}, ho = {o_cpu, FA_BF16, qb, qs, D};
  fa_tensor gq = {dq, FA_BF16, qb, qs, D}, go = {dout, FA_BF16, qb, qs, D};

  // The GPU: best kernel, the sm80 one where the best was sm90, generic.
  int sm90 = 0;
  for (int v = 0; v < NVAR; v++) {
    if (v == 1 && !sm90) continue;
    fa_context *g = bound[v];
    char text[512] = "";
    fa_plan *plan = NULL;
    if (fa_plan_create(g, &a, gq, gk, gv, go, &plan) == FA_OK) {
      fa_plan_describe(plan, text, sizeof text);
      fa_plan_destroy(plan);
    }
    if (v == 0) sm90 = strstr(text, "cuda.sm90.") != NULL;
    ts_poison(o_g[v], FA_BF16, nq);
    ts_poison_f32(l_g[v], nl);
    fa_status st = fa_copy_to_device(gpu, dout, o_g[v], nq * 2);
    if (!st) st = fa_copy_to_device(gpu, dlse, l_g[v], nl * 4);
    double t0 = ts_now();
    if (!st) st = fa_forward(g, &a, gq, gk, gv, go, dlse);
    if (!st) st = fa_synchronize(g);
    double dt = ts_now() - t0;
    if (!st) st = fa_copy_to_host(gpu, o_g[v], dout, nq * 2);
    if (!st) st = fa_copy_to_host(gpu, l_g[v], dlse, nl * 4);
    CHECK(st == FA_OK, "%s: gpu %s: %s: %s", c->name, variants[v].name,
          fa_status_string(st), fa_last_error());
    printf("gpu %-8s %8.3f s  plan: %s\n", variants[v].name, dt, text);
    if (st) continue;
    ran[v] = 1;
    CHECK(all_finite(o_g[v], nq, l_g[v], nl),
          "%s: gpu %s: non-finite output or LSE (poison left?)", c->name,
          variants[v].name);
  }

  // The CPU: all of it, or its first and last rows (slices of a
  // bottom-right causal problem see a prefix of the keys).
  double t0 = ts_now();
  fa_status st = FA_OK;
  if (!c->cpu_rows) {
    st = fa_forward(cpu, &a, hq_, hk, hv, ho, l_cpu);
  } else {
    ts_poison_f32(l_cpu, nl);
    const int r = c->cpu_rows, starts[2] = {0, c->sq - c->cpu_rows};
    for (int s = 0; s < 2 && !st; s++) {
      fa_attention as = a;
      as.seqlen_q = r;
      if (c->causal) as.seqlen_k = c->sk - c->sq + starts[s] + r;
      fa_tensor sq_ = hq_, so = ho;
      sq_.data = q + (size_t)starts[s] * qs;
      so.data = o_cpu + (size_t)starts[s] * qs;
      st = fa_forward(cpu, &as, sq_, hk, hv, so, l_part);
      for (int b = 0; b < c->b && !st; b++)
        for (int h = 0; h < c->hq; h++)
          for (int i = 0; i < r; i++)
            l_cpu[((size_t)b * c->hq + h) * c->sq + starts[s] + i] =
                l_part[((size_t)b * c->hq + h) * r + i];
    }
  }
  double t_cpu = ts_now() - t0;
  CHECK(st == FA_OK, "%s: cpu: %s: %s", c->name, fa_status_string(st),
        fa_last_error());
  printf("cpu %-8s %8.3f s  (%s rows)\n", fa_context_backend(cpu), t_cpu,
         c->cpu_rows ? "first and last" : "all");
  for (int v = 0; v < NVAR && !st; v++) {
    if (!ran[v]) continue;
    double e[3];
    compare(c, o_cpu, l_cpu, o_g[v], l_g[v], e);
    CHECK(e[0] <= tol_o && e[2] <= tol_lse,
          "%s: gpu %s vs cpu: o %.3e (max %.3e) lse %.3e (tol %.1e, %.0e)",
          c->name, variants[v].name, e[0], e[1], e[2], tol_o, tol_lse);
    printf("gpu %-8s vs cpu: o %.2e (max %.2e) lse %.2e\n", variants[v].name,
           e[0], e[1], e[2]);
  }

  // The float64 oracle on rows [oi, oi + on) of query head oh, batch ob:
  // one-head views with the case's strides.
  fa_attention ao;
  fa_attention_init(&ao);
  ao.batch = 1;
  ao.seqlen_q = c->on;
  ao.seqlen_k = c->causal ? c->sk - c->sq + c->oi + c->on : c->sk;
  ao.heads_q = ao.heads_kv = 1;
  ao.head_dim = D;
  ao.causal = c->causal;
  const int kh = c->oh / (c->hq / c->hkv);
  fa_tensor oq = hq_, ok_ = hk, ov = hv;
  oq.data = q + (size_t)c->ob * qb + (size_t)c->oi * qs + (size_t)c->oh * D;
  ok_.data =
      (uint16_t *)hk.data + c->ob * hk.stride_batch + kh * hk.stride_head;
  ov.data = (uint16_t *)hv.data + c->ob * hv.stride_batch + kh * hv.stride_head;
  t0 = ts_now();
  int oerr = fa_oracle_forward(&ao, oq, ok_, ov, oo, ol);
  double t_or = ts_now() - t0;
  CHECK(!oerr, "%s: oracle failed", c->name);
  printf("oracle   %8.3f s  (batch %d, head %d, rows %d..%d, %d keys)\n", t_or,
         c->ob, c->oh, c->oi, c->oi + c->on - 1, ao.seqlen_k);
  for (int v = -1; v < NVAR && !oerr; v++) {
    if (v >= 0 && !ran[v]) continue;
    if (v < 0 && (st || !covered(c, c->oi) || !covered(c, c->oi + c->on - 1)))
      continue;
    const uint16_t *o = v < 0 ? o_cpu : o_g[v];
    const float *l = v < 0 ? l_cpu : l_g[v];
    double got[4 * D], gl[4], e = INFINITY, el = INFINITY;
    size_t first = 0, n = (size_t)c->on * D;
    if (c->on > 4) break;
    for (int i = 0; i < c->on; i++) {
      size_t row = ((size_t)c->ob * c->sq + c->oi + i) * c->hq + c->oh;
      for (int d = 0; d < D; d++)
        got[i * D + d] = ts_load(o, FA_BF16, (int64_t)(row * D + d));
      gl[i] = l[((size_t)c->ob * c->hq + c->oh) * c->sq + c->oi + i];
    }
    if (!ts_nonfinite_parity(oo, got, n, &first)) e = ts_rel_err(oo, got, n);
    if (!ts_nonfinite_parity(ol, gl, (size_t)c->on, &first))
      el = ts_lse_err(ol, gl, (size_t)c->on);
    const char *who = v < 0 ? "cpu" : variants[v].name;
    CHECK(e <= tol_o && el <= tol_lse,
          "%s: %s vs oracle: o %.3e lse %.3e (oracle lse %.6f, got %.6f)",
          c->name, who, e, el, ol[0], gl[0]);
    printf("%-8s vs oracle: o %.2e lse %.2e (lse %.6f)\n", who, e, el, ol[0]);
  }

done:
  free(q);
  free(o_cpu);
  free(l_cpu);
  free(l_part);
  free(oo);
  free(ol);
  for (int v = 0; v < NVAR; v++) {
    free(o_g[v]);
    free(l_g[v]);
  }
  if (dq) fa_free(gpu, dq);
  if (dout) fa_free(gpu, dout);
  if (dlse) fa_free(gpu, dlse);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (fa_context_create(&gpu, FA_BACKEND_CUDA, 0)) {
    printf("SKIP: no usable CUDA device: %s\n", fa_last_error());
    return TS_SKIP;
  }
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    printf("SKIP: cudaMemGetInfo failed in the test's own runtime\n");
    fa_context_destroy(gpu);
    return TS_SKIP;
  }
  const size_t need_dev = CACHE_BYTES + GIB, need_host = 40 * GIB;
  const size_t host_b =
      (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
  printf("test_cuda_large: device %s, %.1f of %.1f GiB free; host %.1f GiB\n",
         fa_context_backend(gpu), (double)free_b / GIB, (double)total_b / GIB,
         (double)host_b / GIB);
  if (free_b < need_dev) {
    printf("SKIP: needs %.0f GiB of free device memory, %.1f free\n",
           (double)need_dev / GIB, (double)free_b / GIB);
    fa_context_destroy(gpu);
    return TS_SKIP;
  }
  if (host_b < need_host) {
    printf("SKIP: needs %.0f GiB of host memory, %.1f here\n",
           (double)need_host / GIB, (double)host_b / GIB);
    fa_context_destroy(gpu);
    return TS_SKIP;
  }
  if (fa_context_create(&cpu, FA_BACKEND_CPU, 0)) {
    printf("FAIL: no CPU context: %s\n", fa_last_error());
    fa_context_destroy(gpu);
    return 1;
  }
  bound[0] = gpu;
  for (int v = 1; v < NVAR; v++)
    if (fa_context_create_by_name(&bound[v], variants[v].kernel)) {
      printf("FAIL: no context bound to %s: %s\n", variants[v].kernel,
             fa_last_error());
      return 1;
    }
  uint64_t seed = ts_seed_base();
  ts_rng_seed(&rng, seed);
  printf("seed 0x%llx (FA_TEST_SEED), cpu backend %s\n",
         (unsigned long long)seed, fa_context_backend(cpu));

  uint16_t *hcache = malloc(CACHE_BYTES);
  if (!hcache) {
    printf("SKIP: cannot allocate %.0f GiB of host memory\n",
           (double)CACHE_BYTES / GIB);
    fa_context_destroy(cpu);
    fa_context_destroy(gpu);
    return TS_SKIP;
  }
  double t0 = ts_now();
  int nt = fill_cache(hcache, ts_rng_u64(&rng));
  printf("fill     %8.3f s  (%lld bf16 elements = 2^33, %d threads)\n",
         ts_now() - t0, (long long)CACHE_ELEMS, nt);

  void *dcache = NULL;
  fa_status st = fa_malloc(gpu, CACHE_BYTES, &dcache);
  CHECK(st == FA_OK, "fa_malloc(%zu): %s", CACHE_BYTES, fa_last_error());
  if (!st) {
    t0 = ts_now();
    st = fa_copy_to_device(gpu, dcache, hcache, CACHE_BYTES);
    double dt = ts_now() - t0;
    CHECK(st == FA_OK, "upload: %s", fa_last_error());
    printf("upload   %8.3f s  (%.1f GB/s)\n", dt,
           (double)CACHE_BYTES / dt / 1e9);
    // The copy reached the end: the last 4 MiB come back equal.
    const size_t tail = (size_t)4 << 20;
    unsigned char *back = malloc(tail);
    if (!st && back) {
      st =
          fa_copy_to_host(gpu, back, (char *)dcache + CACHE_BYTES - tail, tail);
      CHECK(st == FA_OK &&
                !memcmp(back, (char *)hcache + CACHE_BYTES - tail, tail),
            "the cache's last 4 MiB differ on the device: %s",
            st ? fa_last_error() : "contents");
    }
    free(back);
  }
  if (!st) {
    const int BR = FA_CAUSAL_BOTTOM_RIGHT;
    // name b sq sk hq hkv causal packed cpu_rows | oracle: b h row rows
    static const kase cases[] = {
        {"dense b1 (k, v: 2^32 elements each)", 1, 4, SK_MAX, 32, 32, BR, 0, 0,
         0, 31, 0, 4},
        {"dense b2 (batch stride 2^31)", 2, 1, SK_MAX / 2, 32, 32, 0, 0, 0, 1,
         17, 0, 1},
        {"packed gqa 32/8 (k, v span 2^33 elements)", 1, 2, SK_MAX, 32, 8, 0, 1,
         0, 0, 30, 0, 2},
        {"causal 640 (sm90 on an H200)", 1, 640, SK_MAX, 32, 32, BR, 0, 4, 0, 5,
         636, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      run_case(&cases[i], hcache, dcache);
  }
  if (dcache) fa_free(gpu, dcache);
  free(hcache);
  fa_context_destroy(cpu);
  for (int v = 1; v < NVAR; v++) fa_context_destroy(bound[v]);
  fa_context_destroy(gpu);
  return ut_finish("cuda.large");
}
