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
  int usable;     // probe said yes
  char why[192];  // probe's reason when not usable
} fa_registry_entry;

/* All compiled-in backends, best ranked first. */
int fa_registry_size(void);
const fa_registry_entry *fa_registry_at(int i);
/* Index of the backend called name, or -1. */
int fa_registry_find(const char *name);

/* FA_LOG contains "dispatch": print every dispatch decision to stderr. */
int fa_log_dispatch(void);
void fa_log(const char *fmt, ...) FA_PRINTF(1, 2);

/* The backends a context of this kind uses (registry indices, best first),
   honouring FLASHATTN_BACKEND. On failure returns a status with the error
   recorded. *forced is set when one backend was named. */
fa_status fa_select_backends(fa_backend_kind kind, int device, int *idx,
                             int *n, int *forced);

struct fa_context {
  int device;
  int forced;                       // bound to exactly one backend
  int n;                            // backends in this memory space
  int idx[FA_MAX_BACKENDS];         // registry indices, best first
  void *state[FA_MAX_BACKENDS];     // each backend's per-context state
  const fa_kernel *only_kernel;     // bound to one kernel by name (triage)
};

/* One-line description of a problem for logs. */
size_t fa_problem_describe(const fa_problem *p, char *buf, size_t len);

/* Pick the first (backend, kernel) of ctx that supports p (and has a
   backward when need_backward). Logs each candidate when FA_LOG=dispatch.
   FA_ERR_UNSUPPORTED with every reason when none does. */
fa_status fa_dispatch(const fa_context *ctx, const fa_problem *p,
                      int need_backward, int *slot, const fa_kernel **kernel);

#endif
