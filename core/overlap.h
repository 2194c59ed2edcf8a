// SPDX-License-Identifier: MIT
// Whether two strided views of memory share a byte, and the one rule every
// entry point applies with it: no output may share a byte with any other
// party of the call (input, output, index array, slope, sink or lse).
//
// The decision is exact for the affine views the API takes, including the
// interleaved ones whose address ranges meet but whose elements never do
// (q, k, v, o in one [B, S, 4, H, D] buffer; packed [B, S, 3, H, D]
// gradients; merge parts side by side). Deciding it is an integer
// feasibility problem, hard in general: the search below has a step budget,
// and a pair it cannot settle within it is reported as overlapping, with a
// message that says the answer is conservative.
#ifndef FA_CORE_OVERLAP_H
#define FA_CORE_OVERLAP_H

#include <stdint.h>

#include "flashattn.h"

#define FA_VIEW_MAX_DIMS 4

/* Elements at base + sum_i idx[i] * stride[i] * elem_bytes, each
   elem_bytes long, for 0 <= idx[i] < extent[i]. The contiguous dim is one
   of the dims (stride 1). Strides and extents are >= 0; an extent of 0
   makes the view empty. The caller guarantees that the view's byte span
   fits in 62 bits (the tensor checks do). */
typedef struct fa_view {
  uintptr_t base;
  int64_t elem_bytes;
  int ndim;
  int64_t extent[FA_VIEW_MAX_DIMS];
  int64_t stride[FA_VIEW_MAX_DIMS]; // in elements
} fa_view;

typedef enum fa_overlap {
  FA_DISJOINT = 0,        // no byte in common: proven
  FA_OVERLAP = 1,         // some byte in common: proven
  FA_OVERLAP_UNPROVEN = 2 // the step budget ran out before a proof either way
} fa_overlap;

/* Steps the search may take per pair of views; every layout the tests name
   takes a handful. */
#define FA_OVERLAP_BUDGET 4096

/* Whether a and b share a byte, searching at most budget steps. */
fa_overlap fa_views_overlap_budget(const fa_view *a, const fa_view *b,
                                   int64_t budget);

static inline fa_overlap fa_views_overlap(const fa_view *a, const fa_view *b) {
  return fa_views_overlap_budget(a, b, FA_OVERLAP_BUDGET);
}

/* A contiguous array of count elements of elem_bytes each. */
fa_view fa_view_array(const void *ptr, int64_t count, int64_t elem_bytes);

/* One party of a call: what it is called in messages (name, or name[index]
   when index >= 0), its view, and whether the call writes it. alias_class:
   nonzero when an output may be exactly the same view as an input of the
   same class (fa_merge_states in place); any other overlap is refused. */
typedef struct fa_party {
  const char *name;
  int index;
  fa_view view;
  int output;
  int alias_class;
} fa_party;

/* Check every (output, other party) pair of the n parties; FA_OK, or
   FA_ERR_INVALID_ARGUMENT naming both parties and saying whether the
   overlap is proven or the conservative answer. Parties with a NULL base
   are absent and skipped. */
fa_status fa_parties_check(const fa_party *parties, int n);

#endif
