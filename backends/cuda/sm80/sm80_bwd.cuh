// SPDX-License-Identifier: MIT
// The sm80 backward (FlashAttention-2's algorithm): one CTA per (batch, kv
// head, block of 128 keys). K and V stay in shared memory; dK and dV
// accumulate in registers over the q heads of the group and the 64-row q
// blocks that see the keys. Per q block, with S^T computed key-major (each
// warp owns 16 keys):
//   P^T  = exp(S^T * scale - LSE)          (recomputed from the forward's LSE)
//   dP^T = V dO^T,  dS^T = P^T (dP^T - D) * scale   (D = rowsum(dO o O))
//   dV  += P^T dO,  dK += dS^T Q
//   dQ  += dS K     (dS^T through shared memory; fp32 atomics into a dQ
//                    accumulator, converted to the output dtype at the end)
// Masks are applied per element from each key's visible query range. No
// softcap, ALiBi or paged KV here (the generic backward runs those).
// Fragment layouts: see sm80_fwd.cuh.
#ifndef FA_CUDA_SM80_BWD_CUH
#define FA_CUDA_SM80_BWD_CUH

#include "common/dq_store.cuh" // the accumulator -> dq conversion
#include "common/dq_turns.cuh" // the deterministic order of the adds
#include "sm80_fwd.cuh"

namespace fa_sm80 {

/* 128 keys, 8 warps of 16 keys each (v1: 64 keys, 4 warps): each Q/dO
   tile copied to shared memory and each dQ row added to the accumulator
   serves twice the keys, halving those per FLOP (ncu of v1 at d128: the
   dQ reductions kept L2 66% busy). 104 KB of smem at d128; registers
   allow one CTA (8 warps) per SM, as v1's two CTAs of 4. */
constexpr int kBwdKeys = 128, kBwdWarps = 8;
/* q rows per inner step: 32 at d128, so that S^T and dP^T (16 registers
   each) fit beside the 128 registers of dK and dV; 64 at d64. */
template <int D> __host__ __device__ constexpr int bwd_rows() {
  return D >= 128 ? 32 : 64;
}

/* K, V; Q and dO double-buffered; dS^T; LSE and D double-buffered. */
template <int D> __host__ __device__ constexpr int bwd_smem_bytes() {
  return (2 * kBwdKeys + 4 * bwd_rows<D>()) * D * 2 +
         kBwdKeys * bwd_rows<D>() * 2 + 4 * bwd_rows<D>() * 4;
}

template <typename T, int D>
__global__ void __launch_bounds__(kBwdWarps * 32)
    bwd_kernel(const __grid_constant__ fa_gpu_params p, float *dq_acc) {
  constexpr int BK = kBwdKeys, BQ = bwd_rows<D>(), NT = kBwdWarps * 32;
  constexpr int CH = D / 8, ND = D / 8, NQ = BQ / 8;
  // dQ step: warp w takes q rows 16 (w % RG) .. and columns
  // (w / RG) * DW .. of dS K.
  constexpr int RG = BQ / 16, DW = D / (kBwdWarps / RG);
  typedef layout<D, D> L;    // K, V, Q, dO tiles: rows of D elements
  typedef layout<BQ, BQ> LS; // dS^T tile: [key][q], BQ wide
  static_assert(BQ % 32 == 0 && kBwdWarps % RG == 0, "dQ warp split");
  static_assert((BK * CH) % NT == 0 && (BQ * CH) % NT == 0, "tile copy");

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T *sK = reinterpret_cast<T *>(smem_raw);
  T *sV = sK + BK * D, *sQ = sV + BK * D, *sdO = sQ + 2 * BQ * D;
  T *sdS = sdO + 2 * BQ * D;
  float *sL = reinterpret_cast<float *>(sdS + BK * BQ), *sDl = sL + 2 * BQ;
  const uint32_t aK = smem_u32(sK), aV = smem_u32(sV), aQ = smem_u32(sQ),
                 adO = smem_u32(sdO), adS = smem_u32(sdS);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t4 = lane & 3;
  // (Deterministic dQ numbers a head's key blocks the other way round:
  // common/dq_turns.cuh.)
  const int nkb = (p.prob.seqlen_k + BK - 1) / BK;
  const bool turns = p.dq_turns != nullptr;
  const int jb = fa_cuda::bwd_key_block((int)(blockIdx.x % nkb), nkb, turns);
  const int hk = (int)(blockIdx.x / nkb % p.prob.heads_kv);
  const int b = (int)(blockIdx.x / nkb / p.prob.heads_kv);
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  const int storage = fa_seq_storage_k(&p.prob, b), col0 = jb * BK;
  if (col0 >= storage) return;
  T *gdk = (T *)p.dk.data, *gdv = (T *)p.dv.data;
  const T *gk = (const T *)p.k.data, *gv = (const T *)p.v.data;
  const T *gq = (const T *)p.q.data, *gdo = (const T *)p.d_o.data;

  // ---- K, V of the block (keys past sk become zeros) ----
#pragma unroll
  for (int it = 0; it < BK * CH / NT; it++) {
    const int idx = tid + it * NT, r = idx / CH, c = idx % CH, j = col0 + r;
    const bool ok = j < sk;
    const uint32_t so = L::offset(r, c) * 2;
    cp_async16(aK + so,
               ok ? gk + fa_seq_k_offset(&p.prob, &p.k, b, j, hk) + c * 8 : gk,
               ok ? 16 : 0);
    cp_async16(aV + so,
               ok ? gv + fa_seq_k_offset(&p.prob, &p.v, b, j, hk) + c * 8 : gv,
               ok ? 16 : 0);
  }
  cp_async_commit();

  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int n = 0; n < ND; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

  // This thread's keys (rows g and g + 8 of the warp's 16) and the queries
  // each sees: the per-element mask.
  const int kw = warp * 16;
  int qlo[2], qhi[2];
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int j = col0 + kw + g + 8 * hr;
    qlo[hr] = qhi[hr] = 0;
    if (j < sk) fa_flat_queries_of_key(&p.prob, j, sq, sk, &qlo[hr], &qhi[hr]);
  }
  const float sl2 = p.prob.scale * kLog2e;

  // Work items t = (q head of the group, q block): Q, dO, LSE and D of
  // item t + 1 load into the other buffer while item t computes.
  int r_first, nrb; // the q blocks that see some key of the block
  fa_gpu_bwd_q_blocks(&p.prob, col0, BQ, BK, sq, sk, &r_first, &nrb);
  const int items = nrb * p.prob.group;
  auto load_q = [&](int t, int buf) {
    const int h = hk * p.prob.group + t / nrb, r0 = r_first + t % nrb * BQ;
    const uint32_t qb = aQ + buf * BQ * D * 2, ob = adO + buf * BQ * D * 2;
#pragma unroll
    for (int it = 0; it < BQ * CH / NT; it++) {
      const int idx = tid + it * NT, r = idx / CH, c = idx % CH, i = r0 + r;
      const bool ok = i < sq;
      const uint32_t so = L::offset(r, c) * 2;
      cp_async16(qb + so,
                 ok ? gq + fa_seq_q_offset(&p.prob, &p.q, b, i, h) + c * 8 : gq,
                 ok ? 16 : 0);
      cp_async16(ob + so,
                 ok ? gdo + fa_seq_q_offset(&p.prob, &p.d_o, b, i, h) + c * 8
                    : gdo,
                 ok ? 16 : 0);
    }
    if (tid < BQ) {
      const int i = r0 + tid;
      float l = 0.0f, dl = 0.0f;
      if (i < sq) {
        const int64_t ri = fa_flat_row_index(&p.prob, b, h, i);
        l = p.lse_in[ri];
        dl = p.delta[ri];
      }
      // A row that sees no key has lse -inf; its P is 0 by the mask.
      sL[buf * BQ + tid] = l == -INFINITY ? 0.0f : l * kLog2e;
      sDl[buf * BQ + tid] = dl;
    }
  };
  int *pending = nullptr; // deterministic: the turn this CTA passes next
  if (items > 0) load_q(0, 0);
  cp_async_commit();
  cp_async_wait<0>(); // K, V and the first item
  __syncthreads();

  for (int t = 0; t < items; t++) {
    {
      const int buf = t & 1;
      const int h = hk * p.prob.group + t / nrb, r0 = r_first + t % nrb * BQ;
      if (t + 1 < items) load_q(t + 1, buf ^ 1);
      cp_async_commit();
      const uint32_t aQ_ = aQ + buf * BQ * D * 2, adO_ = adO + buf * BQ * D * 2;
      const float *sL_ = sL + buf * BQ, *sDl_ = sDl + buf * BQ;

      // ---- S^T = K Q^T and dP^T = V dO^T (16 keys x 64 rows a warp) ----
      float s[NQ][4], dp[NQ][4];
#pragma unroll
      for (int n = 0; n < NQ; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ks++) {
        uint32_t ak[4], av[4];
        const uint32_t ao = L::offset(kw + (lane & 7) + 8 * ((lane >> 3) & 1),
                                      ks * 2 + (lane >> 4)) *
                            2;
        ldsm_x4(ak, aK + ao);
        ldsm_x4(av, aV + ao);
#pragma unroll
        for (int np = 0; np < BQ / 16; np++) {
          uint32_t bq[4], bo[4];
          const uint32_t bo_ = L::offset(np * 16 + (lane & 7) + 8 * (lane >> 4),
                                         ks * 2 + ((lane >> 3) & 1)) *
                               2;
          ldsm_x4(bq, aQ_ + bo_);
          ldsm_x4(bo, adO_ + bo_);
          ops<T>::mma(s[2 * np], ak, bq[0], bq[1]);
          ops<T>::mma(s[2 * np + 1], ak, bq[2], bq[3]);
          ops<T>::mma(dp[2 * np], av, bo[0], bo[1]);
          ops<T>::mma(dp[2 * np + 1], av, bo[2], bo[3]);
        }
      }

      // ---- P^T, dS^T (masked elements: P = 0) ----
#pragma unroll
      for (int n = 0; n < NQ; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int hr = e >> 1, qc = n * 8 + 2 * t4 + (e & 1), i = r0 + qc;
          const bool vis = i >= qlo[hr] && i < qhi[hr];
          const float pr =
              vis ? ex2(fa_backward_exponent(fmaf(s[n][e], sl2, -sL_[qc])))
                  : 0.0f;
          s[n][e] = pr;
          dp[n][e] = pr * (dp[n][e] - sDl_[qc]) * p.prob.scale;
        }

        // ---- dV += P^T dO, dK += dS^T Q (the k dimension is the q rows) ----
#pragma unroll
      for (int kk = 0; kk < BQ / 16; kk++) {
        uint32_t ap[4], ad[4];
        ap[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        ap[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        ap[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        ap[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        ad[0] = pack2<T>(dp[2 * kk][0], dp[2 * kk][1]);
        ad[1] = pack2<T>(dp[2 * kk][2], dp[2 * kk][3]);
        ad[2] = pack2<T>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
        ad[3] = pack2<T>(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
        for (int np = 0; np < D / 16; np++) {
          uint32_t bo[4], bq[4];
          const uint32_t off =
              L::offset(kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1),
                        np * 2 + (lane >> 4)) *
              2;
          ldsm_x4_t(bo, adO_ + off);
          ldsm_x4_t(bq, aQ_ + off);
          ops<T>::mma(dv[2 * np], ap, bo[0], bo[1]);
          ops<T>::mma(dv[2 * np + 1], ap, bo[2], bo[3]);
          ops<T>::mma(dk[2 * np], ad, bq[0], bq[1]);
          ops<T>::mma(dk[2 * np + 1], ad, bq[2], bq[3]);
        }
      }

      // ---- dS^T to shared memory, then dQ (16 rows a warp) = dS K ----
#pragma unroll
      for (int n = 0; n < NQ; n++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
          *reinterpret_cast<uint32_t *>(sdS + LS::offset(kw + g + 8 * hr, n) +
                                        2 * t4) =
              pack2<T>(dp[n][2 * hr], dp[n][2 * hr + 1]);
      __syncthreads();
      // (Deterministic: every thread's adds of the last item are behind
      // this barrier: the next key block's turn at that q block.)
      if (pending && tid == 0) fa_cuda::dq_pass_turn(pending);
      pending = nullptr;
      // Deterministic: this q block's counter and turn, and a first look
      // while the tensor cores compute dQ.
      int *counter = nullptr, turn = 0, seen = 0;
      if (turns) {
        counter = fa_cuda::dq_turn_counter(p, b, h, r0);
        turn = fa_gpu_dq_turn(&p.prob, jb, nkb, r0, BQ, BK, sq, sk);
        seen = fa_cuda::dq_turn_peek(counter);
      }
      constexpr int NDW = DW / 8;
      const int qw = (warp % RG) * 16, dw = (warp / RG) * DW;
      float dq[NDW][4];
#pragma unroll
      for (int n = 0; n < NDW; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dq[n][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) {
        uint32_t a[4];
        // A = dS (rows q, cols keys) read transposed from dS^T [key][q].
        ldsm_x4_t(a, adS + LS::offset(kk * 16 + (lane & 7) + 8 * (lane >> 4),
                                      qw / 8 + ((lane >> 3) & 1)) *
                               2);
#pragma unroll
        for (int np = 0; np < DW / 16; np++) {
          uint32_t bk[4];
          ldsm_x4_t(bk,
                    aK + L::offset(kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1),
                                   dw / 8 + np * 2 + (lane >> 4)) *
                             2);
          ops<T>::mma(dq[2 * np], a, bk[0], bk[1]);
          ops<T>::mma(dq[2 * np + 1], a, bk[2], bk[3]);
        }
      }
      // Deterministic: wait for this q block's turn (the other CTAs' adds).
      if (turns) fa_cuda::dq_wait_turn(counter, turn, seen);
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const int i = r0 + qw + g + 8 * hr;
        if (i >= sq) continue;
        float *row =
            dq_acc +
            (((int64_t)b * p.prob.seqlen_q + i) * p.prob.heads_q + h) * D + dw;
#pragma unroll
        for (int n = 0; n < NDW; n++) {
          atomicAdd(row + n * 8 + 2 * t4, dq[n][2 * hr]);
          atomicAdd(row + n * 8 + 2 * t4 + 1, dq[n][2 * hr + 1]);
        }
      }
      pending = counter;  // (null unless deterministic)
      cp_async_wait<0>(); // the next item's Q, dO have landed
      __syncthreads();    // and nobody reads this buffer or dS^T any more
    }
  }
  if (pending && tid == 0) { // the last item's turn (after the loop's barrier)
    fa_cuda::dq_pass_turn(pending);
  }

  // ---- dK, dV of this warp's keys; rows past seqused_k get zeros ----
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int j = col0 + kw + g + 8 * hr;
    if (j >= storage) continue;
    const bool real = j < sk;
    T *rk = gdk + fa_seq_k_offset(&p.prob, &p.dk, b, j, hk) + 2 * t4;
    T *rv = gdv + fa_seq_k_offset(&p.prob, &p.dv, b, j, hk) + 2 * t4;
#pragma unroll
    for (int n = 0; n < ND; n++) {
      *reinterpret_cast<uint32_t *>(rk + n * 8) =
          real ? pack2<T>(dk[n][2 * hr], dk[n][2 * hr + 1]) : 0u;
      *reinterpret_cast<uint32_t *>(rv + n * 8) =
          real ? pack2<T>(dv[n][2 * hr], dv[n][2 * hr + 1]) : 0u;
    }
  }
}

template <typename T, int D>
int launch_bwd(const fa_gpu_params *p, float *dq_acc, void *stream) {
  constexpr int smem = bwd_smem_bytes<D>();
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = cudaFuncSetAttribute(
      bwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  const int64_t nkb = (p->prob.seqlen_k + kBwdKeys - 1) / kBwdKeys;
  const int64_t ctas = nkb * p->prob.heads_kv * p->prob.batch;
  // (no keys, or no queries: an empty grid is not launched)
  if (ctas > 0)
    bwd_kernel<T, D><<<(unsigned)ctas, kBwdWarps * 32, smem, s>>>(*p, dq_acc);
  if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
  return fa_cuda::launch_dq_store<T, D>(p, dq_acc, s);
}

} // namespace fa_sm80

/* extern "C" launcher fa_sm80_bwd_<dtype>_d<dim>. */
#define FA_SM80_BWD_INSTANCE(T, tname, D)                                      \
  extern "C" int fa_sm80_bwd_##tname##_d##D(const fa_gpu_params *p,            \
                                            float *dq_acc, void *stream) {     \
    return fa_sm80::launch_bwd<T, D>(p, dq_acc, stream);                       \
  }

#endif
