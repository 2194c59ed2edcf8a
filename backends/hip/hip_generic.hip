// SPDX-License-Identifier: MIT
// hip.generic: the portable generic kernels (backends/gpu/generic_kernels.h)
// compiled for CDNA (wave64), with the HIP module's launcher names
// (hip_internal.h). The CUDA module compiles the same source as
// cuda.generic (backends/cuda/kernels_generic.cu).
#include "compat.h"
#include "generic_kernels.h"
#include "hip_internal.h"

FA_GPU_GENERIC_LAUNCHERS(fa_hip_launch)
