// SPDX-License-Identifier: MIT
// The sm90 FP8 forward's host glue, part of the CUDA module's one host
// translation unit (cuda_backend.c includes it after sm90/sm90_host.h,
// whose device and copy-engine conditions it shares): the compiled
// instantiations, admission, score, plan, the launch and the kernel rows.
//   cuda.sm90.<e4m3|e5m2>.d128  sm_90a FP8 forward (sm90_fp8_fwd.cuh:
//       wgmma, V^T by a pre-pass into the plan's workspace, P in e4m3),
//       descales and any output dtype; no softcap/ALiBi, not paged,
//       forward only. Score 30 (over cuda.sm80.<e4m3|e5m2>.d128's 20 and
//       cuda.generic).
#ifndef FA_CUDA_SM90_FP8_HOST_H
#define FA_CUDA_SM90_FP8_HOST_H

#include "cuda_instances.h"
#include "sm90_fp8.h" // the tile, the V^T workspace, the launchers

/* The sm90 FP8 forward (90a built, head dim 128 in FA_CUDA_HEAD_DIMS). */
typedef int (*fa_sm90_fp8_fwd_fn)(const fa_gpu_params *p, int64_t rows_q,
                                  int64_t rows_k, int sms, void *vt,
                                  void *stream);
FA_CUDA_INSTANCES(sm90_fp8_instance, fa_sm90_fp8_fwd_fn)
static const sm90_fp8_instance sm90_fp8_instances[] = {
#define FA_SM90_FP8_INST(t, d) {FA_DTYPE_##t, d, 0, fa_sm90_fp8_fwd_##t##_d##d},
#include "sm90_fp8_instances.h"
#undef FA_SM90_FP8_INST
    {FA_F32, 0, 0, NULL}};

static fa_sm90_fp8_fwd_fn sm90_fp8_find(fa_dtype dtype, int dim) {
  return sm90_fp8_instance_find(sm90_fp8_instances, dtype, dim, 0);
}

/* ---- admission ----------------------------------------------------------- */

/* Forward only, any output dtype, descales; no score transform (softcap,
   ALiBi, scale <= 0: cuda.generic). */
static int sm90_fp8_supports(const kdesc *k, const fa_kernel_query *q,
                             char *why, size_t len) {
  const fa_problem *p = q->problem;
  if (!tc_fp8_shape_ok(k, q, why, len)) return 0;
  if (p->a.softcap > 0.0f || p->a.alibi_slopes || !(p->a.scale > 0.0f)) {
    (void)snprintf(why, len,
                   "softcap, ALiBi or a scale <= 0 (this FP8 "
                   "kernel has no score transform)");
    return 0;
  }
  if (p->a.batch > 65535 || p->a.heads_kv > 65535) {
    (void)snprintf(why, len,
                   "batch or heads_kv > 65535 (the V^T pre-pass's "
                   "grid dimensions)");
    return 0;
  }
  return sm90_device_ok(q, sm90_fp8_find(k->dtype, k->dim) != NULL,
                        "the sm90 FP8 kernel reads dense or varlen K/V; "
                        "cuda.generic reads the block table",
                        why, len) &&
         sm90_layout_ok(q, why, len);
}

static int sm90_fp8_score(const kdesc *k, const fa_kernel_query *q) {
  (void)k;
  (void)q;
  return 30; // over cuda.sm80.<e4m3|e5m2>.d128 (20) and cuda.generic
}

static fa_status sm90_fp8_plan(const kdesc *k, const char *name,
                               const fa_kernel_query *q, fa_plan_data *d) {
  const fa_problem *p = q->problem;
  const fa_attention *a = &p->a;
  (void)k;
  memset(d, 0, sizeof *d);
  // Scratch: V^T (sm90_fp8_vt.cuh).
  fa_gpu_fixed_plan(p, FA_SM90_FP8_BLOCK_M, FA_SM90_FP8_BLOCK_N, d);
  d->workspace_bytes =
      fa_sm90_fp8_vt_bytes(a->batch, a->heads_kv, a->head_dim, a->seqlen_k);
  fa_status s = plan_reserve(q, d->workspace_bytes);
  if (!s) log_plan(name, d);
  return s;
}

/* ---- launch -------------------------------------------------------------- */

static fa_status fwd_sm90_fp8(void *state, const fa_problem *p,
                              const fa_plan_data *plan, const fa_fwd_args *a) {
  gpu_state *st = state;
  char name[48];
  fa_sm90_fp8_fwd_fn fn = sm90_fp8_find(p->dtype, p->a.head_dim);
  fa_gpu_params q;
  void *vt = NULL;
  fa_status s =
      sm90_fwd_start(st, p, plan, a, fn != NULL, name, sizeof name, &q);
  if (!s) s = plan_scratch(st, plan, &vt);
  if (s) return s;
  return sm90_launched(fn(&q, p->rows_q, p->rows_k, st->units, vt, st->stream),
                       name);
}

/* ---- the kernel rows (cuda_backend.c's table lists them in this order) ----
 */

// clang-format off
#define FA_SM90_FP8_ROWS(ROW) ROW(e4m3, 128) ROW(e5m2, 128)

#define FA_SM90_FP8_FNS(t, d)                                                  \
  KERNEL_FNS(sm90_##t##_d##d, sm90_fp8, 0, t, d, "cuda.sm90." #t ".d" #d)
FA_SM90_FP8_ROWS(FA_SM90_FP8_FNS)

#define FA_SM90_FP8_ENTRY(t, d)                                                \
  ENTRY(sm90_##t##_d##d, "cuda.sm90." #t ".d" #d, fwd_sm90_fp8, NULL),
// clang-format on

#endif
