// SPDX-License-Identifier: MIT
// The CPU kernels' rules (supports, score, plan), named by the rows of
// cpu_isas.def. Compiled with baseline flags: dispatch calls them on any CPU.
#ifndef FA_CPU_RULES_H
#define FA_CPU_RULES_H

#include "backend.h"

/* The caps of the core's planner on this machine's caches and threads, for
   tiles of vector_floats lanes. */
void fa_cpu_caps(void *state, fa_caps *caps, int vector_floats);

/* Every vector kernel: any layout, dtype pair and feature; only the head
   dimensions are bounded (the per-thread tiles). */
int fa_cpu_supports(const fa_kernel_query *q, char *why, size_t len);
fa_status fa_cpu_vector_plan(const fa_kernel_query *q, fa_plan_data *plan,
                             int vector_floats);

/* bf16 products in vdpbf16ps (cpu_rules_bf16.c). */
int fa_cpu_bf16_supports(const fa_kernel_query *q, char *why, size_t len);
int fa_cpu_bf16_score(const fa_kernel_query *q);

/* bf16 tile products on AMX (cpu_rules_bf16.c). */
int fa_cpu_amx_supports(const fa_kernel_query *q, char *why, size_t len);
int fa_cpu_amx_score(const fa_kernel_query *q);
fa_status fa_cpu_amx_plan(const fa_kernel_query *q, fa_plan_data *plan,
                          int vector_floats);
#endif
