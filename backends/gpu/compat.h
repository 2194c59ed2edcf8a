// SPDX-License-Identifier: MIT
// The thin layer that lets one kernel source compile for NVIDIA (nvcc) and
// AMD (HIP clang): which runtime, the wavefront width as a parameter,
// shuffles, and 16-bit float conversions that do not depend on either
// vendor's half/bfloat16 classes (ROCm 5.2 and CUDA 12 disagree on those).
//
// Each vendor gets its own macro, set here from the compiler's own:
//   FA_GPU_HIP   HIP clang compiling for AMD (__HIP_PLATFORM_AMD__)
//   FA_GPU_CUDA  nvcc, or clang compiling CUDA (__CUDACC__ without HIP)
// Code that is vendor-specific tests these, never __CUDACC__ (HIP clang
// defines __CUDACC__ too, for source compatibility) and never
// __HIP_PLATFORM_AMD__ directly.
//
// Only what is truly portable lives here. Matrix-core mainloops (mma.sync,
// wgmma, MFMA) stay in their backends' own files.
#ifndef FA_GPU_COMPAT_H
#define FA_GPU_COMPAT_H

#include <stdint.h>

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#define FA_GPU_HIP 1
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#define FA_GPU_CUDA 1
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#error "backends/gpu/compat.h is for GPU translation units (nvcc or HIP clang)"
#endif

#include "softmax.h" // fa_max_nan (FA_HD)

/* ---- runtime API names ----------------------------------------------------
   The few the kernels' launchers use; host C code (the modules' *.c files)
   calls its own vendor's API directly. */
#ifdef FA_GPU_HIP
typedef hipStream_t fa_gpu_stream;
typedef hipError_t fa_gpu_error;
#define fa_gpu_get_last_error hipGetLastError
#else
typedef cudaStream_t fa_gpu_stream;
typedef cudaError_t fa_gpu_error;
#define fa_gpu_get_last_error cudaGetLastError
#endif

#define FA_GPU_DEVICE __device__ __forceinline__

/* A kernel's by-value parameter struct read in place from the parameter
   space (no per-thread copy when its address is taken): __grid_constant__
   on NVIDIA (sm_70+, CUDA 11.7+); HIP has no equivalent and needs none. */
#ifdef FA_GPU_HIP
#define FA_GPU_GRID_CONSTANT
#else
#define FA_GPU_GRID_CONSTANT __grid_constant__
#endif

/* ---- wavefront width -------------------------------------------------------
   A compile-time parameter of every kernel that uses it: 64 on CDNA
   (gfx90a, gfx942), 32 on NVIDIA. (RDNA's wave32 is not a target: the HIP
   module builds for CDNA only.) */
#ifdef FA_GPU_HIP
#define FA_GPU_WARP 64
#else
#define FA_GPU_WARP 32
#endif

/* ---- shuffles over the whole wavefront --------------------------------------
   Every lane of the wavefront must take part (the kernels keep whole
   wavefronts converged around these). */
#ifdef FA_GPU_HIP
FA_GPU_DEVICE float fa_gpu_shfl_xor(float x, int mask) {
  return __shfl_xor(x, mask, FA_GPU_WARP);
}
FA_GPU_DEVICE float fa_gpu_shfl(float x, int src) {
  return __shfl(x, src, FA_GPU_WARP);
}
FA_GPU_DEVICE int fa_gpu_shfl_int(int x, int src) {
  return __shfl(x, src, FA_GPU_WARP);
}
FA_GPU_DEVICE void fa_gpu_sync_warp(void) {} // a wavefront runs in lockstep
#else
FA_GPU_DEVICE float fa_gpu_shfl_xor(float x, int mask) {
  return __shfl_xor_sync(0xffffffffu, x, mask);
}
FA_GPU_DEVICE float fa_gpu_shfl(float x, int src) {
  return __shfl_sync(0xffffffffu, x, src);
}
FA_GPU_DEVICE int fa_gpu_shfl_int(int x, int src) {
  return __shfl_sync(0xffffffffu, x, src);
}
FA_GPU_DEVICE void fa_gpu_sync_warp(void) { __syncwarp(); }
#endif

FA_GPU_DEVICE int64_t fa_gpu_shfl_i64(int64_t x, int src) {
  int lo = fa_gpu_shfl_int((int)(uint32_t)((uint64_t)x & 0xffffffffu), src);
  int hi = fa_gpu_shfl_int((int)(uint32_t)((uint64_t)x >> 32), src);
  return (int64_t)(((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo);
}

/* NaN-sticky (fa_max_nan): a NaN score must reach the row's LSE. */
FA_GPU_DEVICE float fa_gpu_warp_max(float x) {
  for (int o = FA_GPU_WARP / 2; o > 0; o >>= 1)
    x = fa_max_nan(x, fa_gpu_shfl_xor(x, o));
  return x;
}

FA_GPU_DEVICE float fa_gpu_warp_sum(float x) {
  for (int o = FA_GPU_WARP / 2; o > 0; o >>= 1) x += fa_gpu_shfl_xor(x, o);
  return x;
}

/* ---- 16-bit floats as raw bits
   ----------------------------------------------- Tensors of fp16/bf16 are
   addressed as uint16_t; these convert. bf16 is the upper half of a binary32
   (round to nearest even, NaN kept quiet). */
FA_GPU_DEVICE float fa_gpu_bits_to_f32(uint32_t u) {
  union {
    uint32_t u;
    float f;
  } c;
  c.u = u;
  return c.f;
}
FA_GPU_DEVICE uint32_t fa_gpu_f32_to_bits(float f) {
  union {
    uint32_t u;
    float f;
  } c;
  c.f = f;
  return c.u;
}
FA_GPU_DEVICE float fa_gpu_bf16_to_f32(uint16_t h) {
  return fa_gpu_bits_to_f32((uint32_t)h << 16);
}
FA_GPU_DEVICE uint16_t fa_gpu_f32_to_bf16(float f) {
  uint32_t u = fa_gpu_f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
#ifdef FA_GPU_HIP
FA_GPU_DEVICE float fa_gpu_f16_to_f32(uint16_t h) {
  union {
    uint16_t u;
    _Float16 f;
  } c;
  c.u = h;
  return (float)c.f;
}
FA_GPU_DEVICE uint16_t fa_gpu_f32_to_f16(float f) {
  union {
    uint16_t u;
    _Float16 f;
  } c;
  c.f = (_Float16)f; // round to nearest even
  return c.u;
}
#else
FA_GPU_DEVICE float fa_gpu_f16_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
FA_GPU_DEVICE uint16_t fa_gpu_f32_to_f16(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
#endif

/* Element types as tags: T::load / T::store convert to and from fp32. */
struct fa_gpu_f32 {
  typedef float storage;
  static FA_GPU_DEVICE float load(const float *p) { return *p; }
  static FA_GPU_DEVICE void store(float *p, float x) { *p = x; }
};
struct fa_gpu_f16 {
  typedef uint16_t storage;
  static FA_GPU_DEVICE float load(const uint16_t *p) {
    return fa_gpu_f16_to_f32(*p);
  }
  static FA_GPU_DEVICE void store(uint16_t *p, float x) {
    *p = fa_gpu_f32_to_f16(x);
  }
};
struct fa_gpu_bf16 {
  typedef uint16_t storage;
  static FA_GPU_DEVICE float load(const uint16_t *p) {
    return fa_gpu_bf16_to_f32(*p);
  }
  static FA_GPU_DEVICE void store(uint16_t *p, float x) {
    *p = fa_gpu_f32_to_bf16(x);
  }
};

/* Run a statement with T bound to the tag of fa_dtype `dtype` (0 f32,
   1 f16, 2 bf16). */
#define FA_GPU_DTYPE_SWITCH(dtype, T, ...)                                     \
  switch (dtype) {                                                             \
  case 0: {                                                                    \
    typedef fa_gpu_f32 T;                                                      \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  case 1: {                                                                    \
    typedef fa_gpu_f16 T;                                                      \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  default: {                                                                   \
    typedef fa_gpu_bf16 T;                                                     \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  }

/* Launch on either runtime (kernel<<<>>> works under HIP clang too). An
   empty grid (no keys or no queries: seqlen 0) is not launched, since the
   runtimes reject it. */
#define FA_GPU_LAUNCH(kernel, grid, block, smem, stream, ...)                  \
  do {                                                                         \
    const dim3 fa_grid_ = dim3(grid);                                          \
    if (fa_grid_.x && fa_grid_.y && fa_grid_.z)                                \
      kernel<<<fa_grid_, (block), (smem), (stream)>>>(__VA_ARGS__);            \
  } while (0)

#endif
