// SPDX-License-Identifier: MIT
// The sm80 kernels' host glue, part of the CUDA module's one host
// translation unit (cuda_backend.c includes it after the shared helpers, as
// it includes backends/gpu/gpu_backend.h): the compiled instantiations,
// admission, score, plan, the launches and the kernel rows.
//   cuda.sm80.<bf16|f16>.d<64|96|128|192|256>  tensor-core forward
//       (sm80_fwd.cuh, tile table sm80_tiles.def), head_dim == head_dim_v,
//       16-byte aligned tensors; d64/d128 also the backward (sm80_bwd.cuh:
//       dQ through fp32 atomics; not paged, no softcap/ALiBi). Score 20.
//   cuda.sm80.<bf16|f16>.d<64|128>.decode  the same kernel with the decode
//       tile (32 lanes): score 25 when the whole q block of a (sequence,
//       kv head) fits its lanes, else 1. Forward only.
//   cuda.sm80.<e4m3|e5m2>.d<64|96|128|192|256>[.decode]  the same kernels
//       over FP8 inputs (sm80_input.cuh: rows decoded to f16 tiles), with
//       descales and any output dtype; forward only. Scores as above: over
//       cuda.generic, under cuda.sm90.<e4m3|e5m2>.d128 (30) where that
//       one takes the problem.
#ifndef FA_CUDA_SM80_HOST_H
#define FA_CUDA_SM80_HOST_H

#include "cuda_instances.h"
#include "sm80_tiles.h"

/* The sm80 forward (generated list, FA_CUDA_HEAD_DIMS): variant 0 is a head
   dim's main tile, 1 its decode tile. */
#define FA_SM80_INST(t, d, v)                                                  \
  int fa_sm80_fwd_##t##_d##d##_v##v(const fa_gpu_params *p, void *stream);
#include "sm80_instances.h"
#undef FA_SM80_INST

typedef int (*fa_sm80_fwd_fn)(const fa_gpu_params *p, void *stream);
FA_CUDA_INSTANCES(sm80_instance, fa_sm80_fwd_fn)
static const sm80_instance sm80_instances[] = {
#define FA_SM80_INST(t, d, v)                                                  \
  {FA_DTYPE_##t, d, v, fa_sm80_fwd_##t##_d##d##_v##v},
#include "sm80_instances.h"
#undef FA_SM80_INST
    {FA_F32, 0, 0, NULL}};

static fa_sm80_fwd_fn sm80_find(fa_dtype dtype, int dim, int variant) {
  return sm80_instance_find(sm80_instances, dtype, dim, variant);
}

/* The sm80 backward, per (dtype, head dim). */
#define FA_SM80_BWD_INST(t, d)                                                 \
  int fa_sm80_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,            \
                             void *stream);
#include "sm80_bwd_instances.h"
#undef FA_SM80_BWD_INST

typedef int (*fa_sm80_bwd_fn)(const fa_gpu_params *p, float *dq_acc,
                              void *stream);
FA_CUDA_INSTANCES(sm80_bwd_instance, fa_sm80_bwd_fn)
static const sm80_bwd_instance sm80_bwd_instances[] = {
#define FA_SM80_BWD_INST(t, d) {FA_DTYPE_##t, d, 0, fa_sm80_bwd_##t##_d##d},
#include "sm80_bwd_instances.h"
#undef FA_SM80_BWD_INST
    {FA_F32, 0, 0, NULL}};

static fa_sm80_bwd_fn sm80_bwd_find(fa_dtype dtype, int dim) {
  return sm80_bwd_instance_find(sm80_bwd_instances, dtype, dim, 0);
}

/* ---- admission, score, plan (k->variant: 1 for the decode tile) ---------- */

static int sm80_supports(const kdesc *k, const fa_kernel_query *q, char *why,
                         size_t len) {
  const int bwd = is_backward(q);
  const int fp8 = k->dtype == FA_E4M3 || k->dtype == FA_E5M2;
  if (!(fp8 ? tc_fp8_shape_ok(k, q, why, len) : tc_shape_ok(k, q, why, len)))
    return 0;
  int built = bwd ? sm80_bwd_find(k->dtype, k->dim) != NULL
                  : sm80_find(k->dtype, k->dim, k->variant) != NULL;
  if (!built) {
    (void)snprintf(why, len, "not compiled in this build (FA_CUDA_HEAD_DIMS)");
    return 0;
  }
  return !bwd || tc_backward_ok(q->problem, why, len);
}

/* Whether the main tile's plan has one q block that the decode tile's
   lanes hold (a few queries x the packed GQA heads). */
static int decode_sized(const kdesc *k, const fa_kernel_query *q) {
  const fa_cuda_tile *t = fa_cuda_tile_of(0, k->dim);
  const fa_cuda_tile *td = fa_cuda_tile_of(1, k->dim);
  if (!t || !td) return 0;
  fa_caps caps;
  fa_plan_data plan;
  fa_cuda_caps(query_units(q), t->block_q, t->block_k, 1, &caps);
  fa_plan_compute(q->problem, &caps, &plan);
  return plan.num_q_blocks == 1 && plan.block_q <= td->block_q;
}

static int sm80_score(const kdesc *k, const fa_kernel_query *q) {
  if (!k->variant) return 20;
  return decode_sized(k, q) ? 25 : 1;
}

static fa_status sm80_plan(const kdesc *k, const char *name,
                           const fa_kernel_query *q, fa_plan_data *d) {
  const fa_problem *p = q->problem;
  fa_status s;
  memset(d, 0, sizeof *d);
  if (is_backward(q)) {
    // One CTA per 128 keys; q rows per step as sm80_bwd.cuh's bwd_rows().
    s = tc_backward_plan(p, k->dim >= 128 ? 32 : 64, name, d);
  } else {
    const fa_cuda_tile *t = fa_cuda_tile_of(k->variant, k->dim);
    if (!t)
      return core->fail(FA_ERR_BACKEND, "%s: no sm80_tiles.def row for d%d",
                        name, k->dim);
    fa_cuda_sm80_plan(p, t, query_units(q), d);
    d->workspace_bytes = fa_gpu_split_bytes_of(p, d);
    s = grid_fits(d->num_work, name);
  }
  if (!s) s = plan_reserve(q, d->workspace_bytes);
  if (!s) log_plan(name, d);
  return s;
}

/* ---- launches ------------------------------------------------------------ */

static fa_status fwd_sm80_variant(void *state, const fa_problem *p,
                                  const fa_plan_data *plan,
                                  const fa_fwd_args *a, int decode) {
  char name[48];
  kernel_name("sm80", p, name, sizeof name);
  if (decode) strncat(name, ".decode", sizeof name - strlen(name) - 1);
  fa_gpu_launch_fn fn = sm80_find(p->dtype, p->a.head_dim, decode);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: not compiled in", name);
  return run_forward(state, p, plan, a, fn, name);
}

static fa_status fwd_sm80(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  return fwd_sm80_variant(state, p, plan, a, 0);
}

static fa_status fwd_decode(void *state, const fa_problem *p,
                            const fa_plan_data *plan, const fa_fwd_args *a) {
  return fwd_sm80_variant(state, p, plan, a, 1);
}

static fa_status bwd_sm80(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_bwd_args *a) {
  char name[48];
  kernel_name("sm80", p, name, sizeof name);
  fa_sm80_bwd_fn fn = sm80_bwd_find(p->dtype, p->a.head_dim);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: no backward", name);
  fa_gpu_params q;
  float *dq_acc;
  fa_status s = tc_backward_start(state, p, plan, a, &q, &dq_acc);
  if (s) return s;
  return launched(fn(&q, dq_acc, ((gpu_state *)state)->stream), name);
}

/* ---- the kernel rows (cuda_backend.c's table lists them in this order) ----
 */

// d64/d128 have tensor-core backwards; the other dims' backward is
// cuda.generic's. FP8 rows are forward only (the CPU runs their backward).
// clang-format off
#define FA_SM80_ROWS(ROW)                                                      \
  ROW(bf16, 128, bwd_sm80) ROW(f16, 128, bwd_sm80)                             \
  ROW(bf16, 64, bwd_sm80)  ROW(f16, 64, bwd_sm80)                              \
  ROW(bf16, 256, NULL)     ROW(f16, 256, NULL)                                 \
  ROW(bf16, 192, NULL)     ROW(f16, 192, NULL)                                 \
  ROW(bf16, 96, NULL)      ROW(f16, 96, NULL)                                  \
  ROW(e4m3, 128, NULL)     ROW(e5m2, 128, NULL)                                \
  ROW(e4m3, 64, NULL)      ROW(e5m2, 64, NULL)                                 \
  ROW(e4m3, 256, NULL)     ROW(e5m2, 256, NULL)                                \
  ROW(e4m3, 192, NULL)     ROW(e5m2, 192, NULL)                                \
  ROW(e4m3, 96, NULL)      ROW(e5m2, 96, NULL)
#define FA_SM80_DECODE_ROWS(ROW)                                               \
  ROW(bf16, 128, NULL) ROW(f16, 128, NULL)                                     \
  ROW(bf16, 64, NULL)  ROW(f16, 64, NULL)                                      \
  ROW(e4m3, 128, NULL) ROW(e5m2, 128, NULL)                                    \
  ROW(e4m3, 64, NULL)  ROW(e5m2, 64, NULL)

#define FA_SM80_FNS(t, d, bwd)                                                 \
  KERNEL_FNS(sm80_##t##_d##d, sm80, 0, t, d, "cuda.sm80." #t ".d" #d)
#define FA_SM80_DECODE_FNS(t, d, bwd)                                          \
  KERNEL_FNS(decode_##t##_d##d, sm80, 1, t, d, "cuda.sm80." #t ".d" #d ".decode")
FA_SM80_ROWS(FA_SM80_FNS)
FA_SM80_DECODE_ROWS(FA_SM80_DECODE_FNS)

#define FA_SM80_ENTRY(t, d, bwd)                                               \
  ENTRY(sm80_##t##_d##d, "cuda.sm80." #t ".d" #d, fwd_sm80, bwd),
#define FA_SM80_DECODE_ENTRY(t, d, bwd)                                        \
  ENTRY(decode_##t##_d##d, "cuda.sm80." #t ".d" #d ".decode", fwd_decode, bwd),
// clang-format on

#endif
