// SPDX-License-Identifier: MIT
// The CPU kernels compiled for avx512: only this file gets the ISA's flags.
#define FA_ISA_SUFFIX avx512
#include "simd/simd_avx512.h"
#include "cpu_kernels.h"
