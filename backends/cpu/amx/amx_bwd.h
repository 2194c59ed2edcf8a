// SPDX-License-Identifier: MIT
// The backward's blocks on AMX tiles (passes 2 and 3 of cpu_backward.h),
// included there through FA_TILE_BWD_HEADER. Each block keeps its score
// tile with keys as rows, S^T [keys][lanes], so that every product reads
// bf16 rows as stored or packed once per call:
//   S^T = K.Q^T      A = K rows (pairs along d), B = Q^T pairs [d/2][lanes]
//   dP^T = V.dO^T    A = V rows, B = dO^T pairs [dv/2][lanes]
//   P, dS in AVX-512 on S^T and dP^T (lse and D along the lanes), rounded
//   to bf16 as the next products' operands:
//   dV += P^T.dO     A = P^T rows (pairs along lanes), B = dO in pairs of
//                    rows [lanes/2][dv]
//   dK += dS^T.Q     A = dS^T rows, B = Q in pairs of rows
//   dQ^T += K^T.dS^T A = K^T in pairs of keys [d][keys/2], B = dS^T in
//                    pairs of keys [keys/2][lanes]: in pass 2 into the
//                    range's fp32 dQ^T block (cpu_bwd's dq_transposed),
//                    or, where those do not fit, in pass 3 after S^T and
//                    dP^T again
// Every operand is packed once per call (pass 0: each q block's and each
// kv block's tiles), so the passes only multiply and exponentiate.
// Every dimension is padded with zeros to whole tiles (32 keys, lanes and
// d), and P and dS are exactly 0 outside the visible pairs, so a padded or
// masked product adds 0. The blocks they leave (softcap, ALiBi, dO not
// bf16, or a tile that meets a mask where an operand the masked pairs
// would multiply holds inf or NaN) run the body's fp32 blocks.
#ifndef FA_AMX_BWD_H
#define FA_AMX_BWD_H

#include "amx/amx_exp2.h"

static inline int round32(int x) { return (x + 31) / 32 * 32; }

/* Chunks of a block's score tile (multiples of 32): keys in pass 2, lanes
   in pass 3 (the rows or columns its products' C tiles are made of).
   Whole blocks: chunks of 32 or 64, whose S^T, dP^T, P and dS would stay
   in L1 between the products, measured no faster (bench/NOTES.md). */
#ifndef FA_AMX_BWD_KEYS
#define FA_AMX_BWD_KEYS 256
#endif
#ifndef FA_AMX_BWD_LANES
#define FA_AMX_BWD_LANES 256
#endif

/* dst[c][r] = src[r][c] for 32-bit words, r < rows, c < cols (both
   multiples of 16), by 16 x 16 blocks. */
static void amx_transpose(uint32_t *dst, size_t ldd, const uint32_t *src,
                          size_t lds, int rows, int cols) {
  for (int r0 = 0; r0 < rows; r0 += 16)
    for (int c0 = 0; c0 < cols; c0 += 16) {
      __m512i x[16];
      for (int i = 0; i < 16; i++)
        x[i] = _mm512_loadu_si512(src + (size_t)(r0 + i) * lds + c0);
      transpose16(x);
      for (int i = 0; i < 16; i++)
        _mm512_storeu_si512(dst + (size_t)(c0 + i) * ldd + r0, x[i]);
    }
}

/* bf16 rows [row0, row0 + n) of t (q-like or, with key, k-like) for
   (b, h) into dst[rows][ld] 16-bit values: dims past dim and rows past n
   zero. */
static void amx_load_rows(uint16_t *dst, int ld, const fa_problem *p,
                          const fa_tensor *t, int b, int h, int row0, int n,
                          int rows, int dim, int key) {
  const uint16_t *src = (const uint16_t *)t->data;
  for (int r = 0; r < rows; r++) {
    uint16_t *d = dst + (size_t)r * ld;
    int w = 0;
    if (r < n) {
      const int64_t at = key ? fa_k_offset(p, t, b, row0 + r, h)
                             : fa_q_offset(p, t, b, row0 + r, h);
      memcpy(d, src + at, sizeof(uint16_t) * (size_t)dim);
      w = dim;
    }
    memset(d + w, 0, sizeof(uint16_t) * (size_t)(ld - w));
  }
}

/* out[e][x] = (rows[2e][x], rows[2e + 1][x]) for e < rows_n / 2: 16-bit
   rows of ld values (a multiple of 16) paired two by two. */
static void amx_pair_rows(uint32_t *out, const uint16_t *rows, int ld,
                          int rows_n) {
  for (int e = 0; 2 * e < rows_n; e++)
    pair_rows(out + (size_t)e * ld, rows + (size_t)2 * e * ld,
              rows + (size_t)(2 * e + 1) * ld, ld);
}

/* 1 if a bf16 value of rows [row0, row0 + n) of t (dim values each) is
   an inf or NaN (exponent all ones). */
static int amx_rows_nonfinite(const fa_problem *p, const fa_tensor *t, int b,
                              int h, int row0, int n, int dim, int key) {
  const uint16_t *src = (const uint16_t *)t->data;
  const __m512i ex = _mm512_set1_epi16(0x7f80);
  __mmask32 bad = 0;
  for (int r = 0; r < n; r++) {
    const int64_t at = key ? fa_k_offset(p, t, b, row0 + r, h)
                           : fa_q_offset(p, t, b, row0 + r, h);
    for (int d = 0; d < dim; d += 32) {
      const __mmask32 in =
          dim - d >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (dim - d)) - 1u;
      const __m512i x = _mm512_maskz_loadu_epi16(in, src + at + d);
      bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, ex), ex);
    }
  }
  return bad != 0;
}

/* The block operands the products read, packed once per call (pass 0,
   into c->pack), and a thread's AMX tiles after the body's. Pitches in
   words or floats; kp keys, q32 lanes, d32 and v32 dims, each the plan's
   block or dim rounded up to 32. */
typedef struct amx_bwd_tiles {
  int kp, q32, d32, v32; // kp: the keys of the block at hand
  int kfull;             // kp of a whole block (the pack's pitch)
  // Per q block (b, h, qb), in the pack: Q^T, dO^T pairs [dim/2][q32];
  // Q, dO in pairs of rows [q32/2][dim].
  const uint32_t *qtb, *dotb, *qrb, *dorb;
  // Per kv block (b, hk, kb), in the pack: K, V rows as stored [kp][dim/2];
  // K^T in pairs of keys [d32][kp/2].
  const uint32_t *ka, *va, *kta;
  uint16_t *rows;         // pass 0: rows as stored, zero padded
  uint32_t *kpr;          // pass 0: K in pairs of rows [kp/2][d32]
  uint32_t *pa, *dsa;     // P^T, dS^T [kp][q32/2] (pass 3: dS^T
                          // in pairs of keys [kp/2][q32], in dsa)
  uint32_t *dsk;          // pass 2: dS^T in pairs of keys [kp/2][q32]
  float *st, *dpt;        // S^T, dP^T [kp][q32]
  float *dka, *dva, *dqt; // dK [kp][d32], dV [kp][v32], dQ^T [d32][q32]
  float *lse, *dl, *row;  // per lane; one dQ row
  int *lo, *hi;           // each lane's visible keys
} amx_bwd_tiles;

static void amx_bwd_dims(const fa_plan_data *plan, amx_bwd_tiles *x) {
  x->kp = x->kfull = round32(plan->block_k);
  x->q32 = round32(plan->block_q);
  x->d32 = round32(plan->head_dim_pad);
  x->v32 = round32(plan->head_dim_v_pad);
}

/* The floats of the thread's tiles (at == NULL), or their places from at. */
static size_t amx_bwd_place(const fa_plan_data *plan, float *at,
                            amx_bwd_tiles *x) {
  amx_bwd_tiles dims;
  amx_bwd_dims(plan, &dims);
  const size_t kp = dims.kp, q = dims.q32, d = dims.d32, v = dims.v32;
  const size_t rows = (kp > q ? kp : q) * (d > v ? d : v) / 2;
  size_t n = 0;
#define FA_AMX_TAKE(field, type, count)                                        \
  do {                                                                         \
    if (at) x->field = (type *)(at + n);                                       \
    n += ((size_t)(count) + 15) / 16 * 16;                                     \
  } while (0)
  FA_AMX_TAKE(rows, uint16_t, rows);
  FA_AMX_TAKE(kpr, uint32_t, kp * d / 2);
  FA_AMX_TAKE(pa, uint32_t, kp * q / 2);
  FA_AMX_TAKE(dsa, uint32_t, kp * q / 2);
  FA_AMX_TAKE(dsk, uint32_t, kp * q / 2);
  FA_AMX_TAKE(st, float, kp *q);
  FA_AMX_TAKE(dpt, float, kp *q);
  FA_AMX_TAKE(dka, float, kp *d);
  FA_AMX_TAKE(dva, float, kp *v);
  FA_AMX_TAKE(dqt, float, d *q);
  FA_AMX_TAKE(lse, float, q);
  FA_AMX_TAKE(dl, float, q);
  FA_AMX_TAKE(row, float, d);
  FA_AMX_TAKE(lo, int, q);
  FA_AMX_TAKE(hi, int, q);
#undef FA_AMX_TAKE
  if (at) amx_bwd_dims(plan, x);
  return n;
}

static cpu_tiles amx_tiles_layout(const fa_plan_data *plan, int bwd) {
  cpu_tiles t = tiles_layout(plan, bwd);
  if (bwd) t.total += amx_bwd_place(plan, NULL, NULL);
  return t;
}
#define FA_TILES_LAYOUT amx_tiles_layout

/* Words of one q block's and one kv block's packed operands. */
static size_t amx_qblock_words(const amx_bwd_tiles *x) {
  return (size_t)x->q32 * (x->d32 + x->v32);
}
static size_t amx_kblock_words(const amx_bwd_tiles *x) {
  return (size_t)x->kfull * (x->d32 + x->v32 / 2);
}

/* The pack: every q block of every (batch, q head), then every kv block of
   every (batch, kv head). At most this many floats (about 3x the bf16
   inputs); larger problems run the body's blocks. */
#define FA_AMX_PACK_MAX ((size_t)1 << 28)

static size_t amx_bwd_pack_plan(const cpu_bwd *c, int64_t *items) {
  const fa_problem *p = c->p;
  *items = 0;
  if (p->a.softcap > 0.0f || p->a.alibi_slopes ||
      c->args->d_o.dtype != FA_BF16 || c->args->q.dtype != FA_BF16 ||
      c->args->k.dtype != FA_BF16 || c->args->v.dtype != FA_BF16)
    return 0;
  amx_bwd_tiles x;
  amx_bwd_dims(c->plan, &x);
  const int64_t nq = (int64_t)p->a.batch * p->a.heads_q * c->plan->num_q_blocks,
                nk =
                    (int64_t)p->a.batch * p->a.heads_kv * c->plan->num_k_blocks;
  const size_t n = ((size_t)nq * amx_qblock_words(&x) +
                    (size_t)nk * amx_kblock_words(&x) + 15) /
                   16 * 16;
  if (n > FA_AMX_PACK_MAX) return 0;
  *items = nq + nk;
  return n;
}
#define FA_BWD_PACK_PLAN amx_bwd_pack_plan

/* Point x at the packed operands of q block (b, h, qb) / kv block
   (b, hk, kb). */
static void amx_qpack(const cpu_bwd *c, amx_bwd_tiles *x, int b, int h,
                      int qb) {
  const size_t i =
      ((size_t)b * c->p->a.heads_q + h) * c->plan->num_q_blocks + qb;
  const uint32_t *at = (const uint32_t *)c->pack + i * amx_qblock_words(x);
  const size_t hd = (size_t)x->q32 * x->d32 / 2,
               hv = (size_t)x->q32 * x->v32 / 2;
  x->qtb = at;
  x->dotb = at + hd;
  x->qrb = at + hd + hv;
  x->dorb = at + 2 * hd + hv;
}
static void amx_kpack(const cpu_bwd *c, amx_bwd_tiles *x, int b, int hk,
                      int kb) {
  const fa_problem *p = c->p;
  const size_t nq = (size_t)p->a.batch * p->a.heads_q * c->plan->num_q_blocks;
  const size_t i =
      ((size_t)b * p->a.heads_kv + hk) * c->plan->num_k_blocks + kb;
  const uint32_t *at = (const uint32_t *)c->pack + nq * amx_qblock_words(x) +
                       i * amx_kblock_words(x);
  x->ka = at;
  x->va = at + (size_t)x->kfull * x->d32 / 2;
  x->kta = x->va + (size_t)x->kfull * x->v32 / 2;
}

/* Pass 0 item i: pack one q block or one kv block. */
static void amx_bwd_pack_item(const cpu_bwd *c, float *ws, int64_t i) {
  const fa_problem *p = c->p;
  amx_bwd_tiles x;
  amx_bwd_place(c->plan, ws + (c->t.total - amx_bwd_place(c->plan, NULL, NULL)),
                &x);
  const int64_t nq = (int64_t)p->a.batch * p->a.heads_q * c->plan->num_q_blocks;
  const int q = x.q32, d = x.d32, v = x.v32;
  if (i < nq) {
    const int nqb = c->plan->num_q_blocks, qb = (int)(i % nqb),
              h = (int)(i / nqb % p->a.heads_q),
              b = (int)(i / nqb / p->a.heads_q);
    const int sq = fa_seq_len_q(p, b), row0 = qb * c->t.bq;
    if (row0 >= sq) return;
    const int nr = sq - row0 < c->t.bq ? sq - row0 : c->t.bq;
    amx_qpack(c, &x, b, h, qb);
    const fa_tensor *src[2] = {&c->args->q, &c->args->d_o};
    const int ld[2] = {d, v}, dims[2] = {p->a.head_dim, p->a.head_dim_v};
    uint32_t *tr[2] = {(uint32_t *)x.qtb, (uint32_t *)x.dotb},
             *pr[2] = {(uint32_t *)x.qrb, (uint32_t *)x.dorb};
    for (int k = 0; k < 2; k++) { // Q, then dO
      amx_load_rows(x.rows, ld[k], p, src[k], b, h, row0, nr, q, dims[k], 0);
      amx_transpose(tr[k], q, (const uint32_t *)x.rows, ld[k] / 2, q,
                    ld[k] / 2);
      amx_pair_rows(pr[k], x.rows, ld[k], q);
    }
    return;
  }
  i -= nq;
  const int nkb = c->plan->num_k_blocks, kb = (int)(i % nkb),
            hk = (int)(i / nkb % p->a.heads_kv),
            b = (int)(i / nkb / p->a.heads_kv);
  const int sk = fa_seq_len_k(p, b), col0 = kb * c->t.bk;
  if (col0 >= sk) return;
  const int nc = sk - col0 < c->t.bk ? sk - col0 : c->t.bk;
  amx_kpack(c, &x, b, hk, kb);
  amx_load_rows((uint16_t *)x.ka, d, p, &c->args->k, b, hk, col0, nc, x.kp,
                p->a.head_dim, 1);
  amx_load_rows((uint16_t *)x.va, v, p, &c->args->v, b, hk, col0, nc, x.kp,
                p->a.head_dim_v, 1);
  amx_pair_rows(x.kpr, (const uint16_t *)x.ka, d, x.kp);
  amx_transpose((uint32_t *)x.kta, x.kfull / 2, x.kpr, d, x.kp / 2, d);
}
#define FA_BWD_PACK_ITEM amx_bwd_pack_item

/* The AMX tiles of the thread whose body tiles are ws; 0 when the call
   has no pack (the blocks are the body's). */
static int amx_bwd_tiles_of(const cpu_bwd *c, float *ws, amx_bwd_tiles *x) {
  if (!c->pack) return 0;
  amx_bwd_place(c->plan, ws + (c->t.total - amx_bwd_place(c->plan, NULL, NULL)),
                x);
  return 1;
}

/* lse and D of (b, h, rows row0 .. row0 + nr) per lane (0 past nr). */
static void amx_lse_d(const cpu_bwd *c, const amx_bwd_tiles *x, int b, int h,
                      int row0, int nr) {
  const fa_problem *p = c->p;
  for (int r = 0; r < x->q32; r++) {
    const float l = r < nr ? c->args->lse[row_index(p, b, h, row0 + r)] : 0.0f;
    x->lse[r] = l == -INFINITY ? 0.0f : l; // such rows see no key: P = 0
    x->dl[r] = r < nr ? c->delta[row_index(p, b, h, row0 + r)] : 0.0f;
  }
}

/* The visible lanes r0 .. r0 + 15 of key j: lanes below nr, and with lo
   each lane's keys [lo[r], hi[r]). */
static inline __mmask16 amx_lanes(int j, int r0, int nr, const int *lo,
                                  const int *hi) {
  const int n = nr - r0 < 0 ? 0 : nr - r0 > 16 ? 16 : nr - r0;
  __mmask16 k = (__mmask16)((1u << n) - 1u);
  if (lo) {
    const __m512i vj = _mm512_set1_epi32(j);
    k = _mm512_mask_cmp_epi32_mask(k, _mm512_loadu_si512(lo + r0), vj,
                                   _MM_CMPINT_LE);
    k = _mm512_mask_cmp_epi32_mask(k, vj, _mm512_loadu_si512(hi + r0),
                                   _MM_CMPINT_LT);
  }
  return k;
}

/* One chunk of a block's score tile on its way through the products:
   keys [j0, j0 + nk) (rows of S^T) by lanes [r0, r0 + nl), held in x->st
   and x->dpt at pitch nl, P and dS made into x->pa and x->dsa. */
typedef struct amx_chunk {
  int j0, nk, r0, nl;
} amx_chunk;

/* S^T = K.Q^T and dP^T = V.dO^T of the chunk, from the packed blocks. */
static void amx_chunk_scores(const amx_bwd_tiles *x, const amx_chunk *ch) {
  const int q = x->q32, d = x->d32, v = x->v32;
  amx_gemm(ch->nk, ch->nl, d / 2, x->ka + (size_t)ch->j0 * d / 2, d / 2,
           x->qtb + ch->r0, q, x->st, ch->nl, 0);
  amx_gemm(ch->nk, ch->nl, v / 2, x->va + (size_t)ch->j0 * v / 2, v / 2,
           x->dotb + ch->r0, q, x->dpt, ch->nl, 0);
}

/* P and dS of the chunk from S^T and dP^T, keys j < nc and lanes r < nr
   of the block (lo: each lane's visible keys; elsewhere both are exactly
   0): P = exp(min(scale s - lse, 0)) (clamped as in tile_grad),
   dS = P (dP - D) scale. With lanes, P^T and dS^T as bf16 rows, pairs of
   lanes (pa, dsa: [nk][nl/2]); with by_keys (or NULL), dS^T in pairs of
   keys there ([nk/2][nl]). */
static void amx_grads(const amx_bwd_tiles *x, const amx_chunk *ch, int nc,
                      int nr, float scale, const int *lo, const int *hi,
                      int lanes, uint32_t *by_keys) {
  const int nl = ch->nl;
  const __m512 k = _mm512_set1_ps(scale * 1.44269504088896341f),
               vs = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  // Word lane i of a pair vector: low half key 2e, high half key 2e+1.
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11,
                                         26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int c0 = 0; c0 < nl; c0 += 32) {
    const int r0 = ch->r0 + c0; // the block's lane
    __m512 ll[2], dd[2];
    for (int u = 0; u < 2; u++) {
      ll[u] = _mm512_mul_ps(_mm512_loadu_ps(x->lse + r0 + 16 * u),
                            _mm512_set1_ps(1.44269504088896341f));
      dd[u] = _mm512_loadu_ps(x->dl + r0 + 16 * u);
    }
    for (int j = 0; j < ch->nk; j += 2) {
      __m512 pv[2][2], dv[2][2]; // [key j + w][lanes half u]
      for (int w = 0; w < 2; w++)
        for (int u = 0; u < 2; u++) {
          const int jj = ch->j0 + j + w, r = r0 + 16 * u;
          const __mmask16 keep =
              jj < nc ? amx_lanes(jj, r, nr, lo, hi) : (__mmask16)0;
          const size_t at = (size_t)(j + w) * nl + c0 + 16 * u;
          const __m512 t = _mm512_min_ps(
              zero, _mm512_fmsub_ps(_mm512_loadu_ps(x->st + at), k, ll[u]));
          pv[w][u] = amx_exp2(t, keep);
          dv[w][u] = _mm512_maskz_mul_ps(
              keep,
              _mm512_mul_ps(pv[w][u],
                            _mm512_sub_ps(_mm512_loadu_ps(x->dpt + at), dd[u])),
              vs);
        }
      if (by_keys)
        for (int u = 0; u < 2; u++)
          _mm512_storeu_si512(
              by_keys + (size_t)j / 2 * nl + c0 + 16 * u,
              _mm512_permutexvar_epi16(
                  inter, (__m512i)_mm512_cvtne2ps_pbh(dv[1][u], dv[0][u])));
      for (int w = 0; lanes && w < 2; w++) {
        const size_t at = (size_t)(j + w) * (nl / 2) + c0 / 2;
        _mm512_storeu_si512(x->pa + at,
                            (__m512i)_mm512_cvtne2ps_pbh(pv[w][1], pv[w][0]));
        _mm512_storeu_si512(x->dsa + at,
                            (__m512i)_mm512_cvtne2ps_pbh(dv[w][1], dv[w][0]));
      }
    }
  }
}

/* Where the tile of lanes ln meets a mask: each lane's visible keys in
   x->lo / x->hi (padded lanes none), returned; else NULL. */
static const int *amx_cut_keys(const cpu_bwd *c, const amx_bwd_tiles *x,
                               const cpu_lanes *ln, int sq, int sk, int col0,
                               int nc) {
  if (!tile_cut(c->p, ln, sq, sk, col0, nc)) return NULL;
  lane_keys(c->p, ln, sq, sk, col0, nc, x->lo, x->hi);
  for (int r = ln->npos; r < x->q32; r++) x->lo[r] = x->hi[r] = 0;
  return x->lo;
}

/* The next (q head of kv head hk's group, q block) whose rows see kv block
   kb of sequence b, after (*h, *qb) (start: the group's first head, qb
   -1); 0 past the last. */
static int amx_next_visit(const cpu_bwd *c, int b, int hk, int kb, int *h,
                          int *qb) {
  const fa_problem *p = c->p;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int nqb = (sq + c->t.bq - 1) / c->t.bq;
  for (;;) {
    if (++*qb >= nqb) {
      *qb = 0;
      if (++*h >= (hk + 1) * p->group) return 0;
    }
    int kb0, kb1;
    fa_plan_kv_blocks(p, c->plan, fa_diag_shift(p, b, sq, sk), sq, sk, *qb,
                      &kb0, &kb1);
    if (kb >= kb0 && kb < kb1) return 1;
  }
}

/* Pass 2 on tiles: dK, dV of kv block kb of (b, hk) into the body's acc
   and accv tiles (store_kv_block and add_kv_block read them there), and
   with range r >= 0 dQ^T into the range's blocks (as kv_block_grads). */
static void amx_kv_block_grads(const cpu_bwd *c, float *ws, int b, int hk,
                               int kb, int r) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  amx_bwd_tiles x;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  const int bq = t->bq, dim = p->a.head_dim, dv = p->a.head_dim_v;
  int ok = amx_bwd_tiles_of(c, ws, &x), k_seen = 0;
  const int with_dq = c->dq_part && r >= 0;
  // Masked dS = 0 and P = 0 must not meet an inf or NaN in Q or dO (or,
  // for dQ, in K).
  for (int h = hk * p->group, qb = -1;
       ok && amx_next_visit(c, b, hk, kb, &h, &qb);) {
    const int row0 = qb * bq, nr = sq - row0 < bq ? sq - row0 : bq;
    const cpu_lanes ln = {h, 1, row0, nr, shift};
    if (!tile_cut(p, &ln, sq, sk, col0, nc)) continue;
    ok = !amx_rows_nonfinite(p, &c->args->q, b, h, row0, nr, dim, 0) &&
         !amx_rows_nonfinite(p, &c->args->d_o, b, h, row0, nr, dv, 0);
    if (ok && with_dq && !k_seen++)
      ok = !amx_rows_nonfinite(p, &c->args->k, b, hk, col0, nc, dim, 1);
  }
  if (!ok) {
    kv_block_grads(c, ws, b, hk, kb, r);
    return;
  }
  amx_kpack(c, &x, b, hk, kb);
  x.kp = round32(nc);
  memset(x.dka, 0, sizeof(float) * (size_t)x.kp * x.d32);
  memset(x.dva, 0, sizeof(float) * (size_t)x.kp * x.v32);
  const int dq_lo =
      with_dq ? c->dq_bounds[(size_t)b * (c->dq_ranges + 1) + r] : 0;
  for (int h = hk * p->group, qb = -1; amx_next_visit(c, b, hk, kb, &h, &qb);) {
    const int row0 = qb * bq, nr = sq - row0 < bq ? sq - row0 : bq;
    const cpu_lanes ln = {h, 1, row0, nr, shift};
    amx_qpack(c, &x, b, h, qb);
    amx_lse_d(c, &x, b, h, row0, nr);
    const int *lo = amx_cut_keys(c, &x, &ln, sq, sk, col0, nc);
    const int q = x.q32;
    int kb0 = 0, kb1;
    if (with_dq) fa_plan_kv_blocks(p, c->plan, shift, sq, sk, qb, &kb0, &kb1);
    float *dqt = with_dq ? dq_block(c, r, b, h, qb) : NULL;
    const int first = kb == (kb0 > dq_lo ? kb0 : dq_lo);
    // Keys FA_AMX_BWD_KEYS at a time through all five products.
    for (int j0 = 0; j0 < x.kp; j0 += FA_AMX_BWD_KEYS) {
      const amx_chunk ch = {
          j0, x.kp - j0 < FA_AMX_BWD_KEYS ? x.kp - j0 : FA_AMX_BWD_KEYS, 0, q};
      amx_chunk_scores(&x, &ch);
      amx_grads(&x, &ch, nc, nr, p->a.scale, lo, x.hi, 1,
                with_dq ? x.dsk : NULL);
      amx_gemm(ch.nk, x.v32, q / 2, x.pa, q / 2, x.dorb, x.v32,
               x.dva + (size_t)j0 * x.v32, x.v32, 1);
      amx_gemm(ch.nk, x.d32, q / 2, x.dsa, q / 2, x.qrb, x.d32,
               x.dka + (size_t)j0 * x.d32, x.d32, 1);
      if (with_dq)
        amx_gemm(x.d32, q, ch.nk / 2, x.kta + j0 / 2, x.kfull / 2, x.dsk, q,
                 dqt, q, !first || j0 > 0);
    }
  }
  amx_done();
  for (int j = 0; j < nc; j++) {
    memcpy(ws + t->acc + (size_t)j * t->ld, x.dka + (size_t)j * x.d32,
           sizeof(float) * (size_t)dim);
    memcpy(ws + t->accv + (size_t)j * t->ldv, x.dva + (size_t)j * x.v32,
           sizeof(float) * (size_t)dv);
  }
}
#define FA_KV_BLOCK_GRADS amx_kv_block_grads

/* Pass 3 on tiles: dQ of q block qb of (b, h), stored. */
static void amx_q_block_grads(const cpu_bwd *c, float *ws, int b, int h,
                              int qb) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  amx_bwd_tiles x;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int bq = t->bq, row0 = qb * bq, hk = h / p->group;
  if (row0 >= sq) return;
  const int nr = sq - row0 < bq ? sq - row0 : bq, dim = p->a.head_dim;
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  const cpu_lanes ln = {h, 1, row0, nr, shift};
  int kb0, kb1;
  fa_plan_kv_blocks(p, c->plan, shift, sq, sk, qb, &kb0, &kb1);
  int ok = amx_bwd_tiles_of(c, ws, &x);
  // Masked dS = 0 must not meet an inf or NaN in K.
  for (int kb = kb0; ok && kb < kb1; kb++) {
    const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    if (tile_cut(p, &ln, sq, sk, col0, nc))
      ok = !amx_rows_nonfinite(p, &c->args->k, b, hk, col0, nc, dim, 1);
  }
  if (!ok) {
    q_block_grads(c, ws, b, h, qb);
    return;
  }
  const int q = x.q32, d = x.d32;
  amx_qpack(c, &x, b, h, qb);
  amx_lse_d(c, &x, b, h, row0, nr);
  memset(x.dqt, 0, sizeof(float) * (size_t)d * q);
  for (int kb = kb0; kb < kb1; kb++) {
    const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    amx_kpack(c, &x, b, hk, kb);
    x.kp = round32(nc);
    const int *lo = amx_cut_keys(c, &x, &ln, sq, sk, col0, nc);
    // Lanes FA_AMX_BWD_LANES at a time through the three products.
    for (int r0 = 0; r0 < q; r0 += FA_AMX_BWD_LANES) {
      const amx_chunk ch = {
          0, x.kp, r0, q - r0 < FA_AMX_BWD_LANES ? q - r0 : FA_AMX_BWD_LANES};
      amx_chunk_scores(&x, &ch);
      amx_grads(&x, &ch, nc, nr, p->a.scale, lo, x.hi, 0, x.dsa);
      amx_gemm(d, ch.nl, x.kp / 2, x.kta, x.kfull / 2, x.dsa, ch.nl, x.dqt + r0,
               q, 1);
    }
  }
  amx_done();
  const fa_tensor *dq = &c->args->dq;
  for (int r = 0; r < nr; r++) {
    for (int n = 0; n < dim; n++) x.row[n] = x.dqt[(size_t)n * q + r];
    store_grad(p, dq, fa_q_offset(p, dq, b, row0 + r, h), x.row, dim);
  }
}
#define FA_Q_BLOCK_GRADS amx_q_block_grads

/* Pass 3 with dQ from pass 2: the ranges' dQ^T blocks of (b, h, q block
   qb) summed (dq_sum) and stored by rows; without the pack, the body's. */
static void amx_dq_sum_block(const cpu_bwd *c, float *ws, int b, int h,
                             int qb) {
  const fa_problem *p = c->p;
  amx_bwd_tiles x;
  const int sq = fa_seq_len_q(p, b), row0 = qb * c->t.bq, dim = p->a.head_dim;
  if (!c->dq_transposed || !amx_bwd_tiles_of(c, ws, &x)) {
    dq_sum_block(c, ws, b, h, qb);
    return;
  }
  if (row0 >= sq) return;
  const int nr = sq - row0 < c->t.bq ? sq - row0 : c->t.bq, q = x.q32;
  const float *dqt = dq_sum(c, x.dqt, b, h, qb, nr, dim);
  const fa_tensor *dq = &c->args->dq;
  // 16 lanes at a time back to rows, in pass 0's row scratch (16 x d32
  // floats fit: it holds at least 32 rows of d32 16-bit values).
  float *rows = (float *)x.rows;
  for (int r0 = 0; r0 < nr; r0 += 16) {
    if (dqt)
      amx_transpose((uint32_t *)rows, (size_t)x.d32, (const uint32_t *)dqt + r0,
                    (size_t)q, x.d32, 16);
    else
      memset(rows, 0, sizeof(float) * 16 * (size_t)x.d32);
    for (int r = r0; r < nr && r < r0 + 16; r++)
      store_grad(p, dq, fa_q_offset(p, dq, b, row0 + r, h),
                 rows + (size_t)(r - r0) * x.d32, dim);
  }
}
#define FA_DQ_SUM_BLOCK amx_dq_sum_block

#endif
