// SPDX-License-Identifier: MIT
// AMX-BF16 emulated in scalar C, for testing only (CMake option
// FA_CPU_AMX_EMULATE, never in a release build): the tile instructions the
// AMX kernels use (LDTILECFG, TILERELEASE, TILEZERO, TILELOADD, TILESTORED,
// TDPBF16PS) become functions on a per-thread file of eight 1 KiB tiles,
// so the AMX forward, backward and decode run, and meet the float64
// oracle, on a machine without AMX (CI's AMD machines, laptops). The rest
// of cpu.amxbf16.bf16 (AVX-512 and AVX512-BF16) runs natively, so the
// emulated build still needs those.
//
// Why: an AMX bug found only on the one kind of build machine that has AMX
// is found late (a CI run on an AMD machine cannot see it, a developer on
// one cannot reproduce it). The emulation follows the instruction's
// definition in the Intel SDM closely enough for the oracle's bounds:
// C[m][n] += A[m][2k] * B[k][2n] + A[m][2k+1] * B[k][2n+1] over the pairs
// k, each product fused into the fp32 sum in turn, denormal inputs and
// outputs flushed to zero (TDPBF16PS ignores MXCSR: DAZ, FTZ, round to
// nearest even). Rows and column bytes follow the loaded configuration;
// a shape the instruction would fault on (#UD) aborts with a message, in
// every build type.
// Speed is not the point: a 16 x 16 x 32 product is 8192 scalar FMAs.
#ifndef FA_AMX_EMULATE_H
#define FA_AMX_EMULATE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the hardware raises #UD: say which rule broke, then abort. */
#define FA_AMX_EMU_CHECK(ok, what)                                             \
  do {                                                                         \
    if (!(ok)) {                                                               \
      fprintf(stderr, "amx_emulate: %s (%s:%d)\n", what, __FILE__, __LINE__);  \
      abort();                                                                 \
    }                                                                          \
  } while (0)

typedef struct fa_amx_emu_tile {
  int rows, colsb; // the configured shape
  uint8_t data[16][64];
} fa_amx_emu_tile;

static _Thread_local fa_amx_emu_tile fa_amx_emu_tiles[8];
static _Thread_local int fa_amx_emu_configured;

/* LDTILECFG's 64-byte block: palette, start_row, 14 reserved bytes, 16
   column byte counts, 16 row counts. */
static inline void fa_amx_emu_loadconfig(const void *cfg) {
  const uint8_t *p = cfg;
  FA_AMX_EMU_CHECK(p[0] == 1, "palette is not 1");
  for (int t = 0; t < 8; t++) {
    uint16_t colsb;
    memcpy(&colsb, p + 16 + 2 * t, 2);
    fa_amx_emu_tiles[t].colsb = colsb;
    fa_amx_emu_tiles[t].rows = p[48 + t];
    FA_AMX_EMU_CHECK(colsb <= 64 && colsb % 4 == 0 && p[48 + t] <= 16,
                     "tile shape beyond 16 rows x 64 bytes");
  }
  for (int t = 0; t < 8; t++) memset(fa_amx_emu_tiles[t].data, 0, 1024);
  fa_amx_emu_configured = 1;
}

static inline void fa_amx_emu_release(void) { fa_amx_emu_configured = 0; }

static inline fa_amx_emu_tile *fa_amx_emu_tile_of(int t) {
  FA_AMX_EMU_CHECK(fa_amx_emu_configured, "tile used while unconfigured");
  FA_AMX_EMU_CHECK(t >= 0 && t < 8, "tile number outside 0..7");
  return &fa_amx_emu_tiles[t];
}

static inline void fa_amx_emu_zero(int t) {
  memset(fa_amx_emu_tile_of(t)->data, 0, 1024);
}

/* TILELOADD: row r from base + r * stride, colsb bytes; the rest of the
   row (and rows past the shape) read as zero. */
static inline void fa_amx_emu_load(int t, const void *base, long stride) {
  fa_amx_emu_tile *x = fa_amx_emu_tile_of(t);
  memset(x->data, 0, 1024);
  for (int r = 0; r < x->rows; r++)
    memcpy(x->data[r], (const uint8_t *)base + (long)r * stride,
           (size_t)x->colsb);
}

static inline void fa_amx_emu_store(int t, void *base, long stride) {
  const fa_amx_emu_tile *x = fa_amx_emu_tile_of(t);
  for (int r = 0; r < x->rows; r++)
    memcpy((uint8_t *)base + (long)r * stride, x->data[r], (size_t)x->colsb);
}

static inline float fa_amx_emu_daz(float x) {
  return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

static inline float fa_amx_emu_bf16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return fa_amx_emu_daz(f);
}

/* TDPBF16PS c, a, b: c is M x N fp32 (N = colsb / 4), a is M x K pairs
   of bf16 (K = a's colsb / 4), b is K rows of N pairs. */
static inline void fa_amx_emu_dpbf16ps(int tc, int ta, int tb) {
  fa_amx_emu_tile *c = fa_amx_emu_tile_of(tc);
  const fa_amx_emu_tile *a = fa_amx_emu_tile_of(ta),
                        *b = fa_amx_emu_tile_of(tb);
  const int m_rows = c->rows, n_cols = c->colsb / 4, k_pairs = a->colsb / 4;
  FA_AMX_EMU_CHECK(a->rows == m_rows && b->rows == k_pairs &&
                       b->colsb == c->colsb && m_rows > 0,
                   "TDPBF16PS shapes disagree");
  for (int m = 0; m < m_rows; m++)
    for (int n = 0; n < n_cols; n++) {
      float acc;
      memcpy(&acc, c->data[m] + 4 * n, 4);
      for (int k = 0; k < k_pairs; k++) {
        acc = fmaf(fa_amx_emu_bf16(a->data[m] + 4 * k),
                   fa_amx_emu_bf16(b->data[k] + 4 * n), acc);
        acc = fmaf(fa_amx_emu_bf16(a->data[m] + 4 * k + 2),
                   fa_amx_emu_bf16(b->data[k] + 4 * n + 2), acc);
      }
      acc = fa_amx_emu_daz(acc);
      memcpy(c->data[m] + 4 * n, &acc, 4);
    }
}

// The intrinsics' names, as macros over the functions above.
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#define _tile_loadconfig(cfg) fa_amx_emu_loadconfig(cfg)
#define _tile_release() fa_amx_emu_release()
#define _tile_zero(t) fa_amx_emu_zero(t)
#define _tile_loadd(t, base, stride) fa_amx_emu_load(t, base, (long)(stride))
#define _tile_stored(t, base, stride) fa_amx_emu_store(t, base, (long)(stride))
#define _tile_dpbf16ps(c, a, b) fa_amx_emu_dpbf16ps(c, a, b)

#endif
