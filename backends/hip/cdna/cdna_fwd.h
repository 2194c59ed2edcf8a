// SPDX-License-Identifier: MIT
// The CDNA forward mainloop (MI200 gfx90a, MI300 gfx942): wave64, K/V tiles
// in LDS, v_mfma_f32_32x32x8{bf16_1k,f16} for both products, online softmax
// in fp32. Instantiated per (dtype, head dim) by cdna_fwd_inst.hip.in.
//
// Shape of a workgroup: 4 wavefronts x 32 query lanes = 128 lanes (the
// plan's block_q <= 128; lanes are (row, head) pairs, head fastest, so GQA
// packing is free). Each wavefront computes the transposed products
//     S^T (32 keys x 32 queries) = K (32 x D) . Q^T (D x 32)
//     O^T (D x 32 queries)      += V^T (D x 32 keys) . P^T (32 x 32)
// With this orientation (cdna_mfma_layout.h):
//  - an accumulator column is one query, so every lane owns exactly one
//    query row: the mask, softcap, ALiBi and the row statistics (m, l) are
//    per lane, and a row reduction is the lane's 16 registers plus one
//    exchange with lane ^ 32 (the other half of the keys);
//  - accumulator registers 4t..4t+3 of S^T are the B operand of step t of
//    the second product as they stand (fa_mfma32_c_as_b): P never goes
//    through LDS.
// Q stays in registers (D/2 16-bit values a lane); K and V tiles of kBN keys
// are staged in LDS by the whole workgroup, reading only keys below the
// sequence's real length (the rest of the tile is zero) through the block
// table when paged. Every feature of the problem is handled here: masks and
// windows (per lane, the core's rules, core/flat_problem.h), softcap, ALiBi,
// sinks (at finalisation), varlen, seqused_k, paged KV, split-KV partials
// (combined by the generic combine kernel), LSE.
//
// Not verified on hardware: no AMD GPU was available when this was written.
// CI compiles it for gfx90a and gfx942; tests/hip checks the fragment maps
// and the data flow on the CPU.
#ifndef FA_CDNA_FWD_H
#define FA_CDNA_FWD_H

#include "cdna_mfma_layout.h"
#include "compat.h"
#include "gpu_params.h"
#include "seq_rows.h"
#include "softmax.h"

namespace fa_cdna {

constexpr int kWaves = 4;
constexpr int kThreads = kWaves * FA_GPU_WARP; // 256
constexpr int kLanesQ = 32;                    // queries per wavefront

typedef short v4s __attribute__((ext_vector_type(4)));
typedef _Float16 v4h __attribute__((ext_vector_type(4)));
typedef float v16f __attribute__((ext_vector_type(16)));

/* D (32x32, fp32) += A (32x8) B (8x32), 16-bit inputs as raw bits. */
template <typename T> struct mfma;
template <> struct mfma<fa_gpu_bf16> {
  static FA_GPU_DEVICE v16f run(v4s a, v4s b, v16f c) {
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
  }
  static FA_GPU_DEVICE short bits(float x) {
    return (short)fa_gpu_f32_to_bf16(x);
  }
};
template <> struct mfma<fa_gpu_f16> {
  static FA_GPU_DEVICE v16f run(v4s a, v4s b, v16f c) {
    return __builtin_amdgcn_mfma_f32_32x32x8f16(
        __builtin_bit_cast(v4h, a), __builtin_bit_cast(v4h, b), c, 0, 0, 0);
  }
  static FA_GPU_DEVICE short bits(float x) {
    return (short)fa_gpu_f32_to_f16(x);
  }
};

/* Keys per LDS tile: K (padded rows) + V tiles stay near 32 KB. */
template <int D> struct tile {
  static constexpr int kBN = D <= 128 ? 64 : 32;
  static constexpr int kPitchK = D + 4; // 8-byte pad: A-operand reads of 32
                                        // rows fall in different banks
  static constexpr int kPitchV = D;
  static constexpr int kLdsBytes = kBN * (kPitchK + kPitchV) * 2;
};

/* Copy kBN rows (keys j0 ..) of K and V into LDS; rows at or past `jend`
   become zero and are never read from memory. 16-byte global loads (the
   host checked alignment), 8-byte LDS stores. */
template <int D>
FA_GPU_DEVICE void stage_kv(const fa_gpu_params &p, int b, int hk, int j0,
                            int jend, uint16_t *ks, uint16_t *vs) {
  typedef tile<D> TL;
  constexpr int chunks = D / 8; // 16-byte chunks a row
  const uint16_t *k = (const uint16_t *)p.k.data;
  const uint16_t *v = (const uint16_t *)p.v.data;
  for (int idx = threadIdx.x; idx < TL::kBN * chunks; idx += kThreads) {
    const int row = idx / chunks, c = (idx % chunks) * 8;
    const int j = j0 + row;
    uint4 kx = {0, 0, 0, 0}, vx = {0, 0, 0, 0};
    // A block-table entry outside the pool (offset -1) stays zeros.
    const int64_t ko = j < jend ? fa_seq_k_offset(&p.prob, &p.k, b, j, hk) : -1;
    if (ko >= 0) {
      kx = *(const uint4 *)(k + ko + c);
      vx = *(const uint4 *)(v + fa_seq_k_offset(&p.prob, &p.v, b, j, hk) + c);
    }
    uint2 *kd = (uint2 *)(ks + row * TL::kPitchK + c);
    uint2 *vd = (uint2 *)(vs + row * TL::kPitchV + c);
    kd[0] = make_uint2(kx.x, kx.y);
    kd[1] = make_uint2(kx.z, kx.w);
    vd[0] = make_uint2(vx.x, vx.y);
    vd[1] = make_uint2(vx.z, vx.w);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) fwd(const fa_gpu_params p) {
  typedef tile<D> TL;
  constexpr int kSteps = D / FA_MFMA32_K; // 8-deep steps over the head dim
  constexpr int kTilesV = D / 32;         // 32-row tiles of O^T
  __shared__ uint16_t ks[TL::kBN * TL::kPitchK];
  __shared__ uint16_t vs[TL::kBN * TL::kPitchV];

  const int64_t w = blockIdx.x;
  int b, h0, qb, split;
  fa_flat_work_item(&p.prob, &p.plan, w, &b, &h0, &qb, &split);
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  const int row0 = qb * p.plan.block_rows, pack = p.plan.pack_group;
  if (row0 >= sq) return; // the whole workgroup: before any barrier
  const int lanes = min(p.plan.block_rows, sq - row0) * pack;
  const int hk = h0 / p.prob.group;
  const int wave = threadIdx.x / FA_GPU_WARP, lane = threadIdx.x % FA_GPU_WARP;
  const int col = lane % 32, half = lane / 32;

  // This lane's query: tile lane r = (row, head), head fastest.
  const int r = wave * kLanesQ + col;
  const int active = r < lanes;
  const int i = row0 + (active ? r / pack : 0),
            h = h0 + (active ? r % pack : 0);
  const int shift = fa_flat_shift(&p.prob, sq, sk);
  int lo = 0, hi = 0;
  if (active) fa_flat_visible(&p.prob, i, sq, sk, &lo, &hi);

  // Keys of this work item: the plan's kv blocks, this split's share.
  int kb0, kb1, s0, s1;
  fa_flat_kv_blocks(&p.prob, p.plan.block_rows, p.plan.block_k, sq, sk, qb,
                    &kb0, &kb1);
  fa_split_range(kb0, kb1, p.plan.num_splits, split, &s0, &s1);
  const int jbeg = s0 * p.plan.block_k;
  const int jend = min(s1 * p.plan.block_k, sk);

  // Q^T as B operands: step t, item v = Q[i][8t + 4*half + v].
  v4s qf[kSteps];
  {
    const uint16_t *q = (const uint16_t *)p.q.data;
    const int64_t qo = active ? fa_seq_q_offset(&p.prob, &p.q, b, i, h) : 0;
#pragma unroll
    for (int t = 0; t < kSteps; t++) {
      int kk, jj;
      fa_mfma32_b(lane, 0, &kk, &jj);
      v4s x = {0, 0, 0, 0};
      if (active) x = *(const v4s *)(q + qo + FA_MFMA32_K * t + kk);
      qf[t] = x;
    }
  }

  v16f o[kTilesV];
#pragma unroll
  for (int u = 0; u < kTilesV; u++)
#pragma unroll
    for (int x = 0; x < 16; x++) o[u][x] = 0.0f;
  float m = -INFINITY, l = 0.0f; // identical in lanes col and col + 32

  for (int j0 = jbeg; j0 < jend; j0 += TL::kBN) {
    __syncthreads(); // the previous tile is consumed
    stage_kv<D>(p, b, hk, j0, jend, ks, vs);
    __syncthreads();
#pragma unroll
    for (int n = 0; n < TL::kBN / 32; n++) {
      if (j0 + 32 * n >= jend) break; // uniform across the workgroup
      // S^T = K Q^T over the head dim. A item v: K[32n + col][8t + 4*half+v].
      v16f s;
#pragma unroll
      for (int x = 0; x < 16; x++) s[x] = 0.0f;
#pragma unroll
      for (int t = 0; t < kSteps; t++) {
        int ai, ak;
        fa_mfma32_a(lane, 0, &ai, &ak);
        const v4s a = *(const v4s *)(ks + (32 * n + ai) * TL::kPitchK +
                                     FA_MFMA32_K * t + ak);
        s = mfma<T>::run(a, qf[t], s);
      }
      // Scores of this lane's query: scale, softcap, ALiBi, mask.
      float x[16], mloc = -INFINITY;
#pragma unroll
      for (int rr = 0; rr < 16; rr++) {
        int key, qq;
        fa_mfma32_c(lane, rr, &key, &qq);
        const int j = j0 + 32 * n + key;
        x[rr] = j >= lo && j < hi && j < jend
                    ? fa_flat_transform(&p.prob, p.prob.scale * s[rr], h, i, j,
                                        shift)
                    : -INFINITY;
        mloc = fa_max_nan(mloc, x[rr]);
      }
      // The core's step (fa_softmax_step, natural base): max, rescale,
      // exp, sum; an all-masked block leaves the state unchanged.
      mloc = fa_max_nan(mloc, fa_gpu_shfl_xor(mloc, 32));
      float ref, lsum = 0.0f;
      const float alpha = expf(fa_softmax_step(&m, mloc, 1.0f, &ref));
#pragma unroll
      for (int rr = 0; rr < 16; rr++) {
        x[rr] = expf(fa_softmax_exponent(x[rr], 1.0f, ref)); // masked: 0
        lsum += x[rr];
      }
      lsum += fa_gpu_shfl_xor(lsum, 32);
      l = l * alpha + lsum;
#pragma unroll
      for (int u = 0; u < kTilesV; u++)
#pragma unroll
        for (int e = 0; e < 16; e++) o[u][e] *= alpha;
          // O^T += V^T P^T: B operand of step t = P registers 4t..4t+3.
#pragma unroll
      for (int t = 0; t < 4; t++) {
        v4s pb;
#pragma unroll
        for (int v = 0; v < 4; v++)
          pb[v] = mfma<T>::bits(x[fa_mfma32_c_as_b(t, v)]);
#pragma unroll
        for (int u = 0; u < kTilesV; u++) {
          // A item v: V^T[32u + col][8t + 4*half + v] = V[key][dv].
          v4s a;
#pragma unroll
          for (int v = 0; v < 4; v++) {
            int dv, kk;
            fa_mfma32_a(lane, v, &dv, &kk);
            a[v] = (short)
                vs[(32 * n + FA_MFMA32_K * t + kk) * TL::kPitchV + 32 * u + dv];
          }
          o[u] = mfma<T>::run(a, pb, o[u]);
        }
      }
    }
  }

  if (!active) return; // no barrier follows
  if (p.plan.num_splits == 1) {
    float lse;
    const float f = fa_softmax_finalize_sinks(m, l, p.prob.sinks, h, &lse);
    typename T::storage *out = (typename T::storage *)p.o.data;
    const int64_t off = fa_seq_q_offset(&p.prob, &p.o, b, i, h);
#pragma unroll
    for (int u = 0; u < kTilesV; u++)
#pragma unroll
      for (int rr = 0; rr < 16; rr++) {
        int dv, qq;
        fa_mfma32_c(lane, rr, &dv, &qq);
        T::store(out + off + 32 * u + dv, o[u][rr] * f);
      }
    if (p.lse && half == 0) p.lse[fa_flat_row_index(&p.prob, b, h, i)] = lse;
  } else {
    const int64_t at = w * p.plan.block_q + r;
    if (half == 0) {
      p.part_ml[at * 2] = m;
      p.part_ml[at * 2 + 1] = l;
    }
#pragma unroll
    for (int u = 0; u < kTilesV; u++)
#pragma unroll
      for (int rr = 0; rr < 16; rr++) {
        int dv, qq;
        fa_mfma32_c(lane, rr, &dv, &qq);
        p.part_o[at * D + 32 * u + dv] = o[u][rr];
      }
  }
}

template <typename T, int D> int launch(const fa_gpu_params *p, void *stream) {
  if (p->plan.num_work <= 0) return 0;
  FA_GPU_LAUNCH((fwd<T, D>), (unsigned)p->plan.num_work, kThreads, 0,
                (fa_gpu_stream)stream, *p);
  return (int)fa_gpu_get_last_error();
}

} // namespace fa_cdna

#endif
