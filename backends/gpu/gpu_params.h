// SPDX-License-Identifier: MIT
// What a portable GPU kernel receives: the validated problem flattened into
// one plain C struct (passed by value as a kernel argument), the tensors and
// the plan's geometry. Shared by host C11 code and device code (HIP, CUDA),
// so it holds only C types. Used by the HIP module; laid out as the CUDA
// module's fa_cuda_params so that the CUDA side can adopt it unchanged.
#ifndef FA_GPU_PARAMS_H
#define FA_GPU_PARAMS_H

#include <stdint.h>

/* A strided [batch|page, seq|slot, heads, dim] view; strides in elements. */
typedef struct fa_gpu_view {
  void *data;
  int64_t sb, ss, sh;
} fa_gpu_view;

typedef struct fa_gpu_params {
  // The problem: core's fa_problem with defaults resolved and causal folded
  // into window_right.
  int batch, seqlen_q, seqlen_k; // maximum lengths when varlen
  int heads_q, heads_kv, group;
  int head_dim, head_dim_v;
  float scale, softcap;
  int window_left, window_right; // -1 unbounded
  int top_left;                  // diagonal offset 0 instead of sk - sq
  int varlen_q, varlen_k, paged;
  int dtype;                     // fa_dtype
  const float *alibi_slopes, *sinks;
  const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k, *block_table;
  int max_blocks_per_seq, page_size;

  // Tensors.
  fa_gpu_view q, k, v, o;
  fa_gpu_view d_o, dq, dk, dv; // backward only
  float *lse;                  // forward output, or NULL
  const float *lse_in;         // backward input
  float *delta;                // backward scratch: rowsum(dO * O), as lse

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

#endif
