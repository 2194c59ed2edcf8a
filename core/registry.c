// SPDX-License-Identifier: MIT
#define _GNU_SOURCE 1 // dladdr
#include "registry.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

static const fa_backend *const compiled_in[] = {
#ifdef FA_HAVE_CPU_AVX512
    &fa_backend_cpu_avx512,
#endif
#ifdef FA_HAVE_CPU_AVX2
    &fa_backend_cpu_avx2,
#endif
#ifdef FA_HAVE_CPU_NEON
    &fa_backend_cpu_neon,
#endif
#ifdef FA_HAVE_CPU
    &fa_backend_cpu_scalar,
#endif
    NULL};

static fa_registry_entry entries[FA_MAX_BACKENDS];
static int num_entries;
static int log_dispatch;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static void add_backend(const fa_backend *b) {
  if (num_entries >= FA_MAX_BACKENDS) return;
  fa_registry_entry *e = &entries[num_entries++];
  e->backend = b;
  if (b->api_version != FA_BACKEND_API_VERSION) {
    snprintf(e->why, sizeof e->why, "backend API version %d, core expects %d",
             b->api_version, FA_BACKEND_API_VERSION);
    return;
  }
  e->usable = b->probe(e->why, sizeof e->why);
}

static int log_enabled(void) { return log_dispatch; }

static const fa_core_services core_services = {
    FA_BACKEND_API_VERSION, fa_fail, fa_log, log_enabled};

/* A module that is built but cannot load still appears in fa_explain and
   dispatch logs, as a placeholder entry saying why. */
typedef struct module_slot {
  const char *file;     // "libflashattn-cuda.so"
  fa_backend placeholder; // name/kind/rank for the "unavailable" line
} module_slot;

static module_slot modules[] = {
#ifdef FA_HAVE_CUDA_MODULE
    {"libflashattn-cuda.so", {.name = "cuda", .kind = FA_BACKEND_CUDA, .rank = 100}},
#endif
#ifdef FA_HAVE_HIP_MODULE
    {"libflashattn-hip.so", {.name = "hip", .kind = FA_BACKEND_HIP, .rank = 100}},
#endif
    {NULL, {0}}};

/* Look beside libflashattn first (installed or build tree), then in
   FLASHATTN_MODULE_PATH, then the loader's default search path. */
static void *open_module(const char *file, char *why, size_t len) {
  char path[4096];
  const char *dirs[2] = {NULL, getenv("FLASHATTN_MODULE_PATH")};
  Dl_info self;
  char here[4096] = "";
  if (dladdr((void *)&fa_registry_size, &self) && self.dli_fname) {
    snprintf(here, sizeof here, "%s", self.dli_fname);
    char *slash = strrchr(here, '/');
    if (slash) *slash = '\0'; else here[0] = '\0';
    dirs[0] = here;
  }
  for (int i = 0; i < 2; i++) {
    if (!dirs[i] || !*dirs[i]) continue;
    snprintf(path, sizeof path, "%s/%s", dirs[i], file);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) snprintf(why, len, "module %s not loaded: %s", file, dlerror());
  return h;
}

static void load_modules(void) {
  for (module_slot *m = modules; m->file; m++) {
    char why[192] = "";
    void *h = open_module(m->file, why, sizeof why);
    fa_module_entry_fn entry =
        h ? (fa_module_entry_fn)dlsym(h, FA_MODULE_ENTRY) : NULL;
    int count = 0;
    const fa_backend *const *list = entry ? entry(&core_services, &count) : NULL;
    if (h && !entry)
      snprintf(why, sizeof why, "module %s lacks %s", m->file, FA_MODULE_ENTRY);
    else if (entry && !list)
      snprintf(why, sizeof why, "module %s refused to start", m->file);
    if (!list) {
      if (num_entries >= FA_MAX_BACKENDS) continue;
      fa_registry_entry *e = &entries[num_entries++];
      e->backend = &m->placeholder;
      e->usable = 0;
      snprintf(e->why, sizeof e->why, "%s", why);
      continue; // (a module that failed stays loaded: harmless, and safe)
    }
    for (int i = 0; i < count; i++) add_backend(list[i]);
  }
}

static void registry_init(void) {
  const char *env = getenv("FA_LOG");
  log_dispatch = env && strstr(env, "dispatch") != NULL;
  for (int i = 0; compiled_in[i]; i++) add_backend(compiled_in[i]);
  load_modules();
  // Best first: insertion sort by rank (a handful of entries).
  for (int i = 1; i < num_entries; i++)
    for (int j = i; j > 0 && entries[j].backend->rank >
                                  entries[j - 1].backend->rank; j--) {
      fa_registry_entry t = entries[j];
      entries[j] = entries[j - 1];
      entries[j - 1] = t;
    }
  if (log_dispatch)
    for (int i = 0; i < num_entries; i++)
      fa_log("backend %s (rank %d): %s%s", entries[i].backend->name,
             entries[i].backend->rank,
             entries[i].usable ? "available" : "unavailable: ",
             entries[i].usable ? "" : entries[i].why);
}

static void ensure_init(void) { pthread_once(&registry_once, registry_init); }

int fa_registry_size(void) {
  ensure_init();
  return num_entries;
}

const fa_registry_entry *fa_registry_at(int i) {
  ensure_init();
  return i >= 0 && i < num_entries ? &entries[i] : NULL;
}

int fa_registry_find(const char *name) {
  ensure_init();
  for (int i = 0; i < num_entries; i++)
    if (strcmp(entries[i].backend->name, name) == 0) return i;
  return -1;
}

int fa_log_dispatch(void) {
  ensure_init();
  return log_dispatch;
}

void fa_log(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "flashattn: dispatch: %s\n", line);
}

static const char *kind_name(fa_backend_kind k) {
  switch (k) {
  case FA_BACKEND_AUTO: return "auto";
  case FA_BACKEND_CPU: return "cpu";
  case FA_BACKEND_CUDA: return "cuda";
  case FA_BACKEND_HIP: return "hip";
  }
  return "?";
}

int fa_backend_count(void) {
  int n = 0;
  for (int i = 0; i < fa_registry_size(); i++) n += entries[i].usable;
  return n;
}

const char *fa_backend_name(int i) {
  for (int j = 0; j < fa_registry_size(); j++)
    if (entries[j].usable && i-- == 0) return entries[j].backend->name;
  return NULL;
}

static fa_status select_forced(const char *name, const char *source, int *idx,
                               int *n) {
  int i = fa_registry_find(name);
  if (i < 0) {
    char known[512] = "";
    for (int j = 0; j < num_entries; j++) {
      strncat(known, j ? ", " : "", sizeof known - strlen(known) - 1);
      strncat(known, entries[j].backend->name, sizeof known - strlen(known) - 1);
    }
    return fa_fail(FA_ERR_NO_DEVICE,
                   "%s names backend \"%s\", which is not compiled in "
                   "(compiled in: %s)",
                   source, name, known[0] ? known : "none");
  }
  if (!entries[i].usable)
    return fa_fail(FA_ERR_NO_DEVICE, "%s names backend \"%s\": %s", source,
                   name, entries[i].why);
  idx[0] = i;
  *n = 1;
  if (log_dispatch) fa_log("%s forces backend %s", source, name);
  return FA_OK;
}

fa_status fa_select_backends(fa_backend_kind kind, int device, int *idx,
                             int *n, int *forced) {
  ensure_init();
  *n = 0;
  *forced = 0;
  if (kind != FA_BACKEND_AUTO && kind != FA_BACKEND_CPU &&
      kind != FA_BACKEND_CUDA && kind != FA_BACKEND_HIP)
    return fa_fail(FA_ERR_INVALID_ARGUMENT,
                   "kind=%d is not a fa_backend_kind", (int)kind);
  if (device < 0)
    return fa_fail(FA_ERR_INVALID_ARGUMENT, "device=%d must be >= 0", device);

  const char *env = getenv("FLASHATTN_BACKEND");
  if (env && *env) {
    int i = fa_registry_find(env);
    if (kind == FA_BACKEND_AUTO || i < 0 || entries[i].backend->kind == kind) {
      *forced = 1;
      return select_forced(env, "FLASHATTN_BACKEND", idx, n);
    }
    if (log_dispatch)
      fa_log("FLASHATTN_BACKEND=%s ignored: the context asks for kind %s",
             env, kind_name(kind));
  }

  // The best usable backend of the kind fixes the memory space; every
  // usable backend of that space joins, best first.
  int best = -1;
  for (int i = 0; i < num_entries && best < 0; i++)
    if (entries[i].usable &&
        (kind == FA_BACKEND_AUTO || entries[i].backend->kind == kind))
      best = i;
  if (best < 0) {
    char why[768] = "";
    for (int i = 0; i < num_entries; i++) {
      if (kind != FA_BACKEND_AUTO && entries[i].backend->kind != kind) continue;
      size_t l = strlen(why);
      snprintf(why + l, sizeof why - l, "%s%s: %s", l ? "; " : "",
               entries[i].backend->name, entries[i].why);
    }
    return fa_fail(FA_ERR_NO_DEVICE, "no usable %s backend%s%s",
                   kind_name(kind), why[0] ? ": " : " is compiled in",
                   why[0] ? why : "");
  }
  int space = entries[best].backend->memory_space;
  if (space == FA_MEMORY_HOST && device != 0)
    return fa_fail(FA_ERR_NO_DEVICE,
                   "device=%d: CPU backends have only device 0", device);
  for (int i = 0; i < num_entries && *n < FA_MAX_BACKENDS; i++)
    if (entries[i].usable && entries[i].backend->memory_space == space &&
        (kind == FA_BACKEND_AUTO || entries[i].backend->kind == kind))
      idx[(*n)++] = i;
  return FA_OK;
}

size_t fa_problem_describe(const fa_problem *p, char *buf, size_t len) {
  const fa_attention *a = &p->a;
  int n = snprintf(
      buf, len,
      "%s b=%d sq=%d sk=%d hq=%d hkv=%d d=%d dv=%d causal=%d window=%d,%d "
      "softcap=%g alibi=%d sinks=%d varlen=%d seqused_k=%d paged=%d",
      fa_dtype_name(p->dtype), a->batch, a->seqlen_q, a->seqlen_k, a->heads_q,
      a->heads_kv, a->head_dim, a->head_dim_v, a->causal, a->window_left,
      a->window_right, (double)a->softcap, a->alibi_slopes != NULL,
      a->sinks != NULL, p->varlen_q || p->varlen_k, a->seqused_k != NULL,
      p->paged);
  return n < 0 ? 0 : (size_t)n;
}

fa_status fa_dispatch(const fa_context *ctx, const fa_problem *p,
                      int need_backward, int *slot, const fa_kernel **kernel) {
  int log = fa_log_dispatch();
  char desc[384], why[192], all[1024] = "";
  if (log) {
    fa_problem_describe(p, desc, sizeof desc);
    fa_log("%s %s", need_backward ? "backward" : "forward", desc);
  }
  for (int s = 0; s < ctx->n; s++) {
    const fa_backend *b = entries[ctx->idx[s]].backend;
    for (int k = 0; k < b->num_kernels; k++) {
      const fa_kernel *kr = &b->kernels[k];
      int ok;
      if (ctx->only_kernel && kr != ctx->only_kernel) {
        snprintf(why, sizeof why, "the context is bound to kernel %s",
                 ctx->only_kernel->name);
        ok = 0;
      } else if (need_backward && !kr->backward) {
        snprintf(why, sizeof why, "no backward kernel");
        ok = 0;
      } else {
        why[0] = '\0';
        ok = kr->supports(p, why, sizeof why);
      }
      if (ok) {
        if (log) fa_log("  %s %s: taken", b->name, kr->name);
        *slot = s;
        *kernel = kr;
        return FA_OK;
      }
      if (log) fa_log("  %s %s: skipped: %s", b->name, kr->name, why);
      size_t l = strlen(all);
      snprintf(all + l, sizeof all - l, "%s%s %s: %s", l ? "; " : "", b->name,
               kr->name, why);
    }
  }
  return fa_fail(FA_ERR_UNSUPPORTED,
                 "no backend of this context supports the problem: %s", all);
}
