// SPDX-License-Identifier: MIT
// The forward's work item: a q tile of a split over its kv blocks, each by
// the small path (row streaming), the bf16 step or the fp32 step. Single
// threaded on the thread's tiles: the driver (cpu_driver.c) runs the items
// and merges the splits. Part of cpu_kernels.h.

/* The small path's kv block [col0, col0 + nc): scores as dot products over
   d and P.V as row updates, each K/V row read (and widened) once. */
static void fwd_block_rows(cpu_fwd_item *it, int col0, int nc) {
  const fa_problem *p = it->p;
  const fa_fwd_args *args = it->args;
  const cpu_tiles *t = it->t;
  float *ws = it->ws, *o = ws + t->acc, *mu = ws + t->mu;
  int *vlo = (int *)(ws + t->vis), *vhi = vlo + t->bq;
  const int b = it->b, hk = it->hk, kvt = it->kvt, lpk = it->lpk;
  const int pk = it->ln.pk, nr = it->nr, dv = p->a.head_dim_v, bq = t->bq;
  const cpu_slayout sl_t = {bq, 1, bq};
  // Every kv head of the tile: rows key-major, so that a BSHD layout or a
  // paged cache (all kv heads of a key side by side) is read in order.
  const float *kh[FA_MAX_KV_TILES], *vh[FA_MAX_KV_TILES];
  int64_t ldk = t->ld, ldv = t->ldv;
  for (int x = 0; x < kvt; x++) {
    kh[x] = ws + t->k + (size_t)x * t->bk * t->ld;
    vh[x] = ws + t->v + (size_t)x * t->bk * t->ldv;
    if (it->direct) {
      kh[x] = (const float *)args->k.data +
              fa_k_offset(p, &args->k, b, col0, hk + x);
      vh[x] = (const float *)args->v.data +
              fa_k_offset(p, &args->v, b, col0, hk + x);
    }
  }
  if (it->direct) {
    ldk = args->k.stride_seq;
    ldv = args->v.stride_seq;
  } else if (it->fp8) {
    fp8_rows_block(p, args, b, hk, col0, nc, it->kend, &it->fr);
  } else {
    const size_t esz = fa_dtype_size(p->dtype);
    for (int c = 0; c < nc; c++)
      for (int x = 0; x < kvt; x++) {
        // Decode is bound by memory latency: ask for the rows a few keys
        // ahead while these are widened.
        if (col0 + c + FA_PREFETCH_KEYS < it->kend)
          for (int z = 0; z < 2; z++) {
            const fa_tensor *src = z ? &args->v : &args->k;
            const char *row =
                (const char *)src->data +
                fa_k_offset(p, src, b, col0 + c + FA_PREFETCH_KEYS, hk + x) *
                    (int64_t)esz;
            const int bytes = (z ? dv : p->a.head_dim) * (int)esz;
            for (int off = 0; off < bytes; off += 64)
              __builtin_prefetch(row + off, 0, FA_PREFETCH_LOCALITY);
          }
        load_k_rows((float *)kh[x] + (size_t)c * t->ld, t->ld, p, &args->k, b,
                    hk + x, col0 + c, 1, p->a.head_dim);
        load_k_rows((float *)vh[x] + (size_t)c * t->ldv, t->ldv, p, &args->v, b,
                    hk + x, col0 + c, 1, dv);
      }
  }
  // Lane runs: one per (row, kv head); a single run without kv packing.
  const int run_len = kvt > 1 ? lpk : nr;
  const int nruns = kvt > 1 ? it->ln.npos * kvt : 1;
  for (int x = 0; x < nruns; x++) {
    const int lane0 = kvt > 1 ? (x / kvt) * pk + (x % kvt) * lpk : 0;
    if (it->fp8)
      scores_fp8(p, t, ws, args, &it->ln, b, &it->fr, x % kvt, nc, lane0,
                 run_len);
    else
      scores_rows(p, t, ws, kh[x % kvt], ldk, nc, lane0, run_len);
  }
  scores_post(p, ws + t->s, &sl_t, &it->ln, it->sq, it->sk, col0, nc, NULL);
  online_softmax(t, ws, nc);
  rescale_o(o, t->ldv, mu, nr, dv);
  // O[r][:] += P^T[c][r] V[c][:] over the keys each lane sees (the same
  // rule as the GEMM path's when V holds inf or NaN).
  lane_keys(p, &it->ln, it->sq, it->sk, col0, nc, vlo, vhi);
  for (int x = 0; x < nruns; x++) {
    const int lane0 = kvt > 1 ? (x / kvt) * pk + (x % kvt) * lpk : 0;
    if (it->fp8)
      pv_fp8(p, t, ws, args, &it->fr, x % kvt, lane0, run_len, vlo, vhi, o);
    else
      gemm_visible(nc, lane0, run_len, vlo, vhi, dv, ws + t->s, 1, bq,
                   vh[x % kvt], ldv, o, t->ldv, 0);
  }
}

/* The item's rows done: finalized and stored, or kept as a split's
   partial (m, l, O) for fwd_merge. */
static void fwd_item_store(const cpu_fwd_item *it, const fa_plan_data *plan,
                           int64_t w, cpu_partials *part) {
  const fa_problem *p = it->p;
  const cpu_tiles *t = it->t;
  const float *m = it->ws + t->m, *l = it->ws + t->l;
  float *o = it->ws + t->acc;
  const int pk = it->ln.pk, row0 = it->ln.row0, dv = p->a.head_dim_v;
  if (plan->num_splits == 1) {
    for (int r = 0; r < it->nr; r++) {
      if (r + FA_ROWS_AHEAD < it->nr)
        prefetch_lane_row(p, &it->args->o, it->b, &it->ln, r + FA_ROWS_AHEAD,
                          dv, 1);
      const int h = it->ln.h0 + r % pk;
      float lse, inv = finalize(p, m[r], l[r], h, row0 + r / pk, it->ln.shift,
                                it->sk, &lse);
      store_row(p, it->args, it->b, h, row0 + r / pk, o + (size_t)r * t->ldv,
                inv, lse);
    }
    return;
  }
  float *pml = part->ml + (size_t)w * t->bq * 2;
  float *po = part->o + (size_t)w * t->bq * dv;
  for (int r = 0; r < it->nr; r++) {
    pml[2 * r] = m[r];
    pml[2 * r + 1] = l[r];
    memcpy(po + (size_t)r * dv, o + (size_t)r * t->ldv, sizeof(float) * dv);
  }
}

/* Work item w: one (batch, q heads, q block, split) over its kv blocks,
   each by the small path, the bf16 step or the fp32 step. */
static void fwd_item(const fa_problem *p, const fa_plan_data *plan,
                     const fa_fwd_args *args, const cpu_tiles *t, float *ws,
                     int64_t w, cpu_partials *part, const cpu_kvpack *kvpack) {
  int b, h0, qb, split;
  fa_plan_work_item(p, plan, w, &b, &h0, &qb, &split);
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int row0 = qb * plan->block_rows;
  if (row0 >= sq) return;
  const int pk = plan->pack_group, bq = t->bq, dv = p->a.head_dim_v;
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  cpu_fwd_item it;
  it.p = p;
  it.args = args;
  it.t = t;
  it.ws = ws;
  it.kvpack = kvpack;
  it.ln = (cpu_lanes){
      h0, pk, row0, sq - row0 < plan->block_rows ? sq - row0 : plan->block_rows,
      shift};
  it.b = b;
  it.hk = h0 / p->group;
  it.sq = sq;
  it.sk = sk;
  it.nr = it.ln.npos * pk;
  float *m = ws + t->m, *l = ws + t->l;
  for (int r = 0; r < bq; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  memset(ws + t->acc, 0, sizeof(float) * (size_t)bq * t->ldv);

  int kb0, kb1, s0, s1;
  fa_plan_kv_blocks(p, plan, shift, sq, sk, qb, &kb0, &kb1);
  fa_plan_split_range(kb0, kb1, plan->num_splits, split, &s0, &s1);
  // fp32 K/V read in place (no copy) unless they must be descaled.
  it.direct =
      p->dtype == FA_F32 && !p->paged && !args->k.descale && !args->v.descale;
  // Tiles that span several kv heads (all heads of a decode step) always
  // stream rows; so do tiles with few lanes.
  it.kvt = plan->kv_heads_per_tile;
  it.lpk = pk / it.kvt;
  const int small = it.nr <= FA_SMALL_LANES || it.kvt > 1;
  // FP8, bf16, f16 and fp32 K/V on the small path: read in place, widened
  // in registers (cpu_rows_fp8.h).
  it.fp8 = fp8_rows_plan(p, t, args, b, it.hk, it.kvt, &it.fr) && small;
  // Other small tiles (descaled 16- and 32-bit rows, odd head dims) copy
  // their rows, keys in order (all kv heads of a key, K then V) with the
  // rows a few keys ahead prefetched.
  if (small) it.direct = 0;
  const int dot_bf16 = bf16_pack_q(&it, small);
  if (!dot_bf16) f32_pack_q(&it);
  // Row-major q rows for the dot products: bf16 ones for vdpbf16ps
  // (cpu_rows_fp8_dp.h), else scaled fp32 ones.
  if (small && !(it.fp8 && fp8_rows_dp(p, t, ws, args, &it.ln, b, it.hk, it.kvt,
                                       it.nr, &it.fr))) {
    float *qr = ws + t->qr;
    memset(qr, 0, sizeof(float) * (size_t)(bq + 3) * t->ld);
    for (int r = 0; r < it.nr; r++)
      for (int d = 0; d < p->a.head_dim; d++)
        qr[(size_t)r * t->ld + d] = ws[t->qt + (size_t)d * t->ldqt + r];
  }
  // Long splits: fold the state every fold_blocks blocks (see fold_state).
  const int fold = (int64_t)(s1 - s0) * t->bk > FA_FOLD_FROM;
  const int fold_blocks = FA_FOLD_KEYS > t->bk ? FA_FOLD_KEYS / t->bk : 1;
  if (fold) fold_init(t, ws, it.nr, dv);
  it.kend = (int64_t)s1 * t->bk < sk ? s1 * t->bk : sk;
  for (int kb = s0; kb < s1; kb++) {
    if (fold && kb > s0 && (kb - s0) % fold_blocks == 0)
      fold_state(t, ws, it.nr, dv);
    const int col0 = kb * t->bk;
    const int nc = sk - col0 < t->bk ? sk - col0 : t->bk;
    if (small)
      fwd_block_rows(&it, col0, nc);
    else if (dot_bf16)
      bf16_block(&it, col0, nc);
    else
      f32_block(&it, col0, nc);
  }
  if (fold) fold_finish(t, ws, it.nr, dv);
  fwd_item_store(&it, plan, w, part);
}
