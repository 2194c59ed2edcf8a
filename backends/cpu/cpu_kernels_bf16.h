// SPDX-License-Identifier: MIT
// bf16 tile products with AVX512-BF16 (vdpbf16ps: each fp32 lane adds the
// products of one pair of bf16 values), included by cpu_kernels.h when the
// translation unit defines FA_HAVE_DPBF16. Operands are pairs of bf16 in one
// 32-bit word, low half first: A is broadcast a pair at a time, B is a
// vector of 16 pairs. For S^T = K.Q^T the pairs run along d (K rows as
// stored, Q^T packed as [d/2][lanes]); for O += P.V they run along keys (P
// and V packed as [keys/2][...]). Products are exact in fp32; P is rounded
// to bf16 once, as on GPUs, and accumulation stays fp32.
#ifndef FA_CPU_KERNELS_BF16_H
#define FA_CPU_KERNELS_BF16_H

/* One R x N-vector micro-tile of C (+)= A.B over k pairs. */
FA_ALWAYS_INLINE void FA_FN(micro_bf16)(const int R, const int N,
                                        const int tail, int k,
                                        const uint32_t *A, int64_t rs,
                                        int64_t cs, const uint32_t *B,
                                        int64_t ldb, float *C, int64_t ldc,
                                        int accumulate) {
  __m512 acc[FA_MR][FA_NV];
  const __mmask16 last = (__mmask16)((1u << (tail ? tail : 16)) - 1u);
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int v = 0; v < N; v++) {
      const float *c = C + i * ldc + v * 16;
      acc[i][v] = !accumulate ? _mm512_setzero_ps()
                  : (tail && v == N - 1) ? _mm512_maskz_loadu_ps(last, c)
                                         : _mm512_loadu_ps(c);
    }
  for (int p = 0; p < k; p++) {
    __m512i b[FA_NV];
    const uint32_t *bp = B + p * ldb;
#pragma GCC unroll 8
    for (int v = 0; v < N; v++)
      b[v] = tail && v == N - 1 ? _mm512_maskz_loadu_epi32(last, bp + v * 16)
                                : _mm512_loadu_si512(bp + v * 16);
    const uint32_t *ap = A + p * cs;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
      __m512i a = _mm512_set1_epi32((int)ap[i * rs]);
#pragma GCC unroll 8
      for (int v = 0; v < N; v++)
        acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)a, (__m512bh)b[v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int v = 0; v < N; v++) {
      float *c = C + i * ldc + v * 16;
      if (tail && v == N - 1)
        _mm512_mask_storeu_ps(c, last, acc[i][v]);
      else
        _mm512_storeu_ps(c, acc[i][v]);
    }
}

FA_ALWAYS_INLINE void FA_FN(micro_bf16_rows)(const int N, const int tail,
                                             int m, int k, const uint32_t *A,
                                             int64_t rs, int64_t cs,
                                             const uint32_t *B, int64_t ldb,
                                             float *C, int64_t ldc, int acc) {
  int i = 0;
  for (; i + FA_MR <= m; i += FA_MR)
    FA_FN(micro_bf16)(FA_MR, N, tail, k, A + i * rs, rs, cs, B, ldb,
                      C + i * ldc, ldc, acc);
  for (; i < m; i++) // rare: tile heights are multiples of FA_MR in practice
    FA_FN(micro_bf16)(1, N, tail, k, A + i * rs, rs, cs, B, ldb, C + i * ldc,
                      ldc, acc);
}

/* C[m][n] (+)= sum over k pairs of A[i*rs + p*cs] . B[p*ldb + j]. */
static void FA_FN(gemm_bf16)(int m, int n, int k, const uint32_t *A,
                             int64_t rs, int64_t cs, const uint32_t *B,
                             int64_t ldb, float *C, int64_t ldc, int acc) {
  const int chunk = FA_NV * 16;
  int j = 0;
  for (; j + chunk <= n; j += chunk)
    FA_FN(micro_bf16_rows)(FA_NV, 0, m, k, A, rs, cs, B + j, ldb, C + j, ldc,
                           acc);
  for (; j < n; j += 16) { // the rest, one vector at a time
    const int left = n - j;
    FA_FN(micro_bf16_rows)(1, left >= 16 ? 0 : left, m, k, A, rs, cs, B + j,
                           ldb, C + j, ldc, acc);
  }
}

/* P^T (fp32, [keys][lanes]) to bf16 pairs along keys: out[e][r] holds keys
   2e and 2e+1 of lane r; an odd last key is paired with zero. */
static void FA_FN(pack_p_bf16)(uint32_t *out, const float *s, int bq,
                               int nc) {
  for (int e = 0; e < (nc + 1) / 2; e++) {
    const float *r0 = s + (size_t)(2 * e) * bq;
    const float *r1 = 2 * e + 1 < nc ? r0 + bq : NULL;
    for (int r = 0; r < bq; r += 16) {
      __m512i lo = _mm512_cvtepu16_epi32(
          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + r)));
      __m512i hi = r1 ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                            _mm512_loadu_ps(r1 + r)))
                      : _mm512_setzero_si512();
      _mm512_storeu_si512(out + (size_t)e * bq + r,
                          _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

/* Pair two rows of 16-bit values: out[x] = lo[x] | hi[x] << 16 (hi NULL =
   zero), n values. */
static void FA_FN(pair_rows)(uint32_t *out, const uint16_t *lo,
                             const uint16_t *hi, int n) {
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(lo + x)));
    __m512i b = hi ? _mm512_cvtepu16_epi32(
                         _mm256_loadu_si256((const void *)(hi + x)))
                   : _mm512_setzero_si512();
    _mm512_storeu_si512(out + x, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; x < n; x++) out[x] = lo[x] | (hi ? (uint32_t)hi[x] << 16 : 0u);
}

#endif
