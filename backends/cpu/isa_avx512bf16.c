// SPDX-License-Identifier: MIT
// The CPU kernels for AVX-512 with AVX512-BF16: the avx512 vocabulary plus
// vdpbf16ps tile products for bf16 problems (cpu_step_dpbf16.h).
#define FA_ISA_SUFFIX avx512bf16
#define FA_HAVE_DPBF16 1
#define FA_INLINE_EXP 1 // simd/exp_avx512.h: SLEEF's call per 16 is the cost
#include "simd/simd_avx512.h"
#include "cpu_kernels.h"
