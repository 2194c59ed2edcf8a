// SPDX-License-Identifier: MIT
// The CPU kernels for AMX-BF16: the avx512bf16 build of the kernel body with
// its bf16 tile products on AMX tiles (amx/amx_step.h). Only the bf16
// forward is offered (the kernel table's cpu.amxbf16).
#define FA_ISA_SUFFIX amxbf16
#define FA_HAVE_DPBF16 1
#define FA_TILE_STEP_HEADER "amx/amx_step.h"
#define FA_TILE_ITEM_HEADER "amx/amx_item.h" // dense items: S = Q.K^T
#define FA_INLINE_EXP 1     // next to AMX products, SLEEF's call is the cost
#define FA_PREFETCH_KEYS 16 // decode rows: ~64 lines in flight per core
#include "simd/simd_avx512.h"
#include "cpu_kernels.h"
