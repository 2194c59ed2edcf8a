// SPDX-License-Identifier: MIT
#define _GNU_SOURCE 1 // dladdr
#include "registry.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dtype.h"

static fa_registry_entry entries[FA_MAX_BACKENDS];
static int num_entries;
static int log_dispatch;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static void add_backend(const fa_backend *b) {
  if (num_entries >= FA_MAX_BACKENDS) return;
  fa_registry_entry *e = &entries[num_entries++];
  e->backend = b;
  if (b->api_version != FA_BACKEND_API_VERSION) {
    (void)snprintf(e->why, sizeof e->why,
                   "backend API version %d, core expects %d", b->api_version,
                   FA_BACKEND_API_VERSION);
    return;
  }
  e->usable = b->probe(e->why, sizeof e->why);
}

static int log_enabled(void) { return log_dispatch; }

static const fa_core_services core_services = {
    FA_BACKEND_API_VERSION, fa_fail,      fa_log, log_enabled,
    fa_config_string,       fa_config_int};

/* A module that is built but cannot load still appears in fa_explain and
   dispatch logs, as a placeholder entry saying why. */
typedef struct module_slot {
  const char *file;       // "libflashattn-cuda.so"
  fa_backend placeholder; // name/kind/rank for the "unavailable" line
} module_slot;

static module_slot modules[] = {
#ifdef FA_HAVE_CUDA_MODULE
    {"libflashattn-cuda.so",
     {.name = "cuda", .kind = FA_BACKEND_CUDA, .rank = 100}},
#endif
#ifdef FA_HAVE_HIP_MODULE
    {"libflashattn-hip.so",
     {.name = "hip", .kind = FA_BACKEND_HIP, .rank = 100}},
#endif
    {NULL, {0}}};

/* Look beside libflashattn first (installed or build tree), then in
   FLASHATTN_MODULE_PATH, then the loader's default search path. */
static void *open_module(const char *file, char *why, size_t len) {
  char path[4096];
  const char *dirs[2] = {NULL, fa_config_string("FA_MODULE_PATH")};
  Dl_info self;
  char here[4096] = "";
  if (dladdr((void *)&fa_registry_size, &self) && self.dli_fname) {
    (void)snprintf(here, sizeof here, "%s", self.dli_fname);
    char *slash = strrchr(here, '/');
    if (slash)
      *slash = '\0';
    else
      here[0] = '\0';
    dirs[0] = here;
  }
  for (int i = 0; i < 2; i++) {
    if (!dirs[i] || !*dirs[i]) continue;
    (void)snprintf(path, sizeof path, "%s/%s", dirs[i], file);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) (void)snprintf(why, len, "module %s not loaded: %s", file, dlerror());
  return h;
}

static void load_modules(void) {
  for (module_slot *m = modules; m->file; m++) {
    char why[192] = "";
    void *h = open_module(m->file, why, sizeof why);
    fa_module_entry_fn entry =
        h ? (fa_module_entry_fn)dlsym(h, FA_MODULE_ENTRY) : NULL;
    int count = 0;
    const fa_backend *const *list =
        entry ? entry(&core_services, &count) : NULL;
    if (h && !entry)
      (void)snprintf(why, sizeof why, "module %s lacks %s", m->file,
                     FA_MODULE_ENTRY);
    else if (entry && !list)
      (void)snprintf(why, sizeof why, "module %s refused to start", m->file);
    if (!list) {
      if (num_entries >= FA_MAX_BACKENDS) continue;
      fa_registry_entry *e = &entries[num_entries++];
      e->backend = &m->placeholder;
      e->usable = 0;
      (void)snprintf(e->why, sizeof e->why, "%s", why);
      continue; // (a module that failed stays loaded: harmless, and safe)
    }
    for (int i = 0; i < count; i++) add_backend(list[i]);
  }
}

static void registry_init(void) {
  const char *env = fa_config_string("FA_LOG");
  log_dispatch = env && strstr(env, "dispatch") != NULL;
  if (env && (log_dispatch || strstr(env, "config"))) {
    char text[4096];
    fa_config_describe(text, sizeof text);
    (void)fprintf(stderr, "flashattn: configuration (read once):\n%s", text);
  }
#ifdef FA_HAVE_CPU
  int n_cpu = 0;
  const fa_backend *const *cpu = fa_cpu_backends(&n_cpu);
  for (int i = 0; i < n_cpu; i++) add_backend(cpu[i]);
#endif
  load_modules();
  // Best first: insertion sort by rank (a handful of entries).
  for (int i = 1; i < num_entries; i++)
    for (int j = i;
         j > 0 && entries[j].backend->rank > entries[j - 1].backend->rank;
         j--) {
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

int fa_log_dispatch(void) {
  ensure_init();
  return log_dispatch;
}

void fa_log(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  (void)fprintf(stderr, "flashattn: dispatch: %s\n", line);
}

const char *fa_backend_kind_name(fa_backend_kind k) {
  switch (k) {
  case FA_BACKEND_AUTO:
    return "auto";
  case FA_BACKEND_CPU:
    return "cpu";
  case FA_BACKEND_CUDA:
    return "cuda";
  case FA_BACKEND_HIP:
    return "hip";
  }
  return "?";
}

int fa_backend_count(void) {
  int n = 0;
  for (int i = 0; i < fa_registry_size(); i++) n += entries[i].usable;
  return n;
}

const char *fa_backend_name(int i) {
  if (i < 0) return NULL; // (and no i-- past INT_MIN)
  for (int j = 0; j < fa_registry_size(); j++)
    if (entries[j].usable && i-- == 0) return entries[j].backend->name;
  return NULL;
}

/* The entry and binding a name means, usable or not (-1: no such name). */
static int lookup(const char *name, fa_binding *b, const char **why) {
  *b = (fa_binding){-1, 0, NULL};
  for (int i = 0; i < num_entries && b->idx < 0; i++) {
    const fa_backend *be = entries[i].backend;
    *why = entries[i].why;
    if (strcmp(be->name, name) == 0) b->idx = i;
    const int aliases = be->api_version == FA_BACKEND_API_VERSION;
    for (int k = 0; aliases && k < be->num_aliases && b->idx < 0; k++)
      if (strcmp(be->aliases[k].name, name) == 0) {
        *b = (fa_binding){i, be->aliases[k].first_kernel, NULL};
        if (b->first_kernel < 0) *why = be->aliases[k].why;
      }
    for (int k = 0; k < be->num_kernels && b->idx < 0; k++)
      if (strcmp(be->kernels[k].name, name) == 0)
        *b = (fa_binding){i, 0, &be->kernels[k]};
  }
  return b->idx;
}

/* Append name to the list in out (used bytes at *at); 0 once full. */
static int add_name(char *out, size_t len, size_t *at, const char *name) {
  if (*at + strlen(name) + 7 >= len) {
    (void)snprintf(out + *at, len - *at, "%s...", *at ? ", " : "");
    return 0;
  }
  *at += (size_t)snprintf(out + *at, len - *at, "%s%s", *at ? ", " : "", name);
  return 1;
}

/* The names a context can be bound to here, as far as they fit: every
   backend and usable alias, then the kernels of the usable backends (a
   long table, the GPU's, as a count: fa_explain lists it). */
static void list_names(char *out, size_t len) {
  size_t at = 0;
  for (int i = 0; i < num_entries; i++) {
    const fa_backend *be = entries[i].backend;
    if (!add_name(out, len, &at, be->name)) return;
    const int aliases = be->api_version == FA_BACKEND_API_VERSION;
    for (int k = 0; aliases && k < be->num_aliases; k++)
      if (be->aliases[k].first_kernel >= 0 &&
          !add_name(out, len, &at, be->aliases[k].name))
        return;
  }
  for (int i = 0; i < num_entries; i++) {
    const fa_backend *be = entries[i].backend;
    char many[96];
    (void)snprintf(many, sizeof many, "%d %s.* kernels (fa_explain lists them)",
                   be->num_kernels, be->name);
    if (entries[i].usable && be->num_kernels > 8 &&
        !add_name(out, len, &at, many))
      return;
    for (int k = 0;
         entries[i].usable && be->num_kernels <= 8 && k < be->num_kernels; k++)
      if (!add_name(out, len, &at, be->kernels[k].name)) return;
  }
}

fa_status fa_registry_bind(const char *name, const char *source,
                           fa_binding *b) {
  ensure_init();
  const char *why = "";
  if (lookup(name, b, &why) < 0) {
    char known[320] = "none";
    list_names(known, sizeof known);
    return fa_fail(FA_ERR_NO_DEVICE,
                   "%s names \"%s\": no backend, alias or kernel of that "
                   "name is here (here: %s)",
                   source, name, known);
  }
  if (!entries[b->idx].usable || b->first_kernel < 0) {
    *b = (fa_binding){-1, 0, NULL};
    return fa_fail(FA_ERR_NO_DEVICE, "%s names \"%s\": not usable here: %s",
                   source, name, why);
  }
  return FA_OK;
}

/* The host has one device; GPU backends check theirs when a context opens. */
static fa_status check_device(int memory_space, int device) {
  if (memory_space == FA_MEMORY_HOST && device != 0)
    return fa_fail(FA_ERR_NO_DEVICE,
                   "device=%d: CPU backends have only device 0", device);
  return FA_OK;
}

fa_status fa_select_backends(fa_backend_kind kind, int device, int *idx, int *n,
                             fa_binding *forced) {
  ensure_init();
  *n = 0;
  *forced = (fa_binding){-1, 0, NULL};
  if (kind != FA_BACKEND_AUTO && kind != FA_BACKEND_CPU &&
      kind != FA_BACKEND_CUDA && kind != FA_BACKEND_HIP)
    return fa_fail(FA_ERR_INVALID_ARGUMENT, "kind=%d is not a fa_backend_kind",
                   (int)kind);
  if (device < 0)
    return fa_fail(FA_ERR_INVALID_ARGUMENT, "device=%d must be >= 0", device);

  const char *env = fa_config_string("FA_BACKEND");
  const char *unused;
  if (env && *env &&
      (kind == FA_BACKEND_AUTO || lookup(env, forced, &unused) < 0 ||
       entries[forced->idx].backend->kind == kind)) {
    fa_status s = fa_registry_bind(env, fa_config_source("FA_BACKEND"), forced);
    if (s) return s;
    if (log_dispatch)
      fa_log("%s forces %s", fa_config_source("FA_BACKEND"), env);
    idx[0] = forced->idx;
    *n = 1;
    return check_device(entries[idx[0]].backend->memory_space, device);
  }
  *forced = (fa_binding){-1, 0, NULL}; // (what lookup found is not bound)
  if (env && *env && log_dispatch)
    fa_log("%s=%s ignored: the context asks for kind %s",
           fa_config_source("FA_BACKEND"), env, fa_backend_kind_name(kind));

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
      (void)snprintf(why + l, sizeof why - l, "%s%s: %s", l ? "; " : "",
                     entries[i].backend->name, entries[i].why);
    }
    return fa_fail(FA_ERR_NO_DEVICE, "no usable %s backend%s%s",
                   fa_backend_kind_name(kind),
                   why[0] ? ": " : " is compiled in", why[0] ? why : "");
  }
  int space = entries[best].backend->memory_space;
  fa_status s = check_device(space, device);
  if (s) return s;
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
      "%s->%s b=%d sq=%d sk=%d hq=%d hkv=%d d=%d dv=%d causal=%d "
      "window=%d,%d softcap=%g alibi=%d sinks=%d varlen=%d seqused_k=%d "
      "paged=%d positions=%s descale=%d",
      fa_dtype_name(p->dtype), fa_dtype_name(p->dtype_out), a->batch,
      a->seqlen_q, a->seqlen_k, a->heads_q, a->heads_kv, a->head_dim,
      a->head_dim_v, a->causal, a->window_left, a->window_right,
      (double)a->softcap, a->alibi_slopes != NULL, a->sinks != NULL,
      p->varlen_q || p->varlen_k, a->seqused_k != NULL, p->paged,
      p->explicit_positions ? "explicit" : "aligned", p->descaled);
  return n < 0 ? 0 : (size_t)n;
}

/* Kernel k of backend b on query q: 1 if it runs q's problem and op;
   else 0 and why (why may be NULL with len 0). */
int fa_kernel_accepts(const fa_kernel *k, const fa_kernel_query *q, fa_op op,
                      const fa_kernel *only, char *why, size_t len) {
  if (only && k != only) {
    if (len)
      (void)snprintf(why, len, "the context is bound to kernel %s", only->name);
    return 0;
  }
  if (op == FA_OP_BACKWARD && !k->backward) {
    if (len) (void)snprintf(why, len, "no backward kernel");
    return 0;
  }
  if (len) why[0] = '\0';
  return k->supports(q, why, len);
}

/* One pass over the context's backends: the first backend with an
   accepting kernel wins, and within it the highest score (ties: table
   order). With reasons (len > 0) every skip is logged or collected. */
static int dispatch_pass(const fa_context *ctx, const fa_problem *p,
                         const fa_layout *layout, int log, char *all,
                         size_t all_len, int *slot, const fa_kernel **kernel) {
  char why[256];
  const size_t wl = all_len || log ? sizeof why : 0;
  for (int s = 0; s < ctx->n; s++) {
    const fa_backend *b = entries[ctx->idx[s]].backend;
    const fa_kernel_query q = {p, layout, ctx->state[s]};
    const fa_kernel *best = NULL;
    int best_score = 0;
    for (int k = ctx->first_kernel; k < b->num_kernels; k++) {
      const fa_kernel *kr = &b->kernels[k];
      if (!fa_kernel_accepts(kr, &q, layout->op, ctx->only_kernel,
                             wl ? why : NULL, wl)) {
        if (log) fa_log("  %s %s: skipped: %s", b->name, kr->name, why);
        // A context bound to one kernel fails with that kernel's reason
        // alone (the others' "bound to" would crowd it out).
        if (all_len && !(ctx->only_kernel && kr != ctx->only_kernel)) {
          size_t l = strlen(all);
          (void)snprintf(all + l, all_len - l, "%s%s %s: %s", l ? "; " : "",
                         b->name, kr->name, why);
        }
        continue;
      }
      int sc = kr->score ? kr->score(&q) : 0;
      if (log) fa_log("  %s %s: accepts (score %d)", b->name, kr->name, sc);
      if (!best || sc > best_score) {
        best = kr;
        best_score = sc;
      }
    }
    if (best) {
      if (log) fa_log("  %s %s: taken", b->name, best->name);
      *slot = s;
      *kernel = best;
      return 1;
    }
  }
  return 0;
}

fa_status fa_dispatch(const fa_context *ctx, const fa_problem *p,
                      const fa_layout *layout, int *slot,
                      const fa_kernel **kernel) {
  int log = fa_log_dispatch();
  if (log) {
    char desc[512];
    fa_problem_describe(p, desc, sizeof desc);
    fa_log("%s %s (alignment %d bytes)",
           layout->op == FA_OP_BACKWARD ? "backward" : "forward", desc,
           layout->align);
  }
  if (dispatch_pass(ctx, p, layout, log, NULL, 0, slot, kernel)) return FA_OK;
  // Nothing fits: only now format every reason for the error message.
  char all[2048] = "";
  dispatch_pass(ctx, p, layout, 0, all, sizeof all, slot, kernel);
  return fa_fail(FA_ERR_UNSUPPORTED,
                 "no kernel of this context supports the %s: %s",
                 layout->op == FA_OP_BACKWARD ? "backward" : "problem", all);
}
