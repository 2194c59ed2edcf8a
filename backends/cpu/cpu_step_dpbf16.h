// SPDX-License-Identifier: MIT
// The bf16 step's products with AVX512-BF16 (vdpbf16ps: each fp32 lane adds
// the products of one pair of bf16 values): bf16_scores, bf16_softmax_p and
// bf16_pv for cpu_step_bf16.h, where the ISA names no other step header.
// Operands are pairs of bf16 in one 32-bit word, low half first: A is
// broadcast a pair at a time, B is a vector of 16 pairs. For S^T = K.Q^T
// the pairs run along d (K rows as stored, Q^T packed as [d/2][lanes]); for
// O += P.V they run along keys (P and V packed as [keys/2][...]). Products
// are exact in fp32; P is rounded to bf16 once, as on GPUs, and
// accumulation stays fp32.
#ifndef FA_CPU_STEP_DPBF16_H
#define FA_CPU_STEP_DPBF16_H

/* One R x N-vector micro-tile of C (+)= A.B over k pairs. */
FA_ALWAYS_INLINE void micro_bf16(const int R, const int N, const int tail,
                                 int k, const uint32_t *A, int64_t rs,
                                 int64_t cs, const uint32_t *B, int64_t ldb,
                                 float *C, int64_t ldc, int accumulate) {
  __m512 acc[FA_MR][FA_NV];
  const __mmask16 last = (__mmask16)((1u << (tail ? tail : 16)) - 1u);
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int v = 0; v < N; v++) {
      const float *c = C + i * ldc + v * 16;
      acc[i][v] = !accumulate            ? _mm512_setzero_ps()
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

FA_ALWAYS_INLINE void micro_bf16_rows(const int N, const int tail, int m, int k,
                                      const uint32_t *A, int64_t rs, int64_t cs,
                                      const uint32_t *B, int64_t ldb, float *C,
                                      int64_t ldc, int acc) {
  int i = 0;
  for (; i + FA_MR <= m; i += FA_MR)
    micro_bf16(FA_MR, N, tail, k, A + i * rs, rs, cs, B, ldb, C + i * ldc, ldc,
               acc);
  for (; i < m; i++) // rare: tile heights are multiples of FA_MR in practice
    micro_bf16(1, N, tail, k, A + i * rs, rs, cs, B, ldb, C + i * ldc, ldc,
               acc);
}

/* C[m][n] (+)= sum over k pairs of A[i*rs + p*cs] . B[p*ldb + j]. */
static void gemm_bf16(int m, int n, int k, const uint32_t *A, int64_t rs,
                      int64_t cs, const uint32_t *B, int64_t ldb, float *C,
                      int64_t ldc, int acc) {
  const int chunk = FA_NV * 16;
  int j = 0;
  for (; j + chunk <= n; j += chunk)
    micro_bf16_rows(FA_NV, 0, m, k, A, rs, cs, B + j, ldb, C + j, ldc, acc);
  for (; j < n; j += 16) { // the rest, one vector at a time
    const int left = n - j;
    micro_bf16_rows(1, left >= 16 ? 0 : left, m, k, A, rs, cs, B + j, ldb,
                    C + j, ldc, acc);
  }
}

/* P^T (fp32, [keys][lanes]) to bf16 pairs along keys: out[e][r] holds keys
   2e and 2e+1 of lane r; an odd last key is paired with zero. */
static void pack_p_bf16(uint32_t *out, const float *s, int bq, int nc) {
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

/* The step's three products (a step header gives all three).
   Scores: S^T[nc][bq] = scale K2.Q2^T over dpairs pairs (K2 rows of ldk2
   pairs, Q^T as [dpairs][bq] pairs). K2 rows past nc, up to whole tiles of
   the step, may be read: the pack keeps them finite. */
static void bf16_scores(int nc, int bq, int dpairs, const uint32_t *k2,
                        int64_t ldk2, const uint32_t *qt2, float *s,
                        float scale) {
  gemm_bf16(nc, bq, dpairs, k2, ldk2, 1, qt2, bq, s, bq, 0);
  const __m512 sc = _mm512_set1_ps(scale);
  for (size_t x = 0; x < (size_t)nc * bq; x += 16)
    _mm512_storeu_ps(s + x, _mm512_mul_ps(_mm512_loadu_ps(s + x), sc));
}

/* P.V: O[nr][dv] += P.V with P as bf16_softmax_p packed it (P^T paired
   along keys, [(nc + 1) / 2][bq]) and V as pairs of keys (v2, ldv2 words a
   pair row). Pair rows past (nc + 1) / 2 are another block's keys: a step
   that reads whole tiles copies the last partial one to scratch (16 pair
   rows of ldv2) and zeroes the rest. */
/* The softmax: online_softmax, then P^T paired along keys into p2
   ([(nc + 1) / 2][bq]) for gemm_bf16. */
static void bf16_softmax_p(const cpu_tiles *t, float *ws, int nc,
                           uint32_t *p2) {
  online_softmax(t, ws, nc);
  pack_p_bf16(p2, ws + t->s, t->bq, nc);
}

static void bf16_pv(int nr, int dv, int nc, int bq, const uint32_t *p2,
                    const uint32_t *v2, int64_t ldv2, uint32_t *scratch,
                    float *o, int64_t ldo) {
  (void)scratch;
  gemm_bf16(nr, dv, (nc + 1) / 2, p2, 1, bq, v2, ldv2, o, ldo, 1);
}
#endif
