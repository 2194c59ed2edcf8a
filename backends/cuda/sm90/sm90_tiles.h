// SPDX-License-Identifier: MIT
// The sm90 forward's tile table (sm90_tiles.def, sm90_tiles.c).
#ifndef FA_CUDA_SM90_TILES_H
#define FA_CUDA_SM90_TILES_H

#ifdef __cplusplus
extern "C" {
#endif

/* The sm90 forward's tiles (sm90_tiles.def). */
typedef struct fa_cuda_sm90_tile {
  int head_dim, block_m, block_n, stages;
} fa_cuda_sm90_tile;
extern const fa_cuda_sm90_tile fa_cuda_sm90_tiles[];
extern const int fa_cuda_num_sm90_tiles;

/* The row of head_dim, or NULL. */
const fa_cuda_sm90_tile *fa_cuda_sm90_tile_of(int head_dim);

#ifdef __cplusplus
}
#endif

#endif
