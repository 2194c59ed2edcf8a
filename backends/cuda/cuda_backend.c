// SPDX-License-Identifier: MIT
// The CUDA backend "cuda", as the loadable module libflashattn-cuda.so.
//
// The core dlopens this module at first use and calls fa_module_backends()
// (FA_MODULE_ENTRY) with its services (error recording, dispatch log,
// configuration). The CUDA runtime is linked statically: it finds the
// driver (libcuda.so.1) at run time, so on a machine without a driver or
// device the module still loads and the probe reports why ("no usable CUDA
// driver: ..."), which fa_explain() and FA_LOG=dispatch print; nothing
// crashes.
//
// The host side is the one the HIP module shares (backends/gpu/
// gpu_backend.h over gpu_runtime.h's CUDA names: state, workspace, memory,
// errors, the generic kernels, merge); this file adds the probe, the
// devices it takes (compute capability 8.0+) and its kernels.
//
// Each kernel owns its admission and its plan (core/backend.h): supports()
// sees the problem, the context's device and the tensors' layout; score()
// holds the size heuristics; plan() fills the tiling from the kernel's tile
// table, reports the scratch it needs and reserves it in the context's
// workspace, so that a call makes no allocation, host-device copy or
// synchronisation. forward() and backward() then run exactly that kernel:
// a launch-time failure (a tensor map the driver refuses after supports()
// accepted it) is FA_ERR_BACKEND with a message, never another kernel.
// Every CUDA call is checked; failures become FA_ERR_BACKEND (or
// FA_ERR_OUT_OF_MEMORY) with the CUDA error's name and text.
//
// Every kernel declines what no GPU kernel implements yet, with the reason
// (fa_gpu_positions_modes_ok: per-sequence positions, the accumulating
// backward, dsinks), and takes explicit positions given as one offset
// (q_position, k_position). The 16-bit tensor-core kernels also decline an
// output dtype other than the input's and descales (fa_gpu_plain_io_ok),
// which the FP8 kernels (cuda.sm90.<e4m3|e5m2>.d128, cuda.sm80.<e4m3|e5m2>.*)
// and cuda.generic's forward take.
//
// Kernels (dispatch takes the highest score among those that accept),
// each arch's glue beside its kernels:
//   cuda.sm90.*          sm90/sm90_host.h (score 30, or 10: see there)
//   cuda.sm90.<e4m3|e5m2>.d128  sm90/sm90_fp8_host.h (30; FP8 inputs,
//                        descales, any output dtype; forward only)
//   cuda.sm80.*.decode   sm80/sm80_host.h (25 when the decode tile fits)
//   cuda.sm80.*          sm80/sm80_host.h (20; FP8 inputs too, forward
//                        only: cuda.sm80.<e4m3|e5m2>.d<dim>[.decode])
//   cuda.generic  every problem with head dims <= 256, forward and backward
//       (backends/gpu/generic_kernels.h, the same source as the HIP
//       module's hip.generic; fixed summation order, no atomics); the
//       forward also FP8 (e4m3, e5m2) inputs, descales and any output
//       dtype. Score 0.
// Switches (core/config.h, read through the core):
//   FA_CUDA_DETERMINISTIC=1  the tensor-core backwards add dQ in a fixed
//                            order (common/dq_turns.cuh): bitwise
//                            reproducible run to run, as cuda.generic;
//   FA_SM90_SERIAL=1         the sm90 forward's serial schedule (to measure
//                            what its overlap buys).
// For triage and tests, bind a context to a kernel by name
// (fa_context_create_by_name(&ctx, "cuda.sm80.bf16.d128")).
#include <limits.h>
#include <stdint.h>

#include "cuda_internal.h"

#define FA_GPU_RUNTIME_CUDA 1
#define FA_GPU_BACKEND_NAME "cuda"
#define FA_GPU_LAUNCHER(x) fa_cuda_launch_##x
#include "gpu_backend.h" // state, workspace, memory, generic kernels, merge

#define BACKEND_NAME FA_GPU_BACKEND_NAME

/* ---- probe and contexts -------------------------------------------------- */

/* Whether the driver has cuTensorMapEncodeTiled (CUDA 12.0+), looked up
   as the sm90 launchers look it up: read once by the probe (under the
   registry's once), so supports() only reads it. */
static int probed_tma;

static int tma_available(void) {
  void *f = NULL;
  enum cudaDriverEntryPointQueryResult r = cudaDriverEntryPointSymbolNotFound;
  int ok =
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                       cudaEnableDefault, &r) == cudaSuccess &&
      r == cudaDriverEntryPointSuccess && f;
  (void)cudaGetLastError();
  return ok;
}

static int probe(char *why, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)snprintf(why, len,
                   "no usable CUDA driver or device: cudaGetDeviceCount: "
                   "%s (%s)",
                   cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError();
    return 0;
  }
  if (n < 1) {
    (void)snprintf(why, len, "no CUDA device found");
    return 0;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0)) {
    (void)snprintf(why, len, "cudaDeviceGetAttribute failed on device 0");
    (void)cudaGetLastError();
    return 0;
  }
  if (major < 8) {
    (void)snprintf(why, len,
                   "device 0 has compute capability %d.%d; %s needs 8.0 "
                   "or newer (mma.sync bf16, cp.async)",
                   major, minor, BACKEND_NAME);
    return 0;
  }
  probed_cc = 10 * major + minor;
  probed_tma = tma_available();
  int sms = 0;
  probed_units = 108; // an A100, should the query fail
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) ==
          cudaSuccess &&
      sms > 0)
    probed_units = sms;
  return 1;
}

static fa_status ctx_create(int device, void **state) {
  int n = 0;
  CK(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (device >= n)
    return core->fail(FA_ERR_NO_DEVICE,
                      "device=%d: this machine has %d CUDA "
                      "device%s",
                      device, n, n == 1 ? "" : "s");
  int major = 0, minor = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
     "cudaDeviceGetAttribute");
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
     "cudaDeviceGetAttribute");
  if (major < 8)
    return core->fail(FA_ERR_NO_DEVICE,
                      "device=%d has compute capability "
                      "%d.%d; %s needs 8.0 or newer",
                      device, major, minor, BACKEND_NAME);
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
     "cudaDeviceGetAttribute");
  return state_create(device, sms, 10 * major + minor, state);
}

/* ---- what every arch's glue shares --------------------------------------- */

#define FA_DTYPE_bf16 FA_BF16
#define FA_DTYPE_f16 FA_F16
#define FA_DTYPE_e4m3 FA_E4M3
#define FA_DTYPE_e5m2 FA_E5M2

/* What identifies a kernel entry: its dtype, head dim and the arch's
   variant (sm80: 1 for the decode tile). */
typedef struct kdesc {
  int variant;
  fa_dtype dtype;
  int dim;
} kdesc;

/* A kernel entry's dtype and head dims (head_dim == head_dim_v). */
static int kernel_dims_ok(const kdesc *k, const fa_kernel_query *q, char *why,
                          size_t len) {
  const fa_problem *p = q->problem;
  if (p->dtype != k->dtype) {
    (void)snprintf(why, len, "dtype is %s; this kernel is %s",
                   fa_gpu_dtype_name(p->dtype), fa_gpu_dtype_name(k->dtype));
    return 0;
  }
  if (p->a.head_dim != k->dim || p->a.head_dim_v != k->dim) {
    (void)snprintf(why, len,
                   "head_dim %d, head_dim_v %d: this kernel is %d, %d",
                   p->a.head_dim, p->a.head_dim_v, k->dim, k->dim);
    return 0;
  }
  return 1;
}

/* A tensor-core kernel's problem: its dtype and head dims, what every GPU
   kernel implements, 16-byte aligned tensors. */
static int tc_shape_ok(const kdesc *k, const fa_kernel_query *q, char *why,
                       size_t len) {
  return kernel_dims_ok(k, q, why, len) && fa_gpu_features_ok(q, why, len) &&
         fa_gpu_aligned16(q, why, len);
}

/* An FP8 tensor-core kernel's problem: the forward (they have no backward;
   the CPU backends run the FP8 one), its dtype and head dims, what every
   GPU kernel implements, 16-byte aligned tensors; but any output dtype
   and descales (not fa_gpu_features_ok's fa_gpu_plain_io_ok). */
static int tc_fp8_shape_ok(const kdesc *k, const fa_kernel_query *q, char *why,
                           size_t len) {
  if (is_backward(q)) {
    (void)snprintf(why, len,
                   "the backward (the FP8 tensor-core kernels are forward "
                   "only; the CPU backends run the FP8 backward)");
    return 0;
  }
  return kernel_dims_ok(k, q, why, len) &&
         fa_gpu_positions_modes_ok(q, why, len) &&
         fa_gpu_aligned16(q, why, len);
}

/* The tensor-core backwards: what they leave to cuda.generic. */
static int tc_backward_ok(const fa_problem *p, char *why, size_t len) {
  if (p->paged) {
    (void)snprintf(why, len,
                   "paged KV (this backward reads dense or varlen K/V)");
    return 0;
  }
  if (p->a.softcap > 0.0f || p->a.alibi_slopes || !(p->a.scale > 0.0f)) {
    (void)snprintf(why, len,
                   "softcap, ALiBi or a scale <= 0 (this backward has "
                   "neither transform)");
    return 0;
  }
  return 1;
}

static fa_status grid_fits(int64_t blocks, const char *what) {
  return fa_gpu_grid_fits(core, blocks, what);
}

/* The tensor-core backwards' plan: one CTA per 128 keys, `rows` q rows per
   step, the D pre-pass and the dQ accumulator as scratch; their launches
   (D, the key blocks, the dQ store) checked against the grid limits. */
static fa_status tc_backward_plan(const fa_problem *p, int rows,
                                  const char *name, fa_plan_data *d) {
  const fa_attention *a = &p->a;
  fa_gpu_fixed_plan(p, rows, 128, d);
  d->workspace_bytes = fa_gpu_bwd_scratch(p, NULL, NULL);
  int64_t rows_q = (int64_t)a->batch * a->heads_q * a->seqlen_q;
  int64_t kblocks =
      (int64_t)a->batch * a->heads_kv * ((a->seqlen_k + 127) / 128);
  fa_status s;
  if ((s = grid_fits((rows_q + 3) / 4, "backward (D)")) ||
      (s = grid_fits(kblocks, name)) ||
      (s = grid_fits(rows_q * a->head_dim / 2 / 256 + 1, "backward (dQ)")))
    return s;
  return FA_OK;
}

/* The tensor-core backwards' common start: the D pre-pass into the plan's
   scratch and the zeroed dQ accumulator and turn counters. dQ goes through
   fp32 atomics, in an order that varies run to run unless
   FA_CUDA_DETERMINISTIC gives the kernels the counters that fix it. */
static fa_status tc_backward_start(gpu_state *st, const fa_problem *p,
                                   const fa_plan_data *plan,
                                   const fa_bwd_args *a, fa_gpu_params *q,
                                   float **dq_acc) {
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_fill_backward(q, p, plan, a);
  size_t acc_at, turns_at, bytes = fa_gpu_bwd_scratch(p, &acc_at, &turns_at);
  void *ws;
  if ((s = plan_scratch(st, plan, &ws))) return s;
  q->delta = ws;
  *dq_acc = (float *)((char *)ws + acc_at);
  q->dq_turns = config("FA_CUDA_DETERMINISTIC")
                    ? (int *)(void *)((char *)ws + turns_at)
                    : NULL;
  if (bytes > acc_at) // (an empty problem has neither)
    CK(cudaMemsetAsync(*dq_acc, 0, bytes - acc_at, st->stream),
       "cudaMemsetAsync (dQ accumulator, turns)");
  return launched(fa_cuda_launch_bwd_delta(q, st->stream),
                  "backward (D = rowsum(dO o O))");
}

static const char *kernel_name(const char *arch, const fa_problem *p, char *buf,
                               size_t len) {
  (void)snprintf(buf, len, "cuda.%s.%s.d%d", arch, fa_gpu_dtype_name(p->dtype),
                 p->a.head_dim);
  return buf;
}

/* A kernel entry's supports/score/plan over its arch's functions
   (<arch>_supports, <arch>_score, <arch>_plan) and its kdesc. */
#define KERNEL_FNS(id, arch, variant, t, d, nm)                                \
  static const kdesc desc_##id = {variant, FA_DTYPE_##t, d};                   \
  static int supports_##id(const fa_kernel_query *q, char *why, size_t len) {  \
    return arch##_supports(&desc_##id, q, why, len);                           \
  }                                                                            \
  static int score_##id(const fa_kernel_query *q) {                            \
    return arch##_score(&desc_##id, q);                                        \
  }                                                                            \
  static fa_status plan_##id(const fa_kernel_query *q, fa_plan_data *out) {    \
    return arch##_plan(&desc_##id, nm, q, out);                                \
  }
#define ENTRY(id, nm, fwd, bwd)                                                \
  {                                                                            \
    .name = (nm), .supports = supports_##id, .score = score_##id,              \
    .plan = plan_##id, .forward = (fwd), .backward = (bwd)                     \
  }

/* ---- the arches ---------------------------------------------------------- */

#include "sm80/sm80_host.h"
#include "sm90/sm90_host.h"
#include "sm90/sm90_fp8_host.h"

/* ---- cuda.generic -------------------------------------------------------- */

static int generic_supports(const kdesc *k, const fa_kernel_query *q, char *why,
                            size_t len) {
  (void)k;
  return fa_gpu_generic_supports(q, why, len);
}

static int generic_score(const kdesc *k, const fa_kernel_query *q) {
  (void)k;
  (void)q;
  return 0;
}

static fa_status generic_plan(const kdesc *k, const char *name,
                              const fa_kernel_query *q, fa_plan_data *d) {
  (void)k;
  memset(d, 0, sizeof *d);
  fa_caps caps;
  // Backward: one CTA per 128 keys; forward: the sm80 main tile's blocks.
  fa_cuda_caps(query_units(q), 128, 64, !is_backward(q), &caps);
  return plan_generic_kernel(q, &caps, d, name);
}

KERNEL_FNS(generic, generic, 0, bf16, 0, "cuda.generic")

/* ---- the kernel table ---------------------------------------------------- */

// Table order breaks score ties: sm90, then the decode tiles, sm80 and
// the generic kernel.
static const fa_kernel kernels[] = {
    // clang-format off
    FA_SM90_ROWS(FA_SM90_ENTRY)
    FA_SM90_FP8_ROWS(FA_SM90_FP8_ENTRY)
    FA_SM80_DECODE_ROWS(FA_SM80_DECODE_ENTRY)
    FA_SM80_ROWS(FA_SM80_ENTRY)
    // clang-format on
    ENTRY(generic, "cuda.generic", fwd_generic, bwd_generic),
};

FA_GPU_MODULE(FA_BACKEND_CUDA, FA_MEMORY_CUDA)
