// SPDX-License-Identifier: MIT
// Shared pieces of the CPU kernels: per-context state (threads, scratch)
// and tile loaders that widen any storage type to fp32 working tiles.
#ifndef FA_CPU_INTERNAL_H
#define FA_CPU_INTERNAL_H

#include <stddef.h>
#include <string.h>

#include "backend.h"
#include "cpu_work.h"
#include "dtype.h"

typedef struct fa_cpu_state {
  int threads;     // 0: OpenMP default
  void *workspace; // grown on demand, reused across calls
  size_t workspace_bytes;
} fa_cpu_state;

/* Threads a call may use. */
int fa_cpu_threads(const fa_cpu_state *st);

/* Scratch of at least bytes, 64-byte aligned, owned by the context. Valid
   until the next call on the same context. NULL (with the error recorded)
   if it cannot be allocated. */
void *fa_cpu_workspace(fa_cpu_state *st, size_t bytes);

/* Load rows [row0, row0+n) of a q-like tensor (q, o, do) for (b, h) into
   dst[n][ld] as fp32; dims [dim, ld) are zeroed so padded dot products are
   exact. */
static inline void fa_cpu_load_q_rows(float *dst, int ld, const fa_problem *p,
                                      const fa_tensor *t, int b, int h,
                                      int row0, int n, int dim) {
  for (int r = 0; r < n; r++) {
    float *d = dst + (size_t)r * ld;
    fa_load_row(d, t->data, t->dtype, fa_q_offset(p, t, b, row0 + r, h), dim);
    if (ld > dim) memset(d + dim, 0, sizeof(float) * (size_t)(ld - dim));
  }
}

/* Same for key rows [row0, row0+n) of k-like tensors, through the block
   table when paged. Only rows below the sequence's length may be asked. */
static inline void fa_cpu_load_k_rows(float *dst, int ld, const fa_problem *p,
                                      const fa_tensor *t, int b, int h,
                                      int row0, int n, int dim) {
  for (int r = 0; r < n; r++) {
    float *d = dst + (size_t)r * ld;
    fa_load_row(d, t->data, t->dtype, fa_k_offset(p, t, b, row0 + r, h), dim);
    if (ld > dim) memset(d + dim, 0, sizeof(float) * (size_t)(ld - dim));
  }
}

/* The work functions of each row of cpu_isas.def (isa_<name>.c), which
   the driver (cpu_driver.c) runs. */
#define FA_CPU_ISA(name, ...) extern const fa_cpu_isa_ops fa_cpu_ops_##name;
#include "cpu_isas.def"
#undef FA_CPU_ISA

#endif
