// SPDX-License-Identifier: MIT
// The CPU kernels compiled for avx2: only this file gets the ISA's flags.
#define FA_ISA_SUFFIX avx2
#define FA_INLINE_EXP 1 // simd/exp_avx2.h: faster than SLEEF's call on Zen 3
#include "simd/simd_avx2.h"
#include "cpu_kernels.h"
