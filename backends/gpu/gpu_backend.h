// SPDX-License-Identifier: MIT
// The host backend the CUDA and HIP modules share: per-context state, the
// workspace (grown at plan time, so that calls neither allocate nor
// synchronise), memory and copies, error text, the generic kernels'
// forward and backward, the split-KV forward runner and fa_merge_states.
// Written once against the runtime names of gpu_runtime.h; each module
// (cuda_backend.c, hip_backend.c) includes it once, after defining
//   FA_GPU_RUNTIME_CUDA or FA_GPU_RUNTIME_HIP   its runtime,
//   FA_GPU_BACKEND_NAME                          "cuda", "hip",
//   FA_GPU_LAUNCHER(x)                           its generic launchers'
//                                                names (fa_cuda_launch_##x),
// and adds what differs: the probe, context creation (which devices it
// takes) and its kernels (admission, plans, tensor-core launches), then
// FA_GPU_MODULE(kind, memory space) for its fa_backend and entry point.
#ifndef FA_GPU_BACKEND_H
#define FA_GPU_BACKEND_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_host.h"
#include "gpu_runtime.h"

static const fa_core_services *core; // set once by fa_module_backends()

/* ---- errors ------------------------------------------------------------- */

/* "text (name)", or just the name where the runtime's text is the name
   (ROCm 5.2 returns the name for both). */
static void rt_text(fa_rt_error e, char *buf, size_t len) {
  const char *text = fa_rt_error_string(e), *name = fa_rt_error_name(e);
  if (strcmp(text, name) == 0)
    (void)snprintf(buf, len, "%s", name);
  else
    (void)snprintf(buf, len, "%s (%s)", text, name);
}

/* FA_ERR_OUT_OF_MEMORY for an allocation failure, else FA_ERR_BACKEND, with
   the runtime's text; clears a non-sticky error for the next call. */
static fa_status rt_fail(fa_rt_error e, const char *what) {
  fa_status s =
      e == FA_RT_OUT_OF_MEMORY ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND;
  char text[160];
  rt_text(e, text, sizeof text);
  fa_status r = core->fail(s, "%s: %s: %s", FA_GPU_BACKEND_NAME, what, text);
  (void)fa_rt_get_last_error();
  return r;
}

#define CK(call, what)                                                         \
  do {                                                                         \
    fa_rt_error ck_ = (call);                                                  \
    if (ck_ != FA_RT_SUCCESS) return rt_fail(ck_, what);                       \
  } while (0)

/* A launcher's return value (the runtime's error code as an int). */
static fa_status launched(int err, const char *kernel) {
  if (err == 0) return FA_OK;
  char what[96];
  (void)snprintf(what, sizeof what, "launching %s", kernel);
  return rt_fail((fa_rt_error)err, what);
}

/* A switch of the core's configuration table (0 when unset). */
static inline long config(const char *name) {
  return core->config_int ? core->config_int(name) : 0;
}

/* ---- per-context state -----------------------------------------------------
 */

typedef struct gpu_state {
  int device;
  int units;           // SMs / CUs
  int cc;              // CUDA: 10 * major + minor; HIP: 0
  fa_rt_stream stream; // NULL: the default stream
  void *ws;            // workspace: split partials, backward D and dQ
  size_t ws_bytes;
} gpu_state;

/* Device 0's figures, read by the probe: what a query without a context
   (fa_explain) describes. */
static int probed_units, probed_cc;

static inline int query_units(const fa_kernel_query *q) {
  const gpu_state *st = q->state;
  return st ? st->units : probed_units;
}

static inline int query_cc(const fa_kernel_query *q) {
  const gpu_state *st = q->state;
  return st ? st->cc : probed_cc;
}

static inline int query_device(const fa_kernel_query *q) {
  const gpu_state *st = q->state;
  return st ? st->device : 0;
}

static inline int is_backward(const fa_kernel_query *q) {
  return q->layout && q->layout->op == FA_OP_BACKWARD;
}

/* The state of a context on device `device` with `units` SMs / CUs, after
   the module's own checks; initialises the runtime's context now. */
static fa_status state_create(int device, int units, int cc, void **state) {
  CK(fa_rt_set_device(device), FA_RT "SetDevice");
  CK(fa_rt_free(NULL), "initialising the " FA_RT " context");
  gpu_state *st = calloc(1, sizeof *st);
  if (!st)
    return core->fail(FA_ERR_OUT_OF_MEMORY, "%s: context: out of memory",
                      FA_GPU_BACKEND_NAME);
  st->device = device;
  st->units = units > 0 ? units : 1;
  st->cc = cc;
  *state = st;
  return FA_OK;
}

static void ctx_destroy(void *state) {
  gpu_state *st = state;
  if (!st) return;
  if (st->ws && fa_rt_set_device(st->device) == FA_RT_SUCCESS) {
    (void)fa_rt_stream_synchronize(st->stream);
    (void)fa_rt_free(st->ws);
  }
  (void)fa_rt_get_last_error();
  free(st);
}

static fa_status set_stream(void *state, void *stream) {
  ((gpu_state *)state)->stream = (fa_rt_stream)stream;
  return FA_OK;
}

static fa_status use_device(const gpu_state *st) {
  CK(fa_rt_set_device(st->device), FA_RT "SetDevice");
  return FA_OK;
}

/* ---- the workspace
 * ----------------------------------------------------------- */

/* Scratch of at least `bytes` on the device, owned by the context. Growing
   waits for work already queued on the stream, which may still read the
   old buffer: plans grow it (plan_reserve) so that calls find it large
   enough and neither allocate nor synchronise. */
static fa_status workspace(gpu_state *st, size_t bytes, void **out) {
  if (bytes <= st->ws_bytes) {
    *out = st->ws;
    return FA_OK;
  }
  if (st->ws) {
    CK(fa_rt_stream_synchronize(st->stream),
       FA_RT "StreamSynchronize (workspace)");
    CK(fa_rt_free(st->ws), FA_RT "Free (workspace)");
    st->ws = NULL;
    st->ws_bytes = 0;
  }
  size_t rounded = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  fa_rt_error e = fa_rt_malloc(&st->ws, rounded);
  if (e != FA_RT_SUCCESS) {
    st->ws = NULL;
    char what[96];
    (void)snprintf(what, sizeof what, "workspace of %zu bytes: " FA_RT "Malloc",
                   rounded);
    return rt_fail(e, what);
  }
  st->ws_bytes = rounded;
  *out = st->ws;
  return FA_OK;
}

/* Reserve a plan's scratch now, at plan time (fa_explain plans without a
   context reserve nothing). */
static fa_status plan_reserve(const fa_kernel_query *q, size_t bytes) {
  gpu_state *st = q->state;
  if (!st || !bytes) return FA_OK;
  fa_status s = use_device(st);
  void *ws;
  return s ? s : workspace(st, bytes, &ws);
}

/* The scratch a plan reserved: a call that finds less (a plan made on
   another context) grows it, which synchronises. */
static fa_status plan_scratch(gpu_state *st, const fa_plan_data *plan,
                              void **ws) {
  *ws = NULL;
  if (!plan->workspace_bytes) return FA_OK;
  return workspace(st, plan->workspace_bytes, ws);
}

static void log_plan(const char *name, const fa_plan_data *d) {
  if (!core->log_enabled()) return;
  char text[320];
  fa_plan_data_describe(d, text, sizeof text);
  core->log("  %s %s: %s", FA_GPU_BACKEND_NAME, name, text);
}

/* ---- memory ----------------------------------------------------------------
 */

static fa_status mem_alloc(void *state, size_t bytes, void **ptr) {
  fa_status s = use_device(state);
  if (s) return s;
  void *p = NULL;
  fa_rt_error e = fa_rt_malloc(&p, bytes);
  if (e != FA_RT_SUCCESS) {
    char what[64];
    (void)snprintf(what, sizeof what, FA_RT "Malloc of %zu bytes", bytes);
    return rt_fail(e, what);
  }
  *ptr = p; // both runtimes align to 256 bytes
  return FA_OK;
}

static fa_status mem_free(void *state, void *ptr) {
  fa_status s = use_device(state);
  if (s) return s;
  CK(fa_rt_free(ptr), FA_RT "Free");
  return FA_OK;
}

/* fa_copy_to_device / fa_copy_to_host: synchronous, on the context's
   stream. */
static fa_status copy_sync(void *state, void *dst, const void *src,
                           size_t bytes, int to_device) {
  gpu_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(fa_rt_memcpy_async(dst, src, bytes, to_device ? FA_RT_H2D : FA_RT_D2H,
                        st->stream),
     to_device ? FA_RT "MemcpyAsync (host to device)"
               : FA_RT "MemcpyAsync (device to host)");
  CK(fa_rt_stream_synchronize(st->stream), FA_RT "StreamSynchronize (copy)");
  return FA_OK;
}

static fa_status copy_to_device(void *state, void *dst, const void *src,
                                size_t bytes) {
  return copy_sync(state, dst, src, bytes, 1);
}

static fa_status copy_to_host(void *state, void *dst, const void *src,
                              size_t bytes) {
  return copy_sync(state, dst, src, bytes, 0);
}

static fa_status synchronize(void *state) {
  gpu_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  CK(fa_rt_stream_synchronize(st->stream), FA_RT "StreamSynchronize");
  return FA_OK;
}

/* ---- forward and backward of the generic kernels
 * ------------------------------ */

/* Launch a forward kernel fn with the plan's scratch, then the split-KV
   combine. */
static fa_status run_forward(gpu_state *st, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a,
                             fa_gpu_launch_fn fn, const char *name) {
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_params q;
  fa_gpu_fill_forward(&q, p, plan, a);
  void *ws;
  if ((s = plan_scratch(st, plan, &ws))) return s;
  if (q.plan.num_splits > 1) fa_gpu_place_split(&q, ws);
  if ((s = launched(fn(&q, st->stream), name))) return s;
  if (q.plan.num_splits > 1)
    return launched(FA_GPU_LAUNCHER(combine)(&q, st->stream),
                    "the split-KV combine");
  return FA_OK;
}

static fa_status fwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_fwd_args *a) {
  return run_forward(state, p, plan, a, FA_GPU_LAUNCHER(fwd_generic),
                     FA_GPU_BACKEND_NAME ".generic");
}

static fa_status bwd_generic(void *state, const fa_problem *p,
                             const fa_plan_data *plan, const fa_bwd_args *a) {
  static const fa_gpu_bwd_launchers generic_bwd = {
      FA_GPU_LAUNCHER(bwd_delta), FA_GPU_LAUNCHER(bwd_dq),
      FA_GPU_LAUNCHER(bwd_dkdv), FA_GPU_LAUNCHER(bwd_zero_paged)};
  gpu_state *st = state;
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

/* The generic kernels' plan: the core's vocabulary on the module's planner
   inputs; scratch: the split partials (forward) or D (backward). */
static fa_status plan_generic_kernel(const fa_kernel_query *q,
                                     const fa_caps *caps, fa_plan_data *d,
                                     const char *name) {
  const fa_problem *p = q->problem;
  fa_plan_compute(p, caps, d);
  fa_status s;
  if (is_backward(q)) {
    d->workspace_bytes =
        (size_t)p->a.batch * p->a.heads_q * p->a.seqlen_q * sizeof(float);
    const fa_flat_problem f = fa_problem_flat(p);
    s = fa_gpu_generic_bwd_fits(core, &f, name);
  } else {
    d->workspace_bytes = fa_gpu_split_bytes_of(p, d);
    s = fa_gpu_grid_fits(core, d->num_work, name);
  }
  if (!s) s = plan_reserve(q, d->workspace_bytes);
  if (!s) log_plan(name, d);
  return s;
}

/* ---- fa_merge_states
 * ---------------------------------------------------------- */

static fa_status merge_states(void *state, int n, const fa_tensor *o_parts,
                              const float *const *lse_parts, int batch,
                              int seqlen, int heads, int head_dim, fa_tensor o,
                              float *lse) {
  gpu_state *st = state;
  fa_status s = use_device(st);
  if (s) return s;
  fa_gpu_merge_part *desc;
  if ((s = fa_gpu_merge_parts(core, FA_GPU_BACKEND_NAME, n, o_parts, lse_parts,
                              head_dim, &desc)))
    return s;
  size_t bytes = sizeof *desc * (size_t)n;
  void *ws = NULL;
  s = workspace(st, bytes, &ws);
  if (!s) {
    fa_rt_error e = fa_rt_memcpy_async(ws, desc, bytes, FA_RT_H2D, st->stream);
    // desc is freed right after: wait for the copy unless the runtime
    // staged it already.
    if (e == FA_RT_SUCCESS && !FA_RT_PAGEABLE_COPY_STAGED)
      e = fa_rt_stream_synchronize(st->stream);
    if (e != FA_RT_SUCCESS) s = rt_fail(e, FA_RT "MemcpyAsync (merge parts)");
  }
  free(desc);
  if (s) return s;
  return launched(FA_GPU_LAUNCHER(merge)(n, ws, (int)o.dtype, batch, seqlen,
                                         heads, head_dim, fa_tensor_view_of(&o),
                                         lse, st->stream),
                  "the merge kernel");
}

/* ---- the module's backend and entry
 * ------------------------------------------ */

/* This module's fa_backend over its kernels[] (defined before) and its one
   exported symbol, fa_module_backends (FA_MODULE_ENTRY). The module
   defines probe() and ctx_create(); the rest is above. */
#define FA_GPU_MODULE(kind_, memory_space_)                                    \
  static const fa_backend module_backend = {                                   \
      .api_version = FA_BACKEND_API_VERSION,                                   \
      .name = FA_GPU_BACKEND_NAME,                                             \
      .kind = (kind_),                                                         \
      .rank = 100,                                                             \
      .memory_space = (memory_space_),                                         \
      .probe = probe,                                                          \
      .context_create = ctx_create,                                            \
      .context_destroy = ctx_destroy,                                          \
      .set_threads = NULL,                                                     \
      .set_stream = set_stream,                                                \
      .mem_alloc = mem_alloc,                                                  \
      .mem_free = mem_free,                                                    \
      .copy_to_device = copy_to_device,                                        \
      .copy_to_host = copy_to_host,                                            \
      .synchronize = synchronize,                                              \
      .merge_states = merge_states,                                            \
      .kernels = kernels,                                                      \
      .num_kernels = (int)(sizeof kernels / sizeof kernels[0]),                \
  };                                                                           \
  static const fa_backend *const module_backends[] = {&module_backend};        \
  __attribute__((visibility("default"))) const fa_backend *const *             \
  fa_module_backends(const fa_core_services *services, int *count) {           \
    if (!services || !count ||                                                 \
        services->api_version != FA_BACKEND_API_VERSION)                       \
      return NULL;                                                             \
    core = services;                                                           \
    *count = 1;                                                                \
    return module_backends;                                                    \
  }

#endif
