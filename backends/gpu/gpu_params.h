// SPDX-License-Identifier: MIT
// What a portable GPU kernel receives (by value, as a kernel argument): the
// core's flat problem and plan geometry (core/flat_problem.h, filled by
// the core) and what only a launch has: the tensors, the scratch and the
// backward's sequence. Plain C types, shared by host C11 code and device
// code (HIP, CUDA). Every kernel of the CUDA and HIP modules takes one.
#ifndef FA_GPU_PARAMS_H
#define FA_GPU_PARAMS_H

#include <stdint.h>

#include "flat_problem.h"

/* An input's descale (fa_tensor.descale, a device array): NULL for 1. */
typedef struct fa_gpu_descale_ref {
  const float *data;
  int per_head; // one value per (sequence, kv head), else data[0]
} fa_gpu_descale_ref;

typedef struct fa_gpu_params {
  fa_flat_problem prob; // fa_problem_flat

  // Tensors.
  fa_tensor_view q, k, v, o;
  fa_gpu_descale_ref descale_q, descale_k, descale_v; // forward inputs
  fa_tensor_view d_o, dq, dk, dv;                     // backward only
  float *lse;                                         // forward output, or NULL
  const float *lse_in;                                // backward input
  float *delta;  // backward scratch: rowsum(dO * O), as lse
  int *dq_turns; // deterministic tensor-core backward: per (batch, q head,
                 // 32 q rows), the key blocks that have added their dQ
                 // (backends/cuda/common/dq_turns.cuh); NULL: any order

  fa_flat_plan plan; // fa_plan_flat (a kernel with a fixed tile sets its
                     // own; the backward packs no heads and splits nothing)
  float *part_ml;    // split-KV partials: [work][block_q][2]
  float *part_o;     //                    [work][block_q][dv]
  int only_batch;    // backward, paged: one sequence, else -1
  int pair_items;    // sm90 forward: the items' order (sm90_items.cuh)
} fa_gpu_params;

/* q rows per counter of fa_gpu_params.dq_turns (every tensor-core
   backward's q block is a multiple). */
#define FA_GPU_TURN_ROWS 32

/* Largest head_dim / head_dim_v of the generic kernels (and of every GPU
   kernel so far). */
#define FA_GPU_MAX_HEAD_DIM 256

/* One input of fa_merge_states, as the merge kernel reads it (a device
   array of n of these). */
typedef struct fa_gpu_merge_part {
  const void *o;
  int dtype; // fa_dtype of this part
  int64_t sb, ss, sh;
  const float *lse;
} fa_gpu_merge_part;

/* The generic kernels' launchers (backends/gpu/generic_kernels.h), with a
   module's prefix: FA_GPU_GENERIC_LAUNCHERS(prefix) defines them in a
   device translation unit, this declares them (C linkage) for host code.
   Each enqueues on `stream` and returns the runtime's error code of the
   launch as an int (0: launched).
     _fwd_generic     forward, one wavefront per query row; O and LSE, or
                      the split partials when num_splits > 1
     _combine         merge the split partials, finalise with the sink
     _bwd_delta       D = rowsum(dO * O)
     _bwd_dq, _bwd_dkdv   the gradients (dK/dV: rows past seqused_k zeroed)
     _bwd_zero_paged  paged backward: zero the slots of every real key
     _merge           fa_merge_states */
#define FA_GPU_GENERIC_LAUNCHER_DECLS(prefix)                                  \
  int prefix##_fwd_generic(const fa_gpu_params *p, void *stream);              \
  int prefix##_combine(const fa_gpu_params *p, void *stream);                  \
  int prefix##_bwd_delta(const fa_gpu_params *p, void *stream);                \
  int prefix##_bwd_dq(const fa_gpu_params *p, void *stream);                   \
  int prefix##_bwd_dkdv(const fa_gpu_params *p, void *stream);                 \
  int prefix##_bwd_zero_paged(const fa_gpu_params *p, void *stream);           \
  int prefix##_merge(int n, const fa_gpu_merge_part *desc, int dtype,          \
                     int batch, int seqlen, int heads, int head_dim,           \
                     fa_tensor_view o, float *lse, void *stream);

#endif
