// SPDX-License-Identifier: MIT
// The pieces of the sm90 forward schedule (sm90_schedule.cuh, over the
// 16-bit and the FP8 operands) that stand alone: the setmaxnreg split of
// the producer and consumer warpgroups, the mbarriers, the persistent
// grid's work items and the consumers' masking and online softmax on the S
// fragment.
#ifndef FA_CUDA_SM90_ITEMS_CUH
#define FA_CUDA_SM90_ITEMS_CUH

#include <math.h>
#include <stdint.h>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "gpu_params.h"
#include "seq_rows.h"
#include "softmax.h"

namespace fa_sm90 {

/* Registers a warpgroup keeps after setmaxnreg: the producer 24, each of
   the NC consumers what is left of the SM's 65,536, rounded down to 8:
   NC = 2: 128 x 24 + 256 x 240 = 64,512; NC = 3: 128 x 24 + 384 x 160.
   (ptxas allocates each branch to its limit; at 232 the overlapped
   schedule of d128 spilled, at 240 it does not.) */
constexpr int kProducerRegs = 24;
template <int NC> __host__ __device__ constexpr int consumer_regs() {
  return (65536 - 128 * kProducerRegs) / (128 * NC) / 8 * 8;
}

/* The forwards' mbarriers at sBar (8 bytes each; see sm90_schedule.cuh's
   synchronisation table), k_full ... v_empty one per stage (+ 8 * stage):
   thread 0 initialises them (expect_tx barriers count 1, "empty" ones the
   NCT consumer threads), then the CTA syncs. */
struct bars {
  uint32_t q_full, q_empty, k_full, v_full, k_empty, v_empty;
};
template <int ST, int NCT>
__device__ __forceinline__ bars init_bars(uint32_t sBar) {
  bars b;
  b.q_full = sBar;
  b.q_empty = sBar + 8;
  b.k_full = sBar + 16;
  b.v_full = b.k_full + 8 * ST;
  b.k_empty = b.v_full + 8 * ST;
  b.v_empty = b.k_empty + 8 * ST;
  if (threadIdx.x == 0) {
    fa_cuda::bar_init(b.q_full, 1);
    fa_cuda::bar_init(b.q_empty, NCT);
    for (int s = 0; s < ST; s++) {
      fa_cuda::bar_init(b.k_full + 8 * s, 1);
      fa_cuda::bar_init(b.v_full + 8 * s, 1);
      fa_cuda::bar_init(b.k_empty + 8 * s, NCT);
      fa_cuda::bar_init(b.v_empty + 8 * s, NCT);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  return b;
}

/* One work item (batch, head, q block) of the plan: its sequence lengths
   and K/V block range; valid = 0 when the q block is past the sequence. */
struct item {
  int b, h, qb, sq, sk, row0, kb0, kb1, valid;
};

/* The persistent grid's work items, (batch, head, q block), in an order
   that keeps the K/V the running CTAs read in L2 and gives every CTA the
   same work.

   The q blocks of one (batch, head) are consecutive and the heads of one
   kv head next to each other, so the CTAs running at once read the same
   K/V: at 16k keys a tile reads 8 MB of K/V in ~0.25 ms, which without
   reuse would run at HBM speed (measured +25% at s = 512 ... 1k, +10% at
   4k, d128). Equal-length items (no growing mask): CTA c takes items c,
   c + grid, ...

   When later q blocks see more keys (causal, or a window unbounded on the
   left), the longest q blocks of all heads go out first (the plan's order,
   fa_work_item_of), which balances the static striding; the head-major
   order gave one CTA a head's longest blocks and another its shortest
   (-25% at 16k). But then the running CTAs read as many heads' K/V as
   there are CTAs, and where that is more than the L2 holds (d128, s = 1k:
   132 heads x 512 KB) ncu showed a 36% L2 hit rate and DRAM at 65% of its
   peak. There the launcher sets pair_items (pairs_wanted): the q blocks of
   a head go longest, shortest, second longest, second shortest, ... and
   CTA c takes the pairs 2c, 2c + 1, then 2c + 2 grid, 2c + 2 grid + 1, ...:
   each pair is n + 1 blocks of a head's n, so the CTAs stay balanced, and
   2 x grid consecutive items (a few MB of K/V) are in flight (runs 42-43 in
   bench/gpu/NOTES-cuda.md: L2 hits 36 -> 67% at 1k, +9-17% at d128/d256).
   Where the K/V fit (d64, s = 1k) the plan's order stays: pairs end in a
   coarser tail (-4% there). The paged kernels never pair (PAIRS = false in
   their producer, pair_items = 0 from their launcher): chunked prefill
   gained nothing from the order, and the paged producer, at 24-32
   registers, lost 2-5% to the extra code alone (run 45). */
template <bool PAIRS = true>
__device__ __forceinline__ bool pairs_on(const fa_gpu_params &p) {
  return PAIRS && p.pair_items;
}
template <bool PAIRS = true>
__device__ __forceinline__ int64_t first_work(const fa_gpu_params &p) {
  return pairs_on<PAIRS>(p) ? 2 * (int64_t)blockIdx.x : blockIdx.x;
}
template <bool PAIRS = true>
__device__ __forceinline__ int64_t next_work(const fa_gpu_params &p,
                                             int64_t w) {
  if (!pairs_on<PAIRS>(p)) return w + gridDim.x;
  return (w & 1) ? w + 2 * (int64_t)gridDim.x - 1 : w + 1;
}

/* Whether the items of p should go in pairs (above): the order grows and
   the K/V of the heads the CTAs of the plan's order read at once (batch x
   heads in a row of q blocks, GQA sharing their kv heads) exceed the L2.
   kv_bytes: the bytes of one kv head's K and V per key. */
static inline int pairs_wanted(const fa_gpu_params &p, int sms, int kv_bytes) {
  if (!fa_window_grows(p.prob.window_left, p.prob.window_right)) return 0;
  int dev = 0, l2 = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
    return 0;
  const int64_t heads = (int64_t)p.prob.batch * p.prob.heads_q;
  const int64_t running = heads < sms ? heads : sms;
  const int64_t kv_heads = (running + p.prob.group - 1) / p.prob.group;
  return kv_heads * p.prob.seqlen_k * kv_bytes > l2;
}

/* CTAs of the persistent grid: one per SM, fewer when the items (or their
   pairs) are fewer. */
static inline int64_t forward_grid(const fa_gpu_params &p, int sms) {
  const int64_t n = p.pair_items ? (p.plan.num_work + 1) / 2 : p.plan.num_work;
  return n < sms ? n : sms;
}

/* Work item w (see above); its sequence lengths and K/V block range. */
template <int BM, int BN, bool PAIRS = true>
__device__ __forceinline__ item item_of(const fa_gpu_params &p, int64_t w) {
  item t;
  const int nqb = p.plan.num_q_blocks;
  if (pairs_on<PAIRS>(p)) {
    const int64_t bh = w / nqb;
    const int r = (int)(w - bh * nqb);
    t.qb = (r & 1) ? r / 2 : nqb - 1 - r / 2;
    t.h = (int)(bh % p.prob.heads_q);
    t.b = (int)(bh / p.prob.heads_q);
  } else if (fa_window_grows(p.prob.window_left, p.prob.window_right)) {
    int split;
    fa_flat_work_item(&p.prob, &p.plan, w, &t.b, &t.h, &t.qb, &split);
  } else {
    const int64_t bh = w / nqb;
    t.qb = (int)(w - bh * nqb);
    t.h = (int)(bh % p.prob.heads_q);
    t.b = (int)(bh / p.prob.heads_q);
  }
  t.sq = fa_seq_rows_q(&p.prob, t.b);
  t.sk = fa_seq_rows_k(&p.prob, t.b);
  t.row0 = t.qb * BM;
  t.valid = t.row0 < t.sq;
  t.kb0 = t.kb1 = 0;
  if (t.valid)
    fa_flat_kv_blocks(&p.prob, BM, BN, t.sq, t.sk, t.qb, &t.kb0, &t.kb1);
  return t;
}

/* The consumers' row operations on a warpgroup's S accumulator fragment
   (m64nBN: a thread holds rows g and g + 8 of its warp's 16, hr = 0/1,
   columns 8j + 2 t4 + e).

   Masks the keys of the block at col0 that rows row0 + rbase (+ 8) do not
   see (fa_flat_visible) to -inf. */
template <int BN>
__device__ __forceinline__ void mask_rows(const fa_gpu_params &p,
                                          float (&sc)[BN / 2], int row, int sq,
                                          int sk, int col0, int t4) {
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    int lo, hi;
    fa_flat_visible(&p.prob, row + 8 * hr, sq, sk, &lo, &hi);
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int c = col0 + 8 * j + 2 * t4 + e;
        if (c < lo || c >= hi) sc[4 * j + 2 * hr + e] = -INFINITY;
      }
  }
}

/* P = exp2 of each score's exponent against its row's reference, in place,
   and the row sums into l. FUSED: one FMA per exponent
   (fa_softmax_exponent_fused), else the separately rounded product
   (fa_softmax_exponent). P_LOG2: P comes out times 2^P_LOG2 (the FP8
   kernel's fixed P scale, sm90_fp8_fwd.cuh), and l with it: in the fused
   form by a reference P_LOG2 lower (an offset common to the row, as the
   fused form's own, and no multiply per score), in the other by an exact
   multiply. */
template <int BN, bool FUSED, int P_LOG2>
__device__ __forceinline__ void
exp_rows(float (&sc)[BN / 2], const float (&ref)[2], float (&lrow)[2],
         const float (&alpha)[2], float mul) {
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const float r = FUSED ? ref[hr] - (float)P_LOG2 : ref[hr];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float &v = sc[4 * j + 2 * hr + e];
        v = fa_cuda::ex2(FUSED ? fa_softmax_exponent_fused(v, mul, r)
                               : fa_softmax_exponent(v, mul, r));
        if (!FUSED && P_LOG2 != 0) v *= (float)(1 << P_LOG2);
        sum += v;
      }
    lrow[hr] = lrow[hr] * alpha[hr] + sum;
  }
}

/* Online softmax over sc (in place: sc becomes P), m and l updated;
   alpha[hr] = the factor O must be rescaled by. The core's step
   (fa_softmax_step) in the exp2 domain, on this thread's fragment of the
   row (the 4 threads of a row reduce by shuffles), with the max NaN-sticky
   (fa_max_nan): a NaN score reaches l, O and the LSE. Both rows' steps
   come first and one warp vote per block picks the exponent form: a vote
   per row, between a row's max and its exps, keeps the compiler from
   interleaving the two rows' softmax (the d64 forward's cost is measured
   in bench/gpu/NOTES-cuda.md, runs 35-37). */
template <int BN, int P_LOG2 = 0>
__device__ __forceinline__ void softmax_rows(float (&sc)[BN / 2],
                                             float (&mrow)[2], float (&lrow)[2],
                                             float (&alpha)[2], float mul) {
  float ref[2];
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    float m = mrow[hr];
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
      m = fa_max_nan(m, fa_max_nan(sc[4 * j + 2 * hr], sc[4 * j + 2 * hr + 1]));
    m = fa_max_nan(m, __shfl_xor_sync(~0u, m, 1));
    m = fa_max_nan(m, __shfl_xor_sync(~0u, m, 2));
    const float ae = fa_softmax_step(&mrow[hr], m, mul, &ref[hr]);
    // Exactly 1 while the maximum stands (ex2.approx need not give 1 at 0):
    // no drift of l and O block after block.
    alpha[hr] = ae == 0.0f ? 1.0f : fa_cuda::ex2(ae);
  }
  // The fused form unless a row of this warp has a huge reference
  // (warp-uniform, so neither path diverges). With P scaled, ref - P_LOG2
  // must round by at most 0.5 too (|ref| < 2^23), or the row's largest P
  // could pass 2^(P_LOG2 + 0.81) and saturate in e4m3 (448).
  auto ok = [](float r) {
    return fa_softmax_fused_ok(r) && (P_LOG2 == 0 || fabsf(r) < 0x1p23f);
  };
  if (__all_sync(~0u, ok(ref[0]) && ok(ref[1])))
    exp_rows<BN, true, P_LOG2>(sc, ref, lrow, alpha, mul);
  else
    exp_rows<BN, false, P_LOG2>(sc, ref, lrow, alpha, mul);
}

} // namespace fa_sm90

#endif
