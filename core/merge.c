// SPDX-License-Identifier: MIT
// fa_merge_states: the merge lemma as a public operation (split-KV, cascade
// and ring attention all reduce to it).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtype.h"
#include "error.h"
#include "overlap.h"
#include "registry.h"
#include "softmax.h"

#define INVALID FA_ERR_INVALID_ARGUMENT
#define FA_MERGE_MAX_PARTS 4096

/* A [batch, seq, heads, dim] tensor as a party of the overlap check. */
static fa_party tensor_party(const char *name, int index, const fa_tensor *t,
                             const int64_t n[4], int output) {
  fa_party x = {name,
                index,
                {(uintptr_t)t->data,
                 (int64_t)fa_dtype_size(t->dtype),
                 4,
                 {n[0], n[1], n[2], n[3]},
                 {t->stride_batch, t->stride_seq, t->stride_head, 1}},
                output,
                1};
  return x;
}

static fa_party lse_party(const char *name, int index, const float *lse,
                          int64_t count, int output) {
  fa_party x = {name, index, fa_view_array(lse, count, 4), output, 2};
  return x;
}

/* o may be exactly one of the parts (and lse exactly one part's lse): every
   element is read before it is written. Any other overlap of an output with
   anything is refused. */
static fa_status check_merge_overlaps(int n, const fa_tensor *o_parts,
                                      const float *const *lse_parts,
                                      const int64_t ext[4], const fa_tensor *o,
                                      float *lse) {
  fa_party *parties = malloc(sizeof *parties * (2 * (size_t)n + 2));
  if (!parties)
    return fa_fail(FA_ERR_OUT_OF_MEMORY, "merge overlap check: out of memory");
  const int64_t rows = ext[0] * ext[1] * ext[2];
  int k = 0;
  parties[k++] = tensor_party("o", -1, o, ext, 1);
  parties[k++] = lse_party("lse", -1, lse, rows, 1);
  for (int i = 0; i < n; i++) {
    parties[k++] = tensor_party("o_parts", i, &o_parts[i], ext, 0);
    parties[k++] = lse_party("lse_parts", i, lse_parts[i], rows, 0);
  }
  fa_status s = fa_parties_check(parties, k);
  free(parties);
  return s;
}

fa_status fa_merge_states(fa_context *ctx, int n, const fa_tensor *o_parts,
                          const float *const *lse_parts, int batch, int seqlen,
                          int heads, int head_dim, fa_tensor o, float *lse) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (n < 1 || n > FA_MERGE_MAX_PARTS)
    return fa_fail(INVALID, "n=%d parts must be in [1, %d]", n,
                   FA_MERGE_MAX_PARTS);
  if (!o_parts) return fa_fail(INVALID, "o_parts is NULL");
  if (!lse_parts) return fa_fail(INVALID, "lse_parts is NULL");
  if (batch < 0) return fa_fail(INVALID, "batch=%d must be >= 0", batch);
  if (seqlen < 0) return fa_fail(INVALID, "seqlen=%d must be >= 0", seqlen);
  if (heads < 1) return fa_fail(INVALID, "heads=%d must be >= 1", heads);
  if (head_dim < 1)
    return fa_fail(INVALID, "head_dim=%d must be >= 1", head_dim);
  if (batch == 0 || seqlen == 0) return FA_OK; // nothing to merge or read
  int64_t ext[4] = {batch, seqlen, heads, head_dim};
  char name[32];
  for (int i = 0; i < n; i++) {
    (void)snprintf(name, sizeof name, "o_parts[%d]", i);
    fa_status s = fa_tensor_check(name, &o_parts[i], ext, 0);
    if (s) return s;
    if (!lse_parts[i]) return fa_fail(INVALID, "lse_parts[%d] is NULL", i);
  }
  fa_status s = fa_tensor_check("o", &o, ext, 1);
  if (s) return s;
  if ((s = check_merge_overlaps(n, o_parts, lse_parts, ext, &o, lse))) return s;
  const fa_backend *b = fa_registry_at(ctx->idx[0])->backend;
  return b->merge_states(ctx->state[0], n, o_parts, lse_parts, batch, seqlen,
                         heads, head_dim, o, lse);
}

fa_status fa_host_merge_states(void *state, int n, const fa_tensor *o_parts,
                               const float *const *lse_parts, int batch,
                               int seqlen, int heads, int head_dim, fa_tensor o,
                               float *lse) {
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
          int64_t off =
              b * o.stride_batch + i * o.stride_seq + h * o.stride_head + d;
          fa_store(o.data, o.dtype, off, acc);
        }
        if (lse) lse[li] = out_lse;
      }
  free(part_lse);
  free(w);
  return FA_OK;
}
