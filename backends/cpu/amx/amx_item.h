// SPDX-License-Identifier: MIT
// The AMX forward work item, included by cpu_kernels.h through
// FA_TILE_ITEM_HEADER: it takes every dense bf16 item (the ones the body
// would run through its bf16 tile step) and leaves the rest (small tiles:
// decode rows) to the body's fwd_item.
//
// It keeps S = Q.K^T with lanes as rows ([lanes][keys]), not the body's
// S^T, so that both products and the softmax between them need no
// transpose:
//   S = Q.K^T:   A = Q rows as stored (pairs along d), B = K^T, packed once
//                per call as tiles of 16 keys (amx_kvpack_item);
//   softmax:     along each row, 16 rows at a time (amx_softmax.h): exps
//                rounded to bf16 in key order are already pairs of keys,
//                i.e. P's A tile;
//   O += P.V:    A = P [lanes][key pairs], B = V in pairs of keys (the
//                body's pack), C = O [lanes][dv] (the body's layout, so
//                fold_state and fwd_item_store apply as they are).
// Lanes are taken FA_AMX_CHUNK at a time through all three phases, the
// chunk's scores (64 KiB at 64 lanes and 256 keys) going from the score
// tiles to the softmax through L1 and L2, and the scale is folded into the
// exponent (chunks of 32 and 128 lanes measured the same).
// A block that meets a mask (causal, window) is fused too, each row's
// visible keys a key range in the softmax. Softcap or ALiBi (or a scale
// <= 0), and a masked block whose V holds inf or NaN (only visible pairs
// may be multiplied), compute the whole tile's scores first and run the
// body's score pipeline and visible-pairs product on them.
// It takes exactly the items the body's bf16 step would (bf16, a K/V
// pack, more than FA_SMALL_LANES lanes of one kv head): that step, which
// reads K rows where this pack holds K^T tiles, is never reached here.
#ifndef FA_AMX_ITEM_H
#define FA_AMX_ITEM_H

#include "amx/amx_softmax.h"

/* The body's pack, then K rewritten as K^T tiles: each 16-key group of a
   block (16 rows of ldk2 pairs, the same words) becomes [ldk2][16]: the B
   tile of pair step e at +16 e, rows of 64 bytes, contiguous. Groups never
   straddle blocks (block_k % 16 == 0). */
static void amx_kvpack_item(const fa_problem *p, const fa_plan_data *plan,
                            const fa_fwd_args *args, const cpu_kvpack *kv,
                            int64_t i) {
  kvpack_item(p, plan, args, kv, i);
  const int nkb = plan->num_k_blocks, bk = plan->block_k, ld = kv->ldk2;
  const int kb = (int)(i % nkb), hk = (int)(i / nkb % p->a.heads_kv),
            b = (int)(i / nkb / p->a.heads_kv);
  const int sk = fa_seq_len_k(p, b);
  const int j0 = kb * bk, j1 = kb == nkb - 1 ? kv->rows : j0 + bk;
  const size_t bh = (size_t)b * p->a.heads_kv + hk;
  const uint16_t *k16 = (const uint16_t *)args->k.data;
  for (int j = j0; j < j1; j += 16) {
    uint32_t *g = kv->k + (bh * kv->rows + j) * ld;
    for (int e0 = 0; e0 < ld; e0 += 16) {
      __m512i x[16];
      for (int r = 0; r < 16; r++)
        x[r] = j + r < sk ? _mm512_loadu_si512(
                                k16 + fa_k_offset(p, &args->k, b, j + r, hk) +
                                2 * (size_t)e0)
                          : _mm512_setzero_si512();
      transpose16(x);
      for (int e = 0; e < 16; e++)
        _mm512_storeu_si512(g + (size_t)(e0 + e) * 16, x[e]);
    }
  }
}
#define FA_KVPACK_ITEM amx_kvpack_item

/* Lanes per pass through the three phases (a multiple of 32). */
#ifndef FA_AMX_CHUNK
#define FA_AMX_CHUNK 64
#endif

/* S[r][c] = Q2[r].K^T[c] for rows [0, nrow) and keys [0, nc16) (both
   multiples of 16): Q2 rows of ldq pairs, kt the block's K^T tiles (group
   g at kt + 16 g ldk2), S rows of lds floats. Keys outer: a pair of K^T
   groups comes from L2 once and serves every row pair from L1. */
static void amx_scores(int nrow, int nc16, int dpairs, const uint32_t *q2,
                       int ldq, const uint32_t *kt, int ldk2, float *s,
                       int lds) {
  amx_ready();
  const size_t sa = sizeof(uint32_t) * (size_t)ldq, sb = 64,
               sc = sizeof(float) * (size_t)lds, grp = 16 * (size_t)ldk2;
  for (int c0 = 0; c0 < nc16; c0 += 32) {
    const uint32_t *b0 = kt + (size_t)(c0 / 16) * grp;
    for (int r0 = 0; r0 < nrow; r0 += 32) {
      const uint32_t *a0 = q2 + (size_t)r0 * ldq;
      float *c00 = s + (size_t)r0 * lds + c0;
      if (r0 + 16 < nrow && c0 + 16 < nc16) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int e = 0; e < dpairs; e += 16) {
          _tile_loadd(4, a0 + e, sa);
          _tile_loadd(5, a0 + 16 * (size_t)ldq + e, sa);
          _tile_loadd(6, b0 + 16 * (size_t)e, sb);
          _tile_loadd(7, b0 + grp + 16 * (size_t)e, sb);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
          if (r0 == 0) { // the next group pair, on the first row pair
            amx_prefetch_tile(b0 + 2 * grp + 16 * (size_t)e, 64);
            amx_prefetch_tile(b0 + 3 * grp + 16 * (size_t)e, 64);
          }
        }
        _tile_stored(0, c00, sc);
        _tile_stored(1, c00 + 16, sc);
        _tile_stored(2, c00 + 16 * (size_t)lds, sc);
        _tile_stored(3, c00 + 16 * (size_t)lds + 16, sc);
        continue;
      }
      // Edges (a last 16 keys or rows): one C tile at a time.
      for (int ri = r0; ri < r0 + 32 && ri < nrow; ri += 16)
        for (int c = c0; c < c0 + 32 && c < nc16; c += 16) {
          _tile_zero(0);
          for (int e = 0; e < dpairs; e += 16) {
            _tile_loadd(4, q2 + (size_t)ri * ldq + e, sa);
            _tile_loadd(6, kt + (size_t)(c / 16) * grp + 16 * (size_t)e, sb);
            _tile_dpbf16ps(0, 4, 6);
          }
          _tile_stored(0, s + (size_t)ri * lds + c, sc);
        }
    }
  }
}

/* O[nrow][dv] += P.V: P rows of ldp pairs (e16 of them, a multiple of
   16), V2 pair rows of ldv2 words; nrow a multiple of 16. */
static void amx_pv(int nrow, int dv, int e16, const uint32_t *p2, int ldp,
                   const uint32_t *v2, int ldv2, float *o, int ldo) {
  amx_gemm(nrow, dv, e16, p2, (size_t)ldp, v2, (size_t)ldv2, o, (size_t)ldo, 1);
}

/* The keys [0, kc) that rows [0, nrow) of a tile read, their visible
   ranges [lo, hi): kc is the last key any of them sees, plus one (0 for
   none). */
static int amx_chunk_keys(const int *lo, const int *hi, int nrow) {
  int kc = 0;
  for (int r = 0; r < nrow; r++)
    if (hi[r] > lo[r] && hi[r] > kc) kc = hi[r];
  return kc;
}

/* The forward work item w on tiles, or 0 (untouched) for the body. */
// NOLINTNEXTLINE(readability-function-size): one item's three phases
static int fwd_item_tiles(const fa_problem *p, const fa_plan_data *plan,
                          const fa_fwd_args *args, const cpu_tiles *t,
                          float *ws, int64_t w, cpu_partials *part,
                          const cpu_kvpack *kv) {
  if (p->dtype != FA_BF16 || !kv->items) return 0;
  int b, h0, qb, split;
  fa_plan_work_item(p, plan, w, &b, &h0, &qb, &split);
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int row0 = qb * plan->block_rows, pk = plan->pack_group;
  if (row0 >= sq) return 0;
  const int npos = sq - row0 < plan->block_rows ? sq - row0 : plan->block_rows;
  const int nr = npos * pk;
  // The body's rule for its row-streaming tiles (kvpack_plan already
  // refuses tiles that span kv heads).
  if (nr <= FA_SMALL_LANES || plan->kv_heads_per_tile != 1) return 0;
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  const cpu_lanes ln = {h0, pk, row0, npos, shift};
  const int hk = h0 / p->group, dv = p->a.head_dim_v, ldv = t->ldv;
  const int ldk2 = kv->ldk2, ldv2 = kv->ldv2, dpairs = p->a.head_dim / 2;
  const int nr16 = round16(nr);
  // S rows hold a block's keys rounded to whole pair tiles; P rows as many
  // pairs.
  const int lds = (t->bk + 31) / 32 * 32, ldp = lds / 2;
  float *s = ws + t->s, *o = ws + t->acc, *m = ws + t->m, *l = ws + t->l,
        *mu = ws + t->mu;
  uint32_t *q2 = (uint32_t *)(ws + t->qt), *p2 = (uint32_t *)(ws + t->p2);
  int *vlo = (int *)(ws + t->vis), *vhi = vlo + t->bq;

  // Q rows as stored: pairs along d, the A tiles of the scores.
  for (int r = 0; r < nr16; r++) {
    uint32_t *qr = q2 + (size_t)r * ldk2;
    if (r < nr)
      memcpy(qr,
             (const uint16_t *)args->q.data +
                 fa_q_offset(p, &args->q, b, row0 + r / pk, h0 + r % pk),
             sizeof(uint16_t) * (size_t)p->a.head_dim);
    else
      memset(qr, 0, sizeof(uint32_t) * (size_t)ldk2);
  }
  for (int r = 0; r < t->bq; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  memset(o, 0, sizeof(float) * (size_t)t->bq * ldv);

  int kb0, kb1, s0, s1;
  fa_plan_kv_blocks(p, plan, shift, sq, sk, qb, &kb0, &kb1);
  fa_plan_split_range(kb0, kb1, plan->num_splits, split, &s0, &s1);
  const int fold = (int64_t)(s1 - s0) * t->bk > FA_FOLD_FROM;
  const int fold_blocks = FA_FOLD_KEYS > t->bk ? FA_FOLD_KEYS / t->bk : 1;
  if (fold) fold_init(t, ws, nr, dv);
  const int special = p->a.softcap > 0.0f || p->a.alibi_slopes;
  const size_t bh = (size_t)b * p->a.heads_kv + hk;
  const cpu_slayout sl = {1, lds, t->bq};
  for (int kb = s0; kb < s1; kb++) {
    if (fold && kb > s0 && (kb - s0) % fold_blocks == 0)
      fold_state(t, ws, nr, dv);
    const int col0 = kb * t->bk;
    const int nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    const int nc16 = round16(nc);
    const uint32_t *kt = kv->k + (bh * kv->rows + col0) * ldk2,
                   *v2 = kv->v + (bh * kv->rows + col0) / 2 * ldv2;
    const int cut = tile_cut(p, &ln, sq, sk, col0, nc);
    // Masked P is 0, and 0 * inf is NaN: where the tile meets a mask and V
    // holds inf or NaN, only visible pairs are multiplied (as the body).
    const int bad = cut && bf16_v_nonfinite(v2, ldv2, nc, dv);
    // A tile that meets a mask is fused too, its rows' visible keys as
    // ranges in the softmax (padded lanes see none).
    const int fused = !special && !bad && p->a.scale > 0.0f;
    if (fused && cut) {
      lane_keys(p, &ln, sq, sk, col0, nc, vlo, vhi);
      for (int r = nr; r < nr16; r++) vlo[r] = vhi[r] = 0;
    }
    const int *flo = fused && cut ? vlo : NULL, *fhi = vhi;
    if (!fused) {
      amx_scores(nr16, nc16, dpairs, q2, ldk2, kt, ldk2, s, lds);
      const __m512 vs = _mm512_set1_ps(p->a.scale);
      for (int r = 0; r < nr16; r++)
        for (int c = 0; c < nc16; c += 16) {
          float *x = s + (size_t)r * lds + c;
          _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), vs));
        }
      scores_post(p, s, &sl, &ln, sq, sk, col0, nc, NULL);
    }
    for (int r0 = 0; r0 < nr16; r0 += FA_AMX_CHUNK) {
      const int nrow = nr16 - r0 < FA_AMX_CHUNK ? nr16 - r0 : FA_AMX_CHUNK;
      // Keys [0, kc) of the block for this chunk: all, or, where the rows'
      // visible ranges are known, up to the last one seen (a chunk of the
      // causal diagonal needs the keys up to its last row's; one that sees
      // none is skipped: its m, l and O stay as they are).
      const int kc = flo ? amx_chunk_keys(flo + r0, fhi + r0, nrow) : nc;
      if (!kc) continue;
      const int kc16 = round16(kc), ec16 = round16((kc + 1) / 2);
      // Fused, every chunk reuses the first chunk's S and P rows: the
      // tile stores then meet lines already in L1 (a chunk's own rows of
      // the 128 KiB tile would be cold at each step).
      float *sr = s + (fused ? 0 : (size_t)r0 * lds);
      uint32_t *pr = p2 + (fused ? 0 : (size_t)r0 * ldp);
      if (fused)
        amx_scores(nrow, kc16, dpairs, q2 + (size_t)r0 * ldk2, ldk2, kt, ldk2,
                   sr, lds);
      amx_softmax(nrow, sr, lds, kc, 2 * ec16, fused ? p->a.scale : 1.0f,
                  m + r0, l + r0, mu + r0, pr, ldp, bad, flo ? flo + r0 : NULL,
                  flo ? fhi + r0 : NULL);
      if (bad) continue;
      rescale_o(o + (size_t)r0 * ldv, ldv, mu + r0, nrow, dv);
      amx_pv(nrow, dv, ec16, pr, ldp, v2, ldv2, o + (size_t)r0 * ldv, ldv);
    }
    if (bad) {
      rescale_o(o, ldv, mu, nr, dv);
      load_k_rows(ws + t->v, ldv, p, &args->v, b, hk, col0, nc, dv);
      lane_keys(p, &ln, sq, sk, col0, nc, vlo, vhi);
      gemm_visible(nc, 0, nr, vlo, vhi, dv, s, lds, 1, ws + t->v, ldv, o, ldv,
                   0);
    }
  }
  if (fold) fold_finish(t, ws, nr, dv);
  cpu_fwd_item it;
  memset(&it, 0, sizeof it);
  it.p = p;
  it.args = args;
  it.t = t;
  it.ws = ws;
  it.ln = ln;
  it.b = b;
  it.sk = sk;
  it.nr = nr;
  fwd_item_store(&it, plan, w, part);
  return 1;
}

static void amx_fwd_item(const fa_problem *p, const fa_plan_data *plan,
                         const fa_fwd_args *args, const cpu_tiles *t, float *ws,
                         int64_t w, cpu_partials *part, const cpu_kvpack *kv) {
  if (!fwd_item_tiles(p, plan, args, t, ws, w, part, kv))
    fwd_item(p, plan, args, t, ws, w, part, kv);
}
#define FA_FWD_ITEM amx_fwd_item

#endif
