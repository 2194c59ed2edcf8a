// SPDX-License-Identifier: MIT
// The sm90 backward (Hopper, sm_90a only): FlashAttention-2's algorithm
// (sm80_bwd.cuh) on wgmma and TMA. One CTA per (batch, kv head, block of
// 128 keys), two warpgroups of 64 keys each; K and V stay in shared memory,
// dK and dV accumulate in registers over the q heads of the group and the
// q blocks that see the keys (64 rows at d128, 128 at d64). Per q block
// (a "step"):
//   S^T  = K Q^T, dP^T = V dO^T          wgmma, both operands from smem
//   P^T  = exp2(S^T * scale * log2 e - LSE * log2 e)   (masked: 0)
//   dS^T = P^T (dP^T - D) * scale        (D = rowsum(dO o O), a pre-pass)
//   dV  += P^T dO, dK += dS^T Q          wgmma, P^T / dS^T from registers
//   dQ  += dS K                          dS^T stored transposed to smem by
//                                        stmatrix; dQ staged in smem and
//                                        added into an fp32 accumulator by
//                                        the copy engine (TMA reduce)
// Why this and not the sm80 kernel on sm90: that one keeps dK, dV, S and dP
// of 16 keys per warp in 255 registers with 8 warps per SM, feeds every
// mma.sync through ldmatrix, and adds dQ one float per atomic: ncu (d128,
// s 4k) shows 12% occupancy, 0.26 eligible warps per scheduler, 805M L2
// reduction requests, 126 TFLOPS. Here the tensor cores read Q, dO, K, dS
// straight from shared memory, a warpgroup owns 64 keys (4x the reuse of
// each Q/dO byte), and dQ is added 8 KB at a time by the copy engine.
//
// Pipeline (no producer warpgroup: one thread issues the copies, which are
// asynchronous): Q and dO of step t land by TMA in ring slot t % 3 on the
// mbarrier q_full[t % 3]; LSE and D of step t by cp.async in the same slot.
// Step t's copies are issued in step t - 2, after the CTA barrier that
// follows the dS stores, when every thread is done with step t - 3 (the
// slot's previous user), so a copy has a whole step to land. dS is double
// buffered: one warpgroup may store step t + 1's dS while the other still
// reads step t's for dQ; step t + 2 reuses t's buffer after barrier t + 1,
// which both pass only once done with step t. Step t + 1's S^T is issued
// behind step t's dQ GEMM and waited for at the end of step t (v4, run
// 56: see start_scores).
//
// dQ's adds (v3, run 55): each warpgroup stores its 64 x 64 fp32 tile of
// dQ to shared memory in the accumulator map's box layout (two boxes of 32
// columns, 128-byte swizzle) and one thread hands it to the copy engine,
// which adds it into L2 a line at a time. v2 added it from registers by
// red.global.add.v4 (16 bytes each, 8 per thread per step, after a shuffle):
// run 53 counted ~95 M of the d128 kernel's 1133 M instructions there, and
// the warps waited on the LSU queue before the next step's GEMMs. The
// staging tile is its own 32 KB at d128; at d64 it is the warpgroup's rows
// of the step's dS buffer (only that warpgroup's dQ reads them, and the
// next writer of the buffer, step t + 2, passes barrier t + 1 first). The
// deterministic mode adds the same way, in its order (common/dq_turns.cuh):
// the thread that issues a q block's adds waits for its turn first, and
// the turn passes once they are complete (v5, run 57; v3-v4 kept the
// ordered red.global adds from registers).
//
// Shared-memory tiles use the sm90 forward's layout (sm90_fwd.cuh,
// common/tma.cuh): 128-byte column blocks, 128-byte hardware swizzle; K, Q, dO,
// dS as K-major operands, dO, Q (for dV, dK) and K (for dQ) as MN-major B
// operands.
//
// Semantics as sm80_bwd.cuh: keys past a sequence's end (and q rows past
// it, in varlen the next sequence's) are zeroed in shared memory, so that
// P = 0 never meets another sequence's NaN; dK/dV rows past seqused_k are
// stored as zeros. Not here (the dispatcher sends these elsewhere): paged
// KV, softcap, ALiBi, scale <= 0, dims other than 64 and 128.
#ifndef FA_CUDA_SM90_BWD_CUH
#define FA_CUDA_SM90_BWD_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "common/dq_store.cuh" // the accumulator -> dq conversion
#include "common/dq_turns.cuh" // the deterministic order of the adds
#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma_sync.cuh"
#include "flashattn.h"
#include "gpu_params.h"
#include "seq_rows.h"
#include "softmax.h"
#include "sm90_wgmma.h"

namespace fa_sm90 {

using namespace fa_cuda; // PTX, TMA and wgmma helpers (backends/cuda/common)

constexpr int kBwdKeys = 128; // two warpgroups x 64 keys
constexpr int kBwdSlots = 3;  // Q/dO/LSE/D ring (see the header)
/* q rows per step (the N of S^T and dP^T): 64 at d128, where dK and dV
   take 128 registers and S^T, dP^T 64 more; 128 at d64 (dK, dV 64, S^T and
   dP^T 128), which halves the per-step costs (barrier, LSE/D, dQ
   reductions) per FLOP and lets dQ split by rows (v1, 64 rows at d64:
   0.80-0.95x FlashAttention-2 against 1.3x at d128). */
template <int D> __host__ __device__ constexpr int bwd_rows() {
  return D == 64 ? 128 : 64;
}

/* The dQ staging tile of its own (d128 only, see the header): 64 rows x
   128 fp32 columns. */
template <int D> __host__ __device__ constexpr int bwd_dq_stage_bytes() {
  return D == 128 ? bwd_rows<D>() * D * 4 : 0;
}

/* K, V; the Q/dO ring; dS twice; the dQ staging; LSE/D ring; 1 KB
   alignment; barriers. d128: 64 + 96 + 32 + 32 + 1.5 KB = 226.6 KB (of the
   227 KB opt-in); d64: 32 + 96 + 64 + 3 KB = 196 KB (one CTA per SM, as
   registers allow: 256 threads x up to 255). */
template <int D> __host__ __device__ constexpr int bwd_smem_bytes() {
  return 2 * kBwdKeys * D * 2 + kBwdSlots * 2 * bwd_rows<D>() * D * 2 +
         2 * bwd_rows<D>() * kBwdKeys * 2 + bwd_dq_stage_bytes<D>() +
         kBwdSlots * 2 * bwd_rows<D>() * 4 + 1024 + 64;
}

__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src)
               : "memory");
}

/* Four 8x8 16-bit matrices from the mma accumulator layout, each stored
   transposed: lane 8i + c gives the address of row c of matrix i's
   transpose (i.e. its column c). */
__device__ __forceinline__ void stsm_x4_t(uint32_t addr,
                                          const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, "
               "%2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// P^T of one step from its scores, in place: exp2 of the scaled score
// less the row's LSE. MASKED tests each score's query against the range
// [qlo, qhi) its key sees (0 outside); without it every score is visible,
// which saves two compares and a select per score (run 53: ~90 M of the
// d128 kernel's 1133 M instructions; run 54: 0-1.5% faster, the kernel
// being bound by latency more than by issue). Accumulator c = 4 j + 2 hr
// + e: key row 8 hr of the thread's pair, query 8 j + 2 t4 + e of the step.
template <int BQ, bool MASKED>
__device__ __forceinline__ void
p_from_scores(float (&sc)[BQ / 2], const float *lse_s, int r0, int t4,
              const int (&qlo)[2], const int (&qhi)[2], float sl2) {
#pragma unroll
  for (int j = 0; j < BQ / 8; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int qc = 8 * j + 2 * t4 + e, i = r0 + qc;
      const float l = lse_s[qc];
      // A row that sees no key has lse -inf; its P is 0 by the mask.
      const float l2 = l == -INFINITY ? 0.0f : l * kLog2e;
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        float &v = sc[4 * j + 2 * hr + e];
        const float p = ex2(fa_backward_exponent(fmaf(v, sl2, -l2)));
        v = !MASKED || (i >= qlo[hr] && i < qhi[hr]) ? p : 0.0f;
      }
    }
}

/* Zero rows [from, rows) of a tile of `rows` rows x D columns (all its
   128-byte blocks), all 256 threads taking part. For the tensor cores to
   read them, the caller then fences the async proxy and meets at a CTA
   barrier. */
/* The 128 threads of warpgroup wg meet (named barrier 2 + wg; 1 is the
   CTA's, 256 threads). */
__device__ __forceinline__ void wg_bar(int wg) {
  if (wg == 0)
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  else
    asm volatile("bar.sync 3, 128;\n" ::: "memory");
}

template <int D>
__device__ __forceinline__ void zero_rows(uint32_t tile, int rows, int from,
                                          int tid) {
  constexpr int NCB = D / 64;
  const int chunks = (rows - from) * NCB * 8;
  for (int c = tid; c < chunks; c += 256) {
    const int r = from + c / (NCB * 8), cb = (c / 8) % NCB, k = c % 8;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                     tile + cb * rows * 128 + r * 128 + k * 16),
                 "r"(0)
                 : "memory");
  }
}

/* TURNS: the deterministic mode (p.dq_turns set), a kernel of its own (its
   turn waits and passes compiled out of the other). */
template <typename T, int D, bool TURNS>
__global__ void __launch_bounds__(256, 1)
    bwd_kernel(const __grid_constant__ fa_gpu_params p,
               const __grid_constant__ CUtensorMap tq,
               const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv,
               const __grid_constant__ CUtensorMap tdo,
               const __grid_constant__ CUtensorMap tdq) {
  constexpr int BN = kBwdKeys, BQ = bwd_rows<D>(), NS = kBwdSlots;
  constexpr int NCB = D / 64;
  constexpr uint32_t KVB = BN * D * 2, QB = BQ * D * 2, SB = BQ * BN * 2;
  // dQ = dS K over all 128 keys, a 64 x 64 tile per warpgroup: at d128
  // (64 rows) each takes 64 of the columns (one 128-byte block of K), at
  // d64 (128 rows) each takes 64 of the rows.
  constexpr bool DQ_COLS = BQ == 64;
  static_assert((D == 64 && BQ == 128) || (D == 128 && BQ == 64),
                "head dims of the sm90 backward");

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t sK = base, sV = sK + KVB, sQ = sV + KVB; // + slot * QB
  const uint32_t sdO = sQ + NS * QB, sdS = sdO + NS * QB; // + (t & 1) * SB
  const uint32_t sDQ = sdS + 2 * SB; // d128: the dQ staging tile
  const uint32_t sLD = sDQ + bwd_dq_stage_bytes<D>(); // LSE[NS][BQ], D[NS][BQ]
  const uint32_t kv_full = sLD + NS * 2 * BQ * 4, q_full = kv_full + 8;
  float *sL = reinterpret_cast<float *>(smem_raw + (sLD - raw));
  float *sDl = sL + NS * BQ;

  const int tid = threadIdx.x, wg = tid / 128;
  const int warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4,
            t4 = lane % 4;
  // Head-major order: the key blocks of one (batch, kv head) are
  // consecutive CTAs, which run at the same time, walk the same q blocks and
  // so share their Q/dO reads and dQ accumulator lines in L2. v2 ran key
  // blocks slowest (causal's longest first), so the CTAs running at once
  // belonged to ~132 different heads: at s = 1k (b16) their dQ rows (69 MB)
  // overflowed the 50 MB L2 and every reduction went to HBM. Head-major
  // (run 26): d128 s 1k full 255 -> 302 TFLOPS, causal 192 -> 219; 16k
  // equal or better; causal 4k-8k 3-4% lower.
  // (Deterministic dQ numbers a head's key blocks the other way round:
  // common/dq_turns.cuh.)
  const int nkb = (p.prob.seqlen_k + BN - 1) / BN;
  constexpr bool turns = TURNS;
  const int jb = fa_cuda::bwd_key_block((int)(blockIdx.x % nkb), nkb, turns),
            bh = (int)(blockIdx.x / nkb);
  const int hk = bh % p.prob.heads_kv, b = bh / p.prob.heads_kv;
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  const int storage = fa_seq_storage_k(&p.prob, b), col0 = jb * BN;
  if (col0 >= storage) return;

  int r_first, nrb; // the q blocks that see some key of the block
  fa_gpu_bwd_q_blocks(&p.prob, col0, BQ, BN, sq, sk, &r_first, &nrb);
  const int steps = nrb * p.prob.group;
  // This thread's keys (rows g and g + 8 of its warp's 16) and the
  // queries each sees: the per-element mask.
  const int kr = wg * 64 + warp * 16 + g;
  int qlo[2], qhi[2];
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int j = col0 + kr + 8 * hr;
    qlo[hr] = qhi[hr] = 0;
    if (j < sk) fa_flat_queries_of_key(&p.prob, j, sq, sk, &qlo[hr], &qhi[hr]);
  }

  const int qbat = p.prob.varlen_q ? 0 : b, kbat = p.prob.varlen_k ? 0 : b;
  const int qrow0 = (int)fa_seq_start_q(&p.prob, b);
  const int krow0 = (int)fa_seq_start_k(&p.prob, b);
  auto head_of = [&](int t) { return hk * p.prob.group + t / nrb; };
  auto row_of = [&](int t) { return r_first + t % nrb * BQ; };
  // Step t's Q and dO (thread 0) ...
  auto issue_q = [&](int t) {
    const int s = t % NS, h = head_of(t), r0 = row_of(t);
    const uint32_t bar = q_full + 8 * s;
    bar_expect_tx(bar, 2 * QB);
#pragma unroll
    for (int cb = 0; cb < NCB; cb++) {
      tma_load(sQ + s * QB + cb * BQ * 128, &tq, bar, cb * 64, qrow0 + r0, h,
               qbat);
      tma_load(sdO + s * QB + cb * BQ * 128, &tdo, bar, cb * 64, qrow0 + r0, h,
               qbat);
    }
  };
  // ... and its LSE and D (threads 0 .. 2 BQ - 1; rows past the sequence:
  // 0).
  auto issue_ld = [&](int t) {
    if (tid < 2 * BQ) {
      const int s = t % NS, h = head_of(t), r = tid % BQ, i = row_of(t) + r;
      float *dst = (tid < BQ ? sL : sDl) + s * BQ + r;
      if (i < sq) {
        const int64_t ri = fa_flat_row_index(&p.prob, b, h, i);
        cp_async4(smem_u32(dst), tid < BQ ? p.lse_in + ri : p.delta + ri);
      } else {
        *dst = 0.0f;
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };

  if (tid == 0) {
    bar_init(kv_full, 1);
    for (int s = 0; s < NS; s++) bar_init(q_full + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) {
    bar_expect_tx(kv_full, 2 * KVB);
#pragma unroll
    for (int cb = 0; cb < NCB; cb++) {
      tma_load(sK + cb * BN * 128, &tk, kv_full, cb * 64, krow0 + col0, hk,
               kbat);
      tma_load(sV + cb * BN * 128, &tv, kv_full, cb * 64, krow0 + col0, hk,
               kbat);
    }
    for (int t = 0; t < NS - 1 && t < steps; t++) issue_q(t);
  }
  for (int t = 0; t < NS - 1 && t < steps; t++) issue_ld(t);
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  bar_wait(kv_full, 0);
  // Keys past the end: zeros (in varlen or seqused_k they are another
  // sequence's rows or unused cache slots).
  if (col0 + BN > sk) {
    zero_rows<D>(sK, BN, max(sk - col0, 0), tid);
    zero_rows<D>(sV, BN, max(sk - col0, 0), tid);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads(); // LSE/D of the first steps, the zeroed rows

  float dv[D / 2], dk[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; e++) dv[e] = dk[e] = 0.0f;
  const float sl2 = p.prob.scale * kLog2e;
  int *pending = nullptr; // deterministic: the turn this CTA passes next

  // S^T = K Q^T, dP^T = V dO^T (this warpgroup's 64 keys): acc = (rows of
  // a: this warpgroup's keys) . (rows of b)^T over D.
  auto gemm_nt = [&](float(&acc)[BQ / 2], uint32_t a, uint32_t b) {
    const uint64_t a0 = desc_sw128(a + wg * 64 * 128, 16, 1024),
                   b0 = desc_sw128(b, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      const int cb = ks / 4, kk = ks % 4;
      wgmma<T, BQ>::ss(acc, desc_add(a0, cb * BN * 128 + kk * 32),
                       desc_add(b0, cb * BQ * 128 + kk * 32), ks > 0);
    }
    wg_commit();
  };
  // Step t's Q and dO landed (q rows past the end zeroed: uniform branch,
  // all 256 threads), then its S^T issued. Step t + 1's is issued in step
  // t, behind its dQ GEMM, and waited for at the step's end (v4, run 56):
  // the tensor cores have S^T to work on while the warps store dQ and
  // meet, where v3 left them idle from the dQ GEMM's end to the next
  // step's first wgmma. No group is in flight across the loop's back edge
  // and every wait sees the same groups on every path (ptxas serialises
  // every wgmma of the kernel otherwise: advisories C7514, C7518), so the
  // last step repeats its own S^T, unused.
  float sc[BQ / 2];
  auto start_scores = [&](int t) {
    const int tt = t < steps ? t : t - 1, s = tt % NS, r0 = row_of(tt);
    if (t < steps) {
      bar_wait(q_full + 8 * s, (t / NS) & 1);
      if (r0 + BQ > sq) {
        zero_rows<D>(sQ + s * QB, BQ, sq - r0, tid);
        zero_rows<D>(sdO + s * QB, BQ, sq - r0, tid);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
      }
    }
    wg_fence();
    gemm_nt(sc, sK, sQ + s * QB);
  };
  if (steps > 0) {
    start_scores(0);
    wg_wait<0>();
  }

  for (int t = 0; t < steps; t++) {
    const int s = t % NS, h = head_of(t), r0 = row_of(t);
    const uint32_t qs = sQ + s * QB, dos = sdO + s * QB,
                   dss = sdS + (t & 1) * SB;

    float dp[BQ / 2];
    pin(sc); // S^T, done
    wg_fence();
    gemm_nt(dp, sV, dos);

    // ---- P^T (while dP^T runs), then dS^T ----
    // Both of this thread's keys see every query of the step (interior
    // blocks of every mask): no per-score test.
    const float *lse_s = sL + s * BQ, *d_s = sDl + s * BQ;
    if (r0 >= max(qlo[0], qlo[1]) && r0 + BQ <= min(qhi[0], qhi[1]))
      p_from_scores<BQ, false>(sc, lse_s, r0, t4, qlo, qhi, sl2);
    else
      p_from_scores<BQ, true>(sc, lse_s, r0, t4, qlo, qhi, sl2);
    wg_wait<0>();
    pin(dp);
#pragma unroll
    for (int j = 0; j < BQ / 8; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float dl = d_s[8 * j + 2 * t4 + e];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          const int c = 4 * j + 2 * hr + e;
          dp[c] = sc[c] * (dp[c] - dl) * p.prob.scale;
        }
      }
    // 16-bit A fragments (k16 step kk = queries 16 kk ..): see sm90_fwd's
    // pack_p. The dS^T ones are also what stmatrix stores.
    uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        pa[kk][e] = pack2<T>(sc[8 * kk + 2 * e], sc[8 * kk + 2 * e + 1]);
        da[kk][e] = pack2<T>(dp[8 * kk + 2 * e], dp[8 * kk + 2 * e + 1]);
      }

    // ---- dS (q-major: dQ's K-major A operand) by transposing stores ----
    // Matrix i of stmatrix kk holds keys kr - g + 8 (i & 1) .. +7 and
    // queries 16 kk + 8 (i >> 1) .. +7; lane 8 i + c addresses query row
    // 16 kk + 8 (i >> 1) + c, the 16-byte chunk of those 8 keys.
    {
      const int i = lane / 8, c = lane % 8;
      const int chunk = 2 * warp + (i & 1); // within the warpgroup's block
#pragma unroll
      for (int kk = 0; kk < BQ / 16; kk++) {
        const int q = 16 * kk + 8 * (i >> 1) + c;
        stsm_x4_t(dss + wg * BQ * 128 + q * 128 + ((chunk ^ (q & 7)) << 4),
                  da[kk]);
      }
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");

    // ---- dV += P^T dO, dK += dS^T Q ----
    pin(dv);
    pin(dk);
    pin(pa);
    pin(da);
    const uint64_t ddo = desc_sw128(dos, BQ * 128, 1024),
                   dq0 = desc_sw128(qs, BQ * 128, 1024);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
      wgmma<T, D>::rs(dv, pa[kk], desc_add(ddo, kk * 16 * 128), 1);
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
      wgmma<T, D>::rs(dk, da[kk], desc_add(dq0, kk * 16 * 128), 1);
    wg_commit();

    // Both warpgroups' dS are stored; everyone is done with step t - 1, so
    // its ring slot takes step t + NS - 1's copies; the copy engine is done
    // reading step t - 1's dQ staging (waited for here, a step after its
    // issue, so it costs nothing), which this step refills. Deterministic:
    // step t - 1's adds are complete, and the next key block gets its turn
    // at that q block.
    if (tid % 128 == 0) {
      if (turns) {
        bulk_wait();
        asm volatile("fence.proxy.async.global;\n" ::: "memory");
      } else {
        bulk_wait_read();
      }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    if (pending && tid == 0) fa_cuda::dq_pass_turn(pending);
    pending = nullptr;
    if (t + NS - 1 < steps) {
      if (tid == 0) issue_q(t + NS - 1);
      issue_ld(t + NS - 1);
    }

    // ---- dQ = dS K: this warpgroup's part ----
    float dq[32];
    wg_fence();
    {
      const uint32_t rows = DQ_COLS ? 0 : wg * 64 * 128;
      const uint32_t cols = DQ_COLS ? wg * BN * 128 : 0;
      const uint64_t a0 = desc_sw128(dss + rows, 16, 1024),
                     b0 = desc_sw128(sK + cols, BN * 128, 1024);
#pragma unroll
      for (int ks = 0; ks < BN / 16; ks++)
        wgmma<T, 64>::ss_bt(dq,
                            desc_add(a0, (ks / 4) * BQ * 128 + (ks % 4) * 32),
                            desc_add(b0, ks * 16 * 128), ks > 0);
    }
    wg_commit();
    // Deterministic: this q block's counter and turn, and a first look.
    int *counter = nullptr, turn = 0, seen = 0;
    if (turns) {
      counter = fa_cuda::dq_turn_counter(p, b, h, r0);
      turn = fa_gpu_dq_turn(&p.prob, jb, nkb, r0, BQ, BN, sq, sk);
      seen = fa_cuda::dq_turn_peek(counter);
    }
    // dV, dK done (their P^T, dS^T registers free again: with them still
    // in flight the next S^T's 32 would spill), then the next step's S^T,
    // then dQ done.
    wg_wait<1>();
    start_scores(t + 1);
    wg_wait<1>();
    pin(dq);
    pin(dv);
    pin(dk);

    // The staging tile's two 32-column boxes (128-byte rows, swizzled); the
    // accumulator element of (row, column) of this warpgroup's tile is
    // dq_acc[b][r0 + row0 + row][h][dcol0 + column].
    {
      const uint32_t box =
          DQ_COLS ? sDQ + wg * 64 * 64 * 4 : dss + wg * 64 * 128;
      constexpr uint32_t box_step = DQ_COLS ? 64 * 128 : BQ * 128;
      const int row0 = DQ_COLS ? 0 : wg * 64, dcol0 = DQ_COLS ? wg * 64 : 0;
      // d64: every warp of this warpgroup is done reading these dS rows.
      if (!DQ_COLS) wg_bar(wg);
        // c = 4 j + 2 hr + e: row 16 warp + g + 8 hr, column 8 j + 2 t4 + e;
        // a warp's 8-byte stores fill 16-byte chunks evenly (two wavefronts).
#pragma unroll
      for (int j = 0; j < 8; j++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          const int row = warp * 16 + g + 8 * hr;
          const int chunk = 2 * (j % 4) + t4 / 2;
          const uint32_t at = box + (j / 4) * box_step + row * 128 +
                              ((chunk ^ (row & 7)) << 4) + (t4 & 1) * 8;
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at),
                       "f"(dq[4 * j + 2 * hr]), "f"(dq[4 * j + 2 * hr + 1])
                       : "memory");
        }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      wg_bar(wg);
      if (tid % 128 == 0) {
        // Deterministic: this q block's turn first (the earlier key
        // blocks' adds complete), then the copy engine's adds after them.
        if (turns) {
          fa_cuda::dq_wait_turn_one(counter, turn, seen);
          asm volatile("fence.proxy.async.global;\n" ::: "memory");
        }
        tma_reduce_add(&tdq, box, dcol0, r0 + row0, h, b);
        tma_reduce_add(&tdq, box + box_step, dcol0 + 32, r0 + row0, h, b);
        bulk_commit();
      }
    }
    pending = counter; // (null unless deterministic)
    wg_wait<0>();      // the next step's S^T
  }
  // The last step's dQ adds: the staging must outlive the copy engine's
  // reads of it, and (deterministic) the adds must be complete before the
  // turn passes.
  if (tid % 128 == 0) {
    bulk_wait();
    if (turns) asm volatile("fence.proxy.async.global;\n" ::: "memory");
  }
  if (pending) { // the last step's turn
    __syncthreads();
    if (tid == 0) fa_cuda::dq_pass_turn(pending);
  }

  // ---- dK, dV of this thread's keys; rows past seqused_k get zeros ----
  T *gdk = (T *)p.dk.data, *gdv = (T *)p.dv.data;
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int j = col0 + kr + 8 * hr;
    if (j >= storage) continue;
    const bool real = j < sk;
    T *rk = gdk + fa_seq_k_offset(&p.prob, &p.dk, b, j, hk) + 2 * t4;
    T *rv = gdv + fa_seq_k_offset(&p.prob, &p.dv, b, j, hk) + 2 * t4;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      *reinterpret_cast<uint32_t *>(rk + 8 * n) =
          real ? pack2<T>(dk[4 * n + 2 * hr], dk[4 * n + 2 * hr + 1]) : 0u;
      *reinterpret_cast<uint32_t *>(rv + 8 * n) =
          real ? pack2<T>(dv[4 * n + 2 * hr], dv[4 * n + 2 * hr + 1]) : 0u;
    }
  }
}

/* Returns a cudaError_t, or -1 (nothing launched) when the tensors cannot
   be described to the copy engine (supports() checks the same conditions
   beforehand, so the caller reports -1 as an error).
   dq_acc: zeroed fp32 accumulator of batch x seqlen_q x heads_q x D
   (16-byte aligned); p->delta: D filled. */
template <typename T, int D>
int launch_bwd(const fa_gpu_params *p, float *dq_acc, int64_t rows_q,
               int64_t rows_k, void *stream) {
  CUtensorMap tq, tk, tv, tdo, tdq;
  const int bq = p->prob.varlen_q ? 1 : p->prob.batch,
            bk = p->prob.varlen_k ? 1 : p->prob.batch;
  const int64_t rq = p->prob.varlen_q ? rows_q : p->prob.seqlen_q;
  const int64_t rk = p->prob.varlen_k ? rows_k : p->prob.seqlen_k;
  if (!make_map(&tq, p->q, p->prob.dtype, D, rq, p->prob.heads_q, bq,
                bwd_rows<D>()) ||
      !make_map(&tdo, p->d_o, p->prob.dtype, D, rq, p->prob.heads_q, bq,
                bwd_rows<D>()) ||
      !make_map(&tk, p->k, p->prob.dtype, D, rk, p->prob.heads_kv, bk,
                kBwdKeys) ||
      !make_map(&tv, p->v, p->prob.dtype, D, rk, p->prob.heads_kv, bk,
                kBwdKeys) ||
      !make_acc_map(&tdq, dq_acc, D, p->prob.seqlen_q, p->prob.heads_q,
                    p->prob.batch, 64))
    return -1;
  constexpr int smem = bwd_smem_bytes<D>();
  static_assert(smem <= 232448, "sm90 backward over the 227 KB opt-in limit");
  cudaStream_t s = (cudaStream_t)stream;
  auto kernel = p->dq_turns ? bwd_kernel<T, D, true> : bwd_kernel<T, D, false>;
  cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  const int64_t ctas = (int64_t)((p->prob.seqlen_k + kBwdKeys - 1) / kBwdKeys) *
                       p->prob.heads_kv * p->prob.batch;
  if (ctas > 0)
    kernel<<<(unsigned)ctas, 256, smem, s>>>(*p, tq, tk, tv, tdo, tdq);
  if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
  return fa_cuda::launch_dq_store<T, D>(p, dq_acc, s);
}

} // namespace fa_sm90

/* extern "C" launcher fa_sm90_bwd_<dtype>_d<dim>. */
#define FA_SM90_BWD_INSTANCE(T, tname, D)                                      \
  extern "C" int fa_sm90_bwd_##tname##_d##D(const fa_gpu_params *p,            \
                                            float *dq_acc, int64_t rows_q,     \
                                            int64_t rows_k, void *stream) {    \
    return fa_sm90::launch_bwd<T, D>(p, dq_acc, rows_q, rows_k, stream);       \
  }

#endif
