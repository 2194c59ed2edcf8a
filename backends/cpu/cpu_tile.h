// SPDX-License-Identifier: MIT
// The tiles of the CPU kernels: the per-thread working tiles, the query
// lanes of a tile, row loads that widen any storage type to fp32, the
// visible keys of each lane (masks) and the score pipeline after the dot
// products (softcap, ALiBi, mask). Part of cpu_kernels.h.
//
// Layout idea: the score tile is kept transposed, S^T[key][query], so that
// every softmax step (column max, exp, column sum, rescale factors) is a
// vertical vector operation over queries and no horizontal reduction is
// ever needed. Q^T is packed once per work item and reused for every kv
// block; K and V rows are used as they are. (The tiles' layout, cpu_tiles,
// is in cpu_work.h: the driver carves the workspace by it.)

/* Tiles with at most this many valid query lanes (decode: one row of each
   head of a GQA group) take the row-streaming path: scores as dot products
   over d and P.V as row updates, each K/V row read (and widened) once. The
   GEMM would waste most of its vector lanes on them. */
#define FA_SMALL_LANES 8
/* Most kv heads one tile may span (the plan's max_small_lanes bounds it). */
#define FA_MAX_KV_TILES 64
/* How far ahead (in keys) the row-streaming path prefetches K rows (the V
   rows are asked for in the scores pass, a pass before P.V reads them):
   one block of decode keys (32). Measured on Zen 4 (bench/NOTES.md,
   2026-12-07), 32/8 heads d128 from DRAM: bf16 1 thread 10.2-10.7 ->
   7.6-8.0 ms against 4 keys, 2 threads 5.4-5.6 -> 4.6-5.1; 16 keys gave
   half of that, 64 a little less than 32; from L3 unchanged or faster.
   Four keys kept each core's misses in flight too few for DRAM's latency.
   (isa_amxbf16.c sets its own.) */
#ifndef FA_PREFETCH_KEYS
#define FA_PREFETCH_KEYS 32
#endif
/* Where those prefetches land: __builtin_prefetch's locality, 2 =
   prefetcht1, the L2, rather than 3 (prefetcht0, the L1; before):
   measured on Zen 4, bf16 decode 32/8 heads d128 32k keys, 1 thread 15.6
   -> 12.0 ms, 2 threads 7.6-7.9 -> 6.0-7.3 ms, from L3 unchanged
   (bench/NOTES.md, 2026-12-04). The likely reason (no PMU in that VM to
   confirm it): the row path is bound by the misses a core keeps in flight
   (the rows of one kv head lie heads_kv rows apart, which the hardware
   prefetchers do not follow), and prefetches into the L1 hold its few
   miss buffers, which the loads need. */
#ifndef FA_PREFETCH_LOCALITY
#define FA_PREFETCH_LOCALITY 2
#endif

/* ---- tile loads ------------------------------------------------------- */

/* Multiply n floats by x (a tensor's descale; 1 leaves them as loaded). */
static void scale_row(float *d, int n, float x) {
  if (x == 1.0f) return;
  for (int i = 0; i < n; i++) d[i] *= x;
}

/* Rows [row0, row0+n) of a q-like tensor (q, o, do) for (b, h), widened to
   fp32 and descaled (the decoded inputs of the header) into dst[n][ld];
   dims [dim, ld) are zeroed so padded products are exact. */
static void load_q_rows(float *dst, int ld, const fa_problem *p,
                        const fa_tensor *t, int b, int h, int row0, int n,
                        int dim) {
  const float x = fa_tensor_descale(t, p->a.heads_kv, b, h / p->group);
  for (int r = 0; r < n; r++) {
    float *d = dst + (size_t)r * ld;
    vf_widen_row(d, t->data, t->dtype, fa_q_offset(p, t, b, row0 + r, h), dim);
    scale_row(d, dim, x);
    if (ld > dim) memset(d + dim, 0, sizeof(float) * (size_t)(ld - dim));
  }
}

/* Same for key rows of k-like tensors, through the block table when paged.
   Only rows below the sequence's length may be asked for. */
static void load_k_rows(float *dst, int ld, const fa_problem *p,
                        const fa_tensor *t, int b, int h, int row0, int n,
                        int dim) {
  const float x = fa_tensor_descale(t, p->a.heads_kv, b, h);
  for (int r = 0; r < n; r++) {
    float *d = dst + (size_t)r * ld;
    vf_widen_row(d, t->data, t->dtype, fa_k_offset(p, t, b, row0 + r, h), dim);
    scale_row(d, dim, x);
    if (ld > dim) memset(d + dim, 0, sizeof(float) * (size_t)(ld - dim));
  }
}

/* Query lanes of a tile: lane r is row row0 + r / pk of head h0 + r % pk
   (pk > 1 packs the q heads that share a kv head into one tile). */
typedef struct cpu_lanes {
  int h0, pk, row0, npos; // first head, heads per row, first row, rows
  int64_t shift;          // the sequence's diagonal offset (fa_diag_shift)
} cpu_lanes;

/* How many rows ahead a tile's row loops (Q in, O out) ask for their
   rows: a head's rows lie 4 KiB apart in BSHD, each on a page of its own,
   which the hardware prefetchers do not cross; one row at a time would
   keep a single row's misses in flight. */
#define FA_ROWS_AHEAD 4

/* Lane r's row of a q-like tensor (q, o) for the tile's lanes, fetched
   into the cache ahead of its use (write: about to be stored). */
static void prefetch_lane_row(const fa_problem *p, const fa_tensor *t, int b,
                              const cpu_lanes *ln, int r, int dim, int write) {
  const int64_t esz = (int64_t)fa_dtype_size(t->dtype);
  const char *row =
      (const char *)t->data +
      fa_q_offset(p, t, b, ln->row0 + r / ln->pk, ln->h0 + r % ln->pk) * esz;
  for (int64_t off = 0; off < dim * esz; off += 64) {
    if (write)
      __builtin_prefetch(row + off, 1);
    else
      __builtin_prefetch(row + off);
  }
}

/* The tile's q rows, times mul and their descale, transposed into
   dst[dim][bq] (row pitch ldt); lanes past the valid ones are zero so
   padded lanes stay finite. */
static void load_q_transposed(float *dst, int bq, int64_t ldt, float *row,
                              const fa_problem *p, const fa_tensor *t, int b,
                              const cpu_lanes *ln, int dim, float mul) {
  const int nr = ln->npos * ln->pk;
  for (int r = 0; r < bq; r++) {
    float x = mul;
    if (r + FA_ROWS_AHEAD < nr)
      prefetch_lane_row(p, t, b, ln, r + FA_ROWS_AHEAD, dim, 0);
    if (r < nr) {
      const int h = ln->h0 + r % ln->pk;
      vf_widen_row(row, t->data, t->dtype,
                   fa_q_offset(p, t, b, ln->row0 + r / ln->pk, h), dim);
      x *= fa_tensor_descale(t, p->a.heads_kv, b, h / p->group);
    } else {
      memset(row, 0, sizeof(float) * (size_t)dim);
    }
    for (int d = 0; d < dim; d++) dst[d * ldt + r] = row[d] * x;
  }
}

/* Where score (key c, lane r) of a tile lives: s[c * cs + r * rs]. The
   forward and backward pass 3 keep S^T ([key][lane]: cs = lanes, rs = 1);
   backward pass 2 keeps S ([lane][key]). grad_lanes: lanes whose chain-rule
   factor is written (all of them, padded lanes included, in S^T). */
typedef struct cpu_slayout {
  int64_t cs, rs;
  int grad_lanes;
} cpu_slayout;

/* 1 when some row of the tile does not see every key of [col0, col0 + nc):
   the window edges move one key per row, so the first and last rows
   decide. Only such tiles hold masked scores. */
static int tile_cut(const fa_problem *p, const cpu_lanes *ln, int sq, int sk,
                    int col0, int nc) {
  int lo_last, hi_last, lo_first, hi_first;
  fa_visible_keys(p, ln->shift, ln->row0, sk, &lo_first, &hi_first);
  fa_visible_keys(p, ln->shift, ln->row0 + ln->npos - 1, sk, &lo_last,
                  &hi_last);
  return !(lo_last <= col0 && hi_first >= col0 + nc && lo_first < hi_first);
}

/* The keys each valid lane of a tile sees, tile-local: lane r sees keys
   [lo[r], hi[r]) of [0, nc) (none when lo[r] == hi[r]). */
static void lane_keys(const fa_problem *p, const cpu_lanes *ln, int sq, int sk,
                      int col0, int nc, int *lo, int *hi) {
  for (int i = 0; i < ln->npos; i++) {
    int a, z;
    fa_visible_keys(p, ln->shift, ln->row0 + i, sk, &a, &z);
    a = a - col0 < 0 ? 0 : a - col0 > nc ? nc : a - col0;
    z = z - col0 < a ? a : z - col0 > nc ? nc : z - col0;
    for (int r = i * ln->pk; r < (i + 1) * ln->pk; r++) {
      lo[r] = a;
      hi[r] = z;
    }
  }
}

/* Zero the entries x[c * cs + r * rs] of a tile that lanes r < nr do not
   see (P and dS of masked pairs are exactly 0, whatever NaN the formula
   met on the way). */
static void zero_hidden(float *x, int64_t cs, int64_t rs, int nr, int nc,
                        const int *lo, const int *hi) {
  for (int r = 0; r < nr; r++) {
    for (int c = 0; c < lo[r]; c++) x[c * cs + r * rs] = 0.0f;
    for (int c = hi[r]; c < nc; c++) x[c * cs + r * rs] = 0.0f;
  }
}

/* x[at + i] = v for i in [0, n): a run the compiler turns into vector
   stores. */
static void fill_run(float *x, int64_t at, int n, float v) {
  for (int i = 0; i < n; i++) x[at + i] = v;
}

/* Masked scores of a cut tile set to -inf (grad, when given, to 0), as
   contiguous runs instead of element by element. Both window edges are
   non-decreasing in the row (fa_visible_keys), so key j is hidden from the
   rows [0, a) whose window ends at or before j and from the rows [z, npos)
   whose window starts after it: in S^T (lanes contiguous) two runs of
   lanes per key; in S (keys contiguous) two runs of keys per lane. */
static void mask_hidden(const fa_problem *p, float *s, const cpu_slayout *sl,
                        const cpu_lanes *ln, int sk, int col0, int nc,
                        float *grad) {
  const int pk = ln->pk, npos = ln->npos, nr = npos * pk;
  const int64_t cs = sl->cs, rs = sl->rs;
  if (rs == 1) {
    int a = 0,
        z = 0; // rows [0, a) end at or before key j; [z, npos) start after it
    for (int c = 0; c < nc; c++) {
      const int j = col0 + c;
      int lo, hi;
      for (; a < npos; a++) {
        fa_visible_keys(p, ln->shift, ln->row0 + a, sk, &lo, &hi);
        if (hi > j) break;
      }
      if (z < a) z = a;
      for (; z < npos; z++) {
        fa_visible_keys(p, ln->shift, ln->row0 + z, sk, &lo, &hi);
        if (lo > j) break;
      }
      fill_run(s, c * cs, a * pk, -INFINITY);
      fill_run(s, c * cs + (int64_t)z * pk, nr - z * pk, -INFINITY);
      if (grad) {
        fill_run(grad, c * cs, a * pk, 0.0f);
        fill_run(grad, c * cs + (int64_t)z * pk, nr - z * pk, 0.0f);
      }
    }
    return;
  }
  for (int i = 0; i < npos; i++) {
    int lo, hi;
    fa_visible_keys(p, ln->shift, ln->row0 + i, sk, &lo, &hi);
    lo = lo - col0 < 0 ? 0 : lo - col0 > nc ? nc : lo - col0;
    hi = hi - col0 < lo ? lo : hi - col0 > nc ? nc : hi - col0;
    for (int r = i * pk; r < (i + 1) * pk; r++) {
      for (int c = 0; c < lo; c++) s[c * cs + r * rs] = -INFINITY;
      for (int c = hi; c < nc; c++) s[c * cs + r * rs] = -INFINITY;
      if (grad) {
        for (int c = 0; c < lo; c++) grad[c * cs + r * rs] = 0.0f;
        for (int c = hi; c < nc; c++) grad[c * cs + r * rs] = 0.0f;
      }
    }
  }
}

/* The score pipeline after the dot products: softcap, ALiBi, mask (and
   with grad, d(score)/d(q.k): the scale, times 1 - tanh^2 under softcap). */
static void scores_post(const fa_problem *p, float *s, const cpu_slayout *sl,
                        const cpu_lanes *ln, int sq, int sk, int col0, int nc,
                        float *grad) {
  const int pk = ln->pk, nr = ln->npos * pk;
  const int64_t cs = sl->cs, rs = sl->rs;
  const int special = p->a.softcap > 0.0f || p->a.alibi_slopes;
  const int64_t shift = ln->shift;
  for (int c = 0; c < nc; c++) {
    float *sc = s + c * cs;
    if (grad) {
      float *gc = grad + c * cs;
      for (int r = 0; r < sl->grad_lanes; r++) {
        float g = p->a.scale;
        if (p->a.softcap > 0.0f) {
          float th = tanhf(sc[r * rs] / p->a.softcap);
          g *= 1.0f - th * th;
        }
        gc[r * rs] = g;
      }
    }
    if (special)
      for (int r = 0; r < nr; r++)
        sc[r * rs] = fa_score_transform(p, sc[r * rs], ln->h0 + r % pk,
                                        ln->row0 + r / pk, col0 + c, shift);
  }
  // Mask only blocks that cut through some row's window.
  if (tile_cut(p, ln, sq, sk, col0, nc))
    mask_hidden(p, s, sl, ln, sk, col0, nc, grad);
}

/* S^T[c][r] = k_c . q_r with the scale already folded into Q^T, then the
   score pipeline. Masked entries are -INFINITY; lanes past the valid ones
   are left as computed (finite). pf (or NULL): lines to prefetch on the
   way. */
static void scores(const fa_problem *p, const cpu_tiles *t, float *ws,
                   const float *k, int64_t ldk, const cpu_lanes *ln, int sq,
                   int sk, int col0, int nc, float *grad, cpu_prefetch *pf) {
  gemm_pf(nc, t->bq, p->a.head_dim, k, ldk, 1, ws + t->qt, t->ldqt, ws + t->s,
          t->bq, 0, pf);
  const cpu_slayout sl = {t->bq, 1, t->bq};
  scores_post(p, ws + t->s, &sl, ln, sq, sk, col0, nc, grad);
}

/* Small tiles: S^T[c][r] = q_r . k_c for lanes [lane0, lane0+nr), by dot
   products over d, four lanes at a time against each key row of k (row
   pitch ldk). qr holds the scaled q rows and 3 zero rows after them. */
static void scores_rows(const fa_problem *p, const cpu_tiles *t, float *ws,
                        const float *k, int64_t ldk, int nc, int lane0,
                        int nr) {
  const int d = p->a.head_dim, ld = t->ld, bq = t->bq;
  const float *qr = ws + t->qr + (size_t)lane0 * ld;
  float *s = ws + t->s;
  const int tail = d % FA_VW, full = d - tail;
  for (int c = 0; c < nc; c++) {
    const float *kr = k + c * ldk;
    for (int r0 = 0; r0 < nr; r0 += 4) {
      const float *q0 = qr + (size_t)r0 * ld;
      fa_vf a[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
      for (int i = 0; i < full; i += FA_VW) {
        fa_vf kv = vf_load(kr + i);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
          a[x] = vf_fma(vf_load(q0 + (size_t)x * ld + i), kv, a[x]);
      }
      if (tail) {
        fa_vf kv = vf_load_part(kr + full, tail);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
          a[x] =
              vf_fma(vf_load_part(q0 + (size_t)x * ld + full, tail), kv, a[x]);
      }
      for (int x = 0; x < 4 && r0 + x < nr; x++)
        s[(size_t)c * bq + lane0 + r0 + x] = vf_hsum(a[x]);
    }
  }
}
