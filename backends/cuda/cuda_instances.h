// SPDX-License-Identifier: MIT
// The table of an arch's compiled instantiations, for its host glue
// (sm80/sm80_host.h, sm90/sm90_host.h, sm90/sm90_fp8_host.h): rows keyed
// by (dtype, head dim, variant) from the generated instance lists, and the
// lookup a kernel's supports() and launch use. Part of the CUDA module's
// one host translation unit.
#ifndef FA_CUDA_INSTANCES_H
#define FA_CUDA_INSTANCES_H

#include <stddef.h>

#include "flashattn.h"

/* Defines the row type NAME (dtype, dim, variant: what the arch makes of it,
   0 when it has one kind; launch: a launcher of type FN_T) and NAME_find,
   the launcher of a key in a table that ends with a NULL launch, or NULL
   when that instantiation is not compiled in. NAME and FN_T are type
   names, which parentheses would break. */
// NOLINTBEGIN(bugprone-macro-parentheses)
#define FA_CUDA_INSTANCES(NAME, FN_T)                                          \
  typedef struct NAME {                                                        \
    fa_dtype dtype;                                                            \
    int dim, variant;                                                          \
    FN_T launch;                                                               \
  } NAME;                                                                      \
  static FN_T NAME##_find(const NAME *i, fa_dtype dtype, int dim,              \
                          int variant) {                                       \
    for (; i->launch; i++)                                                     \
      if (i->dtype == dtype && i->dim == dim && i->variant == variant)         \
        return i->launch;                                                      \
    return NULL;                                                               \
  }
// NOLINTEND(bugprone-macro-parentheses)

#endif
