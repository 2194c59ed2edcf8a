// SPDX-License-Identifier: MIT
// The sm80 kernels' tile table (sm80_tiles.def, sm80_tiles.c) and its plans.
#ifndef FA_CUDA_SM80_TILES_H
#define FA_CUDA_SM80_TILES_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tile configurations of the sm80 forward kernel (sm80_tiles.c). */
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

/* The row of head_dim (decode: the decode tiles), or NULL. */
const fa_cuda_tile *fa_cuda_tile_of(int decode, int head_dim);

/* The plan of the sm80 forward with tile t (main or decode). */
void fa_cuda_sm80_plan(const fa_problem *p, const fa_cuda_tile *t, int num_sms,
                       fa_plan_data *out);

#ifdef __cplusplus
}
#endif

#endif
