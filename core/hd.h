// SPDX-License-Identifier: MIT
// FA_HD: declares a core helper callable from GPU device code as well as
// from C, so that a CUDA or HIP kernel calls the core's function rather than
// a copy of it. Empty in C; __host__ __device__ under nvcc and hipcc.
// Use as `static inline FA_HD float f(...)`.
#ifndef FA_CORE_HD_H
#define FA_CORE_HD_H

#if defined(__CUDACC__) || defined(__HIP__)
#define FA_HD __host__ __device__ __attribute__((always_inline))
#else
#define FA_HD
#endif

#endif
