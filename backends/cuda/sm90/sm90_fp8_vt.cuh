// SPDX-License-Identifier: MIT
// The sm90 FP8 forward's pre-pass: V (FP8 codes, [rows][heads_kv][D]) into
// V^T, [batch][heads_kv][D][keys], in the plan's workspace, so that P V can
// read V as a K-major operand (wgmma has no transpose for 8-bit types).
//
// Why a pre-pass and not a transpose in shared memory after each TMA load:
// the pass reads V once and writes it once (at s = 16k, d128, 16 kv heads:
// 64 MB, ~25 us at HBM speed, against ~2 ms of attention), and the
// mainloop then loads V^T with the TMA exactly as it loads K, with no
// extra warps, barriers or shared-memory round trip on the critical path.
//
// Layout of V^T: per (sequence b, kv head), D rows of `keys_pad` codes
// (seqlen_k rounded up to the kernel's key block), so that every sequence,
// varlen included, starts at key 0 of its own slab and a block's TMA box
// never reaches another sequence. Keys at or past the sequence's length are
// written as zeros: P there is 0 and 0 x a NaN code would leak.
//
// Within each 32-key group the keys are stored permuted (fp8_vt_key): the
// order in which a thread holds P after the S = Q K^T accumulator layout,
// so P needs no shuffle between threads to become wgmma's register A
// fragment (see sm90_fp8_fwd.cuh, pack_p). The permutation is a relabelling
// of the summation index of P V, applied to P and V alike.
#ifndef FA_CUDA_SM90_FP8_VT_CUH
#define FA_CUDA_SM90_FP8_VT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu_params.h"
#include "seq_rows.h"
#include "softmax.h"

namespace fa_sm90_fp8 {

constexpr int kVtKeys = 128; // keys per pre-pass block (= the key block)

/* The key stored at position c (0..31) of a 32-key group of V^T. Thread t4
   of a quad holds, of the A fragment's columns 4 t4 .. 4 t4 + 3, the score
   accumulators of keys 2 t4, 2 t4 + 1, 8 + 2 t4, 9 + 2 t4 (n8 chunks 0 and
   1), and of columns 16 + 4 t4 .. the same keys + 16 (chunks 2 and 3). */
__host__ __device__ constexpr int fp8_vt_key(int c) {
  return (c & 16) | (((c >> 2) & 3) << 1) | (c & 1) | (((c >> 1) & 1) << 3);
}

/* Grid (keys_pad / kVtKeys, heads_kv, batch), 256 threads; D <= 128. */
template <int D>
__global__ void __launch_bounds__(256)
    vt_transpose(const __grid_constant__ fa_gpu_params p, uint8_t *vt,
                 int64_t keys_pad) {
  __shared__ __align__(16) uint8_t tile[kVtKeys][D];
  const int b = blockIdx.z, hk = blockIdx.y, j0 = blockIdx.x * kVtKeys;
  const int sk = fa_seq_rows_k(&p.prob, b);
  const uint8_t *v = (const uint8_t *)p.v.data;
  constexpr int CH = D / 16; // 16-byte chunks of a row
  for (int c = threadIdx.x; c < kVtKeys * CH; c += blockDim.x) {
    const int r = c / CH, k = c % CH, j = j0 + r;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (j < sk) {
      const int64_t off = fa_seq_k_offset(&p.prob, &p.v, b, j, hk);
      if (off >= 0) x = *reinterpret_cast<const uint4 *>(v + off + 16 * k);
    }
    *reinterpret_cast<uint4 *>(&tile[r][16 * k]) = x;
  }
  __syncthreads();
  uint8_t *out = vt + (((int64_t)b * p.prob.heads_kv + hk) * D) * keys_pad + j0;
  constexpr int OC = kVtKeys / 16; // 16-byte chunks of an output row
  for (int c = threadIdx.x; c < D * OC; c += blockDim.x) {
    const int d = c / OC, k0 = (c % OC) * 16;
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      uint32_t x = 0;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int pos = k0 + 4 * q + e;
        const int key = (pos & ~31) | fp8_vt_key(pos & 31);
        x |= (uint32_t)tile[key][d] << (8 * e);
      }
      w[q] = x;
    }
    *reinterpret_cast<uint4 *>(out + (int64_t)d * keys_pad + k0) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

} // namespace fa_sm90_fp8

#endif
