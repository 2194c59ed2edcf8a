// SPDX-License-Identifier: MIT
// Expectation modes XV_EXPECT_ELEMENTWISE and XV_EXPECT_EXACT: every
// element of o, lse and the gradients within the forward/backward error
// analysis of tests/fuzz/fz_tol.h, NaN exactly where the oracle has one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_tol.h"
#include "xval_run.h"

/* 1 if the kernel that runs s's forward (bwd: backward) has a name that
   contains one of names[0..n) (as fa_plan_describe writes it). */
int xv_kernel_is(xs *s, int bwd, const char *const *names, int n) {
  fa_plan *plan = NULL;
  char text[512] = "";
  fa_status st = bwd ? fa_plan_create_backward(s->ctx, &s->ad, s->q.d, s->k.d,
                                               s->v.d, s->o.d, s->d_o.d,
                                               s->dq.d, s->dk.d, s->dv.d, &plan)
                     : fa_plan_create(s->ctx, &s->ad, s->q.d, s->k.d, s->v.d,
                                      s->o.d, &plan);
  if (st) return 0;
  fa_plan_describe(plan, text, sizeof text);
  fa_plan_destroy(plan);
  for (int i = 0; i < n; i++)
    if (strstr(text, names[i])) return 1;
  return 0;
}

int xv_fwd_kernel_is(xs *s, const char *const *names, int n) {
  return xv_kernel_is(s, 0, names, n);
}

/* 1 if the kernel that runs s's forward (bwd: backward) multiplies whole
   tiles (flashattn.h: a NaN or inf in a V row, and in the backward in a
   q, k, v or dO row, may then reach the rows of its tile that cannot see
   it): the GPU tensor-core kernels. */
static int tile_kernel(xs *s, int bwd) {
  static const char *const tc[] = {"kernel=cuda.sm80.", "kernel=cuda.sm90.",
                                   "kernel=hip.cdna."};
  return xv_kernel_is(s, bwd, tc, 3);
}

/* XV_EXPECT_ELEMENTWISE: o (already extracted to ogot) and lse element by
   element within fz_fwd_tol's bounds; empty rows exact. XV_EXPECT_EXACT:
   also o == the oracle's, element by element. */
int xv_check_elementwise(xs *s, const double *oref, const double *lref,
                         const double *ogot, double *lgot, char *res, size_t rn,
                         msgbuf *m) {
  const xcase *c = s->c;
  const fa_attention *a = &s->a;
  size_t no = (size_t)a->batch * a->seqlen_q * a->heads_q * c->dv;
  size_t nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
  double *otol = malloc(sizeof(double) * no);
  double *ltol = malloc(sizeof(double) * nl);
  if (!otol || !ltol ||
      fz_fwd_tol(a, s->q.t, s->k.t, s->v.t, oref, lref, otol, ltol)) {
    xv_msg(m, "out of memory");
  } else {
    // fz_compare's leak_ok bit 1: a NaN where the oracle's O is finite.
    const int leak = c->gen == XV_GEN_NAN_V && tile_kernel(s, 0) ? 1 : 0;
    size_t bad =
        fz_compare("o", s->dto, oref, ogot, otol, no, leak, stdout, NULL, NULL);
    const double o_margin = fz_last_margin();
    if (bad) xv_msg(m, "o: %zu elements outside the fz_tol.h bounds", bad);
    if (!c->no_lse) {
      xv_extract_lse(s, lgot);
      if (xv_nan_role(c->gen) < 0) xv_check_finite(lref, lgot, nl, "lse", m);
      bad = fz_compare("lse", FA_F32, lref, lgot, ltol, nl, 0, stdout, NULL,
                       NULL);
      if (bad) xv_msg(m, "lse: %zu elements outside the fz_tol.h bounds", bad);
    }
    xv_check_empty_rows(s, ogot, c->no_lse ? NULL : lgot, m);
    size_t differ = 0, first = 0;
    for (size_t i = 0; c->expect == XV_EXPECT_EXACT && i < no; i++)
      if (ogot[i] != oref[i] && differ++ == 0) first = i;
    if (differ)
      xv_msg(m,
             "o: %zu elements differ from the oracle's exact result (first "
             "flat index %zu: got %.9g, expected %.9g)",
             differ, first, ogot[first], oref[first]);
    snprintf(res, rn,
             "every element within the fz_tol.h bounds%s (worst o %.2f of "
             "the bound)",
             c->expect == XV_EXPECT_EXACT ? ", o exact" : "", o_margin);
  }
  free(otol);
  free(ltol);
  return m->count ? R_FAIL : R_PASS;
}

/* XV_EXPECT_ELEMENTWISE for the backward: every gradient element (got,
   extracted) within fz_bwd_tol's bounds around the oracle's (ref), which
   carry the forward's own bounds into dP, D and dS. */
int xv_check_bwd_elementwise(xs *s, double *const ref[3], double *const got[3],
                             const size_t cnt[3], char *res, size_t rn,
                             msgbuf *m) {
  static const char *names[3] = {"dq", "dk", "dv"};
  const xcase *c = s->c;
  const fa_attention *a = &s->a;
  size_t no = (size_t)a->batch * a->seqlen_q * a->heads_q * c->dv;
  size_t nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
  double *oref = malloc(sizeof(double) * no),
         *otol = malloc(sizeof(double) * no);
  double *lref = malloc(sizeof(double) * nl),
         *ltol = malloc(sizeof(double) * nl);
  double *tol[3] = {malloc(sizeof(double) * cnt[0]),
                    malloc(sizeof(double) * cnt[1]),
                    malloc(sizeof(double) * cnt[2])};
  if (!oref || !otol || !lref || !ltol || !tol[0] || !tol[1] || !tol[2] ||
      fa_oracle_forward(a, s->q.t, s->k.t, s->v.t, oref, lref) ||
      fz_fwd_tol(a, s->q.t, s->k.t, s->v.t, oref, lref, otol, ltol) ||
      fz_bwd_tol(a, s->q.t, s->k.t, s->v.t, s->d_o.t, oref, lref, otol, ltol,
                 ref[0], ref[1], ref[2], tol[0], tol[1], tol[2])) {
    xv_msg(m, "out of memory");
  } else {
    // The backward's tile products (P^T dO, dS^T Q, dS K, dO V^T) carry a
    // NaN of q, k, v or dO to every row of the tile on tensor cores:
    // fz_compare's leak_ok bit 1 (a NaN where the oracle's is finite).
    const int leak = xv_nan_role(c->gen) >= 0 && tile_kernel(s, 1) ? 1 : 0;
    double margin[3];
    for (int i = 0; i < 3; i++) {
      // fz_compare checks NaN and inf placement itself, with the rules a
      // plain parity check lacks: an element fz_bwd_tol leaves open (f16
      // near 65504: logits fp32 cannot resolve) may be anything, and one
      // beyond the output dtype's range rounds to its infinity. (A parity
      // check here failed such a case, bwd.edge f16max, at some seeds.)
      size_t bad = fz_compare(names[i], s->dto, ref[i], got[i], tol[i], cnt[i],
                              leak, stdout, NULL, NULL);
      margin[i] = fz_last_margin();
      if (bad)
        xv_msg(m, "%s: %zu elements outside the fz_tol.h bounds", names[i],
               bad);
    }
    // The worst element's share of its bound: a pass near 1 is a warning.
    snprintf(res, rn,
             "every gradient element within the fz_tol.h bounds (worst "
             "dq %.2f dk %.2f dv %.2f of the bound)",
             margin[0], margin[1], margin[2]);
  }
  free(oref);
  free(otol);
  free(lref);
  free(ltol);
  for (int i = 0; i < 3; i++) free(tol[i]);
  return m->count ? R_FAIL : R_PASS;
}
