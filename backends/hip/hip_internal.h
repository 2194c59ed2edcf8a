// SPDX-License-Identifier: MIT
// Inside the HIP module: constants and the kernel launchers (C linkage,
// defined in the .hip files). A launcher enqueues on the given stream and
// returns the hipError_t of the launch as an int; the host code
// (hip_backend.c) turns errors into fa_status with hipGetErrorString.
#ifndef FA_HIP_INTERNAL_H
#define FA_HIP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory space id of the HIP module (FA_MEMORY_HOST is 0, CUDA's is 1). */
#define FA_MEMORY_HIP 2

/* Largest head_dim / head_dim_v any HIP kernel handles. */
#define FA_HIP_MAX_HEAD_DIM 256

/* Query lanes of one CDNA forward tile: 4 wavefronts x 32 MFMA columns. */
#define FA_CDNA_BLOCK_Q 128

/* ---- generic kernels (hip_generic.hip, from backends/gpu) -------------- */
int fa_hip_launch_fwd_generic(const fa_gpu_params *p, void *stream);
int fa_hip_launch_combine(const fa_gpu_params *p, void *stream);
int fa_hip_launch_bwd_delta(const fa_gpu_params *p, void *stream);
int fa_hip_launch_bwd_dq(const fa_gpu_params *p, void *stream);
int fa_hip_launch_bwd_dkdv(const fa_gpu_params *p, void *stream);
int fa_hip_launch_bwd_zero_paged(const fa_gpu_params *p, void *stream);

typedef struct fa_gpu_merge_part {
  const void *o;
  int dtype; // fa_dtype of this part
  int64_t sb, ss, sh;
  const float *lse;
} fa_gpu_merge_part;
int fa_hip_launch_merge(int n, const fa_gpu_merge_part *desc, int dtype,
                        int batch, int seqlen, int heads, int head_dim,
                        fa_gpu_view o, float *lse, void *stream);

/* ---- CDNA MFMA forward (cdna_fwd_*.hip, one per dtype x head dim) -------- */
/* The instantiations compiled in: FA_CDNA_INST(bf16|f16, dim) per line of
   the generated cdna_instances.h. */
#define FA_CDNA_INST(t, d)                                                     \
  int fa_cdna_fwd_##t##_d##d(const fa_gpu_params *p, void *stream);
#include "cdna_instances.h"
#undef FA_CDNA_INST

#ifdef __cplusplus
}
#endif

#endif
