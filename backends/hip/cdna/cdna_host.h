// SPDX-License-Identifier: MIT
// The CDNA kernels' host glue, part of the HIP module's one host
// translation unit (hip_backend.c includes it after backends/gpu/
// gpu_backend.h and hip_caps): the compiled instantiations, admission,
// plan, the launch and the kernel rows.
//   hip.cdna.<bf16|f16>.d<64|128|256>  MFMA forward (cdna_fwd.h), head_dim ==
//       head_dim_v, 16-byte aligned tensors; every mask, softcap, ALiBi,
//       sinks, GQA packing, varlen, paged KV, split-KV, LSE. Forward only.
//       Score 20.
#ifndef FA_HIP_CDNA_HOST_H
#define FA_HIP_CDNA_HOST_H

typedef struct cdna_instance {
  fa_dtype dtype;
  int dim;
  fa_gpu_launch_fn launch;
  const char *name;
} cdna_instance;

static const cdna_instance cdna_instances[] = {
#define FA_CDNA_INST(t, d)                                                     \
  {FA_DTYPE_##t, d, fa_cdna_fwd_##t##_d##d, "hip.cdna." #t ".d" #d},
#include "cdna_instances.h"
#undef FA_CDNA_INST
    {FA_F32, 0, NULL, NULL}};

static const cdna_instance *cdna_find(fa_dtype dtype, int dim) {
  for (const cdna_instance *i = cdna_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim) return i;
  return NULL;
}

static fa_status fwd_cdna(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  const cdna_instance *inst = cdna_find(p->dtype, p->a.head_dim);
  if (!inst)
    return core->fail(FA_ERR_BACKEND,
                      "%s: hip.cdna.%s.d%d is not compiled "
                      "in",
                      BACKEND_NAME, fa_gpu_dtype_name(p->dtype), p->a.head_dim);
  return run_forward(state, p, plan, a, inst->launch, inst->name);
}

/* ---- admission and plans ------------------------------------------------- */

static int supports_cdna(const fa_kernel_query *kq, fa_dtype dtype, int dim,
                         char *why, size_t len) {
  const fa_problem *p = kq->problem;
  if (p->dtype != dtype) {
    (void)snprintf(why, len, "dtype is %s; this kernel is %s",
                   fa_gpu_dtype_name(p->dtype), fa_gpu_dtype_name(dtype));
    return 0;
  }
  if (p->a.head_dim != dim || p->a.head_dim_v != dim) {
    (void)snprintf(why, len,
                   "head_dim %d, head_dim_v %d: this kernel is %d, %d",
                   p->a.head_dim, p->a.head_dim_v, dim, dim);
    return 0;
  }
  if (!cdna_find(dtype, dim)) {
    (void)snprintf(why, len, "not compiled in this build (FA_HIP_HEAD_DIMS)");
    return 0;
  }
  return fa_gpu_features_ok(kq, why, len) && fa_gpu_aligned16(kq, why, len);
}

#define CDNA_FNS(t, dm)                                                        \
  static int supports_##t##_d##dm(const fa_kernel_query *q, char *why,         \
                                  size_t len) {                                \
    return supports_cdna(q, FA_DTYPE_##t, dm, why, len);                       \
  }                                                                            \
  static int score_##t##_d##dm(const fa_kernel_query *q) {                     \
    (void)q;                                                                   \
    return 20;                                                                 \
  }                                                                            \
  static fa_status plan_##t##_d##dm(const fa_kernel_query *q,                  \
                                    fa_plan_data *out) {                       \
    return plan_hip(q, out, "hip.cdna." #t ".d" #dm);                          \
  }
CDNA_FNS(bf16, 64)
CDNA_FNS(bf16, 128)
CDNA_FNS(bf16, 256)
CDNA_FNS(f16, 64)
CDNA_FNS(f16, 128)
CDNA_FNS(f16, 256)

#define CDNA_KERNEL(t, dm)                                                     \
  {                                                                            \
    .name = "hip.cdna." #t ".d" #dm, .supports = supports_##t##_d##dm,         \
    .score = score_##t##_d##dm, .plan = plan_##t##_d##dm, .forward = fwd_cdna, \
    .backward = NULL                                                           \
  }
/* The rows of the module's table, in its order. */
#define FA_CDNA_KERNELS                                                        \
  CDNA_KERNEL(bf16, 128), CDNA_KERNEL(f16, 128), CDNA_KERNEL(bf16, 64),        \
      CDNA_KERNEL(f16, 64), CDNA_KERNEL(bf16, 256), CDNA_KERNEL(f16, 256)

#endif
