// SPDX-License-Identifier: MIT
// The sm80 kernels' tile table (sm80_tiles.def, sm80_tiles.c) and its plans.
#ifndef FA_CUDA_SM80_TILES_H
#define FA_CUDA_SM80_TILES_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FP8 inputs (sm80_input.cuh) stage a K (or V) block's codes between
   their global load and their decode: in registers, FA_SM80_FP8_STAGE_REGS
   32-bit ones a thread, or, where those and the tile's accumulators
   (FA_SM80_ACC_REGS: O, S, and Q when kept in registers) pass 180, in
   shared memory (a raw K and a raw V block, 2 * block_k * dim bytes more:
   FA_SM80_FP8_STAGE_BYTES). With register staging, nvcc 13's ptxas
   spilled 188-380 bytes a thread at d128-d256 (16-bit inputs: 20-144),
   none at d64 and on the decode tiles, 36 at d96 (whose 12 KB of staging
   would cost the A100 its second CTA per SM). Constant expressions, for
   the kernel's template arguments and the host's table alike. */
#define FA_SM80_ACC_REGS(d, bk, mt, qr)                                        \
  ((mt) * ((d) / 2 + (bk) / 2) + ((qr) ? (mt) * (d) / 4 : 0))
#define FA_SM80_FP8_STAGE_REGS(d, bk, w) ((bk) * (d) / 4 / (32 * (w)))
#define FA_SM80_FP8_SMEM_STAGED(d, bk, w, mt, qr)                              \
  (FA_SM80_ACC_REGS(d, bk, mt, qr) + FA_SM80_FP8_STAGE_REGS(d, bk, w) > 180)
#define FA_SM80_FP8_STAGE_BYTES(d, bk, w, mt, qr)                              \
  (FA_SM80_FP8_SMEM_STAGED(d, bk, w, mt, qr) ? 2 * (bk) * (d) : 0)

/* Tile configurations of the sm80 forward kernel (sm80_tiles.c). */
typedef struct fa_cuda_tile {
  int head_dim;       // = head_dim_v
  int block_q;        // B_r = 16 * m_tiles * warps
  int block_k;        // B_c
  int warps;          // warps per CTA
  int m_tiles;        // 16-row mma tiles per warp
  int q_in_regs;      // Q fragments kept in registers for the whole CTA
  int stages;         // K/V blocks of the cp.async pipeline
  int smem_bytes;     // dynamic shared memory of one CTA
  int fp8_smem_bytes; // the same with FP8 inputs (FA_SM80_FP8_STAGE_BYTES)
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
