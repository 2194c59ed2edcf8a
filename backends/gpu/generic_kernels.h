// SPDX-License-Identifier: MIT
// The portable generic kernels: correct for every problem the API can
// express (fp32/fp16/bf16; FP8 inputs, descales and any output dtype in the
// forward; head dims up to 256, head_dim_v != head_dim,
// every mask, softcap, ALiBi, sinks, GQA, varlen, seqused_k, paged KV,
// split-KV), written for clarity: one wavefront per query row (forward, dQ)
// or per key row (dK/dV), lanes over keys for the dot products and over
// columns for the accumulators. They follow the CPU reference
// (backends/cpu/cpu_kernels.h) step by step with fp32 accumulation and
// accurate expf/logf.
//
// Written against backends/gpu/compat.h only, with the wavefront width a
// compile-time constant (FA_GPU_WARP: 64 on CDNA, 32 on NVIDIA): the same
// source is the HIP module's hip.generic (hip_generic.hip, wave64) and the
// CUDA module's cuda.generic (kernels_generic.cu, warp32), so running the
// CUDA tests on an NVIDIA GPU validates everything here except the width.
// The tensor-core and MFMA kernels are checked against these, and the
// modules run these whenever a problem or a tensor is outside what those
// handle.
//
// Include once per translation unit after compat.h; it defines the kernels
// and FA_GPU_GENERIC_LAUNCHERS(prefix), which emits the extern "C" launchers
// that FA_GPU_GENERIC_LAUNCHER_DECLS(prefix) declares (gpu_params.h).
#ifndef FA_GPU_GENERIC_KERNELS_H
#define FA_GPU_GENERIC_KERNELS_H

#include "compat.h"
#include "gpu_params.h"
#include "input_decode.h"
#include "seq_rows.h"
#include "softmax.h"

namespace fa_gpu_generic {

constexpr int kWarps = 4; // wavefronts per workgroup
constexpr int kCols = FA_GPU_MAX_HEAD_DIM / FA_GPU_WARP; // columns per lane

template <typename T>
FA_GPU_DEVICE const typename T::storage *cptr(const fa_tensor_view &t) {
  return (const typename T::storage *)t.data;
}

/* A row of n elements to fp32, each times `scale` (a descale; 1 keeps it
   as it is). */
template <typename T>
FA_GPU_DEVICE void load_row(float *dst, const typename T::storage *base,
                            int64_t off, int n, int lane, float scale = 1.0f) {
  for (int c = lane; c < n; c += FA_GPU_WARP)
    dst[c] = T::load(base + off + c) * scale;
}

FA_GPU_DEVICE float ld_any(const void *base, int dtype, int64_t i) {
  if (dtype == 0) return fa_gpu_f32::load((const float *)base + i);
  if (dtype == 1) return fa_gpu_f16::load((const uint16_t *)base + i);
  return fa_gpu_bf16::load((const uint16_t *)base + i);
}

/* One finished row: O * f and LSE. */
template <typename T>
FA_GPU_DEVICE void store_row(const fa_gpu_params &p, int b, int h, int i,
                             const float *acc, float f, float lse, int lane) {
  typename T::storage *o = (typename T::storage *)p.o.data;
  const int64_t off = fa_seq_q_offset(&p.prob, &p.o, b, i, h);
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + FA_GPU_WARP * u;
    if (c < p.prob.head_dim_v) T::store(o + off + c, acc[u] * f);
  }
  if (p.lse && lane == 0) p.lse[fa_flat_row_index(&p.prob, b, h, i)] = lse;
}

/* ---- forward: one work item per workgroup, one lane row per wavefront ----
   Inputs of tag TI (any input dtype), each element decoded and times its
   tensor's descale in fp32 as the header says (the products are the
   semantics, so a descale that overflows an element gives inf there, as on
   the CPU); O stored as TO. */
template <typename TI, typename TO>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    fwd(const FA_GPU_GRID_CONSTANT fa_gpu_params p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / FA_GPU_WARP, lane = threadIdx.x % FA_GPU_WARP;
  const int64_t w = blockIdx.x;
  int b, h0, qb, split;
  fa_flat_work_item(&p.prob, &p.plan, w, &b, &h0, &qb, &split);
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  const int row0 = qb * p.plan.block_rows, pack = p.plan.pack_group;
  if (row0 >= sq) return;
  // (row, head) pairs
  const int lanes = min(p.plan.block_rows, sq - row0) * pack;
  const int hk = h0 / p.prob.group, D = p.prob.head_dim, DV = p.prob.head_dim_v;
  int kb0, kb1, s0, s1;
  fa_flat_kv_blocks(&p.prob, p.plan.block_rows, p.plan.block_k, sq, sk, qb,
                    &kb0, &kb1);
  fa_split_range(kb0, kb1, p.plan.num_splits, split, &s0, &s1);
  const int shift = fa_flat_shift(&p.prob, sq, sk);
  float *qs = smem + warp * D;
  const typename TI::storage *q = cptr<TI>(p.q), *k = cptr<TI>(p.k),
                             *v = cptr<TI>(p.v);
  const float dsq = fa_gpu_descale(p.descale_q, p, b, hk);
  const float dsk = fa_gpu_descale(p.descale_k, p, b, hk);
  const float dsv = fa_gpu_descale(p.descale_v, p, b, hk);
  for (int r = warp; r < lanes; r += kWarps) {
    const int i = row0 + r / pack, h = h0 + r % pack;
    load_row<TI>(qs, q, fa_seq_q_offset(&p.prob, &p.q, b, i, h), D, lane, dsq);
    fa_gpu_sync_warp();
    int lo, hi;
    fa_flat_visible(&p.prob, i, sq, sk, &lo, &hi);
    const int jlo = max(lo, s0 * p.plan.block_k);
    const int jhi = min(min(hi, s1 * p.plan.block_k), sk);
    float m = -INFINITY, l = 0.0f, acc[kCols];
#pragma unroll
    for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
    for (int j0 = jlo; j0 < jhi; j0 += FA_GPU_WARP) {
      const int j = j0 + lane;
      float s = -INFINITY;
      int64_t vof = 0;
      if (j < jhi) {
        // A key of a block-table entry outside the pool (offset -1) is a
        // row of zeros: dot 0 here, and no V row below.
        const int64_t kof = fa_seq_k_offset(&p.prob, &p.k, b, j, hk);
        vof = fa_seq_k_offset(&p.prob, &p.v, b, j, hk);
        float dot = 0.0f;
        if (kof >= 0)
          for (int c = 0; c < D; c++)
            dot += qs[c] * (TI::load(k + kof + c) * dsk);
        s = fa_flat_transform(&p.prob, p.prob.scale * dot, h, i, j, shift);
      }
      // The core's step (fa_softmax_step, natural base); every key of
      // [jlo, jhi) is visible, so the block maximum is not -inf.
      float ref;
      const float alpha =
          expf(fa_softmax_step(&m, fa_gpu_warp_max(s), 1.0f, &ref));
      const float pj = j < jhi ? expf(fa_softmax_exponent(s, 1.0f, ref)) : 0.0f;
      l = l * alpha + fa_gpu_warp_sum(pj);
#pragma unroll
      for (int u = 0; u < kCols; u++) acc[u] *= alpha;
      const int cnt = min(FA_GPU_WARP, jhi - j0);
      for (int jj = 0; jj < cnt; jj++) {
        const float pp = fa_gpu_shfl(pj, jj);
        const int64_t vo = fa_gpu_shfl_i64(vof, jj);
        if (vo < 0) continue; // a V row of zeros
#pragma unroll
        for (int u = 0; u < kCols; u++) {
          const int c = lane + FA_GPU_WARP * u;
          if (c < DV) acc[u] += pp * (TI::load(v + vo + c) * dsv);
        }
      }
    }
    if (p.plan.num_splits == 1) {
      float lse, f = fa_softmax_finalize_sinks(m, l, p.prob.sinks, h, &lse);
      store_row<TO>(p, b, h, i, acc, f, lse, lane);
    } else {
      const int64_t at = w * p.plan.block_q + r;
      if (lane == 0) {
        p.part_ml[at * 2] = m;
        p.part_ml[at * 2 + 1] = l;
      }
#pragma unroll
      for (int u = 0; u < kCols; u++) {
        const int c = lane + FA_GPU_WARP * u;
        if (c < DV) p.part_o[at * DV + c] = acc[u];
      }
    }
    fa_gpu_sync_warp();
  }
}

/* Merge the splits of one (batch, head unit, q block), row by row, in split
   order, into O of tag T (the output dtype). Grid: (work / splits,
   ceil(block_q / kWarps)). Shared by every forward kernel that writes split
   partials in this layout. */
template <typename T>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    combine(const FA_GPU_GRID_CONSTANT fa_gpu_params p) {
  const int warp = threadIdx.x / FA_GPU_WARP, lane = threadIdx.x % FA_GPU_WARP;
  const int64_t w0 = (int64_t)blockIdx.x * p.plan.num_splits;
  const int r = blockIdx.y * kWarps + warp;
  int b, h0, qb, split;
  fa_flat_work_item(&p.prob, &p.plan, w0, &b, &h0, &qb, &split);
  const int sq = fa_seq_rows_q(&p.prob, b), row0 = qb * p.plan.block_rows;
  if (row0 >= sq || r >= min(p.plan.block_rows, sq - row0) * p.plan.pack_group)
    return;
  const int h = h0 + r % p.plan.pack_group, DV = p.prob.head_dim_v;
  float m = -INFINITY, l = 0.0f, acc[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
  for (int sp = 0; sp < p.plan.num_splits; sp++) {
    const int64_t at = (w0 + sp) * p.plan.block_q + r;
    float wa = 1.0f, wb = 1.0f;
    const int how = fa_softmax_merge_weights(&m, &l, p.part_ml[at * 2],
                                             p.part_ml[at * 2 + 1], &wa, &wb);
    if (how == 0) continue;
#pragma unroll
    for (int u = 0; u < kCols; u++) {
      const int c = lane + FA_GPU_WARP * u;
      if (c >= DV) continue;
      const float ob = p.part_o[at * DV + c];
      acc[u] = how == 1 ? ob : acc[u] * wa + ob * wb;
    }
  }
  float lse, f = fa_softmax_finalize_sinks(m, l, p.prob.sinks, h, &lse);
  store_row<T>(p, b, h, row0 + r / p.plan.pack_group, acc, f, lse, lane);
}

/* ---- backward
 * ---------------------------------------------------------------- */

/* D_i = rowsum(dO_i * O_i), one wavefront per (batch, head, row). */
template <typename T>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    bwd_delta(const FA_GPU_GRID_CONSTANT fa_gpu_params p) {
  const int lane = threadIdx.x % FA_GPU_WARP;
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / FA_GPU_WARP;
  if (row >= (int64_t)p.prob.batch * p.prob.heads_q * p.prob.seqlen_q) return;
  const int i = (int)(row % p.prob.seqlen_q);
  const int h = (int)(row / p.prob.seqlen_q % p.prob.heads_q);
  const int b = (int)(row / p.prob.seqlen_q / p.prob.heads_q);
  if (i >= fa_seq_rows_q(&p.prob, b)) return;
  const typename T::storage *o = cptr<T>(p.o), *d_o = cptr<T>(p.d_o);
  const int64_t oo = fa_seq_q_offset(&p.prob, &p.o, b, i, h);
  const int64_t od = fa_seq_q_offset(&p.prob, &p.d_o, b, i, h);
  float acc = 0.0f;
  for (int c = lane; c < p.prob.head_dim_v; c += FA_GPU_WARP)
    acc += T::load(o + oo + c) * T::load(d_o + od + c);
  acc = fa_gpu_warp_sum(acc);
  if (lane == 0) p.delta[fa_flat_row_index(&p.prob, b, h, i)] = acc;
}

/* P and dS = P (dP - D) dscore/d(q.k) of one (query, key) pair, from the
   fp32 rows qrow, dorow and the key's K and V rows. */
template <typename T>
FA_GPU_DEVICE void grad_pair(const fa_gpu_params &p, const float *qrow,
                             const float *dorow, const typename T::storage *k,
                             int64_t kof, const typename T::storage *v,
                             int64_t vof, int h, int i, int j, int shift,
                             float lse, float dl, float *P, float *dS) {
  float dot = 0.0f, dp = 0.0f;
  for (int c = 0; c < p.prob.head_dim; c++)
    dot += qrow[c] * T::load(k + kof + c);
  for (int c = 0; c < p.prob.head_dim_v; c++)
    dp += dorow[c] * T::load(v + vof + c);
  const float s0 = p.prob.scale * dot;
  float g = p.prob.scale;
  if (p.prob.softcap > 0.0f) {
    const float th = tanhf(s0 / p.prob.softcap);
    g *= 1.0f - th * th;
  }
  const float s = fa_flat_transform(&p.prob, s0, h, i, j, shift);
  *P = expf(s - lse);
  *dS = *P * (dp - dl) * g;
}

/* dQ, one wavefront per (batch, head, row), over the row's visible keys. */
template <typename T>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    bwd_dq(const FA_GPU_GRID_CONSTANT fa_gpu_params p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / FA_GPU_WARP, lane = threadIdx.x % FA_GPU_WARP;
  const int64_t row = (int64_t)blockIdx.x * kWarps + warp;
  if (row >= (int64_t)p.prob.batch * p.prob.heads_q * p.prob.seqlen_q) return;
  const int i = (int)(row % p.prob.seqlen_q);
  const int h = (int)(row / p.prob.seqlen_q % p.prob.heads_q);
  const int b = (int)(row / p.prob.seqlen_q / p.prob.heads_q);
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  if (i >= sq) return;
  const int D = p.prob.head_dim, DV = p.prob.head_dim_v, hk = h / p.prob.group;
  float *qrow = smem + warp * (D + DV), *dorow = qrow + D;
  const typename T::storage *q = cptr<T>(p.q), *k = cptr<T>(p.k),
                            *v = cptr<T>(p.v);
  load_row<T>(qrow, q, fa_seq_q_offset(&p.prob, &p.q, b, i, h), D, lane);
  load_row<T>(dorow, cptr<T>(p.d_o), fa_seq_q_offset(&p.prob, &p.d_o, b, i, h),
              DV, lane);
  fa_gpu_sync_warp();
  const int64_t ri = fa_flat_row_index(&p.prob, b, h, i);
  const float lse = p.lse_in[ri], dl = p.delta[ri];
  const int shift = fa_flat_shift(&p.prob, sq, sk);
  int lo, hi;
  fa_flat_visible(&p.prob, i, sq, sk, &lo, &hi);
  float acc[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) acc[u] = 0.0f;
  for (int j0 = lo; j0 < hi; j0 += FA_GPU_WARP) {
    const int j = j0 + lane;
    float P = 0.0f, dS = 0.0f;
    int64_t kof = 0;
    kof = j < hi ? fa_seq_k_offset(&p.prob, &p.k, b, j, hk) : -1;
    // A key of a block-table entry outside the pool (offset -1) is a row
    // of zeros, whose term of dQ (dS k) is 0: skipped.
    if (kof >= 0)
      grad_pair<T>(p, qrow, dorow, k, kof, v,
                   fa_seq_k_offset(&p.prob, &p.v, b, j, hk), h, i, j, shift,
                   lse, dl, &P, &dS);
    const int cnt = min(FA_GPU_WARP, hi - j0);
    for (int jj = 0; jj < cnt; jj++) {
      const float ds = fa_gpu_shfl(dS, jj);
      const int64_t ko = fa_gpu_shfl_i64(kof, jj);
      if (ko < 0) continue;
#pragma unroll
      for (int u = 0; u < kCols; u++) {
        const int c = lane + FA_GPU_WARP * u;
        if (c < D) acc[u] += ds * T::load(k + ko + c);
      }
    }
  }
  typename T::storage *dq = (typename T::storage *)p.dq.data;
  const int64_t off = fa_seq_q_offset(&p.prob, &p.dq, b, i, h);
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + FA_GPU_WARP * u;
    if (c < D) T::store(dq + off + c, acc[u]);
  }
}

/* dK, dV, one wavefront per (batch, kv head, key), over the query heads of
   its group in order and the queries that see the key. Dense/varlen rows
   past seqused_k get zero. Paged pools: one launch per sequence
   (p.only_batch), added into slots zeroed beforehand (pages may be
   shared). */
template <typename T>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    bwd_dkdv(const FA_GPU_GRID_CONSTANT fa_gpu_params p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / FA_GPU_WARP, lane = threadIdx.x % FA_GPU_WARP;
  const int64_t id = (int64_t)blockIdx.x * kWarps + warp;
  const int nb = p.only_batch >= 0 ? 1 : p.prob.batch;
  if (id >= (int64_t)nb * p.prob.heads_kv * p.prob.seqlen_k) return;
  const int j = (int)(id % p.prob.seqlen_k);
  const int hk = (int)(id / p.prob.seqlen_k % p.prob.heads_kv);
  const int b = p.only_batch >= 0
                    ? p.only_batch
                    : (int)(id / p.prob.seqlen_k / p.prob.heads_kv);
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  const int D = p.prob.head_dim, DV = p.prob.head_dim_v;
  typename T::storage *dk = (typename T::storage *)p.dk.data;
  typename T::storage *dv = (typename T::storage *)p.dv.data;
  if (j >= sk) {
    if (p.prob.paged || j >= fa_seq_storage_k(&p.prob, b)) return;
    const int64_t ok = fa_seq_k_offset(&p.prob, &p.dk, b, j, hk);
    const int64_t ov = fa_seq_k_offset(&p.prob, &p.dv, b, j, hk);
    for (int c = lane; c < D; c += FA_GPU_WARP) T::store(dk + ok + c, 0.0f);
    for (int c = lane; c < DV; c += FA_GPU_WARP) T::store(dv + ov + c, 0.0f);
    return;
  }
  // A key of a block-table entry outside the pool (offset -1) has no
  // gradient slot to write: skipped.
  if (fa_seq_k_offset(&p.prob, &p.k, b, j, hk) < 0) return;
  float *krow = smem + warp * (D + DV), *vrow = krow + D;
  const typename T::storage *q = cptr<T>(p.q), *d_o = cptr<T>(p.d_o);
  load_row<T>(krow, cptr<T>(p.k), fa_seq_k_offset(&p.prob, &p.k, b, j, hk), D,
              lane);
  load_row<T>(vrow, cptr<T>(p.v), fa_seq_k_offset(&p.prob, &p.v, b, j, hk), DV,
              lane);
  fa_gpu_sync_warp();
  const int shift = fa_flat_shift(&p.prob, sq, sk);
  int i0, i1;
  fa_flat_queries_of_key(&p.prob, j, sq, sk, &i0, &i1);
  float ak[kCols], av[kCols];
#pragma unroll
  for (int u = 0; u < kCols; u++) ak[u] = av[u] = 0.0f;
  for (int h = hk * p.prob.group; h < (hk + 1) * p.prob.group; h++) {
    for (int c0 = i0; c0 < i1; c0 += FA_GPU_WARP) {
      const int i = c0 + lane;
      float P = 0.0f, dS = 0.0f;
      int64_t qo = 0, dO = 0;
      int lo = 0, hi = 0;
      if (i < i1) fa_flat_visible(&p.prob, i, sq, sk, &lo, &hi);
      if (i < i1 && lo <= j && j < hi) {
        qo = fa_seq_q_offset(&p.prob, &p.q, b, i, h);
        dO = fa_seq_q_offset(&p.prob, &p.d_o, b, i, h);
        const int64_t ri = fa_flat_row_index(&p.prob, b, h, i);
        float dot = 0.0f, dp = 0.0f;
        for (int c = 0; c < D; c++) dot += T::load(q + qo + c) * krow[c];
        for (int c = 0; c < DV; c++) dp += T::load(d_o + dO + c) * vrow[c];
        const float s0 = p.prob.scale * dot;
        float g = p.prob.scale;
        if (p.prob.softcap > 0.0f) {
          const float th = tanhf(s0 / p.prob.softcap);
          g *= 1.0f - th * th;
        }
        const float s = fa_flat_transform(&p.prob, s0, h, i, j, shift);
        P = expf(s - p.lse_in[ri]);
        dS = P * (dp - p.delta[ri]) * g;
      }
      const int cnt = min(FA_GPU_WARP, i1 - c0);
      for (int ii = 0; ii < cnt; ii++) {
        const float pp = fa_gpu_shfl(P, ii);
        const float ds = fa_gpu_shfl(dS, ii);
        const int64_t qq = fa_gpu_shfl_i64(qo, ii),
                      dd = fa_gpu_shfl_i64(dO, ii);
        if (pp == 0.0f && ds == 0.0f) continue; // not visible, or no mass
#pragma unroll
        for (int u = 0; u < kCols; u++) {
          const int c = lane + FA_GPU_WARP * u;
          if (c < DV) av[u] += pp * T::load(d_o + dd + c);
          if (c < D) ak[u] += ds * T::load(q + qq + c);
        }
      }
    }
  }
  const int64_t ok = fa_seq_k_offset(&p.prob, &p.dk, b, j, hk);
  const int64_t ov = fa_seq_k_offset(&p.prob, &p.dv, b, j, hk);
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + FA_GPU_WARP * u;
    if (c < D)
      T::store(dk + ok + c,
               ak[u] + (p.prob.paged ? T::load(dk + ok + c) : 0.0f));
    if (c < DV)
      T::store(dv + ov + c,
               av[u] + (p.prob.paged ? T::load(dv + ov + c) : 0.0f));
  }
}

/* Paged backward: zero the slots of every sequence's real keys. */
template <typename T>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    bwd_zero_paged(const FA_GPU_GRID_CONSTANT fa_gpu_params p) {
  const int lane = threadIdx.x % FA_GPU_WARP;
  const int64_t id = (int64_t)blockIdx.x * kWarps + threadIdx.x / FA_GPU_WARP;
  if (id >= (int64_t)p.prob.batch * p.prob.heads_kv * p.prob.seqlen_k) return;
  const int j = (int)(id % p.prob.seqlen_k);
  const int hk = (int)(id / p.prob.seqlen_k % p.prob.heads_kv);
  const int b = (int)(id / p.prob.seqlen_k / p.prob.heads_kv);
  if (j >= fa_seq_rows_k(&p.prob, b)) return;
  typename T::storage *dk = (typename T::storage *)p.dk.data;
  typename T::storage *dv = (typename T::storage *)p.dv.data;
  const int64_t ok = fa_seq_k_offset(&p.prob, &p.dk, b, j, hk);
  const int64_t ov = fa_seq_k_offset(&p.prob, &p.dv, b, j, hk);
  if (ok < 0) return; // not a page of the pool: nothing to zero
  for (int c = lane; c < p.prob.head_dim; c += FA_GPU_WARP)
    T::store(dk + ok + c, 0.0f);
  for (int c = lane; c < p.prob.head_dim_v; c += FA_GPU_WARP)
    T::store(dv + ov + c, 0.0f);
}

/* fa_merge_states: fa_lse_merge_weights (core/softmax.h) per row without
   storing the weights. One wavefront per (batch, head, row). */
template <typename T>
__global__ void __launch_bounds__(kWarps *FA_GPU_WARP)
    merge(int n, const fa_gpu_merge_part *parts, int batch, int seqlen,
          int heads, int dim, fa_tensor_view o, float *lse_out) {
  const int lane = threadIdx.x % FA_GPU_WARP;
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / FA_GPU_WARP;
  if (row >= (int64_t)batch * heads * seqlen) return;
  const int i = (int)(row % seqlen), h = (int)(row / seqlen % heads);
  const int b = (int)(row / seqlen / heads);
  float mx = -INFINITY;
  int nan = 0;
  for (int k = 0; k < n; k++) {
    const float x = parts[k].lse[row];
    if (isnan(x))
      nan = 1;
    else if (x > mx)
      mx = x;
  }
  float inv = 0.0f, out_lse;
  int mode; // 0 NaN, 1 all -inf, 2 +inf present, 3 normal
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
    if (mode == 0)
      wk = NAN;
    else if (mode == 1)
      wk = 0.0f;
    else if (mode == 2)
      wk = x == INFINITY ? NAN : 0.0f;
    else
      wk = x == -INFINITY ? 0.0f : expf(x - mx) * inv;
    if (wk == 0.0f) continue; // a part with no keys is never read
    const int64_t off = b * parts[k].sb + i * parts[k].ss + h * parts[k].sh;
#pragma unroll
    for (int u = 0; u < kCols; u++) {
      const int c = lane + FA_GPU_WARP * u;
      if (c < dim) acc[u] += wk * ld_any(parts[k].o, parts[k].dtype, off + c);
    }
  }
  typename T::storage *dst = (typename T::storage *)o.data;
  const int64_t off = b * o.sb + i * o.ss + h * o.sh;
#pragma unroll
  for (int u = 0; u < kCols; u++) {
    const int c = lane + FA_GPU_WARP * u;
    if (c < dim) T::store(dst + off + c, acc[u]);
  }
  // lse_out may be one of the parts' lse (in place): every lane has read it.
  fa_gpu_sync_warp();
  if (lse_out && lane == 0) lse_out[row] = out_lse;
}

inline unsigned grid_of(int64_t warps) {
  return (unsigned)((warps + kWarps - 1) / kWarps);
}

template <typename TI, typename TO>
void fwd_launch(const fa_gpu_params *p, fa_gpu_stream stream) {
  const size_t smem = sizeof(float) * kWarps * (size_t)p->prob.head_dim;
  auto *kernel = fwd<TI, TO>;
  FA_GPU_LAUNCH(kernel, (unsigned)p->plan.num_work, kWarps * FA_GPU_WARP, smem,
                stream, *p);
}

} // namespace fa_gpu_generic

/* The extern "C" launchers prefix_fwd_generic ... prefix_merge that
   FA_GPU_GENERIC_LAUNCHER_DECLS(prefix) declares; each returns the
   runtime's error code of the launch as an int. */
#define FA_GPU_GENERIC_LAUNCHERS(prefix)                                       \
  extern "C" int prefix##_fwd_generic(const fa_gpu_params *p, void *stream) {  \
    using namespace fa_gpu_generic;                                            \
    if (p->plan.num_work <= 0) return 0;                                       \
    FA_GPU_INPUT_SWITCH(                                                       \
        p->prob.dtype, TI,                                                     \
        FA_GPU_DTYPE_SWITCH(p->prob.dtype_out, TO,                             \
                            fwd_launch<TI, TO>(p, (fa_gpu_stream)stream)));    \
    return (int)fa_gpu_get_last_error();                                       \
  }                                                                            \
  extern "C" int prefix##_combine(const fa_gpu_params *p, void *stream) {      \
    using namespace fa_gpu_generic;                                            \
    dim3 grid((unsigned)(p->plan.num_work / p->plan.num_splits),               \
              (unsigned)((p->plan.block_q + kWarps - 1) / kWarps));            \
    FA_GPU_DTYPE_SWITCH(p->prob.dtype_out, T,                                  \
                        FA_GPU_LAUNCH(combine<T>, grid, kWarps *FA_GPU_WARP,   \
                                      0, (fa_gpu_stream)stream, *p));          \
    return (int)fa_gpu_get_last_error();                                       \
  }                                                                            \
  extern "C" int prefix##_bwd_delta(const fa_gpu_params *p, void *stream) {    \
    using namespace fa_gpu_generic;                                            \
    int64_t rows =                                                             \
        (int64_t)p->prob.batch * p->prob.heads_q * p->prob.seqlen_q;           \
    FA_GPU_DTYPE_SWITCH(p->prob.dtype, T,                                      \
                        FA_GPU_LAUNCH(bwd_delta<T>, grid_of(rows),             \
                                      kWarps *FA_GPU_WARP, 0,                  \
                                      (fa_gpu_stream)stream, *p));             \
    return (int)fa_gpu_get_last_error();                                       \
  }                                                                            \
  extern "C" int prefix##_bwd_dq(const fa_gpu_params *p, void *stream) {       \
    using namespace fa_gpu_generic;                                            \
    int64_t rows =                                                             \
        (int64_t)p->prob.batch * p->prob.heads_q * p->prob.seqlen_q;           \
    size_t smem = sizeof(float) * kWarps *                                     \
                  (size_t)(p->prob.head_dim + p->prob.head_dim_v);             \
    FA_GPU_DTYPE_SWITCH(p->prob.dtype, T,                                      \
                        FA_GPU_LAUNCH(bwd_dq<T>, grid_of(rows),                \
                                      kWarps *FA_GPU_WARP, smem,               \
                                      (fa_gpu_stream)stream, *p));             \
    return (int)fa_gpu_get_last_error();                                       \
  }                                                                            \
  extern "C" int prefix##_bwd_dkdv(const fa_gpu_params *p, void *stream) {     \
    using namespace fa_gpu_generic;                                            \
    int nb = p->only_batch >= 0 ? 1 : p->prob.batch;                           \
    int64_t rows = (int64_t)nb * p->prob.heads_kv * p->prob.seqlen_k;          \
    size_t smem = sizeof(float) * kWarps *                                     \
                  (size_t)(p->prob.head_dim + p->prob.head_dim_v);             \
    FA_GPU_DTYPE_SWITCH(p->prob.dtype, T,                                      \
                        FA_GPU_LAUNCH(bwd_dkdv<T>, grid_of(rows),              \
                                      kWarps *FA_GPU_WARP, smem,               \
                                      (fa_gpu_stream)stream, *p));             \
    return (int)fa_gpu_get_last_error();                                       \
  }                                                                            \
  extern "C" int prefix##_bwd_zero_paged(const fa_gpu_params *p,               \
                                         void *stream) {                       \
    using namespace fa_gpu_generic;                                            \
    int64_t rows =                                                             \
        (int64_t)p->prob.batch * p->prob.heads_kv * p->prob.seqlen_k;          \
    FA_GPU_DTYPE_SWITCH(p->prob.dtype, T,                                      \
                        FA_GPU_LAUNCH(bwd_zero_paged<T>, grid_of(rows),        \
                                      kWarps *FA_GPU_WARP, 0,                  \
                                      (fa_gpu_stream)stream, *p));             \
    return (int)fa_gpu_get_last_error();                                       \
  }                                                                            \
  extern "C" int prefix##_merge(                                               \
      int n, const fa_gpu_merge_part *desc, int dtype, int batch, int seqlen,  \
      int heads, int head_dim, fa_tensor_view o, float *lse, void *stream) {   \
    using namespace fa_gpu_generic;                                            \
    int64_t rows = (int64_t)batch * heads * seqlen;                            \
    FA_GPU_DTYPE_SWITCH(dtype, T,                                              \
                        FA_GPU_LAUNCH(merge<T>, grid_of(rows),                 \
                                      kWarps *FA_GPU_WARP, 0,                  \
                                      (fa_gpu_stream)stream, n, desc, batch,   \
                                      seqlen, heads, head_dim, o, lse));       \
    return (int)fa_gpu_get_last_error();                                       \
  }

#endif
