// SPDX-License-Identifier: MIT
// Inside the CUDA module: the generic kernels' launchers (C linkage,
// kernels_generic.cu) and the planner inputs the arch glue starts from; each
// arch declares its own tables and launchers beside its kernels (sm80/,
// sm90/). Launchers enqueue on the given stream and return the cudaError_t
// of the launch as an int; the host code (cuda_backend.c and the arch glue)
// turns errors into fa_status.
#ifndef FA_CUDA_INTERNAL_H
#define FA_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_params.h"
#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory space id of the CUDA module (FA_MEMORY_HOST is 0). */
#define FA_MEMORY_CUDA 1

/* ---- launchers: generic kernels (kernels_generic.cu, compiled from
   backends/gpu/generic_kernels.h: cuda.generic) ----------------------------
   fa_cuda_launch_fwd_generic, _combine, _bwd_delta, _bwd_dq, _bwd_dkdv,
   _bwd_zero_paged, _merge (see gpu_params.h). */
FA_GPU_GENERIC_LAUNCHER_DECLS(fa_cuda_launch)

/* The planner's inputs for blocks of at most block_q lanes x block_k keys
   on a device of num_sms SMs (cuda_caps.c says why these). */
void fa_cuda_caps(int num_sms, int block_q, int block_k, int pack_gqa,
                  fa_caps *caps);

#ifdef __cplusplus
}
#endif

#endif
