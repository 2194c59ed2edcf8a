// SPDX-License-Identifier: MIT
// The sm90 forward schedule (Hopper, sm_90a only), written once for every
// operand type: the producer warpgroup's TMA loop, the consumers' work-item
// loop, the mbarrier protocol, the serial and overlapped block schedules
// and the epilogue. What depends on the operands (element size, tile
// shapes, the wgmma calls, how P becomes an A fragment, where V comes from
// and whether its tail needs zeroing, the descales) is an operand traits
// struct OPS, one per kernel family: fwd16_ops (sm90_fwd.cuh: bf16/f16)
// and fp8_ops (sm90_fp8_fwd.cuh: e4m3/e5m2 with a V^T pre-pass). A new
// dtype on sm90 writes a traits struct and a kernel that instantiates
// forward<OPS, ...>; nothing here changes.
//
// CTA = 1 + NC warpgroups (NC = BM / 64: 2, or 3 at 16-bit d64).
// Warpgroup 0 (producer): one thread loads, per work item, Q (BM rows)
// once and then every K/V block of the item's visible range into a ring
// of ST buffers. Warpgroups 1..NC (consumers): 64 rows of the item's q
// block each, registers raised by setmaxnreg (sm90_items.cuh). All
// consumers walk the same K/V blocks and release each stage once they have
// read it. The work items come from a persistent grid (item_of).
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
// Shared memory: Q (OPS::QB bytes), then ST K blocks (OPS::KB), ST V blocks
// (OPS::VB), then the barriers, from a 1 KB-aligned base (the 128-byte
// swizzle atom); each tile is stored as OPS::NCB column blocks of 128
// bytes a row, [rows][128 B] each, as the TMA writes them.
//
// Semantics: lengths, windows, row addressing and score transforms are the
// core's (core/seq_rows.h, core/flat_problem.h), the same functions every
// kernel uses; keys past a sequence's end are masked (mask_rows), and the
// online softmax is softmax_rows (sm90_items.cuh).
//
// Paged K/V (PAGED, 16-bit only): the producer is one warp; lane i copies
// box i of each K/V block (a page, or a block-sized slice of a longer
// page: sm90_paged.h) from a tensor map over the page pool, its
// block-table entry read by that lane, so the entries of a block are read
// in parallel. Lane 0 alone loads Q and arms each stage's barrier
// (expect_tx of the whole block, as dense). A box past the sequence or
// with an entry outside the pool is a coordinate outside the map: the copy
// engine writes zeros and reads nothing. The consumers are the same code.
//
// OPS provides (all constexpr or __device__ static):
//   BM, BN, ST            q rows of a tile, keys of a block, stages
//   NCB, CB               128-byte column blocks of a Q/K row, and the
//                         elements of one (the TMA's column coordinate)
//   QB, KB, VB            bytes of the Q tile, a K block, a V block
//   NO, ON                O's wgmma pieces and the N of each
//   PK                    A fragments of P (one per wgmma K step)
//   P_LOG2                P leaves the softmax times 2^P_LOG2 (0, or the
//                         FP8 kernel's fixed scale); l is divided back
//   out_t                 O's element
//   softmax_mul(p, b, hk, mul)  the base-2 softmax's factor of a raw
//                         score (mul: scale * log2 e, or 1 with SPECIAL)
//   out_scale(p, b, hk)   O's factor besides 1/l
//   load_v(sV, s, map, full, kb, krow, hk, kbat, b)  the TMA copies of V
//                         block kb into stage s of the V ring at sV
//   issue_s(sc, sQ, sK, s, cw)  S = Q K^T from K stage s, issued
//   issue_pv(o, pa, sV, s)      O += P V from V stage s, issued
//   pack_p(sc, pa)        P (the S accumulators) to A fragments
//   zero_v_tail(sV, s, valid, ct)  V rows valid.. of stage s zeroed where
//                         0 x NaN could leak (a no-op where V's source
//                         has zeros there)
//   store_o(dst, off, x0, x1, f)  O elements x0 f, x1 f at dst + off
#ifndef FA_CUDA_SM90_SCHEDULE_CUH
#define FA_CUDA_SM90_SCHEDULE_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma_sync.cuh"
#include "gpu_params.h"
#include "seq_rows.h"
#include "sm90_items.cuh"
#include "sm90_paged.h"
#include "softmax.h"

namespace fa_sm90 {

using namespace fa_cuda; // PTX, TMA and wgmma helpers (backends/cuda/common)

/* The paged producer keeps a page and a slot per lane across its waits: at
   24 registers ptxas spills 8-16 bytes of it (to L1, a few accesses per
   block). With three consumers (512 threads entering at 128 registers) 32
   leaves them their 160 (128 x 32 + 384 x 160 = 65,536) and nothing
   spills; with two (entering at 168) 24 is all that 240 each leaves. */
template <int NC, bool PAGED>
__host__ __device__ constexpr int producer_regs() {
  return PAGED && NC == 3 ? 32 : kProducerRegs;
}

/* ---- the producer warpgroup: one thread issues every copy (paged: one
   warp, see the header) ---- */
template <class OPS, bool PAGED>
__device__ __forceinline__ void
produce(const fa_gpu_params &p, const CUtensorMap &tq, const CUtensorMap &tk,
        const CUtensorMap &tv, uint32_t sQ, uint32_t sK, uint32_t sV,
        const bars &bb) {
  constexpr int BM = OPS::BM, BN = OPS::BN, ST = OPS::ST, NC = BM / 64;
  constexpr int NCB = OPS::NCB, CB = OPS::CB;
  constexpr uint32_t QB = OPS::QB, KB = OPS::KB, VB = OPS::VB;
  static_assert(!PAGED || KB == VB, "paged K and V blocks share a geometry");
  const uint32_t q_full = bb.q_full, q_empty = bb.q_empty;
  const uint32_t k_full = bb.k_full, v_full = bb.v_full, k_empty = bb.k_empty,
                 v_empty = bb.v_empty;
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(
      producer_regs<NC, PAGED>()));
  // Paged: lane i copies box i of a block; lanes past the boxes leave.
  if (threadIdx.x >=
      (PAGED ? BN / fa_sm90_paged_box_rows(p.prob.page_size, BN) : 1))
    return;
  const bool leader = !PAGED || threadIdx.x == 0;
  uint32_t it = 0, nq = 0;
  for (int64_t w = first_work<!PAGED>(p); w < p.plan.num_work;
       w = next_work<!PAGED>(p, w)) {
    const item t = item_of<BM, BN, !PAGED>(p, w);
    if (!t.valid || t.kb0 >= t.kb1) continue;
    const int hk = t.h / p.prob.group;
    if (leader) {
      bar_wait(q_empty, (nq & 1) ^ 1);
      bar_expect_tx(q_full, QB);
      const int qrow = (int)fa_seq_start_q(&p.prob, t.b) + t.row0;
      const int qbat = p.prob.varlen_q ? 0 : t.b;
#pragma unroll
      for (int cb = 0; cb < NCB; cb++)
        tma_load(sQ + cb * BM * 128, &tq, q_full, cb * CB, qrow, t.h, qbat);
    }
    nq++;
    const int krow = (int)fa_seq_start_k(&p.prob, t.b);
    const int kbat = p.prob.varlen_k ? 0 : t.b;
    for (int kb = t.kb0; kb < t.kb1; kb++, it++) {
      const uint32_t s = it % ST, ph = (it / ST) & 1;
      if constexpr (PAGED) {
        // K and V of a key share their page and slot. The entry is read
        // before the wait, so its latency hides under it.
        const int lane = threadIdx.x;
        const int rows = fa_sm90_paged_box_rows(p.prob.page_size, BN);
        const fa_sm90_paged_box bx =
            fa_sm90_paged_box_of(&p, t.b, t.sk, kb * BN + lane * rows);
        const unsigned lanes = rows == BN ? 1u : (1u << (BN / rows)) - 1;
        // Stage s of ring `buf` (K or V) once free: armed by lane 0, then
        // each lane's box.
        auto copy = [&](uint32_t buf, const CUtensorMap *map, uint32_t full,
                        uint32_t empty) {
          bar_wait(empty + 8 * s, ph ^ 1);
          if (leader) bar_expect_tx(full + 8 * s, KB);
          __syncwarp(lanes);
#pragma unroll
          for (int cb = 0; cb < NCB; cb++)
            tma_load(buf + s * KB + lane * rows * 128 + cb * BN * 128, map,
                     full + 8 * s, cb * CB, bx.slot, hk, bx.page);
        };
        copy(sK, &tk, k_full, k_empty);
        copy(sV, &tv, v_full, v_empty);
        continue;
      }
      bar_wait(k_empty + 8 * s, ph ^ 1);
      bar_expect_tx(k_full + 8 * s, KB);
#pragma unroll
      for (int cb = 0; cb < NCB; cb++)
        tma_load(sK + s * KB + cb * BN * 128, &tk, k_full + 8 * s, cb * CB,
                 krow + kb * BN, hk, kbat);
      bar_wait(v_empty + 8 * s, ph ^ 1);
      bar_expect_tx(v_full + 8 * s, VB);
      OPS::load_v(sV, s, &tv, v_full + 8 * s, kb, krow, hk, kbat, t.b);
    }
  }
}

/* ---- the consumer warpgroups ----
   SPECIAL: the score transform (softcap, ALiBi, a scale <= 0) applied to
   every score; PINGPONG: the overlapped schedule, else the serial one;
   PAIRS: whether the items may go in pairs (sm90_items.cuh; not paged). */
template <class OPS, bool SPECIAL, bool PINGPONG, bool PAIRS>
__device__ __forceinline__ void consume(const fa_gpu_params &p, uint32_t sQ,
                                        uint32_t sK, uint32_t sV,
                                        const bars &bb) {
  constexpr int BM = OPS::BM, BN = OPS::BN, ST = OPS::ST;
  constexpr int NC = BM / 64;
  constexpr int NO = OPS::NO, ON = OPS::ON, PK = OPS::PK;
  typedef typename OPS::out_t TO;
  const uint32_t q_full = bb.q_full, q_empty = bb.q_empty;
  const uint32_t k_full = bb.k_full, v_full = bb.v_full, k_empty = bb.k_empty,
                 v_empty = bb.v_empty;
  asm volatile(
      "setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(consumer_regs<NC>()));
  const int ct = threadIdx.x - 128, cw = ct / 128;
  const int warp = (ct % 128) / 32, lane = ct % 32, g = lane / 4, t4 = lane % 4;
  const int rbase = cw * 64 + warp * 16 + g; // tile row of the first row
  const float mul0 = SPECIAL ? 1.0f : p.prob.scale * kLog2e;
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

  for (int64_t w = first_work<PAIRS>(p); w < p.plan.num_work;
       w = next_work<PAIRS>(p, w)) {
    const item t = item_of<BM, BN, PAIRS>(p, w);
    if (!t.valid) continue;
    const int nrows = min(BM, t.sq - t.row0);
    const int hk = t.h / p.prob.group;
    const float mul = OPS::softmax_mul(p, t.b, hk, mul0);
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
      fa_flat_visible(&p.prob, t.row0, t.sq, t.sk, &lo_f, &hi_f);
      fa_flat_visible(&p.prob, t.row0 + nrows - 1, t.sq, t.sk, &lo_l, &hi_l);
      full_lo = lo_l;
      full_hi = lo_f < hi_f ? hi_f - BN : -1;
    }

    // ---- the steps of one K/V block ----
    auto issue_s = [&](float(&sc)[BN / 2], uint32_t s) {
      OPS::issue_s(sc, sQ, sK, s, cw);
    };
    auto issue_pv = [&](const uint32_t(&pa)[PK][4], uint32_t s) {
      OPS::issue_pv(o, pa, sV, s);
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
              v = fa_flat_transform(&p.prob, p.prob.scale * v, t.h, i,
                                    col0 + 8 * j + 2 * t4 + e,
                                    fa_flat_shift(&p.prob, t.sq, t.sk)) *
                  kLog2e;
            }
        }
      }
      if (col0 < full_lo || col0 > full_hi)
        mask_rows<BN>(p, sc, t.row0 + rbase, t.sq, t.sk, col0, t4);
    };
    // Online softmax over sc (in place: sc becomes P), m and l updated;
    // alpha[hr] = the factor O must be rescaled by; then pack_p packs P.
    auto softmax = [&](float(&sc)[BN / 2], float(&alpha)[2]) {
      softmax_rows<BN, OPS::P_LOG2>(sc, mrow, lrow, alpha, mul);
    };
    auto pack_p = [&](const float(&sc)[BN / 2], uint32_t(&pa)[PK][4]) {
      OPS::pack_p(sc, pa);
    };
    auto rescale = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int n = 0; n < NO; n++)
#pragma unroll
        for (int j = 0; j < ON / 8; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) o[n][4 * j + e] *= alpha[e / 2];
    };
    // V rows past the sequence's end (if OPS must zero them).
    auto zero_tail = [&](uint32_t s, int kb) {
      OPS::zero_v_tail(sV, s, t.sk - kb * BN, ct);
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
        uint32_t pa[PK][4];
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
      // product is done, and P_{j+1} packed then (the running wgmma reads
      // P_j's registers until then).
      float sc[BN / 2], alpha[2];
      uint32_t pa[PK][4];
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

    // ---- epilogue: the output factor / l (and the sink), O and LSE ----
    const float fo = OPS::out_scale(p, t.b, hk);
    TO *go = (TO *)p.o.data;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      float l = lrow[hr];
      l += __shfl_xor_sync(~0u, l, 1);
      l += __shfl_xor_sync(~0u, l, 2);
      l *= 1.0f / (float)(1 << OPS::P_LOG2); // exact: P's scale off l
      const int r = rbase + 8 * hr;
      if (r >= nrows) continue;
      const int i = t.row0 + r;
      // The row's reference (fa_softmax_step's) in natural units.
      const float m_nat =
          mrow[hr] == -INFINITY ? -INFINITY : fa_mul_rn(mrow[hr], mul) * kLn2;
      float lse;
      const float f =
          fa_softmax_finalize_sinks(m_nat, l, p.prob.sinks, t.h, &lse) * fo;
      TO *dst = go + fa_seq_q_offset(&p.prob, &p.o, t.b, i, t.h) + 2 * t4;
#pragma unroll
      for (int n = 0; n < NO; n++)
#pragma unroll
        for (int j = 0; j < ON / 8; j++)
          OPS::store_o(dst, n * ON + 8 * j, o[n][4 * j + 2 * hr],
                       o[n][4 * j + 2 * hr + 1], f);
      if (p.lse && t4 == 0)
        p.lse[fa_flat_row_index(&p.prob, t.b, t.h, i)] = lse;
    }
  }
}

/* A forward kernel's whole body: the shared-memory layout and barriers,
   then the producer or consumer part of the CTA. smem_raw: the kernel's
   dynamic shared memory (declared by each kernel, in its namespace: the
   symbol is part of its PTX). */
template <class OPS, bool SPECIAL, bool PINGPONG, bool PAGED>
__device__ __forceinline__ void
forward(const fa_gpu_params &p, const CUtensorMap &tq, const CUtensorMap &tk,
        const CUtensorMap &tv, unsigned char *smem_raw) {
  constexpr int NCT = 128 * (OPS::BM / 64);
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = base + OPS::QB, sV = sK + OPS::ST * OPS::KB;
  const uint32_t sBar = sV + OPS::ST * OPS::VB;
  const bars bb = init_bars<OPS::ST, NCT>(sBar);
  if (threadIdx.x < 128) {
    produce<OPS, PAGED>(p, tq, tk, tv, sQ, sK, sV, bb);
    return;
  }
  consume<OPS, SPECIAL, PINGPONG, !PAGED>(p, sQ, sK, sV, bb);
}

/* A forward kernel over the schedule, fwd_kernel of the namespace it
   stands in (after the template line that gives its parameters): NC
   consumer warpgroups, the operand traits OPS (the variadic part, so that
   it may hold commas), SPECIAL, PINGPONG, PAGED as forward's. Q, K and V's
   source come as tensor maps, __grid_constant__ so that the TMA reads them
   where the launch put them. */
#define FA_SM90_FWD_KERNEL(NC, SPECIAL, PINGPONG, PAGED, ...)                  \
  __global__ void __launch_bounds__(128 * ((NC) + 1), 1)                       \
      fwd_kernel(const __grid_constant__ fa_gpu_params p,                      \
                 const __grid_constant__ CUtensorMap tq,                       \
                 const __grid_constant__ CUtensorMap tk,                       \
                 const __grid_constant__ CUtensorMap tv) {                     \
    extern __shared__ unsigned char smem_raw[];                                \
    fa_sm90::forward<__VA_ARGS__, SPECIAL, PINGPONG, PAGED>(p, tq, tk, tv,     \
                                                            smem_raw);         \
  }

/* Dynamic shared memory of a forward: 1 KB to align the base to the
   swizzle atom, 256 B of barriers. */
template <class OPS> constexpr int smem_bytes() {
  return OPS::QB + OPS::ST * (OPS::KB + OPS::VB) + 1024 + 256;
}

} // namespace fa_sm90

#endif
