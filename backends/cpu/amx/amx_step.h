// SPDX-License-Identifier: MIT
// The AMX tile state for cpu.amxbf16.bf16, included by cpu_kernels.h through
// FA_TILE_STEP_HEADER: the tile configuration per thread (released after
// its work items, FA_TILE_STEP_END), tile prefetch, the tile product
// (amx_gemm.h) and the 16 x 16 transpose the packs use, for the forward
// item (amx_item.h) and the backward blocks (amx_bwd.h).
//
// A tile is 16 rows of 64 bytes: 16 x 16 fp32 for C, 16 rows x 16 bf16
// pairs for A and B. TDPBF16PS adds to C[m][n] the pair products of row m
// of A with column n of B, B holding pairs along its rows (B[k][n] = the
// 2k-th and 2k+1-th value of column n). Keys are rounded up to whole pair
// tiles of 32 (FA_TILE_KEYS) in the body's tiles, which the item's S and P
// rows take their pitch from.
//
// The bf16 step's three products (bf16_scores, bf16_softmax_p, bf16_pv)
// are the vdpbf16ps ones of cpu_step_dpbf16.h: the forward item takes
// every item that step would (bf16, packed, more than FA_SMALL_LANES lanes
// of one kv head), so in this translation unit the step is never reached
// and needs no tile version of its own. The driver guarantees head_dim % 32
// and head_dim_v % 16 (the AMX kernel's supports() says no otherwise).
#ifndef FA_AMX_STEP_H
#define FA_AMX_STEP_H

#include <immintrin.h>
#ifdef FA_AMX_EMULATE
#include "amx/amx_emulate.h" // tests only: tile instructions in scalar C
#endif

#define FA_TILE_KEYS 32

/* Palette 1 with tmm0-7 as 16 rows x 64 bytes (the layout LDTILECFG
   reads). */
typedef struct fa_amx_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} fa_amx_config;

/* Tile configuration is per thread: loaded at the thread's first product
   of a call, released when the thread's work items are done. */
static _Thread_local int amx_configured;

static inline void amx_ready(void) {
  if (amx_configured) return;
  fa_amx_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  amx_configured = 1;
}

static inline void amx_done(void) {
  if (!amx_configured) return;
  _tile_release();
  amx_configured = 0;
}
#define FA_TILE_STEP_END() amx_done()

/* Ask L1 for the 16 rows of 64 bytes of a tile that a product will load
   one step later: the products stream their B tiles (and C, when they
   accumulate) from L2 (a forward block's K^T is 64 KiB at d = 128), and a
   tile load that waits on L2 stalls the products that follow it.
   Prefetches past the operands are harmless. */
static inline void amx_prefetch_tile(const void *x, int64_t stride) {
  const char *c = x;
  for (int r = 0; r < 16; r++) _mm_prefetch(c + r * stride, _MM_HINT_T0);
}

#include "amx/amx_gemm.h"

static inline int round16(int x) { return (x + 15) / 16 * 16; }

/* 16 x 16 32-bit transpose of x[0..15] in place (x[i] lane j becomes x[j]
   lane i): pairs of 32-bit values, then of 64-bit, then 128-bit lanes
   twice. */
static inline void transpose16(__m512i x[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
  }
  // u[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j.
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int j = 0; j < 4; j++) {
    const __m512i lo01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44),
                  hi01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee),
                  lo23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44),
                  hi23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    x[j] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
    x[4 + j] = _mm512_shuffle_i32x4(lo01, lo23, 0xdd);
    x[8 + j] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
    x[12 + j] = _mm512_shuffle_i32x4(hi01, hi23, 0xdd);
  }
}

#include "cpu_step_dpbf16.h" // the step's products (never reached here)

#endif
