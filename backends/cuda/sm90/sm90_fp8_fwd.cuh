// SPDX-License-Identifier: MIT
// The sm90 FP8 forward (sm_90a only): e4m3 or e5m2 Q, K, V through wgmma
// (Q K^T in the input type, P V as e4m3 P x V) -> fp32, head dim 128. The
// schedule is the 16-bit sm90 forward's (sm90_fwd.cuh: one TMA producer
// warpgroup, two consumer warpgroups of 64 query rows taking turns at the
// tensor cores, S_{j+1} issued with P_j V_j, the online softmax in base 2);
// what differs is said here.
//
// Operands. FP8 wgmma reads both operands K-major. S = Q K^T is that
// already: a row of 128 codes is one 128-byte swizzled block, a k32 step
// 32 bytes along it. For O += P V the K dimension is the keys, so V is read
// from V^T, which a pre-pass writes into the plan's workspace
// (sm90_fp8_vt.cuh: why a pre-pass, its layout, and the key permutation
// that lets P go from the S accumulators to wgmma's register A fragment
// without shuffles). V^T tiles are [128 dims][128 keys] and are loaded by
// the TMA like K tiles; keys past a sequence's end are zeros there, so no
// tail is zeroed in shared memory.
//
// P in FP8. P = 2^(s - m) lies in [0, 1] and its row maximum is 1 at the
// block holding the running maximum; it is stored as e4m3 times 2^8
// (kPScale), a fixed power of two: the multiply and its inverse are exact,
// the largest P becomes 256 (< 448, no saturation), and P down to 2^-14
// stays a normal e4m3 number (2^-17 a subnormal) instead of flushing from
// 2^-6 (2^-9) down. A scale that maps each row's maximum to 448 would need
// a per-row factor carried into the rescale for no extra precision (e4m3's
// relative step is the same in every binade). l sums P in fp32 before the
// rounding; the 2^-8 is folded into the output factor.
//
// Descales. The scores are scale * (dq q).(dk k) = (scale dq dk) q.k: the
// product scale * dq * dk (per sequence and kv head, read once per work
// item) is the factor of the base-2 softmax's one FFMA, and dv multiplies
// the output with 1/l. The folding rounds differently from the header's
// per-element products only in the last bits (and where a descale
// overflows an element to inf: this kernel then gives the finite product),
// within the FP8 error rule.
//
// Not here (supports() sends these to cuda.generic): head dims other than
// 128, softcap, ALiBi, a scale <= 0, paged KV, the backward.
#ifndef FA_CUDA_SM90_FP8_FWD_CUH
#define FA_CUDA_SM90_FP8_FWD_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma_sync.cuh"
#include "flashattn.h"
#include "gpu_semantics.h"
#include "sm90_fp8.h"
#include "sm90_fp8_vt.cuh"
#include "sm90_items.cuh" // item_of, setmaxnreg, mask and softmax
#include "sm90_wgmma_fp8.h"
#include "softmax.h"

namespace fa_sm90_fp8 {

using namespace fa_cuda; // PTX, TMA and wgmma helpers (backends/cuda/common)
using namespace fa_sm90; // item_of, the wgmma FP8 wrappers

constexpr int kD = 128, kBM = 128, kBN = kVtKeys, kStages = 4;
constexpr int kNC = kBM / 64, kNCT = 128 * kNC;
constexpr uint32_t kQB = kBM * kD, kKB = kBN * kD, kVB = kD * kBN; // bytes
constexpr float kPScale = 256.0f;

/* The descale of an input for sequence b, kv head hk (1 without one). */
__device__ __forceinline__ float
descale(const fa_gpu_descale_ref &d, const fa_gpu_params &p, int b, int hk) {
  if (!d.data) return 1.0f;
  return d.per_head ? d.data[(int64_t)b * p.heads_kv + hk] : d.data[0];
}

/* Two e4m3 codes of x0 (low byte) and x1, round to nearest, saturating. */
__device__ __forceinline__ uint32_t e4m3x2(float x0, float x1) {
  return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE,
                                            __NV_E4M3);
}

/* Two output elements at dst (fp32, or packed 16-bit). */
template <typename TO>
__device__ __forceinline__ void store2(TO *dst, float a, float b) {
  if constexpr (std::is_same<TO, float>::value) {
    *reinterpret_cast<float2 *>(dst) = make_float2(a, b);
  } else {
    *reinterpret_cast<uint32_t *>(dst) = pack2<TO>(a, b);
  }
}

/* IN: the inputs' wgmma type tag (f8_e4m3, f8_e5m2); TO: O's element. */
template <typename IN, typename TO>
__global__ void __launch_bounds__(128 * (kNC + 1), 1)
    fwd_kernel(const __grid_constant__ fa_gpu_params p,
               const __grid_constant__ CUtensorMap tq,
               const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tvt) {
  constexpr int BM = kBM, BN = kBN, ST = kStages, NC = kNC, NCT = kNCT;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = base + kQB, sV = sK + ST * kKB;
  const uint32_t sBar = sV + ST * kVB;
  const bars bb = init_bars<ST, NCT>(sBar);
  const uint32_t q_full = bb.q_full, q_empty = bb.q_empty;
  const uint32_t k_full = bb.k_full, v_full = bb.v_full, k_empty = bb.k_empty,
                 v_empty = bb.v_empty;
  // (each + 8 * stage)

  if (threadIdx.x < 128) {
    // ---- producer: Q once per item, then K and V^T blocks ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (threadIdx.x != 0) return;
    uint32_t it = 0, nq = 0;
    for (int64_t w = blockIdx.x; w < p.num_work; w += gridDim.x) {
      const item t = item_of<BM, BN>(p, w);
      if (!t.valid || t.kb0 >= t.kb1) continue;
      const int hk = t.h / p.group;
      bar_wait(q_empty, (nq & 1) ^ 1);
      bar_expect_tx(q_full, kQB);
      const int qrow = (int)fa_gpu_start_q(&p, t.b) + t.row0;
      tma_load(sQ, &tq, q_full, 0, qrow, t.h, p.varlen_q ? 0 : t.b);
      nq++;
      const int krow = (int)fa_gpu_start_k(&p, t.b);
      const int kbat = p.varlen_k ? 0 : t.b;
      for (int kb = t.kb0; kb < t.kb1; kb++, it++) {
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        bar_wait(k_empty + 8 * s, ph ^ 1);
        bar_expect_tx(k_full + 8 * s, kKB);
        tma_load(sK + s * kKB, &tk, k_full + 8 * s, 0, krow + kb * BN, hk,
                 kbat);
        bar_wait(v_empty + 8 * s, ph ^ 1);
        bar_expect_tx(v_full + 8 * s, kVB);
        tma_load(sV + s * kVB, &tvt, v_full + 8 * s, kb * BN, 0, hk, t.b);
      }
    }
    return;
  }

  // ---- consumers ----
  asm volatile(
      "setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(consumer_regs<NC>()));
  const int ct = threadIdx.x - 128, cw = ct / 128;
  const int warp = (ct % 128) / 32, lane = ct % 32, g = lane / 4, t4 = lane % 4;
  const int rbase = cw * 64 + warp * 16 + g;
  uint32_t it = 0, nq = 0;
  auto turn_wait = [&] {
    if (cw == 0)
      asm volatile("bar.sync 2, 256;\n" ::: "memory");
    else
      asm volatile("bar.sync 3, 256;\n" ::: "memory");
  };
  auto turn_pass = [&] {
    if (cw == NC - 1)
      asm volatile("bar.arrive 2, 256;\n" ::: "memory");
    else
      asm volatile("bar.arrive 3, 256;\n" ::: "memory");
  };
  if (cw == NC - 1) turn_pass();

  for (int64_t w = blockIdx.x; w < p.num_work; w += gridDim.x) {
    const item t = item_of<BM, BN>(p, w);
    if (!t.valid) continue;
    const int nrows = min(BM, t.sq - t.row0);
    const int hk = t.h / p.group;
    // scale * dq * dk * log2(e): the one factor of the base-2 softmax.
    const float mul = p.scale * descale(p.descale_q, p, t.b, hk) *
                      descale(p.descale_k, p, t.b, hk) * kLog2e;
    float o[kD / 2];
#pragma unroll
    for (int e = 0; e < kD / 2; e++) o[e] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};

    int full_lo = 0, full_hi = -1;
    if (t.kb0 < t.kb1) {
      int lo_f, hi_f, lo_l, hi_l;
      fa_gpu_visible(&p, t.row0, t.sq, t.sk, &lo_f, &hi_f);
      fa_gpu_visible(&p, t.row0 + nrows - 1, t.sq, t.sk, &lo_l, &hi_l);
      full_lo = lo_l;
      full_hi = lo_f < hi_f ? hi_f - BN : -1;
    }

    auto issue_s = [&](float(&sc)[BN / 2], uint32_t s) {
#pragma unroll
      for (int kk = 0; kk < kD / 32; kk++) {
        const uint64_t da = desc_sw128(sQ + cw * 64 * 128 + kk * 32, 16, 1024);
        const uint64_t db = desc_sw128(sK + s * kKB + kk * 32, 16, 1024);
        wgmma_f8<IN, IN, BN>::ss(sc, da, db, kk > 0);
      }
    };
    auto issue_pv = [&](const uint32_t(&pa)[BN / 32][4], uint32_t s) {
#pragma unroll
      for (int kk = 0; kk < BN / 32; kk++) {
        const uint64_t db = desc_sw128(sV + s * kVB + kk * 32, 16, 1024);
        wgmma_f8<f8_e4m3, IN, kD>::rs(o, pa[kk], db, 1);
      }
    };
    auto mask = [&](float(&sc)[BN / 2], int kb) {
      const int col0 = kb * BN;
      if (col0 >= full_lo && col0 <= full_hi) return;
      mask_rows<BN>(p, sc, t.row0 + rbase, t.sq, t.sk, col0, t4);
    };
    // The 16-bit kernel's online softmax (softmax_rows: fa_softmax_step,
    // NaN-sticky max), on raw q.k: mul folds scale and the descales.
    auto softmax = [&](float(&sc)[BN / 2], float(&alpha)[2]) {
      softmax_rows<BN>(sc, mrow, lrow, alpha, mul);
    };
    // P (times kPScale) to e4m3 A fragments: k32 group kk is n8 chunks
    // 4kk .. 4kk+3; registers 0/2 hold row g, 1/3 row g + 8; register 0 the
    // chunks 4kk, 4kk+1 and register 2 the chunks 4kk+2, 4kk+3, two keys of
    // each (the order fp8_vt_key stores V^T in).
    auto pack_p = [&](const float(&sc)[BN / 2], uint32_t(&pa)[BN / 32][4]) {
#pragma unroll
      for (int kk = 0; kk < BN / 32; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
          const int hr = r & 1, j = 4 * kk + 2 * (r >> 1);
          const float *a = &sc[4 * j + 2 * hr], *b = &sc[4 * (j + 1) + 2 * hr];
          pa[kk][r] = e4m3x2(a[0] * kPScale, a[1] * kPScale) |
                      e4m3x2(b[0] * kPScale, b[1] * kPScale) << 16;
        }
    };
    auto rescale = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int j = 0; j < kD / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[4 * j + e] *= alpha[e / 2];
    };
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
      mask(sc, kb);
      softmax(sc, alpha);
    };

    if (t.kb0 < t.kb1) {
      float sc[BN / 2], alpha[2];
      uint32_t pa[BN / 32][4];
      bar_wait(q_full, nq & 1);
      {
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        s_block(sc, alpha, s, ph, t.kb0);
        pack_p(sc, pa);
      }
      auto step = [&](auto has_next, int kb) {
        constexpr bool NEXT = decltype(has_next)::value;
        const uint32_t s = it % ST, ph = (it / ST) & 1;
        const uint32_t sn = (it + 1) % ST, phn = ((it + 1) / ST) & 1;
        bar_wait(v_full + 8 * s, ph);
        if (NEXT) bar_wait(k_full + 8 * sn, phn);
        turn_wait();
        pin(o);
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
          mask(sc, kb + 1);
          softmax(sc, alpha);
        }
        wg_wait<0>();
        pin(o);
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

    // ---- epilogue: dv / (kPScale l) (and the sink), O and LSE ----
    const float fo = descale(p.descale_v, p, t.b, hk) / kPScale;
    TO *go = (TO *)p.o.data;
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
      const float f =
          fa_softmax_finalize_sinks(m_nat, l, p.sinks, t.h, &lse) * fo;
      TO *dst = go + fa_gpu_q_offset(&p, &p.o, t.b, i, t.h) + 2 * t4;
#pragma unroll
      for (int j = 0; j < kD / 8; j++)
        store2<TO>(dst + 8 * j, o[4 * j + 2 * hr] * f,
                   o[4 * j + 2 * hr + 1] * f);
      if (p.lse && t4 == 0) p.lse[fa_gpu_row_index(&p, t.b, t.h, i)] = lse;
    }
  }
}

/* ---- host side
 * ---------------------------------------------------------------- */

/* An FP8 [batch][rows][heads][D] view as a 4-d tensor map of boxes {D codes,
   box_rows, 1, 1} (0 when the copy engine cannot address it). */
static int map_rows(CUtensorMap *m, const fa_gpu_view &v, int64_t rows,
                    int heads, int batch, int box_rows) {
  encode_tiled_fn enc = encoder();
  const int64_t ss = v.ss, sh = v.sh, sb = batch > 1 ? v.sb : rows * ss;
  const int64_t lim = (int64_t)1 << 40;
  if (!enc || (uintptr_t)v.data % 16 || ss % 16 || sh % 16 || sb % 16 ||
      ss <= 0 || sh <= 0 || sb <= 0 || ss >= lim || sh >= lim || sb >= lim ||
      rows < 1 || rows > 0xFFFFFFFFll)
    return 0;
  cuuint64_t dims[4] = {(cuuint64_t)kD, (cuuint64_t)rows, (cuuint64_t)heads,
                        (cuuint64_t)batch};
  cuuint64_t strides[3] = {(cuuint64_t)ss, (cuuint64_t)sh, (cuuint64_t)sb};
  cuuint32_t box[4] = {(cuuint32_t)kD, (cuuint32_t)box_rows, 1, 1};
  cuuint32_t step[4] = {1, 1, 1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, v.data, dims, strides, box,
             step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* V^T ([batch][heads_kv][D][keys_pad], sm90_fp8_vt.cuh) as a tensor map of
   boxes {kBN keys, D dims, 1, 1}. */
static int map_vt(CUtensorMap *m, void *vt, int64_t keys_pad, int heads_kv,
                  int batch) {
  encode_tiled_fn enc = encoder();
  if (!enc) return 0;
  cuuint64_t dims[4] = {(cuuint64_t)keys_pad, (cuuint64_t)kD,
                        (cuuint64_t)heads_kv, (cuuint64_t)batch};
  cuuint64_t strides[3] = {(cuuint64_t)keys_pad, (cuuint64_t)(keys_pad * kD),
                           (cuuint64_t)(keys_pad * kD * heads_kv)};
  cuuint32_t box[4] = {(cuuint32_t)kBN, (cuuint32_t)kD, 1, 1};
  cuuint32_t step[4] = {1, 1, 1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, vt, dims, strides, box, step,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

constexpr int smem_bytes() { return kQB + kStages * (kKB + kVB) + 1024 + 256; }

template <typename IN, typename TO>
int launch_out(const fa_gpu_params *in, int64_t rows_q, int64_t rows_k, int sms,
               void *vt, void *stream) {
  fa_gpu_params g = *in;
  g.block_q = g.block_rows = kBM;
  g.block_k = kBN;
  g.pack_group = 1;
  g.num_splits = 1;
  g.num_q_blocks = (int)(((int64_t)g.seqlen_q + kBM - 1) / kBM);
  g.num_work = (int64_t)g.batch * g.heads_q * g.num_q_blocks;
  if (g.num_work <= 0) return 0;
  const int64_t keys_pad = fa_sm90_fp8_keys_pad(g.seqlen_k);
  CUtensorMap tq, tk, tvt;
  const int bq = g.varlen_q ? 1 : g.batch, bk = g.varlen_k ? 1 : g.batch;
  const int64_t rq = g.varlen_q ? rows_q : g.seqlen_q;
  const int64_t rk = g.varlen_k ? rows_k : g.seqlen_k;
  if (!map_rows(&tq, g.q, rq, g.heads_q, bq, kBM) ||
      !map_rows(&tk, g.k, rk, g.heads_kv, bk, kBN) ||
      !map_vt(&tvt, vt, keys_pad, g.heads_kv, g.batch))
    return -1;
  cudaStream_t st = (cudaStream_t)stream;
  const dim3 vgrid((unsigned)(keys_pad / kVtKeys), (unsigned)g.heads_kv,
                   (unsigned)g.batch);
  vt_transpose<kD><<<vgrid, 256, 0, st>>>(g, (uint8_t *)vt, keys_pad);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  auto kernel = fwd_kernel<IN, TO>;
  constexpr int smem = smem_bytes();
  static_assert(smem <= 232448, "sm90 FP8 tile over the 227 KB opt-in limit");
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
  if (e != cudaSuccess) return (int)e;
  const int64_t grid = g.num_work < sms ? g.num_work : sms;
  kernel<<<(unsigned)grid, 128 * (kNC + 1), smem, st>>>(g, tq, tk, tvt);
  return (int)cudaGetLastError();
}

} // namespace fa_sm90_fp8

/* One input type's launcher, fa_sm90_fp8_fwd_<t>_d128 (sm90_fp8.h): the
   kernel of O's dtype. */
#define FA_SM90_FP8_FWD_INSTANCE(t)                                            \
  extern "C" int fa_sm90_fp8_fwd_##t##_d128(const fa_gpu_params *p,            \
                                            int64_t rows_q, int64_t rows_k,    \
                                            int sms, void *vt, void *stream) { \
    using namespace fa_sm90_fp8;                                               \
    switch (p->dtype_out) {                                                    \
    case FA_F32:                                                               \
      return launch_out<f8_##t, float>(p, rows_q, rows_k, sms, vt, stream);    \
    case FA_F16:                                                               \
      return launch_out<f8_##t, __half>(p, rows_q, rows_k, sms, vt, stream);   \
    default:                                                                   \
      return launch_out<f8_##t, __nv_bfloat16>(p, rows_q, rows_k, sms, vt,     \
                                               stream);                        \
    }                                                                          \
  }

#endif
