// SPDX-License-Identifier: MIT
// The sm90 16-bit forward (Hopper, sm_90a only; bf16 and f16, head dims
// 64/128/256): the schedule of sm90_schedule.cuh (TMA copies into 128-byte
// swizzled shared memory completing on mbarriers, a producer warpgroup
// that only issues copies, consumer warpgroups taking turns at the tensor
// cores, a persistent grid over (batch, head, q block) items) over the
// 16-bit operands below: wgmma for S = Q K^T (both operands from shared
// memory) and O += P V (P from registers), the online softmax in base 2
// with scale * log2(e) folded into one FFMA. The tile of each head dim is
// sm90_tiles.def's row.
//
// Shared-memory layout: a row of D 16-bit values is split into D/64 blocks
// of 128 bytes; each block of a tile is stored [rows][128 B] with the
// hardware's 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)),
// exactly what the TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and what a
// wgmma descriptor with layout type 1 reads. Q and K are K-major operands
// (stride between 8-row groups: 1024 B; a k16 step advances 32 B inside the
// 128-byte row); V is read MN-major (transposed B): 64 columns per block,
// the next 64 at LBO = block rows x 128 B, 8-key groups 1024 B apart.
//
// V rows past a sequence's end are zeroed in shared memory before P V (in
// varlen or seqused_k they are another sequence's rows or unused cache
// slots, and 0 x NaN would leak).
//
// Paged K/V (PAGED): the schedule's paged producer (sm90_schedule.cuh)
// over the page pool's tensor maps (sm90_paged.h); the consumers are the
// same code.
//
// Not here (the dispatcher sends these to the sm80 kernel): page sizes
// sm90_paged.h cannot cut into boxes, split-KV partials, head_dim !=
// head_dim_v, dims other than 64/128/256.
#ifndef FA_CUDA_SM90_FWD_CUH
#define FA_CUDA_SM90_FWD_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <type_traits>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma_sync.cuh"
#include "flashattn.h"
#include "gpu_params.h"
#include "seq_rows.h"
#include "sm90_items.cuh"
#include "sm90_paged.h"
#include "sm90_schedule.cuh"
#include "sm90_wgmma.h"
#include "softmax.h"

namespace fa_sm90 {

using namespace fa_cuda; // PTX, TMA and wgmma helpers (backends/cuda/common)

template <int D> struct tile;
#define FA_SM90_TILE(d, bm, bn, st)                                            \
  template <> struct tile<d> {                                                 \
    static constexpr int BM = bm, BN = bn, STAGES = st;                        \
  };
#include "sm90_tiles.def"
#undef FA_SM90_TILE

/* ---- the operands: 16-bit Q, K, V (see the header's layout) ---- */
template <typename T, int D> struct fwd16_ops {
  typedef tile<D> TL;
  static constexpr int BM = TL::BM, BN = TL::BN, ST = TL::STAGES;
  static constexpr int NCB = D / 64, CB = 64;  // 128-byte column blocks a row
  static constexpr int ON = D > 128 ? 128 : D; // N of one O wgmma
  static constexpr int NO = D / ON;            // O pieces
  static constexpr int PK = BN / 16;           // k16 steps of P V
  static constexpr int P_LOG2 = 0;             // P unscaled
  static constexpr uint32_t QB = BM * D * 2, KB = BN * D * 2, VB = KB;
  typedef T out_t;
  static_assert(BM % 64 == 0 && (BM / 64 == 2 || BM / 64 == 3) && D % 64 == 0 &&
                    BN % 16 == 0,
                "tile shape");

  __device__ __forceinline__ static float softmax_mul(const fa_gpu_params &,
                                                      int, int, float mul) {
    return mul;
  }
  __device__ __forceinline__ static float out_scale(const fa_gpu_params &, int,
                                                    int) {
    return 1.0f;
  }
  // V is stored like K: [keys][D], loaded as K is.
  __device__ __forceinline__ static void load_v(uint32_t sV, uint32_t s,
                                                const CUtensorMap *map,
                                                uint32_t full, int kb, int krow,
                                                int hk, int kbat, int) {
#pragma unroll
    for (int cb = 0; cb < NCB; cb++)
      tma_load(sV + s * VB + cb * BN * 128, map, full, cb * 64, krow + kb * BN,
               hk, kbat);
  }
  // S = Q K_s^T: D / 16 k16 steps, 4 of them in each 128-byte block.
  __device__ __forceinline__ static void
  issue_s(float (&sc)[BN / 2], uint32_t sQ, uint32_t sK, uint32_t s, int cw) {
    const uint64_t a0 = desc_sw128(sQ + cw * 64 * 128, 16, 1024),
                   b0 = desc_sw128(sK + s * KB, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      const int cb = ks / 4, kk = ks % 4;
      wgmma<T, BN>::ss(sc, desc_add(a0, cb * BM * 128 + kk * 32),
                       desc_add(b0, cb * BN * 128 + kk * 32), ks > 0);
    }
  }
  // O += P V_s, V read MN-major (transposed B).
  __device__ __forceinline__ static void issue_pv(float (&o)[NO][ON / 2],
                                                  const uint32_t (&pa)[PK][4],
                                                  uint32_t sV, uint32_t s) {
    const uint64_t b0 = desc_sw128(sV + s * VB, BN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
      for (int n = 0; n < NO; n++)
        wgmma<T, ON>::rs(o[n], pa[kk],
                         desc_add(b0, n * 2 * BN * 128 + kk * 16 * 128), 1);
  }
  // P to 16 bits: the accumulators of n8 chunks 2kk, 2kk+1 are, packed,
  // the m16n8k16 A fragment of keys 16kk..16kk+15.
  __device__ __forceinline__ static void pack_p(const float (&sc)[BN / 2],
                                                uint32_t (&pa)[PK][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        pa[kk][e] = pack2<T>(sc[8 * kk + 2 * e], sc[8 * kk + 2 * e + 1]);
  }
  // V rows past the sequence's end: zeroed (see the header), the stores
  // made visible to wgmma; all consumers take part.
  __device__ __forceinline__ static void zero_v_tail(uint32_t sV, uint32_t s,
                                                     int valid, int ct) {
    constexpr int NCT = 128 * (BM / 64);
    const int chunks = (BN - valid) * NCB * 8;
    for (int c = ct; c < chunks; c += NCT) {
      const int r = valid + c / (NCB * 8), cb = (c / 8) % NCB, k = c % 8;
      const uint32_t a = sV + s * VB + cb * BN * 128 + r * 128 + k * 16;
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0)
                   : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync 1, %0;\n" ::"n"(NCT) : "memory");
  }
  __device__ __forceinline__ static void store_o(T *dst, int off, float x0,
                                                 float x1, float f) {
    *reinterpret_cast<uint32_t *>(dst + off) = pack2<T>(x0 * f, x1 * f);
  }
};

/* ---- the kernel: the schedule over the 16-bit operands ---- */
template <typename T, int D, bool SPECIAL, bool PINGPONG, bool PAGED>
FA_SM90_FWD_KERNEL(tile<D>::BM / 64, SPECIAL, PINGPONG, PAGED, fwd16_ops<T, D>)

/* Returns a cudaError_t, or -1 (nothing launched) when the tensors cannot
   be described to the copy engine (supports() checks the same conditions
   beforehand, so the caller reports -1 as an error).
   in: the problem (its plan fields are replaced here by this kernel's
   geometry: q blocks of the tile's BM rows, one head per item, no split);
   rows_q / rows_k: storage rows of varlen Q / K (0 when dense); serial: 1
   for the serial schedule (no ping-pong, no overlap of softmax and P V),
   kept to measure what the overlap buys (FA_SM90_SERIAL; dense only).
   PAGED: K/V are the page pool (sm90_paged.h), in the kernels of that
   instantiation (its own translation unit, fa_sm90_fwd_paged_*). */
template <typename T, int D, bool PAGED = false>
int launch(const fa_gpu_params *in, int64_t rows_q, int64_t rows_k, int sms,
           int serial, void *stream) {
  typedef tile<D> TL;
  fa_gpu_params g = *in;
  const fa_gpu_params *p = &g;
  g.plan.block_q = g.plan.block_rows = TL::BM;
  g.plan.block_k = TL::BN;
  g.plan.pack_group = 1;
  g.plan.num_splits = 1;
  g.plan.num_q_blocks = (int)(((int64_t)g.prob.seqlen_q + TL::BM - 1) / TL::BM);
  g.plan.num_work =
      (int64_t)g.prob.batch * g.prob.heads_q * g.plan.num_q_blocks;
  if (p->plan.num_work <= 0) return 0;
  CUtensorMap tq, tk, tv;
  const int bq = p->prob.varlen_q ? 1 : p->prob.batch,
            bk = p->prob.varlen_k ? 1 : p->prob.batch;
  const int64_t rq = p->prob.varlen_q ? rows_q : p->prob.seqlen_q;
  const int64_t rk = p->prob.varlen_k ? rows_k : p->prob.seqlen_k;
  if (!make_map(&tq, p->q, p->prob.dtype, D, rq, p->prob.heads_q, bq, TL::BM))
    return -1;
  if (PAGED) {
    // The pool as [num_pages][page_size][heads_kv][D]: one box a page.
    const int rows = fa_sm90_paged_box_rows(p->prob.page_size, TL::BN);
    if (!make_map(&tk, p->k, p->prob.dtype, D, p->prob.page_size,
                  p->prob.heads_kv, p->prob.num_pages, rows) ||
        !make_map(&tv, p->v, p->prob.dtype, D, p->prob.page_size,
                  p->prob.heads_kv, p->prob.num_pages, rows))
      return -1;
  } else if (!make_map(&tk, p->k, p->prob.dtype, D, rk, p->prob.heads_kv, bk,
                       TL::BN) ||
             !make_map(&tv, p->v, p->prob.dtype, D, rk, p->prob.heads_kv, bk,
                       TL::BN)) {
    return -1;
  }
  const bool special =
      p->prob.softcap > 0.0f || p->prob.alibi_slopes || !(p->prob.scale > 0.0f);
  // With softcap/ALiBi only d128 overlaps: the transform code spilled in
  // the overlapped schedule at d256 (96 bytes) and d64 (236 bytes, 160
  // registers for three consumers); their serial schedule spills nothing.
  const bool pp = !serial;
  constexpr bool kSpecialPP = D == 128;
  auto kernel = fwd_kernel<T, D, false, true, PAGED>;
  if constexpr (PAGED) {
    // Each transform's default schedule only (half the kernels to build).
    if (special) kernel = fwd_kernel<T, D, true, kSpecialPP, true>;
  } else {
    kernel = special ? (pp ? fwd_kernel<T, D, true, kSpecialPP, false>
                           : fwd_kernel<T, D, true, false, false>)
                     : (pp ? fwd_kernel<T, D, false, true, false>
                           : fwd_kernel<T, D, false, false, false>);
  }
  constexpr int smem = smem_bytes<fwd16_ops<T, D>>();
  static_assert(smem <= 232448, "sm90 tile over the 227 KB opt-in limit");
  cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  g.pair_items = PAGED ? 0 : pairs_wanted(g, sms, 2 * D * 2);
  const int64_t grid = forward_grid(g, sms);
  kernel<<<(unsigned)grid, 128 * (TL::BM / 64 + 1), smem,
           (cudaStream_t)stream>>>(g, tq, tk, tv);
  return (int)cudaGetLastError();
}

} // namespace fa_sm90

/* One instantiation: extern "C" launcher fa_sm90_fwd_<dtype>_d<dim>. */
#define FA_SM90_FWD_INSTANCE(T, tname, D)                                      \
  extern "C" int fa_sm90_fwd_##tname##_d##D(                                   \
      const fa_gpu_params *p, int64_t rows_q, int64_t rows_k, int sms,         \
      int serial, void *stream) {                                              \
    return fa_sm90::launch<T, D>(p, rows_q, rows_k, sms, serial, stream);      \
  }

/* Its paged K/V counterpart: fa_sm90_fwd_paged_<dtype>_d<dim>. */
#define FA_SM90_FWD_PAGED_INSTANCE(T, tname, D)                                \
  extern "C" int fa_sm90_fwd_paged_##tname##_d##D(                             \
      const fa_gpu_params *p, int64_t rows_q, int64_t rows_k, int sms,         \
      int serial, void *stream) {                                              \
    return fa_sm90::launch<T, D, true>(p, rows_q, rows_k, sms, serial,         \
                                       stream);                                \
  }

#endif
