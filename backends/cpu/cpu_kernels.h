// SPDX-License-Identifier: MIT
// The CPU attention kernels, written once against the vocabulary of
// simd/simd_<isa>.h and compiled once per ISA (see isa_<isa>.c). Include
// after the vocabulary header and with FA_ISA_SUFFIX defined.
//
// Layout idea: the score tile is kept transposed, S^T[key][query], so that
// every softmax step (column max, exp, column sum, rescale factors) is a
// vertical vector operation over queries and no horizontal reduction is
// ever needed. Q^T is packed once per work item and reused for every kv
// block; K and V rows are used as they are. Every tile product is one GEMM
// micro-kernel, C (+)= A.B, where A is read by broadcasts through two
// strides (so A may be stored either way round) and B and C by vectors.
//
// Work split (the BLIS framework/micro-kernel split): OpenMP lives in the
// drivers below, over the plan's work items; kernels are single threaded
// and use per-thread tiles carved from the context's workspace.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "error.h"
#include "softmax.h"

#ifndef FA_HAVE_DPBF16
#define FA_HAVE_DPBF16 0
#endif

#define FA_CAT2(a, b) a##_##b
#define FA_CAT(a, b) FA_CAT2(a, b)
// Only the two entry points carry the ISA in their names (the backend table
// links them); everything else is static to its ISA's translation unit.
#define FA_FN(x) FA_CAT(x, FA_ISA_SUFFIX)

#if defined(__GNUC__)
#define FA_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define FA_ALWAYS_INLINE static inline
#endif

/* ---- GEMM: C[i][j] (+)= sum_p A[i*rs + p*cs] * B[p*ldb + j] ------------ */

/* One R x N-vector micro-tile. R, N, tail are compile-time constants after
   inlining: the accumulators live in registers. tail > 0 makes the last
   vector partial (tail lanes). */
FA_ALWAYS_INLINE void micro(const int R, const int N, const int tail, int k,
                            const float *A, int64_t rs, int64_t cs,
                            const float *B, int64_t ldb, float *C, int64_t ldc,
                            int accumulate) {
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

/* Row tails of a column chunk of N vectors (compile-time N, tail). */
FA_ALWAYS_INLINE void micro_rows(const int N, const int tail, int m, int k,
                                 const float *A, int64_t rs, int64_t cs,
                                 const float *B, int64_t ldb, float *C,
                                 int64_t ldc, int acc) {
  int i = 0;
  for (; i + FA_MR <= m; i += FA_MR)
    micro(FA_MR, N, tail, k, A + i * rs, rs, cs, B, ldb, C + i * ldc, ldc, acc);
#define FA_ROWS(R)                                                             \
  case R:                                                                      \
    micro(R, N, tail, k, A + i * rs, rs, cs, B, ldb, C + i * ldc, ldc, acc);   \
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
   whose final vector may be partial. */
static void gemm(int m, int n, int k, const float *A, int64_t rs, int64_t cs,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
  const int chunk = FA_NV * FA_VW;
  int j = 0;
  for (; j + chunk <= n; j += chunk)
    micro_rows(FA_NV, 0, m, k, A, rs, cs, B + j, ldb, C + j, ldc, acc);
  int left = n - j;
  if (left <= 0) return;
  int nvec = (left + FA_VW - 1) / FA_VW, tail = left % FA_VW;
#define FA_LAST(NV)                                                            \
  case NV:                                                                     \
    if (tail)                                                                  \
      micro_rows(NV, tail, m, k, A, rs, cs, B + j, ldb, C + j, ldc, acc);      \
    else                                                                       \
      micro_rows(NV, 0, m, k, A, rs, cs, B + j, ldb, C + j, ldc, acc);         \
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

/* The online-softmax step on S^T ([keys][lanes], pitch bq), column by
   column of FA_VW lanes: column_ref gives lanes [r, r + FA_VW) their new
   maximum over keys [0, nc) (*mx, from the running maxima m) and the
   reference the exps subtract; after the exps, column_done folds their sum
   into l and leaves m and the rescale factor alpha (in mu). online_softmax
   below, and a tile step that packs P as it exponentiates, are these two
   around an exp pass. */
static fa_vf column_ref(const float *s, int bq, const float *m, int nc, int r,
                        fa_vf *mx) {
  // Four independent maxima: the NaN-sticky max is a longer dependency
  // chain than a bare maxps, and nc of them in a row would show.
  const fa_vf m_old = vf_load(m + r);
  fa_vf x0 = m_old, x1 = m_old, x2 = m_old, x3 = m_old;
  int c = 0;
  for (; c + 4 <= nc; c += 4) {
    const float *sc = s + (size_t)c * bq + r;
    x0 = vf_max(x0, vf_load(sc));
    x1 = vf_max(x1, vf_load(sc + bq));
    x2 = vf_max(x2, vf_load(sc + 2 * (size_t)bq));
    x3 = vf_max(x3, vf_load(sc + 3 * (size_t)bq));
  }
  for (; c < nc; c++) x0 = vf_max(x0, vf_load(s + (size_t)c * bq + r));
  *mx = vf_max(vf_max(x0, x1), vf_max(x2, x3));
  // A row that has seen no key keeps m = -inf; exp against 0 then gives
  // P = 0 and alpha = 0 on an O that is still 0.
  return vf_neginf_to_zero(*mx);
}

static void column_done(float *m, float *l, float *mu, int r, fa_vf mx,
                        fa_vf ref, fa_vf sum) {
  const fa_vf alpha = vf_exp(vf_sub(vf_load(m + r), ref));
  vf_store(l + r, vf_fma(vf_load(l + r), alpha, sum));
  vf_store(m + r, mx);
  vf_store(mu + r, alpha);
}

#if FA_HAVE_DPBF16
#include "cpu_kernels_bf16.h"
#endif

/* ---- tiles ------------------------------------------------------------ */

/* Tiles with at most this many valid query lanes (decode: one row of each
   head of a GQA group) take the row-streaming path: scores as dot products
   over d and P.V as row updates, each K/V row read (and widened) once. The
   GEMM would waste most of its vector lanes on them. */
#define FA_SMALL_LANES 8
/* Most kv heads one tile may span (the plan's max_small_lanes bounds it). */
#define FA_MAX_KV_TILES 64
/* How far ahead (in keys) the row-streaming path prefetches K/V rows. */
#ifndef FA_PREFETCH_KEYS
#define FA_PREFETCH_KEYS 4
#endif

/* Per-thread working tiles, in floats. bq is a multiple of FA_VW so the
   query axis of transposed tiles is whole vectors. */
typedef struct cpu_tiles {
  int bq, bk, ld, ldv; // ld/ldv: row pitch of d / dv wide tiles
  size_t qt, q, dot, d_o, k, v, s, g, dp, acc, accv, m, l, mu, qr, row, p2;
  size_t kt, vt;
  size_t fo, fc, fml; // forward, long rows: the folded state (fold_state)
  size_t vis; // 2 * bq ints: each lane's visible keys of the tile, [lo, hi)
  size_t total;
} cpu_tiles;

/* The bf16 tile-product step (scores, softmax with P packed, P.V) and the
   key rounding its tiles need: vdpbf16ps by default, or the header the ISA
   names. */
#ifdef FA_TILE_STEP_HEADER
#include FA_TILE_STEP_HEADER
#endif
#ifndef FA_TILE_KEYS
#define FA_TILE_KEYS 1
#endif
#ifndef FA_TILE_STEP_END
#define FA_TILE_STEP_END() ((void)0)
#endif

static cpu_tiles tiles_layout(const fa_plan_data *plan, int bwd) {
  cpu_tiles t;
  const size_t kvt = (size_t)plan->kv_heads_per_tile; // K/V tiles per head
  t.bq = plan->block_q;
  t.bk = plan->block_k;
  t.ld = plan->head_dim_pad;
  t.ldv = plan->head_dim_v_pad;
  // K, V, S and P tiles hold the block's keys rounded up to whole tiles.
  const size_t bka =
      ((size_t)t.bk + FA_TILE_KEYS - 1) / FA_TILE_KEYS * FA_TILE_KEYS;
  size_t at = 0;
  // 16-float granules keep every tile 64-byte aligned.
#define FA_TAKE(field, n)                                                      \
  do {                                                                         \
    t.field = at;                                                              \
    at += ((size_t)(n) + 15) / 16 * 16;                                        \
  } while (0)
  FA_TAKE(qt, (size_t)t.ld * t.bq);
  FA_TAKE(k, kvt * bka * t.ld);
  FA_TAKE(v, kvt * bka * t.ldv);
  FA_TAKE(s, bka * t.bq);
  FA_TAKE(m, t.bq);
  FA_TAKE(l, t.bq);
  FA_TAKE(mu, t.bq);
  FA_TAKE(vis, 2 * (size_t)t.bq);
  if (bwd) {
    size_t rows = t.bk > t.bq ? (size_t)t.bk : (size_t)t.bq;
    FA_TAKE(q, (size_t)t.bq * t.ld);
    FA_TAKE(dot, (size_t)t.ldv * t.bq);
    FA_TAKE(d_o, (size_t)t.bq * t.ldv);
    FA_TAKE(g, (size_t)t.bk * t.bq);
    FA_TAKE(dp, (size_t)t.bk * t.bq);
    FA_TAKE(acc, rows * t.ld);
    FA_TAKE(accv, (size_t)t.bk * t.ldv);
    FA_TAKE(kt, (size_t)t.ld * t.bk); // pass 2: scale * K^T, V^T
    FA_TAKE(vt, (size_t)t.ldv * t.bk);
  } else {
    FA_TAKE(acc, (size_t)t.bq * t.ldv); // the O accumulator
    // Small tiles: Q rows, plus 3 zero rows (dot products go 4 lanes at a
    // time from any lane).
    FA_TAKE(qr, (size_t)(t.bq + 3) * t.ld);
    FA_TAKE(row, (size_t)(t.ld > t.ldv ? t.ld : t.ldv)); // one widened row
    FA_TAKE(p2, (bka + 1) / 2 * t.bq); // bf16 path: P in pairs
    FA_TAKE(fo, (size_t)t.bq * t.ldv); // folded O
    FA_TAKE(fc, (size_t)t.bq * t.ldv); // its compensation
    FA_TAKE(fml, 3 * (size_t)t.bq);    // folded m, l, l's compensation
    t.kt = t.vt = 0;
    t.q = t.dot = t.d_o = t.g = t.dp = t.accv = 0;
  }
#undef FA_TAKE
  if (bwd) t.fo = t.fc = t.fml = 0;
  t.total = at;
  return t;
}

/* Query lanes of a tile: lane r is row row0 + r / pk of head h0 + r % pk
   (pk > 1 packs the q heads that share a kv head into one tile). */
typedef struct cpu_lanes {
  int h0, pk, row0, npos; // first head, heads per row, first row, rows
  int64_t shift;          // the sequence's diagonal offset (fa_diag_shift)
} cpu_lanes;

/* The tile's q rows, times mul and their descale, transposed into
   dst[dim][bq]; lanes past the valid ones are zero so padded lanes stay
   finite. */
static void load_q_transposed(float *dst, int bq, float *row,
                              const fa_problem *p, const fa_tensor *t, int b,
                              const cpu_lanes *ln, int dim, float mul) {
  const int nr = ln->npos * ln->pk;
  for (int r = 0; r < bq; r++) {
    float x = mul;
    if (r < nr) {
      const int h = ln->h0 + r % ln->pk;
      vf_widen_row(row, t->data, t->dtype,
                   fa_q_offset(p, t, b, ln->row0 + r / ln->pk, h), dim);
      x *= fa_tensor_descale(t, p->a.heads_kv, b, h / p->group);
    } else {
      memset(row, 0, sizeof(float) * (size_t)dim);
    }
    for (int d = 0; d < dim; d++) dst[(size_t)d * bq + r] = row[d] * x;
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
  if (!tile_cut(p, ln, sq, sk, col0, nc)) return;
  for (int i = 0; i < ln->npos; i++) {
    int lo, hi;
    fa_visible_keys(p, ln->shift, ln->row0 + i, sk, &lo, &hi);
    for (int c = 0; c < nc; c++) {
      int j = col0 + c;
      if (j >= lo && j < hi) continue;
      for (int r = i * pk; r < (i + 1) * pk; r++) {
        s[c * cs + r * rs] = -INFINITY;
        if (grad) grad[c * cs + r * rs] = 0.0f;
      }
    }
  }
}

/* S^T[c][r] = k_c . q_r with the scale already folded into Q^T, then the
   score pipeline. Masked entries are -INFINITY; lanes past the valid ones
   are left as computed (finite). */
static void scores(const fa_problem *p, const cpu_tiles *t, float *ws,
                   const float *k, int64_t ldk, const cpu_lanes *ln, int sq,
                   int sk, int col0, int nc, float *grad) {
  gemm(nc, t->bq, p->a.head_dim, k, ldk, 1, ws + t->qt, t->bq, ws + t->s, t->bq,
       0);
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

#include "cpu_rows_fp8.h"

/* ---- forward ------------------------------------------------------------ */

typedef struct cpu_partials {
  float *ml; // [num_work][block_q][2]: (m, l) of each split
  float *o;  // [num_work][block_q][head_dim_v]
} cpu_partials;

static float sink_logit(const fa_problem *p, int h) {
  return p->a.sinks ? p->a.sinks[h] : NAN;
}

/* fa_softmax_finalize for row i of head h, plus the case it cannot tell
   from an empty row: m = -inf although the row sees keys, i.e. every score
   it sees is -inf (an inf input, or a product that overflowed fp32). As in
   the float64 oracle (exp(-inf - (-inf)) = NaN), O and LSE are then NaN,
   never the silent O = 0, LSE = -inf of a row with no key. */
static float finalize(const fa_problem *p, float m, float l, int h, int i,
                      int64_t shift, int sk, float *lse) {
  float sink = sink_logit(p, h);
  // A NaN or +inf sink logit makes every row of its head NaN, rows with no
  // key included (as a NaN ALiBi slope does); a -inf one weighs nothing.
  // (fa_softmax_finalize reads NaN as "no sink".)
  if (p->a.sinks && (isnan(sink) || sink == INFINITY)) {
    *lse = NAN;
    return NAN;
  }
  if (sink == -INFINITY) sink = NAN;
  float inv = fa_softmax_finalize(m, l, sink, lse);
  if (m == -INFINITY && isnan(sink)) {
    int lo, hi;
    fa_visible_keys(p, shift, i, sk, &lo, &hi);
    if (lo < hi) {
      *lse = NAN;
      return NAN;
    }
  }
  return inv;
}

/* o_row is scaled in place, then stored as one row: that conversion loop
   vectorises, an element-wise store testing the dtype each time did not
   (7% of a bf16 forward at d = 128). */
static void store_row(const fa_problem *p, const fa_fwd_args *args, int b,
                      int h, int i, float *o_row, float scale_o, float lse) {
  const fa_tensor *o = &args->o;
  const int dv = p->a.head_dim_v;
  for (int d = 0; d < dv; d++) o_row[d] *= scale_o;
  fa_store_row(o->data, o->dtype, fa_q_offset(p, o, b, i, h), o_row, dv);
  if (args->lse)
    args->lse[((int64_t)b * p->a.heads_q + h) * p->a.seqlen_q + i] = lse;
}

/* One online-softmax step on the transposed tile: column max, exp, column
   sum; returns the rescale factors alpha in mu[] (mu doubles as scratch). */
static void online_softmax(const cpu_tiles *t, float *ws, int nc) {
  float *s = ws + t->s, *m = ws + t->m, *l = ws + t->l, *mu = ws + t->mu;
  const int bq = t->bq;
  for (int r = 0; r < bq; r += FA_VW) {
    fa_vf mx, ref = column_ref(s, bq, m, nc, r, &mx), sum = vf_zero();
    for (int k = 0; k < nc; k++) {
      float *sc = s + (size_t)k * bq + r;
      fa_vf e = vf_exp(vf_sub(vf_load(sc), ref));
      vf_store(sc, e);
      sum = vf_add(sum, e);
    }
    column_done(m, l, mu, r, mx, ref, sum);
  }
}

/* O rows [0, nr) (pitch ldo) times their rescale factors mu. */
static void rescale_o(float *o, int64_t ldo, const float *mu, int nr, int dv) {
  for (int r = 0; r < nr; r++) {
    if (mu[r] == 1.0f) continue;
    float *orow = o + (size_t)r * ldo;
    fa_vf a = vf_set1(mu[r]);
    int d = 0;
    for (; d + FA_VW <= dv; d += FA_VW)
      vf_store(orow + d, vf_mul(vf_load(orow + d), a));
    for (; d < dv; d++) orow[d] *= mu[r];
  }
}

/* Long rows. Every tile step adds each key's P.V term to the fp32 O (and
   each block's sum to l) one rounding at a time, so that O's relative error
   grows with the keys it has seen, and at 2^24 equal terms a term falls
   under half an ulp of the sum and stops counting (O came out 0.25 for
   v = 0.5 at 2^27 keys, while l, summed per block, was exact). Rather than
   compensate each path's per-key sums (GEMM, row streaming, FP8 rows,
   dpbf16, AMX), a split longer than FA_FOLD_FROM keys restarts its state
   every FA_FOLD_KEYS keys and folds the finished (m, l, O) into a second
   state by the merge lemma, with compensated (Kahan) sums for its l and O:
   one fold per chunk costs O(lanes x dv), under 1% of the chunk's P.V, and
   the error is that of one chunk's sum plus a bounded compensated sum,
   whatever the row's length. Rows up to FA_FOLD_FROM keys (every normal
   forward) take the step as before, bit for bit. */
#ifndef FA_FOLD_KEYS
#define FA_FOLD_KEYS 256
#endif
#ifndef FA_FOLD_FROM
#define FA_FOLD_FROM 16384
#endif

/* Folded state: fo (O) and fc (its compensation) [bq][ldv]; fml: m, l, and
   l's compensation, [bq] each. Starts empty (m = -inf). */
static void fold_init(const cpu_tiles *t, float *ws, int nr, int dv) {
  float *fm = ws + t->fml, *fl = fm + t->bq, *flc = fl + t->bq;
  for (int r = 0; r < nr; r++) {
    fm[r] = -INFINITY;
    fl[r] = flc[r] = 0.0f;
    memset(ws + t->fo + (size_t)r * t->ldv, 0, sizeof(float) * (size_t)dv);
    memset(ws + t->fc + (size_t)r * t->ldv, 0, sizeof(float) * (size_t)dv);
  }
}

/* Compensated s += x: c holds what s lost (true sum = s - c). Written as
   separate statements: C11 without extensions, so nothing is contracted or
   reassociated across them. */
static inline void kahan_add(float *s, float *c, float x) {
  const float y = x - *c, sum = *s + y;
  *c = (sum - *s) - y;
  *s = sum;
}

/* Fold the running state (m, l, O of lanes [0, nr)) into the folded one by
   the merge lemma, and restart it empty. A NaN maximum on either side makes
   the lane NaN, as in the step; an empty running state (m = -inf: no key,
   or only -inf scores) adds nothing, and finalize still tells the two
   apart. */
static void fold_state(const cpu_tiles *t, float *ws, int nr, int dv) {
  float *m = ws + t->m, *l = ws + t->l;
  float *fm = ws + t->fml, *fl = fm + t->bq, *flc = fl + t->bq;
  for (int r = 0; r < nr; r++) {
    float *o = ws + t->acc + (size_t)r * t->ldv;
    if (m[r] != -INFINITY) {
      float *fo = ws + t->fo + (size_t)r * t->ldv;
      float *fc = ws + t->fc + (size_t)r * t->ldv;
      const float mx = isnan(m[r]) || isnan(fm[r]) ? NAN
                       : m[r] > fm[r]              ? m[r]
                                                   : fm[r];
      // (an empty folded state has fo = fc = 0: weight 0, not exp(NaN))
      const float wa = fm[r] == -INFINITY ? 0.0f : expf(fm[r] - mx);
      const float wb = expf(m[r] - mx);
      if (wa != 1.0f) {
        fl[r] *= wa;
        flc[r] *= wa;
        for (int d = 0; d < dv; d++) {
          fo[d] *= wa;
          fc[d] *= wa;
        }
      }
      kahan_add(fl + r, flc + r, l[r] * wb);
      for (int d = 0; d < dv; d++) kahan_add(fo + d, fc + d, o[d] * wb);
      fm[r] = mx;
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
    memset(o, 0, sizeof(float) * (size_t)dv);
  }
}

/* The folded state back into (m, l, O) for finalize or the partials. */
static void fold_finish(const cpu_tiles *t, float *ws, int nr, int dv) {
  fold_state(t, ws, nr, dv);
  float *m = ws + t->m, *l = ws + t->l;
  const float *fm = ws + t->fml, *fl = fm + t->bq, *flc = fl + t->bq;
  for (int r = 0; r < nr; r++) {
    float *o = ws + t->acc + (size_t)r * t->ldv;
    const float *fo = ws + t->fo + (size_t)r * t->ldv;
    const float *fc = ws + t->fc + (size_t)r * t->ldv;
    m[r] = fm[r];
    l[r] = fl[r] - flc[r];
    for (int d = 0; d < dv; d++) o[d] = fo[d] - fc[d];
  }
}

#if FA_HAVE_DPBF16 && !defined(FA_TILE_STEP_HEADER)
/* The default step's softmax: online_softmax, then P^T paired along keys
   into p2 ([(nc + 1) / 2][bq]) for gemm_bf16. */
static void bf16_softmax_p(const cpu_tiles *t, float *ws, int nc,
                           uint32_t *p2) {
  online_softmax(t, ws, nc);
  pack_p_bf16(p2, ws + t->s, t->bq, nc);
}
#endif

// NOLINTNEXTLINE(readability-function-size): to be split (issue 13)
static void fwd_item(const fa_problem *p, const fa_plan_data *plan,
                     const fa_fwd_args *args, const cpu_tiles *t, float *ws,
                     int64_t w, cpu_partials *part, const void *kvpack) {
  int b, h0, qb, split;
  fa_plan_work_item(p, plan, w, &b, &h0, &qb, &split);
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int row0 = qb * plan->block_rows;
  if (row0 >= sq) return;
  const int pk = plan->pack_group;
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  const cpu_lanes ln = {
      h0, pk, row0, sq - row0 < plan->block_rows ? sq - row0 : plan->block_rows,
      shift};
  const int nr = ln.npos * pk;
  const int hk = h0 / p->group, dv = p->a.head_dim_v, bq = t->bq;
  const cpu_slayout sl_t = {bq, 1, bq};
  float *o = ws + t->acc, *m = ws + t->m, *l = ws + t->l, *mu = ws + t->mu;
  int *vlo = (int *)(ws + t->vis), *vhi = vlo + bq;

  for (int r = 0; r < bq; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  memset(o, 0, sizeof(float) * (size_t)bq * t->ldv);

  int kb0, kb1, s0, s1;
  fa_plan_kv_blocks(p, plan, shift, sq, sk, qb, &kb0, &kb1);
  fa_plan_split_range(kb0, kb1, plan->num_splits, split, &s0, &s1);
  // fp32 K/V read in place (no copy) unless they must be descaled.
  const int direct =
      p->dtype == FA_F32 && !p->paged && !args->k.descale && !args->v.descale;
  // Tiles that span several kv heads (all heads of a decode step) always
  // stream rows; so do tiles with few lanes.
  const int kvt = plan->kv_heads_per_tile, lpk = pk / kvt;
  const int small = nr <= FA_SMALL_LANES || kvt > 1;
  // FP8 K/V on the small path: read in place, widened in registers.
  cpu_fp8_rows fr;
  const int fp8 = fp8_rows_plan(p, t, args, b, hk, kvt, &fr) && small;
#if FA_HAVE_DPBF16
  // bf16 in, pairs of bf16 multiplied exactly by vdpbf16ps: Q^T as pairs
  // along d (unscaled: the scale is applied to S in fp32).
  const cpu_kvpack *kv = kvpack;
  const int dot_bf16 = p->dtype == FA_BF16 && !small && kv->items;
  const int dpairs = (p->a.head_dim + 1) / 2;
  const int ldk2 = (t->ld + 1) / 2, ldv2 = t->ldv; // pitches in pairs
  if (dot_bf16) {
    uint32_t *qt2 = (uint32_t *)(ws + t->qt);
    uint16_t *row = (uint16_t *)(ws + t->k); // two bf16 rows, zero padded
    for (int r = 0; r < bq; r++) {
      memset(row, 0, sizeof(uint16_t) * 2 * (size_t)dpairs);
      if (r < nr)
        memcpy(row,
               (const uint16_t *)args->q.data +
                   fa_q_offset(p, &args->q, b, row0 + r / pk, h0 + r % pk),
               sizeof(uint16_t) * (size_t)p->a.head_dim);
      for (int e = 0; e < dpairs; e++)
        qt2[(size_t)e * bq + r] = row[2 * e] | (uint32_t)row[2 * e + 1] << 16;
    }
  }
#else
  const int dot_bf16 = 0;
#endif
  // fp32 Q^T otherwise (the K tile doubles as the transposing load's row
  // buffer).
  if (!dot_bf16)
    load_q_transposed(ws + t->qt, bq, ws + t->k, p, &args->q, b, &ln,
                      p->a.head_dim, p->a.scale);
  if (small) { // row-major scaled q rows for the dot products
    float *qr = ws + t->qr;
    memset(qr, 0, sizeof(float) * (size_t)(bq + 3) * t->ld);
    for (int r = 0; r < nr; r++)
      for (int d = 0; d < p->a.head_dim; d++)
        qr[(size_t)r * t->ld + d] = ws[t->qt + (size_t)d * bq + r];
  }
  // Long splits: fold the state every fold_blocks blocks (see fold_state).
  const int fold = (int64_t)(s1 - s0) * t->bk > FA_FOLD_FROM;
  const int fold_blocks = FA_FOLD_KEYS > t->bk ? FA_FOLD_KEYS / t->bk : 1;
  if (fold) fold_init(t, ws, nr, dv);
  for (int kb = s0; kb < s1; kb++) {
    if (fold && kb > s0 && (kb - s0) % fold_blocks == 0)
      fold_state(t, ws, nr, dv);
    const int col0 = kb * t->bk;
    const int nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    if (small) {
      // Every kv head of the tile: rows key-major, so that a BSHD layout or
      // a paged cache (all kv heads of a key side by side) is read in order.
      const float *kh[FA_MAX_KV_TILES], *vh[FA_MAX_KV_TILES];
      int64_t ldk = t->ld, ldv = t->ldv;
      for (int x = 0; x < kvt; x++) {
        kh[x] = ws + t->k + (size_t)x * t->bk * t->ld;
        vh[x] = ws + t->v + (size_t)x * t->bk * t->ldv;
        if (direct) {
          kh[x] = (const float *)args->k.data +
                  fa_k_offset(p, &args->k, b, col0, hk + x);
          vh[x] = (const float *)args->v.data +
                  fa_k_offset(p, &args->v, b, col0, hk + x);
        }
      }
      if (direct) {
        ldk = args->k.stride_seq;
        ldv = args->v.stride_seq;
      } else if (fp8) {
        fp8_rows_block(p, args, b, hk, col0, nc, &fr);
      } else {
        const size_t esz = fa_dtype_size(p->dtype);
        for (int c = 0; c < nc; c++)
          for (int x = 0; x < kvt; x++) {
            // Decode is bound by memory latency: ask for the rows a few
            // keys ahead while these are widened.
            if (c + FA_PREFETCH_KEYS < nc)
              for (int z = 0; z < 2; z++) {
                const fa_tensor *src = z ? &args->v : &args->k;
                const char *row =
                    (const char *)src->data +
                    fa_k_offset(p, src, b, col0 + c + FA_PREFETCH_KEYS,
                                hk + x) *
                        (int64_t)esz;
                const int bytes = (z ? dv : p->a.head_dim) * (int)esz;
                for (int off = 0; off < bytes; off += 64)
                  __builtin_prefetch(row + off);
              }
            load_k_rows((float *)kh[x] + (size_t)c * t->ld, t->ld, p, &args->k,
                        b, hk + x, col0 + c, 1, p->a.head_dim);
            load_k_rows((float *)vh[x] + (size_t)c * t->ldv, t->ldv, p,
                        &args->v, b, hk + x, col0 + c, 1, dv);
          }
      }
      // Lane runs: one per (row, kv head); a single run without kv packing.
      const int runs_per_row = kvt, run_len = kvt > 1 ? lpk : nr;
      const int nruns = kvt > 1 ? ln.npos * runs_per_row : 1;
      for (int x = 0; x < nruns; x++) {
        const int lane0 = kvt > 1 ? (x / kvt) * pk + (x % kvt) * lpk : 0;
        if (fp8)
          scores_fp8(p, t, ws, args, &fr, x % kvt, nc, lane0, run_len);
        else
          scores_rows(p, t, ws, kh[x % kvt], ldk, nc, lane0, run_len);
      }
      scores_post(p, ws + t->s, &sl_t, &ln, sq, sk, col0, nc, NULL);
      online_softmax(t, ws, nc);
      for (int r = 0; r < nr; r++)
        if (mu[r] != 1.0f)
          for (int d = 0; d < dv; d++) o[(size_t)r * t->ldv + d] *= mu[r];
      // O[r][:] += P^T[c][r] V[c][:] over the keys each lane sees (the
      // same rule as the GEMM path's, below, when V holds inf or NaN).
      lane_keys(p, &ln, sq, sk, col0, nc, vlo, vhi);
      for (int x = 0; x < nruns; x++) {
        const int lane0 = kvt > 1 ? (x / kvt) * pk + (x % kvt) * lpk : 0;
        if (fp8)
          pv_fp8(p, t, ws, args, &fr, x % kvt, lane0, run_len, vlo, vhi, o);
        else
          gemm_visible(nc, lane0, run_len, vlo, vhi, dv, ws + t->s, 1, bq,
                       vh[x % kvt], ldv, o, t->ldv, 0);
      }
      continue;
    }
#if FA_HAVE_DPBF16
    if (dot_bf16) {
      // K and V as packed for the call (rows col0.. of this kv head); P
      // paired along keys after the softmax.
      const size_t bh = (size_t)b * p->a.heads_kv + hk;
      const uint32_t *k2 = kv->k + (bh * kv->rows + col0) * ldk2,
                     *v2 = kv->v + (bh * kv->rows + col0) / 2 * ldv2;
      bf16_scores(nc, bq, dpairs, k2, ldk2, (uint32_t *)(ws + t->qt), ws + t->s,
                  p->a.scale);
      scores_post(p, ws + t->s, &sl_t, &ln, sq, sk, col0, nc, NULL);
      uint32_t bad = 0;
      if (tile_cut(p, &ln, sq, sk, col0, nc)) {
        // As in the fp32 path: V with inf or NaN meets masked P = 0 only
        // through visible pairs (fp32 V rows, over the pairs: not needed).
        // Scanned in the pack, whose pair rows are contiguous.
        for (int e = 0; e < (nc + 1) / 2; e++) {
          const uint32_t *vr = v2 + (size_t)e * ldv2;
          for (int d = 0; d < dv; d++) {
            const uint32_t x = vr[d] & 0x7f807f80u; // both exponents
            bad |= (uint32_t)((x & 0xffffu) == 0x7f80u) |
                   (uint32_t)((x >> 16) == 0x7f80u);
          }
        }
      }
      if (bad) {
        online_softmax(t, ws, nc);
        rescale_o(o, t->ldv, mu, nr, dv);
        load_k_rows(ws + t->v, t->ldv, p, &args->v, b, hk, col0, nc, dv);
        lane_keys(p, &ln, sq, sk, col0, nc, vlo, vhi);
        gemm_visible(nc, 0, nr, vlo, vhi, dv, ws + t->s, 1, bq, ws + t->v,
                     t->ldv, o, t->ldv, 0);
        continue;
      }
      // The softmax step with P packed for the product as it is made.
      uint32_t *p2 = (uint32_t *)(ws + t->p2);
      bf16_softmax_p(t, ws, nc, p2);
      rescale_o(o, t->ldv, mu, nr, dv);
      bf16_pv(nr, dv, nc, bq, p2, v2, ldv2, (uint32_t *)(ws + t->v), o, t->ldv);
      continue;
    }
#endif
    const float *k = ws + t->k, *v = ws + t->v;
    int64_t ldk = t->ld, ldv = t->ldv;
    if (direct) {
      // fp32 rows in place: no copy, the same reads the copy would make.
      k = (const float *)args->k.data + fa_k_offset(p, &args->k, b, col0, hk);
      v = (const float *)args->v.data + fa_k_offset(p, &args->v, b, col0, hk);
      ldk = args->k.stride_seq;
      ldv = args->v.stride_seq;
    } else {
      // One burst of row loads per tile keeps many misses in flight.
      load_k_rows(ws + t->k, t->ld, p, &args->k, b, hk, col0, nc,
                  p->a.head_dim);
      load_k_rows(ws + t->v, t->ldv, p, &args->v, b, hk, col0, nc, dv);
    }
    scores(p, t, ws, k, ldk, &ln, sq, sk, col0, nc, NULL);
    online_softmax(t, ws, nc);
    rescale_o(o, t->ldv, mu, nr, dv);
    // O[r][:] += sum_c P^T[c][r] V[c][:]. Masked entries of P are 0, and
    // 0 * NaN = NaN: where the tile meets a mask and V holds inf or NaN
    // (a scan of nc x dv, 1/bq of the product), only visible pairs count.
    if (tile_cut(p, &ln, sq, sk, col0, nc) && any_nonfinite(v, ldv, nc, dv)) {
      lane_keys(p, &ln, sq, sk, col0, nc, vlo, vhi);
      gemm_visible(nc, 0, nr, vlo, vhi, dv, ws + t->s, 1, bq, v, ldv, o, t->ldv,
                   0);
    } else {
      gemm(nr, dv, nc, ws + t->s, 1, bq, v, ldv, o, t->ldv, 1);
    }
  }
  if (fold) fold_finish(t, ws, nr, dv);

  if (plan->num_splits == 1) {
    for (int r = 0; r < nr; r++) {
      const int h = h0 + r % pk;
      float lse,
          inv = finalize(p, m[r], l[r], h, row0 + r / pk, shift, sk, &lse);
      store_row(p, args, b, h, row0 + r / pk, o + (size_t)r * t->ldv, inv, lse);
    }
    return;
  }
  float *pml = part->ml + (size_t)w * bq * 2;
  float *po = part->o + (size_t)w * bq * dv;
  for (int r = 0; r < nr; r++) {
    pml[2 * r] = m[r];
    pml[2 * r + 1] = l[r];
    memcpy(po + (size_t)r * dv, o + (size_t)r * t->ldv, sizeof(float) * dv);
  }
}

/* Merge the splits of one (b, heads, q block), lane by lane, in split
   order. */
static void fwd_merge(const fa_problem *p, const fa_plan_data *plan,
                      const fa_fwd_args *args, const cpu_partials *part,
                      float *acc, int64_t w0) {
  int b, h0, qb, split;
  fa_plan_work_item(p, plan, w0, &b, &h0, &qb, &split);
  const int sq = fa_seq_len_q(p, b), bq = plan->block_q, dv = p->a.head_dim_v;
  const int pk = plan->pack_group, row0 = qb * plan->block_rows;
  if (row0 >= sq) return;
  const int npos = sq - row0 < plan->block_rows ? sq - row0 : plan->block_rows;
  for (int r = 0; r < npos * pk; r++) {
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, sizeof(float) * (size_t)dv);
    for (int sp = 0; sp < plan->num_splits; sp++) {
      const float *pml = part->ml + ((size_t)(w0 + sp) * bq + r) * 2;
      const float *po = part->o + ((size_t)(w0 + sp) * bq + r) * dv;
      fa_softmax_merge(&m, &l, acc, pml[0], pml[1], po, dv);
    }
    const int h = h0 + r % pk, sk = fa_seq_len_k(p, b);
    float lse, inv = finalize(p, m, l, h, row0 + r / pk,
                              fa_diag_shift(p, b, sq, sk), sk, &lse);
    store_row(p, args, b, h, row0 + r / pk, acc, inv, lse);
  }
}

static int thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

fa_status FA_FN(fa_cpu_forward)(void *state, const fa_problem *p,
                                const fa_plan_data *plan,
                                const fa_fwd_args *args) {
  fa_cpu_state *st = state;
  const cpu_tiles t = tiles_layout(plan, 0);
  int nt = fa_cpu_threads(st);
  if ((int64_t)nt > plan->num_work) nt = (int)plan->num_work;
  if (nt < 1) nt = 1;
  const int dv = p->a.head_dim_v, splits = plan->num_splits;
  const int64_t nwork = plan->num_work;
  size_t ml_floats = splits > 1 ? (size_t)nwork * plan->block_q * 2 : 0;
  size_t po_floats = splits > 1 ? (size_t)nwork * plan->block_q * dv : 0;
  size_t acc_pitch = ((size_t)dv + 15) / 16 * 16;
  size_t merge_floats = splits > 1 ? (size_t)nt * acc_pitch : 0;
  size_t kv_floats = 0;
#if FA_HAVE_DPBF16
  cpu_kvpack kv;
  kv_floats = kvpack_plan(p, plan, FA_SMALL_LANES, &kv);
#else
  const void *const kvp = NULL; // (no bf16 products here)
#endif
  float *ws = fa_cpu_workspace(st, sizeof(float) *
                                       (t.total * nt + ml_floats + po_floats +
                                        merge_floats + kv_floats));
  if (!ws) return FA_ERR_OUT_OF_MEMORY;
#if FA_HAVE_DPBF16
  kv.k = (uint32_t *)(ws + t.total * nt + ml_floats + po_floats + merge_floats);
  kv.v = kv.k + (size_t)p->a.batch * p->a.heads_kv * kv.rows * kv.ldk2;
  const void *const kvp = &kv;
#endif
  cpu_partials part = {ws + t.total * nt, ws + t.total * nt + ml_floats};
  float *merge_acc = part.o + po_floats;

#pragma omp parallel num_threads(nt)
  {
    const int tid = thread_id();
    float *mine = ws + t.total * (size_t)tid;
#if FA_HAVE_DPBF16
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < kv.items; i++) kvpack_item(p, plan, args, &kv, i);
      // (implicit barrier: K and V are packed)
#endif
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < nwork; w++)
      fwd_item(p, plan, args, &t, mine, w, &part, kvp);
    FA_TILE_STEP_END(); // the thread's tiles are free again
    if (splits > 1) {
      float *acc = merge_acc + acc_pitch * (size_t)tid;
#pragma omp for schedule(dynamic, 1)
      for (int64_t w = 0; w < nwork; w += splits)
        fwd_merge(p, plan, args, &part, acc, w);
    }
  }
  return FA_OK;
}

/* ---- backward ------------------------------------------------------------ */
// Three passes, each parallel without atomics and deterministic:
//   1. D_i = rowsum(dO_i * O_i) for every query row;
//   2. dK, dV: one item per (batch, kv head, kv block), over the q heads of
//      its group and the q blocks that see the block;
//   3. dQ: one item per (batch, q head, q block), over its kv blocks.
// Splitting dQ from dK/dV recomputes two tile products (7 instead of 5) but
// needs neither atomics nor an fp32 dQ accumulator the size of Q. Paged KV
// may share a page between sequences: there pass 2 runs one item per kv
// head, sums dK/dV in fp32 over every sequence that names a page (a buffer
// over the pages the batch references), and stores each row once. (Adding
// into a 16-bit dK/dV sequence by sequence rounded at every step and could
// overflow to an infinity of the wrong sign: found by the long fuzz run.)

typedef struct cpu_bwd {
  const fa_problem *p;
  const fa_plan_data *plan;
  const fa_bwd_args *args;
  cpu_tiles t;
  float *delta; // D, [batch][heads_q][seqlen_q]
  // Paged: compact index of each referenced page (-1: none), and the
  // floats of one kv head's fp32 dK/dV rows over those pages.
  const int32_t *page_slot;
  size_t page_floats;
  float *sink_part; // dsinks: each (batch, head)'s share, [batch][heads_q]
} cpu_bwd;

/* Paged: the fp32 row of key j of sequence b in the page accumulator. */
static float *page_row(const cpu_bwd *c, float *pacc, int b, int j) {
  const fa_problem *p = c->p;
  const int ps = p->a.page_size;
  const int32_t page =
      p->a.block_table[(int64_t)b * p->a.max_blocks_per_seq + j / ps];
  const size_t row = (size_t)c->page_slot[page] * ps + (size_t)(j % ps);
  return pacc + row * (size_t)(p->a.head_dim + p->a.head_dim_v);
}

static int64_t row_index(const fa_problem *p, int b, int h, int i) {
  return ((int64_t)b * p->a.heads_q + h) * p->a.seqlen_q + i;
}

static void compute_delta(const cpu_bwd *c, float *ws, int b, int h) {
  const fa_problem *p = c->p;
  const fa_tensor *o = &c->args->o, *d_o = &c->args->d_o;
  const int sq = fa_seq_len_q(p, b), dv = p->a.head_dim_v;
  float *ro = ws, *rd = ws + ((size_t)dv + 15) / 16 * 16;
  for (int i = 0; i < sq; i++) {
    vf_widen_row(ro, o->data, o->dtype, fa_q_offset(p, o, b, i, h), dv);
    vf_widen_row(rd, d_o->data, d_o->dtype, fa_q_offset(p, d_o, b, i, h), dv);
    float acc = 0.0f;
    for (int d = 0; d < dv; d++) acc += ro[d] * rd[d];
    c->delta[row_index(p, b, h, i)] = acc;
  }
  // d loss / d sink = -sum_i P_sink(i) D_i, P_sink(i) = exp(sink - lse_i):
  // the sink takes probability mass from every row and gives back no value.
  if (c->sink_part) {
    const float sink = p->a.sinks[h];
    float part = 0.0f;
    for (int i = 0; i < sq; i++) {
      const int64_t at = row_index(p, b, h, i);
      const float ps = sink == -INFINITY ? 0.0f : expf(sink - c->args->lse[at]);
      part -= ps * c->delta[at];
    }
    c->sink_part[(int64_t)b * p->a.heads_q + h] = part;
  }
}

/* dsinks[h] from the (batch, head) shares, summed in batch order so the
   result does not depend on the threads. */
static void store_dsinks(const cpu_bwd *c) {
  const fa_problem *p = c->p;
  for (int h = 0; h < p->a.heads_q; h++) {
    float sum = 0.0f;
    for (int b = 0; b < p->a.batch; b++)
      sum += c->sink_part[(int64_t)b * p->a.heads_q + h];
    if (p->a.backward_mode == FA_BACKWARD_ACCUMULATE)
      c->args->dsinks[h] += sum;
    else
      c->args->dsinks[h] = sum;
  }
}

/* Q-side tiles of (b, h, rows row0..): Q row-major and transposed, dO
   row-major and transposed, and per-row lse and D (query lanes past nr get
   lse 0 and D 0, so they produce P finite and dS = 0). */
static void load_q_side(const cpu_bwd *c, float *ws, int b, int h, int row0,
                        int nr) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int bq = t->bq;
  load_q_rows(ws + t->q, t->ld, p, &c->args->q, b, h, row0, nr, p->a.head_dim);
  load_q_rows(ws + t->d_o, t->ldv, p, &c->args->d_o, b, h, row0, nr,
              p->a.head_dim_v);
  for (int r = 0; r < bq; r++)
    for (int d = 0; d < p->a.head_dim; d++)
      ws[t->qt + (size_t)d * bq + r] =
          r < nr ? ws[t->q + (size_t)r * t->ld + d] * p->a.scale : 0.0f;
  for (int r = 0; r < bq; r++)
    for (int d = 0; d < p->a.head_dim_v; d++)
      ws[t->dot + (size_t)d * bq + r] =
          r < nr ? ws[t->d_o + (size_t)r * t->ldv + d] : 0.0f;
  float *lse = ws + t->m, *dl = ws + t->l;
  for (int r = 0; r < bq; r++) {
    float x = r < nr ? c->args->lse[row_index(p, b, h, row0 + r)] : 0.0f;
    lse[r] = x == -INFINITY ? 0.0f : x; // such rows see no key: P = 0 anyway
    dl[r] = r < nr ? c->delta[row_index(p, b, h, row0 + r)] : 0.0f;
  }
}

static void load_k_side(const cpu_bwd *c, float *ws, int b, int hk, int col0,
                        int nc) {
  const fa_problem *p = c->p;
  load_k_rows(ws + c->t.k, c->t.ld, p, &c->args->k, b, hk, col0, nc,
              p->a.head_dim);
  load_k_rows(ws + c->t.v, c->t.ldv, p, &c->args->v, b, hk, col0, nc,
              p->a.head_dim_v);
}

/* With both sides loaded: P^T (in s) = exp(S^T - lse), dP^T = V.dO^T, and
   dS^T (in dp) = P^T * (dP^T - D) * dscore. The exponent is clamped at 0:
   s <= lse holds in real arithmetic, but s is recomputed here by another
   product order, and at huge logits (f16 near 65504, default scale) the
   rounding would make P = exp(s - lse) overflow. Returns 1 when the tile
   meets a mask, with each lane's visible keys in the vis tile; masked
   entries of P and dS are then exactly 0. */
static int tile_grad(const cpu_bwd *c, float *ws, int b, int h, int sq, int sk,
                     int row0, int nr, int col0, int nc) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int bq = t->bq;
  float *s = ws + t->s, *g = ws + t->g, *dp = ws + t->dp;
  const cpu_lanes ln = {h, 1, row0, nr, fa_diag_shift(p, b, sq, sk)};
  scores(p, t, ws, ws + t->k, t->ld, &ln, sq, sk, col0, nc, g);
  gemm(nc, bq, p->a.head_dim_v, ws + t->v, t->ldv, 1, ws + t->dot, bq, dp, bq,
       0);
  const float *lse = ws + t->m, *dl = ws + t->l;
  for (int j = 0; j < nc; j++)
    for (int r = 0; r < bq; r += FA_VW) {
      size_t at = (size_t)j * bq + r;
      fa_vf pr = vf_exp(vf_min0(vf_sub(vf_load(s + at), vf_load(lse + r))));
      vf_store(s + at, pr);
      fa_vf ds = vf_mul(vf_mul(pr, vf_sub(vf_load(dp + at), vf_load(dl + r))),
                        vf_load(g + at));
      vf_store(dp + at, ds);
    }
  if (!tile_cut(p, &ln, sq, sk, col0, nc)) return 0;
  // A NaN lse or D (a row that attends to a NaN) or a NaN dP (NaN in V or
  // dO) would otherwise leak into masked entries through the formula.
  int *lo = (int *)(ws + t->vis), *hi = lo + bq;
  lane_keys(p, &ln, sq, sk, col0, nc, lo, hi);
  zero_hidden(s, bq, 1, nr, nc, lo, hi);
  zero_hidden(dp, bq, 1, nr, nc, lo, hi);
  return 1;
}

/* dK, dV of one kv block. Here the score tile is kept the other way round,
   S[lane][key], so that the block's K^T and V^T are packed once and every
   q block of every head of the group reuses them, with Q and dO as stored:
     S = Q.(scale K^T),  dP = dO.V^T,  P = exp(S - lse),
     dS = P * (dP - D) * dscore,  dV += P^T.dO,  dK += dS^T.Q. */
static void kv_block_grads(const cpu_bwd *c, float *ws, int b, int hk, int kb) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  const int bq = t->bq, bk = t->bk, dim = p->a.head_dim, dv = p->a.head_dim_v;
  memset(ws + t->acc, 0, sizeof(float) * (size_t)bk * t->ld);
  memset(ws + t->accv, 0, sizeof(float) * (size_t)bk * t->ldv);
  load_k_side(c, ws, b, hk, col0, nc);
  float *kt = ws + t->kt, *vt = ws + t->vt;
  for (int j = 0; j < nc; j++) {
    const float *kr = ws + t->k + (size_t)j * t->ld,
                *vr = ws + t->v + (size_t)j * t->ldv;
    for (int d = 0; d < dim; d++) kt[(size_t)d * bk + j] = kr[d] * p->a.scale;
    for (int d = 0; d < dv; d++) vt[(size_t)d * bk + j] = vr[d];
  }
  float *s = ws + t->s, *g = ws + t->g, *dp = ws + t->dp;
  float *q = ws + t->q, *d_o = ws + t->d_o;
  int *lo = (int *)(ws + t->vis), *hi = lo + bq;
  const cpu_slayout sl = {1, bk, 0};
  const int nqb = (sq + bq - 1) / bq, tail = nc % FA_VW, full = nc - tail;
  for (int h = hk * p->group; h < (hk + 1) * p->group; h++)
    for (int qb = 0; qb < nqb; qb++) {
      int kb0, kb1;
      fa_plan_kv_blocks(p, c->plan, shift, sq, sk, qb, &kb0, &kb1);
      if (kb < kb0 || kb >= kb1) continue;
      const int row0 = qb * bq, nr = sq - row0 < bq ? sq - row0 : bq;
      load_q_rows(q, t->ld, p, &c->args->q, b, h, row0, nr, dim);
      load_q_rows(d_o, t->ldv, p, &c->args->d_o, b, h, row0, nr, dv);
      gemm(nr, nc, dim, q, t->ld, 1, kt, bk, s, bk, 0);
      const cpu_lanes ln = {h, 1, row0, nr, shift};
      cpu_slayout sl_r = sl;
      sl_r.grad_lanes = nr;
      scores_post(p, s, &sl_r, &ln, sq, sk, col0, nc, g);
      gemm(nr, nc, dv, d_o, t->ldv, 1, vt, bk, dp, bk, 0);
      for (int r = 0; r < nr; r++) {
        const int64_t at = row_index(p, b, h, row0 + r);
        const float lse = c->args->lse[at];
        // A row that sees no key has lse = -inf and only masked scores:
        // exp(-inf - 0) = 0 keeps it out of every sum.
        const fa_vf vl = vf_set1(lse == -INFINITY ? 0.0f : lse);
        const fa_vf vd = vf_set1(c->delta[at]);
        float *sr = s + (size_t)r * bk, *gr = g + (size_t)r * bk,
              *dpr = dp + (size_t)r * bk;
        for (int j = 0; j < nc; j += FA_VW) {
          const int n = j < full ? FA_VW : tail;
          // Clamped at 0 as in tile_grad.
          fa_vf pr = vf_exp(vf_min0(vf_sub(vf_load_part(sr + j, n), vl)));
          fa_vf ds = vf_mul(vf_mul(pr, vf_sub(vf_load_part(dpr + j, n), vd)),
                            vf_load_part(gr + j, n));
          vf_store_part(sr + j, pr, n);
          vf_store_part(dpr + j, ds, n);
        }
      }
      // dV += P^T.dO, dK += dS^T.Q. Where the tile meets a mask: masked P
      // and dS exactly 0, and only visible pairs multiplied when dO or Q
      // holds inf or NaN (as in the forward).
      const int cut = tile_cut(p, &ln, sq, sk, col0, nc);
      if (cut) {
        lane_keys(p, &ln, sq, sk, col0, nc, lo, hi);
        zero_hidden(s, 1, bk, nr, nc, lo, hi);
        zero_hidden(dp, 1, bk, nr, nc, lo, hi);
      }
      if (cut && any_nonfinite(d_o, t->ldv, nr, dv))
        gemm_visible(nc, 0, nr, lo, hi, dv, s, bk, 1, d_o, t->ldv, ws + t->accv,
                     t->ldv, 1);
      else
        gemm(nc, dv, nr, s, 1, bk, d_o, t->ldv, ws + t->accv, t->ldv, 1);
      if (cut && any_nonfinite(q, t->ld, nr, dim))
        gemm_visible(nc, 0, nr, lo, hi, dim, dp, bk, 1, q, t->ld, ws + t->acc,
                     t->ld, 1);
      else
        gemm(nc, dim, nr, dp, 1, bk, q, t->ld, ws + t->acc, t->ld, 1);
    }
}

/* Store one gradient row g[0..n) at element off of t, or with
   FA_BACKWARD_ACCUMULATE add it: old + g in fp32, rounded once to t's
   dtype (the header's rule). */
static void store_grad(const fa_problem *p, const fa_tensor *t, int64_t off,
                       const float *g, int n) {
  if (p->a.backward_mode != FA_BACKWARD_ACCUMULATE) {
    fa_store_row(t->data, t->dtype, off, g, n);
    return;
  }
  for (int d = 0; d < n; d++)
    fa_store(t->data, t->dtype, off + d,
             fa_load(t->data, t->dtype, off + d) + g[d]);
}

/* Write the dK/dV rows of a kv block (dense and varlen K/V). */
static void store_kv_block(const cpu_bwd *c, const float *ws, int b, int hk,
                           int kb) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const fa_tensor *dk = &c->args->dk, *dvt = &c->args->dv;
  const int sk = fa_seq_len_k(p, b);
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  for (int j = 0; j < nc; j++) {
    int64_t ok = fa_k_offset(p, dk, b, col0 + j, hk);
    int64_t ov = fa_k_offset(p, dvt, b, col0 + j, hk);
    const float *a = ws + t->acc + (size_t)j * t->ld;
    const float *av = ws + t->accv + (size_t)j * t->ldv;
    store_grad(p, dk, ok, a, p->a.head_dim);
    store_grad(p, dvt, ov, av, p->a.head_dim_v);
  }
}

/* Paged: add the dK/dV rows of a kv block to the page accumulator. */
static void add_kv_block(const cpu_bwd *c, const float *ws, float *pacc, int b,
                         int kb) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int sk = fa_seq_len_k(p, b), dim = p->a.head_dim;
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  for (int j = 0; j < nc; j++) {
    float *row = page_row(c, pacc, b, col0 + j);
    const float *a = ws + t->acc + (size_t)j * t->ld;
    const float *av = ws + t->accv + (size_t)j * t->ldv;
    for (int d = 0; d < dim; d++) row[d] += a[d];
    for (int d = 0; d < p->a.head_dim_v; d++) row[dim + d] += av[d];
  }
}

/* Paged: store the summed dK/dV rows of every key the batch names (a row
   named twice is stored twice, with the same value; accumulating, it is
   added once: its accumulator row is cleared after the add, so the second
   visit adds zeros). */
static void store_pages(const cpu_bwd *c, float *pacc, int hk) {
  const fa_problem *p = c->p;
  const fa_tensor *dk = &c->args->dk, *dvt = &c->args->dv;
  const int dim = p->a.head_dim, dv = p->a.head_dim_v;
  const int acc = p->a.backward_mode == FA_BACKWARD_ACCUMULATE;
  for (int b = 0; b < p->a.batch; b++)
    for (int j = 0; j < fa_seq_len_k(p, b); j++) {
      float *row = page_row(c, pacc, b, j);
      store_grad(p, dk, fa_k_offset(p, dk, b, j, hk), row, dim);
      store_grad(p, dvt, fa_k_offset(p, dvt, b, j, hk), row + dim, dv);
      if (acc) memset(row, 0, sizeof(float) * (size_t)(dim + dv));
    }
}

/* Zero dK/dV rows: keys [j0, j1) of sequence b (dense rows past seqused_k
   get zero gradient; accumulating adds nothing to them). */
static void zero_kv_rows(const cpu_bwd *c, int b, int hk, int j0, int j1) {
  const fa_problem *p = c->p;
  if (p->a.backward_mode == FA_BACKWARD_ACCUMULATE) return;
  const fa_tensor *ts[2] = {&c->args->dk, &c->args->dv};
  const int dims[2] = {p->a.head_dim, p->a.head_dim_v};
  for (int j = j0; j < j1; j++)
    for (int x = 0; x < 2; x++) {
      int64_t off = fa_k_offset(p, ts[x], b, j, hk);
      for (int d = 0; d < dims[x]; d++)
        fa_store(ts[x]->data, ts[x]->dtype, off + d, 0.0f);
    }
}

static void q_block_grads(const cpu_bwd *c, float *ws, int b, int h, int qb) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int bq = t->bq, row0 = qb * bq;
  if (row0 >= sq) return;
  const int nr = sq - row0 < bq ? sq - row0 : bq;
  const int dim = p->a.head_dim, hk = h / p->group;
  float *acc = ws + t->acc;
  memset(acc, 0, sizeof(float) * (size_t)bq * t->ld);
  load_q_side(c, ws, b, h, row0, nr);
  int kb0, kb1;
  fa_plan_kv_blocks(p, c->plan, fa_diag_shift(p, b, sq, sk), sq, sk, qb, &kb0,
                    &kb1);
  for (int kb = kb0; kb < kb1; kb++) {
    const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    load_k_side(c, ws, b, hk, col0, nc);
    const int cut = tile_grad(c, ws, b, h, sq, sk, row0, nr, col0, nc);
    // dQ[r][:] += sum_c dS^T[c][r] K[c][:], over visible pairs only where
    // masked dS = 0 would meet an inf or NaN in K.
    if (cut && any_nonfinite(ws + t->k, t->ld, nc, dim)) {
      const int *lo = (const int *)(ws + t->vis), *hi = lo + bq;
      gemm_visible(nc, 0, nr, lo, hi, dim, ws + t->dp, 1, bq, ws + t->k, t->ld,
                   acc, t->ld, 0);
    } else {
      gemm(nr, dim, nc, ws + t->dp, 1, bq, ws + t->k, t->ld, acc, t->ld, 1);
    }
  }
  const fa_tensor *dq = &c->args->dq;
  for (int r = 0; r < nr; r++)
    store_grad(p, dq, fa_q_offset(p, dq, b, row0 + r, h),
               acc + (size_t)r * t->ld, dim);
}

fa_status FA_FN(fa_cpu_backward)(void *state, const fa_problem *p,
                                 const fa_plan_data *plan,
                                 const fa_bwd_args *args) {
  fa_cpu_state *st = state;
  cpu_bwd c = {p, plan, args, tiles_layout(plan, 1), NULL, NULL, 0, NULL};
  const int B = p->a.batch, HQ = p->a.heads_q, HK = p->a.heads_kv;
  const int nkb = plan->num_k_blocks, nqb = plan->num_q_blocks;
  int nt = fa_cpu_threads(st);
  if (nt < 1) nt = 1;
  size_t delta_floats = ((size_t)B * HQ * p->a.seqlen_q + 15) / 16 * 16;
  const int want_dsinks = args->dsinks && p->a.sinks;
  const size_t sink_floats = want_dsinks ? ((size_t)B * HQ + 15) / 16 * 16 : 0;
  size_t row_floats = 2 * (((size_t)p->a.head_dim_v + 15) / 16 * 16);
  size_t tile_floats = c.t.total > row_floats ? c.t.total : row_floats;
  int32_t *page_slot = NULL;
  if (p->paged) {
    // Compact ids of the pages the batch references, in first-use order.
    const int ps = p->a.page_size;
    page_slot = malloc(sizeof(int32_t) * (size_t)p->a.num_pages);
    if (!page_slot) return FA_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < p->a.num_pages; i++) page_slot[i] = -1;
    size_t n_ref = 0;
    for (int b = 0; b < B; b++) {
      const int32_t *bt =
          p->a.block_table + (int64_t)b * p->a.max_blocks_per_seq;
      for (int blk = 0; (int64_t)blk * ps < fa_seq_len_k(p, b); blk++)
        if (page_slot[bt[blk]] < 0) page_slot[bt[blk]] = (int32_t)n_ref++;
    }
    c.page_slot = page_slot;
    c.page_floats =
        (n_ref * (size_t)ps * ((size_t)p->a.head_dim + p->a.head_dim_v) + 15) /
        16 * 16;
  }
  size_t per_thread = tile_floats + c.page_floats;
  float *ws = fa_cpu_workspace(st, sizeof(float) * (delta_floats + sink_floats +
                                                    per_thread * (size_t)nt));
  if (!ws) {
    free(page_slot);
    return FA_ERR_OUT_OF_MEMORY;
  }
  c.delta = ws;
  c.sink_part = want_dsinks ? ws + delta_floats : NULL;
  float *tiles = ws + delta_floats + sink_floats;
  const int64_t n_bh = (int64_t)B * HQ;
  const int64_t n_kv = p->paged ? HK : (int64_t)B * HK * nkb;
  const int64_t n_q = (int64_t)B * HQ * nqb;

#pragma omp parallel num_threads(nt)
  {
    float *mine = tiles + per_thread * (size_t)thread_id();
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_bh; i++)
      compute_delta(&c, mine, (int)(i / HQ), (int)(i % HQ));
      // (implicit barrier: every D is ready)
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_kv; i++) {
      if (p->paged) {
        const int hk = (int)i;
        float *pacc = mine + tile_floats;
        memset(pacc, 0, sizeof(float) * c.page_floats);
        for (int b = 0; b < B; b++)
          for (int kb = 0; kb * c.t.bk < fa_seq_len_k(p, b); kb++) {
            kv_block_grads(&c, mine, b, hk, kb);
            add_kv_block(&c, mine, pacc, b, kb);
          }
        store_pages(&c, pacc, hk);
      } else {
        const int kb = (int)(i % nkb), hk = (int)(i / nkb % HK),
                  b = (int)(i / nkb / HK);
        const int sk = fa_seq_len_k(p, b);
        if (kb == 0) {
          int rows = p->varlen_k
                         ? p->a.cu_seqlens_k[b + 1] - p->a.cu_seqlens_k[b]
                         : p->a.seqlen_k;
          zero_kv_rows(&c, b, hk, sk, rows);
        }
        if (kb * c.t.bk < sk) {
          kv_block_grads(&c, mine, b, hk, kb);
          store_kv_block(&c, mine, b, hk, kb);
        }
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_q; i++)
      q_block_grads(&c, mine, (int)(i / nqb / HQ), (int)(i / nqb % HQ),
                    (int)(i % nqb));
  }
  free(page_slot);
  if (want_dsinks) store_dsinks(&c);
  return FA_OK;
}
