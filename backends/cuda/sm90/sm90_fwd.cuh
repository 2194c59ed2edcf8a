// SPDX-License-Identifier: MIT
// The sm90 forward mainloop (Hopper, sm_90a only): TMA copies into 128-byte
// swizzled shared memory completing on mbarriers, warp specialisation
// (a producer warpgroup that only issues copies, with its registers given
// to the consumer warpgroups by setmaxnreg), wgmma for S = Q K^T (both
// operands from shared memory) and O += P V (P from registers), the online
// softmax in base 2 with scale * log2(e) folded into one FFMA, and a
// persistent grid over (batch, head, q block) items (item_of,
// sm90_items.cuh).
//
// CTA = 1 + NC warpgroups (NC = block_m / 64: 2, or 3 at d64). Warpgroup 0
// (producer): one thread loads, per work item, Q (block_m rows) once and
// then every K/V block of the item's visible range into a ring of STAGES
// buffers. Warpgroups 1..NC (consumers): 64 rows of the item's q block
// each. All consumers walk the same K/V blocks and release each stage
// once they have read it.
//
// Synchronisation (all mbarriers; phases counted, never reset):
//   q_full      producer -> consumers   expect_tx of the Q bytes
//   q_empty     consumers -> producer   an arrival per consumer thread
//                                        after the last S of an item (the
//                                        next Q may then land)
//   k_full[s], v_full[s]                 expect_tx of a K (V) block
//   k_empty[s]  consumers -> producer   (likewise) once S has read K_s
//   v_empty[s]  consumers -> producer   (likewise) once P V has read V_s
// (K and V are released separately: in the overlapped schedule K_{j+1} is
// needed a whole block before V_{j+1}, so with two stages a shared release
// would expose the copy latency at every block.)
// The producer's first wait on an "empty" barrier uses the parity of the
// phase before the first one, which counts as complete.
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
// Semantics: lengths, windows, row addressing and score transforms come
// from backends/gpu/gpu_semantics.h, the same functions every GPU kernel
// uses. Keys past a sequence's end are masked; V rows past it are zeroed in
// shared memory before P V (in varlen or seqused_k they are another
// sequence's rows or unused cache slots, and 0 x NaN would leak).
//
// Paged K/V (PAGED): the producer is one warp; lane i copies box i of each
// K/V block (a page, or a block-sized slice of a longer page: sm90_paged.h)
// from a tensor map over the page pool, its block-table entry read by that
// lane, so the entries of a block are read in parallel. Lane 0 alone loads
// Q and arms each stage's barrier (expect_tx of the whole block, as dense).
// A box past the sequence or with an entry outside the pool is a
// coordinate outside the map: the copy engine writes zeros and reads
// nothing. The consumers are the same code (masks and the V tail as
// above).
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
#include "gpu_semantics.h"
#include "sm90_items.cuh"
#include "sm90_paged.h"
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

/* The paged producer keeps a page and a slot per lane across its waits: at
   24 registers ptxas spills 8-16 bytes of it (to L1, a few accesses per
   block). With three consumers (512 threads entering at 128 registers) 32
   leaves them their 160 (128 x 32 + 384 x 160 = 65,536) and nothing
   spills; with two (entering at 168) 24 is all that 240 each leaves. */
template <int NC, bool PAGED>
__host__ __device__ constexpr int producer_regs() {
  return PAGED && NC == 3 ? 32 : kProducerRegs;
}

/* ---- the kernel
 * --------------------------------------------------------------- */

template <typename T, int D, bool SPECIAL, bool PINGPONG, bool PAGED>
__global__ void __launch_bounds__(128 * (tile<D>::BM / 64 + 1), 1)
    fwd_kernel(const __grid_constant__ fa_gpu_params p,
               const __grid_constant__ CUtensorMap tq,
               const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv) {
  typedef tile<D> TL;
  constexpr int BM = TL::BM, BN = TL::BN, ST = TL::STAGES;
  constexpr int NC = BM / 64, NCT = 128 * NC; // consumers, their threads
  constexpr int NCB = D / 64;                 // 128-byte column blocks a row
  constexpr int ON = D > 128 ? 128 : D;       // N of one O wgmma
  constexpr int NO = D / ON;                  // O pieces
  constexpr uint32_t QB = BM * D * 2, KVB = BN * D * 2;
  static_assert(BM % 64 == 0 && (NC == 2 || NC == 3) && D % 64 == 0 &&
                    BN % 16 == 0,
                "tile shape");

  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = base + QB, sV = sK + ST * KVB;
  const uint32_t sBar = sV + ST * KVB;
  const bars bb = init_bars<ST, NCT>(sBar);
  const uint32_t q_full = bb.q_full, q_empty = bb.q_empty;
  const uint32_t k_full = bb.k_full, v_full = bb.v_full, k_empty = bb.k_empty,
                 v_empty = bb.v_empty;
  // (each + 8 * stage)

  if (threadIdx.x < 128) {
    // ---- producer warpgroup: one thread issues every copy (paged: one
    // warp, see the header) ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(
        producer_regs<NC, PAGED>()));
    // Paged: lane i copies box i of a block; lanes past the boxes leave.
    if (threadIdx.x >=
        (PAGED ? BN / fa_sm90_paged_box_rows(p.page_size, BN) : 1))
      return;
    const bool leader = !PAGED || threadIdx.x == 0;
    uint32_t it = 0, nq = 0;
    for (int64_t w = blockIdx.x; w < p.num_work; w += gridDim.x) {
      const item t = item_of<BM, BN>(p, w);
      if (!t.valid || t.kb0 >= t.kb1) continue;
      const int hk = t.h / p.group;
      if (leader) {
        bar_wait(q_empty, (nq & 1) ^ 1);
        bar_expect_tx(q_full, QB);
        const int qrow = (int)fa_gpu_start_q(&p, t.b) + t.row0;
        const int qbat = p.varlen_q ? 0 : t.b;
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
          tma_load(sQ + cb * BM * 128, &tq, q_full, cb * 64, qrow, t.h, qbat);
      }
      nq++;
      const int krow = (int)fa_gpu_start_k(&p, t.b);
      const int kbat = p.varlen_k ? 0 : t.b;
      for (int kb = t.kb0; kb < t.kb1; kb++, it++) {
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        if constexpr (PAGED) {
          // K and V of a key share their page and slot. The entry is read
          // before the wait, so its latency hides under it.
          const int lane = threadIdx.x;
          const int rows = fa_sm90_paged_box_rows(p.page_size, BN);
          const fa_sm90_paged_box bx =
              fa_sm90_paged_box_of(&p, t.b, t.sk, kb * BN + lane * rows);
          const unsigned lanes = rows == BN ? 1u : (1u << (BN / rows)) - 1;
          // Stage s of ring `buf` (K or V) once free: armed by lane 0, then
          // each lane's box.
          auto copy = [&](uint32_t buf, const CUtensorMap *map, uint32_t full,
                          uint32_t empty) {
            bar_wait(empty + 8 * s, ph ^ 1);
            if (leader) bar_expect_tx(full + 8 * s, KVB);
            __syncwarp(lanes);
#pragma unroll
            for (int cb = 0; cb < NCB; cb++)
              tma_load(buf + s * KVB + lane * rows * 128 + cb * BN * 128, map,
                       full + 8 * s, cb * 64, bx.slot, hk, bx.page);
          };
          copy(sK, &tk, k_full, k_empty);
          copy(sV, &tv, v_full, v_empty);
          continue;
        }
        bar_wait(k_empty + 8 * s, ph ^ 1);
        bar_expect_tx(k_full + 8 * s, KVB);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
          tma_load(sK + s * KVB + cb * BN * 128, &tk, k_full + 8 * s, cb * 64,
                   krow + kb * BN, hk, kbat);
        bar_wait(v_empty + 8 * s, ph ^ 1);
        bar_expect_tx(v_full + 8 * s, KVB);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
          tma_load(sV + s * KVB + cb * BN * 128, &tv, v_full + 8 * s, cb * 64,
                   krow + kb * BN, hk, kbat);
      }
    }
    return;
  }

  // ---- consumer warpgroups ----
  asm volatile(
      "setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(consumer_regs<NC>()));
  const int ct = threadIdx.x - 128, cw = ct / 128;
  const int warp = (ct % 128) / 32, lane = ct % 32, g = lane / 4, t4 = lane % 4;
  const int rbase = cw * 64 + warp * 16 + g; // tile row of the first row
  const float mul = SPECIAL ? 1.0f : p.scale * kLog2e;
  uint32_t it = 0, nq = 0;
  // Ping-pong: the consumers take turns issuing their GEMMs (consumer c
  // waits on named barrier 2 + c, then passes to the next), so that one's
  // tensor-core work overlaps the others' softmax. Consumer 0 goes first.
  auto turn_wait = [&] {
    if (cw == 0)
      asm volatile("bar.sync 2, 256;\n" ::: "memory");
    else if (NC == 2 || cw == 1)
      asm volatile("bar.sync 3, 256;\n" ::: "memory");
    else if constexpr (NC == 3)
      asm volatile("bar.sync 4, 256;\n" ::: "memory");
  };
  auto turn_pass = [&] {
    if (cw == NC - 1)
      asm volatile("bar.arrive 2, 256;\n" ::: "memory");
    else if (cw == 0)
      asm volatile("bar.arrive 3, 256;\n" ::: "memory");
    else if constexpr (NC == 3)
      asm volatile("bar.arrive 4, 256;\n" ::: "memory");
  };
  if (PINGPONG && cw == NC - 1) turn_pass();

  for (int64_t w = blockIdx.x; w < p.num_work; w += gridDim.x) {
    const item t = item_of<BM, BN>(p, w);
    if (!t.valid) continue;
    const int nrows = min(BM, t.sq - t.row0);
    float o[NO][ON / 2];
#pragma unroll
    for (int n = 0; n < NO; n++)
#pragma unroll
      for (int e = 0; e < ON / 2; e++) o[n][e] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};

    // Blocks every row of the tile sees whole need no mask (see sm80).
    int full_lo = 0, full_hi = -1;
    if (t.kb0 < t.kb1) {
      int lo_f, hi_f, lo_l, hi_l;
      fa_gpu_visible(&p, t.row0, t.sq, t.sk, &lo_f, &hi_f);
      fa_gpu_visible(&p, t.row0 + nrows - 1, t.sq, t.sk, &lo_l, &hi_l);
      full_lo = lo_l;
      full_hi = lo_f < hi_f ? hi_f - BN : -1;
    }

    // ---- the steps of one K/V block ----
    // S = Q K_s^T, issued (the caller commits and waits).
    auto issue_s = [&](float(&sc)[BN / 2], uint32_t s) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ks++) {
        const int cb = ks / 4, kk = ks % 4;
        const uint64_t da =
            desc_sw128(sQ + cb * BM * 128 + cw * 64 * 128 + kk * 32, 16, 1024);
        const uint64_t db =
            desc_sw128(sK + s * KVB + cb * BN * 128 + kk * 32, 16, 1024);
        wgmma<T, BN>::ss(sc, da, db, ks > 0);
      }
    };
    // O += P V_s, issued.
    auto issue_pv = [&](const uint32_t(&pa)[BN / 16][4], uint32_t s) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
        for (int n = 0; n < NO; n++) {
          const uint64_t db = desc_sw128(
              sV + s * KVB + n * 2 * BN * 128 + kk * 16 * 128, BN * 128, 1024);
          wgmma<T, ON>::rs(o[n], pa[kk], db, 1);
        }
    };
    // Scores of block kb: transform (softcap, ALiBi, negative scale), mask.
    auto scores = [&](float(&sc)[BN / 2], int kb) {
      const int col0 = kb * BN;
      if (SPECIAL) {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          const int i = t.row0 + rbase + 8 * hr;
#pragma unroll
          for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              float &v = sc[4 * j + 2 * hr + e];
              v = fa_gpu_transform(&p, p.scale * v, t.h, i,
                                   col0 + 8 * j + 2 * t4 + e,
                                   fa_gpu_shift(&p, t.sq, t.sk)) *
                  kLog2e;
            }
        }
      }
      if (col0 < full_lo || col0 > full_hi)
        mask_rows<BN>(p, sc, t.row0 + rbase, t.sq, t.sk, col0, t4);
    };
    // Online softmax over sc (in place: sc becomes P), m and l updated;
    // alpha[hr] = the factor O must be rescaled by. pack_p then packs P to
    // 16 bits (the accumulators of n8 chunks 2kk, 2kk+1 are, packed, the
    // m16n8k16 A fragment of keys 16kk..16kk+15).
    auto softmax = [&](float(&sc)[BN / 2], float(&alpha)[2]) {
      softmax_rows<BN>(sc, mrow, lrow, alpha, mul);
    };
    auto pack_p = [&](const float(&sc)[BN / 2], uint32_t(&pa)[BN / 16][4]) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          pa[kk][e] = pack2<T>(sc[8 * kk + 2 * e], sc[8 * kk + 2 * e + 1]);
    };
    auto rescale = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int n = 0; n < NO; n++)
#pragma unroll
        for (int j = 0; j < ON / 8; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) o[n][4 * j + e] *= alpha[e / 2];
    };
    // V rows past the sequence's end: zeroed (see the header), the stores
    // made visible to wgmma; both consumers take part.
    auto zero_tail = [&](uint32_t s, int kb) {
      const int valid = t.sk - kb * BN;
      const int chunks = (BN - valid) * NCB * 8;
      for (int c = ct; c < chunks; c += NCT) {
        const int r = valid + c / (NCB * 8), cb = (c / 8) % NCB, k = c % 8;
        const uint32_t a = sV + s * KVB + cb * BN * 128 + r * 128 + k * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a),
                     "r"(0)
                     : "memory");
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.sync 1, %0;\n" ::"n"(NCT) : "memory");
    };

    // S of block kb from stage s, alone (waited for), K released, Q too
    // after the item's last S; then its scores and softmax.
    auto s_block = [&](float(&sc)[BN / 2], float(&alpha)[2], uint32_t s,
                       uint32_t ph, int kb) {
      bar_wait(k_full + 8 * s, ph);
      wg_fence();
      issue_s(sc, s);
      wg_commit();
      wg_wait<0>();
      pin(sc);
      bar_arrive(k_empty + 8 * s);
      if (kb == t.kb1 - 1) bar_arrive(q_empty);
      scores(sc, kb);
      softmax(sc, alpha);
    };

    if (t.kb0 < t.kb1 && !PINGPONG) {
      // Serial schedule: S, softmax, P V, one block after the other.
      bar_wait(q_full, nq & 1);
      for (int kb = t.kb0; kb < t.kb1; kb++, it++) {
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        float sc[BN / 2], alpha[2];
        uint32_t pa[BN / 16][4];
        s_block(sc, alpha, s, ph, kb);
        pack_p(sc, pa);
        rescale(alpha);
        bar_wait(v_full + 8 * s, ph);
        if ((kb + 1) * BN > t.sk) zero_tail(s, kb);
#pragma unroll
        for (int n = 0; n < NO; n++) pin(o[n]);
        pin(pa);
        wg_fence();
        issue_pv(pa, s);
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int n = 0; n < NO; n++) pin(o[n]);
        bar_arrive(v_empty + 8 * s);
      }
      nq++;
    } else if (t.kb0 < t.kb1) {
      // Overlapped schedule (FlashAttention-3's two ideas, our code): in
      // the GEMM turn of block j a consumer issues S_{j+1} = Q K_{j+1}^T
      // and then O += P_j V_j, passes the turn, and computes the softmax
      // of S_{j+1} while P_j V_j still runs; O is rescaled once that
      // product is done, and P_{j+1} packed to 16 bits then (the running
      // wgmma reads P_j's registers until then).
      float sc[BN / 2], alpha[2];
      uint32_t pa[BN / 16][4];
      bar_wait(q_full, nq & 1);
      {
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        s_block(sc, alpha, s, ph, t.kb0); // alpha: O is still zero
        pack_p(sc, pa);
      }
      // One block's turn; NEXT: a block follows (its S is issued here).
      // Two instantiations rather than a run-time test, so that ptxas sees
      // a fixed number of wgmma groups in flight at each wait.
      auto step = [&](auto has_next, int kb) {
        constexpr bool NEXT = decltype(has_next)::value;
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        const uint32_t sn = (it + 1) % ST, phn = ((it + 1) / ST) & 1;
        bar_wait(v_full + 8 * s, ph);
        if ((kb + 1) * BN > t.sk) zero_tail(s, kb);
        if (NEXT) bar_wait(k_full + 8 * sn, phn);
        turn_wait();
#pragma unroll
        for (int n = 0; n < NO; n++) pin(o[n]);
        pin(pa);
        wg_fence();
        if constexpr (NEXT) {
          issue_s(sc, sn);
          wg_commit();
        }
        issue_pv(pa, s);
        wg_commit();
        turn_pass();
        if constexpr (NEXT) {
          wg_wait<1>();
          pin(sc);
          bar_arrive(k_empty + 8 * sn);
          if (kb + 1 == t.kb1 - 1) bar_arrive(q_empty);
          scores(sc, kb + 1);
          softmax(sc, alpha);
        }
        wg_wait<0>();
#pragma unroll
        for (int n = 0; n < NO; n++) pin(o[n]);
        bar_arrive(v_empty + 8 * s);
        if constexpr (NEXT) {
          rescale(alpha);
          pack_p(sc, pa);
        }
        it++;
      };
      for (int kb = t.kb0; kb < t.kb1 - 1; kb++) step(std::true_type(), kb);
      step(std::false_type(), t.kb1 - 1);
      nq++;
    }

    // ---- epilogue: 1/l (and the sink), O and LSE ----
    T *go = (T *)p.o.data;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      float l = lrow[hr];
      l += __shfl_xor_sync(~0u, l, 1);
      l += __shfl_xor_sync(~0u, l, 2);
      const int r = rbase + 8 * hr;
      if (r >= nrows) continue;
      const int i = t.row0 + r;
      // The row's reference (fa_softmax_step's) in natural units.
      const float m_nat =
          mrow[hr] == -INFINITY ? -INFINITY : fa_mul_rn(mrow[hr], mul) * kLn2;
      float lse;
      const float f = fa_softmax_finalize_sinks(m_nat, l, p.sinks, t.h, &lse);
      T *dst = go + fa_gpu_q_offset(&p, &p.o, t.b, i, t.h) + 2 * t4;
#pragma unroll
      for (int n = 0; n < NO; n++)
#pragma unroll
        for (int j = 0; j < ON / 8; j++)
          *reinterpret_cast<uint32_t *>(dst + n * ON + 8 * j) =
              pack2<T>(o[n][4 * j + 2 * hr] * f, o[n][4 * j + 2 * hr + 1] * f);
      if (p.lse && t4 == 0) p.lse[fa_gpu_row_index(&p, t.b, t.h, i)] = lse;
    }
  }
}

template <int D> constexpr int smem_bytes() {
  typedef tile<D> TL;
  // 1 KB to align the base to the swizzle atom, 256 B of barriers.
  return TL::BM * D * 2 + 2 * TL::STAGES * TL::BN * D * 2 + 1024 + 256;
}

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
  g.block_q = g.block_rows = TL::BM;
  g.block_k = TL::BN;
  g.pack_group = 1;
  g.num_splits = 1;
  g.num_q_blocks = (int)(((int64_t)g.seqlen_q + TL::BM - 1) / TL::BM);
  g.num_work = (int64_t)g.batch * g.heads_q * g.num_q_blocks;
  if (p->num_work <= 0) return 0;
  CUtensorMap tq, tk, tv;
  const int bq = p->varlen_q ? 1 : p->batch, bk = p->varlen_k ? 1 : p->batch;
  const int64_t rq = p->varlen_q ? rows_q : p->seqlen_q;
  const int64_t rk = p->varlen_k ? rows_k : p->seqlen_k;
  if (!make_map(&tq, p->q, p->dtype, D, rq, p->heads_q, bq, TL::BM)) return -1;
  if (PAGED) {
    // The pool as [num_pages][page_size][heads_kv][D]: one box a page.
    const int rows = fa_sm90_paged_box_rows(p->page_size, TL::BN);
    if (!make_map(&tk, p->k, p->dtype, D, p->page_size, p->heads_kv,
                  p->num_pages, rows) ||
        !make_map(&tv, p->v, p->dtype, D, p->page_size, p->heads_kv,
                  p->num_pages, rows))
      return -1;
  } else if (!make_map(&tk, p->k, p->dtype, D, rk, p->heads_kv, bk, TL::BN) ||
             !make_map(&tv, p->v, p->dtype, D, rk, p->heads_kv, bk, TL::BN)) {
    return -1;
  }
  const bool special =
      p->softcap > 0.0f || p->alibi_slopes || !(p->scale > 0.0f);
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
  constexpr int smem = smem_bytes<D>();
  static_assert(smem <= 232448, "sm90 tile over the 227 KB opt-in limit");
  cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  const int64_t grid = p->num_work < sms ? p->num_work : sms;
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
