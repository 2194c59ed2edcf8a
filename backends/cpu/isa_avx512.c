// SPDX-License-Identifier: MIT
// The CPU kernels compiled for avx512: only this file gets the ISA's flags.
#define FA_ISA_SUFFIX avx512
#define FA_INLINE_EXP 1 // simd/exp_avx512.h: SLEEF's call per 16 is the cost
#include "simd/simd_avx512.h"
#include "cpu_kernels.h"
