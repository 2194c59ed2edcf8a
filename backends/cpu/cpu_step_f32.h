// SPDX-License-Identifier: MIT
// The fp32 tile-product step (the default of cpu_step.h): K and V widened
// to fp32 tiles (or read in place), S^T and O += P.V as GEMMs on the
// vocabulary's vectors. Part of cpu_kernels.h.

/* Q^T for the fp32 step: the tile's q rows, scaled, transposed into the qt
   tile (the K tile doubles as the transposing load's row buffer). */
static void f32_pack_q(const cpu_fwd_item *it) {
  const cpu_tiles *t = it->t;
  load_q_transposed(it->ws + t->qt, t->bq, it->ws + t->k, it->p, &it->args->q,
                    it->b, &it->ln, it->p->a.head_dim, it->p->a.scale);
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
  if (it->direct) {
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
  scores(p, t, ws, k, ldk, &it->ln, it->sq, it->sk, col0, nc, NULL);
  online_softmax(t, ws, nc);
  rescale_o(o, t->ldv, mu, nr, dv);
  // O[r][:] += sum_c P^T[c][r] V[c][:]. Masked entries of P are 0, and
  // 0 * NaN = NaN: where the tile meets a mask and V holds inf or NaN
  // (a scan of nc x dv, 1/bq of the product), only visible pairs count.
  if (tile_cut(p, &it->ln, it->sq, it->sk, col0, nc) &&
      any_nonfinite(v, ldv, nc, dv)) {
    int *vlo = (int *)(ws + t->vis), *vhi = vlo + bq;
    lane_keys(p, &it->ln, it->sq, it->sk, col0, nc, vlo, vhi);
    gemm_visible(nc, 0, nr, vlo, vhi, dv, ws + t->s, 1, bq, v, ldv, o, t->ldv,
                 0);
  } else {
    gemm(nr, dv, nc, ws + t->s, 1, bq, v, ldv, o, t->ldv, 1);
  }
}
