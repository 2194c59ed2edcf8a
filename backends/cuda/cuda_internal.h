// SPDX-License-Identifier: MIT
// Inside the CUDA module: the per-context state, the core's services, and
// the kernel launchers (C linkage; defined in the .cu files). Launchers
// enqueue on the given stream and return the cudaError_t of the launch as an
// int; the host code (cuda_backend.c) turns errors into fa_status.
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

/* ---- launchers: sm80 tensor-core forward (sm80_fwd_*.cu) ----------------- */

/* Tile configurations of the sm80 forward kernel (see cuda_tiles.c). */
typedef struct fa_cuda_tile {
  int head_dim;   // = head_dim_v
  int block_q;    // B_r = 16 * m_tiles * warps
  int block_k;    // B_c
  int warps;      // warps per CTA
  int m_tiles;    // 16-row mma tiles per warp
  int q_in_regs;  // Q fragments kept in registers for the whole CTA
  int stages;     // K/V blocks of the cp.async pipeline
  int smem_bytes; // dynamic shared memory of one CTA
  const char *name_bf16, *name_f16; // kernel names for logs and benches
} fa_cuda_tile;

extern const fa_cuda_tile fa_cuda_tiles[];
extern const int fa_cuda_num_tiles;
/* Decode tiles (32 lanes): the kernels cuda.sm80.<dtype>.d<dim>.decode. */
extern const fa_cuda_tile fa_cuda_decode_tiles[];
extern const int fa_cuda_num_decode_tiles;

/* The sm90 forward's tiles (sm90_tiles.def). */
typedef struct fa_cuda_sm90_tile {
  int head_dim, block_m, block_n, stages;
} fa_cuda_sm90_tile;
extern const fa_cuda_sm90_tile fa_cuda_sm90_tiles[];
extern const int fa_cuda_num_sm90_tiles;

/* The row of head_dim (decode: the decode tiles), or NULL. */
const fa_cuda_tile *fa_cuda_tile_of(int decode, int head_dim);
const fa_cuda_sm90_tile *fa_cuda_sm90_tile_of(int head_dim);

/* The planner's inputs for blocks of at most block_q lanes x block_k keys
   on a device of num_sms SMs (cuda_tiles.c says why these). */
void fa_cuda_caps(int num_sms, int block_q, int block_k, int pack_gqa,
                  fa_caps *caps);

/* The plan of the sm80 forward with tile t (main or decode). */
void fa_cuda_sm80_plan(const fa_problem *p, const fa_cuda_tile *t, int num_sms,
                       fa_plan_data *out);

#ifdef __cplusplus
}
#endif

#endif
