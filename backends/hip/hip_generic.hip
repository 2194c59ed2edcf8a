// SPDX-License-Identifier: MIT
// The portable generic kernels (backends/gpu/generic_kernels.h) compiled for
// CDNA (wave64), with the HIP module's launcher names (hip_internal.h).
#include "compat.h"
#include "generic_kernels.h"
#include "hip_internal.h"

FA_GPU_GENERIC_LAUNCHERS(fa_hip_launch, fa_gpu_merge_part)
