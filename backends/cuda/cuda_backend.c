// SPDX-License-Identifier: MIT
// The CUDA backend "cuda-sm80", as the loadable module libflashattn-cuda.so.
//
// The core dlopens this module at first use and calls fa_module_backends()
// (FA_MODULE_ENTRY) with its services (error recording, dispatch log). The
// CUDA runtime is linked statically: it finds the driver (libcuda.so.1) at
// run time, so on a machine without a driver or device the module still
// loads and the probe reports why ("no usable CUDA driver: ..."), which
// fa_explain() and FA_LOG=dispatch print; nothing crashes.
//
// Host side of every call: set the context's device, fill one
// fa_gpu_params (backends/gpu/gpu_host.h) from the validated problem and the core's plan, take
// scratch from the context's workspace (grown on demand, never per call in
// steady state), enqueue the kernels on the context's stream, check every
// CUDA call. Failures become FA_ERR_BACKEND (or FA_ERR_OUT_OF_MEMORY) with
// the CUDA error's name and text.
//
// Kernels, best first:
//   cuda.sm90.<bf16|f16>.d<64|128|256>  sm_90 forward (sm90_fwd.cuh: wgmma,
//       TMA, warp specialisation); d64/d128 backward on sm90_bwd.cuh
//       (wgmma, TMA, dQ by 16-byte reductions), else as sm80;
//   cuda.sm80.<bf16|f16>.d<64|96|128|192|256>  tensor-core forward
//       (sm80_fwd.cuh; head_dim == head_dim_v; tile table sm80_tiles.def,
//       with a small decode tile when the plan's q block is a few lanes);
//       d64 and d128 also have a tensor-core backward (sm80_bwd.cuh: dQ
//       through fp32 atomics), other dims' backward runs cuda.generic;
//       tensors not 16-byte aligned, softcap/ALiBi/paged backward and the
//       like fall back to the generic kernels (logged with FA_LOG=dispatch);
//   cuda.generic  every problem with head dims <= 256, forward and backward
//       (backends/gpu/generic_kernels.h, the same source as the HIP
//       module's hip.generic; fixed summation order, no atomics).
// Environment (triage):
//   FA_CUDA_GENERIC=1        the tensor-core kernels say no (dispatch takes
//                            cuda.generic; tests compare the two);
//   FA_CUDA_DETERMINISTIC=1  backward without atomics (the generic one),
//                            bitwise reproducible run to run;
//   FA_CUDA_NO_SM90=1        the sm90 kernels say no (sm80 everywhere);
//   FA_SM90_BWD=0            sm90 forward, sm80 backward (to compare).
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

#define BACKEND_NAME "cuda-sm80"

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

static int env_set(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* ---- per-context state ---------------------------------------------------- */

typedef struct cuda_state {
  int device;
  int sm_count;
  int cc; // compute capability, 10 * major + minor
  cudaStream_t stream; // NULL: the legacy default stream
  void *ws;            // workspace: split partials, backward D, descriptors
  size_t ws_bytes;
} cuda_state;

/* SM count and compute capability of device 0, read by the probe, for
   plans made without a context (fa_explain) and for the kernels' supports()
   (which see no context). */
static int probed_sms = 108;
static int probed_cc = 0; // 10 * major + minor

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

static void capabilities(void *state, fa_caps *caps) {
  const cuda_state *st = state;
  caps->fast_mem_bytes = fa_cuda_plan_mem_bytes;
  // Work items that keep the GPU busy: 2 per SM (the d128 main tile's
  // residency on sm90). The planner splits the keys only below that many
  // items, into at most two items per worker, rounded down: 4 per SM, which
  // is one whole wave of the decode tiles (4 resident per sm90 SM,
  // sm80_tiles.def; measured best against 1-8 per SM, NOTES-cuda run 24).
  caps->num_workers = 2 * (st ? st->sm_count : probed_sms);
  caps->tile_align = fa_cuda_plan_align;
  caps->max_block_q = fa_cuda_plan_max_bq;
  caps->max_block_k = fa_cuda_plan_max_bk;
  caps->max_splits = 128;
  caps->pack_gqa = 1; // both forward kernels take (row, head) lanes
  caps->max_small_lanes = 0; // a tile spans one kv head (kv_heads_per_tile 1)
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
   old buffer. */
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
  (void)snprintf(what, sizeof what, "launching %s", kernel);
  return cuda_fail((cudaError_t)err, what);
}

/* Workspace for the split partials, if the plan splits the keys. */
static fa_status split_scratch(cuda_state *st, fa_gpu_params *q) {
  size_t bytes = fa_gpu_split_bytes(q);
  if (!bytes) return FA_OK;
  void *ws = NULL;
  fa_status s = workspace(st, bytes, &ws);
  if (!s) fa_gpu_place_split(q, ws);
  return s;
}

/* ---- forward ----------------------------------------------------------------- */

static fa_status fwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a) {
  cuda_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fa_gpu_fill_forward(&q, p, plan, a);
  if ((s = fa_gpu_grid_fits(core, q.num_work, "cuda.generic"))) return s;
  if ((s = split_scratch(st, &q))) return s;
  if ((s = launched(fa_cuda_launch_fwd_generic(&q, st->stream),
                    "cuda.generic forward")))
    return s;
  if (q.num_splits > 1)
    return launched(fa_cuda_launch_combine(&q, st->stream),
                    "the split-KV combine");
  return FA_OK;
}

/* The compiled sm80 instantiations (generated list, FA_CUDA_HEAD_DIMS):
   variant 0 is a head dim's main tile, 1 its decode tile. */
#define FA_DTYPE_bf16 FA_BF16
#define FA_DTYPE_f16 FA_F16
#define FA_SM80_INST(t, d, v)                                                  \
  int fa_sm80_fwd_##t##_d##d##_v##v(const fa_gpu_params *p, void *stream);
#include "sm80_instances.h"
#undef FA_SM80_INST

typedef struct sm80_instance {
  fa_dtype dtype;
  int dim, variant;
  int (*launch)(const fa_gpu_params *p, void *stream);
} sm80_instance;

static const sm80_instance sm80_instances[] = {
#define FA_SM80_INST(t, d, v) {FA_DTYPE_##t, d, v, fa_sm80_fwd_##t##_d##d##_v##v},
#include "sm80_instances.h"
#undef FA_SM80_INST
    {FA_F32, 0, 0, NULL}};

static const sm80_instance *sm80_find(fa_dtype dtype, int dim, int variant) {
  for (const sm80_instance *i = sm80_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim && i->variant == variant) return i;
  return NULL;
}

static const fa_cuda_tile *tile_of(const fa_cuda_tile *rows, int n, int dim) {
  for (int i = 0; i < n; i++)
    if (rows[i].head_dim == dim) return &rows[i];
  return NULL;
}

/* The tensor-core kernel copies 16-byte chunks and stores 4-byte pairs. */
static int chunk_aligned(const fa_tensor *t) {
  return (uintptr_t)t->data % 16 == 0 && t->stride_batch % 8 == 0 &&
         t->stride_seq % 8 == 0 && t->stride_head % 8 == 0;
}

static fa_status fwd_sm80(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  cuda_state *st = state;
  const int dim = p->a.head_dim;
  // Decode: when the whole q block fits the decode tile's lanes, that tile
  // (if this head dim has one) instead of the main tile.
  int variant = 0;
  const fa_cuda_tile *t = tile_of(fa_cuda_tiles, fa_cuda_num_tiles, dim);
  const fa_cuda_tile *td =
      tile_of(fa_cuda_decode_tiles, fa_cuda_num_decode_tiles, dim);
  if (td && plan->num_q_blocks == 1 && plan->block_q <= td->block_q &&
      sm80_find(p->dtype, dim, 1)) {
    t = td;
    variant = 1;
  }
  const sm80_instance *inst = sm80_find(p->dtype, dim, variant);
  const char *name = p->dtype == FA_BF16 ? t->name_bf16 : t->name_f16;
  const char *why = NULL;
  // The plan's blocks must be the row's, or a single block that the row's
  // larger tile covers (short sequences, decode).
  int ok_q = plan->block_q == t->block_q ||
             (plan->num_q_blocks == 1 && plan->block_q <= t->block_q);
  // The decode tile cuts the keys into its own blocks (the kernel derives
  // every key range from its block_k), so any plan block_k does.
  int ok_k = variant == 1 || plan->block_k == t->block_k ||
             (plan->num_k_blocks == 1 && p->a.seqlen_k <= t->block_k);
  if (!chunk_aligned(&a->q) || !chunk_aligned(&a->k) ||
      !chunk_aligned(&a->v) || !chunk_aligned(&a->o))
    why = "a tensor is not 16-byte aligned (data, or a stride not a multiple "
          "of 8 elements)";
  else if (!ok_q || !ok_k)
    why = "the plan's blocks differ from the tile table's";
  if (why) {
    if (core->log_enabled())
      core->log("  %s %s: %s; running cuda.generic", BACKEND_NAME, name, why);
    return fwd_generic(state, p, plan, a);
  }
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fa_gpu_fill_forward(&q, p, plan, a);
  // The kernel's tile has t->block_q lanes; the plan's rows x heads fill
  // them (all of them unless one block covers the sequence).
  q.block_q = t->block_q;
  q.block_k = t->block_k;
  if ((s = fa_gpu_grid_fits(core, q.num_work, name))) return s;
  if ((s = split_scratch(st, &q))) return s;
  if (core->log_enabled())
    core->log("  %s %s: tile %d x %d (%d warps), %d kv split%s", BACKEND_NAME,
              name, t->block_q, t->block_k, t->warps, q.num_splits,
              q.num_splits == 1 ? "" : "s");
  if ((s = launched(inst->launch(&q, st->stream), name))) return s;
  if (q.num_splits > 1)
    return launched(fa_cuda_launch_combine(&q, st->stream),
                    "the split-KV combine");
  return FA_OK;
}

/* The compiled sm90 instantiations (generated list: 90a built, head dims
   64/128/256 of FA_CUDA_HEAD_DIMS). Launchers return a cudaError_t, or -1
   when the copy engine cannot address the tensors (nothing launched). */
#define FA_SM90_INST(t, d)                                                     \
  int fa_sm90_fwd_##t##_d##d(const fa_gpu_params *p, int64_t rows_q,        \
                             int64_t rows_k, int sms, void *stream);
#include "sm90_instances.h"
#undef FA_SM90_INST

typedef struct sm90_instance {
  fa_dtype dtype;
  int dim;
  int (*launch)(const fa_gpu_params *p, int64_t rows_q, int64_t rows_k,
                int sms, void *stream);
} sm90_instance;

static const sm90_instance sm90_instances[] = {
#define FA_SM90_INST(t, d) {FA_DTYPE_##t, d, fa_sm90_fwd_##t##_d##d},
#include "sm90_instances.h"
#undef FA_SM90_INST
    {FA_F32, 0, NULL}};

static const sm90_instance *sm90_find(fa_dtype dtype, int dim) {
  for (const sm90_instance *i = sm90_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim) return i;
  return NULL;
}

/* The sm90 kernel sets its own geometry (q blocks of its tile's rows, one
   head per item, no kv split); 128 rows here only estimate the item count
   for the choice below (whether the plan's kv split is worth keeping). */
enum { SM90_BLOCK_M = 128 };

static fa_status fwd_sm90(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  cuda_state *st = state;
  const int dim = p->a.head_dim;
  const sm90_instance *inst = sm90_find(p->dtype, dim);
  const int64_t qblocks = (p->a.seqlen_q + SM90_BLOCK_M - 1) / SM90_BLOCK_M;
  const int64_t items = (int64_t)p->a.batch * p->a.heads_q * qblocks;
  char name[48];
  (void)snprintf(name, sizeof name, "cuda.sm90.%s.d%d",
                 p->dtype == FA_BF16 ? "bf16" : "f16", dim);
  const char *why = NULL;
  // FA_SM90_FORCE=1: the sm90 kernel whenever it can run the problem, the
  // size heuristics below aside (so that the float64-oracle grid, whose
  // problems are mostly small, validates it: xval.cuda-sm80.sm90-forced.*).
  const int force = env_set("FA_SM90_FORCE");
  if (!inst || st->cc != 90)
    why = "this context's device is not sm_90";
  else if (!chunk_aligned(&a->q) || !chunk_aligned(&a->k) ||
           !chunk_aligned(&a->v) || !chunk_aligned(&a->o))
    why = "a tensor is not 16-byte aligned";
  else if (!force && plan->num_splits > 1 && items < st->sm_count)
    why = "the plan splits the keys (fewer q blocks than SMs)";
  if (why) {
    if (core->log_enabled())
      core->log("  %s %s: %s; running the sm80 kernel", BACKEND_NAME, name,
                why);
    return fwd_sm80(state, p, plan, a);
  }
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q; // the launcher replaces the plan fields by its geometry
  fa_gpu_fill_forward(&q, p, plan, a);
  int err = inst->launch(&q, p->rows_q, p->rows_k, st->sm_count, st->stream);
  if (err == -1) {
    if (core->log_enabled())
      core->log("  %s %s: the copy engine cannot address a tensor (strides "
                "or sizes); running the sm80 kernel", BACKEND_NAME, name);
    return fwd_sm80(state, p, plan, a);
  }
  if (core->log_enabled())
    core->log("  %s %s: tile of sm90_tiles.def, about %lld work items on "
              "a persistent grid of at most %d CTAs", BACKEND_NAME, name,
              (long long)items, st->sm_count);
  return launched(err, name);
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
  if ((s = fa_gpu_generic_bwd_fits(core, &q, "cuda.generic backward")))
    return s;
  void *ws = NULL;
  if ((s = workspace(st, (size_t)fa_gpu_rows_q(&q) * sizeof(float), &ws)))
    return s;
  q.delta = ws;
  const char *step = NULL;
  int err = fa_gpu_bwd_generic_launch(&generic_bwd, &q, st->stream, &step);
  return launched(err, step);
}

/* The tensor-core backward (sm80_bwd.cuh), per (dtype, head dim). */
#define FA_SM80_BWD_INST(t, d)                                                 \
  int fa_sm80_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,          \
                             void *stream);
#include "sm80_bwd_instances.h"
#undef FA_SM80_BWD_INST

typedef struct sm80_bwd_instance {
  fa_dtype dtype;
  int dim;
  int (*launch)(const fa_gpu_params *p, float *dq_acc, void *stream);
} sm80_bwd_instance;

static const sm80_bwd_instance sm80_bwd_instances[] = {
#define FA_SM80_BWD_INST(t, d) {FA_DTYPE_##t, d, fa_sm80_bwd_##t##_d##d},
#include "sm80_bwd_instances.h"
#undef FA_SM80_BWD_INST
    {FA_F32, 0, NULL}};


/* The sm90 backward (sm90_bwd.cuh: wgmma + TMA), d64/d128. Launchers
   return a cudaError_t, or -1 when the copy engine cannot address the
   tensors (nothing launched). */
#define FA_SM90_BWD_INST(t, d)                                                 \
  int fa_sm90_bwd_##t##_d##d(const fa_gpu_params *p, float *dq_acc,          \
                             int64_t rows_q, int64_t rows_k, void *stream);
#include "sm90_bwd_instances.h"
#undef FA_SM90_BWD_INST

typedef struct sm90_bwd_instance {
  fa_dtype dtype;
  int dim;
  int (*launch)(const fa_gpu_params *p, float *dq_acc, int64_t rows_q,
                int64_t rows_k, void *stream);
} sm90_bwd_instance;

static const sm90_bwd_instance sm90_bwd_instances[] = {
#define FA_SM90_BWD_INST(t, d) {FA_DTYPE_##t, d, fa_sm90_bwd_##t##_d##d},
#include "sm90_bwd_instances.h"
#undef FA_SM90_BWD_INST
    {FA_F32, 0, NULL}};

/* The tensor-core backward: the sm90 one when `sm90` and the device, the
   build and the tensors allow it, else the sm80 one. dQ goes through fp32
   atomics in both, so its summation order varies run to run;
   FA_CUDA_DETERMINISTIC=1 selects the generic backward (fixed order, no
   atomics) instead. FA_SM90_BWD=0 keeps the sm80 backward on sm_90 (to
   compare the two). */
static fa_status bwd_tensor_core(void *state, const fa_problem *p,
                                 const fa_plan_data *plan,
                                 const fa_bwd_args *a, int sm90) {
  cuda_state *st = state;
  const sm80_bwd_instance *inst = NULL;
  for (const sm80_bwd_instance *i = sm80_bwd_instances; i->launch; i++)
    if (i->dtype == p->dtype && i->dim == p->a.head_dim) inst = i;
  const char *why = NULL;
  if (env_set("FA_CUDA_DETERMINISTIC"))
    why = "FA_CUDA_DETERMINISTIC is set (this backward adds dQ atomically)";
  else if (!inst)
    why = "no tensor-core backward for this dtype and head dim";
  else if (p->paged)
    why = "paged KV";
  else if (p->a.softcap > 0.0f || p->a.alibi_slopes || !(p->a.scale > 0.0f))
    why = "softcap, ALiBi or a scale <= 0";
  else if (!chunk_aligned(&a->q) || !chunk_aligned(&a->k) ||
           !chunk_aligned(&a->v) || !chunk_aligned(&a->d_o) ||
           !chunk_aligned(&a->dq) || !chunk_aligned(&a->dk) ||
           !chunk_aligned(&a->dv))
    why = "a tensor is not 16-byte aligned";
  if (why) {
    if (core->log_enabled())
      core->log("  %s backward: %s; running the generic backward",
                BACKEND_NAME, why);
    return bwd_generic(state, p, plan, a);
  }
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fa_gpu_fill_backward(&q, p, plan, a);
  int64_t rows_q = fa_gpu_rows_q(&q);
  // CTAs of the sm80 backward: one per 128 keys (kBwdKeys, sm80_bwd.cuh).
  int64_t kblocks = (int64_t)q.batch * q.heads_kv * ((q.seqlen_k + 127) / 128);
  if ((s = fa_gpu_grid_fits(core, (rows_q + 3) / 4, "backward (D)")) ||
      (s = fa_gpu_grid_fits(core, kblocks, "cuda.sm80 backward")) ||
      (s = fa_gpu_grid_fits(core, rows_q * q.head_dim / 2 / 256 + 1,
                            "backward (dQ)")))
    return s;
  size_t delta_bytes = ((size_t)rows_q * sizeof(float) + 255) & ~(size_t)255;
  size_t acc_bytes = (size_t)rows_q * (size_t)q.head_dim * sizeof(float);
  void *ws;
  if ((s = workspace(st, delta_bytes + acc_bytes, &ws))) return s;
  q.delta = ws;
  float *dq_acc = (float *)((char *)ws + delta_bytes);
  CK(cudaMemsetAsync(dq_acc, 0, acc_bytes, st->stream),
     "cudaMemsetAsync (dQ accumulator)");
  if ((s = launched(fa_cuda_launch_bwd_delta(&q, st->stream),
                    "backward (D = rowsum(dO o O))")))
    return s;
  const sm90_bwd_instance *i90 = NULL;
  const char *off = getenv("FA_SM90_BWD");
  if (sm90 && st->cc == 90 && !(off && strcmp(off, "0") == 0))
    for (const sm90_bwd_instance *i = sm90_bwd_instances; i->launch; i++)
      if (i->dtype == p->dtype && i->dim == p->a.head_dim) i90 = i;
  if (i90) {
    const char *name90 = p->dtype == FA_BF16 ? "cuda.sm90 bf16 backward"
                                             : "cuda.sm90 f16 backward";
    int err = i90->launch(&q, dq_acc, p->rows_q, p->rows_k, st->stream);
    if (err != -1) {
      if (core->log_enabled())
        core->log("  %s backward: %s, %lld CTAs of 128 keys", BACKEND_NAME,
                  name90,
                  (long long)((q.seqlen_k + 127) / 128) * q.heads_kv * q.batch);
      return launched(err, name90);
    }
    if (core->log_enabled())
      core->log("  %s backward: the copy engine cannot address a tensor; "
                "running the sm80 backward", BACKEND_NAME);
  }
  const char *name = p->dtype == FA_BF16 ? "cuda.sm80 bf16 backward"
                                         : "cuda.sm80 f16 backward";
  return launched(inst->launch(&q, dq_acc, st->stream), name);
}

static fa_status bwd_sm80(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_bwd_args *a) {
  return bwd_tensor_core(state, p, plan, a, 0);
}

static fa_status bwd_sm90(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_bwd_args *a) {
  return bwd_tensor_core(state, p, plan, a, 1);
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

/* ---- kernels and dispatch ---------------------------------------------------- */

static int supports_generic(const fa_problem *p, char *why, size_t len) {
  return fa_gpu_generic_supports(p, why, len);
}

static int supports_sm80(const fa_problem *p, fa_dtype dtype, int dim,
                         char *why, size_t len) {
  if (env_set("FA_CUDA_GENERIC")) {
    (void)snprintf(why, len, "FA_CUDA_GENERIC is set");
    return 0;
  }
  if (p->dtype != dtype) {
    (void)snprintf(why, len, "dtype is not %s",
                   dtype == FA_BF16 ? "bf16" : "f16");
    return 0;
  }
  if (p->a.head_dim != dim || p->a.head_dim_v != dim) {
    (void)snprintf(why, len,
                   "head_dim %d, head_dim_v %d: this kernel is %d, %d",
                   p->a.head_dim, p->a.head_dim_v, dim, dim);
    return 0;
  }
  if (!sm80_find(dtype, dim, 0)) {
    (void)snprintf(why, len, "not compiled in this build (FA_CUDA_HEAD_DIMS)");
    return 0;
  }
  return 1;
}

#define SM80_SUPPORTS(t, d)                                                    \
  static int supports_##t##_d##d(const fa_problem *p, char *why,             \
                                 size_t len) {                                 \
    return supports_sm80(p, FA_DTYPE_##t, d, why, len);                        \
  }
SM80_SUPPORTS(bf16, 64)
SM80_SUPPORTS(bf16, 96)
SM80_SUPPORTS(bf16, 128)
SM80_SUPPORTS(bf16, 192)
SM80_SUPPORTS(bf16, 256)
SM80_SUPPORTS(f16, 64)
SM80_SUPPORTS(f16, 96)
SM80_SUPPORTS(f16, 128)
SM80_SUPPORTS(f16, 192)
SM80_SUPPORTS(f16, 256)

static int supports_sm90(const fa_problem *p, fa_dtype dtype, int dim,
                         char *why, size_t len) {
  if (env_set("FA_CUDA_GENERIC") || env_set("FA_CUDA_NO_SM90")) {
    (void)snprintf(why, len, "FA_CUDA_GENERIC or FA_CUDA_NO_SM90 is set");
    return 0;
  }
  if (probed_cc != 90) {
    (void)snprintf(why, len, "device 0 is not sm_90 (compute capability %d.%d)",
                   probed_cc / 10, probed_cc % 10);
    return 0;
  }
  if (!sm90_find(dtype, dim)) {
    (void)snprintf(why, len,
                   "not compiled in this build (90a, FA_CUDA_HEAD_DIMS)");
    return 0;
  }
  if (p->paged) {
    (void)snprintf(why, len,
                   "paged KV (the sm80 kernel reads the block table)");
    return 0;
  }
  if (p->a.seqlen_k == 0) {
    (void)snprintf(why, len, "seqlen_k 0 (a TMA map needs rows; the sm80 kernel "
             "takes an empty cache)");
    return 0;
  }
  if (p->a.seqlen_q < 64 && !env_set("FA_SM90_FORCE")) {
    (void)snprintf(why, len,
                   "seqlen_q %d < 64 (decode: the sm80 decode tile packs "
                   "the GQA heads and splits the keys; a 128-row tile would be "
                   "padding)",
                   p->a.seqlen_q);
    return 0;
  }
  return supports_sm80(p, dtype, dim, why, len);
}

#define SM90_SUPPORTS(t, d)                                                    \
  static int supports_sm90_##t##_d##d(const fa_problem *p, char *why,        \
                                      size_t len) {                            \
    return supports_sm90(p, FA_DTYPE_##t, d, why, len);                        \
  }
SM90_SUPPORTS(bf16, 64)
SM90_SUPPORTS(bf16, 128)
SM90_SUPPORTS(bf16, 256)
SM90_SUPPORTS(f16, 64)
SM90_SUPPORTS(f16, 128)
SM90_SUPPORTS(f16, 256)

#define SM90_KERNEL(t, d, bwd)                                                 \
  {                                                                            \
    .name = "cuda.sm90." #t ".d" #d, .supports = supports_sm90_##t##_d##d,     \
    .forward = fwd_sm90, .backward = (bwd)                                     \
  }

#define SM80_KERNEL(t, d, bwd)                                                 \
  {                                                                            \
    .name = "cuda.sm80." #t ".d" #d, .supports = supports_##t##_d##d,          \
    .forward = fwd_sm80, .backward = (bwd)                                     \
  }

// d64/d128 also have a tensor-core backward; other dims' backward runs on
// cuda.generic.
// sm90 first: dispatch prefers them on an sm_90 device; the sm80 kernels
// stay selectable by name (fa_context_create_by_name) for comparison.
static const fa_kernel kernels[] = {
    SM90_KERNEL(bf16, 128, bwd_sm90), SM90_KERNEL(f16, 128, bwd_sm90),
    SM90_KERNEL(bf16, 64, bwd_sm90),  SM90_KERNEL(f16, 64, bwd_sm90),
    SM90_KERNEL(bf16, 256, NULL),     SM90_KERNEL(f16, 256, NULL),
    SM80_KERNEL(bf16, 128, bwd_sm80), SM80_KERNEL(f16, 128, bwd_sm80),
    SM80_KERNEL(bf16, 64, bwd_sm80),  SM80_KERNEL(f16, 64, bwd_sm80),
    SM80_KERNEL(bf16, 256, NULL),     SM80_KERNEL(f16, 256, NULL),
    SM80_KERNEL(bf16, 192, NULL),     SM80_KERNEL(f16, 192, NULL),
    SM80_KERNEL(bf16, 96, NULL),      SM80_KERNEL(f16, 96, NULL),
    {.name = "cuda.generic",
     .supports = supports_generic,
     .forward = fwd_generic,
     .backward = bwd_generic},
};

static const fa_backend backend_sm80 = {
    .api_version = FA_BACKEND_API_VERSION,
    .name = BACKEND_NAME,
    .kind = FA_BACKEND_CUDA,
    .rank = 100,
    .memory_space = FA_MEMORY_CUDA,
    .probe = probe,
    .context_create = ctx_create,
    .context_destroy = ctx_destroy,
    .capabilities = capabilities,
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

static const fa_backend *const module_backends[] = {&backend_sm80};

/* The module's one exported symbol (FA_MODULE_ENTRY). */
__attribute__((visibility("default"))) const fa_backend *const *
fa_module_backends(const fa_core_services *services, int *count) {
  if (!services || !count || services->api_version != FA_BACKEND_API_VERSION)
    return NULL;
  core = services;
  *count = 1;
  return module_backends;
}
