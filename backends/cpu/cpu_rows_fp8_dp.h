// SPDX-License-Identifier: MIT
// FP8 decode rows: q.k by vdpbf16ps, in cpu.avx512.f32 on the CPUs where
// it pays (fa_cpu_fp8_dp_pays: AVX512-BF16 and AVX512-VBMI, vdpbf16ps
// measured faster than fp32 FMAs, as on Zen 4). Every FP8 code is exact in
// bf16 and the product of two codes is exact in fp32, so vdpbf16ps forms
// the very products that widening q and k to fp32 forms; only the order of
// the fp32 sums differs, and the factors (scale and descales) multiply
// each score once instead of each value. A code becomes bf16 by two byte
// lookups over the 128 magnitudes (vpermi2b: the high and the low byte of
// its bf16) and its sign bit: 64 codes in 6 instructions, where widening
// them through f16 and descaling took 20, and each vdpbf16ps then takes 32
// products where an FMA takes 16. NaN codes become bf16 NaNs, which
// vdpbf16ps carries into the score (every lane's, as the widened path
// sets it): no separate pass over the rows looking for them.
//
// P.V stays widened (cpu_rows_fp8.h): P in bf16 would cost FP8 problems
// with f32 outputs their f32 error bound.
//
// Part of cpu_kernels.h in the avx512 unit only (FA_FP8_DP, which CMake
// sets where the avx512bf16 row is built too): the functions carry the
// target attribute, and fp8_rows_plan takes them only where
// fa_cpu_fp8_dp_pays().

#include "cpu_detect.h" // fa_cpu_fp8_dp_pays

#define FA_FP8_DP_TARGET __attribute__((target("avx512bf16,avx512vbmi")))

/* [dtype: e4m3, e5m2][byte: high, low][magnitude]: vpermi2b's tables. */
#define FA_DP_T8(F, m)                                                         \
  F(m), F((m) + 1), F((m) + 2), F((m) + 3), F((m) + 4), F((m) + 5),            \
      F((m) + 6), F((m) + 7)
#define FA_DP_T128(F)                                                          \
  FA_DP_T8(F, 0), FA_DP_T8(F, 8), FA_DP_T8(F, 16), FA_DP_T8(F, 24),            \
      FA_DP_T8(F, 32), FA_DP_T8(F, 40), FA_DP_T8(F, 48), FA_DP_T8(F, 56),      \
      FA_DP_T8(F, 64), FA_DP_T8(F, 72), FA_DP_T8(F, 80), FA_DP_T8(F, 88),      \
      FA_DP_T8(F, 96), FA_DP_T8(F, 104), FA_DP_T8(F, 112), FA_DP_T8(F, 120)
#define FA_DP_E4M3_HI(m) (uint8_t)(FA_E4M3_BF16_BITS(m) >> 8)
#define FA_DP_E4M3_LO(m) (uint8_t)(FA_E4M3_BF16_BITS(m) & 0xff)
#define FA_DP_E5M2_HI(m) (uint8_t)(FA_E5M2_BF16_BITS(m) >> 8)
#define FA_DP_E5M2_LO(m) (uint8_t)(FA_E5M2_BF16_BITS(m) & 0xff)
static const uint8_t fp8_dp_bytes[2][2][128] __attribute__((aligned(64))) = {
    {{FA_DP_T128(FA_DP_E4M3_HI)}, {FA_DP_T128(FA_DP_E4M3_LO)}},
    {{FA_DP_T128(FA_DP_E5M2_HI)}, {FA_DP_T128(FA_DP_E5M2_LO)}}};

typedef struct fp8_dp_tables {
  __m512i hi0, hi1, lo0, lo1; // magnitudes 0-63 and 64-127
} fp8_dp_tables;

FA_FP8_DP_TARGET FA_ALWAYS_INLINE fp8_dp_tables fp8_dp_load(int e5m2) {
  const uint8_t(*t)[128] = fp8_dp_bytes[e5m2];
  return (fp8_dp_tables){_mm512_load_si512((const void *)t[0]),
                         _mm512_load_si512((const void *)(t[0] + 64)),
                         _mm512_load_si512((const void *)t[1]),
                         _mm512_load_si512((const void *)(t[1] + 64))};
}

/* 64 codes at p as 64 bf16 values, in two vectors: unpacks work within
   128-bit lanes, so w0 holds codes 0-7, 16-23, 32-39, 48-55 and w1 the
   others. q and k rows take the same order, and a dot product does not
   see it. */
FA_FP8_DP_TARGET FA_ALWAYS_INLINE void fp8_dp_words(const fp8_dp_tables *t,
                                                    const uint8_t *p,
                                                    __m512i *w0, __m512i *w1) {
  const __m512i c = _mm512_loadu_si512((const void *)p);
  // vpermi2b reads index bits 0-6 (bit 6 picks the table): the sign bit
  // is ignored there and or-ed into the high byte (0xf8: a | (b & c)).
  const __m512i hi =
      _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->hi0, c, t->hi1), c,
                                _mm512_set1_epi8((char)0x80), 0xf8);
  const __m512i lo = _mm512_permutex2var_epi8(t->lo0, c, t->lo1);
  *w0 = _mm512_unpacklo_epi8(lo, hi);
  *w1 = _mm512_unpackhi_epi8(lo, hi);
}

/* Where the bf16 q rows and their factors live: the fp32 q rows' space
   ((bq + 3) x ld floats, unused on this path): bq factors, then bq + 3
   rows of d words. */
FA_ALWAYS_INLINE float *fp8_dp_q_factors(const cpu_tiles *t, float *ws) {
  return ws + t->qr;
}
FA_ALWAYS_INLINE uint16_t *fp8_dp_q_words(const cpu_tiles *t, float *ws) {
  return (uint16_t *)(void *)(ws + t->qr + t->bq);
}

/* A factor that scales FP8 codes into fp32's normal range without
   overflow: then multiplying each score by it (and not each decoded
   value) changes roundings only, never a value into inf, 0 or a
   subnormal. */
static int fp8_dp_factor_ok(float f) {
  return f >= FLT_MIN * 65536.0f && f <= FLT_MAX / 65536.0f;
}

/* The item's q rows (nr lanes) as bf16 in fp8_dp_words' order, lanes nr
   .. nr + 2 zero (groups of four read them), and each lane's factor:
   scale times its head's q descale. */
FA_FP8_DP_TARGET static void fp8_dp_q_rows(const fa_problem *p,
                                           const cpu_tiles *t, float *ws,
                                           const fa_fwd_args *args,
                                           const cpu_lanes *ln, int b, int nr) {
  const int d = p->a.head_dim;
  const fp8_dp_tables tb = fp8_dp_load(p->dtype == FA_E5M2);
  float *qf = fp8_dp_q_factors(t, ws);
  uint16_t *qw = fp8_dp_q_words(t, ws);
  for (int r = 0; r < nr; r++) {
    const int h = ln->h0 + r % ln->pk;
    const uint8_t *src = (const uint8_t *)args->q.data +
                         fa_q_offset(p, &args->q, b, ln->row0 + r / ln->pk, h);
    uint16_t *row = qw + (size_t)r * d;
    for (int i = 0; i < d; i += 64) {
      __m512i w0, w1;
      fp8_dp_words(&tb, src + i, &w0, &w1);
      _mm512_storeu_si512((void *)(row + i), w0);
      _mm512_storeu_si512((void *)(row + i + 32), w1);
    }
    qf[r] = p->a.scale *
            fa_tensor_descale(&args->q, p->a.heads_kv, b, h / p->group);
  }
  memset(qw + (size_t)nr * d, 0, sizeof(uint16_t) * 3 * (size_t)d);
}

/* S^T[c][r] = (q_r . k_c) qf[r] kd for keys [0, nc) and lanes [lane0,
   lane0 + nr) of kv head hk + x: four lanes and two keys at a time, each
   K row's codes turned to bf16 once for the four lanes, two accumulators
   a lane and key (16 chains: vdpbf16ps's latency over d). Asks for the K
   rows FA_PREFETCH_KEYS keys ahead and for each key's V row, as the
   widened path does. */
FA_FP8_DP_TARGET static void scores_fp8_dp(const fa_problem *p,
                                           const cpu_tiles *t, float *ws,
                                           const fa_fwd_args *args,
                                           const cpu_fp8_rows *fr, int x,
                                           int nc, int lane0, int nr) {
  const int d = p->a.head_dim, dv = p->a.head_dim_v, bq = t->bq;
  const uint8_t *kb = (const uint8_t *)args->k.data + x * args->k.stride_head;
  const uint8_t *vb = (const uint8_t *)args->v.data + x * args->v.stride_head;
  const fp8_dp_tables tb = fp8_dp_load(fr->e5m2);
  const float *qf = fp8_dp_q_factors(t, ws);
  const uint16_t *qw = fp8_dp_q_words(t, ws);
  float *s = ws + t->s;
  for (int r0 = 0; r0 < nr; r0 += 4) {
    const uint16_t *q = qw + (size_t)(lane0 + r0) * d;
    float f[4];
    for (int y = 0; y < 4; y++)
      f[y] = r0 + y < nr ? qf[lane0 + r0 + y] * fr->kd[x] : 0.0f;
    for (int c = 0; c < nc; c += 2) {
      const int two = c + 1 < nc;
      if (r0 == 0)
        for (int e = c; e < c + 1 + two; e++)
          fp8_rows_prefetch(fr, kb, vb, e, nc, d, dv);
      const uint8_t *k0 = kb + fr->koff[c], *k1 = kb + fr->koff[c + two];
      __m512 a0[4], a1[4], z0[4], z1[4];
      for (int y = 0; y < 4; y++)
        a0[y] = a1[y] = z0[y] = z1[y] = _mm512_setzero_ps();
      for (int i = 0; i < d; i += 64) {
        __m512i k00, k01, k10, k11;
        fp8_dp_words(&tb, k0 + i, &k00, &k01);
        fp8_dp_words(&tb, k1 + i, &k10, &k11);
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) {
          const uint16_t *qy = q + (size_t)y * d + i;
          const __m512bh q0 = (__m512bh)_mm512_loadu_si512((const void *)qy);
          const __m512bh q1 =
              (__m512bh)_mm512_loadu_si512((const void *)(qy + 32));
          a0[y] = _mm512_dpbf16_ps(a0[y], q0, (__m512bh)k00);
          a1[y] = _mm512_dpbf16_ps(a1[y], q1, (__m512bh)k01);
          z0[y] = _mm512_dpbf16_ps(z0[y], q0, (__m512bh)k10);
          z1[y] = _mm512_dpbf16_ps(z1[y], q1, (__m512bh)k11);
        }
      }
      for (int y = 0; y < 4; y++) {
        a0[y] = _mm512_add_ps(a0[y], a1[y]);
        z0[y] = _mm512_add_ps(z0[y], z1[y]);
      }
      float sum0[4], sum1[4];
      vf_hsum4(a0, sum0);
      vf_hsum4(z0, sum1);
      float *s0 = s + (size_t)c * bq + lane0 + r0;
      for (int y = 0; y < 4 && r0 + y < nr; y++) {
        s0[y] = sum0[y] * f[y];
        if (two) s0[bq + y] = sum1[y] * f[y];
      }
    }
  }
}

/* O[r][:] += vd (P^T[c][r] v_c) for N lanes from r0 sharing the visible
   keys [lo, hi): V's codes turned to bf16 by the tables and to fp32 by
   unpacks (bf16 is fp32's upper half), P in fp32, so the products are
   the widened path's (P stays fp32: see the top). The NaN codes come out
   NaN: no pass over the rows first. Dims in blocks of 64, each key's 64
   codes turned once for the N lanes; the unpacks leave accumulator j
   holding dims 16 L + 4 j .. 16 L + 4 j + 3 in its 128-bit lane L, put
   back in order (a 4 x 4 transpose of 128-bit lanes) once per block when
   vd times the sums is added to O. */
FA_FP8_DP_TARGET FA_ALWAYS_INLINE void
pv_fp8_dp_lanes(const int N, const cpu_tiles *t, const float *s,
                const uint8_t *vb, const cpu_fp8_rows *fr,
                const fp8_dp_tables *tb, float vd, int dv, int r0, int lo,
                int hi, float *o) {
  const int bq = t->bq, ldo = t->ldv;
  const __m512i zero = _mm512_setzero_si512();
  const __m512 vdv = _mm512_set1_ps(vd);
  for (int i = 0; i < dv; i += 64) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int y = 0; y < N; y++)
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) acc[y][j] = _mm512_setzero_ps();
    for (int c = lo; c < hi; c++) {
      __m512i w0, w1;
      fp8_dp_words(tb, vb + fr->voff[c] + i, &w0, &w1);
      const __m512 v[4] = {
          _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0)),
          _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0)),
          _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1)),
          _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1))};
      const float *pc = s + (size_t)c * bq + r0;
#pragma GCC unroll 4
      for (int y = 0; y < N; y++) {
        const __m512 pr = _mm512_set1_ps(pc[y]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
          acc[y][j] = _mm512_fmadd_ps(pr, v[j], acc[y][j]);
      }
    }
#pragma GCC unroll 4
    for (int y = 0; y < N; y++) {
      const __m512 t0 = _mm512_shuffle_f32x4(acc[y][0], acc[y][1], 0x44);
      const __m512 t1 = _mm512_shuffle_f32x4(acc[y][0], acc[y][1], 0xee);
      const __m512 t2 = _mm512_shuffle_f32x4(acc[y][2], acc[y][3], 0x44);
      const __m512 t3 = _mm512_shuffle_f32x4(acc[y][2], acc[y][3], 0xee);
      const __m512 out[4] = {_mm512_shuffle_f32x4(t0, t2, 0x88),
                             _mm512_shuffle_f32x4(t0, t2, 0xdd),
                             _mm512_shuffle_f32x4(t1, t3, 0x88),
                             _mm512_shuffle_f32x4(t1, t3, 0xdd)};
      float *od = o + (size_t)(r0 + y) * ldo + i;
#pragma GCC unroll 4
      for (int l = 0; l < 4; l++)
        _mm512_storeu_ps(
            od + 16 * l,
            _mm512_fmadd_ps(out[l], vdv, _mm512_loadu_ps(od + 16 * l)));
    }
  }
}

/* P.V of lanes [r, r + n) (n <= 4, sharing their visible keys) of kv head
   x by pv_fp8_dp_lanes. */
FA_FP8_DP_TARGET static void pv_fp8_dp(const cpu_tiles *t, const float *s,
                                       const uint8_t *vb,
                                       const cpu_fp8_rows *fr, int x, int dv,
                                       int r, int n, int lo, int hi, float *o) {
  const fp8_dp_tables tb = fp8_dp_load(fr->e5m2);
  const float vd = fr->vd[x];
  switch (n) {
  case 4:
    pv_fp8_dp_lanes(4, t, s, vb, fr, &tb, vd, dv, r, lo, hi, o);
    break;
  case 3:
    pv_fp8_dp_lanes(3, t, s, vb, fr, &tb, vd, dv, r, lo, hi, o);
    break;
  case 2:
    pv_fp8_dp_lanes(2, t, s, vb, fr, &tb, vd, dv, r, lo, hi, o);
    break;
  default:
    pv_fp8_dp_lanes(1, t, s, vb, fr, &tb, vd, dv, r, lo, hi, o);
    break;
  }
}
