// SPDX-License-Identifier: MIT
// C (+)= A.B on AMX tiles, the one product every AMX step and item
// multiplies with where B is a plain matrix of pairs (the forward's
// S = Q.K^T reads K^T in its grouped pack instead: amx_scores). Included
// by amx_step.h after the tile configuration.
#ifndef FA_AMX_GEMM_H
#define FA_AMX_GEMM_H

/* Bytes of the A panel kept in L1 across the strips of B. */
#ifndef FA_AMX_PANEL
#define FA_AMX_PANEL 32768
#endif

/* C[m][n] (+)= A.B over k2 pairs: A rows of lda words, B pair rows of ldb
   words, C rows of ldc floats; m, n and k2 multiples of 16. acc: C is
   loaded first (else zeroed). 2 x 2 C tiles at a time, each loaded A and
   B tile feeding two products. Panels of A rows (FA_AMX_PANEL bytes, in
   L1) are multiplied by each strip of 32 columns of B in turn; the strip
   comes from L2 on the panel's first row pair, one pair step ahead, and
   from L1 for the rest, and the next row pair's C tiles are asked into L1
   while the products run (C is 128 KiB at 256 x 128: L2). */
static void amx_gemm(int m, int n, int k2, const uint32_t *a, size_t lda,
                     const uint32_t *b, size_t ldb, float *c, size_t ldc,
                     int acc) {
  amx_ready();
  const size_t sa = 4 * lda, sb = 4 * ldb, sc = 4 * ldc;
  int mb = k2 > 0 ? FA_AMX_PANEL / (4 * k2) / 32 * 32 : 32; // panel rows
  if (mb < 32) mb = 32;
  for (int i1 = 0; i1 < m; i1 += mb)
    for (int j0 = 0; j0 < n; j0 += 32)
      for (int i0 = i1; i0 < i1 + mb && i0 < m; i0 += 32) {
        float *c00 = c + (size_t)i0 * ldc + j0;
        const uint32_t *a0 = a + (size_t)i0 * lda, *b0 = b + j0;
        if (i0 + 16 < m && j0 + 16 < n) {
          if (acc) {
            _tile_loadd(0, c00, sc);
            _tile_loadd(1, c00 + 16, sc);
            _tile_loadd(2, c00 + 16 * ldc, sc);
            _tile_loadd(3, c00 + 16 * ldc + 16, sc);
          } else {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
          }
          // Ahead, one pair step: B's next step (the next strip's first
          // after the last) on the panel's first row pair, and the next row
          // pair's C tiles.
          float *cn = c00 + 32 * ldc;
          for (int e = 0; e < k2; e += 16) {
            _tile_loadd(4, a0 + e, sa);
            _tile_loadd(5, a0 + 16 * lda + e, sa);
            _tile_loadd(6, b0 + (size_t)e * ldb, sb);
            _tile_loadd(7, b0 + (size_t)e * ldb + 16, sb);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
            if (i0 == i1) {
              const uint32_t *bn =
                  e + 16 < k2 ? b0 + (size_t)(e + 16) * ldb : b0 + 32;
              amx_prefetch_tile(bn, (int64_t)sb);
              amx_prefetch_tile(bn + 16, (int64_t)sb);
            }
            if (acc && e < 64) // the next block's four C tiles, one a step
              amx_prefetch_tile(cn + (e & 16) + (e & 32 ? 16 * ldc : 0),
                                (int64_t)sc);
          }
          _tile_stored(0, c00, sc);
          _tile_stored(1, c00 + 16, sc);
          _tile_stored(2, c00 + 16 * ldc, sc);
          _tile_stored(3, c00 + 16 * ldc + 16, sc);
          continue;
        }
        // Edges (a last 16 rows or columns): one C tile at a time.
        for (int i = i0; i < i0 + 32 && i < m; i += 16)
          for (int j = j0; j < j0 + 32 && j < n; j += 16) {
            float *ci = c + (size_t)i * ldc + j;
            if (acc)
              _tile_loadd(0, ci, sc);
            else
              _tile_zero(0);
            for (int e = 0; e < k2; e += 16) {
              _tile_loadd(4, a + (size_t)i * lda + e, sa);
              _tile_loadd(6, b + (size_t)e * ldb + j, sb);
              _tile_dpbf16ps(0, 4, 6);
            }
            _tile_stored(0, ci, sc);
          }
      }
}

#endif
