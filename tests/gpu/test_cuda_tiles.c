// SPDX-License-Identifier: MIT
// The CUDA module's tile tables, as plain C on the host: the sm80 plans
// (sm80/sm80_tiles.c) against each row's tile and the core's planner, the
// sm90 table's lookup, every row's shared memory (stage alignment, an
// A100 fits it, decode tiles run 2 CTAs per sm90 SM) and its FP8 staging
// (sm80_input.cuh: whole 16-code loads per thread, registers or shared
// memory by FA_SM80_FP8_SMEM_STAGED, an A100 fits the raw blocks too).
// No GPU needed; labels cuda, unit.
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "cuda_internal.h"
#include "plan.h"
#include "problem.h"
#include "sm80_tiles.h"
#include "sm90_tiles.h"

/* The sm80 plans (sm80_tiles.c): the tile's blocks, the core's counts. */
static void check_tiles(void) {
  for (int decode = 0; decode < 2; decode++)
    for (int i = 0; i < (decode ? fa_cuda_num_decode_tiles : fa_cuda_num_tiles);
         i++) {
      const fa_cuda_tile *t =
          decode ? &fa_cuda_decode_tiles[i] : &fa_cuda_tiles[i];
      CHECK(fa_cuda_tile_of(decode, t->head_dim) == t, "tile_of d%d",
            t->head_dim);
      for (int sq = 1; sq <= 4096; sq *= 8) {
        fa_attention a;
        fa_attention_init(&a);
        a.batch = 2;
        a.seqlen_q = sq;
        a.seqlen_k = 4096;
        a.heads_q = 8;
        a.heads_kv = 2;
        a.head_dim = t->head_dim;
        fa_problem p;
        CHECK(fa_problem_init(&p, &a, FA_BF16) == FA_OK, "tile d%d: problem",
              t->head_dim);
        fa_plan_data plan;
        fa_cuda_sm80_plan(&p, t, 132, &plan);
        CHECK(plan.block_q == t->block_q && plan.block_k == t->block_k,
              "tile d%d sq %d: plan %dx%d, the table %dx%d", t->head_dim, sq,
              plan.block_q, plan.block_k, t->block_q, t->block_k);
        CHECK(plan.block_rows * plan.pack_group <= t->block_q &&
                  (plan.num_q_blocks == 1 ||
                   plan.block_rows * plan.pack_group == t->block_q),
              "tile d%d sq %d: %d rows x %d heads in %d lanes", t->head_dim, sq,
              plan.block_rows, plan.pack_group, t->block_q);
      }
      CHECK(t->block_q == 16 * t->m_tiles * t->warps,
            "tile d%d: block_q != 16 * m_tiles * warps", t->head_dim);
      printf("%s d%-3d: %3d x %2d, %d warps x %d m-tiles, Q in %s, %d "
             "stages, %6d bytes smem: plans match\n",
             decode ? "decode tile" : "tile", t->head_dim, t->block_q,
             t->block_k, t->warps, t->m_tiles,
             t->q_in_regs ? "registers" : "smem", t->stages, t->smem_bytes);
    }
  for (int i = 0; i < fa_cuda_num_sm90_tiles; i++)
    CHECK(fa_cuda_sm90_tile_of(fa_cuda_sm90_tiles[i].head_dim) ==
              &fa_cuda_sm90_tiles[i],
          "sm90 tile_of");
}

/* Shared memory of a tile row: its layout's constraints, and how many CTAs
   fit on an SM (1 KB per CTA reserved by the driver). */
static int ctas_per_sm(const fa_cuda_tile *t, int sm_bytes) {
  return sm_bytes / (t->smem_bytes + 1024);
}
static void check_smem(const fa_cuda_tile *t, const char *kind) {
  CHECK(t->stages >= 2, "%s d%d: %d stages", kind, t->head_dim, t->stages);
  if (t->stages < 2) return;
  // Rows: Q, then `stages` of K and of V (sm80_fwd.cuh).
  int rows = t->block_q + 2 * t->stages * t->block_k;
  int pitch_bytes = t->smem_bytes / rows;
  CHECK(t->smem_bytes % rows == 0 && pitch_bytes >= 2 * t->head_dim,
        "%s d%d: %d bytes of smem are no %d rows of the head dim", kind,
        t->head_dim, t->smem_bytes, rows);
  // sm80_fwd.cuh's swizzle needs every stage base 1024-byte aligned.
  CHECK(t->block_q * pitch_bytes % 1024 == 0 &&
            t->block_k * pitch_bytes % 1024 == 0,
        "%s d%d: stage bases not 1024-byte aligned", kind, t->head_dim);
  CHECK(t->smem_bytes <= 163 * 1024,
        "%s d%d: %d bytes of smem exceed an A100's 163 KB", kind, t->head_dim,
        t->smem_bytes);
}

/* FP8 inputs through tile t: Q and each K/V block split into whole 16-code
   loads per thread (fp8_rows' static_assert, checked here for every row
   so a new row fails on the host first); the staging choice and its smem.
   The FP8 kernels keep each row's CTAs per SM where staging is in
   registers; in shared memory they may lose one, never fit none. */
static void check_fp8_staging(const fa_cuda_tile *t, const char *kind) {
  const int threads = 32 * t->warps, c16 = t->head_dim / 16;
  CHECK(t->head_dim % 16 == 0 && (t->block_q * c16) % threads == 0 &&
            (t->block_k * c16) % threads == 0,
        "%s d%d: FP8 rows are no whole 16-code loads per thread", kind,
        t->head_dim);
  const int staged = FA_SM80_FP8_SMEM_STAGED(t->head_dim, t->block_k, t->warps,
                                             t->m_tiles, t->q_in_regs),
            extra = t->fp8_smem_bytes - t->smem_bytes;
  CHECK(extra == (staged ? 2 * t->block_k * t->head_dim : 0),
        "%s d%d: FP8 smem %d = %d + %d, staged %d", kind, t->head_dim,
        t->fp8_smem_bytes, t->smem_bytes, extra, staged);
  CHECK(t->fp8_smem_bytes <= 163 * 1024,
        "%s d%d: %d bytes of FP8 smem exceed an A100's 163 KB", kind,
        t->head_dim, t->fp8_smem_bytes);
  CHECK(staged ||
            FA_SM80_FP8_STAGE_REGS(t->head_dim, t->block_k, t->warps) <= 16,
        "%s d%d: %d staging registers", kind, t->head_dim,
        FA_SM80_FP8_STAGE_REGS(t->head_dim, t->block_k, t->warps));
  printf("%s d%-3d FP8: codes staged in %s (%d registers + %d of "
         "accumulators), %6d bytes smem: %d CTAs per sm80 SM, %d per sm90\n",
         kind, t->head_dim, staged ? "smem" : "registers",
         staged ? 0 : FA_SM80_FP8_STAGE_REGS(t->head_dim, t->block_k, t->warps),
         FA_SM80_ACC_REGS(t->head_dim, t->block_k, t->m_tiles, t->q_in_regs),
         t->fp8_smem_bytes, 164 * 1024 / (t->fp8_smem_bytes + 1024),
         228 * 1024 / (t->fp8_smem_bytes + 1024));
}

/* Every row's smem; decode tiles: the planner's splits fill whole waves of
   num_workers = 2 CTAs per SM (cuda_backend.c), so at least 2 must fit on
   an sm90 SM (228 KB); fewer would run each wave in two. */
static void check_tile_smem(void) {
  for (int i = 0; i < fa_cuda_num_tiles; i++) {
    check_smem(&fa_cuda_tiles[i], "tile");
    check_fp8_staging(&fa_cuda_tiles[i], "tile");
  }
  for (int i = 0; i < fa_cuda_num_decode_tiles; i++) {
    const fa_cuda_tile *t = &fa_cuda_decode_tiles[i];
    check_smem(t, "decode tile");
    check_fp8_staging(t, "decode tile");
    CHECK(t->fp8_smem_bytes == t->smem_bytes,
          "decode tile d%d: FP8 codes staged in smem (%d bytes)", t->head_dim,
          t->fp8_smem_bytes);
    CHECK(t->block_q == 16 * t->m_tiles * t->warps,
          "decode tile d%d: block_q != 16 * m_tiles * warps", t->head_dim);
    CHECK(ctas_per_sm(t, 228 * 1024) >= 2,
          "decode tile d%d: %d bytes of smem leave %d CTA(s) per sm90 SM",
          t->head_dim, t->smem_bytes, ctas_per_sm(t, 228 * 1024));
    printf("decode tile d%-3d: %2d x %2d, %d stages, %6d bytes smem: %d "
           "CTAs per sm90 SM, %d per sm80 SM\n",
           t->head_dim, t->block_q, t->block_k, t->stages, t->smem_bytes,
           ctas_per_sm(t, 228 * 1024), ctas_per_sm(t, 164 * 1024));
  }
}

int main(void) {
  check_tiles();
  check_tile_smem();
  return ut_finish("test_cuda_tiles");
}
