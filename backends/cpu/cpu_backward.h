// SPDX-License-Identifier: MIT
// The backward's work items (the driver, cpu_driver.c, runs the passes).
// Part of cpu_kernels.h.
//
// Three passes, each parallel without atomics and deterministic:
//   1. D_i = rowsum(dO_i * O_i) for every query row;
//   2. dK, dV: one item per (batch, kv head, range of kv blocks), each
//      block over the q heads of its group and the q blocks that see it;
//      with them dQ += dS.K into fp32 rows of the range's own
//      (cpu_bwd_dq.c plans them);
//   3. dQ: one item per (batch, q head, q block), the sum of its ranges'
//      rows in range order.
// 5 tile products a (q block, kv block) pair, for fp32 partial dQ rows
// (the size of Q per range). Where they do not fit (dq_ranges 0), pass 2
// runs one item per kv block and pass 3 recomputes S and dP for dQ over
// the item's kv blocks: 7 products, no partial rows. Paged KV
// may share a page between sequences: there pass 2 runs one item per kv
// head, sums dK/dV in fp32 over every sequence that names a page (a buffer
// over the pages the batch references), and stores each row once. (Adding
// into a 16-bit dK/dV sequence by sequence rounded at every step and could
// overflow to an infinity of the wrong sign: found by the long fuzz run.)

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
  if (c->q_rows) { // the row packs of the passes after
    const size_t at = (size_t)row_index(p, b, h, 0);
    load_q_rows(c->q_rows + at * c->q_ld, c->q_ld, p, &c->args->q, b, h, 0, sq,
                p->a.head_dim);
    load_q_rows(c->do_rows + at * c->do_ld, c->do_ld, p, d_o, b, h, 0, sq, dv);
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
      ws[t->qt + (size_t)d * t->ldqt + r] =
          r < nr ? ws[t->q + (size_t)r * t->ld + d] * p->a.scale : 0.0f;
  for (int r = 0; r < bq; r++)
    for (int d = 0; d < p->a.head_dim_v; d++)
      ws[t->dot + (size_t)d * t->ldqt + r] =
          r < nr ? ws[t->d_o + (size_t)r * t->ldv + d] : 0.0f;
  float *lse = ws + t->m, *dl = ws + t->l;
  for (int r = 0; r < bq; r++) {
    float x = r < nr ? c->args->lse[row_index(p, b, h, row0 + r)] : 0.0f;
    lse[r] = x == -INFINITY ? 0.0f : x; // such rows see no key: P = 0 anyway
    dl[r] = r < nr ? c->delta[row_index(p, b, h, row0 + r)] : 0.0f;
  }
}

/* The K and V rows [col0, col0 + nc) of (b, hk) at the tiles' pitches:
   in the call's pack, which pass 2 fills (fill = 1) and pass 3 reads, or
   without one copied into the thread's tiles. */
static void load_k_side(const cpu_bwd *c, float *ws, int b, int hk, int col0,
                        int nc, int fill, const float **k, const float **v) {
  const fa_problem *p = c->p;
  float *kd = ws + c->t.k, *vd = ws + c->t.v;
  if (c->k_rows) {
    const size_t row =
        ((size_t)b * p->a.heads_kv + hk) * c->plan->num_k_blocks * c->t.bk +
        col0;
    kd = c->k_rows + row * c->t.ld;
    vd = c->v_rows + row * c->t.ldv;
  }
  *k = kd;
  *v = vd;
  if (c->k_rows && !fill) return;
  load_k_rows(kd, c->t.ld, p, &c->args->k, b, hk, col0, nc, p->a.head_dim);
  load_k_rows(vd, c->t.ldv, p, &c->args->v, b, hk, col0, nc, p->a.head_dim_v);
}

/* With both sides loaded: P^T (in s) = exp(S^T - lse), dP^T = V.dO^T, and
   dS^T (in dp) = P^T * (dP^T - D) * dscore. The exponent is clamped at 0:
   s <= lse holds in real arithmetic, but s is recomputed here by another
   product order, and at huge logits (f16 near 65504, default scale) the
   rounding would make P = exp(s - lse) overflow. Returns 1 when the tile
   meets a mask, with each lane's visible keys in the vis tile; masked
   entries of P and dS are then exactly 0. */
static int tile_grad(const cpu_bwd *c, float *ws, const float *k,
                     const float *v, int b, int h, int sq, int sk, int row0,
                     int nr, int col0, int nc, cpu_prefetch *pf) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int bq = t->bq;
  float *s = ws + t->s, *g = ws + t->g, *dp = ws + t->dp;
  const cpu_lanes ln = {h, 1, row0, nr, fa_diag_shift(p, b, sq, sk)};
  scores(p, t, ws, k, t->ld, &ln, sq, sk, col0, nc, g, pf);
  gemm_pf(nc, bq, p->a.head_dim_v, v, t->ldv, 1, ws + t->dot, t->ldqt, dp, bq,
          0, pf);
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

/* The fp32 partial dQ block of range r for (b, h, q block qb) (cpu_bwd:
   a unit's blocks are (sequence when paged, head of the group, q block),
   and wave slot u % dq_wave of the range's holds unit u). */
static float *dq_block(const cpu_bwd *c, int r, int b, int h, int qb) {
  const fa_problem *p = c->p;
  const int hk = h / p->group;
  const int64_t unit = p->paged ? hk : (int64_t)b * p->a.heads_kv + hk;
  const int64_t in_unit =
      ((int64_t)(p->paged ? b : 0) * p->group + h % p->group) *
          c->plan->num_q_blocks +
      qb;
  const int64_t slot = (int64_t)r * c->dq_wave + unit % c->dq_wave;
  return c->dq_part +
         ((size_t)slot * c->dq_unit_blocks + in_unit) * c->dq_block;
}

/* Rows [0, nr) x [0, dim) of x (pitch ld) added into dQ^T block blk
   (c->dq_transposed: the layout of the ISA's blocks), or stored there when
   first, the block's padding zeroed. */
static void dq_block_add_t(const cpu_bwd *c, float *blk, const float *x,
                           int64_t ld, int nr, int dim, int first) {
  const int q32 = (c->t.bq + 31) / 32 * 32;
  if (first) memset(blk, 0, sizeof(float) * c->dq_block);
  for (int r = 0; r < nr; r++)
    for (int d = 0; d < dim; d++) blk[(size_t)d * q32 + r] += x[r * ld + d];
}

/* dK, dV of one kv block, and with range >= 0 (c->dq_part) its dQ share
   into the range's rows. Here the score tile is kept the other way round,
   S[lane][key], so that the block's K^T and V^T are packed once and every
   q block of every head of the group reuses them, with Q and dO as stored:
     S = Q.(scale K^T),  dP = dO.V^T,  P = exp(S - lse),
     dS = P * (dP - D) * dscore,  dV += P^T.dO,  dK += dS^T.Q,
     dQ (+)= dS.K (the range's first block a q block sees stores it). */
static void kv_block_grads(const cpu_bwd *c, float *ws, int b, int hk, int kb,
                           int range) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  const int col0 = kb * t->bk, nc = sk - col0 < t->bk ? sk - col0 : t->bk;
  const int bq = t->bq, bk = t->bk, dim = p->a.head_dim, dv = p->a.head_dim_v;
  memset(ws + t->acc, 0, sizeof(float) * (size_t)bk * t->ld);
  memset(ws + t->accv, 0, sizeof(float) * (size_t)bk * t->ldv);
  const float *kb_rows, *vb_rows;
  load_k_side(c, ws, b, hk, col0, nc, 1, &kb_rows, &vb_rows);
  float *kt = ws + t->kt, *vt = ws + t->vt;
  for (int j = 0; j < nc; j++) {
    const float *kr = kb_rows + (size_t)j * t->ld,
                *vr = vb_rows + (size_t)j * t->ldv;
    for (int d = 0; d < dim; d++) kt[(size_t)d * bk + j] = kr[d] * p->a.scale;
    for (int d = 0; d < dv; d++) vt[(size_t)d * bk + j] = vr[d];
  }
  float *s = ws + t->s, *g = ws + t->g, *dp = ws + t->dp;
  const float *q = ws + t->q, *d_o = ws + t->d_o;
  const int64_t ldq = c->q_rows ? c->q_ld : t->ld,
                ldo = c->q_rows ? c->do_ld : t->ldv;
  int *lo = (int *)(ws + t->vis), *hi = lo + bq;
  const cpu_slayout sl = {1, bk, 0};
  const int nqb = (sq + bq - 1) / bq, tail = nc % FA_VW, full = nc - tail;
  const int with_dq = c->dq_part && range >= 0;
  const int dq_lo =
      with_dq ? c->dq_bounds[(size_t)b * (c->dq_ranges + 1) + range] : 0;
  int k_bad = -1; // K holds an inf or NaN (looked at once, when needed)
  for (int h = hk * p->group; h < (hk + 1) * p->group; h++)
    for (int qb = 0; qb < nqb; qb++) {
      int kb0, kb1;
      fa_plan_kv_blocks(p, c->plan, shift, sq, sk, qb, &kb0, &kb1);
      if (kb < kb0 || kb >= kb1) continue;
      const int row0 = qb * bq, nr = sq - row0 < bq ? sq - row0 : bq;
      if (c->q_rows) {
        const size_t at = (size_t)row_index(p, b, h, row0);
        q = c->q_rows + at * ldq;
        d_o = c->do_rows + at * ldo;
      } else {
        load_q_rows(ws + t->q, t->ld, p, &c->args->q, b, h, row0, nr, dim);
        load_q_rows(ws + t->d_o, t->ldv, p, &c->args->d_o, b, h, row0, nr, dv);
      }
      gemm(nr, nc, dim, q, ldq, 1, kt, bk, s, bk, 0);
      const cpu_lanes ln = {h, 1, row0, nr, shift};
      cpu_slayout sl_r = sl;
      sl_r.grad_lanes = nr;
      scores_post(p, s, &sl_r, &ln, sq, sk, col0, nc, g);
      gemm(nr, nc, dv, d_o, ldo, 1, vt, bk, dp, bk, 0);
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
      if (cut && any_nonfinite(d_o, ldo, nr, dv))
        gemm_visible(nc, 0, nr, lo, hi, dv, s, bk, 1, d_o, ldo, ws + t->accv,
                     t->ldv, 1);
      else
        gemm(nc, dv, nr, s, 1, bk, d_o, ldo, ws + t->accv, t->ldv, 1);
      if (cut && any_nonfinite(q, ldq, nr, dim))
        gemm_visible(nc, 0, nr, lo, hi, dim, dp, bk, 1, q, ldq, ws + t->acc,
                     t->ld, 1);
      else
        gemm(nc, dim, nr, dp, 1, bk, q, ldq, ws + t->acc, t->ld, 1);
      if (!with_dq) continue;
      // dQ[r][:] (+)= sum_c dS[r][c] K[c][:], over visible pairs only where
      // masked dS = 0 would meet an inf or NaN in K. Into the block, or
      // for another layout than rows through the qt tile (unused here).
      float *blk = dq_block(c, range, b, h, qb);
      const int first = kb == (kb0 > dq_lo ? kb0 : dq_lo);
      const int direct = !c->dq_transposed;
      float *dq = direct ? blk : ws + t->qt;
      if (cut && k_bad < 0) k_bad = any_nonfinite(kb_rows, t->ld, nc, dim);
      if (cut && k_bad) {
        if (first || !direct)
          for (int i = 0; i < nr; i++)
            memset(dq + (size_t)i * t->ld, 0, sizeof(float) * (size_t)dim);
        gemm_visible(nc, 0, nr, lo, hi, dim, dp, bk, 1, kb_rows, t->ld, dq,
                     t->ld, 0);
      } else {
        gemm(nr, dim, nc, dp, bk, 1, kb_rows, t->ld, dq, t->ld,
             direct && !first);
      }
      if (!direct) dq_block_add_t(c, blk, dq, t->ld, nr, dim, first);
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
    const float *k, *v;
    load_k_side(c, ws, b, hk, col0, nc, 0, &k, &v);
    // Packed rows of the next block (K, then V) fetched while this one's
    // products run, as in the forward.
    cpu_prefetch pf = {NULL, 0};
    if (c->k_rows && kb + 1 < kb1)
      pf = (cpu_prefetch){(const char *)(k + (size_t)nc * t->ld),
                          (int64_t)nc * t->ld / 16};
    const int cut =
        tile_grad(c, ws, k, v, b, h, sq, sk, row0, nr, col0, nc, &pf);
    if (c->k_rows && kb + 1 < kb1)
      pf = (cpu_prefetch){(const char *)(v + (size_t)nc * t->ldv),
                          (int64_t)nc * t->ldv / 16};
    // dQ[r][:] += sum_c dS^T[c][r] K[c][:], over visible pairs only where
    // masked dS = 0 would meet an inf or NaN in K.
    if (cut && any_nonfinite(k, t->ld, nc, dim)) {
      const int *lo = (const int *)(ws + t->vis), *hi = lo + bq;
      gemm_visible(nc, 0, nr, lo, hi, dim, ws + t->dp, 1, bq, k, t->ld, acc,
                   t->ld, 0);
    } else {
      gemm_pf(nr, dim, nc, ws + t->dp, 1, bq, k, t->ld, acc, t->ld, 1, &pf);
    }
  }
  const fa_tensor *dq = &c->args->dq;
  for (int r = 0; r < nr; r++)
    store_grad(p, dq, fa_q_offset(p, dq, b, row0 + r, h),
               acc + (size_t)r * t->ld, dim);
}

/* Pass 3 with dQ from pass 2: the dQ block of (b, h, q block qb) summed
   over the ranges whose kv blocks reached it, in range order, into sum
   (or, one range, that range's block: returned); NULL when none did (the
   rows see no key: their dQ is 0). Rows [0, nr) x [0, dim) in the rows
   layout; every float of the block in dQ^T's. */
static const float *dq_sum(const cpu_bwd *c, float *sum, int b, int h, int qb,
                           int nr, int dim) {
  const fa_problem *p = c->p;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  int kb0, kb1;
  fa_plan_kv_blocks(p, c->plan, fa_diag_shift(p, b, sq, sk), sq, sk, qb, &kb0,
                    &kb1);
  const int *bounds = c->dq_bounds + (size_t)b * (c->dq_ranges + 1);
  const int rows = c->dq_transposed ? 1 : nr;
  const size_t ld = c->t.ld, n = c->dq_transposed ? c->dq_block : (size_t)dim;
  const float *got = NULL;
  for (int r = 0; r < c->dq_ranges; r++) {
    if ((kb0 > bounds[r] ? kb0 : bounds[r]) >=
        (kb1 < bounds[r + 1] ? kb1 : bounds[r + 1]))
      continue;
    const float *part = dq_block(c, r, b, h, qb);
    if (!got) { // one range: its block as it is
      got = part;
      continue;
    }
    for (int i = 0; i < rows; i++)
      for (size_t d = 0; d < n; d += FA_VW) {
        const int k = n - d < FA_VW ? (int)(n - d) : FA_VW;
        const size_t at = i * ld + d;
        vf_store_part(
            sum + at,
            vf_add(vf_load_part(got + at, k), vf_load_part(part + at, k)), k);
      }
    got = sum;
  }
  return got;
}

/* Pass 3 with dQ from pass 2 (rows layout): the block's sum stored. */
static void dq_sum_block(const cpu_bwd *c, float *ws, int b, int h, int qb) {
  const fa_problem *p = c->p;
  const cpu_tiles *t = &c->t;
  const int sq = fa_seq_len_q(p, b), row0 = qb * t->bq, dim = p->a.head_dim;
  if (row0 >= sq) return;
  const int nr = sq - row0 < t->bq ? sq - row0 : t->bq;
  const float *rows = dq_sum(c, ws + t->acc, b, h, qb, nr, dim);
  if (!rows) {
    memset(ws + t->acc, 0, sizeof(float) * (size_t)nr * t->ld);
    rows = ws + t->acc;
  }
  const fa_tensor *dq = &c->args->dq;
  for (int i = 0; i < nr; i++)
    store_grad(p, dq, fa_q_offset(p, dq, b, row0 + i, h),
               rows + (size_t)i * t->ld, dim);
}

/* An ISA may run the blocks of passes 2 and 3 on tiles of its own: its
   header (FA_TILE_BWD_HEADER) defines FA_KV_BLOCK_GRADS, FA_Q_BLOCK_GRADS
   and FA_DQ_SUM_BLOCK, each falling back to the functions above for the
   blocks it leaves. */
#ifdef FA_TILE_BWD_HEADER
#include FA_TILE_BWD_HEADER
#endif
#ifndef FA_KV_BLOCK_GRADS
#define FA_KV_BLOCK_GRADS kv_block_grads
#endif
#ifndef FA_Q_BLOCK_GRADS
#define FA_Q_BLOCK_GRADS q_block_grads
#endif
#ifndef FA_DQ_SUM_BLOCK
#define FA_DQ_SUM_BLOCK dq_sum_block
#endif

/* Pass 2 item i: dK/dV of one (batch, kv head, kv block), or when paged of
   one kv head over every sequence, summed in pacc (the thread's page
   accumulator). */
static void bwd_kv_item(const cpu_bwd *c, float *ws, float *pacc, int64_t i) {
  const fa_problem *p = c->p;
  const int HK = p->a.heads_kv, with_dq = c->dq_part != NULL;
  if (p->paged) { // (with dQ: one range)
    const int hk = (int)i;
    memset(pacc, 0, sizeof(float) * c->page_floats);
    for (int b = 0; b < p->a.batch; b++)
      for (int kb = 0; kb * c->t.bk < fa_seq_len_k(p, b); kb++) {
        FA_KV_BLOCK_GRADS(c, ws, b, hk, kb, with_dq ? 0 : -1);
        add_kv_block(c, ws, pacc, b, kb);
      }
    store_pages(c, pacc, hk);
    return;
  }
  // Kv blocks [kb0, kb1) of (b, hk): a range (with dQ), or one block.
  const int n = with_dq ? c->dq_ranges : c->plan->num_k_blocks;
  const int x = (int)(i % n), hk = (int)(i / n % HK), b = (int)(i / n / HK);
  const int sk = fa_seq_len_k(p, b);
  const int *bounds = with_dq ? c->dq_bounds + (size_t)b * (n + 1) : NULL;
  const int kb0 = with_dq ? bounds[x] : x,
            kb1 = with_dq ? bounds[x + 1] : x + 1;
  if (x == 0) {
    const fa_flat_problem f = fa_problem_flat(p);
    zero_kv_rows(c, b, hk, sk, fa_seq_storage_k(&f, b));
  }
  for (int kb = kb0; kb < kb1 && kb * c->t.bk < sk; kb++) {
    FA_KV_BLOCK_GRADS(c, ws, b, hk, kb, with_dq ? x : -1);
    store_kv_block(c, ws, b, hk, kb);
  }
}

/* Pass 3 item i: dQ of one (batch, q head, q block). */
static void bwd_q_item(const cpu_bwd *c, float *ws, int64_t i) {
  const int nqb = c->plan->num_q_blocks, HQ = c->p->a.heads_q;
  const int b = (int)(i / nqb / HQ), h = (int)(i / nqb % HQ),
            qb = (int)(i % nqb);
  if (c->dq_part)
    FA_DQ_SUM_BLOCK(c, ws, b, h, qb);
  else
    FA_Q_BLOCK_GRADS(c, ws, b, h, qb);
}
