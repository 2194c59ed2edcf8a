// SPDX-License-Identifier: MIT
// The CUDA backend on a device (SKIP, exit 77, without one):
//   - memory, copies, streams (a stream made by the CUDA runtime), errors
//     (out of memory -> FA_ERR_OUT_OF_MEMORY; a bad pointer ->
//     FA_ERR_BACKEND with the CUDA error text, and the context still works);
//   - GPU against CPU on the same inputs, forward and backward, over masks,
//     softcap, ALiBi, sinks, GQA, varlen, seqused_k, paged KV, odd dims;
//   - the kernel dispatch picks against cuda.generic (a context bound to it
//     by name), split-KV (decode shapes) included, and run-to-run
//     determinism;
//   - binding by name: every kernel runs what it accepts (fa_plan_describe
//     names it) and fails what it declines with FA_ERR_UNSUPPORTED and the
//     reason, never another kernel;
//   - no host work on the hot path: planned varlen and paged forwards and
//     backwards recorded inside a global-mode stream capture (a
//     synchronous copy or a synchronisation would fail it);
//   - device arrays that the core does not check (no checked mode): lengths
//     past the tensors, block-table entries outside the pool: no crash, no
//     access outside the tensors (compute-sanitizer runs --quick);
//   - fa_merge_states on the device against the CPU's.
// The float64-oracle grid is tests/xval (xval.cuda.*, xval.cuda.<kernel>.*).
//   test_cuda_gpu [--quick | --deterministic [CASE]]
//     --quick          the small subset run under compute-sanitizer
//     --deterministic  FA_CUDA_DETERMINISTIC=1: each tensor-core backward
//                      bound by name, bitwise equal run to run (CASE: only
//                      those whose "kernel: case" name contains it)
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flashattn.h"
#include "tensor.h"

static fa_context *cpu, *gpu, *gen; // gen: bound to cuda.generic
static ts_rng rng;

/* ---- a problem with host and device copies of everything ---------------- */

typedef struct prob {
  const char *name;
  fa_dtype dt;
  int b, sq, sk, hq, hkv, d, dv;
  int causal, wl, wr;
  float cap;
  int alibi, sinks;
  int layout; // 0 dense, 1 varlen (+ seqused_k), 2 paged (+ seqused_k)
  int page;
} prob;

typedef struct buf {
  void *h, *g; // host, device
  size_t bytes;
} buf;

enum {
  Q,
  K,
  V,
  O,
  DO_,
  DQ,
  DK,
  DV,
  LSE,
  CUQ,
  CUK,
  USED,
  TABLE,
  SLOPES,
  SINKS,
  NB
};

typedef struct inst {
  prob pr;
  fa_attention ah, ag; // arrays on host / device
  buf x[NB];
  fa_tensor th[8], tg[8]; // q k v o do dq dk dv views (host / device)
  int *lq, *lk;
} inst;

static int buf_make(buf *b, size_t bytes) {
  b->bytes = bytes ? bytes : 4;
  b->h = calloc(1, b->bytes);
  if (!b->h) return -1;
  return fa_malloc(gpu, b->bytes, &b->g) ? -1 : 0;
}

static void inst_free(inst *s) {
  for (int i = 0; i < NB; i++) {
    free(s->x[i].h);
    if (s->x[i].g) fa_free(gpu, s->x[i].g);
  }
  free(s->lq);
  free(s->lk);
}

static void fill(buf *b, fa_dtype t) {
  size_t n = b->bytes / ts_dtype_size(t);
  for (size_t i = 0; i < n; i++)
    ts_store(b->h, t, (int64_t)i, ts_rng_normal(&rng));
}

static int upload(inst *s, int i) {
  return fa_copy_to_device(gpu, s->x[i].g, s->x[i].h, s->x[i].bytes) ? -1 : 0;
}

static int inst_make(inst *s, const prob *pr) {
  memset(s, 0, sizeof *s);
  s->pr = *pr;
  const int B = pr->b;
  fa_attention *a = &s->ah;
  fa_attention_init(a);
  a->batch = B;
  a->seqlen_q = pr->sq;
  a->seqlen_k = pr->sk;
  a->heads_q = pr->hq;
  a->heads_kv = pr->hkv;
  a->head_dim = pr->d;
  a->head_dim_v = pr->dv;
  a->causal = pr->causal;
  a->window_left = pr->wl;
  a->window_right = pr->wr;
  a->softcap = pr->cap;
  s->lq = calloc((size_t)B, sizeof(int));
  s->lk = calloc((size_t)B, sizeof(int));
  if (!s->lq || !s->lk) return -1;
  int tq = 0, tk = 0;
  for (int b = 0; b < B; b++) {
    s->lq[b] = pr->layout == 1 && b ? ts_rng_int(&rng, 0, pr->sq) : pr->sq;
    s->lk[b] = pr->layout == 1 && b ? ts_rng_int(&rng, 0, pr->sk) : pr->sk;
    tq += s->lq[b];
    tk += s->lk[b];
  }
  size_t es = ts_dtype_size(pr->dt);
  int64_t qrows = pr->layout == 1 ? tq : (int64_t)B * pr->sq;
  int64_t krows = pr->layout == 1 ? tk : (int64_t)B * pr->sk;
  int pages = 0;
  if (pr->layout == 2) {
    int mb = (pr->sk + pr->page - 1) / pr->page;
    pages = B * mb + 3;
    krows = (int64_t)pages * pr->page;
    a->page_size = pr->page;
    a->max_blocks_per_seq = mb;
    a->num_pages = pages;
    if (buf_make(&s->x[TABLE], sizeof(int32_t) * B * mb)) return -1;
    int *perm = malloc(sizeof(int) * pages);
    if (!perm) return -1;
    for (int i = 0; i < pages; i++) perm[i] = i;
    ts_rng_shuffle(&rng, perm, pages);
    for (int i = 0; i < B * mb; i++) ((int32_t *)s->x[TABLE].h)[i] = perm[i];
    free(perm);
    a->block_table = s->x[TABLE].h;
  }
  if (pr->layout) {
    if (buf_make(&s->x[USED], sizeof(int32_t) * B)) return -1;
    int32_t *u = s->x[USED].h;
    for (int b = 0; b < B; b++)
      u[b] = b ? ts_rng_int(&rng, 0, s->lk[b]) : s->lk[b];
    a->seqused_k = u;
  }
  if (pr->layout == 1) {
    if (buf_make(&s->x[CUQ], sizeof(int32_t) * (B + 1)) ||
        buf_make(&s->x[CUK], sizeof(int32_t) * (B + 1)))
      return -1;
    int32_t *cq = s->x[CUQ].h, *ck = s->x[CUK].h;
    cq[0] = ck[0] = 0;
    for (int b = 0; b < B; b++) {
      cq[b + 1] = cq[b] + s->lq[b];
      ck[b + 1] = ck[b] + s->lk[b];
    }
    a->cu_seqlens_q = cq;
    a->cu_seqlens_k = ck;
    a->rows_q = tq; // GPU contexts take the storage rows from here
    a->rows_k = tk;
  }
  if (pr->alibi) {
    if (buf_make(&s->x[SLOPES], sizeof(float) * pr->hq)) return -1;
    for (int h = 0; h < pr->hq; h++)
      ((float *)s->x[SLOPES].h)[h] = (float)pow(2.0, -8.0 * (h + 1) / pr->hq);
    a->alibi_slopes = s->x[SLOPES].h;
  }
  if (pr->sinks) {
    if (buf_make(&s->x[SINKS], sizeof(float) * pr->hq)) return -1;
    for (int h = 0; h < pr->hq; h++)
      ((float *)s->x[SINKS].h)[h] = (float)ts_rng_normal(&rng);
    a->sinks = s->x[SINKS].h;
  }
  // Dense BSHD views; varlen: one batch of all rows; paged: the page pool.
  int dims[8] = {pr->d, pr->d, pr->dv, pr->dv, pr->dv, pr->d, pr->d, pr->dv};
  int heads[8] = {pr->hq, pr->hkv, pr->hkv, pr->hq,
                  pr->hq, pr->hq,  pr->hkv, pr->hkv};
  for (int i = 0; i < 8; i++) {
    int klike = i == K || i == V || i == DK || i == DV;
    int64_t rows = klike ? krows : qrows;
    if (buf_make(&s->x[i], (size_t)rows * heads[i] * dims[i] * es)) return -1;
    fa_tensor t = {s->x[i].h, pr->dt, 0, (int64_t)heads[i] * dims[i], dims[i]};
    if (pr->layout == 0 || (pr->layout == 2 && !klike))
      t.stride_batch = (int64_t)(klike ? pr->sk : pr->sq) * heads[i] * dims[i];
    if (pr->layout == 2 && klike)
      t.stride_batch = (int64_t)pr->page * heads[i] * dims[i];
    s->th[i] = t;
    s->tg[i] = t;
    s->tg[i].data = s->x[i].g;
  }
  fill(&s->x[Q], pr->dt);
  fill(&s->x[K], pr->dt);
  fill(&s->x[V], pr->dt);
  fill(&s->x[DO_], pr->dt);
  // Cases named "... nan in unused slots" (varlen): NaN in every K/V cache
  // slot past seqused_k, rows no query may see; a kernel that reads them
  // into a tile must not let them leak.
  if (strstr(pr->name, "nan in unused slots") && pr->layout == 1) {
    const int32_t *ck = s->x[CUK].h, *u = s->x[USED].h;
    for (int b = 0; b < B; b++)
      for (int64_t r = ck[b] + u[b]; r < ck[b] + s->lk[b]; r++) {
        for (int64_t e = 0; e < (int64_t)pr->hkv * pr->d; e++)
          ts_store(s->x[K].h, pr->dt, r * pr->hkv * pr->d + e, NAN);
        for (int64_t e = 0; e < (int64_t)pr->hkv * pr->dv; e++)
          ts_store(s->x[V].h, pr->dt, r * pr->hkv * pr->dv + e, NAN);
      }
  }
  if (buf_make(&s->x[LSE], sizeof(float) * B * pr->hq * pr->sq)) return -1;
  for (int i = 0; i < NB; i++)
    if (s->x[i].h && upload(s, i)) return -1;
  s->ag = s->ah;
  if (s->ah.cu_seqlens_q) s->ag.cu_seqlens_q = s->x[CUQ].g;
  if (s->ah.cu_seqlens_k) s->ag.cu_seqlens_k = s->x[CUK].g;
  if (s->ah.seqused_k) s->ag.seqused_k = s->x[USED].g;
  if (s->ah.block_table) s->ag.block_table = s->x[TABLE].g;
  if (s->ah.alibi_slopes) s->ag.alibi_slopes = s->x[SLOPES].g;
  if (s->ah.sinks) s->ag.sinks = s->x[SINKS].g;
  return 0;
}

/* ---- comparisons -----------------------------------------------------------
 */

static double *widen(const void *p, fa_dtype t, size_t n) {
  double *d = malloc(sizeof(double) * (n ? n : 1));
  if (d)
    for (size_t i = 0; i < n; i++) d[i] = ts_load(p, t, (int64_t)i);
  return d;
}

/* Relative Frobenius difference of two buffers of n elements. */
static double diff(const void *a, const void *b, fa_dtype t, size_t n) {
  double *x = widen(a, t, n), *y = widen(b, t, n);
  double e = x && y ? ts_rel_err(x, y, n) : INFINITY;
  size_t first = 0;
  if (x && y && ts_nonfinite_parity(x, y, n, &first)) e = INFINITY;
  free(x);
  free(y);
  return e;
}

static double lse_diff(const inst *s, const float *a, const float *b) {
  const prob *pr = &s->pr;
  size_t n = (size_t)pr->b * pr->hq * pr->sq, m = 0;
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
  double e = INFINITY;
  if (x && y) {
    for (int bb = 0; bb < pr->b; bb++)
      for (int h = 0; h < pr->hq; h++)
        for (int i = 0; i < s->lq[bb]; i++) {
          size_t k = ((size_t)bb * pr->hq + h) * pr->sq + i;
          x[m] = a[k];
          y[m++] = b[k];
        }
    size_t first;
    e = ts_nonfinite_parity(x, y, m, &first) ? INFINITY : ts_lse_err(x, y, m);
  }
  free(x);
  free(y);
  return e;
}

static double tol(fa_dtype t) {
  return t == FA_F32 ? 2e-5 : t == FA_F16 ? 4e-3 : 2.5e-2;
}

/* Forward on GPU context c into host copies of o and lse. */
static fa_status ctx_forward(fa_context *c, inst *s, void *o, float *lse) {
  fa_status st = fa_forward(c, &s->ag, s->tg[Q], s->tg[K], s->tg[V], s->tg[O],
                            s->x[LSE].g);
  if (st) return st;
  if ((st = fa_copy_to_host(gpu, o, s->x[O].g, s->x[O].bytes))) return st;
  return fa_copy_to_host(gpu, lse, s->x[LSE].g, s->x[LSE].bytes);
}

static fa_status gpu_forward(inst *s, void *o, float *lse) {
  return ctx_forward(gpu, s, o, lse);
}

/* The backward of s on context c (its device o and lse) into host copies
   g of dq, dk, dv; with `poison` (dense layouts: a paged dk/dv has pages
   no sequence uses, which no backward writes) the device gradients are
   0xff bytes (NaN) first, so that every element must be written. */
static fa_status gpu_backward(fa_context *c, inst *s, void *g[3], int poison) {
  static const int ids[3] = {DQ, DK, DV};
  fa_status st;
  for (int i = 0; i < 3 && poison; i++) {
    memset(g[i], 0xff, s->x[ids[i]].bytes);
    if ((st = fa_copy_to_device(gpu, s->x[ids[i]].g, g[i], s->x[ids[i]].bytes)))
      return st;
  }
  if ((st = fa_backward(c, &s->ag, s->tg[Q], s->tg[K], s->tg[V], s->tg[O],
                        s->tg[DO_], s->x[LSE].g, s->tg[DQ], s->tg[DK],
                        s->tg[DV])))
    return st;
  for (int i = 0; i < 3; i++)
    if ((st = fa_copy_to_host(gpu, g[i], s->x[ids[i]].g, s->x[ids[i]].bytes)))
      return st;
  return FA_OK;
}

/* The CPU backward of s from the GPU's o and lse (host copies), into c's
   dq, dk, dv: both sides then differ only in the backward. */
static fa_status cpu_backward(inst *s, const void *o, const float *lse,
                              void *c[3]) {
  memcpy(s->x[O].h, o, s->x[O].bytes);
  fa_tensor oh = s->th[O], dq = s->th[DQ], dk = s->th[DK], dv = s->th[DV];
  oh.data = s->x[O].h;
  dq.data = c[0];
  dk.data = c[1];
  dv.data = c[2];
  return fa_backward(cpu, &s->ah, s->th[Q], s->th[K], s->th[V], oh, s->th[DO_],
                     lse, dq, dk, dv);
}

/* The kernel a forward plan of s on context c runs ("" if none). */
static void planned_kernel(fa_context *c, inst *s, char *text, size_t n) {
  fa_plan *plan = NULL;
  text[0] = '\0';
  if (fa_plan_create(c, &s->ag, s->tg[Q], s->tg[K], s->tg[V], s->tg[O],
                     &plan) == FA_OK) {
    fa_plan_describe(plan, text, n);
    fa_plan_destroy(plan);
  }
}

static void describe(const prob *p, char *text, size_t n) {
  snprintf(text, n,
           "%s %s b%d sq%d sk%d hq%d hkv%d d%d dv%d causal=%d "
           "win=%d,%d cap=%g alibi=%d sinks=%d layout=%d page=%d",
           p->name, ts_dtype_name(p->dt), p->b, p->sq, p->sk, p->hq, p->hkv,
           p->d, p->dv, p->causal, p->wl, p->wr, (double)p->cap, p->alibi,
           p->sinks, p->layout, p->page);
}

/* GPU (best kernel, then the generic one) against the CPU, and backward. */
/* Cases named "sm90 ..." are shaped for the sm90 kernel (enough q blocks
   that the plan does not split the keys): on an sm_90 device the plan must
   name it, so that these cases really test it. */
static void check_sm90_taken(inst *s, const prob *pr, const char *name) {
  if (strncmp(pr->name, "sm90", 4) != 0) return;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0))
    return;
  char text[512];
  planned_kernel(gpu, s, text, sizeof text);
  if (major == 9 && minor == 0)
    CHECK(strstr(text, "cuda.sm90.") != NULL, "%s: sm90 not planned: %s", name,
          text);
}

static void run_case(const prob *pr, int bwd) {
  char name[256];
  describe(pr, name, sizeof name);
  inst s;
  if (inst_make(&s, pr)) {
    CHECK(0, "%s: setup failed: %s", name, fa_last_error());
    inst_free(&s);
    return;
  }
  size_t no = s.x[O].bytes, nl = s.x[LSE].bytes;
  size_t n_o = no / ts_dtype_size(pr->dt);
  void *o_cpu = calloc(1, no), *o_gpu = calloc(1, no), *o_gen = calloc(1, no);
  float *l_cpu = calloc(1, nl), *l_gpu = calloc(1, nl), *l_gen = calloc(1, nl);
  if (!o_cpu || !o_gpu || !o_gen || !l_cpu || !l_gpu || !l_gen) goto done;
  s.th[O].data = o_cpu;
  fa_status st =
      fa_forward(cpu, &s.ah, s.th[Q], s.th[K], s.th[V], s.th[O], l_cpu);
  CHECK(st == FA_OK, "%s: cpu forward: %s", name, fa_last_error());
  st = gpu_forward(&s, o_gpu, l_gpu);
  CHECK(st == FA_OK, "%s: gpu forward: %s", name, fa_last_error());
  fa_status st2 = ctx_forward(gen, &s, o_gen, l_gen);
  CHECK(st2 == FA_OK, "%s: gpu generic forward: %s", name, fa_last_error());
  if (st || st2) goto done;
  double e1 = diff(o_cpu, o_gpu, pr->dt, n_o),
         e2 = diff(o_cpu, o_gen, pr->dt, n_o);
  double l1 = lse_diff(&s, l_cpu, l_gpu), l2 = lse_diff(&s, l_cpu, l_gen);
  double t = tol(pr->dt);
  CHECK(e1 <= t && l1 <= 1e-5, "%s: gpu vs cpu: o %.3e lse %.3e (tol %.1e)",
        name, e1, l1, t);
  CHECK(e2 <= t && l2 <= 1e-5, "%s: generic vs cpu: o %.3e lse %.3e", name, e2,
        l2);
  printf("%-100s fwd: gpu %.1e generic %.1e lse %.1e\n", name, e1, e2, l1);
  check_sm90_taken(&s, pr, name);
  // Determinism: a second run is bitwise equal.
  void *o_again = calloc(1, no);
  float *l_again = calloc(1, nl);
  if (o_again && l_again && !gpu_forward(&s, o_again, l_again))
    CHECK(!memcmp(o_again, o_gpu, no) && !memcmp(l_again, l_gpu, nl),
          "%s: forward is not deterministic", name);
  free(o_again);
  free(l_again);
  if (bwd) {
    // Backward from the GPU's own o/lse on both sides (the CPU gets them as
    // inputs too, so only the backward differs).
    size_t nq = s.x[DQ].bytes, nk = s.x[DK].bytes, nv = s.x[DV].bytes;
    void *g[3] = {calloc(1, nq), calloc(1, nk), calloc(1, nv)};
    void *c[3] = {calloc(1, nq), calloc(1, nk), calloc(1, nv)};
    size_t nb[3] = {nq, nk, nv};
    if (g[0] && g[1] && g[2] && c[0] && c[1] && c[2]) {
      st = cpu_backward(&s, o_gpu, l_gpu, c);
      CHECK(st == FA_OK, "%s: cpu backward: %s", name, fa_last_error());
      st2 = gpu_backward(gpu, &s, g, 0);
      CHECK(st2 == FA_OK, "%s: gpu backward: %s", name, fa_last_error());
      if (!st && !st2) {
        double e[3];
        for (int i = 0; i < 3; i++)
          e[i] = diff(c[i], g[i], pr->dt, nb[i] / ts_dtype_size(pr->dt));
        double tb = pr->dt == FA_F32 ? 1e-4 : tol(pr->dt);
        CHECK(e[0] <= tb && e[1] <= tb && e[2] <= tb,
              "%s: backward gpu vs cpu: dq %.2e dk %.2e dv %.2e (tol %.1e)",
              name, e[0], e[1], e[2], tb);
        printf("%-100s bwd: dq %.1e dk %.1e dv %.1e\n", name, e[0], e[1], e[2]);
      }
    }
    for (int i = 0; i < 3; i++) {
      free(g[i]);
      free(c[i]);
    }
  }
done:
  free(o_cpu);
  free(o_gpu);
  free(o_gen);
  free(l_cpu);
  free(l_gpu);
  free(l_gen);
  inst_free(&s);
}

/* ---- the deterministic backward (FA_CUDA_DETERMINISTIC=1) -------------- */

/* --deterministic: each tensor-core backward, bound by name, three times on
   the same inputs: dq, dk, dv bitwise equal every time (the key blocks add
   dQ in a fixed order, common/dq_turns.cuh), and within the GPU-vs-CPU
   tolerance. The shapes reach every case of the turn order: no mask (every
   key block on every q block), causal both ways round with sq != sk (key
   blocks that no query sees: a prefix or a suffix), a window, GQA, varlen
   with seqused_k, more key blocks than fit one wave. */
/* Returns how many of the kernels could run here (0: the test SKIPs). */
static int check_deterministic(const char *only) {
  static const char *names[] = {"cuda.sm90.bf16.d128", "cuda.sm90.f16.d64",
                                "cuda.sm80.bf16.d128", "cuda.sm80.f16.d64"};
  const int BR = FA_CAUSAL_BOTTOM_RIGHT, TL = FA_CAUSAL_TOP_LEFT;
  // name dt b sq sk hq hkv d dv causal wl wr cap alibi sinks layout page
  static const prob cases[] = {
      {"full", FA_BF16, 2, 1100, 1300, 8, 2, 128, 128, 0, -1, -1, 0, 0, 0, 0,
       0},
      {"causal br", FA_BF16, 2, 700, 1500, 8, 8, 128, 128, BR, -1, -1, 0, 0, 0,
       0, 0},
      {"causal tl", FA_BF16, 1, 500, 1200, 12, 4, 128, 128, TL, -1, -1, 0, 0, 0,
       0, 0},
      {"window", FA_BF16, 2, 1000, 1000, 4, 1, 128, 128, 0, 200, 70, 0, 0, 0, 0,
       0},
      {"window left only", FA_BF16, 1, 900, 1400, 8, 2, 128, 128, BR, 300, -1,
       0, 0, 0, 0, 0},
      {"varlen causal", FA_BF16, 4, 600, 800, 8, 2, 128, 128, BR, -1, -1, 0, 0,
       0, 1, 0},
      {"long causal", FA_BF16, 1, 4096, 4096, 32, 4, 128, 128, BR, -1, -1, 0, 0,
       0, 0, 0},
  };
  int usable = 0;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    fa_context *c = NULL;
    if (fa_context_create_by_name(&c, names[k])) {
      printf("%s: not usable here (%s): skipped\n", names[k], fa_last_error());
      continue;
    }
    usable++;
    const int d = strstr(names[k], ".d64") ? 64 : 128;
    const fa_dtype dt = strstr(names[k], ".f16.") ? FA_F16 : FA_BF16;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      prob pr = cases[i];
      pr.d = pr.dv = d;
      pr.dt = dt;
      char name[300], base[256];
      describe(&pr, base, sizeof base);
      snprintf(name, sizeof name, "%s: %s", names[k], base);
      if (only && !strstr(name, only)) continue;
      inst s;
      void *g[3][3] = {{0}}, *cq[3] = {0};
      void *o = NULL;
      float *l = NULL;
      if (inst_make(&s, &pr)) {
        CHECK(0, "%s: setup failed: %s", name, fa_last_error());
        inst_free(&s);
        fa_context_destroy(c);
        return usable;
      }
      const size_t nb[3] = {s.x[DQ].bytes, s.x[DK].bytes, s.x[DV].bytes};
      int ok = (o = malloc(s.x[O].bytes)) && (l = malloc(s.x[LSE].bytes));
      for (int r = 0; r < 3; r++)
        for (int t = 0; t < 3; t++) ok = ok && (g[r][t] = malloc(nb[t]));
      for (int t = 0; t < 3; t++) ok = ok && (cq[t] = calloc(1, nb[t]));
      fa_status st = ok ? gpu_forward(&s, o, l) : FA_ERR_OUT_OF_MEMORY;
      CHECK(st == FA_OK, "%s: forward: %s", name, fa_last_error());
      for (int r = 0; r < 3 && !st; r++) {
        st = gpu_backward(c, &s, g[r], 1);
        CHECK(st == FA_OK, "%s: backward %d: %s", name, r, fa_last_error());
      }
      if (!st) {
        for (int r = 1; r < 3; r++)
          for (int t = 0; t < 3; t++)
            CHECK(!memcmp(g[r][t], g[0][t], nb[t]),
                  "%s: run %d's %s differs from run 0's bit for bit", name, r,
                  t == 0   ? "dq"
                  : t == 1 ? "dk"
                           : "dv");
        st = cpu_backward(&s, o, l, cq);
        CHECK(st == FA_OK, "%s: cpu backward: %s", name, fa_last_error());
        double e[3] = {0, 0, 0}, tb = tol(dt);
        for (int t = 0; t < 3 && !st; t++)
          e[t] = diff(cq[t], g[0][t], dt, nb[t] / ts_dtype_size(dt));
        CHECK(!st && e[0] <= tb && e[1] <= tb && e[2] <= tb,
              "%s: gpu vs cpu: dq %.2e dk %.2e dv %.2e (tol %.1e)", name, e[0],
              e[1], e[2], tb);
        printf("%-110s deterministic: dq %.1e dk %.1e dv %.1e\n", name, e[0],
               e[1], e[2]);
      }
      free(o);
      free(l);
      for (int t = 0; t < 3; t++) {
        free(cq[t]);
        for (int r = 0; r < 3; r++) free(g[r][t]);
      }
      inst_free(&s);
    }
    fa_context_destroy(c);
  }
  return usable;
}

/* ---- plumbing
 * ------------------------------------------------------------------ */

static void check_memory_and_errors(void) {
  void *p = NULL;
  fa_status s = fa_malloc(gpu, (size_t)1 << 60, &p);
  CHECK(s == FA_ERR_OUT_OF_MEMORY, "fa_malloc(2^60): %s", fa_status_string(s));
  printf("fa_malloc(2^60): %s: %s\n", fa_status_string(s), fa_last_error());
  char host[64] = {0};
  s = fa_copy_to_host(gpu, host, (void *)(uintptr_t)0x10, sizeof host);
  CHECK(s == FA_ERR_BACKEND && strstr(fa_last_error(), "cudaMemcpy"),
        "copy from a bad pointer: %s: %s", fa_status_string(s),
        fa_last_error());
  printf("copy from a bad pointer: %s: %s\n", fa_status_string(s),
         fa_last_error());
  // The context still works.
  s = fa_malloc(gpu, 4096, &p);
  CHECK(s == FA_OK, "fa_malloc after an error: %s", fa_last_error());
  if (!s) {
    char in[4096], out[4096];
    for (int i = 0; i < 4096; i++) in[i] = (char)(i * 7);
    s = fa_copy_to_device(gpu, p, in, sizeof in);
    if (!s) s = fa_copy_to_host(gpu, out, p, sizeof out);
    CHECK(s == FA_OK && !memcmp(in, out, sizeof in), "round trip");
    fa_free(gpu, p);
  }
  CHECK(fa_synchronize(gpu) == FA_OK, "synchronize: %s", fa_last_error());
  CHECK(fa_context_set_threads(gpu, 4) == FA_ERR_UNSUPPORTED,
        "set_threads on a GPU context");
}

/* A stream of the CUDA runtime: results equal the default stream's. */
static void check_stream(void) {
  prob pr = {"stream", FA_BF16, 2,  200, 300, 4, 2, 128, 128,
             1,        -1,      -1, 0,   0,   0, 0, 0};
  inst s;
  if (inst_make(&s, &pr)) {
    CHECK(0, "stream: setup failed");
    inst_free(&s);
    return;
  }
  size_t no = s.x[O].bytes;
  void *a = calloc(1, no), *b = calloc(1, no);
  float *la = calloc(1, s.x[LSE].bytes), *lb = calloc(1, s.x[LSE].bytes);
  cudaStream_t st = NULL;
  if (a && b && la && lb && cudaStreamCreate(&st) == cudaSuccess) {
    CHECK(gpu_forward(&s, a, la) == FA_OK, "default stream: %s",
          fa_last_error());
    CHECK(fa_context_set_stream(gpu, st) == FA_OK, "set_stream");
    CHECK(gpu_forward(&s, b, lb) == FA_OK, "own stream: %s", fa_last_error());
    CHECK(fa_synchronize(gpu) == FA_OK, "synchronize");
    CHECK(!memcmp(a, b, no), "results differ between streams");
    fa_context_set_stream(gpu, NULL);
    cudaStreamDestroy(st);
  } else {
    CHECK(0, "stream: cudaStreamCreate failed");
  }
  free(a);
  free(b);
  free(la);
  free(lb);
  inst_free(&s);
}

/* fa_merge_states on the device against the CPU's. */
static void check_merge(void) {
  enum { N = 3, B = 2, S = 5, H = 3, D = 72 };
  size_t n = (size_t)B * S * H * D, nl = (size_t)B * H * S;
  fa_dtype dts[N] = {FA_BF16, FA_BF16, FA_F32};
  buf parts[N], lses[N], out = {0}, outl = {0};
  fa_tensor th[N], tg[N];
  const float *lh[N], *lg[N];
  int ok = 1;
  for (int i = 0; i < N; i++) {
    ok &= !buf_make(&parts[i], n * ts_dtype_size(dts[i]));
    ok &= !buf_make(&lses[i], nl * 4);
    if (!ok) break;
    fill(&parts[i], dts[i]);
    for (size_t r = 0; r < nl; r++)
      ((float *)lses[i].h)[r] =
          i == 1 && r % 4 == 0 ? -INFINITY : (float)ts_rng_normal(&rng) * 3;
    fa_copy_to_device(gpu, parts[i].g, parts[i].h, parts[i].bytes);
    fa_copy_to_device(gpu, lses[i].g, lses[i].h, lses[i].bytes);
    fa_tensor t = {parts[i].h, dts[i], (int64_t)S * H * D, H * D, D};
    th[i] = tg[i] = t;
    tg[i].data = parts[i].g;
    lh[i] = lses[i].h;
    lg[i] = lses[i].g;
  }
  ok &= !buf_make(&out, n * 2) && !buf_make(&outl, nl * 4);
  if (ok) {
    fa_tensor oh = {out.h, FA_BF16, (int64_t)S * H * D, H * D, D}, og = oh;
    og.data = out.g;
    void *o_cpu = calloc(1, n * 2);
    float *l_cpu = calloc(nl, 4), *l_gpu = calloc(nl, 4);
    oh.data = o_cpu;
    fa_status s1 = fa_merge_states(cpu, N, th, lh, B, S, H, D, oh, l_cpu);
    fa_status s2 = fa_merge_states(gpu, N, tg, lg, B, S, H, D, og, outl.g);
    CHECK(s1 == FA_OK && s2 == FA_OK, "merge: %s", fa_last_error());
    if (!s1 && !s2 && !fa_copy_to_host(gpu, out.h, out.g, out.bytes) &&
        !fa_copy_to_host(gpu, l_gpu, outl.g, nl * 4)) {
      double e = diff(o_cpu, out.h, FA_BF16, n);
      double *x = widen(l_cpu, FA_F32, nl), *y = widen(l_gpu, FA_F32, nl);
      double el = x && y ? ts_lse_err(x, y, nl) : INFINITY;
      free(x);
      free(y);
      CHECK(e <= 1e-2 && el <= 1e-6, "merge gpu vs cpu: o %.2e lse %.2e", e,
            el);
      printf("merge_states: o %.1e lse %.1e\n", e, el);
    }
    free(o_cpu);
    free(l_cpu);
    free(l_gpu);
  } else {
    CHECK(0, "merge: setup failed");
  }
  for (int i = 0; i < N; i++) {
    free(parts[i].h);
    free(lses[i].h);
    if (parts[i].g) fa_free(gpu, parts[i].g);
    if (lses[i].g) fa_free(gpu, lses[i].g);
  }
  free(out.h);
  free(outl.h);
  if (out.g) fa_free(gpu, out.g);
  if (outl.g) fa_free(gpu, outl.g);
}

/* ---- binding by name: the kernel named runs, or the call fails
 * --------------- */

/* Every kernel of the module: bound by name, a problem it accepts runs on
   it (fa_plan_describe names it, results match the CPU) and one it
   declines fails with FA_ERR_UNSUPPORTED and the reason. */
static void check_by_name(void) {
  static const char *names[] = {"cuda.sm90.bf16.d64",
                                "cuda.sm90.f16.d128",
                                "cuda.sm90.bf16.d256",
                                "cuda.sm80.bf16.d64",
                                "cuda.sm80.f16.d96",
                                "cuda.sm80.bf16.d128",
                                "cuda.sm80.f16.d192",
                                "cuda.sm80.bf16.d256",
                                "cuda.sm80.f16.d64.decode",
                                "cuda.sm80.bf16.d128.decode",
                                "cuda.generic"};
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    const char *name = names[n];
    fa_context *c = NULL;
    if (fa_context_create_by_name(&c, name)) {
      CHECK(0, "%s: fa_context_create_by_name: %s", name, fa_last_error());
      continue;
    }
    int generic = strcmp(name, "cuda.generic") == 0;
    int dim = generic ? 80 : atoi(strstr(name, ".d") + 2);
    fa_dtype dt = generic ? FA_F32 : strstr(name, "bf16") ? FA_BF16 : FA_F16;
    int sm90 = strstr(name, ".sm90.") != NULL;
    // accepted: shaped for the kernel (enough rows for sm90's tile)
    prob ok = {
        "by name", dt, 2, 150, 170, 4, 2, dim, dim, FA_CAUSAL_BOTTOM_RIGHT,
        -1,        -1, 0, 0,   0,   0, 0};
    inst s;
    if (inst_make(&s, &ok)) {
      CHECK(0, "%s: setup failed", name);
      inst_free(&s);
      fa_context_destroy(c);
      continue;
    }
    void *o = calloc(1, s.x[O].bytes), *oc = calloc(1, s.x[O].bytes);
    float *l = calloc(1, s.x[LSE].bytes), *lc = calloc(1, s.x[LSE].bytes);
    char text[512];
    planned_kernel(c, &s, text, sizeof text);
    fa_status st = o && l ? ctx_forward(c, &s, o, l) : FA_ERR_OUT_OF_MEMORY;
    if (sm90 && !(major == 9 && minor == 0)) {
      CHECK(st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "sm_90"),
            "%s on cc %d.%d: %s: %s", name, major, minor, fa_status_string(st),
            fa_last_error());
    } else {
      char want[96];
      snprintf(want, sizeof want, "kernel=%s ", name);
      CHECK(strstr(text, want) != NULL,
            "%s: the plan names another kernel: "
            "%s",
            name, text);
      CHECK(st == FA_OK, "%s: forward: %s", name, fa_last_error());
      s.th[O].data = oc;
      if (!st && oc && lc &&
          !fa_forward(cpu, &s.ah, s.th[Q], s.th[K], s.th[V], s.th[O], lc)) {
        double e = diff(oc, o, dt, s.x[O].bytes / ts_dtype_size(dt));
        CHECK(e <= tol(dt), "%s vs cpu: o %.3e", name, e);
        printf("bound by name %-28s runs it: o %.1e (%s)\n", name, e, text);
      }
    }
    free(o);
    free(oc);
    free(l);
    free(lc);
    inst_free(&s);
    // declined: another head dim (generic: one over its 256)
    prob no = ok;
    no.d = no.dv = generic ? 300 : dim == 64 ? 128 : 64;
    if (inst_make(&s, &no) == 0) {
      void *o2 = calloc(1, s.x[O].bytes);
      float *l2 = calloc(1, s.x[LSE].bytes);
      st = ctx_forward(c, &s, o2, l2);
      CHECK(st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "head_dim"),
            "%s, head_dim %d: %s: %s", name, no.d, fa_status_string(st),
            fa_last_error());
      free(o2);
      free(l2);
    }
    inst_free(&s);
    fa_context_destroy(c);
  }
}

/* ---- no host work on the hot path
 * ---------------------------------------------- */

/* A planned forward and backward of a varlen and of a paged problem,
   recorded in a global-mode capture of the context's stream: any
   host-device copy, synchronisation or allocation on that path would end
   the capture with an error. The graph's replay equals a direct run. */
static void check_capture(void) {
  static const prob cases[] = {
      {"capture varlen", FA_BF16, 3, 150, 200, 8, 2, 128, 128,
       FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 1, 0},
      {"capture paged", FA_BF16, 3, 40, 300, 8, 2, 128, 128, 0, -1, -1, 0, 0, 1,
       2, 16},
      {"capture varlen d64 generic bwd", FA_F16, 2, 90, 120, 4, 4, 64, 64, 0,
       -1, -1, 0, 1, 0, 1, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const prob *pr = &cases[c];
    inst s;
    cudaStream_t stream = NULL;
    fa_plan *pf = NULL, *pb = NULL;
    void *ref = NULL, *got = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (inst_make(&s, pr) || cudaStreamCreate(&stream) != cudaSuccess) {
      CHECK(0, "%s: setup failed", pr->name);
      goto next;
    }
    CHECK(fa_context_set_stream(gpu, stream) == FA_OK, "set_stream");
    fa_status st =
        fa_plan_create(gpu, &s.ag, s.tg[Q], s.tg[K], s.tg[V], s.tg[O], &pf);
    if (!st)
      st = fa_plan_create_backward(gpu, &s.ag, s.tg[Q], s.tg[K], s.tg[V],
                                   s.tg[O], s.tg[DO_], s.tg[DQ], s.tg[DK],
                                   s.tg[DV], &pb);
    CHECK(st == FA_OK, "%s: plans: %s", pr->name, fa_last_error());
    if (st) goto next;
    size_t no = s.x[O].bytes, nq = s.x[DQ].bytes;
    ref = calloc(1, no + nq);
    got = calloc(1, no + nq);
    if (!ref || !got) goto next;
    // Direct run: the reference.
    st = fa_plan_forward(pf, s.tg[Q], s.tg[K], s.tg[V], s.tg[O], s.x[LSE].g);
    if (!st)
      st = fa_plan_backward(pb, s.tg[Q], s.tg[K], s.tg[V], s.tg[O], s.tg[DO_],
                            s.x[LSE].g, s.tg[DQ], s.tg[DK], s.tg[DV]);
    if (!st) st = fa_copy_to_host(gpu, ref, s.x[O].g, no);
    if (!st) st = fa_copy_to_host(gpu, (char *)ref + no, s.x[DQ].g, nq);
    CHECK(st == FA_OK, "%s: direct run: %s", pr->name, fa_last_error());
    if (st) goto next;
    cudaMemsetAsync(s.x[O].g, 0xff, no, stream);
    cudaMemsetAsync(s.x[DQ].g, 0xff, nq, stream);
    cudaStreamSynchronize(stream);
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    fa_status sf = FA_ERR_BACKEND, sb = FA_ERR_BACKEND;
    char why[512] = "";
    if (e == cudaSuccess) {
      sf = fa_plan_forward(pf, s.tg[Q], s.tg[K], s.tg[V], s.tg[O], s.x[LSE].g);
      if (sf) snprintf(why, sizeof why, "forward: %s", fa_last_error());
      sb = fa_plan_backward(pb, s.tg[Q], s.tg[K], s.tg[V], s.tg[O], s.tg[DO_],
                            s.x[LSE].g, s.tg[DQ], s.tg[DK], s.tg[DV]);
      if (sb && !sf) snprintf(why, sizeof why, "backward: %s", fa_last_error());
      e = cudaStreamEndCapture(stream, &graph);
    }
    CHECK(e == cudaSuccess && !sf && !sb, "%s: captured calls: %s %s", pr->name,
          cudaGetErrorString(e), why);
    (void)cudaGetLastError();
    if (e == cudaSuccess && !sf && !sb &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
        cudaGraphLaunch(exec, stream) == cudaSuccess &&
        cudaStreamSynchronize(stream) == cudaSuccess &&
        !fa_copy_to_host(gpu, got, s.x[O].g, no) &&
        !fa_copy_to_host(gpu, (char *)got + no, s.x[DQ].g, nq)) {
      int same = !memcmp(ref, got, no);
      // dQ of the tensor-core backwards adds atomically: compare loosely.
      double e_dq = diff((char *)ref + no, (char *)got + no, pr->dt,
                         nq / ts_dtype_size(pr->dt));
      CHECK(same && e_dq <= 1e-2, "%s: replay differs: o %s, dq %.2e", pr->name,
            same ? "same" : "differs", e_dq);
      printf("%-40s captured (no copy, no sync) and replayed: o equal, dq "
             "%.1e\n",
             pr->name, e_dq);
    } else if (e == cudaSuccess && !sf && !sb) {
      CHECK(0, "%s: graph replay failed", pr->name);
    }
  next:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    fa_plan_destroy(pf);
    fa_plan_destroy(pb);
    free(ref);
    free(got);
    fa_context_set_stream(gpu, NULL);
    if (stream) cudaStreamDestroy(stream);
    inst_free(&s);
  }
}

/* ---- device arrays the core does not check ----------------------------------
 */

/* Unchecked mode: cu_seqlens past rows_q/rows_k or decreasing, seqused_k
   beyond the keys, block-table entries outside [0, num_pages). The calls
   succeed (nothing checks the arrays), results are unspecified, and no
   kernel reads or writes outside the tensors or the pool
   (compute-sanitizer memcheck runs this in --quick). */
static void check_bad_arrays(void) {
  static const prob cases[] = {
      {"bad varlen", FA_BF16, 3, 150, 200, 8, 2, 128, 128,
       FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 1, 0},
      {"bad varlen d64", FA_F16, 3, 100, 130, 4, 4, 64, 64, 0, -1, -1, 0, 0, 0,
       1, 0},
      {"bad paged", FA_BF16, 2, 20, 300, 8, 2, 128, 128, 0, -1, -1, 0, 0, 0, 2,
       16},
      // Enough q blocks for the sm90 kernel: its TMA boxes over the pool.
      {"sm90 bad paged", FA_BF16, 1, 600, 2000, 32, 4, 128, 128,
       FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 2, 16},
  };
  fa_context *ctxs[2] = {gpu, gen};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const prob *pr = &cases[c];
    inst s;
    if (inst_make(&s, pr)) {
      CHECK(0, "%s: setup failed", pr->name);
      inst_free(&s);
      continue;
    }
    if (pr->layout == 1) {
      int32_t *cq = s.x[CUQ].h, *ck = s.x[CUK].h, *u = s.x[USED].h;
      cq[1] = 1 << 30;   // past rows_q
      cq[2] = -5;        // before the start, and decreasing
      ck[1] = ck[3] + 7; // past rows_k
      ck[2] = INT32_MAX;
      u[0] = 1 << 28; // more keys than the sequence has
      u[1] = -3;
    } else {
      int32_t *t = s.x[TABLE].h, *u = s.x[USED].h;
      t[0] = -7;                   // outside the pool
      t[1] = s.ah.num_pages + 100; // past it
      t[3] = INT32_MIN;
      u[0] = 1 << 28;
    }
    for (int i = CUQ; i <= TABLE; i++)
      if (s.x[i].h && upload(&s, i)) CHECK(0, "%s: upload", pr->name);
    for (int k = 0; k < 2; k++) {
      fa_status st = fa_forward(ctxs[k], &s.ag, s.tg[Q], s.tg[K], s.tg[V],
                                s.tg[O], s.x[LSE].g);
      if (!st)
        st = fa_backward(ctxs[k], &s.ag, s.tg[Q], s.tg[K], s.tg[V], s.tg[O],
                         s.tg[DO_], s.x[LSE].g, s.tg[DQ], s.tg[DK], s.tg[DV]);
      if (!st) st = fa_synchronize(ctxs[k]);
      CHECK(st == FA_OK, "%s (%s): %s", pr->name, k ? "generic" : "dispatch",
            fa_last_error());
    }
    printf("%-40s unchecked bad arrays: calls returned, device intact\n",
           pr->name);
    inst_free(&s);
  }
}

/* Explicit positions with one offset per problem (no per-sequence arrays):
   the GPU kernels take them; the CPU is the reference. */
static void check_positions(void) {
  static const prob cases[] = {
      {"positions causal", FA_BF16, 2, 200, 300, 8, 2, 128, 128,
       FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0},
      {"positions window alibi", FA_F16, 1, 150, 150, 4, 4, 64, 64, 0, 40, 3, 0,
       1, 0, 0, 0},
      {"positions varlen", FA_BF16, 3, 130, 140, 4, 2, 128, 128,
       FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 1, 0},
      // More q blocks than SMs: the sm90 kernel on sm_90.
      {"sm90 positions causal", FA_BF16, 2, 700, 900, 40, 8, 128, 128,
       FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0},
      {"sm90 positions window d64", FA_F16, 2, 600, 600, 48, 12, 64, 64, 0, 200,
       0, 0, 0, 0, 0, 0},
  };
  const int64_t offsets[][2] = {
      {1000, 900}, {7, 50}, {0, 0}, {300, 0}, {0, 250}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const prob *pr = &cases[c];
    inst s;
    if (inst_make(&s, pr)) {
      CHECK(0, "%s: setup failed", pr->name);
      inst_free(&s);
      continue;
    }
    fa_attention *as[2] = {&s.ah, &s.ag};
    for (int k = 0; k < 2; k++) {
      as[k]->positions = FA_POSITIONS_EXPLICIT;
      as[k]->q_position = offsets[c][0];
      as[k]->k_position = offsets[c][1];
    }
    size_t no = s.x[O].bytes, n_o = no / ts_dtype_size(pr->dt);
    void *oc = calloc(1, no), *og = calloc(1, no);
    float *lc = calloc(1, s.x[LSE].bytes), *lg = calloc(1, s.x[LSE].bytes);
    s.th[O].data = oc;
    fa_status st =
        fa_forward(cpu, &s.ah, s.th[Q], s.th[K], s.th[V], s.th[O], lc);
    fa_status st2 = gpu_forward(&s, og, lg);
    CHECK(!st && !st2, "%s: cpu %s, gpu %s", pr->name, fa_status_string(st),
          fa_last_error());
    if (!st && !st2) {
      double e = diff(oc, og, pr->dt, n_o), el = lse_diff(&s, lc, lg);
      CHECK(e <= tol(pr->dt) && el <= 1e-5, "%s: gpu vs cpu o %.3e lse %.3e",
            pr->name, e, el);
      char text[512];
      planned_kernel(gpu, &s, text, sizeof text);
      printf("%-40s o %.1e lse %.1e (%s)\n", pr->name, e, el, text);
      check_sm90_taken(&s, pr, pr->name);
    }
    free(oc);
    free(og);
    free(lc);
    free(lg);
    inst_free(&s);
  }
}

int main(int argc, char **argv) {
  int quick = argc > 1 && !strcmp(argv[1], "--quick");
  int deterministic = argc > 1 && !strcmp(argv[1], "--deterministic");
  // The library reads its switches once, at first use: before any context.
  if (deterministic) setenv("FA_CUDA_DETERMINISTIC", "1", 1);
  if (fa_context_create_by_name(&gpu, "cuda")) {
    printf("SKIP: backend cuda is not usable here: %s\n", fa_last_error());
    return TS_SKIP;
  }
  if (fa_context_create_by_name(&gen, "cuda.generic")) {
    printf("FAIL: no cuda.generic context: %s\n", fa_last_error());
    return 1;
  }
  if (fa_context_create(&cpu, FA_BACKEND_CPU, 0)) {
    printf("FAIL: no CPU context: %s\n", fa_last_error());
    return 1;
  }
  uint64_t seed = ts_seed_base();
  ts_rng_seed(&rng, seed);
  printf("test_cuda_gpu: seed 0x%llx, cpu backend %s%s\n",
         (unsigned long long)seed, fa_context_backend(cpu),
         quick           ? " (quick)"
         : deterministic ? " (deterministic)"
                         : "");
  if (deterministic) {
    const int usable = check_deterministic(argc > 2 ? argv[2] : NULL);
    fa_context_destroy(gpu);
    fa_context_destroy(gen);
    fa_context_destroy(cpu);
    if (!usable) {
      printf("SKIP: no tensor-core backward is usable on this device\n");
      return TS_SKIP;
    }
    return ut_finish("cuda.gpu.deterministic");
  }
  // Deliberate API errors would count as errors under compute-sanitizer.
  if (!quick) check_memory_and_errors();
  check_stream();
  check_merge();
  check_capture();
  check_bad_arrays();
  if (!quick) {
    check_by_name();
    check_positions();
  }
  const int BR = FA_CAUSAL_BOTTOM_RIGHT, TL = FA_CAUSAL_TOP_LEFT;
  // name dt b sq sk hq hkv d dv causal wl wr cap alibi sinks layout page
  static const prob quick_cases[] = {
      {"plain", FA_BF16, 2, 130, 200, 4, 2, 128, 128, 0, -1, -1, 0, 0, 0, 0, 0},
      {"causal", FA_F16, 1, 257, 257, 2, 1, 64, 64, BR, -1, -1, 0, 0, 0, 0, 0},
      {"paged", FA_BF16, 3, 40, 300, 4, 1, 128, 128, BR, -1, -1, 0, 0, 1, 2,
       16},
      {"generic", FA_F32, 2, 33, 70, 3, 3, 40, 24, TL, -1, -1, 0, 1, 0, 1, 0},
      {"decode", FA_BF16, 2, 1, 3000, 8, 2, 128, 128, 0, -1, -1, 0, 0, 0, 0, 0},
      // Small enough for racecheck, with more q blocks (140) than an H200
      // has SMs (132), so the sm90 kernel runs and some CTAs take two.
      {"sm90 quick causal", FA_BF16, 1, 200, 300, 70, 10, 128, 128, BR, -1, -1,
       0, 0, 0, 0, 0},
      {"sm90 quick varlen", FA_F16, 2, 150, 130, 70, 70, 64, 64, 0, -1, -1, 0,
       0, 1, 1, 0},
      {"sm90 quick paged", FA_BF16, 1, 200, 600, 70, 10, 128, 128, BR, -1, -1,
       0, 0, 0, 2, 16},
      // Three or more items a CTA, a few key blocks each: the sm90 forward
      // carries its Q and K/V rings' phases from one item to the next, and
      // a stage released twice or never hangs or races only once the rings
      // wrap (bench/gpu/NOTES-cuda.md, run 63).
      {"sm90 quick items", FA_BF16, 1, 128, 400, 400, 50, 128, 128, 0, -1, -1,
       0, 0, 0, 0, 0},
      {"sm90 quick items d64 causal", FA_F16, 1, 192, 300, 420, 60, 64, 64, BR,
       -1, -1, 0, 0, 0, 0, 0},
  };
  static const prob full_cases[] = {
      {"d64", FA_BF16, 2, 300, 300, 4, 4, 64, 64, 0, -1, -1, 0, 0, 0, 0, 0},
      {"d96", FA_F16, 2, 200, 129, 4, 2, 96, 96, BR, -1, -1, 0, 0, 0, 0, 0},
      {"d128 tl", FA_BF16, 2, 300, 170, 4, 2, 128, 128, TL, -1, -1, 0, 0, 0, 0,
       0},
      {"d192", FA_BF16, 1, 150, 250, 2, 2, 192, 192, BR, -1, -1, 0, 0, 0, 0, 0},
      {"d256", FA_F16, 1, 100, 333, 2, 1, 256, 256, 0, -1, -1, 0, 0, 0, 0, 0},
      {"window", FA_BF16, 2, 500, 500, 2, 1, 128, 128, 0, 37, 5, 0, 0, 0, 0, 0},
      {"softcap alibi sinks", FA_F16, 2, 190, 260, 4, 2, 64, 64, BR, -1, -1,
       30.0f, 1, 1, 0, 0},
      {"gqa7", FA_BF16, 1, 77, 400, 14, 2, 128, 128, BR, 100, -1, 0, 0, 0, 0,
       0},
      {"varlen", FA_BF16, 4, 140, 180, 4, 2, 128, 128, BR, -1, -1, 0, 0, 0, 1,
       0},
      {"varlen d64 sinks", FA_F16, 3, 90, 90, 2, 2, 64, 64, 0, -1, -1, 0, 0, 1,
       1, 0},
      {"paged odd page", FA_BF16, 2, 60, 700, 8, 2, 128, 128, 0, -1, -1, 0, 1,
       0, 2, 7},
      {"decode gqa split", FA_F16, 4, 1, 9000, 32, 8, 128, 128, 0, -1, -1, 0, 0,
       0, 2, 64},
      {"decode sinks", FA_BF16, 1, 4, 5000, 4, 4, 64, 64, BR, -1, -1, 0, 0, 1,
       0, 0},
      {"f32 d80", FA_F32, 2, 65, 129, 2, 1, 80, 80, BR, -1, -1, 0, 0, 0, 0, 0},
      {"dv != d", FA_BF16, 2, 70, 90, 2, 2, 128, 64, 0, -1, -1, 0, 0, 0, 0, 0},
      {"d1", FA_F32, 1, 17, 17, 1, 1, 1, 1, BR, -1, -1, 0, 0, 0, 0, 0},
      {"long causal", FA_BF16, 1, 2048, 2048, 2, 2, 128, 128, BR, -1, -1, 0, 0,
       0, 0, 0},
      // Shapes with more q blocks than SMs: the sm90 kernel on sm_90 (its
      // persistent CTAs then take several items each, crossing the K/V
      // ring's phases between items).
      {"sm90 d128 full", FA_BF16, 2, 1100, 1100, 40, 40, 128, 128, 0, -1, -1, 0,
       0, 0, 0, 0},
      {"sm90 d64 causal gqa", FA_F16, 3, 700, 700, 48, 12, 64, 64, BR, -1, -1,
       0, 0, 0, 0, 0},
      {"sm90 d256 window varlen", FA_BF16, 4, 300, 400, 40, 8, 256, 256, 0, 100,
       20, 0, 0, 0, 1, 0},
      {"sm90 d128 softcap alibi sinks", FA_F16, 2, 520, 777, 64, 8, 128, 128,
       BR, -1, -1, 30.0f, 1, 1, 0, 0},
      {"sm90 d128 top-left", FA_BF16, 2, 900, 600, 40, 20, 128, 128, TL, -1, -1,
       0, 0, 0, 0, 0},
      // Top-left causal with sq < sk: key blocks that no query sees (the
      // sm90 backward walked a q block past the sequence for them, and
      // zeroed its rows at a negative offset in shared memory).
      {"d128 top-left short q", FA_BF16, 1, 500, 1200, 12, 4, 128, 128, TL, -1,
       -1, 0, 0, 0, 0, 0},
      {"sm90 d64 varlen odd", FA_BF16, 5, 333, 251, 36, 36, 64, 64, BR, -1, -1,
       0, 0, 0, 1, 0},
      // The sm90 backward zeroes key rows past seqused_k in its tiles.
      {"sm90 d128 varlen nan in unused slots", FA_BF16, 4, 200, 300, 70, 10,
       128, 128, BR, -1, -1, 0, 0, 0, 1, 0},
      {"sm90 d64 varlen nan in unused slots", FA_F16, 3, 260, 390, 48, 48, 64,
       64, 0, -1, -1, 0, 0, 0, 1, 0},
      // Chunked prefill over a paged cache (sm90: one TMA box per page of a
      // key block, or a block-sized slice of a longer page), GQA 8:1.
      {"sm90 paged prefill d128 page 16", FA_BF16, 1, 600, 2500, 32, 4, 128,
       128, BR, -1, -1, 0, 0, 0, 2, 16},
      {"sm90 paged prefill d64 page 64", FA_F16, 2, 500, 2000, 48, 6, 64, 64,
       BR, -1, -1, 0, 0, 0, 2, 64},
      {"sm90 paged prefill d256 page 128", FA_BF16, 2, 300, 1500, 64, 8, 256,
       256, BR, -1, -1, 0, 0, 0, 2, 128},
      {"sm90 paged d128 page 256 softcap alibi sinks", FA_F16, 1, 520, 2500, 64,
       8, 128, 128, BR, -1, -1, 30.0f, 1, 1, 2, 256},
      {"sm90 paged d128 page 8 full", FA_BF16, 1, 700, 1200, 32, 4, 128, 128, 0,
       -1, -1, 0, 0, 0, 2, 8},
  };
  int nq = (int)(sizeof quick_cases / sizeof quick_cases[0]);
  for (int i = 0; i < nq; i++) run_case(&quick_cases[i], 1);
  if (!quick) {
    int nf = (int)(sizeof full_cases / sizeof full_cases[0]);
    for (int i = 0; i < nf; i++)
      run_case(&full_cases[i], full_cases[i].sq * full_cases[i].sk < 1000000);
  }
  fa_context_destroy(gpu);
  fa_context_destroy(gen);
  fa_context_destroy(cpu);
  return ut_finish("cuda.gpu");
}
