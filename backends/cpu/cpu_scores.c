// SPDX-License-Identifier: MIT
#include <math.h>

#include "cpu_internal.h"

void fa_cpu_scores(const fa_problem *p, int h, int sq, int sk, int row0,
                   int nr, int col0, int nc, const float *q, const float *k,
                   int ld_q, float *s, float *grad, int ld_s) {
  const int dim = p->a.head_dim, shift = fa_diag_shift(p, sq, sk);
  const float scale = p->a.scale, cap = p->a.softcap;
  for (int r = 0; r < nr; r++) {
    int i = row0 + r, lo, hi;
    fa_visible_keys(p, i, sq, sk, &lo, &hi);
    const float *qr = q + (size_t)r * ld_q;
    float *sr = s + (size_t)r * ld_s;
    float *gr = grad ? grad + (size_t)r * ld_s : NULL;
    for (int c = 0; c < nc; c++) {
      int j = col0 + c;
      if (j < lo || j >= hi) {
        sr[c] = -INFINITY;
        if (gr) gr[c] = 0.0f;
        continue;
      }
      const float *kc = k + (size_t)c * ld_q;
      float acc = 0.0f;
      for (int d = 0; d < dim; d++) acc += qr[d] * kc[d];
      float x = scale * acc;
      if (gr) {
        float g = scale;
        if (cap > 0.0f) {
          float t = tanhf(x / cap);
          g *= 1.0f - t * t;
        }
        gr[c] = g;
      }
      sr[c] = fa_score_transform(p, x, h, i, j, shift);
    }
  }
}
