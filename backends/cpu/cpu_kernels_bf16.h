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

#ifndef FA_TILE_STEP_HEADER // (another step needs only pair_rows)

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

#endif

/* Pair two rows of 16-bit values: out[x] = lo[x] | hi[x] << 16 (hi NULL =
   zero), n values. */
static void pair_rows(uint32_t *out, const uint16_t *lo, const uint16_t *hi,
                      int n) {
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m512i a =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(lo + x)));
    __m512i b =
        hi ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(hi + x)))
           : _mm512_setzero_si512();
    _mm512_storeu_si512(out + x, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; x < n; x++) out[x] = lo[x] | (hi ? (uint32_t)hi[x] << 16 : 0u);
}

/* bf16 K and V in the layouts the tile products read, packed once per call
   for every (batch, kv head) rather than once per (q block, kv block): K
   rows as stored, padded to ldk2 pairs; V as pairs of consecutive keys.
   Keys past a sequence's length, up to rows (whole 32-key tiles past the
   last block), are zero, so any tile a product reads is finite. */
typedef struct cpu_kvpack {
  uint32_t *k, *v; // [batch][heads_kv][rows][ldk2], [..][rows / 2][ldv2]
  int rows, ldk2, ldv2;
  int64_t items; // pack work items: (batch, kv head, kv block)
} cpu_kvpack;

/* Fill kv's shape; the floats it needs (0: no pack, every tile of the
   problem is a small one, which reads K/V rows as stored). */
static size_t kvpack_plan(const fa_problem *p, const fa_plan_data *plan,
                          int small_lanes, cpu_kvpack *kv) {
  memset(kv, 0, sizeof *kv);
  const int rows_max =
      p->a.seqlen_q < plan->block_rows ? p->a.seqlen_q : plan->block_rows;
  if (p->dtype != FA_BF16 || p->descaled || plan->kv_heads_per_tile != 1 ||
      (int64_t)rows_max * plan->pack_group <= small_lanes)
    return 0;
  kv->rows =
      (int)(((int64_t)plan->num_k_blocks * plan->block_k + 31) / 32 * 32);
  kv->ldk2 = (plan->head_dim_pad + 1) / 2;
  kv->ldv2 = plan->head_dim_v_pad;
  kv->items = (int64_t)p->a.batch * p->a.heads_kv * plan->num_k_blocks;
  return (size_t)p->a.batch * p->a.heads_kv * kv->rows *
         ((size_t)kv->ldk2 + (size_t)kv->ldv2 / 2);
}

/* Pack item i: kv block kb of (b, hk), the padding rows with the last. */
static void kvpack_item(const fa_problem *p, const fa_plan_data *plan,
                        const fa_fwd_args *args, const cpu_kvpack *kv,
                        int64_t i) {
  const int nkb = plan->num_k_blocks, bk = plan->block_k;
  const int kb = (int)(i % nkb), hk = (int)(i / nkb % p->a.heads_kv),
            b = (int)(i / nkb / p->a.heads_kv);
  const int sk = fa_seq_len_k(p, b), d = p->a.head_dim, dv = p->a.head_dim_v;
  const int j0 = kb * bk, j1 = kb == nkb - 1 ? kv->rows : j0 + bk;
  const size_t bh = (size_t)b * p->a.heads_kv + hk;
  const uint16_t *kb16 = (const uint16_t *)args->k.data,
                 *vb16 = (const uint16_t *)args->v.data;
  for (int j = j0; j < j1; j++) {
    uint32_t *kr = kv->k + (bh * kv->rows + j) * kv->ldk2;
    memset(kr, 0, sizeof(uint32_t) * (size_t)kv->ldk2);
    if (j < sk)
      memcpy(kr, kb16 + fa_k_offset(p, &args->k, b, j, hk),
             sizeof(uint16_t) * (size_t)d);
  }
  for (int e = j0 / 2; e < j1 / 2; e++) {
    uint32_t *vr = kv->v + (bh * kv->rows / 2 + e) * kv->ldv2;
    if (2 * e >= sk)
      memset(vr, 0, sizeof(uint32_t) * (size_t)dv);
    else
      pair_rows(vr, vb16 + fa_k_offset(p, &args->v, b, 2 * e, hk),
                2 * e + 1 < sk
                    ? vb16 + fa_k_offset(p, &args->v, b, 2 * e + 1, hk)
                    : NULL,
                dv);
  }
}

#ifndef FA_TILE_STEP_HEADER
/* The default tile-product step: bf16_scores, bf16_softmax_p (after
   online_softmax, in cpu_kernels.h) and bf16_pv; a step header gives all
   three.
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
static void bf16_pv(int nr, int dv, int nc, int bq, const uint32_t *p2,
                    const uint32_t *v2, int64_t ldv2, uint32_t *scratch,
                    float *o, int64_t ldo) {
  (void)scratch;
  gemm_bf16(nr, dv, (nc + 1) / 2, p2, 1, bq, v2, ldv2, o, ldo, 1);
}
#endif

#endif
