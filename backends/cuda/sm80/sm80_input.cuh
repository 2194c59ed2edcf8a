// SPDX-License-Identifier: MIT
// What the sm80 forward (sm80_fwd.cuh) reads its inputs as: its template
// parameter IN is an input element, and input<IN> says which mma.sync type
// the tiles hold in shared memory and how rows get there.
//
//   __nv_bfloat16, __half  16-bit inputs, copied global -> shared by
//                          cp.async as they are (the kernel's own copies).
//   fp8_e4m3, fp8_e5m2     FP8 codes, decoded to f16 on the way: every
//                          value of both formats is an f16 exactly, and f16
//                          (not bf16) keeps 11 bits of P, the other operand
//                          of P V. The f16 mma.sync path then runs as for
//                          f16 inputs, on the same shared-memory layout.
//
// FP8 rows (fp8_rows below). cp.async copies bytes and cannot convert, so
// FP8 rows go global -> registers (ld.global.nc, 16 codes per load) ->
// decode -> st.shared (two 16-byte chunks of f16). What that costs against
// cp.async: (1) registers: a block's codes are held from load to store,
// BK * D / threads bytes a thread (d128: 16 registers); the kernel stages K
// and then V, so one of them is live at a time; (2) issue slots: the
// decode and the shared stores, which cp.async left to the copy engine;
// (3) latency: the kernel issues the loads of block kb + stages - 1 at the
// top of iteration kb and stores them within it (K after S = Q K^T, V at
// the end): double buffering through registers, hidden by half an
// iteration's math instead of stages - 1 blocks in flight. What it saves:
// half the global bytes of 16-bit K/V.
//
// Tiles whose registers are already full (sm80_tiles.h,
// FA_SM80_FP8_SMEM_STAGED: d128, d192, d256) stage the codes in shared
// memory instead (fp8_rows with SMEM): cp.async of the raw codes, K and V both
// at the top of the iteration (one commit group each), each decoded by the
// thread that copied it once its group is complete (no barrier between),
// K after S and V at the end as above. That costs a raw K and V block of
// shared memory (d128: 16 KB) and a shared load per 16 codes, no
// registers across the math, and V's latency gets the whole iteration.
//
// The decode. sm_89 and newer convert e4m3 pairs in hardware (cvt.rn.f16x2
// .e4m3x2, through cuda_fp8.h), exactly; older targets (this module's
// sm_80 code, and its PTX wherever it is JIT-compiled) use the branch-free
// integer form of backends/gpu/fp8.h (fa_gpu_fp8x4_to_f16x2: 7 integer
// operations per pair), whose values are the codes' times 2^-8: `unit` is
// that factor, which the kernel folds back into the softmax scale (Q and
// K: unit^2) and the output factor (V: 1 / unit), both powers of two, so
// nothing rounds differently. e5m2 is an f16's upper byte on every target
// (one byte permute per pair, unit 1). The gate is __CUDA_ARCH__, so each
// compiled architecture has one path and no run-time branch.
#ifndef FA_CUDA_SM80_INPUT_CUH
#define FA_CUDA_SM80_INPUT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "fp8.h"

namespace fa_sm80 {

/* The FP8 input elements (tags: the kernel never holds one). */
struct fp8_e4m3 {};
struct fp8_e5m2 {};

/* 16-bit inputs: the mma type itself, no decode. */
template <typename IN> struct input {
  typedef IN mma_t;
  static constexpr bool kFP8 = false;
  static __device__ __forceinline__ float unit() { return 1.0f; }
};

/* FP8 inputs: f16 tiles; `unit` is the factor the decoded values carry. */
template <bool E5M2> struct fp8_input {
  typedef __half mma_t;
  static constexpr bool kFP8 = true;
  static __device__ __forceinline__ float unit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return 1.0f;
#else
    return E5M2 ? 1.0f : FA_GPU_E4M3X4_UNIT;
#endif
  }
  /* Four codes (byte 0 first) to two f16x2: lo codes 0, 1; hi 2, 3. */
  static __device__ __forceinline__ void decode4(uint32_t w, uint32_t &lo,
                                                 uint32_t &hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if (!E5M2) {
      const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(
          (__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
      const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(
          (__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
      lo = (uint32_t)a.x | (uint32_t)a.y << 16;
      hi = (uint32_t)b.x | (uint32_t)b.y << 16;
      return;
    }
#endif
    fa_gpu_fp8x4_to_f16x2(w, E5M2, &lo, &hi);
  }
};
template <> struct input<fp8_e4m3> : fp8_input<false> {};
template <> struct input<fp8_e5m2> : fp8_input<true> {};

/* 16 bytes global -> shared; src_bytes 0 writes zeros and reads nothing. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src,
                                           int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint4 ld_shared16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void
st_shared16(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(a),
               "r"(b), "r"(c), "r"(d)
               : "memory");
}

/* 16 codes to two chunks of f16 at shared addresses lo_at, hi_at. */
template <typename IN>
__device__ __forceinline__ void store_decoded(uint32_t lo_at, uint32_t hi_at,
                                              const uint4 &v) {
  uint32_t h[8];
  input<IN>::decode4(v.x, h[0], h[1]);
  input<IN>::decode4(v.y, h[2], h[3]);
  input<IN>::decode4(v.z, h[4], h[5]);
  input<IN>::decode4(v.w, h[6], h[7]);
  st_shared16(lo_at, h[0], h[1], h[2], h[3]);
  st_shared16(hi_at, h[4], h[5], h[6], h[7]);
}

/* ROWS rows of D FP8 codes on their way to f16 tiles: NL 16-code loads per
   thread; load i of thread tid is row idx / (D / 16), codes 16 c .. 16 c +
   15 with c = idx % (D / 16), idx = tid + i * NT (consecutive threads read
   consecutive 16 bytes of a row: coalesced). Staged in registers (r), or
   with SMEM in shared memory (see the header): `raw` is then the shared
   address of ROWS x D bytes, load idx's codes at raw + 16 idx; fetch
   issues cp.async (the caller commits, and waits for that group before
   store, which reads only what this thread copied). */
template <typename IN, int ROWS, int D, int NT, bool SMEM = false>
struct fp8_rows {
  static constexpr int C16 = D / 16, NL = ROWS * C16 / NT;
  static_assert(D % 16 == 0 && (ROWS * C16) % NT == 0, "FP8 tile copy");
  uint4 r[SMEM ? 1 : NL];
  uint32_t raw;

  /* From the codes at g: off(row) is the row's element (= byte) offset, or
     < 0 for a row of zeros (past the sequence, padding lanes, a
     block-table entry outside the pool). */
  template <typename OFF>
  __device__ __forceinline__ void fetch(const uint8_t *g, int tid, OFF off) {
#pragma unroll
    for (int i = 0; i < NL; i++) {
      const int idx = tid + i * NT, row = idx / C16, c = idx % C16;
      const int64_t o = off(row);
      if constexpr (SMEM)
        cp_async16(raw + 16u * (uint32_t)idx, o >= 0 ? g + o + c * 16 : g,
                   o >= 0 ? 16 : 0);
      else
        r[i] = o >= 0 ? __ldg(reinterpret_cast<const uint4 *>(g + o + c * 16))
                      : make_uint4(0u, 0u, 0u, 0u);
    }
  }

  /* Decoded into the f16 rows of layout L at shared address base: codes
     16 c .. 16 c + 7 are chunk 2 c, the next 8 chunk 2 c + 1. */
  template <typename L>
  __device__ __forceinline__ void store(uint32_t base, int tid) const {
#pragma unroll
    for (int i = 0; i < NL; i++) {
      const int idx = tid + i * NT, row = idx / C16, c = idx % C16;
      uint4 v;
      if constexpr (SMEM)
        v = ld_shared16(raw + 16u * (uint32_t)idx);
      else
        v = r[i];
      store_decoded<IN>(base + (uint32_t)L::offset(row, 2 * c) * 2,
                        base + (uint32_t)L::offset(row, 2 * c + 1) * 2, v);
    }
  }
};

} // namespace fa_sm80

#endif
