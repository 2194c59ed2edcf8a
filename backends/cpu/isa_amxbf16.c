// SPDX-License-Identifier: MIT
// The CPU kernels for AMX-BF16: the avx512bf16 build of the kernel body with
// its bf16 tile products on AMX tiles (amx/amx_step.h), its dense forward
// items (amx/amx_item.h) and its backward blocks (amx/amx_bwd.h) on tiles
// of their own layout: the kernel table's cpu.amxbf16.bf16, bf16 only.
#define FA_ISA_SUFFIX amxbf16
#define FA_HAVE_DPBF16 1
#define FA_TILE_STEP_HEADER "amx/amx_step.h"
#define FA_TILE_ITEM_HEADER "amx/amx_item.h" // dense items: S = Q.K^T
#define FA_TILE_BWD_HEADER "amx/amx_bwd.h"   // backward: S^T = K.Q^T
#define FA_INLINE_EXP 1     // next to AMX products, SLEEF's call is the cost
#define FA_PREFETCH_KEYS 16 // decode rows: ~64 lines in flight per core
#include "simd/simd_avx512.h"
#include "cpu_kernels.h"

#include <time.h> // timespec_get (C11)

#define FA_AMX_RATE_STEPS 2000 // 4 x 16384 FLOPs each: ~0.1 ms

/* FLOP/s of one run of TDPBF16PS on four accumulator tiles fed by two A
   and two B tiles, no loads in the loop (the ceiling fa-peak reports). */
double fa_cpu_amx_probe(float *sink) {
  amx_ready();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  struct timespec t0, t1;
  (void)timespec_get(&t0, TIME_UTC);
  for (int it = 0; it < FA_AMX_RATE_STEPS; it++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float c[256];
  _tile_stored(0, c, 64);
  (void)timespec_get(&t1, TIME_UTC);
  amx_done();
  *sink += c[0];
  const double dt = (double)(t1.tv_sec - t0.tv_sec) +
                    1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return (double)FA_AMX_RATE_STEPS * 4 * 16 * 16 * 32 * 2 / dt;
}
