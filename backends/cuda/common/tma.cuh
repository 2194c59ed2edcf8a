// SPDX-License-Identifier: MIT
// The Hopper copy engine (sm_90a): mbarriers (init, expected transaction
// bytes, arrive, parity wait), one TMA box into shared memory completing on
// an mbarrier, one box added from shared memory into fp32 global memory,
// and the host side that describes a [batch][rows][heads][D] tensor of
// 16-bit elements (and the fp32 dQ accumulator) to the copy engine as a
// 4-d tensor map with 128-byte swizzle. Every sm90 kernel (forward, backward)
// takes these from here.
#ifndef FA_CUDA_COMMON_TMA_CUH
#define FA_CUDA_COMMON_TMA_CUH

#include <cuda.h> // CUtensorMap and the encoder's types; libcuda is not linked
#include <cuda_runtime.h>
#include <stdint.h>

#include "flashattn.h"
#include "gpu_params.h"

namespace fa_cuda {

__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
}
__device__ __forceinline__ void bar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}

/* One TMA box of a 4-d tensor map into shared memory, completing on bar. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map,
                                         uint32_t bar, int c0, int c1, int c2,
                                         int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::"
      "complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(bar)
      : "memory");
}

/* One box of shared memory added into a 4-d tensor map's fp32 elements by
   the copy engine (elements outside the tensor are skipped), in the
   issuing thread's bulk group: bulk_commit() closes the group,
   bulk_wait_read() waits until its reads of shared memory are done (the
   buffer may be refilled), bulk_wait() until its adds are done. */
__device__ __forceinline__ void tma_reduce_add(const CUtensorMap *map,
                                               uint32_t src, int c0, int c1,
                                               int c2, int c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile."
               "bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType,
                                    cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                                    CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled, found through the runtime (the
   module must load where no driver exists, so libcuda is never linked). */
inline encode_tiled_fn encoder() {
  static encode_tiled_fn fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                         cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return (encode_tiled_fn) nullptr;
    }
    return (encode_tiled_fn)f;
  }();
  return fn;
}

/* A [batch][rows][heads][D] view (element strides) as a 4-d tensor map of
   boxes {64 columns, box_rows rows, 1 head, 1 batch}. Returns 0 when the
   copy engine cannot address it (alignment, stride limits). */
inline int make_map(CUtensorMap *m, const fa_tensor_view &v, int dtype, int d,
                    int64_t rows, int heads, int batch, int box_rows) {
  encode_tiled_fn enc = encoder();
  if (!enc) return 0;
  const int64_t es = 2;
  const int64_t ss = v.ss * es, sh = v.sh * es;
  const int64_t sb = batch > 1 ? v.sb * es : rows * ss; // one-batch: unused
  const int64_t lim = (int64_t)1 << 40;
  if ((uintptr_t)v.data % 16 || ss % 16 || sh % 16 || sb % 16 || ss <= 0 ||
      sh <= 0 || sb <= 0 || ss >= lim || sh >= lim || sb >= lim || rows < 1 ||
      rows > 0xFFFFFFFFll)
    return 0;
  cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads,
                        (cuuint64_t)batch};
  cuuint64_t strides[3] = {(cuuint64_t)ss, (cuuint64_t)sh, (cuuint64_t)sb};
  cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
  cuuint32_t step[4] = {1, 1, 1, 1};
  CUresult r =
      enc(m,
          dtype == FA_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
          4, v.data, dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

/* The backward's fp32 dQ accumulator, [batch][rows][heads][d] dense, as a
   4-d tensor map of boxes {32 columns (128 bytes), box_rows rows, 1, 1}
   with 128-byte swizzle, for tma_reduce_add. Returns 0 where the copy
   engine cannot address it. */
inline int make_acc_map(CUtensorMap *m, float *acc, int d, int64_t rows,
                        int heads, int batch, int box_rows) {
  encode_tiled_fn enc = encoder();
  if (!enc || (uintptr_t)acc % 16 || rows < 1 || rows > 0xFFFFFFFFll) return 0;
  const int64_t sh = (int64_t)d * 4, ss = sh * heads, sb = ss * rows;
  if (sb >= ((int64_t)1 << 40)) return 0;
  cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads,
                        (cuuint64_t)batch};
  cuuint64_t strides[3] = {(cuuint64_t)ss, (cuuint64_t)sh, (cuuint64_t)sb};
  cuuint32_t box[4] = {32, (cuuint32_t)box_rows, 1, 1};
  cuuint32_t step[4] = {1, 1, 1, 1};
  CUresult r = enc(
      m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, acc, dims, strides, box, step,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

} // namespace fa_cuda

#endif
