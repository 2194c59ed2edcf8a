// SPDX-License-Identifier: MIT
// The vector micro-kernels every tile product of the CPU kernels is made
// of: C (+)= A.B with A read by broadcasts through two strides (so A may be
// stored either way round) and B and C by vectors, and the masked variant
// that multiplies only the visible (lane, key) pairs. Part of cpu_kernels.h
// (compiled once per ISA, against the vocabulary of simd/simd_<isa>.h).
/* ---- GEMM: C[i][j] (+)= sum_p A[i*rs + p*cs] * B[p*ldb + j] ------------ */

/* Lines a product prefetches on its way (into L2): the next block's
   operands, one line every FA_PREFETCH_EVERY steps of each micro-tile's k
   loop, so that the misses overlap the FMAs instead of stalling the next
   product's first loads (a burst of them after each micro-tile waits on
   the line fill buffers: ~5% of the GEMM's samples). */
typedef struct cpu_prefetch {
  const char *at;
  int64_t lines; // left to prefetch, from at
} cpu_prefetch;

/* k steps per line: a 64-key block of 128 floats a row is 512 lines, over
   22 score micro-tiles of k = 128 (32 lines each) or 44 P.V micro-tiles of
   k = 64 (16 each). */
#define FA_PREFETCH_EVERY 4

/* One R x N-vector micro-tile. R, N, tail are compile-time constants after
   inlining: the accumulators live in registers. tail > 0 makes the last
   vector partial (tail lanes). rsc (or NULL): C's rows are first scaled by
   rsc[i] as they are loaded (O rescaled by the online softmax's factors in
   the load P.V makes anyway, not in a pass of its own). */
FA_ALWAYS_INLINE void micro(const int R, const int N, const int tail, int k,
                            const float *A, int64_t rs, int64_t cs,
                            const float *B, int64_t ldb, float *C, int64_t ldc,
                            int accumulate, const float *rsc,
                            cpu_prefetch *pf) {
  fa_vf acc[FA_MR][FA_NV];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int v = 0; v < N; v++) {
      const float *c = C + i * ldc + v * FA_VW;
      int part = tail && v == N - 1;
      acc[i][v] = !accumulate ? vf_zero()
                  : part      ? vf_load_part(c, tail)
                              : vf_load(c);
      if (rsc) acc[i][v] = vf_mul(acc[i][v], vf_set1(rsc[i]));
    }
  for (int p = 0; p < k; p++) {
    fa_vf b[FA_NV];
    const float *bp = B + p * ldb;
#pragma GCC unroll 8
    for (int v = 0; v < N; v++)
      b[v] = tail && v == N - 1 ? vf_load_part(bp + v * FA_VW, tail)
                                : vf_load(bp + v * FA_VW);
    const float *ap = A + p * cs;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
      fa_vf a = vf_set1(ap[i * rs]);
#pragma GCC unroll 8
      for (int v = 0; v < N; v++) acc[i][v] = vf_fma(a, b[v], acc[i][v]);
    }
    if (pf && p % FA_PREFETCH_EVERY == FA_PREFETCH_EVERY - 1 && pf->lines > 0) {
      __builtin_prefetch(pf->at, 0, 2);
      pf->at += 64;
      pf->lines--;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int v = 0; v < N; v++) {
      float *c = C + i * ldc + v * FA_VW;
      if (tail && v == N - 1)
        vf_store_part(c, acc[i][v], tail);
      else
        vf_store(c, acc[i][v]);
    }
}

/* The most of x[0 .. n): the k a micro-tile of n rows needs, where row i
   needs x[i] (none given: all k). */
static inline int most_of(const int *x, int n, int k) {
  if (!x) return k;
  int z = 0;
  for (int i = 0; i < n; i++) z = x[i] > z ? x[i] : z;
  return z < k ? z : k;
}

/* What a product does per row of C (each NULL for nothing): scale, C's
   rows scaled by scale[i] as they are loaded (micro's rsc); k_end, row i
   needs only the first k_end[i] of the k steps (the rest of its A is 0). */
typedef struct cpu_row_ops {
  const float *scale;
  const int *k_end;
} cpu_row_ops;

/* Row tails of a column chunk of N vectors (compile-time N, tail); ro (or
   NULL) as cpu_row_ops says, a micro-tile of rows [i, i + R) running the
   most of k_end over its rows. */
FA_ALWAYS_INLINE void micro_rows(const int N, const int tail, int m, int k,
                                 const float *A, int64_t rs, int64_t cs,
                                 const float *B, int64_t ldb, float *C,
                                 int64_t ldc, int acc, const cpu_row_ops *ro,
                                 cpu_prefetch *pf) {
  const float *rsc = ro ? ro->scale : NULL;
  const int *k_of_row = ro ? ro->k_end : NULL;
  int i = 0;
  for (; i + FA_MR <= m; i += FA_MR)
    micro(FA_MR, N, tail, most_of(k_of_row ? k_of_row + i : NULL, FA_MR, k),
          A + i * rs, rs, cs, B, ldb, C + i * ldc, ldc, acc,
          rsc ? rsc + i : NULL, pf);
#define FA_ROWS(R)                                                             \
  case R:                                                                      \
    micro(R, N, tail, most_of(k_of_row ? k_of_row + i : NULL, R, k),           \
          A + i * rs, rs, cs, B, ldb, C + i * ldc, ldc, acc,                   \
          rsc ? rsc + i : NULL, pf);                                           \
    break;
  switch (m - i) {
#if FA_MR > 7
    FA_ROWS(7)
#endif
#if FA_MR > 6
    FA_ROWS(6)
#endif
#if FA_MR > 5
    FA_ROWS(5)
#endif
#if FA_MR > 4
    FA_ROWS(4)
#endif
#if FA_MR > 3
    FA_ROWS(3)
#endif
#if FA_MR > 2
    FA_ROWS(2)
#endif
    FA_ROWS(1)
  default:
    break;
  }
#undef FA_ROWS
}

/* Full chunks of FA_NV vectors, then one last chunk of 1..FA_NV vectors
   whose final vector may be partial; pf (or NULL) prefetched on the way;
   ro (or NULL) per row of C (cpu_row_ops: the rescale, the k cut). The
   cuts skip products a mask makes 0 or overwrites, on the tiles a causal
   diagonal cuts: with m_of_col (or NULL), a chunk of columns [j, j + FA_NV
   FA_VW) computes only rows [0, most_of(m_of_col + j)) (scores S^T: a key
   no lane of the chunk sees is masked to -inf afterwards); with ro's
   k_end, a micro-tile of rows only its first k steps (O += P.V: P of the
   keys past a lane's window is 0). */
FA_ALWAYS_INLINE void gemm_cut(int m, int n, int k, const float *A, int64_t rs,
                               int64_t cs, const float *B, int64_t ldb,
                               float *C, int64_t ldc, int acc,
                               const cpu_row_ops *ro, const int *m_of_col,
                               cpu_prefetch *pf) {
  const int chunk = FA_NV * FA_VW;
  int j = 0;
  for (; j + chunk <= n; j += chunk)
    micro_rows(FA_NV, 0, most_of(m_of_col ? m_of_col + j : NULL, chunk, m), k,
               A, rs, cs, B + j, ldb, C + j, ldc, acc, ro, pf);
  int left = n - j;
  if (left <= 0) return;
  int nvec = (left + FA_VW - 1) / FA_VW, tail = left % FA_VW;
  const int mj = most_of(m_of_col ? m_of_col + j : NULL, left, m);
#define FA_LAST(NV)                                                            \
  case NV:                                                                     \
    if (tail)                                                                  \
      micro_rows(NV, tail, mj, k, A, rs, cs, B + j, ldb, C + j, ldc, acc, ro,  \
                 pf);                                                          \
    else                                                                       \
      micro_rows(NV, 0, mj, k, A, rs, cs, B + j, ldb, C + j, ldc, acc, ro,     \
                 pf);                                                          \
    break;
  switch (nvec) {
    FA_LAST(1)
#if FA_NV > 1
    FA_LAST(2)
#endif
#if FA_NV > 2
    FA_LAST(3)
#endif
#if FA_NV > 3
    FA_LAST(4)
#endif
  default:
    break;
  }
#undef FA_LAST
}

static void gemm_rsc(int m, int n, int k, const float *A, int64_t rs,
                     int64_t cs, const float *B, int64_t ldb, float *C,
                     int64_t ldc, int acc, const float *rsc, cpu_prefetch *pf) {
  const cpu_row_ops ro = {rsc, NULL};
  gemm_cut(m, n, k, A, rs, cs, B, ldb, C, ldc, acc, &ro, NULL, pf);
}

static void gemm_pf(int m, int n, int k, const float *A, int64_t rs, int64_t cs,
                    const float *B, int64_t ldb, float *C, int64_t ldc, int acc,
                    cpu_prefetch *pf) {
  gemm_rsc(m, n, k, A, rs, cs, B, ldb, C, ldc, acc, NULL, pf);
}

static void gemm(int m, int n, int k, const float *A, int64_t rs, int64_t cs,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
  gemm_pf(m, n, k, A, rs, cs, B, ldb, C, ldc, acc, NULL);
}

/* 1 when rows [0, rows) x [0, n) of x (row pitch ld) hold an inf or NaN. */
static int any_nonfinite(const float *x, int64_t ld, int rows, int n) {
  uint32_t all = 0;
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, x + r * ld + i, sizeof u);
      all |= ~u & 0x7f800000u ? 0u : 1u; // exponent all ones
    }
  return all != 0;
}

/* The tile products that meet a mask, when their other operand holds an inf
   or NaN: only the pairs (lane r, key c) with lo[r] <= c < hi[r] are
   multiplied, so a masked entry adds nothing, not even 0 * NaN (the
   contract: a NaN reaches only the rows that attend to it). With A[r * al +
   c * ak] the P-like tile, for c in [0, nc) and r in [lane0, lane0 + nr):
     key_rows = 0:  C[r][:n] += A(r, c) B[c][:n]   (O += P.V, dQ += dS.K)
     key_rows = 1:  C[c][:n] += A(r, c) B[r][:n]   (dV += P^T.dO, dK += dS^T.Q)
   Keys outer: each B row (or C row) is streamed once per key. */
static void gemm_visible(int nc, int lane0, int nr, const int *lo,
                         const int *hi, int n, const float *A, int64_t al,
                         int64_t ak, const float *B, int64_t ldb, float *C,
                         int64_t ldc, int key_rows) {
  const int tail = n % FA_VW, full = n - tail;
  for (int c = 0; c < nc; c++)
    for (int r = lane0; r < lane0 + nr; r++) {
      if (c < lo[r] || c >= hi[r]) continue;
      const fa_vf a = vf_set1(A[r * al + c * ak]);
      const float *b = B + (key_rows ? r : c) * ldb;
      float *o = C + (key_rows ? c : r) * ldc;
      for (int i = 0; i < full; i += FA_VW)
        vf_store(o + i, vf_fma(a, vf_load(b + i), vf_load(o + i)));
      if (tail)
        vf_store_part(o + full,
                      vf_fma(a, vf_load_part(b + full, tail),
                             vf_load_part(o + full, tail)),
                      tail);
    }
}
