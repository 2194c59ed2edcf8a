// SPDX-License-Identifier: MIT
// The CPU kernels compiled for scalar: only this file gets the ISA's flags.
#define FA_ISA_SUFFIX scalar
#include "simd/simd_scalar.h"
#include "cpu_kernels.h"
