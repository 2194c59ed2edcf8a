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
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_internal.h"
#include "gpu_host.h"

static const fa_core_services *core; // set once by fa_module_backends()

#define BACKEND_NAME "cuda"

/* ---- errors ------------------------------------------------------------- */

static fa_status cuda_fail(cudaError_t e, const char *what) {
  fa_status s = e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY
                                               : FA_ERR_BACKEND;
  fa_status r = core->fail(s, "%s: %s: %s (%s)", BACKEND_NAME, what,
                           cudaGetErrorString(e), cudaGetErrorName(e));
  (void)cudaGetLastError(); // clear a non-sticky error for the next call
  return r;
}

#define CK(call, what)                                                         \
  do {                                                                         \
    cudaError_t ck_ = (call);                                                  \
    if (ck_ != cudaSuccess) return cuda_fail(ck_, what);                       \
  } while (0)

/* ---- per-context state ---------------------------------------------------- */

typedef struct cuda_state {
  int device;
  int sm_count;
  int cc; // compute capability, 10 * major + minor
  cudaStream_t stream; // NULL: the legacy default stream
  void *ws;            // workspace: split partials, backward D, descriptors
  size_t ws_bytes;
} cuda_state;

/* SM count and compute capability of device 0, read by the probe: what a
   query without a context (fa_explain) describes. */
static int probed_sms = 108;
static int probed_cc = 0; // 10 * major + minor

static int probe(char *why, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(why, len, "no usable CUDA driver or device: cudaGetDeviceCount: "
             "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError();
    return 0;
  }
  if (n < 1) {
    snprintf(why, len, "no CUDA device found");
    return 0;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0)) {
    snprintf(why, len, "cudaDeviceGetAttribute failed on device 0");
    (void)cudaGetLastError();
    return 0;
  }
  if (major < 8) {
    snprintf(why, len, "device 0 has compute capability %d.%d; %s needs 8.0 "
             "or newer (mma.sync bf16, cp.async)", major, minor, BACKEND_NAME);
    return 0;
  }
  probed_cc = 10 * major + minor;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) ==
          cudaSuccess && sms > 0)
    probed_sms = sms;
  return 1;
}

static fa_status ctx_create(int device, void **state) {
  int n = 0;
  CK(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (device >= n)
    return core->fail(FA_ERR_NO_DEVICE, "device=%d: this machine has %d CUDA "
                      "device%s", device, n, n == 1 ? "" : "s");
  int major = 0, minor = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
     "cudaDeviceGetAttribute");
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
     "cudaDeviceGetAttribute");
  if (major < 8)
    return core->fail(FA_ERR_NO_DEVICE, "device=%d has compute capability "
                      "%d.%d; %s needs 8.0 or newer", device, major, minor,
                      BACKEND_NAME);
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
     "cudaDeviceGetAttribute");
  CK(cudaSetDevice(device), "cudaSetDevice");
  CK(cudaFree(NULL), "creating the CUDA context"); // initialise it now
  cuda_state *st = calloc(1, sizeof *st);
  if (!st)
    return core->fail(FA_ERR_OUT_OF_MEMORY, "%s: context: out of memory",
                      BACKEND_NAME);
  st->device = device;
  st->sm_count = sms;
  st->cc = 10 * major + minor;
  *state = st;
  return FA_OK;
}

static void ctx_destroy(void *state) {
  cuda_state *st = state;
  if (!st) return;
  if (st->ws && cudaSetDevice(st->device) == cudaSuccess) {
    (void)cudaStreamSynchronize(st->stream);
    (void)cudaFree(st->ws);
  }
  (void)cudaGetLastError();
  free(st);
}

static fa_status set_stream(void *state, void *stream) {
  ((cuda_state *)state)->stream = (cudaStream_t)stream;
  return FA_OK;
}

static fa_status use_device(const cuda_state *st) {
  CK(cudaSetDevice(st->device), "cudaSetDevice");
  return FA_OK;
}

/* Scratch of at least `bytes` on the device, owned by the context. Growing
   waits for work already queued on the stream, which may still read the
   old buffer: plans grow it (plan_reserve) so that calls find it large
   enough and neither allocate nor synchronise. */
static fa_status workspace(cuda_state *st, size_t bytes, void **out) {
  if (bytes <= st->ws_bytes) {
    *out = st->ws;
    return FA_OK;
  }
  if (st->ws) {
    CK(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize (workspace)");
    CK(cudaFree(st->ws), "cudaFree (workspace)");
    st->ws = NULL;
    st->ws_bytes = 0;
  }
  size_t rounded = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  cudaError_t e = cudaMalloc(&st->ws, rounded);
  if (e != cudaSuccess) {
    st->ws = NULL;
    (void)cudaGetLastError();
    return core->fail(e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY
                                                     : FA_ERR_BACKEND,
                      "%s: workspace of %zu bytes: cudaMalloc: %s",
                      BACKEND_NAME, rounded, cudaGetErrorString(e));
  }
  st->ws_bytes = rounded;
  *out = st->ws;
  return FA_OK;
}

/* ---- memory ---------------------------------------------------------------- */

static fa_status mem_alloc(void *state, size_t bytes, void **ptr) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return core->fail(e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY
                                                     : FA_ERR_BACKEND,
                      "%s: cudaMalloc of %zu bytes: %s (%s)", BACKEND_NAME,
                      bytes, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  *ptr = p; // cudaMalloc aligns to 256 bytes
  return FA_OK;
}

static fa_status mem_free(void *state, void *ptr) {
  fa_status s = use_device(state);
  if (s) return s;
  CK(cudaFree(ptr), "cudaFree");
  return FA_OK;
}

static fa_status copy_to_device(void *state, void *dst, const void *src,
                                size_t bytes) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st->stream),
     "cudaMemcpyAsync (host to device)");
  CK(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize (copy)");
  return FA_OK;
}

static fa_status copy_to_host(void *state, void *dst, const void *src,
                              size_t bytes) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream),
     "cudaMemcpyAsync (device to host)");
  CK(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize (copy)");
  return FA_OK;
}

static fa_status synchronize(void *state) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize");
  return FA_OK;
}

static fa_status launched(int err, const char *kernel) {
  if (err == 0) return FA_OK;
  char what[96];
  snprintf(what, sizeof what, "launching %s", kernel);
  return cuda_fail((cudaError_t)err, what);
}


/* A switch of the core's configuration table (0 when unset). */
static long config(const char *name) {
  return core->config_int ? core->config_int(name) : 0;
}

/* ---- the device a query is about --------------------------------------- */

static int query_cc(const fa_kernel_query *q) {
  const cuda_state *st = q->state;
  return st ? st->cc : probed_cc;
}

static int query_sms(const fa_kernel_query *q) {
  const cuda_state *st = q->state;
  return st ? st->sm_count : probed_sms;
}

static int query_device(const fa_kernel_query *q) {
  const cuda_state *st = q->state;
  return st ? st->device : 0;
}

static int is_backward(const fa_kernel_query *q) {
  return q->layout && q->layout->op == FA_OP_BACKWARD;
}

/* Reserve a plan's scratch in the context's workspace now, at plan time
   (fa_explain plans without a context reserve nothing). */
static fa_status plan_reserve(const fa_kernel_query *q, size_t bytes) {
  cuda_state *st = q->state;
  if (!st || !bytes) return FA_OK;
  fa_status s = use_device(st);
  void *ws;
  return s ? s : workspace(st, bytes, &ws);
}

/* The scratch a plan reserved: a call that finds less (a plan made on
   another context) grows it, which synchronises. */
static fa_status plan_scratch(cuda_state *st, const fa_plan_data *plan,
                              void **ws) {
  *ws = NULL;
  if (!plan->workspace_bytes) return FA_OK;
  return workspace(st, plan->workspace_bytes, ws);
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
#define FA_SM80_INST(t, d, v) {FA_DTYPE_##t, d, v, fa_sm80_fwd_##t##_d##d##_v##v},
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
  int fa_sm80_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,          \
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
  int fa_sm90_fwd_##t##_d##d(const fa_gpu_params *p, int64_t rows_q,        \
                             int64_t rows_k, int sms, int serial,             \
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
  int fa_sm90_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,          \
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

/* ---- admission ------------------------------------------------------------ */

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
    snprintf(why, len, "dtype is %s; this kernel is %s",
             fa_gpu_dtype_name(p->dtype), fa_gpu_dtype_name(k->dtype));
    return 0;
  }
  if (p->a.head_dim != k->dim || p->a.head_dim_v != k->dim) {
    snprintf(why, len, "head_dim %d, head_dim_v %d: this kernel is %d, %d",
             p->a.head_dim, p->a.head_dim_v, k->dim, k->dim);
    return 0;
  }
  return 1;
}

/* The tensor-core backwards: what they leave to cuda.generic. */
static int tc_backward_ok(const fa_problem *p, char *why, size_t len) {
  if (config("FA_CUDA_DETERMINISTIC")) {
    snprintf(why, len, "FA_CUDA_DETERMINISTIC is set (this backward adds dQ "
             "atomically)");
    return 0;
  }
  if (p->paged) {
    snprintf(why, len, "paged KV (this backward reads dense or varlen K/V)");
    return 0;
  }
  if (p->a.softcap > 0.0f || p->a.alibi_slopes || !(p->a.scale > 0.0f)) {
    snprintf(why, len, "softcap, ALiBi or a scale <= 0 (this backward has "
             "neither transform)");
    return 0;
  }
  return 1;
}

/* The driver's cuTensorMapEncodeTiled (CUDA 12.0+), looked up as the sm90
   launchers look it up: a driver without it cannot run them. */
static int tma_available(void) {
  static int known = -1;
  if (known < 0) {
    void *f = NULL;
    enum cudaDriverEntryPointQueryResult r = cudaDriverEntryPointSymbolNotFound;
    known = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f,
                                             12000, cudaEnableDefault,
                                             &r) == cudaSuccess &&
            r == cudaDriverEntryPointSuccess && f;
    (void)cudaGetLastError();
  }
  return known;
}

/* Whether the sm90 launchers' tensor maps can describe tensor t of `rows`
   storage rows (per batch, or all of them when varlen) and `heads` heads:
   the conditions of make_map (sm90_fwd.cuh) on 16-bit elements. */
static int tma_ok(const char *name, const fa_tensor *t, int64_t rows,
                  int heads, int batch, char *why, size_t len) {
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
  snprintf(why, len, "the copy engine cannot address %s (%s)", name, bad);
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

static int kernel_supports(const kdesc *k, const fa_kernel_query *q,
                           char *why, size_t len) {
  const fa_problem *p = q->problem;
  const int bwd = is_backward(q);
  if (k->fam == GENERIC) return fa_gpu_generic_supports(q, why, len);
  if (!shape_ok(k, p, why, len) || !fa_gpu_features_ok(q, why, len) ||
      !fa_gpu_aligned16(q, why, len))
    return 0;
  if (k->fam == SM90) {
    int cc = query_cc(q);
    if (cc != 90) {
      snprintf(why, len, "device %d has compute capability %d.%d; this "
               "kernel is sm_90a", query_device(q), cc / 10, cc % 10);
      return 0;
    }
    int built = bwd ? sm90_bwd_find(k->dtype, k->dim) != NULL
                    : sm90_find(k->dtype, k->dim) != NULL;
    if (!built) {
      snprintf(why, len, "not compiled in this build (90a, "
               "FA_CUDA_HEAD_DIMS)");
      return 0;
    }
    if (p->paged) {
      snprintf(why, len, "paged KV (the sm80 kernels read the block table)");
      return 0;
    }
    if (!tma_available()) {
      snprintf(why, len, "the driver has no cuTensorMapEncodeTiled");
      return 0;
    }
    if (bwd && !tc_backward_ok(p, why, len)) return 0;
    return sm90_layout_ok(q, why, len);
  }
  // SM80, DECODE
  int built = bwd ? sm80_bwd_find(k->dtype, k->dim) != NULL
                  : sm80_find(k->dtype, k->dim, k->fam == DECODE) != NULL;
  if (!built) {
    snprintf(why, len, "not compiled in this build (FA_CUDA_HEAD_DIMS)");
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
  fa_cuda_sm80_plan(q->problem, t, query_sms(q), &plan);
  const fa_attention *a = &q->problem->a;
  int64_t items = (int64_t)a->batch * a->heads_q * ((a->seqlen_q + 127) / 128);
  return plan.num_splits > 1 && items < query_sms(q);
}

/* Whether the main tile's plan has one q block that the decode tile's
   lanes hold (a few queries x the packed GQA heads). */
static int decode_sized(const kdesc *k, const fa_kernel_query *q) {
  const fa_cuda_tile *t = fa_cuda_tile_of(0, k->dim);
  const fa_cuda_tile *td = fa_cuda_tile_of(1, k->dim);
  if (!t || !td) return 0;
  fa_caps caps;
  fa_plan_data plan;
  fa_cuda_caps(query_sms(q), t->block_q, t->block_k, 1, &caps);
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

/* ---- plans ----------------------------------------------------------------- */

static fa_status grid_fits(int64_t blocks, const char *what) {
  return fa_gpu_grid_fits(core, blocks, what);
}

static void log_plan(const char *name, const fa_plan_data *d) {
  if (!core->log_enabled()) return;
  char text[256];
  fa_plan_data_describe(d, text, sizeof text);
  core->log("  %s %s: %s, workspace %zu bytes", BACKEND_NAME, name, text,
            d->workspace_bytes);
}

/* The split-KV partials of a forward plan (0 without a split). */
static size_t split_bytes(const fa_problem *p, const fa_plan_data *d) {
  if (d->num_splits <= 1) return 0;
  size_t rows = (size_t)d->num_work * (size_t)d->block_q;
  return rows * (2 + (size_t)p->a.head_dim_v) * sizeof(float);
}

/* The tensor-core backwards' launches: the D pre-pass, the key blocks and
   the dQ store. */
static fa_status tc_backward_grids(const fa_problem *p, const char *name) {
  const fa_attention *a = &p->a;
  int64_t rows_q = (int64_t)a->batch * a->heads_q * a->seqlen_q;
  int64_t kblocks = (int64_t)a->batch * a->heads_kv * ((a->seqlen_k + 127) / 128);
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
      fa_cuda_caps(query_sms(q), 128, 64, 0, &caps);
      fa_plan_compute(p, &caps, d);
      d->workspace_bytes = (size_t)p->a.batch * p->a.heads_q * p->a.seqlen_q *
                           sizeof(float);
      fa_gpu_params g;
      fa_gpu_fill_problem(&g, p);
      s = fa_gpu_generic_bwd_fits(core, &g, name);
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
    fa_caps caps;
    if (k->fam != GENERIC && !t)
      return core->fail(FA_ERR_BACKEND, "%s: no sm80_tiles.def row for d%d",
                        name, k->dim);
    if (k->fam == GENERIC) {
      fa_cuda_caps(query_sms(q), 128, 64, 1, &caps);
      fa_plan_compute(p, &caps, d);
    } else {
      fa_cuda_sm80_plan(p, t, query_sms(q), d);
    }
    d->workspace_bytes = split_bytes(p, d);
    s = grid_fits(d->num_work, name);
  }
  if (!s) s = plan_reserve(q, d->workspace_bytes);
  if (!s) log_plan(name, d);
  return s;
}

/* ---- forward ----------------------------------------------------------------- */

/* The sm90 launchers' -1: the driver refused a tensor map that supports()
   judged encodable. */
static fa_status tma_refused(const char *name) {
  return core->fail(FA_ERR_BACKEND, "%s: %s: cuTensorMapEncodeTiled refused "
                    "a tensor that supports() accepted (strides %s)",
                    BACKEND_NAME, name, "or sizes");
}

static const char *kernel_name(const char *fam, const fa_problem *p,
                               char *buf, size_t len) {
  snprintf(buf, len, "cuda.%s.%s.d%d", fam, fa_gpu_dtype_name(p->dtype),
           p->a.head_dim);
  return buf;
}

/* Launch the plan's forward kernel fn, then the split-KV combine. */
static fa_status run_forward(cuda_state *st, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a,
                             fa_sm80_fwd_fn fn, const char *name) {
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fa_gpu_fill_forward(&q, p, plan, a);
  void *ws;
  if ((s = plan_scratch(st, plan, &ws))) return s;
  if (q.num_splits > 1) fa_gpu_place_split(&q, ws);
  if ((s = launched(fn(&q, st->stream), name))) return s;
  if (q.num_splits > 1)
    return launched(fa_cuda_launch_combine(&q, st->stream),
                    "the split-KV combine");
  return FA_OK;
}

static fa_status fwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a) {
  return run_forward(state, p, plan, a, fa_cuda_launch_fwd_generic,
                     "cuda.generic");
}

static fa_status fwd_sm80_variant(void *state, const fa_problem *p,
                                  const fa_plan_data *plan,
                                  const fa_fwd_args *a, int decode) {
  char name[48];
  kernel_name("sm80", p, name, sizeof name);
  if (decode) strncat(name, ".decode", sizeof name - strlen(name) - 1);
  fa_sm80_fwd_fn fn = sm80_find(p->dtype, p->a.head_dim, decode);
  if (!fn)
    return core->fail(FA_ERR_BACKEND, "%s: not compiled in", name);
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
  cuda_state *st = state;
  char name[48];
  kernel_name("sm90", p, name, sizeof name);
  fa_sm90_fwd_fn fn = sm90_find(p->dtype, p->a.head_dim);
  if (!fn) return core->fail(FA_ERR_BACKEND, "%s: not compiled in", name);
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q; // the launcher sets its geometry (the plan's, too)
  fa_gpu_fill_forward(&q, p, plan, a);
  int err = fn(&q, p->rows_q, p->rows_k, st->sm_count,
               config("FA_SM90_SERIAL") != 0, st->stream);
  return err == -1 ? tma_refused(name) : launched(err, name);
}

/* ---- backward ------------------------------------------------------------- */

static const fa_gpu_bwd_launchers generic_bwd = {
    fa_cuda_launch_bwd_delta, fa_cuda_launch_bwd_dq, fa_cuda_launch_bwd_dkdv,
    fa_cuda_launch_bwd_zero_paged};

static fa_status bwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_bwd_args *a) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fa_gpu_fill_backward(&q, p, plan, a);
  void *ws;
  if ((s = plan_scratch(st, plan, &ws))) return s;
  q.delta = ws;
  const char *step = NULL;
  int err = fa_gpu_bwd_generic_launch(&generic_bwd, &q, st->stream, &step);
  return launched(err, step);
}

/* The tensor-core backwards' common start: the D pre-pass into the plan's
   scratch and the zeroed dQ accumulator. dQ goes through fp32 atomics, so
   its summation order varies run to run (FA_CUDA_DETERMINISTIC declines
   these kernels). */
static fa_status tc_backward_start(cuda_state *st, const fa_problem *p,
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
  return launched(fn(&q, dq_acc, ((cuda_state *)state)->stream), name);
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
  int err = fn(&q, dq_acc, p->rows_q, p->rows_k, ((cuda_state *)state)->stream);
  return err == -1 ? tma_refused(name) : launched(err, name);
}

/* ---- fa_merge_states -------------------------------------------------------- */

static fa_status merge_states(void *state, int n, const fa_tensor *o_parts,
                              const float *const *lse_parts, int batch,
                              int seqlen, int heads, int head_dim,
                              fa_tensor o, float *lse) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_merge_part *desc;
  if ((s = fa_gpu_merge_parts(core, BACKEND_NAME, n, o_parts, lse_parts,
                              head_dim, &desc)))
    return s;
  size_t bytes = sizeof *desc * (size_t)n;
  void *ws = NULL;
  s = workspace(st, bytes, &ws);
  if (!s) {
    // From pageable memory the copy is staged before the call returns, so
    // desc may be freed right after.
    cudaError_t e = cudaMemcpyAsync(ws, desc, bytes, cudaMemcpyHostToDevice,
                                    st->stream);
    if (e != cudaSuccess) s = cuda_fail(e, "cudaMemcpyAsync (merge parts)");
  }
  free(desc);
  if (s) return s;
  return launched(fa_cuda_launch_merge(n, ws, (int)o.dtype, batch, seqlen,
                                       heads, head_dim, fa_gpu_view_of(&o),
                                       lse, st->stream),
                  "the merge kernel");
}

/* ---- the kernel table ------------------------------------------------------ */

#define KERNEL_FNS(id, fam, t, d, nm)                                          \
  static const kdesc desc_##id = {fam, FA_DTYPE_##t, d};                       \
  static int supports_##id(const fa_kernel_query *q, char *why, size_t len) { \
    return kernel_supports(&desc_##id, q, why, len);                           \
  }                                                                            \
  static int score_##id(const fa_kernel_query *q) {                            \
    return kernel_score(&desc_##id, q);                                        \
  }                                                                            \
  static fa_status plan_##id(const fa_kernel_query *q, fa_plan_data *out) {    \
    return kernel_plan(&desc_##id, nm, q, out);                                \
  }

#define SM90(t, d) KERNEL_FNS(sm90_##t##_d##d, SM90, t, d, "cuda.sm90." #t ".d" #d)
#define SM80(t, d) KERNEL_FNS(sm80_##t##_d##d, SM80, t, d, "cuda.sm80." #t ".d" #d)
#define DECODE(t, d)                                                           \
  KERNEL_FNS(decode_##t##_d##d, DECODE, t, d, "cuda.sm80." #t ".d" #d ".decode")
SM90(bf16, 64) SM90(bf16, 128) SM90(bf16, 256)
SM90(f16, 64) SM90(f16, 128) SM90(f16, 256)
SM80(bf16, 64) SM80(bf16, 96) SM80(bf16, 128) SM80(bf16, 192) SM80(bf16, 256)
SM80(f16, 64) SM80(f16, 96) SM80(f16, 128) SM80(f16, 192) SM80(f16, 256)
DECODE(bf16, 64) DECODE(bf16, 128) DECODE(f16, 64) DECODE(f16, 128)
KERNEL_FNS(generic, GENERIC, bf16, 0, "cuda.generic")
#undef SM90
#undef SM80
#undef DECODE

#define ENTRY(id, nm, fwd, bwd)                                                \
  {.name = nm, .supports = supports_##id, .score = score_##id,                 \
   .plan = plan_##id, .forward = fwd, .backward = bwd}
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

static const fa_backend backend_cuda = {
    .api_version = FA_BACKEND_API_VERSION,
    .name = BACKEND_NAME,
    .kind = FA_BACKEND_CUDA,
    .rank = 100,
    .memory_space = FA_MEMORY_CUDA,
    .probe = probe,
    .context_create = ctx_create,
    .context_destroy = ctx_destroy,
    .set_threads = NULL,
    .set_stream = set_stream,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .copy_to_device = copy_to_device,
    .copy_to_host = copy_to_host,
    .synchronize = synchronize,
    .merge_states = merge_states,
    .kernels = kernels,
    .num_kernels = (int)(sizeof kernels / sizeof kernels[0]),
};

static const fa_backend *const module_backends[] = {&backend_cuda};

/* The module's one exported symbol (FA_MODULE_ENTRY). */
__attribute__((visibility("default"))) const fa_backend *const *
fa_module_backends(const fa_core_services *services, int *count) {
  if (!services || !count || services->api_version != FA_BACKEND_API_VERSION)
    return NULL;
  core = services;
  *count = 1;
  return module_backends;
}
