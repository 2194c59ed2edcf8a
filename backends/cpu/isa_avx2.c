// SPDX-License-Identifier: MIT
// The CPU kernels compiled for avx2: only this file gets the ISA's flags.
#define FA_ISA_SUFFIX avx2
#include "simd/simd_avx2.h"
#include "cpu_kernels.h"
