// SPDX-License-Identifier: MIT
// The CPU attention kernels, written once against the vocabulary of
// simd/simd_<isa>.h and compiled once per ISA (see isa_<isa>.c). Include
// after the vocabulary header and with FA_ISA_SUFFIX defined. The parts, in
// the order each needs the ones before:
//   cpu_gemm.h     vector micro-kernels (C (+)= A.B, masked variant)
//   cpu_tile.h     tiles, lanes, row loads, masks, the score pipeline
//   cpu_softmax.h  the online-softmax step on a transposed tile
//   cpu_rows_fp8.h FP8 K/V rows read in place (the small path)
//   cpu_step.h     the tile-product step: fp32, or bf16 over the ISA's
//                  products (dpbf16, AMX)
//   cpu_layout.h   where each tile lives in a thread's workspace
//   cpu_fold.h     long rows: the state folded by the merge lemma
//   cpu_forward.h  the forward's work item
//   cpu_backward.h the backward's three passes' work items
// and, last, the ISA's table of them (fa_cpu_ops_<isa>) for the driver,
// cpu_driver.c, which is compiled once at baseline flags.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_finalize.h"
#include "cpu_internal.h"
#include "cpu_work.h"
#include "error.h"
#include "softmax.h"

#define FA_CAT2(a, b) a##_##b
#define FA_CAT(a, b) FA_CAT2(a, b)
// Only the ops table carries the ISA in its name (the backend table links
// it); everything else is static to its ISA's translation unit.
#define FA_FN(x) FA_CAT(x, FA_ISA_SUFFIX)

#if defined(__GNUC__)
#define FA_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define FA_ALWAYS_INLINE static inline
#endif

#include "cpu_gemm.h"
#include "cpu_tile.h"
#include "cpu_softmax.h"
#include "cpu_rows_fp8.h"
#include "cpu_step.h"
#include "cpu_layout.h"
#include "cpu_fold.h"
#include "cpu_forward.h"
#include "cpu_backward.h"
/* An ISA may take whole forward items on tiles of its own layout: its
   header defines FA_FWD_ITEM (falling back to fwd_item for the items it
   leaves) and FA_KVPACK_ITEM (the pack its items read). */
#ifdef FA_TILE_ITEM_HEADER
#include FA_TILE_ITEM_HEADER
#endif
#ifndef FA_TILES_LAYOUT
#define FA_TILES_LAYOUT tiles_layout
#endif
#ifndef FA_FWD_ITEM
#define FA_FWD_ITEM fwd_item
#endif
#ifndef FA_KVPACK_ITEM
#define FA_KVPACK_ITEM kvpack_item
#endif

/* The bf16 step's pack where it takes the problem, else the fp32 step's
   (never for bf16 where the ISA has bf16 products: those items are theirs). */
static size_t fwd_kvpack_plan(const fa_problem *p, const fa_plan_data *plan,
                              cpu_kvpack *kv) {
  const size_t n = kvpack_plan(p, plan, FA_SMALL_LANES, kv);
  if (n || (FA_HAVE_DPBF16 && p->dtype == FA_BF16)) return n;
  return f32_kvpack_plan(p, plan, FA_SMALL_LANES, kv);
}

static void fwd_kvpack_item(const fa_problem *p, const fa_plan_data *plan,
                            const fa_fwd_args *args, const cpu_kvpack *kv,
                            int64_t i) {
  if (kv->fp32)
    f32_kvpack_item(p, plan, args, kv, i);
  else
    FA_KVPACK_ITEM(p, plan, args, kv, i);
}

static void fwd_thread_done(void) { FA_TILE_STEP_END(); }

const fa_cpu_isa_ops FA_FN(fa_cpu_ops) = {
    .tiles = FA_TILES_LAYOUT,
    .kvpack_plan = fwd_kvpack_plan,
    .kvpack_item = fwd_kvpack_item,
    .fwd_item = FA_FWD_ITEM,
    .thread_done = fwd_thread_done,
    .bwd_delta = compute_delta,
    .bwd_kv_item = bwd_kv_item,
    .bwd_q_item = bwd_q_item,
#ifdef FA_BWD_PACK_PLAN
    .bwd_pack_plan = FA_BWD_PACK_PLAN,
    .bwd_pack_item = FA_BWD_PACK_ITEM,
#endif
};
