// SPDX-License-Identifier: MIT
// What host and device share of the sm90 FP8 forward (sm90_fp8_fwd.cuh):
// its tile, the size of the V^T workspace it needs, and its launcher. Plain
// C (cuda_backend.c includes it).
#ifndef FA_CUDA_SM90_FP8_H
#define FA_CUDA_SM90_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_params.h"

/* Query rows and keys of a tile (2 consumer warpgroups of 64 rows). */
#define FA_SM90_FP8_BLOCK_M 128
#define FA_SM90_FP8_BLOCK_N 128

/* Keys of each (sequence, kv head) slab of V^T: seqlen_k rounded up to the
   key block. */
static inline int64_t fa_sm90_fp8_keys_pad(int64_t seqlen_k) {
  return (seqlen_k + FA_SM90_FP8_BLOCK_N - 1) / FA_SM90_FP8_BLOCK_N *
         FA_SM90_FP8_BLOCK_N;
}

/* Workspace bytes of V^T: batch x heads_kv x head_dim x keys_pad codes. */
static inline size_t fa_sm90_fp8_vt_bytes(int batch, int heads_kv, int head_dim,
                                          int64_t seqlen_k) {
  return (size_t)batch * (size_t)heads_kv * (size_t)head_dim *
         (size_t)fa_sm90_fp8_keys_pad(seqlen_k);
}

/* The launchers (one per compiled input type and head dim): the V^T
   pre-pass into vt (fa_sm90_fp8_vt_bytes of workspace), then the forward;
   o in p->dtype_out (f32, f16, bf16). Return a cudaError_t, or -1 when the
   copy engine cannot address the tensors (nothing launched). */
#ifdef __cplusplus
extern "C" {
#endif
#define FA_SM90_FP8_INST(t, d)                                                 \
  int fa_sm90_fp8_fwd_##t##_d##d(const fa_gpu_params *p, int64_t rows_q,       \
                                 int64_t rows_k, int sms, void *vt,            \
                                 void *stream);
#include "sm90_fp8_instances.h"
#undef FA_SM90_FP8_INST
#ifdef __cplusplus
}
#endif

#endif
