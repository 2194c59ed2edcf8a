// SPDX-License-Identifier: MIT
// The sm90 forward's tile table as data (sm90_tiles.def: one commented row
// per head dim). Plain C, so tests/gpu checks it on the host.
#include "sm90_tiles.h"

#define FA_SM90_TILE(d, bm, bn, st) {d, bm, bn, st},
const fa_cuda_sm90_tile fa_cuda_sm90_tiles[] = {
#include "sm90_tiles.def"
};
const int fa_cuda_num_sm90_tiles =
    (int)(sizeof fa_cuda_sm90_tiles / sizeof fa_cuda_sm90_tiles[0]);
#undef FA_SM90_TILE

const fa_cuda_sm90_tile *fa_cuda_sm90_tile_of(int head_dim) {
  for (int i = 0; i < fa_cuda_num_sm90_tiles; i++)
    if (fa_cuda_sm90_tiles[i].head_dim == head_dim)
      return &fa_cuda_sm90_tiles[i];
  return 0;
}
