// SPDX-License-Identifier: MIT
// The sm80 forward mainloop (FlashAttention-2 class): mma.sync m16n8k16
// (fp16/bf16 in, fp32 accumulate), ldmatrix from XOR-swizzled shared
// memory, a cp.async pipeline of the tile's `stages` K/V blocks, and the
// online softmax in base 2 with scale * log2(e) folded into one FFMA. Runs
// on sm80 and later (sm90 too: the Hopper path with wgmma would be a
// separate file).
//
// FP8 inputs (e4m3, e5m2: sm80_input.cuh) run the same mainloop on f16
// tiles: their rows are decoded on the way to shared memory, through
// registers instead of cp.async, and the descales ride on the scale
// (scale * dq * dk, the one factor of the scores) and on the output factor
// (dv, with 1/l), as in the sm90 FP8 forward; O is stored in the problem's
// output dtype (f32, f16 or bf16).
//
// One CTA per plan work item (batch, head, q block, kv split); warp w owns
// rows [w * 16 * MT, (w + 1) * 16 * MT) of the q block. Every feature of
// the problem is handled here at run time, by uniform branches: masks
// (causal both ways, windows; only blocks that cut a window are masked),
// softcap, ALiBi, sinks, GQA, varlen, seqused_k, paged KV (rows addressed
// through the block table as they are copied), LSE, split partials.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit A/B): lane = 4 g + t.
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..),
//                   a3 = (g+8, 2t+8..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8 fp32):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// so the S accumulators of two adjacent n-tiles are, packed to 16 bits, the
// A fragment of P for the P.V product, with no data movement.
#ifndef FA_CUDA_SM80_FWD_CUH
#define FA_CUDA_SM80_FWD_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/ptx.cuh"
#include "cuda_internal.h"
#include "flashattn.h"
#include "gpu_params.h"
#include "input_decode.h"
#include "seq_rows.h"
#include "sm80_input.cuh"
#include "sm80_tiles.h"
#include "softmax.h"

namespace fa_sm80 {

using namespace fa_cuda; // PTX helpers (backends/cuda/common)

/* ---- the tile table as template arguments ------------------------------- */

/* Variant 0: the main tile of a head dim; 1: its decode tile (B_r 16). */
template <int D, int V> struct tile;
#define FA_TILE_ROW(v, d, bq, bk, w, mt, qr, pitch, stages)                    \
  template <> struct tile<d, v> {                                              \
    static constexpr int BQ = bq, BK = bk, NW = w, MT = mt, QREG = qr,         \
                         PITCH = pitch, NST = stages;                          \
  };
#define FA_TILE(...) FA_TILE_ROW(0, __VA_ARGS__)
#define FA_DECODE_TILE(...) FA_TILE_ROW(1, __VA_ARGS__)
#include "sm80_tiles.def"
#undef FA_TILE
#undef FA_DECODE_TILE
#undef FA_TILE_ROW

/* ---- PTX wrappers ---------------------------------------------------------
 */

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr)
      : "memory");
}

template <typename T> struct ops;
template <> struct ops<__nv_bfloat16> {
  static __device__ __forceinline__ void
  mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct ops<__half> {
  static __device__ __forceinline__ void
  mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

/* ---- shared-memory layout --------------------------------------------------
   Rows of PITCH 16-bit elements in 16-byte chunks. When the row is a
   multiple of 64 elements, chunk c of row r lives at c ^ (r & 7): the 8 rows
   an ldmatrix reads (or a phase of cp.async writes) then hit 8 different
   bank groups. Other widths are padded by 16 bytes per row instead. */
template <int D, int PITCH> struct layout {
  static constexpr bool kSwizzle = D % 64 == 0 && PITCH == D;
  static __device__ __forceinline__ int offset(int row, int chunk) {
    return row * PITCH + ((kSwizzle ? (chunk ^ (row & 7)) : chunk) << 3);
  }
  // Byte offset of (row, chunk 2 s + c) from the lane part `base` =
  // row * PITCH * 2 + ((c ^ (row & 7)) << 4). Swizzled rows are multiples
  // of 128 bytes and 2 s + c = 2 s ^ c, so the chunk's low 3 bits are one
  // XOR with the constant (32 s) & 127 and its higher bits an addition.
  // Offsets that are multiples of 128 bytes (whole rows, tiles, stages)
  // commute with it: callers add them after, as immediates.
  static __device__ __forceinline__ uint32_t step(uint32_t base, int s) {
    return kSwizzle ? (base ^ (uint32_t)((32 * s) & 127)) +
                          (uint32_t)((32 * s) & ~127)
                    : base + (uint32_t)(32 * s);
  }
  // The lane part of row r (r & 7 = the lane's row in its 8x8 matrix) and
  // chunk bit c.
  static __device__ __forceinline__ uint32_t lane_base(int r, int c) {
    return (uint32_t)(r * PITCH * 2) +
           (uint32_t)((kSwizzle ? (c ^ (r & 7)) : c) << 4);
  }
};

/* A value the compiler must recompute where it is used: keeps loop-invariant
   code motion from hoisting dozens of per-iteration addresses out of the
   main loop (which would cost registers the accumulators need). */
template <bool ON = true> __device__ __forceinline__ int64_t opaque(int64_t x) {
  if (ON) asm volatile("" : "+l"(x));
  return x;
}
template <bool ON = true>
__device__ __forceinline__ uint32_t opaque32(uint32_t x) {
  if (ON) asm volatile("" : "+r"(x));
  return x;
}

/* ---- the online softmax, one named step per function ---------------------
   Scores are kept in "units" u with exp(score) = 2^(u * mul): mul is
   scale * log2(e) for plain scores (so u is the raw q.k and the scale rides
   on the FFMA of the exponent), 1 when softcap/ALiBi/negative scale made
   the kernel transform scores into base-2 logits first. */

/* Row maximum over this thread's values, then across the 4 lanes of a row;
   NaN-sticky (fa_max_nan, core/softmax.h). */
template <int NT8>
__device__ __forceinline__ float row_max(const float (&s)[NT8][4], int hr,
                                         float m) {
#pragma unroll
  for (int n = 0; n < NT8; n++)
    m = fa_max_nan(m, fa_max_nan(s[n][2 * hr], s[n][2 * hr + 1]));
  m = fa_max_nan(m, __shfl_xor_sync(~0u, m, 1));
  return fa_max_nan(m, __shfl_xor_sync(~0u, m, 2));
}

/* P = exp2 of each of row hr's exponents (units of mul) against its
   reference, in place; returns this thread's part of the row sum. FUSED:
   fa_softmax_exponent_fused (one FMA), else fa_softmax_exponent. */
template <bool FUSED, int NT8>
__device__ __forceinline__ float exp_row(float (&s)[NT8][4], int hr, float mul,
                                         float ref) {
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < NT8; n++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      float &v = s[n][2 * hr + e];
      v = ex2(FUSED ? fa_softmax_exponent_fused(v, mul, ref)
                    : fa_softmax_exponent(v, mul, ref));
      sum += v;
    }
  return sum;
}

/* exp_row over every row of the thread's m tiles, the sums into l
   (rescaled by alpha first). */
template <bool FUSED, int MT, int NT8>
__device__ __forceinline__ void
exp_rows(float (&s)[MT][NT8][4], const float (&ref)[MT][2],
         const float (&alpha)[MT][2], float (&lrow)[MT][2], float mul) {
#pragma unroll
  for (int mi = 0; mi < MT; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
      lrow[mi][hr] = lrow[mi][hr] * alpha[mi][hr] +
                     exp_row<FUSED>(s[mi], hr, mul, ref[mi][hr]);
}

/* 2^e for the rescale exponent of fa_softmax_step: exactly 1 when it is 0
   (the maximum stands), whatever the approximation of ex2 gives there. */
__device__ __forceinline__ float rescale_factor(float e) {
  return e == 0.0f ? 1.0f : ex2(e);
}

/* ---- the kernel ------------------------------------------------------------
 */

/* Two adjacent elements of O at element offset `at` of o, in o's dtype
   (f32, f16 or bf16: FP8 kernels write the problem's output dtype). */
__device__ __forceinline__ void store_o2(void *o, int dtype, int64_t at,
                                         float lo, float hi) {
  if (dtype == FA_F32)
    *reinterpret_cast<float2 *>((float *)o + at) = make_float2(lo, hi);
  else if (dtype == FA_F16)
    *reinterpret_cast<uint32_t *>((__half *)o + at) = pack2<__half>(lo, hi);
  else
    *reinterpret_cast<uint32_t *>((__nv_bfloat16 *)o + at) =
        pack2<__nv_bfloat16>(lo, hi);
}

/* IN: the input element (sm80_input.cuh): a 16-bit type, or an FP8 tag
   whose rows are decoded to f16 tiles (T, the mma type). */
template <typename IN, int D, int V, bool SPECIAL>
__global__ void __launch_bounds__(tile<D, V>::NW * 32)
    fwd_kernel(const __grid_constant__ fa_gpu_params p) {
  typedef tile<D, V> TL;
  typedef input<IN> INP;
  typedef typename INP::mma_t T;
  constexpr bool FP8 = INP::kFP8;
  constexpr int BQ = TL::BQ, BK = TL::BK, NW = TL::NW;
  constexpr int MT = TL::MT, PITCH = TL::PITCH, NST = TL::NST;
  constexpr bool QREG = TL::QREG != 0;
  constexpr int NT = NW * 32, CH = D / 8; // threads, 16-byte chunks per row
  constexpr int NS = BK / 8, ND = D / 8;  // n-tiles of S and of O
  static_assert(BQ == 16 * MT * NW, "block_q = 16 * m_tiles * warps");
  // FP8: the codes of one K (or V) block staged in registers, or in
  // shared memory where the registers are full (sm80_input.cuh,
  // sm80_tiles.h).
  constexpr bool SMEM_STAGED =
      FP8 && FA_SM80_FP8_SMEM_STAGED(D, BK, NW, MT, TL::QREG);
  typedef fp8_rows<IN, BK, D, NT, SMEM_STAGED> kv_rows;
  constexpr int STAGE_REGS =
      FP8 && !SMEM_STAGED ? FA_SM80_FP8_STAGE_REGS(D, BK, NW) : 0;
  // Tiles whose accumulators (O, S, and Q when kept; FP8: the staged
  // codes) take more than 160 of the 255 registers recompute addresses at
  // each use (opaque()) instead of letting the compiler keep them live
  // across the main loop: that costs instructions but avoids spills.
  // Smaller tiles keep them.
  constexpr bool F =
      MT * (D / 2 + BK / 2) + (QREG ? MT * D / 4 : 0) + STAGE_REGS > 160;
  static_assert((BQ * CH) % NT == 0 && (BK * CH) % NT == 0, "tile copy");
  static_assert(D % 16 == 0 && BK % 16 == 0, "mma granularity");
  static_assert(NST >= 2, "a stage to compute on and one loading");
  typedef layout<D, PITCH> L;

  // [Q: BQ][K: NST stages][V: NST stages] rows of PITCH elements (then,
  // FP8 staged in smem, a raw K and a raw V block of BK x D codes).
  // 1024-byte alignment of every stage base keeps the swizzle bits of every
  // address in the lane part.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr uint32_t kOffK = BQ * PITCH * 2,
                     kOffV = (BQ + NST * BK) * PITCH * 2,
                     kOffRaw = (BQ + 2 * NST * BK) * PITCH * 2;
  constexpr uint32_t kStage = BK * PITCH * 2; // bytes of one K (or V) stage
  static_assert(kOffK % 1024 == 0 && kStage % 1024 == 0,
                "stage bases 1024-byte aligned");

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t w = blockIdx.x;
  int b, h0, qb, split;
  fa_flat_work_item(&p.prob, &p.plan, w, &b, &h0, &qb, &split);
  const int sq = fa_seq_rows_q(&p.prob, b), sk = fa_seq_rows_k(&p.prob, b);
  // Lanes of the tile are (row, head) pairs, head fastest: GQA packing puts
  // the pack q heads that share kv head hk into one tile. Lane r is query
  // row0 + r / pack of head h0 + r % pack; lanes past `lanes` are padding.
  const int pack = p.plan.pack_group, row0 = qb * p.plan.block_rows;
  if (row0 >= sq) return;
  const int nrows = min(p.plan.block_rows, sq - row0), lanes = nrows * pack;
  const int hk = h0 / p.prob.group;
  int kb0, kb1, s0, s1;
  fa_flat_kv_blocks(&p.prob, p.plan.block_rows, BK, sq, sk, qb, &kb0, &kb1);
  fa_split_range(kb0, kb1, p.plan.num_splits, split, &s0, &s1);
  const int shift = fa_flat_shift(&p.prob, sq, sk);

  const uint32_t sbase = smem_u32(smem_raw);

  // ---- global -> shared copies (rows past the sequence become zeros, so
  // P = 0 never meets a NaN of V) ----
  if constexpr (FP8) {
    // Q once, straight through registers.
    fp8_rows<IN, BQ, D, NT> qst;
    qst.fetch((const uint8_t *)p.q.data, tid, [&](int r) -> int64_t {
      return r < lanes ? fa_seq_q_offset(&p.prob, &p.q, b, row0 + r / pack,
                                         h0 + r % pack)
                       : -1;
    });
    qst.template store<L>(sbase, tid);
  } else {
    const T *gq = (const T *)p.q.data;
#pragma unroll
    for (int it = 0; it < BQ * CH / NT; it++) {
      const int idx = tid + it * NT, r = idx / CH, c = idx % CH;
      const bool ok = r < lanes;
      const T *src = ok ? gq +
                              fa_seq_q_offset(&p.prob, &p.q, b, row0 + r / pack,
                                              h0 + r % pack) +
                              c * 8
                        : gq;
      cp_async16(sbase + L::offset(r, c) * 2, src, ok ? 16 : 0);
    }
    cp_async_commit();
  }
  // Rows of dense / varlen K and V: base + j * stride_seq (the page table
  // otherwise). Bases and strides are recomputed at each use (opaque()), so
  // that the 2 x BK*CH/NT row addresses are not kept in registers across
  // the main loop, where the accumulators need them.
  auto load_kv = [&](int kb, int stage) {
    const uint32_t dk = sbase + kOffK + stage * kStage,
                   dv = sbase + kOffV + stage * kStage;
    const int64_t kss = opaque<F>(p.k.ss), vss = opaque<F>(p.v.ss);
    const T *gk = (const T *)p.k.data, *gv = (const T *)p.v.data;
    const int64_t k_row0 =
        p.prob.paged ? 0 : opaque<F>(fa_seq_k_offset(&p.prob, &p.k, b, 0, hk));
    const int64_t v_row0 =
        p.prob.paged ? 0 : opaque<F>(fa_seq_k_offset(&p.prob, &p.v, b, 0, hk));
#pragma unroll
    for (int it = 0; it < BK * CH / NT; it++) {
      const int idx = tid + it * NT, r = idx / CH, c = idx % CH;
      const int j = kb * BK + r;
      bool ok = j < sk;
      int64_t ko = 0, vo = 0;
      if (ok && p.prob.paged) {
        ko = fa_seq_k_offset(&p.prob, &p.k, b, j, hk);
        vo = fa_seq_k_offset(&p.prob, &p.v, b, j, hk);
        // A block-table entry outside the pool (offset -1): zeros.
        if (ko < 0) ok = false, ko = vo = 0;
      } else if (ok) {
        ko = k_row0 + (int64_t)j * kss;
        vo = v_row0 + (int64_t)j * vss;
      }
      const uint32_t so = (uint32_t)L::offset(r, c) * 2;
      cp_async16(dk + so, gk + ko + c * 8, ok ? 16 : 0);
      cp_async16(dv + so, gv + vo + c * 8, ok ? 16 : 0);
    }
  };
  // FP8: row r of block kb of K (or V): its element offset, or -1 for a
  // row of zeros (past the sequence; a block-table entry outside the
  // pool). Recomputed at each fetch, as load_kv's (nothing is kept live
  // across the main loop).
  auto kv_row = [&](const fa_tensor_view &t, int kb, int r) -> int64_t {
    const int j = kb * BK + r;
    if (j >= sk) return -1;
    if (p.prob.paged) return fa_seq_k_offset(&p.prob, &t, b, j, hk);
    return opaque<F>(fa_seq_k_offset(&p.prob, &t, b, 0, hk)) +
           (int64_t)j * opaque<F>(t.ss);
  };
  kv_rows kst, vst; // FP8: the codes of the block being staged
  if constexpr (SMEM_STAGED) {
    kst.raw = sbase + kOffRaw;
    vst.raw = sbase + kOffRaw + BK * D;
  }
  auto fetch_k = [&](int kb) {
    if constexpr (FP8)
      kst.fetch((const uint8_t *)p.k.data, tid,
                [&](int r) { return kv_row(p.k, kb, r); });
  };
  auto fetch_v = [&](int kb) {
    if constexpr (FP8)
      vst.fetch((const uint8_t *)p.v.data, tid,
                [&](int r) { return kv_row(p.v, kb, r); });
  };
  auto store_k = [&](int stage) {
    if constexpr (FP8)
      kst.template store<L>(sbase + kOffK + stage * kStage, tid);
  };
  auto store_v = [&](int stage) {
    if constexpr (FP8)
      vst.template store<L>(sbase + kOffV + stage * kStage, tid);
  };
  // FP8's schedule of block kb into stage st, in three steps (the loop
  // below places them): top issues the loads (smem staged: K and V, one
  // commit group each); mid stores K (registers: then loads V); end
  // stores V. Only the FP8 path issues cp.async groups while it runs,
  // so the counts are its own.
  auto fp8_top = [&](int kb) {
    fetch_k(kb);
    if constexpr (SMEM_STAGED) {
      cp_async_commit();
      fetch_v(kb);
      cp_async_commit();
    }
  };
  auto fp8_mid = [&](int kb, int st) {
    if constexpr (SMEM_STAGED) cp_async_wait<1>();
    store_k(st);
    if constexpr (!SMEM_STAGED) fetch_v(kb);
  };
  auto fp8_end = [&](int st) {
    if constexpr (SMEM_STAGED) cp_async_wait<0>();
    store_v(st);
  };
  // Prologue: blocks s0 .. s0 + NST - 2 into stages 0 .. NST - 2, one
  // commit group each, empty past s1: the loop counts groups, not blocks.
  // (FP8: stored before the loop's first barrier, which publishes them.)
#pragma unroll
  for (int i = 0; i < NST - 1; i++) {
    if constexpr (FP8) {
      if (s0 + i < s1) {
        fp8_top(s0 + i);
        fp8_mid(s0 + i, i);
        fp8_end(i);
      }
    } else {
      if (s0 + i < s1) load_kv(s0 + i, i);
      cp_async_commit();
    }
  }

  // ---- per-row state: O accumulators, running max (units) and sum ----
  float o[MT][ND][4];
  float mrow[MT][2], lrow[MT][2];
#pragma unroll
  for (int mi = 0; mi < MT; mi++) {
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[mi][n][e] = 0.0f;
    mrow[mi][0] = mrow[mi][1] = -INFINITY;
    lrow[mi][0] = lrow[mi][1] = 0.0f;
  }

  // SPECIAL: softcap, ALiBi or a negative scale transform every score
  // (a separate instantiation, so the plain kernel carries none of it).
  constexpr bool special = SPECIAL;
  // The scores' factor: scale, and for FP8 inputs scale * dq * dk (the
  // descales of this work item's kv head) times the decode's unit^2;
  // o_mul: what O takes besides 1/l (FP8: dv / unit). (16-bit inputs read
  // the scale where they use it, as the parameter it is.)
  float fp8_scale = 0.0f, o_mul = 1.0f;
  if constexpr (FP8) {
    const float u = INP::unit();
    fp8_scale = p.prob.scale * fa_gpu_descale(p.descale_q, p, b, hk) *
                fa_gpu_descale(p.descale_k, p, b, hk) * (u * u);
    o_mul = fa_gpu_descale(p.descale_v, p, b, hk) / u;
  }
  auto qk_scale = [&]() -> float {
    if constexpr (FP8) return fp8_scale;
    return p.prob.scale;
  };
  const float mul = special ? 1.0f : qk_scale() * kLog2e;
  const int wrow0 = warp * 16 * MT; // first row of this warp in the block
  // Blocks that need no mask: every row sees all their keys. The window
  // edges move one key per row, so the block's first and last rows decide:
  // col0 in [full_lo, full_hi] (empty when the first row sees nothing).
  int full_lo, full_hi;
  {
    int lo_f, hi_f, lo_l, hi_l;
    fa_flat_visible(&p.prob, row0, sq, sk, &lo_f, &hi_f);
    fa_flat_visible(&p.prob, row0 + nrows - 1, sq, sk, &lo_l, &hi_l);
    full_lo = lo_l;
    full_hi = lo_f < hi_f ? hi_f - BK : -1;
  }

  // Q's group is the oldest of the NST committed so far: waiting until at
  // most NST - 1 are pending completes it (and leaves the K/V blocks
  // loading); the barrier makes every thread's Q rows visible to all.
  if constexpr (!FP8) cp_async_wait<NST - 1>();
  __syncthreads();

  // Q fragments: kept for the whole CTA (QREG) or re-read per block.
  constexpr int QF = QREG ? D / 16 : 1;
  uint32_t qf[MT][QF][4];
  // ldmatrix lane addresses (bytes): A of Q (rows +8 in matrices 1, 3;
  // chunk +1 in 2, 3), B of K (keys +8 in 2, 3; chunk +1 in 1, 3), B of V
  // transposed (keys +8 in 1, 3; chunk +1 in 2, 3).
  const uint32_t q_lane =
      sbase +
      L::lane_base(wrow0 + (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
  const uint32_t k_lane =
      sbase + kOffK +
      L::lane_base((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1);
  const uint32_t v_lane =
      sbase + kOffV +
      L::lane_base((lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
  // Address of chunk pair s of the lane's row, `off` bytes (whole rows)
  // further. Small tiles swizzle first and add `off` as an immediate
  // (fewest instructions); frugal tiles recompute all of it at each use.
  auto lds_addr = [&](uint32_t lane_base, uint32_t off, int s) -> uint32_t {
    return F ? L::step(opaque32<F>(lane_base) + off, s)
             : L::step(lane_base, s) + off;
  };
  auto q_frag = [&](uint32_t(&a)[4], int mi, int ks) {
    ldsm_x4(a, lds_addr(q_lane, mi * 16 * PITCH * 2, ks));
  };
  if (QREG) {
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int ks = 0; ks < QF; ks++) q_frag(qf[mi][ks], mi, ks);
  }

  // Block kb lives in stage (kb - s0) % NST. At the top of iteration kb,
  // NST - 1 + (kb - s0) K/V groups are committed and block kb's is the
  // (kb - s0 + 1)-th: waiting until at most NST - 2 are pending completes
  // it. The barrier then publishes it to every thread, and also ends all
  // reads of block kb - 1's stage, the one block kb + NST - 1 is issued into
  // (a commit every iteration, empty or not, keeps the count exact).
  // (Stages are computed from kb, unsigned since kb >= s0: a stage counter
  // carried across iterations cost the 2-stage tiles spills at 255
  // registers.)
  // FP8: the same stages, filled by this iteration's own threads: block
  // kb + NST - 1's codes are loaded at the top of iteration kb (its stage
  // was freed by the barrier), its K decoded and stored after S, its V at
  // the end (fp8_top, fp8_mid, fp8_end); the next barrier publishes both.
  for (int kb = s0; kb < s1; kb++) {
    const int stage = (int)((unsigned)(kb - s0) % NST);
    const int ahead = kb + NST - 1; // the block issued in this iteration
    const int ahead_stage = (int)((unsigned)(ahead - s0) % NST);
    if constexpr (!FP8) cp_async_wait<NST - 2>();
    __syncthreads();
    if constexpr (FP8) {
      if (ahead < s1) fp8_top(ahead);
    } else {
      if (ahead < s1) load_kv(ahead, ahead_stage);
      cp_async_commit();
    }
    const uint32_t so = stage * kStage;
    // A warp whose rows are all padding (decode: the 4 lanes of a GQA
    // group fill part of warp 0) only helps copy: the math would be thrown
    // away, and it would take issue slots from the warps that matter.
    if (wrow0 >= lanes) {
      if constexpr (FP8) {
        if (ahead < s1) {
          fp8_mid(ahead, ahead_stage);
          fp8_end(ahead_stage);
        }
      }
      continue;
    }

    // ---- S = Q K^T ----
    float s[MT][NS][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int n = 0; n < NS; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[mi][n][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; mi++) {
        if (QREG) {
#pragma unroll
          for (int e = 0; e < 4; e++) a[mi][e] = qf[mi][QREG ? ks : 0][e];
        } else {
          q_frag(a[mi], mi, ks);
        }
      }
#pragma unroll
      for (int np = 0; np < BK / 16; np++) {
        uint32_t bk4[4];
        ldsm_x4(bk4, lds_addr(k_lane, so + np * 16 * PITCH * 2, ks));
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
          ops<T>::mma(s[mi][2 * np], a[mi], bk4[0], bk4[1]);
          ops<T>::mma(s[mi][2 * np + 1], a[mi], bk4[2], bk4[3]);
        }
      }
    }
    if constexpr (FP8) {
      if (ahead < s1) fp8_mid(ahead, ahead_stage);
    }

    // ---- score transform, then mask: two separate uniform branches, so
    // the plain masked path carries none of the transform's code ----
    const int col0 = kb * BK;
    if (special) {
#pragma unroll
      for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          const int r = wrow0 + mi * 16 + g + 8 * hr;
          const int i = row0 + r / pack, h = h0 + r % pack;
#pragma unroll
          for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int j = col0 + n * 8 + 2 * t4 + e;
              s[mi][n][2 * hr + e] =
                  fa_flat_transform(&p.prob, qk_scale() * s[mi][n][2 * hr + e],
                                    h, i, j, shift) *
                  kLog2e;
            }
        }
    }
    if (col0 < full_lo || col0 > full_hi) {
#pragma unroll
      for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          const int i = row0 + (wrow0 + mi * 16 + g + 8 * hr) / pack;
          int lo, hi;
          fa_flat_visible(&p.prob, i, sq, sk, &lo, &hi);
#pragma unroll
          for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int j = col0 + n * 8 + 2 * t4 + e;
              if (j < lo || j >= hi) s[mi][n][2 * hr + e] = -INFINITY;
            }
        }
    }

    // ---- online softmax: max, rescale, exp2, sum ----
    // The core's step (fa_softmax_step) in the exp2 domain, with scores in
    // units of mul, for every row of the thread first; then one warp vote
    // picks the exponent form for the block: one FMA per score unless a
    // row of this warp has a huge reference (warp-uniform, so neither path
    // diverges).
    float ref[MT][2], alpha[MT][2];
    bool fused = true;
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        alpha[mi][hr] = rescale_factor(
            fa_softmax_step(&mrow[mi][hr], row_max(s[mi], hr, mrow[mi][hr]),
                            mul, &ref[mi][hr]));
        fused = fused && fa_softmax_fused_ok(ref[mi][hr]);
      }
    fused = __all_sync(~0u, fused);
    if (fused)
      exp_rows<true>(s, ref, alpha, lrow, mul);
    else
      exp_rows<false>(s, ref, alpha, lrow, mul);
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++)
#pragma unroll
        for (int n = 0; n < ND; n++) {
          o[mi][n][2 * hr] *= alpha[mi][hr];
          o[mi][n][2 * hr + 1] *= alpha[mi][hr];
        }

        // ---- O += P V ----
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; mi++) {
        a[mi][0] = pack2<T>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        a[mi][1] = pack2<T>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        a[mi][2] = pack2<T>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        a[mi][3] = pack2<T>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < D / 16; np++) {
        uint32_t bv[4];
        ldsm_x4_t(bv, lds_addr(v_lane, so + kk * 16 * PITCH * 2, np));
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
          ops<T>::mma(o[mi][2 * np], a[mi], bv[0], bv[1]);
          ops<T>::mma(o[mi][2 * np + 1], a[mi], bv[2], bv[3]);
        }
      }
    }
    if constexpr (FP8) {
      if (ahead < s1) fp8_end(ahead_stage);
    }
  }
  // Every issued block was waited for in its own iteration; the groups
  // still pending are empty, and the epilogue reads no shared memory.

  // ---- epilogue: finalise (sink, 1/l, LSE) or write the split partial ----
  T *go = (T *)p.o.data;
  (void)go; // (FP8: store_o2 in the output dtype)
#pragma unroll
  for (int mi = 0; mi < MT; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      float l = lrow[mi][hr];
      l += __shfl_xor_sync(~0u, l, 1);
      l += __shfl_xor_sync(~0u, l, 2);
      const int r = wrow0 + mi * 16 + g + 8 * hr;
      if (r >= lanes) continue;
      const int i = row0 + r / pack, h = h0 + r % pack;
      // The row's reference (fa_softmax_step's) in natural units.
      const float m_nat = mrow[mi][hr] == -INFINITY
                              ? -INFINITY
                              : fa_mul_rn(mrow[mi][hr], mul) * kLn2;
      if (p.plan.num_splits == 1) {
        float lse;
        const float f =
            fa_softmax_finalize_sinks(m_nat, l, p.prob.sinks, h, &lse);
        const int64_t at = fa_seq_q_offset(&p.prob, &p.o, b, i, h) + 2 * t4;
        if constexpr (FP8) {
          const float fo = f * o_mul;
#pragma unroll
          for (int n = 0; n < ND; n++)
            store_o2(p.o.data, p.prob.dtype_out, at + n * 8,
                     o[mi][n][2 * hr] * fo, o[mi][n][2 * hr + 1] * fo);
        } else {
          T *dst = go + at;
#pragma unroll
          for (int n = 0; n < ND; n++)
            *reinterpret_cast<uint32_t *>(dst + n * 8) =
                pack2<T>(o[mi][n][2 * hr] * f, o[mi][n][2 * hr + 1] * f);
        }
        if (p.lse && t4 == 0) p.lse[fa_flat_row_index(&p.prob, b, h, i)] = lse;
      } else {
        const int64_t at = w * BQ + r;
        if (t4 == 0) {
          p.part_ml[at * 2] = m_nat;
          p.part_ml[at * 2 + 1] = l;
        }
        // (The combine is linear in O: dv goes into each partial.)
        float *dst = p.part_o + at * D + 2 * t4;
#pragma unroll
        for (int n = 0; n < ND; n++)
          *reinterpret_cast<float2 *>(dst + n * 8) = make_float2(
              o[mi][n][2 * hr] * o_mul, o[mi][n][2 * hr + 1] * o_mul);
      }
    }
}

template <typename IN, int D, int V, bool SPECIAL>
int launch_one(const fa_gpu_params *p, void *stream) {
  typedef tile<D, V> TL;
  constexpr int smem =
      (TL::BQ + 2 * TL::NST * TL::BK) * TL::PITCH * 2 +
      (input<IN>::kFP8
           ? FA_SM80_FP8_STAGE_BYTES(D, TL::BK, TL::NW, TL::MT, TL::QREG)
           : 0);
  cudaError_t e =
      cudaFuncSetAttribute(fwd_kernel<IN, D, V, SPECIAL>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  fwd_kernel<IN, D, V, SPECIAL>
      <<<(unsigned)p->plan.num_work, TL::NW * 32, smem, (cudaStream_t)stream>>>(
          *p);
  return (int)cudaGetLastError();
}

template <typename IN, int D, int V>
int launch(const fa_gpu_params *p, void *stream) {
  if (p->plan.num_work <= 0) return 0;
  const bool special =
      p->prob.softcap > 0.0f || p->prob.alibi_slopes || !(p->prob.scale > 0.0f);
  return special ? launch_one<IN, D, V, true>(p, stream)
                 : launch_one<IN, D, V, false>(p, stream);
}

} // namespace fa_sm80

/* One instantiation: extern "C" launcher fa_sm80_fwd_<dtype>_d<dim>_v<V>
   (V 0: the main tile; 1: the decode tile) of input element IN (a 16-bit
   type, fa_sm80::fp8_e4m3 or fa_sm80::fp8_e5m2). */
#define FA_SM80_FWD_INSTANCE(IN, tname, D, V)                                  \
  extern "C" int fa_sm80_fwd_##tname##_d##D##_v##V(const fa_gpu_params *p,     \
                                                   void *stream) {             \
    return fa_sm80::launch<IN, D, V>(p, stream);                               \
  }

#endif
