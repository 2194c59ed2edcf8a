// SPDX-License-Identifier: MIT
// The HIP backend "hip" (AMD Instinct MI200 gfx90a, MI300 gfx942), as the
// loadable module libflashattn-hip.so.
//
// The core dlopens this module at first use and calls fa_module_backends()
// (FA_MODULE_ENTRY) with its services. The module links libamdhip64: where
// the ROCm runtime is not installed, dlopen fails and the core's placeholder
// entry "hip" reports the loader's message; where the runtime is present but
// no supported device is, the probe reports why (no device, or an
// architecture this build has no code for). fa_explain() and
// FA_LOG=dispatch print both; nothing crashes.
//
// Each kernel owns its admission and its plan (core/backend.h); plan()
// reserves the scratch the plan needs in the context's workspace, so that
// a call fills one fa_gpu_params (backends/gpu/gpu_host.h), enqueues on the
// context's stream and neither allocates, copies nor synchronises; it runs
// exactly the kernel dispatch chose. Every HIP call is checked: failures
// become FA_ERR_BACKEND (FA_ERR_OUT_OF_MEMORY for allocations) with
// hipGetErrorString's text, through core->fail.
//
// Kernels (dispatch takes the highest score among those that accept):
//   hip.cdna.<bf16|f16>.d<64|128|256>  MFMA forward (cdna_fwd.h), head_dim ==
//       head_dim_v, 16-byte aligned tensors; every mask, softcap, ALiBi,
//       sinks, GQA packing, varlen, paged KV, split-KV, LSE. Forward only.
//       Score 20.
//   hip.generic  every problem with head dims <= 256, forward and backward
//       (backends/gpu/generic_kernels.h, wave64). Score 0.
// For triage and tests, bind a context to a kernel by name
// (fa_context_create_by_name(&ctx, "hip.generic")).
#include <hip/hip_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_host.h"
#include "hip_internal.h"

#ifndef FA_HIP_ARCHS
#define FA_HIP_ARCHS "gfx90a,gfx942"
#endif

static const fa_core_services *core; // set once by fa_module_backends()

#define BACKEND_NAME "hip"

/* ---- errors ------------------------------------------------------------- */

/* "text (name)", or just the name where the runtime's text is the name
   (ROCm 5.2 returns the name for both). */
static void hip_text(hipError_t e, char *buf, size_t len) {
  const char *text = hipGetErrorString(e), *name = hipGetErrorName(e);
  if (strcmp(text, name) == 0) snprintf(buf, len, "%s", name);
  else snprintf(buf, len, "%s (%s)", text, name);
}

static fa_status hip_fail(hipError_t e, const char *what) {
  fa_status s = e == hipErrorOutOfMemory ? FA_ERR_OUT_OF_MEMORY
                                         : FA_ERR_BACKEND;
  char text[160];
  hip_text(e, text, sizeof text);
  fa_status r = core->fail(s, "%s: %s: %s", BACKEND_NAME, what, text);
  (void)hipGetLastError(); // clear the error for the next call
  return r;
}

#define CK(call, what)                                                         \
  do {                                                                         \
    hipError_t ck_ = (call);                                                   \
    if (ck_ != hipSuccess) return hip_fail(ck_, what);                         \
  } while (0)

/* ---- which architectures this build has code for -------------------------- */

/* "gfx90a:sramecc+:xnack-" -> "gfx90a"; 1 if FA_HIP_ARCHS lists it. */
static int arch_compiled(const char *gcn, char *base, size_t len) {
  size_t n = strcspn(gcn, ":");
  if (n >= len) n = len - 1;
  memcpy(base, gcn, n);
  base[n] = '\0';
  const char *list = FA_HIP_ARCHS;
  while (*list) {
    size_t m = strcspn(list, ",");
    if (m == n && strncmp(list, base, n) == 0) return 1;
    list += m;
    if (*list == ',') list++;
  }
  return 0;
}

/* ---- per-context state ---------------------------------------------------- */

typedef struct hip_state {
  int device;
  int cu_count;
  hipStream_t stream; // NULL: the null stream
  void *ws;           // workspace: split partials, backward D, descriptors
  size_t ws_bytes;
} hip_state;

/* CU count of device 0, read by the probe: what a query without a context
   (fa_explain) describes. 304 is an MI300X. */
static int probed_cus = 304;

static int probe(char *why, size_t len) {
  int n = 0;
  hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess || n < 1) {
    char text[160] = "0 devices";
    if (e != hipSuccess) hip_text(e, text, sizeof text);
    snprintf(why, len, "no usable AMD GPU: hipGetDeviceCount: %s", text);
    (void)hipGetLastError();
    return 0;
  }
  hipDeviceProp_t prop;
  e = hipGetDeviceProperties(&prop, 0);
  if (e != hipSuccess) {
    char text[160];
    hip_text(e, text, sizeof text);
    snprintf(why, len, "hipGetDeviceProperties(0): %s", text);
    (void)hipGetLastError();
    return 0;
  }
  char base[64];
  if (!arch_compiled(prop.gcnArchName, base, sizeof base)) {
    snprintf(why, len, "device 0 (%s) is %s; this build of %s has code for %s "
             "only (CDNA wave64 with MFMA; set FA_HIP_ARCHITECTURES)",
             prop.name, base, BACKEND_NAME, FA_HIP_ARCHS);
    return 0;
  }
  if (prop.multiProcessorCount > 0) probed_cus = prop.multiProcessorCount;
  return 1;
}

static fa_status ctx_create(int device, void **state) {
  int n = 0;
  CK(hipGetDeviceCount(&n), "hipGetDeviceCount");
  if (device >= n)
    return core->fail(FA_ERR_NO_DEVICE, "device=%d: this machine has %d AMD "
                      "GPU%s", device, n, n == 1 ? "" : "s");
  hipDeviceProp_t prop;
  CK(hipGetDeviceProperties(&prop, device), "hipGetDeviceProperties");
  char base[64];
  if (!arch_compiled(prop.gcnArchName, base, sizeof base))
    return core->fail(FA_ERR_NO_DEVICE, "device=%d is %s; %s has code for %s "
                      "only", device, base, BACKEND_NAME, FA_HIP_ARCHS);
  CK(hipSetDevice(device), "hipSetDevice");
  CK(hipFree(NULL), "initialising the HIP context");
  hip_state *st = calloc(1, sizeof *st);
  if (!st)
    return core->fail(FA_ERR_OUT_OF_MEMORY, "%s: context: out of memory",
                      BACKEND_NAME);
  st->device = device;
  st->cu_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  *state = st;
  return FA_OK;
}

static void ctx_destroy(void *state) {
  hip_state *st = state;
  if (!st) return;
  if (st->ws && hipSetDevice(st->device) == hipSuccess) {
    (void)hipStreamSynchronize(st->stream);
    (void)hipFree(st->ws);
  }
  (void)hipGetLastError();
  free(st);
}

static fa_status set_stream(void *state, void *stream) {
  ((hip_state *)state)->stream = (hipStream_t)stream;
  return FA_OK;
}

static fa_status use_device(const hip_state *st) {
  CK(hipSetDevice(st->device), "hipSetDevice");
  return FA_OK;
}

/* Scratch of at least `bytes`, owned by the context. Growing waits for the
   work queued on the stream, which may still read the old buffer: plans
   grow it (plan_reserve) so that calls neither allocate nor synchronise. */
static fa_status workspace(hip_state *st, size_t bytes, void **out) {
  if (bytes <= st->ws_bytes) {
    *out = st->ws;
    return FA_OK;
  }
  if (st->ws) {
    CK(hipStreamSynchronize(st->stream), "hipStreamSynchronize (workspace)");
    CK(hipFree(st->ws), "hipFree (workspace)");
    st->ws = NULL;
    st->ws_bytes = 0;
  }
  size_t rounded = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  hipError_t e = hipMalloc(&st->ws, rounded);
  if (e != hipSuccess) {
    st->ws = NULL;
    return hip_fail(e, "hipMalloc (workspace)");
  }
  st->ws_bytes = rounded;
  *out = st->ws;
  return FA_OK;
}

/* ---- memory ---------------------------------------------------------------- */

static fa_status mem_alloc(void *state, size_t bytes, void **ptr) {
  fa_status s = use_device(state);
  if (s) return s;
  void *p = NULL;
  CK(hipMalloc(&p, bytes), "hipMalloc"); // 256-byte aligned
  *ptr = p;
  return FA_OK;
}

static fa_status mem_free(void *state, void *ptr) {
  fa_status s = use_device(state);
  if (s) return s;
  CK(hipFree(ptr), "hipFree");
  return FA_OK;
}

static fa_status copy_to_device(void *state, void *dst, const void *src,
                                size_t bytes) {
  hip_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, st->stream),
     "hipMemcpyAsync (host to device)");
  CK(hipStreamSynchronize(st->stream), "hipStreamSynchronize (copy)");
  return FA_OK;
}

static fa_status copy_to_host(void *state, void *dst, const void *src,
                              size_t bytes) {
  hip_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, st->stream),
     "hipMemcpyAsync (device to host)");
  CK(hipStreamSynchronize(st->stream), "hipStreamSynchronize (copy)");
  return FA_OK;
}

static fa_status synchronize(void *state) {
  hip_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(hipStreamSynchronize(st->stream), "hipStreamSynchronize");
  return FA_OK;
}

static fa_status launched(int err, const char *kernel) {
  if (err == 0) return FA_OK;
  char what[96];
  snprintf(what, sizeof what, "launching %s", kernel);
  return hip_fail((hipError_t)err, what);
}

/* The scratch a plan reserved (a call that finds less grows it). */
static fa_status plan_scratch(hip_state *st, const fa_plan_data *plan,
                              void **ws) {
  *ws = NULL;
  if (!plan->workspace_bytes) return FA_OK;
  return workspace(st, plan->workspace_bytes, ws);
}

/* ---- forward ------------------------------------------------------------- */

static fa_status run_forward(hip_state *st, const fa_plan_data *plan,
                             fa_gpu_params *q, fa_gpu_launch_fn fn,
                             const char *name) {
  fa_status s = use_device(st);
  if (s) return s;
  void *ws;
  if ((s = plan_scratch(st, plan, &ws))) return s;
  if (q->num_splits > 1) fa_gpu_place_split(q, ws);
  if ((s = launched(fn(q, st->stream), name))) return s;
  if (q->num_splits > 1)
    return launched(fa_hip_launch_combine(q, st->stream),
                    "the split-KV combine");
  return FA_OK;
}

static fa_status fwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a) {
  fa_gpu_params q;
  fa_gpu_fill_forward(&q, p, plan, a);
  return run_forward(state, plan, &q, fa_hip_launch_fwd_generic,
                     "hip.generic");
}

#define FA_DTYPE_bf16 FA_BF16
#define FA_DTYPE_f16 FA_F16

typedef struct cdna_instance {
  fa_dtype dtype;
  int dim;
  fa_gpu_launch_fn launch;
  const char *name;
} cdna_instance;

static const cdna_instance cdna_instances[] = {
#define FA_CDNA_INST(t, d)                                                     \
  {FA_DTYPE_##t, d, fa_cdna_fwd_##t##_d##d, "hip.cdna." #t ".d" #d},
#include "cdna_instances.h"
#undef FA_CDNA_INST
    {FA_F32, 0, NULL, NULL}};

static const cdna_instance *cdna_find(fa_dtype dtype, int dim) {
  for (const cdna_instance *i = cdna_instances; i->launch; i++)
    if (i->dtype == dtype && i->dim == dim) return i;
  return NULL;
}

static fa_status fwd_cdna(void *state, const fa_problem *p,
                          const fa_plan_data *plan, const fa_fwd_args *a) {
  const cdna_instance *inst = cdna_find(p->dtype, p->a.head_dim);
  if (!inst)
    return core->fail(FA_ERR_BACKEND, "%s: hip.cdna.%s.d%d is not compiled "
                      "in", BACKEND_NAME, fa_gpu_dtype_name(p->dtype),
                      p->a.head_dim);
  fa_gpu_params q;
  fa_gpu_fill_forward(&q, p, plan, a);
  return run_forward(state, plan, &q, inst->launch, inst->name);
}

/* ---- backward ------------------------------------------------------------ */

static const fa_gpu_bwd_launchers generic_bwd = {
    fa_hip_launch_bwd_delta, fa_hip_launch_bwd_dq, fa_hip_launch_bwd_dkdv,
    fa_hip_launch_bwd_zero_paged};

static fa_status bwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_bwd_args *a) {
  hip_state *st = state;
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

/* ---- fa_merge_states ------------------------------------------------------- */

static fa_status merge_states(void *state, int n, const fa_tensor *o_parts,
                              const float *const *lse_parts, int batch,
                              int seqlen, int heads, int head_dim,
                              fa_tensor o, float *lse) {
  hip_state *st = state;
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
    // Synchronous copy: desc is freed right after.
    hipError_t e = hipMemcpyAsync(ws, desc, bytes, hipMemcpyHostToDevice,
                                  st->stream);
    if (e == hipSuccess) e = hipStreamSynchronize(st->stream);
    if (e != hipSuccess) s = hip_fail(e, "hipMemcpyAsync (merge parts)");
  }
  free(desc);
  if (s) return s;
  return launched(fa_hip_launch_merge(n, ws, (int)o.dtype, batch, seqlen,
                                      heads, head_dim, fa_gpu_view_of(&o),
                                      lse, st->stream),
                  "the merge kernel");
}

/* ---- admission and plans ------------------------------------------------- */

static int supports_generic(const fa_kernel_query *q, char *why, size_t len) {
  return fa_gpu_generic_supports(q, why, len);
}

static int supports_cdna(const fa_kernel_query *kq, fa_dtype dtype, int dim,
                         char *why, size_t len) {
  const fa_problem *p = kq->problem;
  if (p->dtype != dtype) {
    snprintf(why, len, "dtype is %s; this kernel is %s",
             fa_gpu_dtype_name(p->dtype), fa_gpu_dtype_name(dtype));
    return 0;
  }
  if (p->a.head_dim != dim || p->a.head_dim_v != dim) {
    snprintf(why, len, "head_dim %d, head_dim_v %d: this kernel is %d, %d",
             p->a.head_dim, p->a.head_dim_v, dim, dim);
    return 0;
  }
  if (!cdna_find(dtype, dim)) {
    snprintf(why, len, "not compiled in this build (FA_HIP_HEAD_DIMS)");
    return 0;
  }
  return fa_gpu_features_ok(kq, why, len) && fa_gpu_aligned16(kq, why, len);
}

/* The planner's inputs: the MFMA tile's 4 wavefronts x 32 queries as the
   largest B_r, 64 keys as B_c (the kernels keep K/V tiles of their own width
   in LDS, cdna_fwd.h, so B_c is only the split-KV granularity), and no
   memory budget (the tile, not a budget, bounds the blocks). */
static void hip_caps(const fa_kernel_query *q, int forward, fa_caps *caps) {
  const hip_state *st = q->state;
  caps->fast_mem_bytes = (size_t)1 << 34; // no budget (the planner counts in int)
  caps->num_workers = 2 * (st ? st->cu_count : probed_cus);
  caps->tile_align = 32; // MFMA 32x32 granularity
  caps->max_block_q = FA_CDNA_BLOCK_Q;
  caps->max_block_k = 64;
  caps->max_splits = 128;
  caps->pack_gqa = forward;  // both forward kernels take (row, head) lanes
  caps->max_small_lanes = 0; // a tile spans one kv head
}

/* Both kernels' plans: the core's vocabulary on the caps above; scratch:
   the split partials (forward) or D (backward), reserved now. */
static fa_status plan_hip(const fa_kernel_query *q, fa_plan_data *d,
                          const char *name) {
  const fa_problem *p = q->problem;
  const int bwd = q->layout && q->layout->op == FA_OP_BACKWARD;
  fa_caps caps;
  hip_caps(q, !bwd, &caps);
  fa_plan_compute(p, &caps, d);
  fa_status s;
  if (bwd) {
    d->workspace_bytes = (size_t)p->a.batch * p->a.heads_q * p->a.seqlen_q *
                         sizeof(float);
    fa_gpu_params g;
    fa_gpu_fill_problem(&g, p);
    s = fa_gpu_generic_bwd_fits(core, &g, name);
  } else {
    d->workspace_bytes =
        d->num_splits > 1 ? (size_t)d->num_work * (size_t)d->block_q *
                                (2 + (size_t)p->a.head_dim_v) * sizeof(float)
                          : 0;
    s = fa_gpu_grid_fits(core, d->num_work, name);
  }
  hip_state *st = q->state;
  if (!s && st && d->workspace_bytes) {
    void *ws;
    if (!(s = use_device(st))) s = workspace(st, d->workspace_bytes, &ws);
  }
  if (!s && core->log_enabled()) {
    char text[256];
    fa_plan_data_describe(d, text, sizeof text);
    core->log("  %s %s: %s, workspace %zu bytes", BACKEND_NAME, name, text,
              d->workspace_bytes);
  }
  return s;
}

static fa_status plan_generic(const fa_kernel_query *q, fa_plan_data *d) {
  return plan_hip(q, d, "hip.generic");
}

#define CDNA_FNS(t, dm)                                                        \
  static int supports_##t##_d##dm(const fa_kernel_query *q, char *why,       \
                                  size_t len) {                                \
    return supports_cdna(q, FA_DTYPE_##t, dm, why, len);                       \
  }                                                                            \
  static int score_##t##_d##dm(const fa_kernel_query *q) {                     \
    (void)q;                                                                   \
    return 20;                                                                 \
  }                                                                            \
  static fa_status plan_##t##_d##dm(const fa_kernel_query *q,                  \
                                    fa_plan_data *out) {                       \
    return plan_hip(q, out, "hip.cdna." #t ".d" #dm);                          \
  }
CDNA_FNS(bf16, 64)
CDNA_FNS(bf16, 128)
CDNA_FNS(bf16, 256)
CDNA_FNS(f16, 64)
CDNA_FNS(f16, 128)
CDNA_FNS(f16, 256)

#define CDNA_KERNEL(t, dm)                                                     \
  {.name = "hip.cdna." #t ".d" #dm,                                            \
   .supports = supports_##t##_d##dm,                                           \
   .score = score_##t##_d##dm,                                                 \
   .plan = plan_##t##_d##dm,                                                   \
   .forward = fwd_cdna,                                                        \
   .backward = NULL}

static const fa_kernel kernels[] = {
    CDNA_KERNEL(bf16, 128), CDNA_KERNEL(f16, 128), CDNA_KERNEL(bf16, 64),
    CDNA_KERNEL(f16, 64),   CDNA_KERNEL(bf16, 256), CDNA_KERNEL(f16, 256),
    {.name = "hip.generic",
     .supports = supports_generic,
     .score = NULL,
     .plan = plan_generic,
     .forward = fwd_generic,
     .backward = bwd_generic},
};

static const fa_backend backend_cdna = {
    .api_version = FA_BACKEND_API_VERSION,
    .name = BACKEND_NAME,
    .kind = FA_BACKEND_HIP,
    .rank = 100,
    .memory_space = FA_MEMORY_HIP,
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

static const fa_backend *const module_backends[] = {&backend_cdna};

/* The module's one exported symbol (FA_MODULE_ENTRY). */
__attribute__((visibility("default"))) const fa_backend *const *
fa_module_backends(const fa_core_services *services, int *count) {
  if (!services || !count || services->api_version != FA_BACKEND_API_VERSION)
    return NULL;
  core = services;
  *count = 1;
  return module_backends;
}
