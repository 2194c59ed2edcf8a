// SPDX-License-Identifier: MIT
// What a portable GPU kernel receives: the validated problem flattened into
// one plain C struct (passed by value as a kernel argument), the tensors and
// the plan's geometry. Shared by host C11 code and device code (HIP, CUDA),
// so it holds only C types. Every kernel of the CUDA and HIP modules takes
// one (by value).
#ifndef FA_GPU_PARAMS_H
#define FA_GPU_PARAMS_H

#include <stdint.h>

/* A strided [batch|page, seq|slot, heads, dim] view; strides in elements. */
typedef struct fa_gpu_view {
  void *data;
  int64_t sb, ss, sh;
} fa_gpu_view;

/* An input's descale (fa_tensor.descale, a device array): NULL for 1. */
typedef struct fa_gpu_descale_ref {
  const float *data;
  int per_head; // one value per (sequence, kv head), else data[0]
} fa_gpu_descale_ref;

typedef struct fa_gpu_params {
  // The problem: core's fa_problem with defaults resolved and causal folded
  // into window_right.
  int batch, seqlen_q, seqlen_k; // maximum lengths when varlen
  int heads_q, heads_kv, group;
  int head_dim, head_dim_v;
  float scale, softcap;
  int window_left, window_right; // -1 unbounded
  int top_left;                  // diagonal offset 0 instead of sk - sq
  int shift_fixed, shift;        // explicit positions without per-sequence
                                 // arrays: every sequence's diagonal offset
                                 // is `shift` (q_position - k_position)
  int varlen_q, varlen_k, paged;
  // Bounds that no device array may take a kernel past (fa_gpu_len_q/k and
  // the row offsets clamp to them): storage rows of varlen Q and K/V
  // (fa_attention.rows_q / rows_k) and the pages of the pool.
  int64_t rows_q, rows_k;
  int num_pages;
  int dtype;     // fa_dtype of q, k, v
  int dtype_out; // fa_dtype of o (the input's, except on the kernels that
                 // say otherwise: the generic forward)
  const float *alibi_slopes, *sinks;
  const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k, *block_table;
  int max_blocks_per_seq, page_size;

  // Tensors.
  fa_gpu_view q, k, v, o;
  fa_gpu_descale_ref descale_q, descale_k, descale_v; // forward inputs
  fa_gpu_view d_o, dq, dk, dv;                        // backward only
  float *lse;                                         // forward output, or NULL
  const float *lse_in;                                // backward input
  float *delta; // backward scratch: rowsum(dO * O), as lse

  // The plan.
  int block_q, block_k;         // B_r (query lanes of a tile), B_c
  int pack_group;               // q heads per tile (GQA packing), else 1
  int block_rows;               // query rows per tile (lanes = rows x heads,
                                // head fastest)
  int num_q_blocks, num_splits; // per (batch, head unit), at max lengths
  int64_t num_work;             // batch * heads_q / pack * q blocks * splits
  float *part_ml;               // split-KV partials: [work][block_q][2]
  float *part_o;                //                    [work][block_q][dv]
  int only_batch;               // backward, paged: one sequence, else -1
} fa_gpu_params;

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
                     fa_gpu_view o, float *lse, void *stream);

#endif
