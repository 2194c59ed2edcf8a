// SPDX-License-Identifier: MIT
// cuda.generic: the portable generic kernels (backends/gpu/generic_kernels.h)
// compiled for NVIDIA (warp32), with the CUDA module's launcher names
// (cuda_internal.h). The HIP module compiles the same source as
// hip.generic (backends/hip/hip_generic.hip).
#include "compat.h"
#include "cuda_internal.h"
#include "generic_kernels.h"

FA_GPU_GENERIC_LAUNCHERS(fa_cuda_launch)
