// SPDX-License-Identifier: MIT
// The fp32 tile-product step (the default of cpu_step.h): K and V packed
// as fp32 rows once per call (or, past the cap, read in place or widened
// per tile), S^T and O += P.V as GEMMs on the vocabulary's vectors. Part
// of cpu_kernels.h.

/* The fp32 step's pack: every K and V row widened (and descaled) once per
   call into dense rows of head_dim_pad floats. Read in place, BSHD rows lie
   a multiple of 4 KiB apart, so a block's rows share L1 sets and each one
   starts a page; copied per (q block, kv block), each row is widened once
   per q block. Fills kv (kv->fp32 set) and returns its floats; 0: no pack
   (the tiles the bf16 pack refuses too, or past the cap). */
static size_t f32_kvpack_plan(const fa_problem *p, const fa_plan_data *plan,
                              int small_lanes, cpu_kvpack *kv) {
  memset(kv, 0, sizeof *kv);
  const int rows_max =
      p->a.seqlen_q < plan->block_rows ? p->a.seqlen_q : plan->block_rows;
  if (plan->kv_heads_per_tile != 1 ||
      (int64_t)rows_max * plan->pack_group <= small_lanes)
    return 0;
  const size_t rows = (size_t)plan->num_k_blocks * plan->block_k;
  const size_t floats = (size_t)p->a.batch * p->a.heads_kv * rows *
                        ((size_t)plan->head_dim_pad + plan->head_dim_v_pad);
  if (floats > FA_CPU_PACK_MAX_FLOATS) return 0;
  kv->rows = (int)rows;
  kv->ldk2 = plan->head_dim_pad;
  kv->ldv2 = plan->head_dim_v_pad;
  kv->items = (int64_t)p->a.batch * plan->num_k_blocks;
  kv->fp32 = 1;
  return floats;
}

/* Pack item i: kv block kb of (b, every kv head); rows past the sequence
   are zero. Rows are copied in storage order: with keys outer where the kv
   heads of a key lie side by side (BSHD, paged caches), the source is one
   ascending stream the hardware prefetchers follow, where a kv head at a
   time reads a row per 4 KiB page. */
static void f32_kvpack_item(const fa_problem *p, const fa_plan_data *plan,
                            const fa_fwd_args *args, const cpu_kvpack *kv,
                            int64_t i) {
  const int nkb = plan->num_k_blocks, bk = plan->block_k, hkv = p->a.heads_kv;
  const int kb = (int)(i % nkb), b = (int)(i / nkb);
  const int j0 = kb * bk, sk = fa_seq_len_k(p, b);
  const int n = sk - j0 >= bk ? bk : sk - j0 > 0 ? sk - j0 : 0;
  const int keys_outer = args->k.stride_head < args->k.stride_seq;
  for (int z = 0; z < 2; z++) {
    const fa_tensor *src = z ? &args->v : &args->k;
    const int ld = z ? kv->ldv2 : kv->ldk2;
    const int dim = z ? p->a.head_dim_v : p->a.head_dim;
    float *base = (float *)(z ? kv->v : kv->k);
    for (int x = 0; x < n * hkv; x++) {
      const int j = keys_outer ? x / hkv : x % n;
      const int hk = keys_outer ? x % hkv : x / n;
      const size_t row = ((size_t)b * hkv + hk) * kv->rows + j0 + j;
      load_k_rows(base + row * ld, ld, p, src, b, hk, j0 + j, 1, dim);
    }
    for (int hk = 0; hk < hkv; hk++) {
      const size_t row = ((size_t)b * hkv + hk) * kv->rows + j0 + n;
      memset(base + row * ld, 0, sizeof(float) * (size_t)(bk - n) * ld);
    }
  }
}

/* Q^T for the fp32 step: the tile's q rows, scaled, transposed into the qt
   tile (the K tile doubles as the transposing load's row buffer). */
static void f32_pack_q(const cpu_fwd_item *it) {
  const cpu_tiles *t = it->t;
  load_q_transposed(it->ws + t->qt, t->bq, t->ldqt, it->ws + t->k, it->p,
                    &it->args->q, it->b, &it->ln, it->p->a.head_dim,
                    it->p->a.scale);
}

/* The products' first lane on a kv block [col0, ...): the first lane (a
   multiple of FA_VW) of the first row whose window ends past col0. On the
   diagonal of a causal mask the rows before it see none of the block: their
   scores are masked to -inf whatever the product leaves there (mask_hidden
   covers every key of the block for them) and their P is 0, so both
   products skip them (half of a q block's last kv block at B_r = 2 B_c). */
static int first_seeing_lane(const fa_problem *p, const cpu_lanes *ln, int sk,
                             int col0) {
  int lo = 0, hi = ln->npos; // window ends are non-decreasing in the row
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    int a, z;
    fa_visible_keys(p, ln->shift, ln->row0 + mid, sk, &a, &z);
    if (z > col0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo * ln->pk / FA_VW * FA_VW;
}

/* One kv block [col0, col0 + nc) of the item. */
static void f32_block(const cpu_fwd_item *it, int col0, int nc) {
  const fa_problem *p = it->p;
  const fa_fwd_args *args = it->args;
  const cpu_tiles *t = it->t;
  float *ws = it->ws, *o = ws + t->acc, *mu = ws + t->mu;
  const int b = it->b, hk = it->hk, nr = it->nr, bq = t->bq;
  const int dv = p->a.head_dim_v;
  const float *k = ws + t->k, *v = ws + t->v;
  int64_t ldk = t->ld, ldv = t->ldv;
  const cpu_kvpack *kv = it->kvpack;
  if (kv->fp32) {
    const size_t row = ((size_t)b * p->a.heads_kv + hk) * kv->rows + col0;
    k = (const float *)kv->k + row * kv->ldk2;
    v = (const float *)kv->v + row * kv->ldv2;
    ldk = kv->ldk2;
    ldv = kv->ldv2;
  } else if (it->direct) {
    // fp32 rows in place: no copy, the same reads the copy would make.
    k = (const float *)args->k.data + fa_k_offset(p, &args->k, b, col0, hk);
    v = (const float *)args->v.data + fa_k_offset(p, &args->v, b, col0, hk);
    ldk = args->k.stride_seq;
    ldv = args->v.stride_seq;
  } else {
    // One burst of row loads per tile keeps many misses in flight.
    load_k_rows(ws + t->k, t->ld, p, &args->k, b, hk, col0, nc, p->a.head_dim);
    load_k_rows(ws + t->v, t->ldv, p, &args->v, b, hk, col0, nc, dv);
  }
  // Packed rows of the next block follow this one's: fetched into L2 while
  // this block's products run (K during the scores, V during P.V).
  cpu_prefetch pk = {NULL, 0}, pv = {NULL, 0};
  if (kv->fp32 && col0 + nc < it->sk) {
    pk = (cpu_prefetch){(const char *)(k + nc * ldk), nc * ldk / 16};
    pv = (cpu_prefetch){(const char *)(v + nc * ldv), nc * ldv / 16};
  }
  // A tile the mask cuts: each lane's keys, so that the products skip what
  // the mask hides (gemm_cut; padding lanes past nr keep every key).
  const int cut = tile_cut(p, &it->ln, it->sq, it->sk, col0, nc);
  const int l0 = cut ? first_seeing_lane(p, &it->ln, it->sk, col0) : 0;
  int *vlo = (int *)(ws + t->vis), *vhi = vlo + bq;
  if (cut) {
    lane_keys(p, &it->ln, it->sq, it->sk, col0, nc, vlo, vhi);
    for (int r = nr; r < bq; r++) vhi[r] = nc;
  }
  const cpu_slayout sl = {bq, 1, bq};
  gemm_cut(nc, bq - l0, p->a.head_dim, k, ldk, 1, ws + t->qt + l0, t->ldqt,
           ws + t->s + l0, bq, 0, NULL, cut ? vhi + l0 : NULL, &pk);
  scores_post(p, ws + t->s, &sl, &it->ln, it->sq, it->sk, col0, nc, NULL);
  online_softmax(t, ws, nc);
  // O[r][:] = mu[r] O[r][:] + sum_c P^T[c][r] V[c][:], the rescale in the
  // product's load of O. Masked entries of P are 0, and 0 * NaN = NaN:
  // where the tile meets a mask and V holds inf or NaN (a scan of nc x dv,
  // 1/bq of the product), only visible pairs count.
  if (cut && any_nonfinite(v, ldv, nc, dv)) {
    rescale_o(o, t->ldv, mu, nr, dv);
    gemm_visible(nc, 0, nr, vlo, vhi, dv, ws + t->s, 1, bq, v, ldv, o, t->ldv,
                 0);
  } else {
    rescale_o(o, t->ldv, mu, l0, dv); // the rows the product skips
    const cpu_row_ops ro = {mu + l0, cut ? vhi + l0 : NULL};
    gemm_cut(nr - l0, dv, nc, ws + t->s + l0, 1, bq, v, ldv,
             o + (size_t)l0 * t->ldv, t->ldv, 1, &ro, NULL, &pv);
  }
}
