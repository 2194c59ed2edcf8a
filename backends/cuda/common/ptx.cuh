// SPDX-License-Identifier: MIT
// PTX wrappers every CUDA tensor-core kernel uses (sm_80 and newer): shared
// addresses, the exp2 unit, packing two fp32 values into a 16-bit pair, and
// register pins. The sm80 and sm90 kernels (and any new arch) include this,
// never another arch's kernel, to get them.
#ifndef FA_CUDA_COMMON_PTX_CUH
#define FA_CUDA_COMMON_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fa_cuda {

constexpr float kLog2e = 1.4426950408889634f; // log2(e)
constexpr float kLn2 = 0.6931471805599453f;   // ln(2) = 1 / log2(e)

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 2^x (MUFU.EX2); 2^-inf = +0. */
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* lo -> the lower 16 bits (the lower column index), hi -> the upper. */
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Pins registers at this point of the program: the compiler may not move
   their reads or writes across it (wgmma reads and writes them behind its
   back between issue and wait). */
template <int N> __device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+r"(r[i][e])::"memory");
}

} // namespace fa_cuda

#endif
