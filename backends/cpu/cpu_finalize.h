// SPDX-License-Identifier: MIT
// A forward row's end: the softmax finalized (sinks, the all -inf row) and
// O stored with its LSE. Shared by the kernel body (unsplit items) and the
// driver (the merge of splits).
#ifndef FA_CPU_FINALIZE_H
#define FA_CPU_FINALIZE_H

#include <math.h>

#include "backend.h"
#include "dtype.h"
#include "softmax.h"

static float sink_logit(const fa_problem *p, int h) {
  return p->a.sinks ? p->a.sinks[h] : NAN;
}

/* fa_softmax_finalize for row i of head h, plus the case it cannot tell
   from an empty row: m = -inf although the row sees keys, i.e. every score
   it sees is -inf (an inf input, or a product that overflowed fp32). As in
   the float64 oracle (exp(-inf - (-inf)) = NaN), O and LSE are then NaN,
   never the silent O = 0, LSE = -inf of a row with no key. */
static float finalize(const fa_problem *p, float m, float l, int h, int i,
                      int64_t shift, int sk, float *lse) {
  float sink = sink_logit(p, h);
  // A NaN or +inf sink logit makes every row of its head NaN, rows with no
  // key included (as a NaN ALiBi slope does); a -inf one weighs nothing.
  // (fa_softmax_finalize reads NaN as "no sink".)
  if (p->a.sinks && (isnan(sink) || sink == INFINITY)) {
    *lse = NAN;
    return NAN;
  }
  if (sink == -INFINITY) sink = NAN;
  float inv = fa_softmax_finalize(m, l, sink, lse);
  if (m == -INFINITY && isnan(sink)) {
    int lo, hi;
    fa_visible_keys(p, shift, i, sk, &lo, &hi);
    if (lo < hi) {
      *lse = NAN;
      return NAN;
    }
  }
  return inv;
}

/* o_row is scaled in place, then stored as one row: that conversion loop
   vectorises, an element-wise store testing the dtype each time did not
   (7% of a bf16 forward at d = 128). */
static void store_row(const fa_problem *p, const fa_fwd_args *args, int b,
                      int h, int i, float *o_row, float scale_o, float lse) {
  const fa_tensor *o = &args->o;
  const int dv = p->a.head_dim_v;
  for (int d = 0; d < dv; d++) o_row[d] *= scale_o;
  fa_store_row(o->data, o->dtype, fa_q_offset(p, o, b, i, h), o_row, dv);
  if (args->lse)
    args->lse[((int64_t)b * p->a.heads_q + h) * p->a.seqlen_q + i] = lse;
}
#endif
