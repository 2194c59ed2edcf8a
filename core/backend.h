// SPDX-License-Identifier: MIT
// The kernel contract: what a backend and its kernels are to the core.
//
// A backend is a runtime (host threads, a CUDA or HIP device): memory,
// streams, per-context state, and a table of kernels. A kernel owns its
// admission and its plan: supports() sees the problem, the context's device
// (through the backend state) and the layout of the tensors the plan is
// made for, and may decline with a reason; score() states a preference
// among the kernels that accept; plan() fills the tiling from the kernel's
// own tile table (the core's fa_plan_compute and the work-item helpers are
// vocabulary it may call). Dispatch decides once, when a plan is made;
// after that nothing falls back: a kernel must run every call whose tensors
// match the layout it accepted (the core checks that match before calling).
#ifndef FA_CORE_BACKEND_H
#define FA_CORE_BACKEND_H

#include <stddef.h>

#include "flashattn.h"
#include "plan.h"
#include "problem.h"

#define FA_BACKEND_API_VERSION 3

/* Memory spaces: backends that share one can run each other's problems. */
#define FA_MEMORY_HOST 0

/* Which operation a plan is for. */
typedef enum fa_op { FA_OP_FORWARD = 0, FA_OP_BACKWARD = 1 } fa_op;

/* The layout of the tensors a plan is made for. Dtypes and strides are
   exact (a call must match them); align is the alignment class: the largest
   power of two, at most FA_LAYOUT_MAX_ALIGN, dividing every tensor's data
   address and every stride in bytes (a call's tensors must be at least as
   aligned). The data pointers are a sample: kernels may read them to
   decide (e.g. whether a copy engine can address the tensors) but must not
   keep them; calls bring their own. Backward layouts fill d_o, dq, dk, dv
   too; forward ones leave them zeroed. */
#define FA_LAYOUT_MAX_ALIGN 256
typedef struct fa_layout {
  fa_op op;
  fa_tensor q, k, v, o;
  fa_tensor d_o, dq, dk, dv; // backward only
  int align;                 // bytes, power of two, 1..FA_LAYOUT_MAX_ALIGN
} fa_layout;

/* Everything a kernel's admission, preference and plan may look at. */
typedef struct fa_kernel_query {
  const fa_problem *problem; // validated; its arrays are not to be read
  const fa_layout *layout;   // the tensors' layout (NULL: fa_explain without
                             // tensors: judge the problem alone, assuming
                             // the best layout, i.e. contiguous BSHD)
  void *state;               // the backend's context state (the device);
                             // NULL in fa_explain: describe device 0
} fa_kernel_query;

typedef struct fa_fwd_args {
  fa_tensor q, k, v, o;
  float *lse; // may be NULL
} fa_fwd_args;

typedef struct fa_bwd_args {
  fa_tensor q, k, v, o, d_o;
  const float *lse;
  fa_tensor dq, dk, dv;
  float *dsinks; // the problem's dsinks (may be NULL)
} fa_bwd_args;

typedef struct fa_kernel {
  const char *name; // "<runtime>.<isa or arch>[.<dtype>][.d<N>]":
                    // "cpu.avx512.f32", "cuda.sm90.bf16.d128"; what logs,
                    // fa_explain, fa_plan_describe and binding by name use
  // 1 if this kernel runs q's problem on q's layout for q's op (forward or
  // backward: a kernel without a backward entry is never asked about
  // backward). Else 0 and the reason in why ("head_dim 600 > 512"); why may
  // be NULL with len 0 (dispatch does not format reasons unless it logs or
  // nothing fits), so write it with snprintf only.
  int (*supports)(const fa_kernel_query *q, char *why, size_t len);
  // Preference among the kernels of one backend that accept the problem
  // (larger wins; ties go to table order). Optional: NULL scores 0. Size
  // heuristics live here (few queries, kv splits, measured rates).
  int (*score)(const fa_kernel_query *q);
  // The tiling for an accepted problem: fills *plan (its workspace_bytes
  // included). Must not fail for a problem supports() accepted except for
  // the plan's own resource limits (then a status and a message).
  fa_status (*plan)(const fa_kernel_query *q, fa_plan_data *plan);
  // Run. The core has validated the call's tensors and index arrays (as far
  // as they are host-visible) and checked they match the planned layout.
  fa_status (*forward)(void *state, const fa_problem *p,
                       const fa_plan_data *plan, const fa_fwd_args *args);
  // Backward (optional: NULL = forward only).
  fa_status (*backward)(void *state, const fa_problem *p,
                        const fa_plan_data *plan, const fa_bwd_args *args);
} fa_kernel;

/* A further name a backend answers to when a context is bound by name (or
   by FA_BACKEND): the backend restricted to kernels[first_kernel ..] (the
   CPU's "cpu-<isa>": its kernels of that ISA and below). first_kernel < 0:
   a name known here that cannot run (a kernel of an ISA this CPU lacks),
   and why. */
typedef struct fa_backend_alias {
  const char *name;
  int first_kernel;
  const char *why;
} fa_backend_alias;

typedef struct fa_backend {
  int api_version;      // FA_BACKEND_API_VERSION
  const char *name;     // the runtime: "cpu", "cuda", "hip"
  fa_backend_kind kind; // family, for fa_context_create(kind)
  int rank;             // larger is preferred by AUTO
  int memory_space;     // FA_MEMORY_HOST or a GPU module's own id
  // 1 if usable on this machine; else 0 and why. Called once, then cached.
  int (*probe)(char *why, size_t why_len);
  // Per-context state (threads, stream, scratch) for device `device`;
  // FA_ERR_NO_DEVICE with a message when that device is absent.
  fa_status (*context_create)(int device, void **state);
  void (*context_destroy)(void *state);
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
  const fa_kernel *kernels; // table order breaks score ties
  int num_kernels;
  const fa_backend_alias *aliases; // (optional)
  int num_aliases;
} fa_backend;

/* Host implementations shared by every backend whose memory is host memory. */
fa_status fa_host_mem_alloc(void *state, size_t bytes, void **ptr);
fa_status fa_host_mem_free(void *state, void *ptr);
fa_status fa_host_copy(void *state, void *dst, const void *src, size_t bytes);
fa_status fa_host_synchronize(void *state);
fa_status fa_host_merge_states(void *state, int n, const fa_tensor *o_parts,
                               const float *const *lse_parts, int batch,
                               int seqlen, int heads, int head_dim, fa_tensor o,
                               float *lse);

/* ---- loadable modules (GPU backends) --------------------------------------
   A module is a shared library (libflashattn-cuda.so, ...) that the core
   dlopens at first use, so one build of the core runs on machines without a
   GPU runtime. It exports FA_MODULE_ENTRY; the core hands it the services
   below (its thread-local error, its log, its configuration) and receives
   its backends. */
typedef struct fa_core_services {
  int api_version; // FA_BACKEND_API_VERSION
  fa_status (*fail)(fa_status s, const char *fmt, ...);
  void (*log)(const char *fmt, ...);
  int (*log_enabled)(void);
  // The value of a switch of the configuration table (core/config.h), read
  // once at first use: a string (NULL if unset) or an integer (0 if unset).
  const char *(*config_string)(const char *name);
  long (*config_int)(const char *name);
} fa_core_services;

typedef const fa_backend *const *(*fa_module_entry_fn)(
    const fa_core_services *core, int *count);
#define FA_MODULE_ENTRY "fa_module_backends"

/* The CPU backend compiled into this library (backends/cpu: one, "cpu",
   over the kernels of every ISA the build has and this CPU runs): the
   core names no ISA. */
#ifdef FA_HAVE_CPU
const fa_backend *const *fa_cpu_backends(int *count);
#endif

#endif
