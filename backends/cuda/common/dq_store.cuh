// SPDX-License-Identifier: MIT
// The tensor-core backwards' last step (sm80 and sm90): dQ, accumulated in
// fp32 by reductions from every key block, converted to the output dtype
// and stored for the real query rows only.
#ifndef FA_CUDA_COMMON_DQ_STORE_CUH
#define FA_CUDA_COMMON_DQ_STORE_CUH

#include <stdint.h>

#include "common/ptx.cuh"
#include "gpu_params.h"
#include "gpu_semantics.h"

namespace fa_cuda {

/* dq = the fp32 accumulator, in the output dtype, rows of real queries. */
template <typename T, int D>
__global__ void __launch_bounds__(256)
    bwd_dq_store(const __grid_constant__ fa_gpu_params p, const float *dq_acc) {
  const int64_t idx = (int64_t)blockIdx.x * 256 + threadIdx.x;
  const int64_t n = (int64_t)p.batch * p.seqlen_q * p.heads_q * (D / 2);
  if (idx >= n) return;
  const int d = (int)(idx % (D / 2)) * 2;
  const int h = (int)(idx / (D / 2) % p.heads_q);
  const int i = (int)(idx / (D / 2) / p.heads_q % p.seqlen_q);
  const int b = (int)(idx / (D / 2) / p.heads_q / p.seqlen_q);
  if (i >= fa_gpu_len_q(&p, b)) return;
  const float *src =
      dq_acc + (((int64_t)b * p.seqlen_q + i) * p.heads_q + h) * D + d;
  T *dst = (T *)p.dq.data + fa_gpu_q_offset(&p, &p.dq, b, i, h) + d;
  *reinterpret_cast<uint32_t *>(dst) = pack2<T>(src[0], src[1]);
}

} // namespace fa_cuda

#endif
