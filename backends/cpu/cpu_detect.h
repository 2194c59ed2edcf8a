// SPDX-License-Identifier: MIT
#ifndef FA_CPU_DETECT_H
#define FA_CPU_DETECT_H
#include <stddef.h>

/* One value per row of cpu_isas.def, built or not (FA_ISA_<name>). */
typedef enum fa_cpu_isa {
#define FA_CPU_ISA(name, ...) FA_ISA_##name,
#include "cpu_isas.def"
#undef FA_CPU_ISA
  FA_CPU_NUM_ISAS
} fa_cpu_isa;

/* 1 if this CPU and OS run isa and FA_CPU_MAX_ISA allows it; else 0 and
   why. */
int fa_cpu_isa_usable(fa_cpu_isa isa, char *why, size_t len);
const char *fa_cpu_isa_name(fa_cpu_isa isa);

/* The table's detection predicates (without the FA_CPU_MAX_ISA cap, which
   fa_cpu_isa_usable adds): 1 if the row runs here, else 0 and why. */
#define FA_CPU_ISA(name, family, products, vec, level, usable, ...)            \
  int usable(char *why, size_t len);
#include "cpu_isas.def"
#undef FA_CPU_ISA

/* 1 if AVX-512 is usable (as above) and the CPU has AVX512-BF16. */
int fa_cpu_has_avx512bf16(void);
/* 1 if AVX-512 is usable and the CPU has AVX512-VBMI (vpermi2b). */
int fa_cpu_has_avx512vbmi(void);
/* 1 if the FP8 decode rows of cpu.avx512.f32 take q.k by vdpbf16ps
   (cpu_rows_fp8_dp.h): AVX512-BF16 and AVX512-VBMI here, vdpbf16ps
   measured faster than fp32 FMAs (fa_cpu_bf16_rates) and
   FA_CPU_FP8_DPBF16 not 0. Decided at the first call, then kept. Only
   where the avx512bf16 row is built (cpu_rules_bf16.c). */
int fa_cpu_fp8_dp_pays(void);
/* FLOP/s of vdpbf16ps and of fp32 FMAs on this core (AVX-512), measured at
   the first call (about 1 ms), then kept. Only where
   fa_cpu_has_avx512bf16(). */
void fa_cpu_bf16_rates(double *dpbf16, double *fma);
/* FLOP/s of one ~0.1 ms run of TDPBF16PS on this core (isa_amxbf16.c;
   adds a result to *sink). Only where the amxbf16 row is usable. */
double fa_cpu_amx_probe(float *sink);
#endif
