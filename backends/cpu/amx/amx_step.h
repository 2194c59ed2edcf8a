// SPDX-License-Identifier: MIT
// The bf16 tile-product step on AMX tiles (TDPBF16PS), included by
// cpu_kernels.h through FA_TILE_STEP_HEADER in place of the vdpbf16ps step.
//
// A tile is 16 rows of 64 bytes: 16 x 16 fp32 for C, 16 rows x 16 bf16
// pairs for A and B. TDPBF16PS adds to C[m][n] the pair products of row m
// of A with column n of B, B holding pairs along its rows (B[k][n] = the
// 2k-th and 2k+1-th value of column n). The kernel body's layouts are
// exactly these:
//   S^T = K.Q^T: A = K rows as stored (pairs along d), B = Q^T as
//                [d/2][lanes] pairs, C = S^T [keys][lanes];
//   O += P.V:    A = P [lanes][keys/2] pairs (made so by the softmax
//                step here as it exponentiates S^T), B = V as [keys/2][dv]
//                pairs, C = O.
// C is held as 2 x 2 tiles (tmm0-3) with two A (tmm4-5) and two B tiles
// (tmm6-7), so each loaded tile feeds two products. Keys are rounded up to
// whole pair tiles of 32 (FA_TILE_KEYS); padded products must be 0, never
// 0 * another key's NaN. The driver guarantees head_dim % 32 and
// head_dim_v % 16 (the AMX kernel's supports() says no otherwise).
#ifndef FA_AMX_STEP_H
#define FA_AMX_STEP_H

#include <immintrin.h>

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

/* c[i][j * 16 .. +16] *= vs for rows i < rows (pitch ld), nv vectors. */
static inline void scale_rows(float *c, int ld, int rows, int nv, __m512 vs) {
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < nv; j++) {
      float *x = c + (size_t)i * ld + 16 * j;
      _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), vs));
    }
}

/* S^T[nc][bq] = scale K2.Q2^T over dpairs pairs: K2 rows of ldk2 pairs
   (rows up to nc rounded to 16 are read: finite, their scores unused), Q^T
   as [dpairs][bq] pairs. */
static void bf16_scores(int nc, int bq, int dpairs, const uint32_t *k2,
                        int64_t ldk2, const uint32_t *qt2, float *s,
                        float scale) {
  const int nc16 = round16(nc);
  amx_gemm(nc16, bq, dpairs, k2, (size_t)ldk2, qt2, (size_t)bq, s, (size_t)bq,
           0);
  scale_rows(s, bq, nc16, bq / 16, _mm512_set1_ps(scale));
}

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

/* The online-softmax step (column_ref / column_done around the exps, as
   online_softmax) with P made straight into the A tiles of P.V: each pair
   of key rows is exponentiated, rounded to bf16 pairs and, 16 pairs at a
   time, transposed to lanes x pairs (p2[r][e], pitch e16 = the pairs
   rounded up to 16; keys past nc are 0). S^T is read twice, not three
   times, and P is never stored in fp32. The sums add the exps in key
   order, as online_softmax does. */
static void bf16_softmax_p(const cpu_tiles *t, float *ws, int nc,
                           uint32_t *p2) {
  const float *s = ws + t->s;
  float *m = ws + t->m, *l = ws + t->l, *mu = ws + t->mu;
  const int bq = t->bq, e16 = round16((nc + 1) / 2);
  // Word lane i of a pair vector: low half key 2e, high half key 2e+1.
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11,
                                         26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512 zero = _mm512_setzero_ps();
  for (int r0 = 0; r0 < bq; r0 += 16) {
    fa_vf mx, ref = column_ref(s, bq, m, nc, r0, &mx), sum = zero;
    for (int e0 = 0; e0 < e16; e0 += 16) {
      __m512i x[16];
      for (int j = 0; j < 16; j++) {
        const int c = 2 * (e0 + j);
        __m512 lo = zero, hi = zero;
        if (c < nc) {
          lo = vf_exp(vf_sub(vf_load(s + (size_t)c * bq + r0), ref));
          sum = vf_add(sum, lo);
        }
        if (c + 1 < nc) {
          hi = vf_exp(vf_sub(vf_load(s + (size_t)(c + 1) * bq + r0), ref));
          sum = vf_add(sum, hi);
        }
        x[j] = _mm512_permutexvar_epi16(inter,
                                        (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
      transpose16(x);
      for (int r = 0; r < 16; r++)
        _mm512_storeu_si512(p2 + (size_t)(r0 + r) * e16 + e0, x[r]);
    }
    column_done(m, l, mu, r0, mx, ref, sum);
  }
}

/* O[nr][dv] += P.V: P as bf16_softmax_p packed it (lanes x key pairs,
   pitch e16); V as pairs of keys (v2, ldv2 words a pair row). Pair rows
   past (nc + 1) / 2 belong to other keys (an inf or NaN there must not
   meet P = 0): a last partial pair tile is copied to scratch, zero padded,
   and multiplied from there. */
static void bf16_pv(int nr, int dv, int nc, int bq, const uint32_t *p2,
                    const uint32_t *v2, int64_t ldv2, uint32_t *scratch,
                    float *o, int64_t ldo) {
  (void)bq; // (p2 holds every lane of the tile; nr of them are multiplied)
  const int ne = (nc + 1) / 2, e16 = round16(ne), nr16 = round16(nr),
            efull = ne / 16 * 16;
  if (efull)
    amx_gemm(nr16, dv, efull, p2, (size_t)e16, v2, (size_t)ldv2, o, (size_t)ldo,
             1);
  if (efull < e16) {
    memcpy(scratch, v2 + (size_t)efull * ldv2,
           sizeof(uint32_t) * (size_t)(ne - efull) * ldv2);
    memset(scratch + (size_t)(ne - efull) * ldv2, 0,
           sizeof(uint32_t) * (size_t)(e16 - ne) * ldv2);
    amx_gemm(nr16, dv, 16, p2 + efull, (size_t)e16, scratch, (size_t)ldv2, o,
             (size_t)ldo, 1);
  }
}

#endif
