// SPDX-License-Identifier: MIT
// Decode over an FP8 KV cache: the row-streaming tile path (few query
// lanes, each K/V row used once) reading K and V straight from the cache
// and widening them in registers (vf_fp8_scaled: decode and descale in one
// product), instead of widening every row into an fp32 tile first. A
// decode step is one pass over the cache: a quarter of the bytes of an
// fp32 tile copy, half of a bf16 cache's, and no tile store and reload.
// bf16 and f16 caches (without descale factors) take the same path, their
// rows widened in registers (vf_widen): the tile copy was half the time of
// a bf16 decode step; so do fp32 caches, their rows loaded as they are (the
// copy, a call per row, held the step to ~13 GB/s with every row in L2).
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

/* What one work item's FP8 rows need: per key of the current block, the
   byte offsets of its K and V rows for the first kv head of the tile
   (another kv head adds its stride_head), and per kv head of the tile the
   factor that vf_fp8_scaled multiplies by (1 for 16-bit rows). */
typedef struct cpu_fp8_rows {
  int e5m2, wide; // wide: rows of fp32, bf16 or f16 values, esz bytes each
  int esz;
  int64_t koff[FA_FP8_ROW_KEYS], voff[FA_FP8_ROW_KEYS];
  float kx[FA_MAX_KV_TILES], vx[FA_MAX_KV_TILES];
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
   key, shared by every kv head). */
static void fp8_rows_block(const fa_problem *p, const fa_fwd_args *args, int b,
                           int hk, int col0, int nc, cpu_fp8_rows *fr) {
  for (int c = 0; c < nc; c++) {
    fr->koff[c] = fa_k_offset(p, &args->k, b, col0 + c, hk) * fr->esz;
    fr->voff[c] = fa_k_offset(p, &args->v, b, col0 + c, hk) * fr->esz;
  }
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

/* The lane runs of a tile (cpu_forward.h fwd_block_rows): one per (row,
   kv head) of run_len lanes, run x of kv head x % kvt from lane lane0. */
typedef struct cpu_lane_runs {
  int kvt, nruns, pk, lpk, run_len;
} cpu_lane_runs;

static int run_lane0(const cpu_lane_runs *lr, int x) {
  return lr->kvt > 1 ? (x / lr->kvt) * lr->pk + (x % lr->kvt) * lr->lpk : 0;
}

/* The scores of keys [0, nc) for every lane run, four lanes at a time (as
   scores_rows; qr holds the scaled q rows and 3 zero rows after them).
   Keys outer, kv heads inner: the rows are read in storage order (all kv
   heads of a key side by side in BSHD layouts and paged caches), one
   ascending pass over each page, where a kv head at a time would step
   through the block's pages 4 KiB apart. An e4m3 key row holding a NaN
   code has a NaN score in every lane (q . k is NaN whatever q is): its dot
   products are computed from the raw decode and then replaced. Asks for
   the K rows a few keys ahead and for each key's V rows, which P.V reads
   next. */
FA_ALWAYS_INLINE void
scores_fp8_kind(const int kind, const int d, const int dv, const int ld,
                const int bq, const float *qr, float *s, const uint8_t *kb,
                const uint8_t *vb, int64_t kstep, int64_t vstep,
                const cpu_fp8_rows *fr, const cpu_lane_runs *lr, int nc) {
  const int esz = kind == FA_ROWS_F32 ? 4 : kind >= FA_ROWS_BF16 ? 2 : 1;
  const int kvt = lr->kvt;
  for (int c = 0; c < nc; c++) {
    for (int h = 0; h < kvt; h++) {
      if (c + FA_PREFETCH_KEYS < nc)
        for (int off = 0; off < d * esz; off += 64)
          __builtin_prefetch(kb + h * kstep + fr->koff[c + FA_PREFETCH_KEYS] +
                             off);
      for (int off = 0; off < dv * esz; off += 64)
        __builtin_prefetch(vb + h * vstep + fr->voff[c] + off);
    }
    for (int x = 0; x < lr->nruns; x++) {
      const int h = x % kvt, lane0 = run_lane0(lr, x), nr = lr->run_len;
      const uint8_t *kr = kb + h * kstep + fr->koff[c];
      const fa_vf kx = vf_set1(fr->kx[h]);
      const int nan = kind == FA_FP8_E4M3_RAW && vf_e4m3_any_nan(kr, d);
      for (int r0 = 0; r0 < nr; r0 += 4) {
        const float *q0 = qr + (size_t)(lane0 + r0) * ld;
        fa_vf a[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
        for (int i = 0; i < d; i += FA_VW) {
          const fa_vf kv = fp8_vec(kind, kr, i, kx);
#pragma GCC unroll 4
          for (int y = 0; y < 4; y++)
            a[y] = vf_fma(vf_load(q0 + (size_t)y * ld + i), kv, a[y]);
        }
        float sum[4];
        vf_hsum4(a, sum);
        for (int y = 0; y < 4 && r0 + y < nr; y++)
          s[(size_t)c * bq + lane0 + r0 + y] = nan ? NAN : sum[y];
      }
    }
  }
}

/* S^T[c][r] = q_r . (descaled k_c) for every lane run of the tile (kv
   heads hk .. hk + lr->kvt; fr's offsets are those of kv head hk). */
static void scores_fp8(const fa_problem *p, const cpu_tiles *t, float *ws,
                       const fa_fwd_args *args, const cpu_fp8_rows *fr,
                       const cpu_lane_runs *lr, int nc) {
  const uint8_t *kb = (const uint8_t *)args->k.data;
  const uint8_t *vb = (const uint8_t *)args->v.data;
  const int64_t kstep = args->k.stride_head * fr->esz,
                vstep = args->v.stride_head * fr->esz;
  const float *qr = ws + t->qr;
  const int d = p->a.head_dim, dv = p->a.head_dim_v;
  float *s = ws + t->s;
#define FA_SCORES_KIND(KIND)                                                   \
  scores_fp8_kind(KIND, d, dv, t->ld, t->bq, qr, s, kb, vb, kstep, vstep, fr,  \
                  lr, nc)
  if (p->dtype == FA_F32)
    FA_SCORES_KIND(FA_ROWS_F32);
  else if (p->dtype == FA_BF16)
    FA_SCORES_KIND(FA_ROWS_BF16);
  else if (p->dtype == FA_F16)
    FA_SCORES_KIND(FA_ROWS_F16);
  else if (fr->e5m2)
    FA_SCORES_KIND(FA_FP8_E5M2);
  else
    FA_SCORES_KIND(FA_FP8_E4M3_RAW);
#undef FA_SCORES_KIND
}

/* O[r][:] += P^T[c][r] (descaled v_c) for N lanes from r0 sharing the
   visible keys [lo, hi) (only visible pairs are multiplied: a masked key
   adds nothing, not even 0 * NaN). Dims outer, keys inner: the N
   accumulators of a vector of dims stay in registers over the keys, and
   each V vector is widened once for all N lanes. */
FA_ALWAYS_INLINE void pv_fp8_lanes(const int kind, const int N,
                                   const cpu_tiles *t, const float *s,
                                   const uint8_t *vb, const cpu_fp8_rows *fr,
                                   fa_vf vx, int dv, int r0, int lo, int hi,
                                   float *o) {
  const int bq = t->bq, ldo = t->ldv;
  for (int i = 0; i < dv; i += FA_VW) {
    fa_vf acc[4];
#pragma GCC unroll 4
    for (int y = 0; y < N; y++)
      acc[y] = vf_load(o + (size_t)(r0 + y) * ldo + i);
    for (int c = lo; c < hi; c++) {
      const fa_vf vv = fp8_vec(kind, vb + fr->voff[c], i, vx);
      const float *pc = s + (size_t)c * bq + r0;
#pragma GCC unroll 4
      for (int y = 0; y < N; y++) acc[y] = vf_fma(vf_set1(pc[y]), vv, acc[y]);
    }
#pragma GCC unroll 4
    for (int y = 0; y < N; y++)
      vf_store(o + (size_t)(r0 + y) * ldo + i, acc[y]);
  }
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
    int nan = 0;
    for (int c = lo[r]; !fr->e5m2 && !fr->wide && !nan && c < hi[r]; c++)
      nan = vf_e4m3_any_nan(vb + fr->voff[c], dv);
    if (p->dtype == FA_F32)
      pv_fp8_kind(FA_ROWS_F32, t, s, vb, fr, vx, dv, r, n, lo[r], hi[r], o);
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
