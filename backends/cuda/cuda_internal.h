// SPDX-License-Identifier: MIT
// Inside the CUDA module: the per-context state, the core's services, and
// the kernel launchers (C linkage; defined in the .cu files). Launchers
// enqueue on the given stream and return the cudaError_t of the launch as an
// int; the host code (cuda_backend.c) turns errors into fa_status.
#ifndef FA_CUDA_INTERNAL_H
#define FA_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory space id of the CUDA module (FA_MEMORY_HOST is 0). */
#define FA_MEMORY_CUDA 1

/* Largest head_dim / head_dim_v any CUDA kernel handles. */
#define FA_CUDA_MAX_HEAD_DIM 256

/* ---- launchers: generic kernels (kernels_generic.cu) ------------------- */

/* Forward, one warp per query row, any dtype / head dims <= 256; writes O
   and LSE (num_splits == 1) or the split partials. */
int fa_cuda_launch_fwd_generic(const fa_cuda_params *p, void *stream);
/* Merge the split partials of every (batch, head, q block), finalise with
   the sink, write O and LSE. */
int fa_cuda_launch_combine(const fa_cuda_params *p, void *stream);
/* Backward: D = rowsum(dO * O); dQ; dK/dV (zeroing rows past seqused_k). */
int fa_cuda_launch_bwd_delta(const fa_cuda_params *p, void *stream);
int fa_cuda_launch_bwd_dq(const fa_cuda_params *p, void *stream);
int fa_cuda_launch_bwd_dkdv(const fa_cuda_params *p, void *stream);
/* Paged backward: zero the dK/dV slots the block table names for the real
   keys of every sequence (before the per-sequence accumulation). */
int fa_cuda_launch_bwd_zero_paged(const fa_cuda_params *p, void *stream);

/* fa_merge_states on the device. desc: device array of n descriptors. */
typedef struct fa_cuda_merge_part {
  const void *o;
  int dtype; // fa_dtype of this part
  int64_t sb, ss, sh;
  const float *lse;
} fa_cuda_merge_part;
int fa_cuda_launch_merge(int n, const fa_cuda_merge_part *desc, int dtype,
                         int batch, int seqlen, int heads, int head_dim,
                         fa_cuda_view o, float *lse, void *stream);

/* ---- launchers: sm80 tensor-core forward (sm80_fwd_*.cu) ----------------- */

/* Tile configurations of the sm80 forward kernel (see cuda_tiles.c). */
typedef struct fa_cuda_tile {
  int head_dim;     // = head_dim_v
  int block_q;      // B_r = 16 * m_tiles * warps
  int block_k;      // B_c
  int warps;        // warps per CTA
  int m_tiles;      // 16-row mma tiles per warp
  int q_in_regs;    // Q fragments kept in registers for the whole CTA
  int smem_bytes;   // dynamic shared memory of one CTA
  const char *name_bf16, *name_f16; // kernel names for logs and benches
} fa_cuda_tile;

extern const fa_cuda_tile fa_cuda_tiles[];
extern const int fa_cuda_num_tiles;
/* Decode tiles (16 lanes), used when the plan's q block fits in 16 lanes. */
extern const fa_cuda_tile fa_cuda_decode_tiles[];
extern const int fa_cuda_num_decode_tiles;

/* Planner capabilities the tile table is built for (cuda_tiles.c). */
extern const size_t fa_cuda_plan_mem_bytes;
extern const int fa_cuda_plan_align, fa_cuda_plan_max_bq, fa_cuda_plan_max_bk;


#ifdef __cplusplus
}
#endif

#endif
