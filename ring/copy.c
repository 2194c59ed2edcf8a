// SPDX-License-Identifier: MIT
// Element copies and merges through the public API only, so the ring runs
// unchanged on any context's memory space: a dtype conversion or a strided
// copy is fa_merge_states with one part of LSE 0 (its weight is exactly 1,
// so every value, NaN and inf included, is copied and rounded once).
#include <string.h>

#include "ring_internal.h"

fa_status ring_convert(fa_ring *r, int side, int heads, int dim, fa_tensor src,
                       fa_tensor dst) {
  const int64_t rows = side == 'q' ? r->q.rows : r->k[r->rank].rows;
  if (rows == 0) return FA_OK; // this rank holds no rows of that side
  const int nb = r->varlen ? 1 : r->g.batch;
  const float *lse = r->zero_lse;
  fa_status s = fa_merge_states(r->ctx, 1, &src, &lse, nb, (int)rows, heads,
                                dim, dst, NULL);
  if (s) return ring_fail(s, "copy: %s", fa_last_error());
  return FA_OK;
}

fa_status ring_fill_zero(fa_ring *r, void *dst, size_t bytes) {
  if (bytes == 0) return FA_OK;
  fa_status s = fa_copy_to_device(r->ctx, dst, r->zeros, bytes);
  if (s) return ring_fail(s, "zero fill: %s", fa_last_error());
  return FA_OK;
}

// Dense parts merge in one call. A varlen part's LSE is [batch][heads]
// [maxlen] while its rows are packed, so each (sequence, head) merges on
// its own: rows at cu[b], LSE at (b * heads + h) * maxlen.
fa_status ring_merge_part(fa_ring *r, const ring_part *qp, fa_tensor acc,
                          float *lse_acc, fa_tensor part, float *lse_part) {
  fa_status s = FA_OK;
  if (!r->varlen) {
    fa_tensor parts[2] = {acc, part};
    const float *lses[2] = {lse_acc, lse_part};
    s = fa_merge_states(r->ctx, 2, parts, lses, r->g.batch, qp->maxlen, r->hq,
                        r->dv, acc, lse_acc);
  } else {
    for (int b = 0; b < r->g.batch && !s; b++) {
      if (qp->len[b] == 0) continue;
      for (int h = 0; h < r->hq && !s; h++) {
        const size_t off =
            (size_t)(qp->cu[b] * acc.stride_seq + h * acc.stride_head);
        fa_tensor parts[2] = {acc, part};
        parts[0].data = (float *)acc.data + off;
        parts[1].data = (float *)part.data + off;
        const int64_t l = ((int64_t)b * r->hq + h) * qp->maxlen;
        const float *lses[2] = {lse_acc + l, lse_part + l};
        s = fa_merge_states(r->ctx, 2, parts, lses, 1, (int)qp->len[b], 1,
                            r->dv, parts[0], lse_acc + l);
      }
    }
  }
  if (s) return ring_fail(s, "merge: %s", fa_last_error());
  return FA_OK;
}
