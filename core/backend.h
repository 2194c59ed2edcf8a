// SPDX-License-Identifier: MIT
// The dispatch table: what a backend is to the core. A backend is a table of
// function pointers with its kernels listed best first; the registry ranks
// backends, probes them once and, per problem, takes the first kernel whose
// supports() says yes -- and says why every other one was skipped.
#ifndef FA_CORE_BACKEND_H
#define FA_CORE_BACKEND_H

#include <stddef.h>

#include "flashattn.h"
#include "plan.h"
#include "problem.h"

#define FA_BACKEND_API_VERSION 1

/* Memory spaces: backends that share one can run each other's problems. */
#define FA_MEMORY_HOST 0

typedef struct fa_fwd_args {
  fa_tensor q, k, v, o;
  float *lse; // may be NULL
} fa_fwd_args;

typedef struct fa_bwd_args {
  fa_tensor q, k, v, o, d_o;
  const float *lse;
  fa_tensor dq, dk, dv;
} fa_bwd_args;

typedef struct fa_kernel {
  const char *name; // "cpu.scalar", "cuda.sm90.bf16.d128": logs, benches
  // 1 if this kernel runs p; else 0 and a reason in why ("head_dim 600 >
  // 512"). Must not read the problem's arrays.
  int (*supports)(const fa_problem *p, char *why, size_t why_len);
  // Forward with the plan the core computed from this backend's caps.
  fa_status (*forward)(void *state, const fa_problem *p,
                       const fa_plan_data *plan, const fa_fwd_args *args);
  // Backward (optional: NULL = forward only).
  fa_status (*backward)(void *state, const fa_problem *p,
                        const fa_plan_data *plan, const fa_bwd_args *args);
} fa_kernel;

typedef struct fa_backend {
  int api_version;         // FA_BACKEND_API_VERSION
  const char *name;        // "cpu-scalar"
  fa_backend_kind kind;    // family, for fa_context_create(kind)
  int rank;                // larger is preferred by AUTO
  int memory_space;        // FA_MEMORY_HOST or a GPU module's own id
  // 1 if usable on this machine; else 0 and why. Called once, then cached.
  int (*probe)(char *why, size_t why_len);
  // Per-context state (threads, stream, scratch).
  fa_status (*context_create)(int device, void **state);
  void (*context_destroy)(void *state);
  // Hardware description for the planner; state may be NULL (fa_explain).
  void (*capabilities)(void *state, fa_caps *caps);
  fa_status (*set_threads)(void *state, int n);       // (optional)
  fa_status (*set_stream)(void *state, void *stream); // (optional)
  fa_status (*mem_alloc)(void *state, size_t bytes, void **ptr);
  fa_status (*mem_free)(void *state, void *ptr);
  fa_status (*copy_to_device)(void *state, void *dst, const void *src,
                              size_t bytes);
  fa_status (*copy_to_host)(void *state, void *dst, const void *src,
                            size_t bytes);
  fa_status (*synchronize)(void *state);
  // The merge lemma over n parts, arguments already validated.
  fa_status (*merge_states)(void *state, int n, const fa_tensor *o_parts,
                            const float *const *lse_parts, int batch,
                            int seqlen, int heads, int head_dim, fa_tensor o,
                            float *lse);
  const fa_kernel *kernels; // best first
  int num_kernels;
} fa_backend;

/* Host implementations shared by every backend whose memory is host memory. */
fa_status fa_host_mem_alloc(void *state, size_t bytes, void **ptr);
fa_status fa_host_mem_free(void *state, void *ptr);
fa_status fa_host_copy(void *state, void *dst, const void *src, size_t bytes);
fa_status fa_host_synchronize(void *state);
fa_status fa_host_merge_states(void *state, int n, const fa_tensor *o_parts,
                               const float *const *lse_parts, int batch,
                               int seqlen, int heads, int head_dim,
                               fa_tensor o, float *lse);

/* ---- loadable modules (GPU backends) --------------------------------------
   A module is a shared library (libflashattn-cuda.so, ...) that the core
   dlopens at first use, so one build of the core runs on machines without a
   GPU runtime. It exports FA_MODULE_ENTRY; the core hands it the services
   below (its thread-local error, its log) and receives its backends. */
typedef struct fa_core_services {
  int api_version; // FA_BACKEND_API_VERSION
  fa_status (*fail)(fa_status s, const char *fmt, ...);
  void (*log)(const char *fmt, ...);
  int (*log_enabled)(void);
} fa_core_services;

typedef const fa_backend *const *(*fa_module_entry_fn)(
    const fa_core_services *core, int *count);
#define FA_MODULE_ENTRY "fa_module_backends"

/* Backends compiled into this library (defined by each backend). */
#ifdef FA_HAVE_CPU
extern const fa_backend fa_backend_cpu_scalar;
#endif
#ifdef FA_HAVE_CPU_AVX2
extern const fa_backend fa_backend_cpu_avx2;
#endif
#ifdef FA_HAVE_CPU_AVX512
extern const fa_backend fa_backend_cpu_avx512;
#endif
#ifdef FA_HAVE_CPU_NEON
extern const fa_backend fa_backend_cpu_neon;
#endif

#endif
