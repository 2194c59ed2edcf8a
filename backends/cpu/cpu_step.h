// SPDX-License-Identifier: MIT
// The tile-product step: the seam where an ISA's products plug into the
// forward. For each kv block of a work item that takes the GEMM path, a
// step makes, with Q packed once per item,
//   scores S^T = K.Q^T (then the score pipeline, cpu_tile.h),
//   the online softmax with P packed for the next product,
//   O += P.V (O rescaled first).
// The fp32 step (cpu_step_f32.h) runs on every vocabulary. An ISA with bf16
// pair products (the TU defines FA_HAVE_DPBF16) adds the bf16 step
// (cpu_step_bf16.h: K/V packed once per call, Q^T packed in pairs, the
// non-finite V fallback) over three products: bf16_scores, bf16_softmax_p
// and bf16_pv, from cpu_step_dpbf16.h (vdpbf16ps) unless the TU names
// another header in FA_TILE_STEP_HEADER (amx/amx_step.h). Such a header may
// also define FA_TILE_KEYS (the step reads keys in whole tiles of this
// many: cpu_layout.h rounds K, V, S and P up to them) and
// FA_TILE_STEP_END() (run by each thread after its work items: the tiles
// are free again). Part of cpu_kernels.h.

#ifndef FA_HAVE_DPBF16
#define FA_HAVE_DPBF16 0
#endif

/* One forward work item as its steps see it: the problem and tiles, the
   tile's lanes and kv heads, and how K/V are read. */
typedef struct cpu_fwd_item {
  const fa_problem *p;
  const fa_fwd_args *args;
  const cpu_tiles *t;
  float *ws;                // the thread's tiles
  const cpu_kvpack *kvpack; // the bf16 step's packed K/V
  cpu_lanes ln;
  int b, hk, sq, sk;
  int kend;     // end of the item's keys (its split's last block, or sk)
  int nr;       // valid lanes (rows x packed heads)
  int kvt, lpk; // kv heads the tile spans, lanes per kv head
  int direct;   // fp32 K/V read in place
  int fp8;      // rows read in place (small path, cpu_rows_fp8.h)
  cpu_fp8_rows fr;
} cpu_fwd_item;

#if FA_HAVE_DPBF16
#ifdef FA_TILE_STEP_HEADER
#include FA_TILE_STEP_HEADER
#else
#include "cpu_step_dpbf16.h"
#endif
#endif
#ifndef FA_TILE_KEYS
#define FA_TILE_KEYS 1
#endif
#ifndef FA_TILE_STEP_END
#define FA_TILE_STEP_END() ((void)0)
#endif

#include "cpu_step_f32.h"
#include "cpu_step_bf16.h"
