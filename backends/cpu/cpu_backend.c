// SPDX-License-Identifier: MIT
// The CPU backends: one kernel body (cpu_kernels.h) compiled per ISA, one
// backend per ISA so that dispatch, logs and benches name them apart.
// "cpu-scalar" (plain C11, any CPU) supports the whole fa_attention and is
// the model every faster backend is checked against; the SIMD ones support
// exactly the same problems.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_detect.h"
#include "cpu_internal.h"
#include "dtype.h"
#include "error.h"
#include "registry.h" // fa_log: the measured rates behind a score

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

static void caps_for(void *state, fa_caps *caps, int vector_floats) {
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
static fa_status plan_for(const fa_kernel_query *q, fa_plan_data *plan,
                          int vector_floats) {
  fa_caps caps = {0};
  caps_for(q->state, &caps, vector_floats);
  if (q->layout && q->layout->op == FA_OP_BACKWARD) caps.pack_gqa = 0;
  fa_plan_compute(q->problem, &caps, plan);
  return FA_OK;
}

/* Every CPU kernel: any layout, any dtype pair, every feature; only the
   head dimensions are bounded (the per-thread tiles). */
static int cpu_supports(const fa_kernel_query *q, char *why, size_t len) {
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

/* One backend per ISA: probe, plan and kernel table differ only in the
   ISA, its vector width and its rank. */
#define FA_CPU_KERNEL(isa)                                                     \
  {                                                                            \
    .name = "cpu." #isa, .supports = cpu_supports, .plan = plan_##isa,         \
    .forward = fa_cpu_forward_##isa, .backward = fa_cpu_backward_##isa         \
  }

#define FA_CPU_BACKEND(isa, ISA_ENUM, vec, rank_, ...)                         \
  static int probe_##isa(char *why, size_t len) {                              \
    return fa_cpu_isa_usable(ISA_ENUM, why, len);                              \
  }                                                                            \
  static fa_status plan_##isa(const fa_kernel_query *q, fa_plan_data *plan) {  \
    return plan_for(q, plan, vec);                                             \
  }                                                                            \
  static const fa_kernel kernels_##isa[] = {__VA_ARGS__};                      \
  static const fa_backend backend_##isa = {                                    \
      .api_version = FA_BACKEND_API_VERSION,                                   \
      .name = "cpu-" #isa,                                                     \
      .kind = FA_BACKEND_CPU,                                                  \
      .rank = rank_,                                                           \
      .memory_space = FA_MEMORY_HOST,                                          \
      .probe = probe_##isa,                                                    \
      .context_create = cpu_context_create,                                    \
      .context_destroy = cpu_context_destroy,                                  \
      .set_threads = cpu_set_threads,                                          \
      .set_stream = NULL,                                                      \
      .mem_alloc = fa_host_mem_alloc,                                          \
      .mem_free = fa_host_mem_free,                                            \
      .copy_to_device = fa_host_copy,                                          \
      .copy_to_host = fa_host_copy,                                            \
      .synchronize = fa_host_synchronize,                                      \
      .merge_states = fa_host_merge_states,                                    \
      .kernels = kernels_##isa,                                                \
      .num_kernels = sizeof kernels_##isa / sizeof kernels_##isa[0],           \
  };

#ifdef FA_HAVE_CPU_AVX512BF16
/* The bf16 product kernels multiply the stored values: bf16 inputs without
   descales (cpu.avx512 widens, then descales). */
static int stored_bf16(const fa_problem *p, const char *unit, char *why,
                       size_t len) {
  if (p->dtype != FA_BF16) {
    (void)snprintf(why, len, "input dtype %s is not bf16",
                   fa_dtype_name(p->dtype));
    return 0;
  }
  if (p->descaled) {
    (void)snprintf(why, len,
                   "descaled inputs (%s multiplies the stored values; "
                   "cpu.avx512 descales as it widens)",
                   unit);
    return 0;
  }
  return 1;
}

/* bf16 problems on CPUs with AVX512-BF16: products in vdpbf16ps. */
static int bf16_supports(const fa_kernel_query *q, char *why, size_t len) {
  if (!stored_bf16(q->problem, "vdpbf16ps", why, len)) return 0;
  if (!fa_cpu_has_avx512bf16()) {
    (void)snprintf(why, len, "CPU lacks AVX512-BF16");
    return 0;
  }
  return cpu_supports(q, why, len);
}

/* Chosen by measured rate, not by ISA name: vdpbf16ps retires twice the
   fp32 FMA FLOPs on some cores (Zen 4) and half on others (Sapphire
   Rapids), where widening to fp32 (cpu.avx512, score 0) is faster. */
static int bf16_score(const fa_kernel_query *q) {
  double dp, fma;
  fa_cpu_bf16_rates(&dp, &fma);
  const int sc = dp > fma ? 1 : -1;
  if (fa_log_dispatch())
    fa_log("  cpu.avx512bf16: vdpbf16ps measured %.0f GFLOP/s, fp32 FMA %.0f "
           "on this core: score %d (%s)",
           dp * 1e-9, fma * 1e-9, sc,
           sc > 0 ? "bf16 products are faster" : "widening to fp32 is faster");
  return sc;
}
#define FA_CPU_BF16_KERNEL                                                     \
  {.name = "cpu.avx512bf16",                                                   \
   .supports = bf16_supports,                                                  \
   .score = bf16_score,                                                        \
   .plan = plan_avx512,                                                        \
   .forward = fa_cpu_forward_avx512bf16,                                       \
   .backward = NULL},
#else
#define FA_CPU_BF16_KERNEL
#endif

#ifdef FA_HAVE_CPU_AMXBF16
/* bf16 problems on CPUs with AMX-BF16: both tile products in TDPBF16PS
   (amx/amx_step.h), whose tiles are 32 values of d deep and 16 of dv
   wide. */
static int amx_supports(const fa_kernel_query *q, char *why, size_t len) {
  const fa_problem *p = q->problem;
  if (!stored_bf16(p, "TDPBF16PS", why, len)) return 0;
  if (!fa_cpu_amx_bf16_usable(why, len)) return 0;
  if (p->a.head_dim % 32 || p->a.head_dim_v % 16) {
    (void)snprintf(why, len,
                   "head_dim %d / head_dim_v %d: AMX tiles need "
                   "multiples of 32 / 16",
                   p->a.head_dim, p->a.head_dim_v);
    return 0;
  }
  return cpu_supports(q, why, len);
}

/* The avx512 plan with kv blocks up to 256 keys: P.V is then 8 pair tiles
   deep per load and store of its O tiles instead of 2 at 64 keys, and O is
   rescaled a quarter as often (the tile products are ~15x the vector
   rate, so what surrounds them is the cost). */
static fa_status plan_amx(const fa_kernel_query *q, fa_plan_data *plan) {
  fa_caps caps = {0};
  caps_for(q->state, &caps, 16);
  caps.max_block_k = 256;
  fa_plan_compute(q->problem, &caps, plan);
  return FA_OK;
}

/* Before every vector kernel of the backend (they score 0 or less). */
static int amx_score(const fa_kernel_query *q) { return 2; }

#define FA_CPU_AMX_KERNEL                                                      \
  {.name = "cpu.amxbf16",                                                      \
   .supports = amx_supports,                                                   \
   .score = amx_score,                                                         \
   .plan = plan_amx,                                                           \
   .forward = fa_cpu_forward_amxbf16,                                          \
   .backward = NULL},
#else
#define FA_CPU_AMX_KERNEL
#endif

FA_CPU_BACKEND(scalar, FA_ISA_SCALAR, 1, 10, FA_CPU_KERNEL(scalar))
#ifdef FA_HAVE_CPU_AVX2
FA_CPU_BACKEND(avx2, FA_ISA_AVX2, 8, 20, FA_CPU_KERNEL(avx2))
#endif
#ifdef FA_HAVE_CPU_AVX512
static fa_status plan_avx512(const fa_kernel_query *q, fa_plan_data *plan);
FA_CPU_BACKEND(avx512, FA_ISA_AVX512, 16, 30,
               FA_CPU_AMX_KERNEL FA_CPU_BF16_KERNEL FA_CPU_KERNEL(avx512))
#endif
#ifdef FA_HAVE_CPU_NEON
FA_CPU_BACKEND(neon, FA_ISA_NEON, 4, 20, FA_CPU_KERNEL(neon))
#endif

static const fa_backend *const cpu_backends[] = {
#ifdef FA_HAVE_CPU_AVX512
    &backend_avx512,
#endif
#ifdef FA_HAVE_CPU_AVX2
    &backend_avx2,
#endif
#ifdef FA_HAVE_CPU_NEON
    &backend_neon,
#endif
    &backend_scalar,
};

const fa_backend *const *fa_cpu_backends(int *count) {
  *count = (int)(sizeof cpu_backends / sizeof cpu_backends[0]);
  return cpu_backends;
}
