// SPDX-License-Identifier: MIT
// The forward's long rows: the running (m, l, O) folded into a compensated
// state every FA_FOLD_KEYS keys. Part of cpu_kernels.h.
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
