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
// (fa_gpu_features_ok: an output dtype other than the input's, descales,
// per-sequence positions, the accumulating backward, dsinks), and takes
// explicit positions given as one offset (q_position, k_position).
//
// Kernels (dispatch takes the highest score among those that accept):
//   cuda.sm90.<bf16|f16>.d<64|128|256>  sm_90a forward (sm90_fwd.cuh: wgmma,
//       TMA, warp specialisation), head_dim == head_dim_v, not paged,
//       tensors the copy engine can address; d64/d128 also the backward
//       (sm90_bwd.cuh: wgmma, TMA, dQ by 16-byte reductions). Score 30;
//       10 for seqlen_q < 64 or a problem the sm80 plan splits (fewer q
//       blocks than SMs): the sm80 tiles pack GQA heads and split the keys.
//   cuda.sm80.<bf16|f16>.d<64|96|128|192|256>  tensor-core forward
//       (sm80_fwd.cuh, tile table sm80_tiles.def), head_dim == head_dim_v,
//       16-byte aligned tensors; d64/d128 also the backward (sm80_bwd.cuh:
//       dQ through fp32 atomics; not paged, no softcap/ALiBi). Score 20.
//   cuda.sm80.<bf16|f16>.d<64|128>.decode  the same kernel with the decode
//       tile (32 lanes): score 25 when the whole q block of a (sequence,
//       kv head) fits its lanes, else 1. Forward only.
//   cuda.generic  every problem with head dims <= 256, forward and backward
//       (backends/gpu/generic_kernels.h, the same source as the HIP
//       module's hip.generic; fixed summation order, no atomics). Score 0.
// Switches (core/config.h, read through the core):
//   FA_CUDA_DETERMINISTIC=1  the tensor-core backwards decline (they add dQ
//                            atomically): cuda.generic's backward, bitwise
//                            reproducible run to run;
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

/* ---- probe and contexts ------------------------------------------------- */

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

/* ---- compiled instantiations -------------------------------------------- */

#define FA_DTYPE_bf16 FA_BF16
#define FA_DTYPE_f16 FA_F16

/* The sm80 forward (generated list, FA_CUDA_HEAD_DIMS): variant 0 is a head
   dim's main tile, 1 its decode tile. */
#define FA_SM80_INST(t, d, v)                                                  \
  int fa_sm80_fwd_##t##_d##d##_v##v(const fa_gpu_params *p, void *stream);
#include "sm80_instances.h"
#undef FA_SM80_INST

typedef int (*fa_sm80_fwd_fn)(const fa_gpu_params *p, void *stream);
typedef struct sm80_instance {
  fa_dtype dtype;
  int dim, variant;
  fa_sm80_fwd_fn launch;
} sm80_instance;

static const sm80_instance sm80_instances[] = {
#define FA_SM80_INST(t, d, v)                                                  \
  {FA_DTYPE_##t, d, v, fa_sm80_fwd_##t##_d##d##_v##v},
#include "sm80_instances.h"
#undef FA_SM80_INST
    {FA_F32, 0, 0, NULL}};

static fa_sm80_fwd_fn sm80_find(fa_dtype dtype, int dim, int variant) {
  for (const sm80_instance *i = sm80_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim && i->variant == variant)
      return i->launch;
  return NULL;
}

/* The sm80 backward, per (dtype, head dim). */
#define FA_SM80_BWD_INST(t, d)                                                 \
  int fa_sm80_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,            \
                             void *stream);
#include "sm80_bwd_instances.h"
#undef FA_SM80_BWD_INST

typedef int (*fa_sm80_bwd_fn)(const fa_gpu_params *p, float *dq_acc,
                              void *stream);
typedef struct sm80_bwd_instance {
  fa_dtype dtype;
  int dim;
  fa_sm80_bwd_fn launch;
} sm80_bwd_instance;

static const sm80_bwd_instance sm80_bwd_instances[] = {
#define FA_SM80_BWD_INST(t, d) {FA_DTYPE_##t, d, fa_sm80_bwd_##t##_d##d},
#include "sm80_bwd_instances.h"
#undef FA_SM80_BWD_INST
    {FA_F32, 0, NULL}};

static fa_sm80_bwd_fn sm80_bwd_find(fa_dtype dtype, int dim) {
  for (const sm80_bwd_instance *i = sm80_bwd_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim) return i->launch;
  return NULL;
}

/* The sm90 forward (90a built, head dims 64/128/256 of FA_CUDA_HEAD_DIMS).
   Launchers return a cudaError_t, or -1 when the copy engine cannot
   address the tensors (nothing launched). */
#define FA_SM90_INST(t, d)                                                     \
  int fa_sm90_fwd_##t##_d##d(const fa_gpu_params *p, int64_t rows_q,           \
                             int64_t rows_k, int sms, int serial,              \
                             void *stream);
#include "sm90_instances.h"
#undef FA_SM90_INST

typedef int (*fa_sm90_fwd_fn)(const fa_gpu_params *p, int64_t rows_q,
                              int64_t rows_k, int sms, int serial,
                              void *stream);
typedef struct sm90_instance {
  fa_dtype dtype;
  int dim;
  fa_sm90_fwd_fn launch;
} sm90_instance;

static const sm90_instance sm90_instances[] = {
#define FA_SM90_INST(t, d) {FA_DTYPE_##t, d, fa_sm90_fwd_##t##_d##d},
#include "sm90_instances.h"
#undef FA_SM90_INST
    {FA_F32, 0, NULL}};

static fa_sm90_fwd_fn sm90_find(fa_dtype dtype, int dim) {
  for (const sm90_instance *i = sm90_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim) return i->launch;
  return NULL;
}

/* The sm90 backward (d64/d128), same return convention. */
#define FA_SM90_BWD_INST(t, d)                                                 \
  int fa_sm90_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,            \
                             int64_t rows_q, int64_t rows_k, void *stream);
#include "sm90_bwd_instances.h"
#undef FA_SM90_BWD_INST

typedef int (*fa_sm90_bwd_fn)(const fa_gpu_params *p, float *dq_acc,
                              int64_t rows_q, int64_t rows_k, void *stream);
typedef struct sm90_bwd_instance {
  fa_dtype dtype;
  int dim;
  fa_sm90_bwd_fn launch;
} sm90_bwd_instance;

static const sm90_bwd_instance sm90_bwd_instances[] = {
#define FA_SM90_BWD_INST(t, d) {FA_DTYPE_##t, d, fa_sm90_bwd_##t##_d##d},
#include "sm90_bwd_instances.h"
#undef FA_SM90_BWD_INST
    {FA_F32, 0, NULL}};

static fa_sm90_bwd_fn sm90_bwd_find(fa_dtype dtype, int dim) {
  for (const sm90_bwd_instance *i = sm90_bwd_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim) return i->launch;
  return NULL;
}

/* ---- admission ------------------------------------------------------------
 */

/* What identifies a kernel entry: its family, dtype and head dim. */
typedef enum family { SM90, SM80, DECODE, GENERIC } family;
typedef struct kdesc {
  family fam;
  fa_dtype dtype;
  int dim;
} kdesc;

static int shape_ok(const kdesc *k, const fa_problem *p, char *why,
                    size_t len) {
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

/* The tensor-core backwards: what they leave to cuda.generic. */
static int tc_backward_ok(const fa_problem *p, char *why, size_t len) {
  if (config("FA_CUDA_DETERMINISTIC")) {
    (void)snprintf(why, len,
                   "FA_CUDA_DETERMINISTIC is set (this backward adds dQ "
                   "atomically)");
    return 0;
  }
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

/* Whether the sm90 launchers' tensor maps can describe tensor t of `rows`
   storage rows (per batch, or all of them when varlen) and `heads` heads:
   the conditions of make_map (sm90_fwd.cuh) on 16-bit elements. */
static int tma_ok(const char *name, const fa_tensor *t, int64_t rows, int heads,
                  int batch, char *why, size_t len) {
  const int64_t ss = t->stride_seq * 2, sh = t->stride_head * 2;
  const int64_t sb = batch > 1 ? t->stride_batch * 2 : rows * ss;
  const int64_t lim = (int64_t)1 << 40;
  const char *bad = NULL;
  if ((uintptr_t)t->data % 16 || ss % 16 || sh % 16 || sb % 16)
    bad = "a stride or the data is not 16-byte aligned";
  else if (ss <= 0 || sh <= 0 || sb <= 0)
    bad = "a stride is 0";
  else if (ss >= lim || sh >= lim || sb >= lim)
    bad = "a stride is 2^40 bytes or more";
  else if (rows < 1 || rows > 0xFFFFFFFFll)
    bad = "no storage rows, or 2^32 or more";
  (void)heads;
  if (!bad) return 1;
  (void)snprintf(why, len, "the copy engine cannot address %s (%s)", name, bad);
  return 0;
}

static int sm90_layout_ok(const fa_kernel_query *q, char *why, size_t len) {
  const fa_layout *l = q->layout;
  if (!l) return 1; // contiguous BSHD (fa_explain)
  const fa_problem *p = q->problem;
  const fa_attention *a = &p->a;
  const int bq = p->varlen_q ? 1 : a->batch, bk = p->varlen_k ? 1 : a->batch;
  const int64_t rq = p->varlen_q ? p->rows_q : a->seqlen_q;
  const int64_t rk = p->varlen_k ? p->rows_k : a->seqlen_k;
  if (!tma_ok("q", &l->q, rq, a->heads_q, bq, why, len) ||
      !tma_ok("k", &l->k, rk, a->heads_kv, bk, why, len) ||
      !tma_ok("v", &l->v, rk, a->heads_kv, bk, why, len))
    return 0;
  if (l->op == FA_OP_BACKWARD &&
      !tma_ok("do", &l->d_o, rq, a->heads_q, bq, why, len))
    return 0;
  return 1;
}

static int kernel_supports(const kdesc *k, const fa_kernel_query *q, char *why,
                           size_t len) {
  const fa_problem *p = q->problem;
  const int bwd = is_backward(q);
  if (k->fam == GENERIC) return fa_gpu_generic_supports(q, why, len);
  if (!shape_ok(k, p, why, len) || !fa_gpu_features_ok(q, why, len) ||
      !fa_gpu_aligned16(q, why, len))
    return 0;
  if (k->fam == SM90) {
    int cc = query_cc(q);
    if (cc != 90) {
      (void)snprintf(why, len,
                     "device %d has compute capability %d.%d; this "
                     "kernel is sm_90a",
                     query_device(q), cc / 10, cc % 10);
      return 0;
    }
    int built = bwd ? sm90_bwd_find(k->dtype, k->dim) != NULL
                    : sm90_find(k->dtype, k->dim) != NULL;
    if (!built) {
      (void)snprintf(why, len,
                     "not compiled in this build (90a, "
                     "FA_CUDA_HEAD_DIMS)");
      return 0;
    }
    if (p->paged) {
      (void)snprintf(why, len,
                     "paged KV (the sm80 kernels read the block table)");
      return 0;
    }
    if (p->a.seqlen_k == 0) {
      (void)snprintf(why, len,
                     "seqlen_k 0 (a TMA map needs rows; the sm80 "
                     "kernels take an empty cache)");
      return 0;
    }
    if (!probed_tma) {
      (void)snprintf(why, len, "the driver has no cuTensorMapEncodeTiled");
      return 0;
    }
    if (bwd && !tc_backward_ok(p, why, len)) return 0;
    return sm90_layout_ok(q, why, len);
  }
  // SM80, DECODE
  int built = bwd ? sm80_bwd_find(k->dtype, k->dim) != NULL
                  : sm80_find(k->dtype, k->dim, k->fam == DECODE) != NULL;
  if (!built) {
    (void)snprintf(why, len, "not compiled in this build (FA_CUDA_HEAD_DIMS)");
    return 0;
  }
  return !bwd || tc_backward_ok(p, why, len);
}

/* Whether the sm80 plan of the problem splits the keys with fewer q blocks
   of 128 rows than SMs: the sm80 tiles then beat the unsplit sm90 one. */
static int sm80_splits(const kdesc *k, const fa_kernel_query *q) {
  const fa_cuda_tile *t = fa_cuda_tile_of(0, k->dim);
  if (!t) return 0;
  fa_plan_data plan;
  fa_cuda_sm80_plan(q->problem, t, query_units(q), &plan);
  const fa_attention *a = &q->problem->a;
  int64_t items = (int64_t)a->batch * a->heads_q * ((a->seqlen_q + 127) / 128);
  return plan.num_splits > 1 && items < query_units(q);
}

/* Whether the main tile's plan has one q block that the decode tile's
   lanes hold (a few queries x the packed GQA heads). */
static int decode_sized(const kdesc *k, const fa_kernel_query *q) {
  const fa_cuda_tile *t = fa_cuda_tile_of(0, k->dim);
  const fa_cuda_tile *td = fa_cuda_tile_of(1, k->dim);
  if (!t || !td) return 0;
  fa_caps caps;
  fa_plan_data plan;
  fa_cuda_caps(query_units(q), t->block_q, t->block_k, 1, &caps);
  fa_plan_compute(q->problem, &caps, &plan);
  return plan.num_q_blocks == 1 && plan.block_q <= td->block_q;
}

static int kernel_score(const kdesc *k, const fa_kernel_query *q) {
  const int bwd = is_backward(q);
  switch (k->fam) {
  case SM90:
    if (bwd) return 30;
    // Decode and split-KV shapes: a 128-row tile would be mostly padding,
    // or leave SMs idle (the sm80 tiles pack GQA heads, split the keys).
    return q->problem->a.seqlen_q < 64 || sm80_splits(k, q) ? 10 : 30;
  case SM80:
    return 20;
  case DECODE:
    return decode_sized(k, q) ? 25 : 1;
  case GENERIC:
    return 0;
  }
  return 0;
}

/* ---- plans -----------------------------------------------------------------
 */

static fa_status grid_fits(int64_t blocks, const char *what) {
  return fa_gpu_grid_fits(core, blocks, what);
}

/* The tensor-core backwards' launches: the D pre-pass, the key blocks and
   the dQ store. */
static fa_status tc_backward_grids(const fa_problem *p, const char *name) {
  const fa_attention *a = &p->a;
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

static fa_status kernel_plan(const kdesc *k, const char *name,
                             const fa_kernel_query *q, fa_plan_data *d) {
  const fa_problem *p = q->problem;
  const int bwd = is_backward(q);
  fa_status s = FA_OK;
  memset(d, 0, sizeof *d);
  if (bwd) {
    // One CTA per 128 keys; q rows per step as the kernels' bwd_rows().
    if (k->fam == GENERIC) {
      fa_caps caps;
      fa_cuda_caps(query_units(q), 128, 64, 0, &caps);
      return plan_generic_kernel(q, &caps, d, name);
    } else {
      int rows = k->fam == SM90 ? (k->dim == 64 ? 128 : 64)
                                : (k->dim >= 128 ? 32 : 64);
      fa_gpu_fixed_plan(p, rows, 128, d);
      d->workspace_bytes = fa_gpu_bwd_scratch(p, NULL);
      s = tc_backward_grids(p, name);
    }
  } else if (k->fam == SM90) {
    const fa_cuda_sm90_tile *t = fa_cuda_sm90_tile_of(k->dim);
    if (!t)
      return core->fail(FA_ERR_BACKEND, "%s: no sm90_tiles.def row for d%d",
                        name, k->dim);
    fa_gpu_fixed_plan(p, t->block_m, t->block_n, d);
  } else {
    const fa_cuda_tile *t = fa_cuda_tile_of(k->fam == DECODE, k->dim);
    if (k->fam == GENERIC) {
      fa_caps caps;
      fa_cuda_caps(query_units(q), 128, 64, 1, &caps);
      return plan_generic_kernel(q, &caps, d, name);
    }
    if (!t)
      return core->fail(FA_ERR_BACKEND, "%s: no sm80_tiles.def row for d%d",
                        name, k->dim);
    fa_cuda_sm80_plan(p, t, query_units(q), d);
    d->workspace_bytes = fa_gpu_split_bytes_of(p, d);
    s = grid_fits(d->num_work, name);
  }
  if (!s) s = plan_reserve(q, d->workspace_bytes);
  if (!s) log_plan(name, d);
  return s;
}

/* ---- forward
 * ----------------------------------------------------------------- */

/* The sm90 launchers' -1: the driver refused a tensor map that supports()
   judged encodable. */
static fa_status tma_refused(const char *name) {
  return core->fail(FA_ERR_BACKEND,
                    "%s: %s: cuTensorMapEncodeTiled refused "
                    "a tensor that supports() accepted (strides %s)",
                    BACKEND_NAME, name, "or sizes");
}

static const char *kernel_name(const char *fam, const fa_problem *p, char *buf,
                               size_t len) {
  (void)snprintf(buf, len, "cuda.%s.%s.d%d", fam, fa_gpu_dtype_name(p->dtype),
                 p->a.head_dim);
  return buf;
}

static fa_status fwd_sm80_variant(void *state, const fa_problem *p,
                                  const fa_plan_data *plan,
                                  const fa_fwd_args *a, int decode) {
  char name[48];
  kernel_name("sm80", p, name, sizeof name);
  if (decode) strncat(name, ".decode", sizeof name - strlen(name) - 1);
  fa_gpu_launch_fn fn = sm80_find(p->dtype, p->a.head_dim, decode);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: not compiled in", name);
  return run_forward(state, p, plan, a, fn, name);
}

static fa_status fwd_sm80(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  return fwd_sm80_variant(state, p, plan, a, 0);
}

static fa_status fwd_decode(void *state, const fa_problem *p,
                            const fa_plan_data *plan, const fa_fwd_args *a) {
  return fwd_sm80_variant(state, p, plan, a, 1);
}

static fa_status fwd_sm90(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  gpu_state *st = state;
  char name[48];
  kernel_name("sm90", p, name, sizeof name);
  fa_sm90_fwd_fn fn = sm90_find(p->dtype, p->a.head_dim);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: not compiled in", name);
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q; // the launcher sets its geometry (the plan's, too)
  fa_gpu_fill_forward(&q, p, plan, a);
  int err = fn(&q, p->rows_q, p->rows_k, st->units,
               config("FA_SM90_SERIAL") != 0, st->stream);
  return err == -1 ? tma_refused(name) : launched(err, name);
}

/* ---- backward -------------------------------------------------------------
 */

/* The tensor-core backwards' common start: the D pre-pass into the plan's
   scratch and the zeroed dQ accumulator. dQ goes through fp32 atomics, so
   its summation order varies run to run (FA_CUDA_DETERMINISTIC declines
   these kernels). */
static fa_status tc_backward_start(gpu_state *st, const fa_problem *p,
                                   const fa_plan_data *plan,
                                   const fa_bwd_args *a, fa_gpu_params *q,
                                   float **dq_acc) {
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_fill_backward(q, p, plan, a);
  size_t acc_at, bytes = fa_gpu_bwd_scratch(p, &acc_at);
  void *ws;
  if ((s = plan_scratch(st, plan, &ws))) return s;
  q->delta = ws;
  *dq_acc = (float *)((char *)ws + acc_at);
  if (bytes > acc_at) // (an empty problem has no accumulator)
    CK(cudaMemsetAsync(*dq_acc, 0, bytes - acc_at, st->stream),
       "cudaMemsetAsync (dQ accumulator)");
  return launched(fa_cuda_launch_bwd_delta(q, st->stream),
                  "backward (D = rowsum(dO o O))");
}

static fa_status bwd_sm80(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_bwd_args *a) {
  char name[48];
  kernel_name("sm80", p, name, sizeof name);
  fa_sm80_bwd_fn fn = sm80_bwd_find(p->dtype, p->a.head_dim);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: no backward", name);
  fa_gpu_params q;
  float *dq_acc;
  fa_status s = tc_backward_start(state, p, plan, a, &q, &dq_acc);
  if (s) return s;
  return launched(fn(&q, dq_acc, ((gpu_state *)state)->stream), name);
}

static fa_status bwd_sm90(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_bwd_args *a) {
  char name[48];
  kernel_name("sm90", p, name, sizeof name);
  fa_sm90_bwd_fn fn = sm90_bwd_find(p->dtype, p->a.head_dim);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: no backward", name);
  fa_gpu_params q;
  float *dq_acc;
  fa_status s = tc_backward_start(state, p, plan, a, &q, &dq_acc);
  if (s) return s;
  int err = fn(&q, dq_acc, p->rows_q, p->rows_k, ((gpu_state *)state)->stream);
  return err == -1 ? tma_refused(name) : launched(err, name);
}

/* ---- the kernel table ------------------------------------------------------
 */

#define KERNEL_FNS(id, fam, t, d, nm)                                          \
  static const kdesc desc_##id = {fam, FA_DTYPE_##t, d};                       \
  static int supports_##id(const fa_kernel_query *q, char *why, size_t len) {  \
    return kernel_supports(&desc_##id, q, why, len);                           \
  }                                                                            \
  static int score_##id(const fa_kernel_query *q) {                            \
    return kernel_score(&desc_##id, q);                                        \
  }                                                                            \
  static fa_status plan_##id(const fa_kernel_query *q, fa_plan_data *out) {    \
    return kernel_plan(&desc_##id, nm, q, out);                                \
  }

#define SM90(t, d)                                                             \
  KERNEL_FNS(sm90_##t##_d##d, SM90, t, d, "cuda.sm90." #t ".d" #d)
#define SM80(t, d)                                                             \
  KERNEL_FNS(sm80_##t##_d##d, SM80, t, d, "cuda.sm80." #t ".d" #d)
#define DECODE(t, d)                                                           \
  KERNEL_FNS(decode_##t##_d##d, DECODE, t, d, "cuda.sm80." #t ".d" #d ".decode")
// One row per kernel family, as the table below lists them.
// clang-format off
SM90(bf16, 64) SM90(bf16, 128) SM90(bf16, 256)
SM90(f16, 64) SM90(f16, 128) SM90(f16, 256)
SM80(bf16, 64) SM80(bf16, 96) SM80(bf16, 128) SM80(bf16, 192) SM80(bf16, 256)
SM80(f16, 64) SM80(f16, 96) SM80(f16, 128) SM80(f16, 192) SM80(f16, 256)
DECODE(bf16, 64) DECODE(bf16, 128) DECODE(f16, 64) DECODE(f16, 128)
KERNEL_FNS(generic, GENERIC, bf16, 0, "cuda.generic")
// clang-format on
#undef SM90
#undef SM80
#undef DECODE

// The kernel table reads as a table.
// clang-format off
#define ENTRY(id, nm, fwd, bwd)                                                \
  {.name = (nm), .supports = supports_##id, .score = score_##id,               \
   .plan = plan_##id, .forward = (fwd), .backward = (bwd)}
#define SM90(t, d, bwd)                                                        \
  ENTRY(sm90_##t##_d##d, "cuda.sm90." #t ".d" #d, fwd_sm90, bwd)
#define SM80(t, d, bwd)                                                        \
  ENTRY(sm80_##t##_d##d, "cuda.sm80." #t ".d" #d, fwd_sm80, bwd)
#define DECODE(t, d)                                                           \
  ENTRY(decode_##t##_d##d, "cuda.sm80." #t ".d" #d ".decode", fwd_decode, NULL)

// Table order breaks score ties: sm90, then the decode tiles, sm80 and
// the generic kernel. d64/d128 have tensor-core backwards; the other
// dims' backward is cuda.generic's.
static const fa_kernel kernels[] = {
    SM90(bf16, 128, bwd_sm90), SM90(f16, 128, bwd_sm90),
    SM90(bf16, 64, bwd_sm90),  SM90(f16, 64, bwd_sm90),
    SM90(bf16, 256, NULL),     SM90(f16, 256, NULL),
    DECODE(bf16, 128),         DECODE(f16, 128),
    DECODE(bf16, 64),          DECODE(f16, 64),
    SM80(bf16, 128, bwd_sm80), SM80(f16, 128, bwd_sm80),
    SM80(bf16, 64, bwd_sm80),  SM80(f16, 64, bwd_sm80),
    SM80(bf16, 256, NULL),     SM80(f16, 256, NULL),
    SM80(bf16, 192, NULL),     SM80(f16, 192, NULL),
    SM80(bf16, 96, NULL),      SM80(f16, 96, NULL),
    ENTRY(generic, "cuda.generic", fwd_generic, bwd_generic),
};
// clang-format on

FA_GPU_MODULE(FA_BACKEND_CUDA, FA_MEMORY_CUDA)
