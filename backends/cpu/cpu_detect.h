// SPDX-License-Identifier: MIT
#ifndef FA_CPU_DETECT_H
#define FA_CPU_DETECT_H
#include <stddef.h>

typedef enum fa_cpu_isa {
  FA_ISA_SCALAR,
  FA_ISA_AVX2,
  FA_ISA_AVX512,
  FA_ISA_NEON
} fa_cpu_isa;

/* 1 if this CPU and OS run isa and FA_CPU_MAX_ISA allows it; else 0 and
   why. */
int fa_cpu_isa_usable(fa_cpu_isa isa, char *why, size_t len);
const char *fa_cpu_isa_name(fa_cpu_isa isa);
/* 1 if AVX-512 is usable (as above) and the CPU has AVX512-BF16. */
int fa_cpu_has_avx512bf16(void);
/* 1 if AMX-TILE and AMX-BF16 (with AVX512-BF16) run here and the OS granted
   this process the tile state; else 0 and why. */
int fa_cpu_amx_bf16_usable(char *why, size_t len);
/* FLOP/s of vdpbf16ps and of fp32 FMAs on this core (AVX-512), measured at
   the first call (about 1 ms), then kept. Only where
   fa_cpu_has_avx512bf16(). */
void fa_cpu_bf16_rates(double *dpbf16, double *fma);
#endif
