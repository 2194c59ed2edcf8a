// SPDX-License-Identifier: MIT
// The cross-validation grid: the default case and the table of groups
// (their cases: xval_grid_fwd.c, xval_grid_bwd.c, xval_grid_api.c,
// xval_fp8.c, xval_stress.c). Shapes are deterministic (a failure names
// its case and reproduces); the data is drawn fresh per run.
//
// Cost model for choosing sizes: the scalar CPU kernel and the float64
// oracle each spend ~b*hq*sq*sk*(d+dv) multiply-adds per forward (about
// 2.5x that per backward), at roughly 0.5-1 GFLOP/s. Long rows (300-2048)
// appear with few heads and batch 1-2, and mostly as decode (sq = 1).
#include <string.h>

#include "tensor.h"
#include "xval.h"
#include "xval_groups.h"

xcase xv_default(void) {
  xcase c;
  memset(&c, 0, sizeof c);
  c.dt = FA_F32;
  c.b = 2;
  c.sq = c.sk = 64;
  c.hq = c.hkv = 2;
  c.d = c.dv = 64;
  c.wl = c.wr = -1;
  c.layout = TS_BSHD;
  return c;
}

typedef xv_list list;

void xv_add(list *l, xcase c) {
  if (l->n < l->max) l->out[l->n] = c;
  l->n++;
}

/* Every group, in the order "--group all" runs them: the one list that
   --list-groups prints and the build makes tests of. */
static const struct {
  const char *name;
  void (*fn)(list *);
} groups[] = {
    {"fwd.dims", xv_fwd_dims},
    {"fwd.lengths", xv_fwd_lengths},
    {"fwd.masks", xv_fwd_masks},
    {"fwd.features", xv_fwd_features},
    {"fwd.gqa", xv_fwd_gqa},
    {"fwd.layout", xv_fwd_layout},
    {"fwd.varlen", xv_fwd_varlen},
    {"fwd.paged", xv_fwd_paged},
    {"fwd.decode", xv_fwd_decode},
    {"fwd.plan", xv_fwd_plan},
    {"bwd.dims", xv_bwd_dims},
    {"bwd.lengths", xv_bwd_lengths},
    {"bwd.masks", xv_bwd_masks},
    {"bwd.features", xv_bwd_features},
    {"bwd.gqa", xv_bwd_gqa},
    {"bwd.varlen", xv_bwd_varlen},
    {"bwd.paged", xv_bwd_paged},
    {"bwd.layout", xv_bwd_layout},
    {"fwd.tensor-core", xv_fwd_tensor_core},
    {"bwd.tensor-core", xv_bwd_tensor_core},
    {"fwd.edge", xv_fwd_edge},
    {"bwd.edge", xv_bwd_edge},
    {"fwd.fp8", xv_fwd_fp8},
    {"fwd.fp8-decode", xv_fwd_fp8_decode},
    {"bwd.fp8", xv_bwd_fp8},
    {"fwd.positions", xv_fwd_positions},
    {"bwd.positions", xv_bwd_positions},
    {"fwd.shard", xv_fwd_shard},
    {"fwd.descale", xv_fwd_descale},
    {"bwd.descale", xv_bwd_descale},
    {"fwd.outdtype", xv_fwd_outdtype},
    {"bwd.outdtype", xv_bwd_outdtype},
    {"bwd.accumulate", xv_bwd_accumulate},
    {"bwd.dsinks", xv_bwd_dsinks},
    {"bwd.plan", xv_bwd_plan},
    {"fwd.stress", xv_fwd_stress},
    {"bwd.stress", xv_bwd_stress},
    {"fwd.longrow", xv_fwd_longrow},
};
#define NGROUPS (int)(sizeof groups / sizeof groups[0])

const char *xv_group_name(int i) {
  return i >= 0 && i < NGROUPS ? groups[i].name : NULL;
}

int xv_group_cases(const char *name, xcase *out, int max) {
  for (int i = 0; i < NGROUPS; i++)
    if (strcmp(groups[i].name, name) == 0) {
      list l = {out, 0, max};
      groups[i].fn(&l);
      return l.n;
    }
  return -1;
}
