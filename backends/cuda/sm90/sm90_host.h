// SPDX-License-Identifier: MIT
// The sm90 kernels' host glue, part of the CUDA module's one host
// translation unit (cuda_backend.c includes it after the shared helpers and
// sm80/sm80_host.h): the compiled instantiations, admission (compute
// capability 9.0, what the copy engine can address), score, plan, the
// launches and the kernel rows.
//   cuda.sm90.<bf16|f16>.d<64|128|256>  sm_90a forward (sm90_fwd.cuh over
//       sm90_schedule.cuh: wgmma, TMA, warp specialisation), head_dim ==
//       head_dim_v, tensors the copy engine can address; paged K/V with page
//       sizes that sm90_paged.h cuts into TMA boxes (multiples of 8 that divide
//       the key block or that it divides; others go to sm80); d64/d128 also the
//       backward (sm90_bwd.cuh: wgmma, TMA, dQ by 16-byte reductions). Score
//       30; 10 for seqlen_q < 64 or a problem the sm80 plan splits (fewer q
//       blocks than SMs): the sm80 tiles pack GQA heads and split the keys.
#ifndef FA_CUDA_SM90_HOST_H
#define FA_CUDA_SM90_HOST_H

#include "cuda_instances.h"
#include "sm80/sm80_tiles.h" // the score compares with the sm80 plan
#include "sm90_paged.h"
#include "sm90_tiles.h"

/* The sm90 forward (90a built, head dims 64/128/256 of FA_CUDA_HEAD_DIMS).
   Launchers return a cudaError_t, or -1 when the copy engine cannot
   address the tensors (nothing launched). */
#define FA_SM90_INST(t, d)                                                     \
  int fa_sm90_fwd_##t##_d##d(const fa_gpu_params *p, int64_t rows_q,           \
                             int64_t rows_k, int sms, int serial,              \
                             void *stream);
#include "sm90_instances.h"
#undef FA_SM90_INST

typedef int (*fa_sm90_fwd_fn)(const fa_gpu_params *p, int64_t rows_q,
                              int64_t rows_k, int sms, int serial,
                              void *stream);

/* Their paged-K/V instantiations (FA_CUDA_SM90_PAGED_DIMS), the same
   launcher signature. */
#define FA_SM90_PAGED_INST(t, d)                                               \
  int fa_sm90_fwd_paged_##t##_d##d(const fa_gpu_params *p, int64_t rows_q,     \
                                   int64_t rows_k, int sms, int serial,        \
                                   void *stream);
#include "sm90_paged_instances.h"
#undef FA_SM90_PAGED_INST

/* One table, variant 1 for paged K/V. */
FA_CUDA_INSTANCES(sm90_instance, fa_sm90_fwd_fn)
static const sm90_instance sm90_instances[] = {
#define FA_SM90_INST(t, d) {FA_DTYPE_##t, d, 0, fa_sm90_fwd_##t##_d##d},
#include "sm90_instances.h"
#undef FA_SM90_INST
#define FA_SM90_PAGED_INST(t, d)                                               \
  {FA_DTYPE_##t, d, 1, fa_sm90_fwd_paged_##t##_d##d},
#include "sm90_paged_instances.h"
#undef FA_SM90_PAGED_INST
    {FA_F32, 0, 0, NULL}};

static fa_sm90_fwd_fn sm90_find(fa_dtype dtype, int dim, int paged) {
  return sm90_instance_find(sm90_instances, dtype, dim, paged != 0);
}

/* The sm90 backward (d64/d128), same return convention. */
#define FA_SM90_BWD_INST(t, d)                                                 \
  int fa_sm90_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,            \
                             int64_t rows_q, int64_t rows_k, void *stream);
#include "sm90_bwd_instances.h"
#undef FA_SM90_BWD_INST

typedef int (*fa_sm90_bwd_fn)(const fa_gpu_params *p, float *dq_acc,
                              int64_t rows_q, int64_t rows_k, void *stream);
FA_CUDA_INSTANCES(sm90_bwd_instance, fa_sm90_bwd_fn)
static const sm90_bwd_instance sm90_bwd_instances[] = {
#define FA_SM90_BWD_INST(t, d) {FA_DTYPE_##t, d, 0, fa_sm90_bwd_##t##_d##d},
#include "sm90_bwd_instances.h"
#undef FA_SM90_BWD_INST
    {FA_F32, 0, 0, NULL}};

static fa_sm90_bwd_fn sm90_bwd_find(fa_dtype dtype, int dim) {
  return sm90_bwd_instance_find(sm90_bwd_instances, dtype, dim, 0);
}

/* ---- admission ----------------------------------------------------------- */

/* Whether the sm90 launchers' tensor maps can describe tensor t of `rows`
   storage rows (per batch, or all of them when varlen) and `heads` heads:
   the conditions of make_map (common/tma.cuh) on 16-bit elements, and of
   map_rows (sm90_fp8_fwd.cuh) on FP8 ones. */
static int tma_ok(const char *name, const fa_tensor *t, int64_t rows, int heads,
                  int batch, char *why, size_t len) {
  const int64_t es = t->dtype == FA_E4M3 || t->dtype == FA_E5M2 ? 1 : 2;
  const int64_t ss = t->stride_seq * es, sh = t->stride_head * es;
  const int64_t sb = batch > 1 ? t->stride_batch * es : rows * ss;
  const int64_t lim = (int64_t)1 << 40;
  const char *bad = NULL;
  if ((uintptr_t)t->data % 16 || ss % 16 || sh % 16 || sb % 16)
    bad = "a stride or the data is not 16-byte aligned";
  else if (ss <= 0 || sh <= 0 || sb <= 0)
    bad = "a stride is 0";
  else if (ss >= lim || sh >= lim || sb >= lim)
    bad = "a stride is 2^40 bytes or more";
  else if (rows < 1 || rows > 0xFFFFFFFFll)
    bad = "no storage rows, or 2^32 or more";
  (void)heads;
  if (!bad) return 1;
  (void)snprintf(why, len, "the copy engine cannot address %s (%s)", name, bad);
  return 0;
}

static int sm90_layout_ok(const fa_kernel_query *q, char *why, size_t len) {
  const fa_layout *l = q->layout;
  if (!l) return 1; // contiguous BSHD (fa_explain)
  const fa_problem *p = q->problem;
  const fa_attention *a = &p->a;
  const int bq = p->varlen_q ? 1 : a->batch;
  const int64_t rq = p->varlen_q ? p->rows_q : a->seqlen_q;
  // Paged K/V: the pool, num_pages "batches" of page_size rows.
  const int bk = p->paged ? a->num_pages : p->varlen_k ? 1 : a->batch;
  const int64_t rk = p->paged      ? a->page_size
                     : p->varlen_k ? p->rows_k
                                   : a->seqlen_k;
  if (!tma_ok("q", &l->q, rq, a->heads_q, bq, why, len) ||
      !tma_ok("k", &l->k, rk, a->heads_kv, bk, why, len) ||
      !tma_ok("v", &l->v, rk, a->heads_kv, bk, why, len))
    return 0;
  if (l->op == FA_OP_BACKWARD &&
      !tma_ok("do", &l->d_o, rq, a->heads_q, bq, why, len))
    return 0;
  return 1;
}

/* Paged K/V in the sm90 forward: an instantiation, and pages the producer
   copies as whole TMA boxes (sm90_paged.h). */
static int sm90_paged_ok(const kdesc *k, const fa_problem *p, char *why,
                         size_t len) {
  const fa_cuda_sm90_tile *t = fa_cuda_sm90_tile_of(k->dim);
  const char *bad = NULL;
  if (!sm90_find(k->dtype, k->dim, 1))
    bad = "no paged instantiation in this build (FA_CUDA_SM90_PAGED_DIMS)";
  else if (!t)
    bad = "no sm90_tiles.def row";
  else
    (void)fa_sm90_paged_geometry_ok(p->a.page_size, t->block_n, &bad);
  if (!bad) return 1;
  (void)snprintf(why, len, "paged KV, page_size %d, key block %d: %s",
                 p->a.page_size, t ? t->block_n : 0, bad);
  return 0;
}

/* The sm90 kernels' device, build, TMA and key-range conditions (`paged`:
   why this kernel declines paged KV, and who takes it; NULL when the
   caller admits paged KV itself, sm90_paged_ok). */
static int sm90_device_ok(const fa_kernel_query *q, int built,
                          const char *paged, char *why, size_t len) {
  const fa_problem *p = q->problem;
  int cc = query_cc(q);
  if (cc != 90) {
    (void)snprintf(why, len,
                   "device %d has compute capability %d.%d; this "
                   "kernel is sm_90a",
                   query_device(q), cc / 10, cc % 10);
    return 0;
  }
  if (!built) {
    (void)snprintf(why, len,
                   "not compiled in this build (90a, "
                   "FA_CUDA_HEAD_DIMS)");
    return 0;
  }
  if (p->paged && paged) {
    (void)snprintf(why, len, "paged KV (%s)", paged);
    return 0;
  }
  if (p->a.seqlen_k == 0) {
    (void)snprintf(why, len,
                   "seqlen_k 0 (a TMA map needs rows; the sm80 "
                   "kernels take an empty cache)");
    return 0;
  }
  if (!probed_tma) {
    (void)snprintf(why, len, "the driver has no cuTensorMapEncodeTiled");
    return 0;
  }
  return 1;
}

static int sm90_supports(const kdesc *k, const fa_kernel_query *q, char *why,
                         size_t len) {
  const fa_problem *p = q->problem;
  const int bwd = is_backward(q);
  if (!tc_shape_ok(k, q, why, len)) return 0;
  int built = bwd ? sm90_bwd_find(k->dtype, k->dim) != NULL
                  : sm90_find(k->dtype, k->dim, 0) != NULL;
  if (!sm90_device_ok(q, built,
                      bwd ? "the sm80 backward reads the block table" : NULL,
                      why, len))
    return 0;
  if (p->paged && !bwd && !sm90_paged_ok(k, p, why, len)) return 0;
  if (bwd && !tc_backward_ok(p, why, len)) return 0;
  return sm90_layout_ok(q, why, len);
}

/* Whether the sm80 plan of the problem splits the keys with fewer q blocks
   of 128 rows than SMs: the sm80 tiles then beat the unsplit sm90 one. */
static int sm80_splits(const kdesc *k, const fa_kernel_query *q) {
  const fa_cuda_tile *t = fa_cuda_tile_of(0, k->dim);
  if (!t) return 0;
  fa_plan_data plan;
  fa_cuda_sm80_plan(q->problem, t, query_units(q), &plan);
  const fa_attention *a = &q->problem->a;
  int64_t items = (int64_t)a->batch * a->heads_q * ((a->seqlen_q + 127) / 128);
  return plan.num_splits > 1 && items < query_units(q);
}

static int sm90_score(const kdesc *k, const fa_kernel_query *q) {
  if (is_backward(q)) return 30;
  // Decode and split-KV shapes: a 128-row tile would be mostly padding,
  // or leave SMs idle (the sm80 tiles pack GQA heads, split the keys).
  return q->problem->a.seqlen_q < 64 || sm80_splits(k, q) ? 10 : 30;
}

static fa_status sm90_plan(const kdesc *k, const char *name,
                           const fa_kernel_query *q, fa_plan_data *d) {
  const fa_problem *p = q->problem;
  fa_status s = FA_OK;
  memset(d, 0, sizeof *d);
  if (is_backward(q)) {
    // One CTA per 128 keys; q rows per step as sm90_bwd.cuh's bwd_rows().
    s = tc_backward_plan(p, k->dim == 64 ? 128 : 64, name, d);
  } else {
    const fa_cuda_sm90_tile *t = fa_cuda_sm90_tile_of(k->dim);
    if (!t)
      return core->fail(FA_ERR_BACKEND, "%s: no sm90_tiles.def row for d%d",
                        name, k->dim);
    fa_gpu_fixed_plan(p, t->block_m, t->block_n, d);
  }
  if (!s) s = plan_reserve(q, d->workspace_bytes);
  if (!s) log_plan(name, d);
  return s;
}

/* ---- launches ------------------------------------------------------------ */

/* The result of an sm90 launcher: its -1 is a tensor map the driver
   refused though supports() judged it encodable, else a cudaError_t. */
static fa_status sm90_launched(int err, const char *name) {
  if (err != -1) return launched(err, name);
  return core->fail(FA_ERR_BACKEND,
                    "%s: %s: cuTensorMapEncodeTiled refused "
                    "a tensor that supports() accepted (strides %s)",
                    BACKEND_NAME, name, "or sizes");
}

/* What an sm90 forward does before its launcher (the 16-bit and the FP8
   one): the kernel's name, a compiled launcher (built: the lookup found
   one), the context's device, the launcher's parameters (the launcher
   sets its geometry, the plan's too). */
static fa_status sm90_fwd_start(gpu_state *st, const fa_problem *p,
                                const fa_plan_data *plan, const fa_fwd_args *a,
                                int built, char *name, size_t len,
                                fa_gpu_params *q) {
  kernel_name("sm90", p, name, len);
  if (!built) return core->fail(FA_ERR_BACKEND, "%s: not compiled in", name);
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_fill_forward(q, p, plan, a);
  return FA_OK;
}

static fa_status fwd_sm90(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  gpu_state *st = state;
  char name[48];
  fa_sm90_fwd_fn fn = sm90_find(p->dtype, p->a.head_dim, p->paged);
  fa_gpu_params q;
  fa_status s =
      sm90_fwd_start(st, p, plan, a, fn != NULL, name, sizeof name, &q);
  if (s) return s;
  return sm90_launched(fn(&q, p->rows_q, p->rows_k, st->units,
                          config("FA_SM90_SERIAL") != 0, st->stream),
                       name);
}

static fa_status bwd_sm90(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_bwd_args *a) {
  char name[48];
  kernel_name("sm90", p, name, sizeof name);
  fa_sm90_bwd_fn fn = sm90_bwd_find(p->dtype, p->a.head_dim);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: no backward", name);
  fa_gpu_params q;
  float *dq_acc;
  fa_status s = tc_backward_start(state, p, plan, a, &q, &dq_acc);
  if (s) return s;
  return sm90_launched(
      fn(&q, dq_acc, p->rows_q, p->rows_k, ((gpu_state *)state)->stream), name);
}

/* ---- the kernel rows (cuda_backend.c's table lists them in this order) ----
 */

// clang-format off
#define FA_SM90_ROWS(ROW)                                                      \
  ROW(bf16, 128, bwd_sm90) ROW(f16, 128, bwd_sm90)                             \
  ROW(bf16, 64, bwd_sm90)  ROW(f16, 64, bwd_sm90)                              \
  ROW(bf16, 256, NULL)     ROW(f16, 256, NULL)

#define FA_SM90_FNS(t, d, bwd)                                                 \
  KERNEL_FNS(sm90_##t##_d##d, sm90, 0, t, d, "cuda.sm90." #t ".d" #d)
FA_SM90_ROWS(FA_SM90_FNS)

#define FA_SM90_ENTRY(t, d, bwd)                                               \
  ENTRY(sm90_##t##_d##d, "cuda.sm90." #t ".d" #d, fwd_sm90, bwd),
// clang-format on

#endif
