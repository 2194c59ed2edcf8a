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

/* Query lanes of one CDNA forward tile: 4 wavefronts x 32 MFMA columns. */
#define FA_CDNA_BLOCK_Q 128

/* ---- generic kernels (hip_generic.hip, compiled from
   backends/gpu/generic_kernels.h: hip.generic) -------------------------------
   fa_hip_launch_fwd_generic, _combine, _bwd_delta, _bwd_dq, _bwd_dkdv,
   _bwd_zero_paged, _merge (see gpu_params.h). */
FA_GPU_GENERIC_LAUNCHER_DECLS(fa_hip_launch)

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
