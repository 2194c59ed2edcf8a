// SPDX-License-Identifier: MIT
// Input generators (xcase.gen): N(0, 1) data and the edge numerics every
// backend gets (logits of +-1e4, f16 near 65504, equal scores, NaN and inf
// at chosen places).
#include <math.h>

#include "xval_run.h"

/* An input element of generator gen (XV_GEN_*) for tensor role 0 (q),
   1 (k) or 2 (v), row i of rows, before rounding to the dtype. */
static double edge_value(ts_rng *r, int gen, int role, int d, int i, int rows) {
  switch (gen) {
  case XV_GEN_RISING_K:
    if (role != 1) return ts_rng_normal(r);
    return (4 * i >= 3 * rows ? 8.0
            : 2 * i >= rows   ? 3.0
                              : 1.0) *
           ts_rng_normal(r);
  case XV_GEN_LOGITS_POS:
  case XV_GEN_LOGITS_NEG: {
    if (role == 2) return ts_rng_normal(r);
    // Small integers, exact in every dtype: q.k sums d products of about
    // 1e4 / d each, exactly, in fp32.
    double base = floor(sqrt(1e4 / d) + 0.5);
    if (role == 1 && gen == XV_GEN_LOGITS_NEG) base = -base;
    return base + ts_rng_int(r, -1, 1);
  }
  case XV_GEN_F16MAX:
    return (ts_rng_uniform(r) < 0.5 ? -1 : 1) * 65504.0 *
           (1.0 - 0.02 * ts_rng_uniform(r));
  case XV_GEN_EQUAL:
    return role == 0 ? 0.0 : ts_rng_normal(r);
  default:
    return ts_rng_normal(r);
  }
}

/* Every logical element of x from generator gen (role as edge_value's);
   XV_GEN_NORMAL draws N(0, amp^2), rounded to fp32 and then the dtype. */
static void fill_values(xs *s, xt *x, ts_rng *r, int gen, int role,
                        double amp) {
  for (int b = 0; b < s->a.batch; b++)
    for (int i = 0; i < xv_rows_of(s, x->klike, b); i++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = xv_elem_index(s, x, b, i, h);
        for (int c = 0; c < x->dim; c++)
          ts_store(x->t.data, x->t.dtype, o + c,
                   gen == XV_GEN_NORMAL
                       ? (double)(float)(amp * ts_rng_normal(r))
                       : edge_value(r, gen, role, s->c->d, i,
                                    xv_rows_of(s, x->klike, b)));
      }
}

/* Random N(0, amp^2) values (rounded to the dtype) in every logical
   element. */
void xv_fill(xs *s, xt *x, ts_rng *r, double amp) {
  fill_values(s, x, r, XV_GEN_NORMAL, 0, amp);
}

/* The generators that put a non-finite value in one tensor: which one
   (role 3: dO). */
int xv_nan_role(int gen) {
  switch (gen) {
  case XV_GEN_NAN_Q:
  case XV_GEN_INF_Q:
    return 0;
  case XV_GEN_NAN_K:
    return 1;
  case XV_GEN_NAN_V:
    return 2;
  case XV_GEN_NAN_DO:
    return 3;
  default:
    return -1;
  }
}

/* XV_GEN_INF_Q: k's dimension 0 made positive, then q's +-inf (see
   xval.h), so that the sign of every score of those rows is known. */
static void place_inf(xs *s, xt *x, ts_rng *r, int role) {
  if (role == 1) {
    for (int b = 0; b < s->a.batch; b++)
      for (int i = 0; i < xv_rows_of(s, 1, b); i++)
        for (int h = 0; h < x->heads; h++)
          ts_store(x->t.data, x->t.dtype, xv_elem_index(s, x, b, i, h),
                   0.5 + ts_rng_uniform(r));
    return;
  }
  if (role != 0) return;
  const int rows = xv_rows_of(s, 0, 0);
  ts_store(x->t.data, x->t.dtype, xv_elem_index(s, x, 0, rows / 2, 0),
           -INFINITY);
  ts_store(x->t.data, x->t.dtype,
           xv_elem_index(s, x, 0, rows / 3, x->heads - 1), INFINITY);
}

/* One NaN in tensor x (role 0 q, 1 k, 2 v, 3 dO), in sequence 0 and the
   last head, where masks and tiles make some rows see it and some not. */
void xv_place_nan(xs *s, xt *x, int role) {
  int row = role == 0 || role == 3 ? xv_rows_of(s, 0, 0) / 2
                                   : xv_rows_of(s, 1, 0) / 3;
  int64_t o = xv_elem_index(s, x, 0, row, x->heads - 1);
  ts_store(x->t.data, x->t.dtype, o + 3 % x->dim, NAN);
}

/* xv_fill() for the edge generators: every logical element of q, k or v. */
void xv_fill_edge(xs *s, xt *x, ts_rng *r, int gen, int role) {
  if (xv_nan_role(gen) >= 0) {
    xv_fill(s, x, r, 1.0);
    if (gen == XV_GEN_INF_Q)
      place_inf(s, x, r, role);
    else if (role == xv_nan_role(gen))
      xv_place_nan(s, x, role);
    return;
  }
  fill_values(s, x, r, gen, role, 1.0);
}
