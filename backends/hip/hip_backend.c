// SPDX-License-Identifier: MIT
// The HIP backend "hip-cdna" (AMD Instinct MI200 gfx90a, MI300 gfx942), as
// the loadable module libflashattn-hip.so.
//
// The core dlopens this module at first use and calls fa_module_backends()
// (FA_MODULE_ENTRY) with its services. The module links libamdhip64: where
// the ROCm runtime is not installed, dlopen fails and the core's placeholder
// entry "hip" reports the loader's message; where the runtime is present but
// no supported device is, the probe reports why (no device, or an
// architecture this build has no code for). fa_explain() and
// FA_LOG=dispatch print both; nothing crashes.
//
// Host side of every call: set the context's device, fill one fa_gpu_params
// from the validated problem and the core's plan, take scratch from the
// context's workspace (grown on demand), enqueue on the context's stream,
// check every HIP call. Failures become FA_ERR_BACKEND (FA_ERR_OUT_OF_MEMORY
// for allocations) with hipGetErrorString's text, through core->fail.
//
// Kernels, best first:
//   hip.cdna.<bf16|f16>.d<64|128|256>  MFMA forward (cdna_fwd.h), head_dim ==
//       head_dim_v; every mask, softcap, ALiBi, sinks, GQA packing, varlen,
//       paged KV, split-KV, LSE. Backward: the next kernel.
//   hip.generic  every problem with head dims <= 256, forward and backward
//       (backends/gpu/generic_kernels.h, wave64).
// FA_HIP_GENERIC=1 in the environment makes the MFMA kernels say no.
#include <hip/hip_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "hip_internal.h"

#ifndef FA_HIP_ARCHS
#define FA_HIP_ARCHS "gfx90a,gfx942"
#endif

static const fa_core_services *core; // set once by fa_module_backends()

#define BACKEND_NAME "hip-cdna"

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

/* CU count of device 0, read by the probe, for plans made without a context
   (fa_explain). 304 is an MI300X. */
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

static void capabilities(void *state, fa_caps *caps) {
  const hip_state *st = state;
  // A planning budget, not the LDS size: the planner's formula counts fp32
  // tiles and 512 KB makes it choose B_r = 128 (the MFMA tile's 4 wavefronts
  // x 32 queries) and B_c = 64 for every head dim up to 256. The kernels
  // keep 16-bit K/V tiles of their own width in LDS (cdna_fwd.h), so B_c is
  // only the split-KV granularity.
  caps->fast_mem_bytes = 512 * 1024;
  caps->num_workers = 2 * (st ? st->cu_count : probed_cus);
  caps->tile_align = 32;             // MFMA 32x32 granularity
  caps->max_block_q = FA_CDNA_BLOCK_Q;
  caps->max_block_k = 64;
  caps->max_splits = 128;
  caps->pack_gqa = 1;        // both forward kernels take (row, head) lanes
  caps->max_small_lanes = 0; // a tile spans one kv head
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
   work queued on the stream, which may still read the old buffer. */
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

/* ---- parameters ---------------------------------------------------------- */

static fa_gpu_view view_of(const fa_tensor *t) {
  fa_gpu_view v = {t->data, t->stride_batch, t->stride_seq, t->stride_head};
  return v;
}

static void fill_problem(fa_gpu_params *q, const fa_problem *p) {
  const fa_attention *a = &p->a;
  memset(q, 0, sizeof *q);
  q->batch = a->batch;
  q->seqlen_q = a->seqlen_q;
  q->seqlen_k = a->seqlen_k;
  q->heads_q = a->heads_q;
  q->heads_kv = a->heads_kv;
  q->group = p->group;
  q->head_dim = a->head_dim;
  q->head_dim_v = a->head_dim_v;
  q->scale = a->scale;
  q->softcap = a->softcap;
  q->window_left = a->window_left;
  q->window_right = a->window_right;
  q->top_left = p->top_left;
  q->varlen_q = p->varlen_q;
  q->varlen_k = p->varlen_k;
  q->paged = p->paged;
  q->dtype = (int)p->dtype;
  q->alibi_slopes = a->alibi_slopes;
  q->sinks = a->sinks;
  q->cu_seqlens_q = a->cu_seqlens_q;
  q->cu_seqlens_k = a->cu_seqlens_k;
  q->seqused_k = a->seqused_k;
  q->block_table = a->block_table;
  q->max_blocks_per_seq = a->max_blocks_per_seq;
  q->page_size = a->page_size;
  q->only_batch = -1;
}

static void fill_forward(fa_gpu_params *q, const fa_problem *p,
                         const fa_plan_data *plan, const fa_fwd_args *a) {
  fill_problem(q, p);
  q->q = view_of(&a->q);
  q->k = view_of(&a->k);
  q->v = view_of(&a->v);
  q->o = view_of(&a->o);
  q->lse = a->lse;
  q->block_q = plan->block_q;
  q->block_k = plan->block_k;
  q->pack_group = plan->pack_group;
  q->block_rows = plan->block_rows;
  q->num_q_blocks = plan->num_q_blocks;
  q->num_splits = plan->num_splits;
  q->num_work = plan->num_work;
}

static fa_status launched(int err, const char *kernel) {
  if (err == 0) return FA_OK;
  char what[96];
  snprintf(what, sizeof what, "launching %s", kernel);
  return hip_fail((hipError_t)err, what);
}

static fa_status grid_fits(int64_t blocks, const char *what) {
  if (blocks <= INT_MAX) return FA_OK;
  return core->fail(FA_ERR_UNSUPPORTED, "%s: %lld workgroups exceed the grid "
                    "limit", what, (long long)blocks);
}

/* Workspace for the split partials, if the plan splits the keys. */
static fa_status split_scratch(hip_state *st, fa_gpu_params *q) {
  if (q->num_splits <= 1) return FA_OK;
  size_t rows = (size_t)q->num_work * (size_t)q->block_q;
  size_t bytes = rows * 2 * sizeof(float) +
                 rows * (size_t)q->head_dim_v * sizeof(float);
  void *ws = NULL;
  fa_status s = workspace(st, bytes, &ws);
  if (s) return s;
  q->part_ml = ws;
  q->part_o = (float *)ws + rows * 2;
  return FA_OK;
}

/* ---- forward ------------------------------------------------------------- */

typedef int (*launch_fn)(const fa_gpu_params *p, void *stream);

static fa_status run_forward(hip_state *st, fa_gpu_params *q, launch_fn fn,
                             const char *name) {
  fa_status s = use_device(st);
  if (s) return s;
  if ((s = grid_fits(q->num_work, name))) return s;
  if ((s = split_scratch(st, q))) return s;
  if ((s = launched(fn(q, st->stream), name))) return s;
  if (q->num_splits > 1)
    return launched(fa_hip_launch_combine(q, st->stream),
                    "the split-KV combine");
  return FA_OK;
}

static fa_status fwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a) {
  fa_gpu_params q;
  fill_forward(&q, p, plan, a);
  return run_forward(state, &q, fa_hip_launch_fwd_generic,
                     "hip.generic forward");
}

#define FA_DTYPE_bf16 FA_BF16
#define FA_DTYPE_f16 FA_F16

typedef struct cdna_instance {
  fa_dtype dtype;
  int dim;
  launch_fn launch;
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
  fa_gpu_params q;
  fill_forward(&q, p, plan, a);
  if (plan->block_q > FA_CDNA_BLOCK_Q) {
    // Not reachable with this module's capabilities; kept as a guard.
    if (core->log_enabled())
      core->log("  %s %s: block_q %d > %d; running hip.generic", BACKEND_NAME,
                inst->name, plan->block_q, FA_CDNA_BLOCK_Q);
    return run_forward(state, &q, fa_hip_launch_fwd_generic,
                       "hip.generic forward");
  }
  return run_forward(state, &q, inst->launch, inst->name);
}

/* ---- backward ------------------------------------------------------------ */

static fa_status bwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_bwd_args *a) {
  hip_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fill_problem(&q, p);
  q.q = view_of(&a->q);
  q.k = view_of(&a->k);
  q.v = view_of(&a->v);
  q.o = view_of(&a->o);
  q.d_o = view_of(&a->d_o);
  q.dq = view_of(&a->dq);
  q.dk = view_of(&a->dk);
  q.dv = view_of(&a->dv);
  q.lse_in = a->lse;
  q.block_q = plan->block_q;
  q.block_k = plan->block_k;
  q.pack_group = 1; // the core plans backward without GQA packing
  q.block_rows = plan->block_rows;
  q.num_q_blocks = plan->num_q_blocks;
  q.num_splits = 1;
  int64_t rows_q = (int64_t)q.batch * q.heads_q * q.seqlen_q;
  int64_t rows_k = (int64_t)q.batch * q.heads_kv * q.seqlen_k;
  if ((s = grid_fits(rows_q, "hip.generic backward")) ||
      (s = grid_fits(rows_k, "hip.generic backward")))
    return s;
  void *ws = NULL;
  if ((s = workspace(st, (size_t)rows_q * sizeof(float), &ws))) return s;
  q.delta = ws;
  if ((s = launched(fa_hip_launch_bwd_delta(&q, st->stream),
                    "hip.generic backward (D = rowsum(dO o O))")) ||
      (s = launched(fa_hip_launch_bwd_dq(&q, st->stream),
                    "hip.generic backward (dQ)")))
    return s;
  if (!q.paged)
    return launched(fa_hip_launch_bwd_dkdv(&q, st->stream),
                    "hip.generic backward (dK, dV)");
  // Paged pools may share pages between sequences: zero every named slot,
  // then add one sequence at a time.
  if ((s = launched(fa_hip_launch_bwd_zero_paged(&q, st->stream),
                    "hip.generic backward (zero dK, dV pages)")))
    return s;
  for (int b = 0; b < q.batch; b++) {
    q.only_batch = b;
    if ((s = launched(fa_hip_launch_bwd_dkdv(&q, st->stream),
                      "hip.generic backward (dK, dV)")))
      return s;
  }
  return FA_OK;
}

/* ---- fa_merge_states ------------------------------------------------------- */

static fa_status merge_states(void *state, int n, const fa_tensor *o_parts,
                              const float *const *lse_parts, int batch,
                              int seqlen, int heads, int head_dim,
                              fa_tensor o, float *lse) {
  hip_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  if (head_dim > FA_HIP_MAX_HEAD_DIM)
    return core->fail(FA_ERR_UNSUPPORTED, "%s: merge with head_dim %d > %d",
                      BACKEND_NAME, head_dim, FA_HIP_MAX_HEAD_DIM);
  size_t bytes = sizeof(fa_gpu_merge_part) * (size_t)n;
  fa_gpu_merge_part *desc = malloc(bytes);
  if (!desc)
    return core->fail(FA_ERR_OUT_OF_MEMORY, "%s: merge descriptors: out of "
                      "memory", BACKEND_NAME);
  for (int i = 0; i < n; i++) {
    desc[i].o = o_parts[i].data;
    desc[i].dtype = (int)o_parts[i].dtype;
    desc[i].sb = o_parts[i].stride_batch;
    desc[i].ss = o_parts[i].stride_seq;
    desc[i].sh = o_parts[i].stride_head;
    desc[i].lse = lse_parts[i];
  }
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
                                      heads, head_dim, view_of(&o), lse,
                                      st->stream),
                  "the merge kernel");
}

/* ---- kernels and dispatch -------------------------------------------------- */

static int supports_generic(const fa_problem *p, char *why, size_t len) {
  if (p->a.head_dim > FA_HIP_MAX_HEAD_DIM ||
      p->a.head_dim_v > FA_HIP_MAX_HEAD_DIM) {
    snprintf(why, len, "head_dim %d, head_dim_v %d: at most %d",
             p->a.head_dim, p->a.head_dim_v, FA_HIP_MAX_HEAD_DIM);
    return 0;
  }
  return 1;
}

static int supports_cdna(const fa_problem *p, fa_dtype dtype, int dim,
                         char *why, size_t len) {
  const char *env = getenv("FA_HIP_GENERIC");
  if (env && *env && strcmp(env, "0") != 0) {
    snprintf(why, len, "FA_HIP_GENERIC is set");
    return 0;
  }
  if (p->dtype != dtype) {
    snprintf(why, len, "dtype is not %s", dtype == FA_BF16 ? "bf16" : "f16");
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
  return 1;
}

#define CDNA_SUPPORTS(t, d)                                                    \
  static int supports_##t##_d##d(const fa_problem *p, char *why,             \
                                 size_t len) {                                 \
    return supports_cdna(p, FA_DTYPE_##t, d, why, len);                        \
  }
CDNA_SUPPORTS(bf16, 64)
CDNA_SUPPORTS(bf16, 128)
CDNA_SUPPORTS(bf16, 256)
CDNA_SUPPORTS(f16, 64)
CDNA_SUPPORTS(f16, 128)
CDNA_SUPPORTS(f16, 256)

#define CDNA_KERNEL(t, d)                                                      \
  {.name = "hip.cdna." #t ".d" #d,                                             \
   .supports = supports_##t##_d##d,                                            \
   .forward = fwd_cdna,                                                        \
   .backward = NULL}

static const fa_kernel kernels[] = {
    CDNA_KERNEL(bf16, 128), CDNA_KERNEL(f16, 128), CDNA_KERNEL(bf16, 64),
    CDNA_KERNEL(f16, 64),   CDNA_KERNEL(bf16, 256), CDNA_KERNEL(f16, 256),
    {.name = "hip.generic",
     .supports = supports_generic,
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
