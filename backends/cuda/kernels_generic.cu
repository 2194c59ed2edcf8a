// SPDX-License-Identifier: MIT
// The generic CUDA kernels: correct for every problem the API can express
// (fp32/fp16/bf16, head dims up to 256, head_dim_v != head_dim, every mask,
// softcap, ALiBi, sinks, GQA, varlen, seqused_k, paged KV, split-KV), written
// for clarity rather than speed: one warp per query row (forward, dQ) or per
// key row (dK/dV), lanes over keys for the dot products and over columns
// for the accumulators. They follow the CPU reference
// (backends/cpu/cpu_kernels.h) step for step, with fp32 accumulation and
// accurate expf/logf, so fp32 results meet the oracle's 1e-5 bound. The
// tensor-core kernels are checked against these, and run them whenever a
// problem or a tensor is outside what they handle.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_semantics.h"

namespace {

constexpr int kWarps = 4;                          // warps per CTA
constexpr int kCols = FA_CUDA_MAX_HEAD_DIM / 32;   // columns per lane

template <typename T> __device__ __forceinline__ float ld(const T *p);
template <> __device__ __forceinline__ float ld<float>(const float *p) {
  return *p;
}
template <> __device__ __forceinline__ float ld<__half>(const __half *p) {
  return __half2float(*p);
}
template <>
__device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}

template <typename T> __device__ __forceinline__ void st(T *p, float x);
template <> __device__ __forceinline__ void st<float>(float *p, float x) {
  *p = x;
}
template <> __device__ __forceinline__ void st<__half>(__half *p, float x) {
  *p = __float2half_rn(x);
}
template <>
__device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16 *p, float x) {
  *p = __float2bfloat16_rn(x);
}

/* Element idx of a buffer whose dtype is known only at run time. */
__device__ __forceinline__ float ld_any(const void *base, int dtype,
                                        int64_t idx) {
  if (dtype == 0) return ld((const float *)base + idx);
  if (dtype == 1) return ld((const __half *)base + idx);
  return ld((const __nv_bfloat16 *)base + idx);
}

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(~0u, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(~0u, x, o);
  return x;
}

__device__ __forceinline__ int64_t shfl64(int64_t x, int src) {
  int lo = __shfl_sync(~0u, (int)(x & 0xffffffff), src);
  int hi = __shfl_sync(~0u, (int)(x >> 32), src);
  return (int64_t)(((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo);
}

template <typename T>
__device__ __forceinline__ const T *cptr(const fa_cuda_view &t) {
  return (const T *)t.data;
}

/* Load row `off` of width n into the warp's smem (fp32). */
template <typename T>
__device__ __forceinline__ void load_row(float *dst, const T *base,
                                         int64_t off, int n, int lane) {
  for (int c = lane; c < n; c += 32) dst[c] = ld(base + off + c);
}

__device__ __forceinline__ float sink_of(const fa_cuda_params &p, int h) {
  return p.sinks ? p.sinks[h] : NAN;
}

/* Store one finished row: O * scale_o and LSE. */
template <typename T>
__device__ __forceinline__ void store_row(const fa_cuda_params &p, int b, int h,
                                          int i, const float *acc, float f,
                                          float lse, int lane) {
  T *o = (T *)p.o.data;
  int64_t off = fa_cu_q_offset(&p, &p.o, b, i, h);
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    int c = lane + 32 * u;
    if (c < p.head_dim_v) st(o + off + c, acc[u] * f);
  }
  if (p.lse && lane == 0) p.lse[fa_cu_row_index(&p, b, h, i)] = lse;
}

/* ---- forward ------------------------------------------------------------ */

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    fwd_generic(const __grid_constant__ fa_cuda_params p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t w = blockIdx.x;
  int b, h0, qb, split;
  fa_cu_work_item(&p, w, &b, &h0, &qb, &split);
  const int sq = fa_cu_len_q(&p, b), sk = fa_cu_len_k(&p, b);
  const int row0 = qb * p.block_rows, pack = p.pack_group;
  if (row0 >= sq) return;
  // Lanes of the tile: (row, head), head fastest (GQA packing).
  const int lanes = min(p.block_rows, sq - row0) * pack;
  const int hk = h0 / p.group, D = p.head_dim, DV = p.head_dim_v;
  int kb0, kb1, s0, s1;
  fa_cu_kv_blocks(&p, p.block_rows, p.block_k, sq, sk, qb, &kb0, &kb1);
  fa_cu_split_range(kb0, kb1, p.num_splits, split, &s0, &s1);
  const int shift = fa_cu_shift(&p, sq, sk);
  float *qs = smem + warp * D;
  const T *q = cptr<T>(p.q), *k = cptr<T>(p.k), *v = cptr<T>(p.v);

  for (int r = warp; r < lanes; r += kWarps) {
    const int i = row0 + r / pack, h = h0 + r % pack;
    load_row(qs, q, fa_cu_q_offset(&p, &p.q, b, i, h), D, lane);
    __syncwarp();
    int lo, hi;
    fa_cu_visible(&p, i, sq, sk, &lo, &hi);
    const int jlo = max(lo, s0 * p.block_k);
    const int jhi = min(min(hi, s1 * p.block_k), sk);
    float m = -INFINITY, l = 0.0f, acc[kCols];
#pragma unroll
    for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
    for (int j0 = jlo; j0 < jhi; j0 += 32) {
      const int j = j0 + lane;
      float s = -INFINITY;
      int64_t vof = 0;
      if (j < jhi) {
        const int64_t kof = fa_cu_k_offset(&p, &p.k, b, j, hk);
        vof = fa_cu_k_offset(&p, &p.v, b, j, hk);
        float dot = 0.0f;
        for (int c = 0; c < D; c++) dot += qs[c] * ld(k + kof + c);
        s = fa_cu_transform(&p, p.scale * dot, h, i, j, shift);
      }
      // fa_softmax_update: every key of the range is visible, so the block
      // maximum is finite.
      const float mx = fmaxf(m, warp_max(s));
      const float alpha = expf(m - mx);
      const float pj = j < jhi ? expf(s - mx) : 0.0f;
      l = l * alpha + warp_sum(pj);
      m = mx;
#pragma unroll
      for (int u = 0; u < kCols; u++) acc[u] *= alpha;
      const int cnt = min(32, jhi - j0);
      for (int jj = 0; jj < cnt; jj++) {
        const float pp = __shfl_sync(~0u, pj, jj);
        const int64_t vo = shfl64(vof, jj);
#pragma unroll
        for (int u = 0; u < kCols; u++) {
          const int c = lane + 32 * u;
          if (c < DV) acc[u] += pp * ld(v + vo + c);
        }
      }
    }
    if (p.num_splits == 1) {
      float lse, f = fa_cu_finalize(m, l, sink_of(p, h), &lse);
      store_row<T>(p, b, h, i, acc, f, lse, lane);
    } else {
      const int64_t at = w * p.block_q + r;
      if (lane == 0) {
        p.part_ml[at * 2] = m;
        p.part_ml[at * 2 + 1] = l;
      }
#pragma unroll
      for (int u = 0; u < kCols; u++) {
        const int c = lane + 32 * u;
        if (c < DV) p.part_o[at * DV + c] = acc[u];
      }
    }
    __syncwarp();
  }
}

/* Merge the splits of one (batch, head, q block) row by row, in split
   order (the CPU's fwd_merge). Grid: (work / splits, ceil(block_q / 4)). */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    combine_splits(const __grid_constant__ fa_cuda_params p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t w0 = (int64_t)blockIdx.x * p.num_splits;
  const int r = blockIdx.y * kWarps + warp;
  int b, h0, qb, split;
  fa_cu_work_item(&p, w0, &b, &h0, &qb, &split);
  const int sq = fa_cu_len_q(&p, b), row0 = qb * p.block_rows;
  if (row0 >= sq || r >= min(p.block_rows, sq - row0) * p.pack_group) return;
  const int h = h0 + r % p.pack_group;
  const int DV = p.head_dim_v;
  float m = -INFINITY, l = 0.0f, acc[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
  for (int sp = 0; sp < p.num_splits; sp++) {
    const int64_t at = (w0 + sp) * p.block_q + r;
    float wa = 1.0f, wb = 1.0f;
    int how = fa_cu_merge_weights(&m, &l, p.part_ml[at * 2],
                                  p.part_ml[at * 2 + 1], &wa, &wb);
    if (how == 0) continue;
#pragma unroll
    for (int u = 0; u < kCols; u++) {
      const int c = lane + 32 * u;
      if (c >= DV) continue;
      const float ob = p.part_o[at * DV + c];
      acc[u] = how == 1 ? ob : acc[u] * wa + ob * wb;
    }
  }
  float lse, f = fa_cu_finalize(m, l, sink_of(p, h), &lse);
  store_row<T>(p, b, h, row0 + r / p.pack_group, acc, f, lse, lane);
}

/* ---- backward ----------------------------------------------------------- */

/* D_i = rowsum(dO_i * O_i), one warp per (batch, head, row). */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32) bwd_delta(const __grid_constant__ fa_cuda_params p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int64_t rows = (int64_t)p.batch * p.heads_q * p.seqlen_q;
  if (row >= rows) return;
  const int i = (int)(row % p.seqlen_q);
  const int h = (int)(row / p.seqlen_q % p.heads_q);
  const int b = (int)(row / p.seqlen_q / p.heads_q);
  if (i >= fa_cu_len_q(&p, b)) return;
  const T *o = cptr<T>(p.o), *d_o = cptr<T>(p.d_o);
  const int64_t oo = fa_cu_q_offset(&p, &p.o, b, i, h);
  const int64_t od = fa_cu_q_offset(&p, &p.d_o, b, i, h);
  float acc = 0.0f;
  for (int c = lane; c < p.head_dim_v; c += 32)
    acc += ld(o + oo + c) * ld(d_o + od + c);
  acc = warp_sum(acc);
  if (lane == 0) p.delta[fa_cu_row_index(&p, b, h, i)] = acc;
}

/* Per (query i, key j): P, and dS = P (dP - D) dscore/d(q.k). */
template <typename T>
__device__ __forceinline__ void grad_pair(const fa_cuda_params &p,
                                          const float *qrow, const float *dorow,
                                          const T *k, int64_t kof, const T *v,
                                          int64_t vof, int h, int i, int j,
                                          int shift, float lse, float dl,
                                          float *P, float *dS) {
  float dot = 0.0f, dp = 0.0f;
  for (int c = 0; c < p.head_dim; c++) dot += qrow[c] * ld(k + kof + c);
  for (int c = 0; c < p.head_dim_v; c++) dp += dorow[c] * ld(v + vof + c);
  const float s0 = p.scale * dot;
  float g = p.scale;
  if (p.softcap > 0.0f) {
    const float th = tanhf(s0 / p.softcap);
    g *= 1.0f - th * th;
  }
  const float s = fa_cu_transform(&p, s0, h, i, j, shift);
  const float pr = expf(s - lse);
  *P = pr;
  *dS = pr * (dp - dl) * g;
}

/* dQ, one warp per (batch, head, row), over the row's visible keys. */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32) bwd_dq(const __grid_constant__ fa_cuda_params p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = (int64_t)blockIdx.x * kWarps + warp;
  const int64_t rows = (int64_t)p.batch * p.heads_q * p.seqlen_q;
  if (row >= rows) return;
  const int i = (int)(row % p.seqlen_q);
  const int h = (int)(row / p.seqlen_q % p.heads_q);
  const int b = (int)(row / p.seqlen_q / p.heads_q);
  const int sq = fa_cu_len_q(&p, b), sk = fa_cu_len_k(&p, b);
  if (i >= sq) return;
  const int D = p.head_dim, DV = p.head_dim_v, hk = h / p.group;
  float *qrow = smem + warp * (D + DV), *dorow = qrow + D;
  const T *q = cptr<T>(p.q), *k = cptr<T>(p.k), *v = cptr<T>(p.v);
  load_row(qrow, q, fa_cu_q_offset(&p, &p.q, b, i, h), D, lane);
  load_row(dorow, cptr<T>(p.d_o), fa_cu_q_offset(&p, &p.d_o, b, i, h), DV,
           lane);
  __syncwarp();
  const int64_t ri = fa_cu_row_index(&p, b, h, i);
  const float lse = p.lse_in[ri], dl = p.delta[ri];
  const int shift = fa_cu_shift(&p, sq, sk);
  int lo, hi;
  fa_cu_visible(&p, i, sq, sk, &lo, &hi);
  float acc[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
  for (int j0 = lo; j0 < hi; j0 += 32) {
    const int j = j0 + lane;
    float P = 0.0f, dS = 0.0f;
    int64_t kof = 0;
    if (j < hi) {
      kof = fa_cu_k_offset(&p, &p.k, b, j, hk);
      grad_pair(p, qrow, dorow, k, kof, v, fa_cu_k_offset(&p, &p.v, b, j, hk),
                h, i, j, shift, lse, dl, &P, &dS);
    }
    const int cnt = min(32, hi - j0);
    for (int jj = 0; jj < cnt; jj++) {
      const float ds = __shfl_sync(~0u, dS, jj);
      const int64_t ko = shfl64(kof, jj);
#pragma unroll
      for (int u = 0; u < kCols; u++) {
        const int c = lane + 32 * u;
        if (c < D) acc[u] += ds * ld(k + ko + c);
      }
    }
  }
  T *dq = (T *)p.dq.data;
  const int64_t off = fa_cu_q_offset(&p, &p.dq, b, i, h);
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + 32 * u;
    if (c < D) st(dq + off + c, acc[u]);
  }
}

/* dK, dV, one warp per (batch, kv head, key), over the query heads of its
   group (in order) and the queries that see the key. Dense/varlen rows past
   seqused_k get zero. Paged pools: launched once per sequence
   (p.only_batch) and added into slots zeroed beforehand, since sequences
   may share pages. */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32) bwd_dkdv(const __grid_constant__ fa_cuda_params p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t id = (int64_t)blockIdx.x * kWarps + warp;
  const int nb = p.only_batch >= 0 ? 1 : p.batch;
  if (id >= (int64_t)nb * p.heads_kv * p.seqlen_k) return;
  const int j = (int)(id % p.seqlen_k);
  const int hk = (int)(id / p.seqlen_k % p.heads_kv);
  const int b = p.only_batch >= 0 ? p.only_batch
                                  : (int)(id / p.seqlen_k / p.heads_kv);
  const int sq = fa_cu_len_q(&p, b), sk = fa_cu_len_k(&p, b);
  const int D = p.head_dim, DV = p.head_dim_v;
  T *dk = (T *)p.dk.data, *dv = (T *)p.dv.data;
  if (j >= sk) {
    if (p.paged || j >= fa_cu_storage_k(&p, b)) return;
    const int64_t ok = fa_cu_k_offset(&p, &p.dk, b, j, hk);
    const int64_t ov = fa_cu_k_offset(&p, &p.dv, b, j, hk);
    for (int c = lane; c < D; c += 32) st(dk + ok + c, 0.0f);
    for (int c = lane; c < DV; c += 32) st(dv + ov + c, 0.0f);
    return;
  }
  float *krow = smem + warp * (D + DV), *vrow = krow + D;
  const T *q = cptr<T>(p.q), *d_o = cptr<T>(p.d_o);
  load_row(krow, cptr<T>(p.k), fa_cu_k_offset(&p, &p.k, b, j, hk), D, lane);
  load_row(vrow, cptr<T>(p.v), fa_cu_k_offset(&p, &p.v, b, j, hk), DV, lane);
  __syncwarp();
  const int shift = fa_cu_shift(&p, sq, sk);
  int i0, i1;
  fa_cu_queries_of_key(&p, j, sq, sk, &i0, &i1);
  float ak[kCols], av[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) ak[u] = av[u] = 0.0f;
  for (int h = hk * p.group; h < (hk + 1) * p.group; h++) {
    for (int c0 = i0; c0 < i1; c0 += 32) {
      const int i = c0 + lane;
      float P = 0.0f, dS = 0.0f;
      int64_t qo = 0, dO = 0;
      int lo = 0, hi = 0;
      if (i < i1) fa_cu_visible(&p, i, sq, sk, &lo, &hi);
      if (i < i1 && lo <= j && j < hi) {
        qo = fa_cu_q_offset(&p, &p.q, b, i, h);
        dO = fa_cu_q_offset(&p, &p.d_o, b, i, h);
        const int64_t ri = fa_cu_row_index(&p, b, h, i);
        // grad_pair with the roles of the operands swapped: the query and
        // dO rows come from global memory, the key's from smem.
        float dot = 0.0f, dp = 0.0f;
        for (int c = 0; c < D; c++) dot += ld(q + qo + c) * krow[c];
        for (int c = 0; c < DV; c++) dp += ld(d_o + dO + c) * vrow[c];
        const float s0 = p.scale * dot;
        float g = p.scale;
        if (p.softcap > 0.0f) {
          const float th = tanhf(s0 / p.softcap);
          g *= 1.0f - th * th;
        }
        const float s = fa_cu_transform(&p, s0, h, i, j, shift);
        P = expf(s - p.lse_in[ri]);
        dS = P * (dp - p.delta[ri]) * g;
      }
      const int cnt = min(32, i1 - c0);
      for (int ii = 0; ii < cnt; ii++) {
        const float pp = __shfl_sync(~0u, P, ii);
        const float ds = __shfl_sync(~0u, dS, ii);
        const int64_t qq = shfl64(qo, ii), dd = shfl64(dO, ii);
        if (pp == 0.0f && ds == 0.0f) continue; // not visible (or no mass)
#pragma unroll
        for (int u = 0; u < kCols; u++) {
          const int c = lane + 32 * u;
          if (c < DV) av[u] += pp * ld(d_o + dd + c);
          if (c < D) ak[u] += ds * ld(q + qq + c);
        }
      }
    }
  }
  const int64_t ok = fa_cu_k_offset(&p, &p.dk, b, j, hk);
  const int64_t ov = fa_cu_k_offset(&p, &p.dv, b, j, hk);
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + 32 * u;
    if (c < D) st(dk + ok + c, ak[u] + (p.paged ? ld(dk + ok + c) : 0.0f));
    if (c < DV) st(dv + ov + c, av[u] + (p.paged ? ld(dv + ov + c) : 0.0f));
  }
}

/* Paged backward: zero the slots of every sequence's real keys. */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    bwd_zero_paged(const __grid_constant__ fa_cuda_params p) {
  const int lane = threadIdx.x % 32;
  const int64_t id = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  if (id >= (int64_t)p.batch * p.heads_kv * p.seqlen_k) return;
  const int j = (int)(id % p.seqlen_k);
  const int hk = (int)(id / p.seqlen_k % p.heads_kv);
  const int b = (int)(id / p.seqlen_k / p.heads_kv);
  if (j >= fa_cu_len_k(&p, b)) return;
  T *dk = (T *)p.dk.data, *dv = (T *)p.dv.data;
  const int64_t ok = fa_cu_k_offset(&p, &p.dk, b, j, hk);
  const int64_t ov = fa_cu_k_offset(&p, &p.dv, b, j, hk);
  for (int c = lane; c < p.head_dim; c += 32) st(dk + ok + c, 0.0f);
  for (int c = lane; c < p.head_dim_v; c += 32) st(dv + ov + c, 0.0f);
}

/* ---- fa_merge_states ------------------------------------------------------ */

/* fa_lse_merge_weights (core/softmax.h) re-derived per row without storing
   the n weights: the same maximum, sum and per-part weight, in the same
   order. One warp per (batch, head, row). */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    merge_states(int n, const fa_cuda_merge_part *parts, int batch, int seqlen,
                 int heads, int dim, fa_cuda_view o, float *lse_out) {
  const int lane = threadIdx.x % 32;
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= (int64_t)batch * heads * seqlen) return;
  const int i = (int)(row % seqlen), h = (int)(row / seqlen % heads);
  const int b = (int)(row / seqlen / heads);
  float mx = -INFINITY;
  int nan = 0;
  for (int k = 0; k < n; k++) {
    const float x = parts[k].lse[row];
    if (isnan(x)) nan = 1;
    else if (x > mx) mx = x;
  }
  float inv = 0.0f, out_lse;
  int mode; // 0 nan, 1 all -inf, 2 +inf present, 3 normal
  if (nan) {
    mode = 0;
    out_lse = NAN;
  } else if (mx == -INFINITY) {
    mode = 1;
    out_lse = -INFINITY;
  } else if (mx == INFINITY) {
    mode = 2;
    out_lse = INFINITY;
  } else {
    mode = 3;
    float sum = 0.0f;
    for (int k = 0; k < n; k++) {
      const float x = parts[k].lse[row];
      sum += x == -INFINITY ? 0.0f : expf(x - mx);
    }
    inv = 1.0f / sum;
    out_lse = mx + logf(sum);
  }
  float acc[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
  for (int k = 0; k < n; k++) {
    const float x = parts[k].lse[row];
    float wk;
    if (mode == 0) wk = NAN;
    else if (mode == 1) wk = 0.0f;
    else if (mode == 2) wk = x == INFINITY ? NAN : 0.0f;
    else wk = x == -INFINITY ? 0.0f : expf(x - mx) * inv;
    if (wk == 0.0f) continue; // a part with no keys is never read
    const int64_t off = b * parts[k].sb + i * parts[k].ss + h * parts[k].sh;
#pragma unroll
    for (int u = 0; u < kCols; u++) {
      const int c = lane + 32 * u;
      if (c < dim) acc[u] += wk * ld_any(parts[k].o, parts[k].dtype, off + c);
    }
  }
  T *dst = (T *)o.data;
  const int64_t off = b * o.sb + i * o.ss + h * o.sh;
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + 32 * u;
    if (c < dim) st(dst + off + c, acc[u]);
  }
  // lse_out may be one of the parts' lse (in place): every lane has read it.
  __syncwarp();
  if (lse_out && lane == 0) lse_out[row] = out_lse;
}

/* ---- launch helpers ----------------------------------------------------- */

int grid_of(int64_t warps) { return (int)((warps + kWarps - 1) / kWarps); }

#define FA_DTYPE_SWITCH(dtype, T, ...)                                         \
  switch (dtype) {                                                             \
  case 0: {                                                                    \
    typedef float T;                                                           \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  case 1: {                                                                    \
    typedef __half T;                                                          \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  default: {                                                                   \
    typedef __nv_bfloat16 T;                                                   \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  }

} // namespace

extern "C" int fa_cuda_launch_fwd_generic(const fa_cuda_params *p,
                                          void *stream) {
  if (p->num_work <= 0) return 0;
  size_t smem = sizeof(float) * kWarps * (size_t)p->head_dim;
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(p->dtype, T,
                  fwd_generic<T><<<(unsigned)p->num_work, kWarps * 32, smem, s>>>(*p));
  return (int)cudaGetLastError();
}

extern "C" int fa_cuda_launch_combine(const fa_cuda_params *p, void *stream) {
  dim3 grid((unsigned)(p->num_work / p->num_splits),
            (unsigned)((p->block_q + kWarps - 1) / kWarps));
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(p->dtype, T,
                  combine_splits<T><<<grid, kWarps * 32, 0, s>>>(*p));
  return (int)cudaGetLastError();
}

extern "C" int fa_cuda_launch_bwd_delta(const fa_cuda_params *p,
                                        void *stream) {
  int64_t rows = (int64_t)p->batch * p->heads_q * p->seqlen_q;
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(p->dtype, T,
                  bwd_delta<T><<<grid_of(rows), kWarps * 32, 0, s>>>(*p));
  return (int)cudaGetLastError();
}

extern "C" int fa_cuda_launch_bwd_dq(const fa_cuda_params *p, void *stream) {
  int64_t rows = (int64_t)p->batch * p->heads_q * p->seqlen_q;
  size_t smem = sizeof(float) * kWarps * (size_t)(p->head_dim + p->head_dim_v);
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(p->dtype, T,
                  bwd_dq<T><<<grid_of(rows), kWarps * 32, smem, s>>>(*p));
  return (int)cudaGetLastError();
}

extern "C" int fa_cuda_launch_bwd_dkdv(const fa_cuda_params *p,
                                       void *stream) {
  int nb = p->only_batch >= 0 ? 1 : p->batch;
  int64_t rows = (int64_t)nb * p->heads_kv * p->seqlen_k;
  size_t smem = sizeof(float) * kWarps * (size_t)(p->head_dim + p->head_dim_v);
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(p->dtype, T,
                  bwd_dkdv<T><<<grid_of(rows), kWarps * 32, smem, s>>>(*p));
  return (int)cudaGetLastError();
}

extern "C" int fa_cuda_launch_bwd_zero_paged(const fa_cuda_params *p,
                                             void *stream) {
  int64_t rows = (int64_t)p->batch * p->heads_kv * p->seqlen_k;
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(p->dtype, T,
                  bwd_zero_paged<T><<<grid_of(rows), kWarps * 32, 0, s>>>(*p));
  return (int)cudaGetLastError();
}

extern "C" int fa_cuda_launch_merge(int n, const fa_cuda_merge_part *desc,
                                    int dtype, int batch, int seqlen,
                                    int heads, int head_dim, fa_cuda_view o,
                                    float *lse, void *stream) {
  int64_t rows = (int64_t)batch * heads * seqlen;
  cudaStream_t s = (cudaStream_t)stream;
  FA_DTYPE_SWITCH(dtype, T,
                  merge_states<T><<<grid_of(rows), kWarps * 32, 0, s>>>(
                      n, desc, batch, seqlen, heads, head_dim, o, lse));
  return (int)cudaGetLastError();
}
