// SPDX-License-Identifier: MIT
// What a CUDA kernel receives: the validated problem flattened into one
// plain struct (passed by value as the kernel parameter), plus the plan's
// geometry. Shared by the host code (C11) and the kernels (CUDA), so it holds
// only C types.
#ifndef FA_CUDA_PARAMS_H
#define FA_CUDA_PARAMS_H

#include <stdint.h>

/* A strided [batch|page, seq|slot, heads, dim] view: element strides. */
typedef struct fa_cuda_view {
  void *data;
  int64_t sb, ss, sh; // batch (page), seq (slot), head
} fa_cuda_view;

typedef struct fa_cuda_params {
  // ---- the problem (core's fa_problem, defaults resolved, causal folded
  // into window_right) ----
  int batch, seqlen_q, seqlen_k; // max lengths when varlen
  int heads_q, heads_kv, group;
  int head_dim, head_dim_v;
  float scale, softcap;
  int window_left, window_right; // -1 unbounded
  int top_left;                  // diagonal offset 0 instead of sk - sq
  int varlen_q, varlen_k, paged;
  int dtype; // fa_dtype
  const float *alibi_slopes, *sinks;
  const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k, *block_table;
  int max_blocks_per_seq, page_size;

  // ---- tensors ----
  fa_cuda_view q, k, v, o;
  fa_cuda_view d_o, dq, dk, dv; // backward only
  float *lse;                   // forward output (may be NULL)
  const float *lse_in;          // backward input
  float *delta;                 // backward: rowsum(dO * O), like lse

  // ---- plan ----
  int block_q, block_k;         // B_r (query lanes of a tile), B_c
  int pack_group;               // q heads per tile (GQA packing), else 1
  int block_rows;               // query rows per tile (lanes = rows x heads,
                                // head fastest; block_rows * pack_group
                                // <= block_q)
  int num_q_blocks, num_splits; // per (batch, head) at the max lengths
  int64_t num_work;             // batch * heads_q * q blocks * splits
  float *part_ml;               // split-KV partials: [work][block_q][2]
  float *part_o;                //                    [work][block_q][dv]
  int only_batch;               // backward, paged: the one sequence (else -1)
} fa_cuda_params;

#endif
