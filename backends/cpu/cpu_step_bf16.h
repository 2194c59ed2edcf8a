// SPDX-License-Identifier: MIT
// The bf16 tile-product step (cpu_step.h): bf16 inputs multiplied as they
// are stored, in pairs, by the products an ISA gives (bf16_scores,
// bf16_softmax_p, bf16_pv). K and V are packed once per call into the
// layouts those products read; Q^T once per work item. Without
// FA_HAVE_DPBF16 the step takes no item and every block takes the fp32
// step. Part of cpu_kernels.h.
#if FA_HAVE_DPBF16

/* Pair two rows of 16-bit values: out[x] = lo[x] | hi[x] << 16 (hi NULL =
   zero), n values. */
static void pair_rows(uint32_t *out, const uint16_t *lo, const uint16_t *hi,
                      int n) {
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m512i a =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(lo + x)));
    __m512i b =
        hi ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(hi + x)))
           : _mm512_setzero_si512();
    _mm512_storeu_si512(out + x, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; x < n; x++) out[x] = lo[x] | (hi ? (uint32_t)hi[x] << 16 : 0u);
}

/* Fill kv's shape; the floats it needs (0: no pack, every tile of the
   problem is a small one, which reads K/V rows as stored). */
static size_t kvpack_plan(const fa_problem *p, const fa_plan_data *plan,
                          int small_lanes, cpu_kvpack *kv) {
  memset(kv, 0, sizeof *kv);
  const int rows_max =
      p->a.seqlen_q < plan->block_rows ? p->a.seqlen_q : plan->block_rows;
  if (p->dtype != FA_BF16 || p->descaled || plan->kv_heads_per_tile != 1 ||
      (int64_t)rows_max * plan->pack_group <= small_lanes)
    return 0;
  kv->rows =
      (int)(((int64_t)plan->num_k_blocks * plan->block_k + 31) / 32 * 32);
  kv->ldk2 = (plan->head_dim_pad + 1) / 2;
  kv->ldv2 = plan->head_dim_v_pad;
  kv->items = (int64_t)p->a.batch * p->a.heads_kv * plan->num_k_blocks;
  return (size_t)p->a.batch * p->a.heads_kv * kv->rows *
         ((size_t)kv->ldk2 + (size_t)kv->ldv2 / 2);
}

/* Pack item i: kv block kb of (b, hk), the padding rows with the last. */
static void kvpack_item(const fa_problem *p, const fa_plan_data *plan,
                        const fa_fwd_args *args, const cpu_kvpack *kv,
                        int64_t i) {
  const int nkb = plan->num_k_blocks, bk = plan->block_k;
  const int kb = (int)(i % nkb), hk = (int)(i / nkb % p->a.heads_kv),
            b = (int)(i / nkb / p->a.heads_kv);
  const int sk = fa_seq_len_k(p, b), d = p->a.head_dim, dv = p->a.head_dim_v;
  const int j0 = kb * bk, j1 = kb == nkb - 1 ? kv->rows : j0 + bk;
  const size_t bh = (size_t)b * p->a.heads_kv + hk;
  const uint16_t *kb16 = (const uint16_t *)args->k.data,
                 *vb16 = (const uint16_t *)args->v.data;
  for (int j = j0; j < j1; j++) {
    uint32_t *kr = kv->k + (bh * kv->rows + j) * kv->ldk2;
    memset(kr, 0, sizeof(uint32_t) * (size_t)kv->ldk2);
    if (j < sk)
      memcpy(kr, kb16 + fa_k_offset(p, &args->k, b, j, hk),
             sizeof(uint16_t) * (size_t)d);
  }
  for (int e = j0 / 2; e < j1 / 2; e++) {
    uint32_t *vr = kv->v + (bh * kv->rows / 2 + e) * kv->ldv2;
    if (2 * e >= sk)
      memset(vr, 0, sizeof(uint32_t) * (size_t)dv);
    else
      pair_rows(vr, vb16 + fa_k_offset(p, &args->v, b, 2 * e, hk),
                2 * e + 1 < sk
                    ? vb16 + fa_k_offset(p, &args->v, b, 2 * e + 1, hk)
                    : NULL,
                dv);
  }
}

/* Whether the bf16 step takes the item (bf16 in, K/V packed, a GEMM-path
   tile); if so Q^T is packed as pairs along d into the qt tile (unscaled:
   the scale is applied to S in fp32). */
static int bf16_pack_q(const cpu_fwd_item *it, int small) {
  const fa_problem *p = it->p;
  const cpu_kvpack *kv = it->kvpack;
  if (p->dtype != FA_BF16 || small || !kv->items || kv->fp32) return 0;
  const cpu_tiles *t = it->t;
  const int bq = t->bq, dpairs = (p->a.head_dim + 1) / 2;
  const int pk = it->ln.pk, row0 = it->ln.row0, h0 = it->ln.h0;
  uint32_t *qt2 = (uint32_t *)(it->ws + t->qt);
  uint16_t *row = (uint16_t *)(it->ws + t->k); // two bf16 rows, zero padded
  for (int r = 0; r < bq; r++) {
    memset(row, 0, sizeof(uint16_t) * 2 * (size_t)dpairs);
    if (r < it->nr)
      memcpy(
          row,
          (const uint16_t *)it->args->q.data +
              fa_q_offset(p, &it->args->q, it->b, row0 + r / pk, h0 + r % pk),
          sizeof(uint16_t) * (size_t)p->a.head_dim);
    for (int e = 0; e < dpairs; e++)
      qt2[(size_t)e * bq + r] = row[2 * e] | (uint32_t)row[2 * e + 1] << 16;
  }
  return 1;
}

/* 1 if some pair of the packed V rows of the block (nc keys) holds an inf
   or NaN: both halves' exponents are checked, in the pack, whose pair rows
   are contiguous. */
static int bf16_v_nonfinite(const uint32_t *v2, int64_t ldv2, int nc, int dv) {
  uint32_t bad = 0;
  for (int e = 0; e < (nc + 1) / 2; e++) {
    const uint32_t *vr = v2 + (size_t)e * ldv2;
    for (int d = 0; d < dv; d++) {
      const uint32_t x = vr[d] & 0x7f807f80u; // both exponents
      bad |= (uint32_t)((x & 0xffffu) == 0x7f80u) |
             (uint32_t)((x >> 16) == 0x7f80u);
    }
  }
  return bad != 0;
}

/* One kv block [col0, col0 + nc) of the item: K and V as packed for the
   call (rows col0.. of this kv head); P paired along keys after the
   softmax. */
static void bf16_block(const cpu_fwd_item *it, int col0, int nc) {
  const fa_problem *p = it->p;
  const cpu_tiles *t = it->t;
  const cpu_kvpack *kv = it->kvpack;
  float *ws = it->ws, *o = ws + t->acc, *mu = ws + t->mu;
  const int nr = it->nr, dv = p->a.head_dim_v, bq = t->bq;
  const int dpairs = (p->a.head_dim + 1) / 2;
  const int ldk2 = (t->ld + 1) / 2, ldv2 = t->ldv; // pitches in pairs
  const size_t bh = (size_t)it->b * p->a.heads_kv + it->hk;
  const uint32_t *k2 = kv->k + (bh * kv->rows + col0) * ldk2,
                 *v2 = kv->v + (bh * kv->rows + col0) / 2 * ldv2;
  const cpu_slayout sl_t = {bq, 1, bq};
  bf16_scores(nc, bq, dpairs, k2, ldk2, (uint32_t *)(ws + t->qt), ws + t->s,
              p->a.scale);
  scores_post(p, ws + t->s, &sl_t, &it->ln, it->sq, it->sk, col0, nc, NULL);
  // As in the fp32 step: V with inf or NaN meets masked P = 0 only through
  // visible pairs (fp32 V rows, over the pairs: not needed).
  if (tile_cut(p, &it->ln, it->sq, it->sk, col0, nc) &&
      bf16_v_nonfinite(v2, ldv2, nc, dv)) {
    int *vlo = (int *)(ws + t->vis), *vhi = vlo + bq;
    online_softmax(t, ws, nc);
    rescale_o(o, t->ldv, mu, nr, dv);
    load_k_rows(ws + t->v, t->ldv, p, &it->args->v, it->b, it->hk, col0, nc,
                dv);
    lane_keys(p, &it->ln, it->sq, it->sk, col0, nc, vlo, vhi);
    gemm_visible(nc, 0, nr, vlo, vhi, dv, ws + t->s, 1, bq, ws + t->v, t->ldv,
                 o, t->ldv, 0);
    return;
  }
  // The softmax step with P packed for the product as it is made.
  uint32_t *p2 = (uint32_t *)(ws + t->p2);
  bf16_softmax_p(t, ws, nc, p2);
  rescale_o(o, t->ldv, mu, nr, dv);
  bf16_pv(nr, dv, nc, bq, p2, v2, ldv2, (uint32_t *)(ws + t->v), o, t->ldv);
}

#else // no bf16 pair products: the step takes no item

static size_t kvpack_plan(const fa_problem *p, const fa_plan_data *plan,
                          int small_lanes, cpu_kvpack *kv) {
  memset(kv, 0, sizeof *kv);
  return 0;
}

static void kvpack_item(const fa_problem *p, const fa_plan_data *plan,
                        const fa_fwd_args *args, const cpu_kvpack *kv,
                        int64_t i) {}

static int bf16_pack_q(const cpu_fwd_item *it, int small) { return 0; }

static void bf16_block(const cpu_fwd_item *it, int col0, int nc) {}

#endif
