// SPDX-License-Identifier: MIT
// The CPU kernels for AMX-BF16: the avx512bf16 build of the kernel body with
// its bf16 tile products on AMX tiles (amx/amx_step.h), its dense forward
// items (amx/amx_item.h) and its backward blocks (amx/amx_bwd.h) on tiles
// of their own layout: the kernel table's cpu.amxbf16, bf16 only.
#define FA_ISA_SUFFIX amxbf16
#define FA_HAVE_DPBF16 1
#define FA_TILE_STEP_HEADER "amx/amx_step.h"
#define FA_TILE_ITEM_HEADER "amx/amx_item.h" // dense items: S = Q.K^T
#define FA_TILE_BWD_HEADER "amx/amx_bwd.h"   // backward: S^T = K.Q^T
#define FA_INLINE_EXP 1     // next to AMX products, SLEEF's call is the cost
#define FA_PREFETCH_KEYS 16 // decode rows: ~64 lines in flight per core
#include "simd/simd_avx512.h"
#include "cpu_kernels.h"
