// SPDX-License-Identifier: MIT
// wgmma's ordering and operand descriptors (sm_90a): the fence before a
// warpgroup's first wgmma reads registers, commit and wait of wgmma groups,
// and the shared-memory descriptor of a 128-byte swizzled operand. The
// instructions themselves are generated (sm90/sm90_wgmma.h).
#ifndef FA_CUDA_COMMON_WGMMA_SYNC_CUH
#define FA_CUDA_COMMON_WGMMA_SYNC_CUH

#include <stdint.h>

namespace fa_cuda {

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Wait until at most N committed groups are pending (groups complete in
   order). */
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* wgmma shared-memory descriptor, 128-byte swizzle (layout type 1). */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo,
                                               uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

/* Descriptor d with its start address moved by `bytes` (a multiple of 16;
   the moved address still in shared memory, < 2^18): the 14-bit start
   field takes the add without a carry out of it, so one 32-bit add on the
   low word does what desc_sw128 of the moved address does in four
   (add, mask, shift, or) for every wgmma. The backward's k steps spent
   ~176 M of 1133 M instructions on those (run 53). */
__device__ __forceinline__ uint64_t desc_add(uint64_t d, uint32_t bytes) {
  const uint32_t lo = (uint32_t)d + (bytes >> 4), hi = (uint32_t)(d >> 32);
  return ((uint64_t)hi << 32) | lo;
}

} // namespace fa_cuda

#endif
