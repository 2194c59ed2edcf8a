// SPDX-License-Identifier: MIT
// Decode over an FP8 KV cache: the row-streaming tile path (few query
// lanes, each K/V row used once) reading K and V straight from the cache
// and widening them in registers (vf_fp8_scaled: decode and descale in one
// product), instead of widening every row into an fp32 tile first. A
// decode step is one pass over the cache: a quarter of the bytes of an
// fp32 tile copy, half of a bf16 cache's, and no tile store and reload.
// bf16 and f16 caches (without descale factors) take the same path, their
// rows widened in registers (vf_widen; bf16 rows with AVX512-BF16 are used
// as stored, by vdpbf16ps: scores_bf16_dp, pv_bf16_dp): the tile copy was half
// the time of a bf16 decode step; so do fp32 caches, their rows loaded as they
// are (the copy, a call per row, held the step to ~13 GB/s with every row in
// L2).
//
// Part of cpu_kernels.h (compiled once per ISA); the forward's small-tile
// path calls these when fp8_rows_plan() accepts the work item: FP8 inputs,
// head dims that are whole vectors, finite factors (descale times the
// decoder's unit), key blocks of at most FA_FP8_ROW_KEYS keys. Everything
// else (scores_post, the online softmax, the masks) is the small path's.

/* 0 turns the in-place path off (for measuring the tile path it replaces:
   bench/NOTES.md). */
#ifndef FA_FP8_ROWS
#define FA_FP8_ROWS 1
#endif

/* Most keys of one block whose row offsets are kept (cpu.amxbf16.bf16 plans
   blocks of 256). */
#define FA_FP8_ROW_KEYS 256
/* 0 sends bf16 rows through the widened dot products also where
   AVX512-BF16 could take them (for measuring scores_bf16_dp). */
#ifndef FA_ROWS_DPBF16
#define FA_ROWS_DPBF16 1
#endif
/* Largest head_dim scores_bf16_dp takes (its row of zeros). */
#define FA_MAX_DIM_DP 512

/* What one work item's FP8 rows need: per key of the current block, the
   byte offsets of its K and V rows for the first kv head of the tile
   (another kv head adds its stride_head), and per kv head of the tile the
   factor that vf_fp8_scaled multiplies by (1 for 16-bit rows). */
typedef struct cpu_fp8_rows {
  int e5m2, wide; // wide: rows of fp32, bf16 or f16 values, esz bytes each
  int esz;
  int64_t koff[FA_FP8_ROW_KEYS], voff[FA_FP8_ROW_KEYS];
  // The next block's first K rows (nnext of them, within the item), so
  // that the prefetch a few keys ahead runs on across the block's end.
  int nnext;
  int64_t knext[FA_PREFETCH_KEYS];
  float kx[FA_MAX_KV_TILES], vx[FA_MAX_KV_TILES];
  // Codes by the bf16 tables (cpu_rows_fp8_dp.h): q.k by vdpbf16ps, the
  // descales of K and V (per kv head) applied to sums.
  int dp;
  float kd[FA_MAX_KV_TILES], vd[FA_MAX_KV_TILES];
} cpu_fp8_rows;

/* 1 if the small path of this work item (kv heads hk .. hk + kvt) may read
   FP8 rows in place; fills the factors. */
static int fp8_rows_plan(const fa_problem *p, const cpu_tiles *t,
                         const fa_fwd_args *args, int b, int hk, int kvt,
                         cpu_fp8_rows *fr) {
  fr->e5m2 = p->dtype == FA_E5M2;
  fr->wide = p->dtype == FA_BF16 || p->dtype == FA_F16 || p->dtype == FA_F32;
  fr->esz = (int)fa_dtype_size(p->dtype);
  if (!FA_FP8_ROWS || !(fa_dtype_is_fp8(p->dtype) || fr->wide) ||
      t->bk > FA_FP8_ROW_KEYS || p->a.head_dim % FA_VW ||
      p->a.head_dim_v % FA_VW)
    return 0;
  // Wide rows are loaded, not multiplied: descaled ones take the tiles.
  if (fr->wide && (args->k.descale || args->v.descale)) return 0;
  const float unit = fr->wide ? 1.0f : fa_fp8_unit(fr->e5m2);
  for (int x = 0; x < kvt; x++) {
    // A factor that overflows (a descale near FLT_MAX) would turn a zero
    // code into NaN: the tile path multiplies after decoding instead.
    fr->kx[x] = unit * fa_tensor_descale(&args->k, p->a.heads_kv, b, hk + x);
    fr->vx[x] = unit * fa_tensor_descale(&args->v, p->a.heads_kv, b, hk + x);
    if (!isfinite(fr->kx[x]) || !isfinite(fr->vx[x])) return 0;
  }
  return 1;
}

/* The row offsets of keys [col0, col0 + nc) (one block-table lookup per
   key, shared by every kv head), and of the next block's first K rows
   before kend. */
static void fp8_rows_block(const fa_problem *p, const fa_fwd_args *args, int b,
                           int hk, int col0, int nc, int kend,
                           cpu_fp8_rows *fr) {
  for (int c = 0; c < nc; c++) {
    fr->koff[c] = fa_k_offset(p, &args->k, b, col0 + c, hk) * fr->esz;
    fr->voff[c] = fa_k_offset(p, &args->v, b, col0 + c, hk) * fr->esz;
  }
  const int left = kend - (col0 + nc);
  fr->nnext =
      left < FA_PREFETCH_KEYS ? (left > 0 ? left : 0) : FA_PREFETCH_KEYS;
  for (int c = 0; c < fr->nnext; c++)
    fr->knext[c] = fa_k_offset(p, &args->k, b, col0 + nc + c, hk) * fr->esz;
}

/* The offset of the K row e + FA_PREFETCH_KEYS keys on (this block or the
   next one's first), or -1 past the item's keys. */
FA_ALWAYS_INLINE int64_t fp8_rows_ahead(const cpu_fp8_rows *fr, int e, int nc) {
  const int a = e + FA_PREFETCH_KEYS;
  return a < nc ? fr->koff[a] : a - nc < fr->nnext ? fr->knext[a - nc] : -1;
}

/* Asks for the K row FA_PREFETCH_KEYS keys on from key e (kbytes) and for
   key e's V row (vbytes), which P.V reads next. */
FA_ALWAYS_INLINE void fp8_rows_prefetch(const cpu_fp8_rows *fr,
                                        const uint8_t *kb, const uint8_t *vb,
                                        int e, int nc, int kbytes, int vbytes) {
  const int64_t ka = fp8_rows_ahead(fr, e, nc);
  if (ka >= 0)
    for (int off = 0; off < kbytes; off += 64)
      __builtin_prefetch(kb + ka + off, 0, FA_PREFETCH_LOCALITY);
  for (int off = 0; off < vbytes; off += 64)
    __builtin_prefetch(vb + fr->voff[e] + off, 0, FA_PREFETCH_LOCALITY);
}

#ifdef FA_FP8_DP
#include "cpu_rows_fp8_dp.h"
#endif

/* Whether the item's q.k takes vdpbf16ps (cpu_rows_fp8_dp.h: FP8 inputs,
   d a multiple of 64, factors in range, a CPU where it pays); if so, its
   q rows in bf16 are made (nr lanes) and 1 returned, else 0: the caller
   makes the fp32 q rows. */
static int fp8_rows_dp(const fa_problem *p, const cpu_tiles *t, float *ws,
                       const fa_fwd_args *args, const cpu_lanes *ln, int b,
                       int hk, int kvt, int nr, cpu_fp8_rows *fr) {
  fr->dp = 0;
#ifdef FA_FP8_DP
  if (!fa_dtype_is_fp8(p->dtype) || p->a.head_dim % 64 || p->a.head_dim_v % 64)
    return 0;
  for (int x = 0; x < kvt; x++) {
    fr->kd[x] = fa_tensor_descale(&args->k, p->a.heads_kv, b, hk + x);
    fr->vd[x] = fa_tensor_descale(&args->v, p->a.heads_kv, b, hk + x);
    const float qf =
        p->a.scale * fa_tensor_descale(&args->q, p->a.heads_kv, b, hk + x);
    if (!fp8_dp_factor_ok(qf) || !fp8_dp_factor_ok(fr->kd[x]) ||
        !fp8_dp_factor_ok(fr->vd[x]))
      return 0;
  }
  if (!fa_cpu_fp8_dp_pays()) return 0;
  fp8_dp_q_rows(p, t, ws, args, ln, b, nr);
  fr->dp = 1;
#else
  (void)t, (void)ws, (void)args, (void)ln, (void)b, (void)hk, (void)kvt;
  (void)nr;
#endif
  return fr->dp;
}

/* How a row's codes are decoded: e4m3 without setting NaN codes apart (a
   row checked to hold none, vf_e4m3_any_nan: three vector operations fewer
   per vector of codes), e4m3 exactly, e5m2 (whose NaN and inf codes need
   no care: they are an f16's), or 16-bit values widened. */
enum {
  FA_FP8_E4M3_RAW = 0,
  FA_FP8_E4M3 = 1,
  FA_FP8_E5M2 = 2,
  FA_ROWS_BF16 = 3,
  FA_ROWS_F16 = 4,
  FA_ROWS_F32 = 5
};

/* FA_VW values from value i of a row (x: the FP8 factor). */
FA_ALWAYS_INLINE fa_vf fp8_vec(const int kind, const uint8_t *row, int i,
                               fa_vf x) {
  if (kind == FA_ROWS_F32) return vf_load((const float *)(const void *)row + i);
  if (kind >= FA_ROWS_BF16)
    return vf_widen((const uint16_t *)(const void *)row + i,
                    kind == FA_ROWS_F16);
  return kind == FA_FP8_E4M3_RAW
             ? vf_e4m3_scaled_raw(row + i, x)
             : vf_fp8_scaled(row + i, kind == FA_FP8_E5M2, x);
}

/* Scores of key rows k0 (and k1 when K2 = 2) for lanes [r0, r0 + 4) of
   qr: two keys share each q load and give eight independent FMA chains
   (four are too few to cover the FMA latency over d). */
FA_ALWAYS_INLINE void dots_fp8(const int kind, const int K2, const int d,
                               const int ld, const float *q0, const uint8_t *k0,
                               const uint8_t *k1, fa_vf kx, float *sum0,
                               float *sum1) {
  fa_vf a[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
  fa_vf z[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
  for (int i = 0; i < d; i += FA_VW) {
    const fa_vf kv0 = fp8_vec(kind, k0, i, kx);
    const fa_vf kv1 = K2 == 2 ? fp8_vec(kind, k1, i, kx) : kv0;
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++) {
      const fa_vf q = vf_load(q0 + (size_t)y * ld + i);
      a[y] = vf_fma(q, kv0, a[y]);
      if (K2 == 2) z[y] = vf_fma(q, kv1, z[y]);
    }
  }
  vf_hsum4(a, sum0);
  if (K2 == 2) vf_hsum4(z, sum1);
}

/* The scores of keys [0, nc) for lanes [lane0, lane0 + nr), four lanes and
   two keys at a time (as scores_rows; qr holds the scaled q rows and 3
   zero rows after them). An e4m3 key row holding a NaN code has a NaN
   score in every lane (q . k is NaN whatever q is): its dot products are
   computed from the raw decode and then replaced. Asks for the K rows a
   few keys ahead and for each key's V row, which P.V reads next. */
FA_ALWAYS_INLINE void scores_fp8_kind(const int kind, const int d, const int dv,
                                      const int ld, const int bq,
                                      const float *qr, float *s,
                                      const uint8_t *kb, const uint8_t *vb,
                                      const cpu_fp8_rows *fr, fa_vf kx, int nc,
                                      int lane0, int nr) {
  const int esz = kind == FA_ROWS_F32 ? 4 : kind >= FA_ROWS_BF16 ? 2 : 1;
  for (int c = 0; c < nc; c += 2) {
    const int two = c + 1 < nc;
    for (int e = c; e < c + 1 + two; e++)
      fp8_rows_prefetch(fr, kb, vb, e, nc, d * esz, dv * esz);
    const uint8_t *k0 = kb + fr->koff[c], *k1 = kb + fr->koff[c + two];
    const int nan0 = kind == FA_FP8_E4M3_RAW && vf_e4m3_any_nan(k0, d);
    const int nan1 = kind == FA_FP8_E4M3_RAW && vf_e4m3_any_nan(k1, d);
    for (int r0 = 0; r0 < nr; r0 += 4) {
      const float *q0 = qr + (size_t)r0 * ld;
      float sum0[4], sum1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (two)
        dots_fp8(kind, 2, d, ld, q0, k0, k1, kx, sum0, sum1);
      else
        dots_fp8(kind, 1, d, ld, q0, k0, k1, kx, sum0, sum1);
      float *s0 = s + (size_t)c * bq + lane0 + r0;
      for (int y = 0; y < 4 && r0 + y < nr; y++) {
        s0[y] = nan0 ? NAN : sum0[y];
        if (two) s0[bq + y] = nan1 ? NAN : sum1[y];
      }
    }
  }
}

#if defined(__AVX512BF16__) && FA_VW == 16
/* bf16 rows with AVX512-BF16: q . k by vdpbf16ps on the pairs as stored
   (each fp32 lane adds the products of two adjacent values of d; the
   products are exact, as in the bf16 step's scores), then times the scale:
   no widening of K and a quarter of the vector operations of the widened
   dot products, which bound decode where keys stream from L3 or one core
   reads DRAM (bench/NOTES.md, Zen 5). q comes from the tensor (bf16, no
   descale), four lanes at a time, two keys per q load; lanes past nr read
   zeros. */
static void scores_bf16_dp(const fa_problem *p, const fa_fwd_args *args,
                           const cpu_lanes *ln, int b, float *s, int bq,
                           const uint8_t *kb, const uint8_t *vb,
                           const cpu_fp8_rows *fr, int nc, int lane0, int nr) {
  static const uint16_t zeros[FA_MAX_DIM_DP] = {0};
  const int d = p->a.head_dim, dv = p->a.head_dim_v;
  const __m512 scale = _mm512_set1_ps(p->a.scale);
  for (int r0 = 0; r0 < nr; r0 += 4) {
    const uint16_t *q[4];
    for (int y = 0; y < 4; y++) {
      const int lane = lane0 + r0 + y;
      q[y] = r0 + y < nr
                 ? (const uint16_t *)args->q.data +
                       fa_q_offset(p, &args->q, b, ln->row0 + lane / ln->pk,
                                   ln->h0 + lane % ln->pk)
                 : zeros;
    }
    for (int c = 0; c < nc; c += 2) {
      const int two = c + 1 < nc;
      if (r0 == 0)
        for (int e = c; e < c + 1 + two; e++)
          fp8_rows_prefetch(fr, kb, vb, e, nc, d * 2, dv * 2);
      const uint16_t *k0 = (const uint16_t *)(const void *)(kb + fr->koff[c]);
      const uint16_t *k1 =
          (const uint16_t *)(const void *)(kb + fr->koff[c + two]);
      fa_vf a[4], z[4];
      for (int y = 0; y < 4; y++) a[y] = z[y] = _mm512_setzero_ps();
      for (int i = 0; i < d; i += 32) {
        const __m512bh kv0 = (__m512bh)_mm512_loadu_si512(k0 + i);
        const __m512bh kv1 = (__m512bh)_mm512_loadu_si512(k1 + i);
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) {
          const __m512bh qv = (__m512bh)_mm512_loadu_si512(q[y] + i);
          a[y] = _mm512_dpbf16_ps(a[y], qv, kv0);
          z[y] = _mm512_dpbf16_ps(z[y], qv, kv1);
        }
      }
      for (int y = 0; y < 4; y++) {
        a[y] = _mm512_mul_ps(a[y], scale);
        z[y] = _mm512_mul_ps(z[y], scale);
      }
      float sum0[4], sum1[4];
      vf_hsum4(a, sum0);
      vf_hsum4(z, sum1);
      float *s0 = s + (size_t)c * bq + lane0 + r0;
      for (int y = 0; y < 4 && r0 + y < nr; y++) {
        s0[y] = sum0[y];
        if (two) s0[bq + y] = sum1[y];
      }
    }
  }
}
#endif

/* S^T[c][r] = q_r . (descaled k_c) for lanes [lane0, lane0 + nr) of kv head
   hk + x (ln, b: the item's lanes and sequence). */
static void scores_fp8(const fa_problem *p, const cpu_tiles *t, float *ws,
                       const fa_fwd_args *args, const cpu_lanes *ln, int b,
                       const cpu_fp8_rows *fr, int x, int nc, int lane0,
                       int nr) {
  const uint8_t *kb =
      (const uint8_t *)args->k.data + x * args->k.stride_head * fr->esz;
  const uint8_t *vb =
      (const uint8_t *)args->v.data + x * args->v.stride_head * fr->esz;
  const float *qr = ws + t->qr + (size_t)lane0 * t->ld;
  const fa_vf kx = vf_set1(fr->kx[x]);
  const int d = p->a.head_dim, dv = p->a.head_dim_v;
  float *s = ws + t->s;
#ifdef FA_FP8_DP
  if (fr->dp) {
    scores_fp8_dp(p, t, ws, args, fr, x, nc, lane0, nr);
    return;
  }
#endif
#if defined(__AVX512BF16__) && FA_VW == 16
  if (FA_ROWS_DPBF16 && p->dtype == FA_BF16 && d % 32 == 0 &&
      d <= FA_MAX_DIM_DP && !args->q.descale) {
    scores_bf16_dp(p, args, ln, b, s, t->bq, kb, vb, fr, nc, lane0, nr);
    return;
  }
#endif
  (void)ln;
  (void)b;
  if (p->dtype == FA_F32)
    scores_fp8_kind(FA_ROWS_F32, d, dv, t->ld, t->bq, qr, s, kb, vb, fr, kx, nc,
                    lane0, nr);
  else if (p->dtype == FA_BF16)
    scores_fp8_kind(FA_ROWS_BF16, d, dv, t->ld, t->bq, qr, s, kb, vb, fr, kx,
                    nc, lane0, nr);
  else if (p->dtype == FA_F16)
    scores_fp8_kind(FA_ROWS_F16, d, dv, t->ld, t->bq, qr, s, kb, vb, fr, kx, nc,
                    lane0, nr);
  else if (fr->e5m2)
    scores_fp8_kind(FA_FP8_E5M2, d, dv, t->ld, t->bq, qr, s, kb, vb, fr, kx, nc,
                    lane0, nr);
  else
    scores_fp8_kind(FA_FP8_E4M3_RAW, d, dv, t->ld, t->bq, qr, s, kb, vb, fr, kx,
                    nc, lane0, nr);
}

/* O[r][:] += P^T[c][r] (descaled v_c) for N lanes from r0 sharing the
   visible keys [lo, hi) (only visible pairs are multiplied: a masked key
   adds nothing, not even 0 * NaN). Dims outer, keys inner: the N x NI
   accumulators of NI vectors of dims stay in registers over the keys
   (NI = 4 where the dims allow: N x 1 chains would wait on the FMA
   latency), and each V vector is widened once for all N lanes. */
FA_ALWAYS_INLINE void pv_fp8_dims(const int kind, const int N, const int NI,
                                  const cpu_tiles *t, const float *s,
                                  const uint8_t *vb, const cpu_fp8_rows *fr,
                                  fa_vf vx, int i, int r0, int lo, int hi,
                                  float *o) {
  const int bq = t->bq, ldo = t->ldv;
  fa_vf acc[4][4];
#pragma GCC unroll 4
  for (int y = 0; y < N; y++)
#pragma GCC unroll 4
    for (int j = 0; j < NI; j++)
      acc[y][j] = vf_load(o + (size_t)(r0 + y) * ldo + i + j * FA_VW);
  for (int c = lo; c < hi; c++) {
    fa_vf vv[4];
#pragma GCC unroll 4
    for (int j = 0; j < NI; j++)
      vv[j] = fp8_vec(kind, vb + fr->voff[c], i + j * FA_VW, vx);
    const float *pc = s + (size_t)c * bq + r0;
#pragma GCC unroll 4
    for (int y = 0; y < N; y++) {
      const fa_vf pr = vf_set1(pc[y]);
#pragma GCC unroll 4
      for (int j = 0; j < NI; j++) acc[y][j] = vf_fma(pr, vv[j], acc[y][j]);
    }
  }
#pragma GCC unroll 4
  for (int y = 0; y < N; y++)
#pragma GCC unroll 4
    for (int j = 0; j < NI; j++)
      vf_store(o + (size_t)(r0 + y) * ldo + i + j * FA_VW, acc[y][j]);
}

/* Dims per pass over the keys, in vectors: N x FA_PV_NI accumulators, the
   widened V vectors and a broadcast must stay in registers. With 16
   registers (AVX2) 4 x 4 accumulators spilled, each key's FMAs then
   waiting on a store and a reload of the spilled ones: 4 lanes x 2
   vectors made the AVX2 decode 5-9% faster on Zen 3 (bench/NOTES.md). */
#define FA_PV_NI (FA_VREGS >= 32 ? 4 : 2)

FA_ALWAYS_INLINE void pv_fp8_lanes(const int kind, const int N,
                                   const cpu_tiles *t, const float *s,
                                   const uint8_t *vb, const cpu_fp8_rows *fr,
                                   fa_vf vx, int dv, int r0, int lo, int hi,
                                   float *o) {
  int i = 0;
  for (; i + FA_PV_NI * FA_VW <= dv; i += FA_PV_NI * FA_VW)
    pv_fp8_dims(kind, N, FA_PV_NI, t, s, vb, fr, vx, i, r0, lo, hi, o);
  for (; i < dv; i += FA_VW)
    pv_fp8_dims(kind, N, 1, t, s, vb, fr, vx, i, r0, lo, hi, o);
}

/* The N-lane groups of one decoding kind. */
FA_ALWAYS_INLINE void pv_fp8_kind(const int kind, const cpu_tiles *t,
                                  const float *s, const uint8_t *vb,
                                  const cpu_fp8_rows *fr, fa_vf vx, int dv,
                                  int r, int n, int lo, int hi, float *o) {
  switch (n) {
  case 4:
    pv_fp8_lanes(kind, 4, t, s, vb, fr, vx, dv, r, lo, hi, o);
    break;
  case 3:
    pv_fp8_lanes(kind, 3, t, s, vb, fr, vx, dv, r, lo, hi, o);
    break;
  case 2:
    pv_fp8_lanes(kind, 2, t, s, vb, fr, vx, dv, r, lo, hi, o);
    break;
  default:
    pv_fp8_lanes(kind, 1, t, s, vb, fr, vx, dv, r, lo, hi, o);
    break;
  }
}

#if defined(__AVX512BF16__) && FA_VW == 16
/* bf16 rows with AVX512-BF16: O[r][:] += P.V for N lanes from r0 sharing
   the visible keys [lo, hi), by vdpbf16ps on pairs of keys: P rounded to
   bf16 (as the bf16 step does), V rows c and c + 1 interleaved by 16-bit
   unpacks (an odd last key is paired with zeros, not with the next row,
   which may be another sequence's or NaN). An unpack works within 128-bit
   lanes, so each fp32 accumulator holds its 16 dims in a fixed
   permutation (unpacklo: dims 0-3, 8-11, 16-19, 24-27 of 32; unpackhi
   the others), undone once per block when the sums are added to O.
   Per key and lane 2 vdpbf16ps at dv = 64 against 4 widenings and 4 FMAs.
   dv: a multiple of 64. */
FA_ALWAYS_INLINE void pv_bf16_dp_lanes(const int N, const cpu_tiles *t,
                                       const float *s, const uint8_t *vb,
                                       const cpu_fp8_rows *fr, int dv, int r0,
                                       int lo, int hi, float *o) {
  const int bq = t->bq, ldo = t->ldv;
  const __m512i lo16 =
      _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi16 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13,
                                         14, 15, 28, 29, 30, 31);
  for (int i = 0; i < dv; i += 64) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int y = 0; y < N; y++)
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) acc[y][j] = _mm512_setzero_ps();
    for (int c = lo; c < hi; c += 2) {
      const int two = c + 1 < hi;
      const uint16_t *v0 = (const uint16_t *)(const void *)(vb + fr->voff[c]);
      const __m512i a0 = _mm512_loadu_si512(v0 + i);
      const __m512i b0 = _mm512_loadu_si512(v0 + i + 32);
      __m512i a1 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
      if (two) {
        const uint16_t *v1 =
            (const uint16_t *)(const void *)(vb + fr->voff[c + 1]);
        a1 = _mm512_loadu_si512(v1 + i);
        b1 = _mm512_loadu_si512(v1 + i + 32);
      }
      const __m512bh u[4] = {(__m512bh)_mm512_unpacklo_epi16(a0, a1),
                             (__m512bh)_mm512_unpackhi_epi16(a0, a1),
                             (__m512bh)_mm512_unpacklo_epi16(b0, b1),
                             (__m512bh)_mm512_unpackhi_epi16(b0, b1)};
      // P of keys c, c + 1 for lanes r0 .. r0 + 3 (lanes past N unused), as
      // bf16 pairs: word 2y key c, word 2y + 1 key c + 1.
      const __m128 pc = _mm_loadu_ps(s + (size_t)c * bq + r0);
      const __m128 pn =
          two ? _mm_loadu_ps(s + (size_t)(c + 1) * bq + r0) : _mm_setzero_ps();
      const __m128i pp = _mm_unpacklo_epi16((__m128i)_mm_cvtneps_pbh(pc),
                                            (__m128i)_mm_cvtneps_pbh(pn));
      int32_t pw[4];
      _mm_storeu_si128((__m128i *)(void *)pw, pp);
#pragma GCC unroll 4
      for (int y = 0; y < N; y++) {
        const __m512bh pr = (__m512bh)_mm512_set1_epi32(pw[y]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
          acc[y][j] = _mm512_dpbf16_ps(acc[y][j], pr, u[j]);
      }
    }
#pragma GCC unroll 4
    for (int y = 0; y < N; y++) {
      float *orow = o + (size_t)(r0 + y) * ldo + i;
#pragma GCC unroll 2
      for (int h = 0; h < 2; h++) {
        const __m512 l = acc[y][2 * h], u2 = acc[y][2 * h + 1];
        float *od = orow + 32 * h;
        _mm512_storeu_ps(od,
                         _mm512_add_ps(_mm512_loadu_ps(od),
                                       _mm512_permutex2var_ps(l, lo16, u2)));
        _mm512_storeu_ps(od + 16,
                         _mm512_add_ps(_mm512_loadu_ps(od + 16),
                                       _mm512_permutex2var_ps(l, hi16, u2)));
      }
    }
  }
}

static void pv_bf16_dp(const cpu_tiles *t, const float *s, const uint8_t *vb,
                       const cpu_fp8_rows *fr, int dv, int r, int n, int lo,
                       int hi, float *o) {
  switch (n) {
  case 4:
    pv_bf16_dp_lanes(4, t, s, vb, fr, dv, r, lo, hi, o);
    break;
  case 3:
    pv_bf16_dp_lanes(3, t, s, vb, fr, dv, r, lo, hi, o);
    break;
  case 2:
    pv_bf16_dp_lanes(2, t, s, vb, fr, dv, r, lo, hi, o);
    break;
  default:
    pv_bf16_dp_lanes(1, t, s, vb, fr, dv, r, lo, hi, o);
    break;
  }
}
#endif

/* P.V for lanes [lane0, lane0 + nr) of kv head hk + x: lanes four at a
   time, a lane alone where its visible keys differ from its neighbours'
   (rows of a speculative step packed in one tile). e4m3 V rows are
   decoded raw unless one of the visible rows holds a NaN code. */
static void pv_fp8(const fa_problem *p, const cpu_tiles *t, float *ws,
                   const fa_fwd_args *args, const cpu_fp8_rows *fr, int x,
                   int lane0, int nr, const int *lo, const int *hi, float *o) {
  const int dv = p->a.head_dim_v;
  const uint8_t *vb =
      (const uint8_t *)args->v.data + x * args->v.stride_head * fr->esz;
  const float *s = ws + t->s;
  const fa_vf vx = vf_set1(fr->vx[x]);
  int r = lane0;
  while (r < lane0 + nr) {
    int n = 1;
    while (n < 4 && r + n < lane0 + nr && lo[r + n] == lo[r] &&
           hi[r + n] == hi[r])
      n++;
#ifdef FA_FP8_DP
    if (fr->dp) {
      pv_fp8_dp(t, s, vb, fr, x, dv, r, n, lo[r], hi[r], o);
      r += n;
      continue;
    }
#endif
    int nan = 0;
    for (int c = lo[r]; !fr->e5m2 && !fr->wide && !nan && c < hi[r]; c++)
      nan = vf_e4m3_any_nan(vb + fr->voff[c], dv);
    if (p->dtype == FA_F32)
      pv_fp8_kind(FA_ROWS_F32, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
#if defined(__AVX512BF16__) && FA_VW == 16
    else if (FA_ROWS_DPBF16 && p->dtype == FA_BF16 && dv % 64 == 0)
      pv_bf16_dp(t, s, vb, fr, dv, r, n, lo[r], hi[r], o);
#endif
    else if (p->dtype == FA_BF16)
      pv_fp8_kind(FA_ROWS_BF16, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
    else if (p->dtype == FA_F16)
      pv_fp8_kind(FA_ROWS_F16, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
    else if (fr->e5m2)
      pv_fp8_kind(FA_FP8_E5M2, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
    else if (nan)
      pv_fp8_kind(FA_FP8_E4M3, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
    else
      pv_fp8_kind(FA_FP8_E4M3_RAW, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
    r += n;
  }
}
