// SPDX-License-Identifier: MIT
// The rules of the bf16 product kernels (cpu.avx512bf16.bf16,
// cpu.amxbf16.bf16): which problems they take, how they score and plan.
// Baseline flags.
#include <stdio.h>

#include "config.h"
#include "cpu_detect.h"
#include "cpu_rules.h"
#include "dtype.h"
#include "registry.h" // fa_log: the measured rates behind a score

/* The bf16 product kernels multiply the stored values: bf16 inputs without
   descales (cpu.avx512.f32 widens, then descales). */
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
                   "cpu.avx512.f32 descales as it widens)",
                   unit);
    return 0;
  }
  return 1;
}

/* bf16 problems on CPUs with AVX512-BF16: products in vdpbf16ps. */
int fa_cpu_bf16_supports(const fa_kernel_query *q, char *why, size_t len) {
  if (!stored_bf16(q->problem, "vdpbf16ps", why, len)) return 0;
  if (!fa_cpu_isa_usable(FA_ISA_avx512bf16, why, len)) return 0;
  return fa_cpu_supports(q, why, len);
}

/* Chosen by measured rate, not by ISA name: vdpbf16ps retires twice the
   fp32 FMA FLOPs on some cores (Zen 4) and half on others (Sapphire
   Rapids), where widening to fp32 (cpu.avx512.f32, score 0) is faster. */
int fa_cpu_bf16_score(const fa_kernel_query *q) {
  double dp, fma;
  fa_cpu_bf16_rates(&dp, &fma);
  const int sc = dp > fma ? 1 : -1;
  if (fa_log_dispatch())
    fa_log(
        "  cpu.avx512bf16.bf16: vdpbf16ps measured %.0f GFLOP/s, fp32 FMA %.0f "
        "on this core: score %d (%s)",
        dp * 1e-9, fma * 1e-9, sc,
        sc > 0 ? "bf16 products are faster" : "widening to fp32 is faster");
  return sc;
}

/* The FP8 decode rows' q.k by vdpbf16ps (cpu_rows_fp8_dp.h): by the same
   measured rates, so that a core whose vdpbf16ps is slow keeps widening. */
int fa_cpu_fp8_dp_pays(void) {
  static _Atomic int answer = -1; // (racing first calls: the same answer)
  int a = answer;
  if (a >= 0) return a;
  const char *why = "FA_CPU_FP8_DPBF16=0";
  double dp = 0.0, fma = 0.0;
  a = 0;
  if (fa_config_string("FA_CPU_FP8_DPBF16") &&
      fa_config_int("FA_CPU_FP8_DPBF16") == 0)
    ;
  else if (!fa_cpu_has_avx512bf16() || !fa_cpu_has_avx512vbmi())
    why = "the CPU lacks AVX512-BF16 or AVX512-VBMI";
  else {
    fa_cpu_bf16_rates(&dp, &fma);
    a = dp > fma;
    why = a ? "vdpbf16ps measured faster than fp32 FMAs"
            : "vdpbf16ps measured slower than fp32 FMAs";
  }
  if (fa_log_dispatch())
    fa_log("  cpu FP8 decode rows: q.k %s (%s)",
           a ? "by vdpbf16ps" : "widened to fp32", why);
  answer = a;
  return a;
}

/* bf16 problems on CPUs with AMX-BF16: both tile products in TDPBF16PS
   (amx/amx_step.h), whose tiles are 32 values of d deep and 16 of dv
   wide. */
int fa_cpu_amx_supports(const fa_kernel_query *q, char *why, size_t len) {
  const fa_problem *p = q->problem;
  if (!stored_bf16(p, "TDPBF16PS", why, len)) return 0;
  if (!fa_cpu_isa_usable(FA_ISA_amxbf16, why, len)) return 0;
  if (p->a.head_dim % 32 || p->a.head_dim_v % 16) {
    (void)snprintf(why, len,
                   "head_dim %d / head_dim_v %d: AMX tiles need "
                   "multiples of 32 / 16",
                   p->a.head_dim, p->a.head_dim_v);
    return 0;
  }
  return fa_cpu_supports(q, why, len);
}

/* The vector plan with kv blocks up to 256 keys: P.V is then 8 pair tiles
   deep per load and store of its O tiles instead of 2 at 64 keys, and O is
   rescaled a quarter as often (the tile products are ~15x the vector
   rate, so what surrounds them is the cost). The backward's tiles hold
   one head each (no GQA packing), as cpu.avx512.f32's, and up to 256 rows:
   dV and dK then add 8 pair tiles per load and store of their C tiles
   (bench/NOTES.md: 107 ms against 134 at 128 rows, d128 s2048). */
fa_status fa_cpu_amx_plan(const fa_kernel_query *q, fa_plan_data *plan,
                          int vector_floats) {
  fa_caps caps = {0};
  fa_cpu_caps(q->state, &caps, vector_floats);
  caps.max_block_k = 256;
  if (q->layout && q->layout->op == FA_OP_BACKWARD) {
    caps.pack_gqa = 0;
    caps.max_block_q = 256;
  }
  fa_plan_compute(q->problem, &caps, plan);
  return FA_OK;
}

/* fa_cpu_amx_score (by measured rate) is in rate_amx.c. */
