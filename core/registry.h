// SPDX-License-Identifier: MIT
// The backend registry and per-problem dispatch. The registry is built once
// (thread-safely) on first use: every compiled-in backend is probed and the
// list is sorted best first.
#ifndef FA_CORE_REGISTRY_H
#define FA_CORE_REGISTRY_H

#include "backend.h"
#include "error.h"

#define FA_MAX_BACKENDS 16

typedef struct fa_registry_entry {
  const fa_backend *backend;
  int usable;    // probe said yes
  char why[192]; // probe's reason when not usable
} fa_registry_entry;

/* All compiled-in backends, best ranked first. */
int fa_registry_size(void);
const fa_registry_entry *fa_registry_at(int i);
/* What a name binds a context to: registry entry idx, restricted to its
   kernels from first_kernel on (a backend: 0; an alias: fa_backend_alias)
   or to exactly one kernel. */
typedef struct fa_binding {
  int idx; // -1: nothing bound
  int first_kernel;
  const fa_kernel *kernel; // NULL: every kernel from first_kernel
} fa_binding;

/* Resolve a backend, alias or kernel name (from source, for messages) to a
   usable binding; else FA_ERR_NO_DEVICE saying why, or for a name not
   known here, listing the names that are. */
fa_status fa_registry_bind(const char *name, const char *source, fa_binding *b);
/* "auto", "cpu", "cuda", "hip": a backend kind's runtime name. */
const char *fa_backend_kind_name(fa_backend_kind k);

/* FA_LOG contains "dispatch": print every dispatch decision to stderr. */
int fa_log_dispatch(void);
void fa_log(const char *fmt, ...) FA_PRINTF(1, 2);

/* The backends a context of this kind uses (registry indices, best first),
   honouring FA_BACKEND. On failure returns a status with the error
   recorded. forced->idx >= 0 when FA_BACKEND named what to bind. */
fa_status fa_select_backends(fa_backend_kind kind, int device, int *idx, int *n,
                             fa_binding *forced);

struct fa_context {
  int device;
  int checked;                  // checked mode (fa_context_set_checked)
  int forced;                   // bound to exactly one backend
  int n;                        // backends in this memory space
  int idx[FA_MAX_BACKENDS];     // registry indices, best first
  void *state[FA_MAX_BACKENDS]; // each backend's per-context state
  const fa_kernel *only_kernel; // bound to one kernel by name (triage)
  int first_kernel; // bound by an alias (n == 1): its kernels from here on
};

/* One-line description of a problem for logs. */
size_t fa_problem_describe(const fa_problem *p, char *buf, size_t len);

/* Whether kernel k accepts query q for op (with the context's binding to
   one kernel, `only`, and the backward entry checked first). */
int fa_kernel_accepts(const fa_kernel *k, const fa_kernel_query *q, fa_op op,
                      const fa_kernel *only, char *why, size_t len);

/* Choose the (backend, kernel) of ctx for p on layout: the first backend
   with an accepting kernel, and in it the best score. Logs each candidate
   when FA_LOG=dispatch. FA_ERR_UNSUPPORTED with every reason when none
   accepts. */
fa_status fa_dispatch(const fa_context *ctx, const fa_problem *p,
                      const fa_layout *layout, int *slot,
                      const fa_kernel **kernel);

/* For tests (internal, through the static library): the kernel whose
   forward or backward entry this thread's last plan run (fa_forward,
   fa_backward, fa_plan_forward, fa_plan_backward) called; NULL when that
   call failed before reaching a kernel. Compare with the kernel that
   fa_plan_describe names. */
const fa_kernel *fa_last_kernel_run(void);

/* Every kernel compiled in: the kernels of registry entry i are
   fa_registry_at(i)->backend->kernels[0 .. num_kernels) (a placeholder
   entry for a module that did not load has none). */

#endif
