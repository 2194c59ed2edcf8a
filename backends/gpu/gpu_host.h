// SPDX-License-Identifier: MIT
// Host code the GPU modules share (cuda_backend.c, hip_backend.c): filling
// fa_gpu_params from the core's validated problem, plan and tensors; the
// admission rules every GPU kernel shares (the 0.2 features they decline,
// alignment); the plans of kernels that fix their own tile; the sizes of
// the split-KV and backward scratch; the merge descriptors; the order of
// the generic backward's launches. Plain C11 with no vendor runtime call:
// each module keeps its own device, stream, workspace and error text, and
// passes the core's services where a failure is reported.
#ifndef FA_GPU_HOST_H
#define FA_GPU_HOST_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_params.h"
#include "plan.h"
#include "seq_rows.h"

static inline fa_gpu_descale_ref fa_gpu_descale_of(const fa_tensor *t) {
  fa_gpu_descale_ref d = {t->descale, t->descale_per_head};
  return d;
}

/* The problem and plan parts: the core's (fa_problem_flat, fa_plan_flat). */
static inline void fa_gpu_fill_core(fa_gpu_params *q, const fa_problem *p,
                                    const fa_plan_data *plan) {
  memset(q, 0, sizeof *q);
  q->prob = fa_problem_flat(p);
  q->plan = fa_plan_flat(plan);
  q->only_batch = -1;
}

static inline void fa_gpu_fill_forward(fa_gpu_params *q, const fa_problem *p,
                                       const fa_plan_data *plan,
                                       const fa_fwd_args *a) {
  fa_gpu_fill_core(q, p, plan);
  q->q = fa_tensor_view_of(&a->q);
  q->k = fa_tensor_view_of(&a->k);
  q->v = fa_tensor_view_of(&a->v);
  q->o = fa_tensor_view_of(&a->o);
  q->descale_q = fa_gpu_descale_of(&a->q);
  q->descale_k = fa_gpu_descale_of(&a->k);
  q->descale_v = fa_gpu_descale_of(&a->v);
  q->lse = a->lse;
}

/* Backward: no GQA packing and no split (the core plans it that way);
   q->delta is the caller's scratch. */
static inline void fa_gpu_fill_backward(fa_gpu_params *q, const fa_problem *p,
                                        const fa_plan_data *plan,
                                        const fa_bwd_args *a) {
  fa_gpu_fill_core(q, p, plan);
  q->plan.pack_group = 1;
  q->plan.num_splits = 1;
  q->plan.num_work = 0;
  q->q = fa_tensor_view_of(&a->q);
  q->k = fa_tensor_view_of(&a->k);
  q->v = fa_tensor_view_of(&a->v);
  q->o = fa_tensor_view_of(&a->o);
  q->d_o = fa_tensor_view_of(&a->d_o);
  q->dq = fa_tensor_view_of(&a->dq);
  q->dk = fa_tensor_view_of(&a->dk);
  q->dv = fa_tensor_view_of(&a->dv);
  q->lse_in = a->lse;
}

/* Scratch bytes of a forward plan's split-KV partials (part_ml, part_o), 0
   when it does not split the keys; fa_gpu_place_split points them into
   the scratch. */
static inline size_t fa_gpu_split_bytes_of(const fa_problem *p,
                                           const fa_plan_data *d) {
  if (d->num_splits <= 1) return 0;
  size_t rows = (size_t)d->num_work * (size_t)d->block_q;
  return rows * (2 + (size_t)p->a.head_dim_v) * sizeof(float);
}

static inline void fa_gpu_place_split(fa_gpu_params *q, void *ws) {
  size_t rows = (size_t)q->plan.num_work * (size_t)q->plan.block_q;
  q->part_ml = (float *)ws;
  q->part_o = (float *)ws + rows * 2;
}

/* Scratch of a tensor-core backward: D = rowsum(dO * O) (one float per lse
   row, rounded to 256 bytes), then the fp32 dQ accumulator (rows_q x
   head_dim) at *acc_at, then the deterministic mode's turn counters (one
   int per 32 q rows of each (batch, q head), at *turns_at: 1/(32 head_dim)
   of the accumulator, so always reserved). Both are zeroed before a run. */
static inline size_t fa_gpu_bwd_scratch(const fa_problem *p, size_t *acc_at,
                                        size_t *turns_at) {
  const fa_attention *a = &p->a;
  size_t rows = (size_t)a->batch * (size_t)a->heads_q * (size_t)a->seqlen_q;
  size_t delta = (rows * sizeof(float) + 255) & ~(size_t)255;
  size_t acc = rows * (size_t)a->head_dim * sizeof(float);
  size_t turns =
      (size_t)a->batch * (size_t)a->heads_q *
      (((size_t)a->seqlen_q + FA_GPU_TURN_ROWS - 1) / FA_GPU_TURN_ROWS) *
      sizeof(int);
  if (acc_at) *acc_at = delta;
  if (turns_at) *turns_at = delta + acc;
  return delta + acc + turns;
}

static inline const char *fa_gpu_dtype_name(fa_dtype t) {
  switch (t) {
  case FA_F32:
    return "f32";
  case FA_F16:
    return "f16";
  case FA_BF16:
    return "bf16";
  case FA_E4M3:
    return "e4m3";
  case FA_E5M2:
    return "e5m2";
  }
  return "?";
}

/* Inputs and outputs as the tensor-core kernels take them: the output
   dtype is the input's and no input has a descale (the generic forward
   takes both: fa_gpu_generic_supports). */
static inline int fa_gpu_plain_io_ok(const fa_kernel_query *kq, char *why,
                                     size_t len) {
  const fa_problem *p = kq->problem;
  const fa_layout *l = kq->layout;
  const int bwd = l && l->op == FA_OP_BACKWARD;
  fa_dtype out = l ? l->o.dtype : p->dtype_out;
  if (p->dtype_out != p->dtype || out != p->dtype) {
    (void)snprintf(
        why, len,
        "output dtype %s differs from the input dtype %s (this "
        "kernel writes o%s in the input dtype)",
        fa_gpu_dtype_name(p->dtype_out != p->dtype ? p->dtype_out : out),
        fa_gpu_dtype_name(p->dtype), bwd ? " and the gradients" : "");
    return 0;
  }
  if (p->descaled || (l && (l->q.descale || l->k.descale || l->v.descale))) {
    (void)snprintf(why, len,
                   "descales (this kernel reads q, k and v as they "
                   "are)");
    return 0;
  }
  return 1;
}

/* The 0.2 features no GPU kernel implements yet, declined with a reason by
   every kernel's supports() (so dispatch says why, and nothing runs a
   problem it would get wrong): per-sequence positions, the accumulating
   backward and dsinks. Explicit positions without per-sequence arrays are
   one diagonal offset for every sequence, which the kernels take
   (fa_gpu_params.shift) while |offset| + the longer length stays below
   2^31 (their row arithmetic is 32-bit, as it is for the aligned offset
   sk - sq). */
static inline int fa_gpu_positions_modes_ok(const fa_kernel_query *kq,
                                            char *why, size_t len) {
  const fa_problem *p = kq->problem;
  const fa_attention *a = &p->a;
  const int bwd = kq->layout && kq->layout->op == FA_OP_BACKWARD;
  if (p->explicit_positions) {
    if (a->q_positions || a->k_positions) {
      (void)snprintf(why, len,
                     "per-sequence positions (q_positions, k_positions): "
                     "the GPU kernels take one diagonal offset per problem");
      return 0;
    }
    int64_t shift = a->q_position - a->k_position;
    int64_t longer = a->seqlen_q > a->seqlen_k ? a->seqlen_q : a->seqlen_k;
    if ((shift < 0 ? -shift : shift) + longer >= INT_MAX) {
      (void)snprintf(why, len,
                     "q_position - k_position = %lld: the GPU kernels "
                     "take |offset| + max(seqlen_q, seqlen_k) < 2^31",
                     (long long)shift);
      return 0;
    }
  }
  if (bwd && a->backward_mode == FA_BACKWARD_ACCUMULATE) {
    (void)snprintf(why, len,
                   "backward_mode FA_BACKWARD_ACCUMULATE (the GPU "
                   "backward overwrites dq, dk and dv)");
    return 0;
  }
  if (bwd && a->dsinks && a->sinks) {
    (void)snprintf(why, len,
                   "dsinks (the GPU backward does not compute the "
                   "sinks' gradient)");
    return 0;
  }
  return 1;
}

/* What every tensor-core kernel's supports() checks first: plain inputs and
   outputs, and the features above. */
static inline int fa_gpu_features_ok(const fa_kernel_query *kq, char *why,
                                     size_t len) {
  return fa_gpu_plain_io_ok(kq, why, len) &&
         fa_gpu_positions_modes_ok(kq, why, len);
}

/* Tensor-core kernels copy 16-byte chunks: every tensor and stride of the
   layout must be 16-byte aligned (fa_explain's layout, NULL, is
   contiguous: aligned when head_dim is a multiple of 8, which every such
   kernel's head dim is). */
static inline int fa_gpu_aligned16(const fa_kernel_query *kq, char *why,
                                   size_t len) {
  if (!kq->layout || kq->layout->align >= 16) return 1;
  (void)snprintf(why, len,
                 "tensors aligned to %d bytes (data or a stride); this "
                 "kernel copies 16-byte chunks",
                 kq->layout->align);
  return 0;
}

/* The plan of a kernel that fixes its own tile: q blocks of block_q rows of
   one head, keys in blocks of block_k, no GQA packing and no kv split;
   blocks visited counted as fa_plan_compute counts them (at the maximum
   lengths). workspace_bytes is the caller's. */
static inline void fa_gpu_fixed_plan(const fa_problem *p, int block_q,
                                     int block_k, fa_plan_data *out) {
  const fa_attention *a = &p->a;
  memset(out, 0, sizeof *out);
  out->block_q = out->block_rows = block_q;
  out->block_k = block_k;
  out->pack_group = 1;
  out->kv_heads_per_tile = 1;
  out->head_dim_pad = a->head_dim;
  out->head_dim_v_pad = a->head_dim_v;
  out->num_q_blocks = (int)(((int64_t)a->seqlen_q + block_q - 1) / block_q);
  out->num_k_blocks = (int)(((int64_t)a->seqlen_k + block_k - 1) / block_k);
  out->num_splits = 1;
  int64_t units = (int64_t)a->batch * a->heads_q;
  out->num_work = units * out->num_q_blocks;
  out->blocks_total = out->num_work * out->num_k_blocks;
  out->blocks_visited = out->blocks_total;
  if (out->num_q_blocks > (1 << 20)) return; // as fa_plan_compute
  const fa_flat_problem f = fa_problem_flat(p);
  int64_t visited = 0;
  for (int qb = 0; qb < out->num_q_blocks; qb++) {
    int kb0, kb1;
    fa_flat_kv_blocks(&f, block_q, block_k, a->seqlen_q, a->seqlen_k, qb, &kb0,
                      &kb1);
    if (kb1 > kb0) visited += kb1 - kb0;
  }
  out->blocks_visited = visited * units;
}

/* Launches of at most INT_MAX workgroups (CTAs). */
static inline fa_status fa_gpu_grid_fits(const fa_core_services *core,
                                         int64_t blocks, const char *what) {
  if (blocks <= INT_MAX) return FA_OK;
  return core->fail(FA_ERR_UNSUPPORTED,
                    "%s: %lld workgroups exceed the "
                    "grid limit",
                    what, (long long)blocks);
}

/* supports() of the generic kernels: head dims up to FA_GPU_MAX_HEAD_DIM;
   the forward takes every input dtype (FP8 decoded by
   backends/gpu/input_decode.h), descales and any output dtype; the
   backward reads 16/32-bit inputs without descales and writes the
   gradients in the input dtype. */
static inline int fa_gpu_generic_supports(const fa_kernel_query *kq, char *why,
                                          size_t len) {
  const fa_problem *p = kq->problem;
  if (kq->layout && kq->layout->op == FA_OP_BACKWARD) {
    if (p->dtype == FA_E4M3 || p->dtype == FA_E5M2) {
      (void)snprintf(why, len,
                     "FP8 inputs (%s) in the backward (the generic GPU "
                     "backward reads 16/32-bit inputs; the CPU backends "
                     "run it)",
                     fa_gpu_dtype_name(p->dtype));
      return 0;
    }
    if (!fa_gpu_plain_io_ok(kq, why, len)) return 0;
  }
  if (!fa_gpu_positions_modes_ok(kq, why, len)) return 0;
  if (p->a.head_dim > FA_GPU_MAX_HEAD_DIM) {
    (void)snprintf(why, len, "head_dim %d > %d", p->a.head_dim,
                   FA_GPU_MAX_HEAD_DIM);
    return 0;
  }
  if (p->a.head_dim_v > FA_GPU_MAX_HEAD_DIM) {
    (void)snprintf(why, len, "head_dim_v %d > %d", p->a.head_dim_v,
                   FA_GPU_MAX_HEAD_DIM);
    return 0;
  }
  return 1;
}

/* Whether the generic backward's grids fit (one wavefront per row, four
   per workgroup): FA_OK, or the failure reported through core. */
static inline fa_status fa_gpu_generic_bwd_fits(const fa_core_services *core,
                                                const fa_flat_problem *f,
                                                const char *what) {
  int64_t rows_q = (int64_t)f->batch * f->heads_q * f->seqlen_q;
  int64_t rows_k = (int64_t)f->batch * f->heads_kv * f->seqlen_k;
  fa_status s = fa_gpu_grid_fits(core, (rows_q + 3) / 4, what);
  return s ? s : fa_gpu_grid_fits(core, (rows_k + 3) / 4, what);
}

/* fa_merge_states' descriptors (host array, n entries, freed by the
   caller), after the head-dim check. */
static inline fa_status
fa_gpu_merge_parts(const fa_core_services *core, const char *backend, int n,
                   const fa_tensor *o_parts, const float *const *lse_parts,
                   int head_dim, fa_gpu_merge_part **out) {
  *out = NULL;
  if (head_dim > FA_GPU_MAX_HEAD_DIM)
    return core->fail(FA_ERR_UNSUPPORTED, "%s: merge with head_dim %d > %d",
                      backend, head_dim, FA_GPU_MAX_HEAD_DIM);
  fa_gpu_merge_part *desc = malloc(sizeof *desc * (size_t)n);
  if (!desc)
    return core->fail(FA_ERR_OUT_OF_MEMORY,
                      "%s: merge descriptors: out of "
                      "memory",
                      backend);
  for (int i = 0; i < n; i++) {
    desc[i].o = o_parts[i].data;
    desc[i].dtype = (int)o_parts[i].dtype;
    desc[i].sb = o_parts[i].stride_batch;
    desc[i].ss = o_parts[i].stride_seq;
    desc[i].sh = o_parts[i].stride_head;
    desc[i].lse = lse_parts[i];
  }
  *out = desc;
  return FA_OK;
}

/* A module's generic backward launchers (FA_GPU_GENERIC_LAUNCHER_DECLS). */
typedef int (*fa_gpu_launch_fn)(const fa_gpu_params *p, void *stream);
typedef struct fa_gpu_bwd_launchers {
  fa_gpu_launch_fn delta, dq, dkdv, zero_paged;
} fa_gpu_bwd_launchers;

/* The generic backward on one stream, in order: D = rowsum(dO * O), dQ,
   then dK/dV; paged pools may share pages between sequences, so their
   named slots are zeroed first and each sequence adds its own. q->delta
   must be set. Returns 0, or the first failed launch's error code with
   *step naming it. */
static inline int fa_gpu_bwd_generic_launch(const fa_gpu_bwd_launchers *l,
                                            fa_gpu_params *q, void *stream,
                                            const char **step) {
  int e;
  *step = "the generic backward (D = rowsum(dO o O))";
  if ((e = l->delta(q, stream))) return e;
  *step = "the generic backward (dQ)";
  if ((e = l->dq(q, stream))) return e;
  *step = "the generic backward (dK, dV)";
  if (!q->prob.paged) return l->dkdv(q, stream);
  *step = "the generic backward (zero dK, dV pages)";
  if ((e = l->zero_paged(q, stream))) return e;
  *step = "the generic backward (dK, dV)";
  for (int b = 0; b < q->prob.batch; b++) {
    q->only_batch = b;
    if ((e = l->dkdv(q, stream))) return e;
  }
  q->only_batch = -1;
  return 0;
}

#endif
