// SPDX-License-Identifier: MIT
// The tensor-core backwards' last step (sm80 and sm90): dQ, accumulated in
// fp32 by reductions from every key block, converted to the output dtype
// and stored for the real query rows only.
#ifndef FA_CUDA_COMMON_DQ_STORE_CUH
#define FA_CUDA_COMMON_DQ_STORE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "common/ptx.cuh"
#include "gpu_params.h"
#include "seq_rows.h"
#include "softmax.h"

namespace fa_cuda {

/* dq = the fp32 accumulator, in the output dtype, rows of real queries. */
template <typename T, int D>
__global__ void __launch_bounds__(256)
    bwd_dq_store(const __grid_constant__ fa_gpu_params p, const float *dq_acc) {
  const int64_t idx = (int64_t)blockIdx.x * 256 + threadIdx.x;
  const int64_t n =
      (int64_t)p.prob.batch * p.prob.seqlen_q * p.prob.heads_q * (D / 2);
  if (idx >= n) return;
  const int d = (int)(idx % (D / 2)) * 2;
  const int h = (int)(idx / (D / 2) % p.prob.heads_q);
  const int i = (int)(idx / (D / 2) / p.prob.heads_q % p.prob.seqlen_q);
  const int b = (int)(idx / (D / 2) / p.prob.heads_q / p.prob.seqlen_q);
  if (i >= fa_seq_rows_q(&p.prob, b)) return;
  const float *src =
      dq_acc + (((int64_t)b * p.prob.seqlen_q + i) * p.prob.heads_q + h) * D +
      d;
  T *dst = (T *)p.dq.data + fa_seq_q_offset(&p.prob, &p.dq, b, i, h) + d;
  *reinterpret_cast<uint32_t *>(dst) = pack2<T>(src[0], src[1]);
}

/* Launches bwd_dq_store over every (row, head, column pair) after the key
   blocks' reductions (an empty problem launches nothing); returns the
   cudaError_t of the launch. */
template <typename T, int D>
int launch_dq_store(const fa_gpu_params *p, const float *dq_acc,
                    cudaStream_t s) {
  const int64_t n =
      (int64_t)p->prob.batch * p->prob.seqlen_q * p->prob.heads_q * (D / 2);
  if (n > 0)
    bwd_dq_store<T, D><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(*p, dq_acc);
  return (int)cudaGetLastError();
}

} // namespace fa_cuda

#endif
