// SPDX-License-Identifier: MIT
// The online-softmax step on a transposed score tile (S^T[key][lane]), and
// the rescale of O it asks for. Part of cpu_kernels.h; a softmax of its
// own layout (the AMX forward item's, amx/amx_softmax.h) ends with
// column_done after its own exp pass.
/* The online-softmax step on S^T ([keys][lanes], pitch bq), column by
   column of FA_VW lanes: column_ref gives lanes [r, r + FA_VW) their new
   maximum over keys [0, nc) (*mx, from the running maxima m) and the
   reference the exps subtract; after the exps, column_done folds their sum
   into l and leaves m and the rescale factor alpha (in mu). online_softmax
   below, and a tile step that packs P as it exponentiates, are these two
   around an exp pass. They are fa_softmax_step's rules (core/softmax.h) on
   FA_VW lanes at once, which the scalar helper cannot be. */
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
