// SPDX-License-Identifier: MIT
// The CPU backend, "cpu": one kernel body compiled per ISA, and the kernel
// table made from the rows of cpu_isas.def that this CPU runs, so that one
// dispatch (the kernels' scores: measured rates) chooses among ISAs and
// logs, plans and benches name the kernel. cpu.scalar.f32 (plain C11, any
// CPU) supports the whole fa_attention and is the model every faster kernel
// is checked against; the SIMD f32 ones support exactly the same problems.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_detect.h"
#include "cpu_internal.h"
#include "cpu_rules.h"
#include "fa_cpu_built.h" // FA_CPU_IF_<isa>: the ISAs this build has
#include "config.h"
#include "error.h"
#include "registry.h" // fa_log

#define FA_CPU_MAX_HEAD_DIM 512

int fa_cpu_threads(const fa_cpu_state *st) {
  if (st && st->threads > 0) return st->threads;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void *fa_cpu_workspace(fa_cpu_state *st, size_t bytes) {
  if (bytes <= st->workspace_bytes) return st->workspace;
  free(st->workspace);
  st->workspace = NULL;
  st->workspace_bytes = 0;
  size_t rounded = (bytes + 63) / 64 * 64;
  void *w = rounded >= bytes ? aligned_alloc(64, rounded) : NULL;
  if (!w) {
    fa_fail(FA_ERR_OUT_OF_MEMORY, "CPU workspace of %zu bytes: out of memory",
            bytes);
    return NULL;
  }
  st->workspace = w;
  st->workspace_bytes = rounded;
  return w;
}

static fa_status cpu_context_create(int device, void **state) {
  fa_cpu_state *st = calloc(1, sizeof *st);
  if (!st) return fa_fail(FA_ERR_OUT_OF_MEMORY, "CPU context: out of memory");
  *state = st;
  return FA_OK;
}

static void cpu_context_destroy(void *state) {
  fa_cpu_state *st = state;
  if (!st) return;
  free(st->workspace);
  free(st);
}

static fa_status cpu_set_threads(void *state, int n) {
  ((fa_cpu_state *)state)->threads = n;
  return FA_OK;
}

/* Tiles are sized to the per-core L2: the K/V tile is re-read for every
   query of the Q tile, and L1 is too small for fp32 tiles at d = 128. */
static size_t l2_bytes(void) {
#ifdef _SC_LEVEL2_CACHE_SIZE
  long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (v > 64 * 1024) return (size_t)v;
#endif
  return 512 * 1024;
}

void fa_cpu_caps(void *state, fa_caps *caps, int vector_floats) {
  caps->fast_mem_bytes = l2_bytes() / 2; // the rest streams K/V and O rows
  caps->num_workers = fa_cpu_threads(state);
  caps->tile_align = vector_floats;
  caps->max_block_q = vector_floats > 1 ? 128 : 64;
  caps->max_block_k = 64;
  caps->max_splits = 64;
  caps->pack_gqa = 1;
  caps->max_small_lanes = 64;
}

/* The CPU kernels' plan is the core's planner on this machine's caches and
   threads (backward tiles hold one head each). */
fa_status fa_cpu_vector_plan(const fa_kernel_query *q, fa_plan_data *plan,
                             int vector_floats) {
  fa_caps caps = {0};
  fa_cpu_caps(q->state, &caps, vector_floats);
  if (q->layout && q->layout->op == FA_OP_BACKWARD) caps.pack_gqa = 0;
  fa_plan_compute(q->problem, &caps, plan);
  return FA_OK;
}

int fa_cpu_supports(const fa_kernel_query *q, char *why, size_t len) {
  const fa_problem *p = q->problem;
  if (p->a.head_dim > FA_CPU_MAX_HEAD_DIM) {
    (void)snprintf(why, len, "head_dim %d > %d", p->a.head_dim,
                   FA_CPU_MAX_HEAD_DIM);
    return 0;
  }
  if (p->a.head_dim_v > FA_CPU_MAX_HEAD_DIM) {
    (void)snprintf(why, len, "head_dim_v %d > %d", p->a.head_dim_v,
                   FA_CPU_MAX_HEAD_DIM);
    return 0;
  }
  return 1;
}

/* Per built row: the plan with the row's vector width, the probe of its
   ISA, and the entry points: the driver over the row's work functions. */
#define FA_CPU_BWD_1(name) backward_##name
#define FA_CPU_BWD_0(name) NULL
#define FA_CPU_ISA(name, family, products, vec, level, usable, supports,       \
                   score, plan, bwd)                                           \
  FA_CPU_IF_##name(                                                            \
      static fa_status plan_##name(const fa_kernel_query *q,                   \
                                   fa_plan_data *plan_out) {                   \
        return plan(q, plan_out, vec);                                         \
      } static int probe_##name(char *why, size_t len) {                       \
        return fa_cpu_isa_usable(FA_ISA_##name, why, len);                     \
      } static fa_status forward_##name(void *state, const fa_problem *p,      \
                                        const fa_plan_data *pl,                \
                                        const fa_fwd_args *args) {             \
        return fa_cpu_drive_forward(&fa_cpu_ops_##name, state, p, pl, args);   \
      } FA_CPU_BWD_FN_##bwd(name))
#define FA_CPU_BWD_FN_0(name)
#define FA_CPU_BWD_FN_1(name)                                                  \
  static fa_status backward_##name(void *state, const fa_problem *p,           \
                                   const fa_plan_data *pl,                     \
                                   const fa_bwd_args *args) {                  \
    return fa_cpu_drive_backward(&fa_cpu_ops_##name, state, p, pl, args);      \
  }
#include "cpu_isas.def"
#undef FA_CPU_ISA

// clang-format off
/* Every built row: its kernel "cpu.<isa>.<products>", in table order. */
typedef struct cpu_row {
  fa_kernel kernel;
  const char *isa, *family, *alias; // alias "cpu-<isa>": a family head's
  int level;
  int (*probe)(char *why, size_t len);
} cpu_row;

static const cpu_row cpu_rows[] = {
#define FA_CPU_ISA(isa, family, products, vec, level_, usable, supports_,     \
                   score_, plan_fn, bwd)                                       \
  FA_CPU_IF_##isa({{.name = "cpu." #isa "." #products,                         \
                    .supports = (supports_), .score = (score_),                \
                    .plan = plan_##isa, .forward = forward_##isa,              \
                    .backward = FA_CPU_BWD_##bwd(isa)},                        \
                   #isa, #family, "cpu-" #isa, level_, probe_##isa},)
#include "cpu_isas.def"
#undef FA_CPU_ISA
};
// clang-format on

#define FA_CPU_NUM_ROWS (int)(sizeof cpu_rows / sizeof cpu_rows[0])

/* The backend's tables, filled once from the rows (below). */
static fa_kernel cpu_kernels[FA_CPU_NUM_ROWS];
static fa_backend_alias cpu_aliases[2 * FA_CPU_NUM_ROWS];
static char cpu_why[FA_CPU_NUM_ROWS][160]; // why a row does not run here
static int cpu_none;                       // no row runs: the probe says why

static int cpu_probe(char *why, size_t len) {
  if (cpu_none) (void)snprintf(why, len, "%s", cpu_why[FA_CPU_NUM_ROWS - 1]);
  return !cpu_none;
}

static int log_offers(void) {
  const char *log = fa_config_string("FA_LOG"); // (the registry is not up)
  return log && strstr(log, "dispatch");
}

/* The kernels of the rows this CPU runs (and FA_CPU_MAX_ISA allows), in
   table order. A family head's alias "cpu-<isa>" starts at the first kernel
   of its level or below (levels fall down the table); a row that does not
   run here keeps its names known with the reason, so binding them says
   why rather than "unknown". */
static void cpu_assemble(fa_backend *b) {
  int runs[FA_CPU_NUM_ROWS], level[FA_CPU_NUM_ROWS], nk = 0, na = 0;
  for (int i = 0; i < FA_CPU_NUM_ROWS; i++) {
    const cpu_row *r = &cpu_rows[i];
    runs[i] = r->probe(cpu_why[i], sizeof cpu_why[i]);
    if (!runs[i] && log_offers())
      fa_log("backend cpu: no kernel %s: %s", r->kernel.name, cpu_why[i]);
    if (runs[i]) {
      level[nk] = r->level;
      cpu_kernels[nk++] = r->kernel;
    }
  }
  for (int i = 0; i < FA_CPU_NUM_ROWS; i++) {
    const cpu_row *r = &cpu_rows[i];
    if (!runs[i])
      cpu_aliases[na++] = (fa_backend_alias){r->kernel.name, -1, cpu_why[i]};
    if (strcmp(r->isa, r->family) != 0) continue;
    int first = 0;
    while (first < nk && level[first] > r->level) first++;
    cpu_aliases[na++] =
        (fa_backend_alias){r->alias, runs[i] ? first : -1, cpu_why[i]};
  }
  cpu_none = nk == 0;
  b->kernels = cpu_kernels;
  b->num_kernels = nk;
  b->aliases = cpu_aliases;
  b->num_aliases = na;
}

static fa_backend cpu_backend = {
    .api_version = FA_BACKEND_API_VERSION,
    .name = "cpu",
    .kind = FA_BACKEND_CPU,
    .rank = 10,
    .memory_space = FA_MEMORY_HOST,
    .probe = cpu_probe,
    .context_create = cpu_context_create,
    .context_destroy = cpu_context_destroy,
    .set_threads = cpu_set_threads,
    .set_stream = NULL,
    .mem_alloc = fa_host_mem_alloc,
    .mem_free = fa_host_mem_free,
    .copy_to_device = fa_host_copy,
    .copy_to_host = fa_host_copy,
    .synchronize = fa_host_synchronize,
    .merge_states = fa_host_merge_states,
};
static const fa_backend *const cpu_backend_list[] = {&cpu_backend};

/* The backend, assembled at the first call (the registry makes it once,
   under its pthread_once). */
const fa_backend *const *fa_cpu_backends(int *count) {
  static int done;
  if (!done) cpu_assemble(&cpu_backend);
  done = 1;
  *count = 1;
  return cpu_backend_list;
}
