// SPDX-License-Identifier: MIT
// The sm90 FP8 forward (sm_90a only): e4m3 or e5m2 Q, K, V through wgmma
// (Q K^T in the input type, P V as e4m3 P x V) -> fp32, head dim 128. The
// schedule is the 16-bit sm90 forward's, the one of sm90_schedule.cuh (one
// TMA producer warpgroup, two consumer warpgroups of 64 query rows taking
// turns at the tensor cores, S_{j+1} issued with P_j V_j, the online
// softmax in base 2), instantiated over fp8_ops below; what differs is
// said here.
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
// relative step is the same in every binade). The softmax gives P times
// 2^8 directly (its reference 8 lower: P_LOG2 in sm90_items.cuh's
// exp_rows), so no multiply per score; l sums that P in fp32 before the
// rounding, the epilogue divides l by 2^8 exactly, and O's factor carries
// the 2^-8 of the P V accumulators.
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
#include "gpu_params.h"
#include "seq_rows.h"
#include "sm90_fp8.h"
#include "sm90_fp8_vt.cuh"
#include "sm90_schedule.cuh"
#include "sm90_wgmma_fp8.h"
#include "softmax.h"

namespace fa_sm90_fp8 {

using namespace fa_cuda; // PTX, TMA and wgmma helpers (backends/cuda/common)
using namespace fa_sm90; // the schedule, the wgmma FP8 wrappers

constexpr int kD = 128, kBM = 128, kBN = kVtKeys, kStages = 4;
constexpr int kNC = kBM / 64;
constexpr uint32_t kQB = kBM * kD, kKB = kBN * kD, kVB = kD * kBN; // bytes
constexpr int kPLog2 = 8; // P's fixed scale, 2^8 (see the header)
constexpr float kPScale = (float)(1 << kPLog2);

/* The descale of an input for sequence b, kv head hk (1 without one). */
__device__ __forceinline__ float
descale(const fa_gpu_descale_ref &d, const fa_gpu_params &p, int b, int hk) {
  if (!d.data) return 1.0f;
  return d.per_head ? d.data[(int64_t)b * p.prob.heads_kv + hk] : d.data[0];
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

/* ---- the operands: FP8 Q and K, V^T from the pre-pass (see the header)
   ---- IN: the inputs' wgmma type tag (f8_e4m3, f8_e5m2); TO: O's element. */
template <typename IN, typename TO> struct fp8_ops {
  static constexpr int BM = kBM, BN = kBN, ST = kStages;
  static constexpr int NCB = 1, CB = kD; // a row of kD codes: one block
  static constexpr int ON = kD, NO = 1, PK = BN / 32; // k32 steps of P V
  static constexpr int P_LOG2 = kPLog2; // the softmax gives P times kPScale
  static constexpr uint32_t QB = kQB, KB = kKB, VB = kVB;
  typedef TO out_t;

  // scale * dq * dk * log2(e): the one factor of the base-2 softmax, on
  // raw q.k.
  __device__ __forceinline__ static float softmax_mul(const fa_gpu_params &p,
                                                      int b, int hk, float) {
    return p.prob.scale * descale(p.descale_q, p, b, hk) *
           descale(p.descale_k, p, b, hk) * kLog2e;
  }
  // dv / kPScale (P was stored times kPScale).
  __device__ __forceinline__ static float out_scale(const fa_gpu_params &p,
                                                    int b, int hk) {
    return descale(p.descale_v, p, b, hk) / kPScale;
  }
  // Block kb of the (sequence b, kv head hk) slab of V^T: D rows of its
  // keys (keys_pad per slab, so no row or batch offset).
  __device__ __forceinline__ static void load_v(uint32_t sV, uint32_t s,
                                                const CUtensorMap *map,
                                                uint32_t full, int kb, int,
                                                int hk, int, int b) {
    tma_load(sV + s * VB, map, full, kb * BN, 0, hk, b);
  }
  __device__ __forceinline__ static void
  issue_s(float (&sc)[BN / 2], uint32_t sQ, uint32_t sK, uint32_t s, int cw) {
    const uint64_t a0 = desc_sw128(sQ + cw * 64 * 128, 16, 1024),
                   b0 = desc_sw128(sK + s * KB, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < kD / 32; kk++)
      wgmma_f8<IN, IN, BN>::ss(sc, desc_add(a0, kk * 32), desc_add(b0, kk * 32),
                               kk > 0);
  }
  __device__ __forceinline__ static void issue_pv(float (&o)[NO][ON / 2],
                                                  const uint32_t (&pa)[PK][4],
                                                  uint32_t sV, uint32_t s) {
    const uint64_t b0 = desc_sw128(sV + s * VB, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++)
      wgmma_f8<f8_e4m3, IN, kD>::rs(o[0], pa[kk], desc_add(b0, kk * 32), 1);
  }
  // P (already times kPScale: P_LOG2) to e4m3 A fragments: k32 group kk is n8
  // chunks 4kk .. 4kk+3; registers 0/2 hold row g, 1/3 row g + 8; register 0
  // the chunks 4kk, 4kk+1 and register 2 the chunks 4kk+2, 4kk+3, two keys of
  // each (the order fp8_vt_key stores V^T in).
  __device__ __forceinline__ static void pack_p(const float (&sc)[BN / 2],
                                                uint32_t (&pa)[PK][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++)
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int hr = r & 1, j = 4 * kk + 2 * (r >> 1);
        const float *a = &sc[4 * j + 2 * hr], *b = &sc[4 * (j + 1) + 2 * hr];
        pa[kk][r] = e4m3x2(a[0], a[1]) | e4m3x2(b[0], b[1]) << 16;
      }
  }
  // V^T has zeros past each sequence's end (the pre-pass writes them).
  __device__ __forceinline__ static void zero_v_tail(uint32_t, uint32_t, int,
                                                     int) {}
  __device__ __forceinline__ static void store_o(TO *dst, int off, float x0,
                                                 float x1, float f) {
    store2<TO>(dst + off, x0 * f, x1 * f);
  }
};

/* The kernel: the schedule over the FP8 operands (the overlapped one, no
   score transform, dense or varlen K/V; tv is the V^T map). */
template <typename IN, typename TO>
FA_SM90_FWD_KERNEL(kNC, false, true, false, fp8_ops<IN, TO>)

/* ---- host side
 * ---------------------------------------------------------------- */

/* An FP8 [batch][rows][heads][D] view as a 4-d tensor map of boxes {D codes,
   box_rows, 1, 1} (0 when the copy engine cannot address it). */
static int map_rows(CUtensorMap *m, const fa_tensor_view &v, int64_t rows,
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

template <typename IN, typename TO>
int launch_out(const fa_gpu_params *in, int64_t rows_q, int64_t rows_k, int sms,
               void *vt, void *stream) {
  fa_gpu_params g = *in;
  g.plan.block_q = g.plan.block_rows = kBM;
  g.plan.block_k = kBN;
  g.plan.pack_group = 1;
  g.plan.num_splits = 1;
  g.plan.num_q_blocks = (int)(((int64_t)g.prob.seqlen_q + kBM - 1) / kBM);
  g.plan.num_work =
      (int64_t)g.prob.batch * g.prob.heads_q * g.plan.num_q_blocks;
  if (g.plan.num_work <= 0) return 0;
  const int64_t keys_pad = fa_sm90_fp8_keys_pad(g.prob.seqlen_k);
  CUtensorMap tq, tk, tvt;
  const int bq = g.prob.varlen_q ? 1 : g.prob.batch,
            bk = g.prob.varlen_k ? 1 : g.prob.batch;
  const int64_t rq = g.prob.varlen_q ? rows_q : g.prob.seqlen_q;
  const int64_t rk = g.prob.varlen_k ? rows_k : g.prob.seqlen_k;
  if (!map_rows(&tq, g.q, rq, g.prob.heads_q, bq, kBM) ||
      !map_rows(&tk, g.k, rk, g.prob.heads_kv, bk, kBN) ||
      !map_vt(&tvt, vt, keys_pad, g.prob.heads_kv, g.prob.batch))
    return -1;
  cudaStream_t st = (cudaStream_t)stream;
  const dim3 vgrid((unsigned)(keys_pad / kVtKeys), (unsigned)g.prob.heads_kv,
                   (unsigned)g.prob.batch);
  vt_transpose<kD><<<vgrid, 256, 0, st>>>(g, (uint8_t *)vt, keys_pad);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  auto kernel = fwd_kernel<IN, TO>;
  constexpr int smem = smem_bytes<fp8_ops<IN, TO>>();
  static_assert(smem <= 232448, "sm90 FP8 tile over the 227 KB opt-in limit");
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
  if (e != cudaSuccess) return (int)e;
  g.pair_items = pairs_wanted(g, sms, 2 * kD);
  const int64_t grid = forward_grid(g, sms);
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
    switch (p->prob.dtype_out) {                                               \
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
