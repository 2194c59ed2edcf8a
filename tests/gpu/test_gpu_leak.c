// SPDX-License-Identifier: MIT
// A GPU module's device memory under churn and exhaustion (SKIP, exit 77,
// without a usable device). One source, built twice: test_cuda_leak
// (cuda.leak, CUDA runtime) and test_hip_leak (hip.leak, -DFA_TEST_HIP).
//   leak:  the device's free memory (cudaMemGetInfo / hipMemGetInfo), after
//          one warm-up cycle, against after 1000 cycles of context create,
//          fa_malloc of every tensor, forward + backward on two small
//          problems (the tensor-core / MFMA path and the generic one with
//          split-KV), fa_free, context destroy: equal within 2 MiB.
//   OOM:   fa_malloc of twice the device's memory is FA_ERR_OUT_OF_MEMORY
//          with a message and the context still works; with the device
//          filled, a backward whose workspace cannot be allocated is
//          FA_ERR_OUT_OF_MEMORY, and once memory is back it runs.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flashattn.h"
#include "tensor.h"

#ifdef FA_TEST_HIP
#include <hip/hip_runtime_api.h>
#define BACKEND_KIND FA_BACKEND_HIP
#define RUNTIME "HIP"
static int mem_info(size_t *free_b, size_t *total_b) {
  return hipMemGetInfo(free_b, total_b) == hipSuccess ? 0 : -1;
}
#else
#include <cuda_runtime_api.h>
#define BACKEND_KIND FA_BACKEND_CUDA
#define RUNTIME "CUDA"
static int mem_info(size_t *free_b, size_t *total_b) {
  return cudaMemGetInfo(free_b, total_b) == cudaSuccess ? 0 : -1;
}
#endif

/* A small dense problem and its device tensors. */
typedef struct prob {
  fa_attention a;
  fa_dtype dt;
  void *buf[9]; // q k v o do dq dk dv lse
} prob;

static void prob_init(prob *p, fa_dtype dt, int sq, int sk, int d) {
  memset(p, 0, sizeof *p);
  fa_attention_init(&p->a);
  p->a.batch = 1;
  p->a.seqlen_q = sq;
  p->a.seqlen_k = sk;
  p->a.heads_q = 4;
  p->a.heads_kv = 2;
  p->a.head_dim = d;
  p->a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  p->dt = dt;
}

static size_t prob_bytes(const prob *p, int i) {
  const fa_attention *a = &p->a;
  size_t e = ts_dtype_size(p->dt), d = (size_t)a->head_dim;
  size_t q = (size_t)a->seqlen_q * (size_t)a->heads_q * d * e;
  size_t k = (size_t)a->seqlen_k * (size_t)a->heads_kv * d * e;
  if (i == 8) return (size_t)a->seqlen_q * (size_t)a->heads_q * sizeof(float);
  return i == 1 || i == 2 || i == 6 || i == 7 ? k : q;
}

static fa_tensor view(const prob *p, int i) {
  const fa_attention *a = &p->a;
  int64_t h = i == 1 || i == 2 || i == 6 || i == 7 ? a->heads_kv : a->heads_q;
  int64_t s = i == 1 || i == 2 || i == 6 || i == 7 ? a->seqlen_k : a->seqlen_q;
  fa_tensor t = {p->buf[i], p->dt, s * h * a->head_dim, h * a->head_dim,
                 a->head_dim};
  return t;
}

/* fa_malloc every tensor and upload small values (same bytes everywhere:
   a valid bf16/f16/f32 pattern of 0.0078125-ish). */
static fa_status prob_alloc(fa_context *ctx, prob *p) {
  static unsigned char host[1 << 20];
  if (!host[0]) memset(host, 0x3c, sizeof host);
  for (int i = 0; i < 9; i++) {
    size_t n = prob_bytes(p, i);
    fa_status s = fa_malloc(ctx, n, &p->buf[i]);
    if (s) return s;
    if (i < 5 && (s = fa_copy_to_device(ctx, p->buf[i], host,
                                        n < sizeof host ? n : sizeof host)))
      return s;
  }
  return FA_OK;
}

static void prob_free(fa_context *ctx, prob *p) {
  for (int i = 0; i < 9; i++) {
    if (p->buf[i])
      CHECK(fa_free(ctx, p->buf[i]) == FA_OK, "fa_free: %s", fa_last_error());
    p->buf[i] = NULL;
  }
}

static fa_status prob_run(fa_context *ctx, prob *p) {
  fa_status s = fa_forward(ctx, &p->a, view(p, 0), view(p, 1), view(p, 2),
                           view(p, 3), p->buf[8]);
  if (s) return s;
  s = fa_backward(ctx, &p->a, view(p, 0), view(p, 1), view(p, 2), view(p, 3),
                  view(p, 4), p->buf[8], view(p, 5), view(p, 6), view(p, 7));
  return s ? s : fa_synchronize(ctx);
}

/* One full cycle: context, tensors, forward + backward, free, destroy. */
static int cycle(void) {
  fa_context *ctx = NULL;
  fa_status s = fa_context_create(&ctx, BACKEND_KIND, 0);
  CHECK(s == FA_OK, "fa_context_create: %s", fa_last_error());
  if (s) return -1;
  prob p[2];
  prob_init(&p[0], FA_BF16, 128, 128, 64); // tensor-core / MFMA kernels
  prob_init(&p[1], FA_F32, 1, 2048, 40);   // generic, split-KV decode
  int bad = 0;
  for (int i = 0; i < 2 && !bad; i++) {
    s = prob_alloc(ctx, &p[i]);
    if (!s) s = prob_run(ctx, &p[i]);
    CHECK(s == FA_OK, "problem %d: %s: %s", i, fa_status_string(s),
          fa_last_error());
    bad = s != FA_OK;
  }
  for (int i = 0; i < 2; i++) prob_free(ctx, &p[i]);
  fa_context_destroy(ctx);
  return bad ? -1 : 0;
}

static void check_leak(int cycles) {
  size_t before, after, total, now;
  // Warm-up: the runtime's one-time allocations (kernels loaded lazily at
  // first launch) and the driver's small-allocation pool, which keeps some
  // 2 MiB pages after cudaFree (seen on the H200: 18 MiB after one warm-up
  // cycle, not growing after). A leak is what keeps growing past that.
  for (int c = 0; c < 20; c++)
    if (cycle()) return;
  CHECK(mem_info(&before, &total) == 0, RUNTIME " MemGetInfo failed");
  for (int c = 0; c < cycles; c++) {
    if (cycle()) {
      printf("cycle %d failed; stopping\n", c);
      return;
    }
    if ((c + 1) % 250 == 0 && mem_info(&now, &total) == 0)
      printf("  after %4d cycles: %lld bytes below the start\n", c + 1,
             (long long)before - (long long)now);
  }
  CHECK(mem_info(&after, &total) == 0, RUNTIME " MemGetInfo failed");
  long long lost = (long long)before - (long long)after;
  printf("%d cycles: free device memory %zu -> %zu bytes (%lld lost)\n", cycles,
         before, after, lost);
  CHECK(lost <= 2ll << 20, "%lld bytes of device memory lost over %d cycles",
        lost, cycles);
}

static void check_oom(void) {
  size_t free_b, total;
  if (mem_info(&free_b, &total)) {
    CHECK(0, RUNTIME " MemGetInfo failed");
    return;
  }
  fa_context *ctx = NULL;
  if (fa_context_create(&ctx, BACKEND_KIND, 0)) {
    CHECK(0, "fa_context_create: %s", fa_last_error());
    return;
  }
  // More than the device has.
  void *huge = NULL;
  fa_status s = fa_malloc(ctx, total * 2, &huge);
  CHECK(s == FA_ERR_OUT_OF_MEMORY && huge == NULL, "fa_malloc(2 x %zu): %s",
        total, fa_status_string(s));
  CHECK(*fa_last_error() != '\0', "no message with FA_ERR_OUT_OF_MEMORY");
  printf("fa_malloc(2 x device memory): %s: %s\n", fa_status_string(s),
         fa_last_error());
  prob p;
  prob_init(&p, FA_BF16, 128, 128, 64);
  s = prob_alloc(ctx, &p);
  if (!s) s = prob_run(ctx, &p);
  CHECK(s == FA_OK, "the context after OOM: %s: %s", fa_status_string(s),
        fa_last_error());

  // A context whose workspace is still empty, the device then filled: its
  // backward cannot allocate the workspace (grown by 1 MiB steps).
  fa_context *fresh = NULL;
  if (fa_context_create(&fresh, BACKEND_KIND, 0)) {
    CHECK(0, "fa_context_create: %s", fa_last_error());
    prob_free(ctx, &p);
    fa_context_destroy(ctx);
    return;
  }
  void *fill[512];
  int nfill = 0;
  if (mem_info(&free_b, &total) == 0 && free_b > (size_t)96 << 20 &&
      fa_malloc(ctx, free_b - ((size_t)64 << 20), &fill[0]) == FA_OK)
    nfill = 1;
  while (nfill < 512 && fa_malloc(ctx, (size_t)1 << 20, &fill[nfill]) == FA_OK)
    nfill++;
  mem_info(&free_b, &total);
  s = fa_backward(fresh, &p.a, view(&p, 0), view(&p, 1), view(&p, 2),
                  view(&p, 3), view(&p, 4), p.buf[8], view(&p, 5), view(&p, 6),
                  view(&p, 7));
  if (!s) s = fa_synchronize(fresh);
  if (nfill < 512) {
    CHECK(s == FA_ERR_OUT_OF_MEMORY, "backward with %zu bytes free: %s: %s",
          free_b, fa_status_string(s), fa_last_error());
    printf("backward with the device full (%zu bytes free): %s: %s\n", free_b,
           fa_status_string(s), fa_last_error());
  } else {
    printf("could not fill the device (%zu bytes still free): the workspace "
           "check is skipped\n",
           free_b);
  }
  for (int i = 0; i < nfill; i++) fa_free(ctx, fill[i]);
  s = fa_backward(fresh, &p.a, view(&p, 0), view(&p, 1), view(&p, 2),
                  view(&p, 3), view(&p, 4), p.buf[8], view(&p, 5), view(&p, 6),
                  view(&p, 7));
  if (!s) s = fa_synchronize(fresh);
  CHECK(s == FA_OK, "backward once memory is back: %s: %s", fa_status_string(s),
        fa_last_error());
  fa_context_destroy(fresh);
  prob_free(ctx, &p);
  fa_context_destroy(ctx);
}

int main(int argc, char **argv) {
  int cycles = argc > 1 ? atoi(argv[1]) : 1000;
  fa_context *probe = NULL;
  if (fa_context_create(&probe, BACKEND_KIND, 0)) {
    printf("SKIP: no usable %s device: %s\n", RUNTIME, fa_last_error());
    return TS_SKIP;
  }
  fa_context_destroy(probe);
  size_t free_b, total;
  if (mem_info(&free_b, &total)) {
    printf("SKIP: %s MemGetInfo failed in the test's own runtime\n", RUNTIME);
    return TS_SKIP;
  }
  check_leak(cycles);
  check_oom();
  if (ut_finish("gpu.leak")) return 1;
  printf("no device memory lost; out-of-memory reported and recovered\n");
  return 0;
}
