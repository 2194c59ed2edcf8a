// SPDX-License-Identifier: MIT
// The CPU kernels compiled for neon: only this file gets the ISA's flags.
#define FA_ISA_SUFFIX neon
#include "simd/simd_neon.h"
#include "cpu_kernels.h"
