// SPDX-License-Identifier: MIT
// fa_merge_states: the merge lemma as a public operation (split-KV, cascade
// and ring attention all reduce to it).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtype.h"
#include "error.h"
#include "registry.h"
#include "softmax.h"

#define INVALID FA_ERR_INVALID_ARGUMENT
#define FA_MERGE_MAX_PARTS 4096

/* Largest element offset of a [batch, seq, heads, dim] view. */
static int64_t tensor_span(const fa_tensor *t, const int64_t n[4]) {
  return (n[0] - 1) * t->stride_batch + (n[1] - 1) * t->stride_seq +
         (n[2] - 1) * t->stride_head + (n[3] - 1);
}

fa_status fa_merge_states(fa_context *ctx, int n, const fa_tensor *o_parts,
                          const float *const *lse_parts, int batch,
                          int seqlen, int heads, int head_dim, fa_tensor o,
                          float *lse) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (n < 1 || n > FA_MERGE_MAX_PARTS)
    return fa_fail(INVALID, "n=%d parts must be in [1, %d]", n,
                   FA_MERGE_MAX_PARTS);
  if (!o_parts) return fa_fail(INVALID, "o_parts is NULL");
  if (!lse_parts) return fa_fail(INVALID, "lse_parts is NULL");
  if (batch < 1) return fa_fail(INVALID, "batch=%d must be >= 1", batch);
  if (seqlen < 1) return fa_fail(INVALID, "seqlen=%d must be >= 1", seqlen);
  if (heads < 1) return fa_fail(INVALID, "heads=%d must be >= 1", heads);
  if (head_dim < 1)
    return fa_fail(INVALID, "head_dim=%d must be >= 1", head_dim);
  int64_t ext[4] = {batch, seqlen, heads, head_dim};
  char name[32];
  for (int i = 0; i < n; i++) {
    (void)snprintf(name, sizeof name, "o_parts[%d]", i);
    fa_status s = fa_tensor_check(name, &o_parts[i], ext, 0);
    if (s) return s;
    if (!lse_parts[i]) return fa_fail(INVALID, "lse_parts[%d] is NULL", i);
  }
  // o may alias a part with the same layout (and lse a part's lse): every
  // element is read before it is written. Any other overlap is refused.
  fa_status s = fa_tensor_check("o", &o, ext, 1);
  if (s) return s;
  const uintptr_t o0 = (uintptr_t)o.data,
                  o1 = o0 + (uintptr_t)(tensor_span(&o, ext) + 1) *
                                (o.dtype == FA_F32 ? 4u : 2u);
  const size_t lse_bytes = (size_t)batch * heads * seqlen * sizeof(float);
  for (int i = 0; i < n; i++) {
    const fa_tensor *t = &o_parts[i];
    uintptr_t p0 = (uintptr_t)t->data,
              p1 = p0 + (uintptr_t)(tensor_span(t, ext) + 1) *
                            (t->dtype == FA_F32 ? 4u : 2u);
    int same = t->data == o.data && t->dtype == o.dtype &&
               t->stride_batch == o.stride_batch &&
               t->stride_seq == o.stride_seq && t->stride_head == o.stride_head;
    if (o0 < p1 && p0 < o1 && !same)
      return fa_fail(INVALID,
                     "o overlaps o_parts[%d] with a different layout (only "
                     "exact aliasing is allowed)",
                     i);
    if (lse) {
      uintptr_t l0 = (uintptr_t)lse, l1 = l0 + lse_bytes,
                q0 = (uintptr_t)lse_parts[i], q1 = q0 + lse_bytes;
      if (l0 < q1 && q0 < l1 && lse != lse_parts[i])
        return fa_fail(INVALID,
                       "lse overlaps lse_parts[%d] at another offset (only "
                       "exact aliasing is allowed)",
                       i);
      if (l0 < p1 && p0 < l1)
        return fa_fail(INVALID, "lse overlaps o_parts[%d]", i);
    }
  }
  if (lse && (uintptr_t)lse < o1 && o0 < (uintptr_t)lse + lse_bytes)
    return fa_fail(INVALID, "lse overlaps o");
  const fa_backend *b = fa_registry_at(ctx->idx[0])->backend;
  return b->merge_states(ctx->state[0], n, o_parts, lse_parts, batch, seqlen,
                         heads, head_dim, o, lse);
}

fa_status fa_host_merge_states(void *state, int n, const fa_tensor *o_parts,
                               const float *const *lse_parts, int batch,
                               int seqlen, int heads, int head_dim,
                               fa_tensor o, float *lse) {
  float *w = malloc(sizeof(float) * (size_t)n);
  if (!w) return fa_fail(FA_ERR_OUT_OF_MEMORY, "merge weights: out of memory");
  float *part_lse = malloc(sizeof(float) * (size_t)n);
  if (!part_lse) {
    free(w);
    return fa_fail(FA_ERR_OUT_OF_MEMORY, "merge weights: out of memory");
  }
  for (int b = 0; b < batch; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < seqlen; i++) {
        int64_t li = ((int64_t)b * heads + h) * seqlen + i;
        for (int p = 0; p < n; p++) part_lse[p] = lse_parts[p][li];
        float out_lse = fa_lse_merge_weights(n, part_lse, w);
        for (int d = 0; d < head_dim; d++) {
          float acc = 0.0f;
          for (int p = 0; p < n; p++) {
            if (w[p] == 0.0f) continue; // a part with no keys: never read
            const fa_tensor *t = &o_parts[p];
            int64_t off = b * t->stride_batch + i * t->stride_seq +
                          h * t->stride_head + d;
            acc += w[p] * fa_load(t->data, t->dtype, off);
          }
          int64_t off = b * o.stride_batch + i * o.stride_seq +
                        h * o.stride_head + d;
          fa_store(o.data, o.dtype, off, acc);
        }
        if (lse) lse[li] = out_lse;
      }
  free(part_lse);
  free(w);
  return FA_OK;
}
