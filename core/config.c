// SPDX-License-Identifier: MIT
// The configuration table: every environment switch of the library, its
// old name (read for one release), what it does. Read once, at first use,
// under a pthread_once: later changes to the environment are not seen, and
// no call pays for getenv.
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"

typedef struct fa_switch {
  const char *name;  // FA_...
  const char *alias; // the 0.1 name, still read in 0.2 (NULL: none)
  const char *doc;
  const char *value; // as read (NULL: unset)
  const char *source;
} fa_switch;

static fa_switch table[] = {
    {"FA_BACKEND", "FLASHATTN_BACKEND",
     "bind every FA_BACKEND_AUTO context to one backend, cpu-<isa> or kernel "
     "(by name)",
     NULL, NULL},
    {"FA_MODULE_PATH", "FLASHATTN_MODULE_PATH",
     "directory searched for GPU modules after the library's own", NULL, NULL},
    {"FA_LOG", NULL,
     "comma-separated: dispatch (every dispatch decision), config (this "
     "table), to stderr",
     NULL, NULL},
    {"FA_CHECKED", NULL,
     "1: checked mode for every context (GPU: copy and validate index "
     "arrays and descales on every call)",
     NULL, NULL},
    {"FA_CPU_MAX_ISA", NULL,
     "cap the cpu backend's kernels at an ISA and below (scalar, avx2, "
     "avx512, neon: as the name cpu-<isa> does, for every context)",
     NULL, NULL},
    {"FA_CPU_BWD_DQ_BYTES", NULL,
     "most bytes of the CPU backward's fp32 partial dQ (default 256 MiB); "
     "0: recompute dQ in a third pass instead",
     NULL, NULL},
    {"FA_CPU_FP8_DPBF16", NULL,
     "0: the CPU's FP8 decode rows widen q and k to fp32 where vdpbf16ps "
     "would take q.k (to measure it, or to test the widened path)",
     NULL, NULL},
    {"FA_CUDA_DETERMINISTIC", NULL,
     "1: CUDA backward bit-reproducible (the tensor-core backwards add dQ "
     "in a fixed order; slower)",
     NULL, NULL},
    {"FA_SM90_SERIAL", NULL,
     "1: the sm90 forward's serial schedule (no ping-pong), to measure the "
     "overlap",
     NULL, NULL},
};
#define NUM_SWITCHES (sizeof table / sizeof table[0])

/* Names 0.1 read that are gone: binding a context to a kernel by name
   (fa_context_create_by_name) replaced them. Reported when logging. */
static const char *const removed[][2] = {
    {"FA_SM90_FORCE", "bind the sm90 kernel by name (cuda.sm90.<dtype>.d<N>)"},
    {"FA_SM90_BWD", "bind the sm80 kernel by name to avoid the sm90 backward"},
    {"FA_CUDA_GENERIC", "bind cuda.generic by name"},
    {"FA_CUDA_NO_SM90", "bind a cuda.sm80.* kernel by name"},
    {"FA_HIP_GENERIC", "bind hip.generic by name"},
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_table(void) {
  for (size_t i = 0; i < NUM_SWITCHES; i++) {
    fa_switch *w = &table[i];
    const char *v = getenv(w->name);
    if (v && *v) {
      w->value = v;
      w->source = w->name;
    } else if (w->alias && (v = getenv(w->alias)) && *v) {
      w->value = v;
      w->source = w->alias;
    }
  }
}

static fa_switch *find(const char *name) {
  pthread_once(&once, read_table);
  for (size_t i = 0; i < NUM_SWITCHES; i++)
    if (strcmp(table[i].name, name) == 0) return &table[i];
  return NULL;
}

const char *fa_config_string(const char *name) {
  fa_switch *w = name ? find(name) : NULL;
  return w ? w->value : NULL;
}

const char *fa_config_source(const char *name) {
  fa_switch *w = name ? find(name) : NULL;
  return w && w->value ? w->source : NULL;
}

long fa_config_int(const char *name) {
  const char *v = fa_config_string(name);
  if (!v) return 0;
  char *end;
  long x = strtol(v, &end, 10);
  return end != v && *end == '\0' ? x : 1;
}

size_t fa_config_describe(char *buf, size_t len) {
  pthread_once(&once, read_table);
  size_t used = 0;
  for (size_t i = 0; i < NUM_SWITCHES; i++) {
    const fa_switch *w = &table[i];
    size_t room = used < len ? len - used : 0;
    int n = snprintf(room ? buf + used : NULL, room, "%s=%s%s%s%s  # %s\n",
                     w->name, w->value ? w->value : "(unset)",
                     w->value && w->source != w->name ? " (from " : "",
                     w->value && w->source != w->name ? w->source : "",
                     w->value && w->source != w->name ? ")" : "", w->doc);
    if (n > 0) used += (size_t)n;
  }
  for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
    if (!getenv(removed[i][0])) continue;
    size_t room = used < len ? len - used : 0;
    int n = snprintf(room ? buf + used : NULL, room,
                     "%s is set but no longer read: %s\n", removed[i][0],
                     removed[i][1]);
    if (n > 0) used += (size_t)n;
  }
  return used;
}
