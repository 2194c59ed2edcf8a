// SPDX-License-Identifier: MIT
// Run-time ISA detection. Compiled with baseline flags only: it must run on
// every CPU to tell which kernels may. Checks the OS saves the vector state
// too (XGETBV on x86, getauxval on Arm), not just the CPUID bits.
#define _DEFAULT_SOURCE 1 // syscall (arch_prctl for AMX)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cpu_detect.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xgetbv0(void) {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}

/* AVX2 (with FMA and F16C), and with avx512 AVX-512 F/DQ/BW/VL too. */
static int x86_has(int avx512, char *why, size_t len) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) {
    (void)snprintf(why, len, "CPUID leaf 1 unavailable");
    return 0;
  }
  const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  const int avx = (c >> 28) & 1;
  unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const int os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  unsigned b7 = 0, c7 = 0, d7 = 0, a7 = 0;
  __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
  const int avx2 = (b7 >> 5) & 1, avx512f = (b7 >> 16) & 1,
            avx512dq = (b7 >> 17) & 1, avx512bw = (b7 >> 30) & 1,
            avx512vl = (b7 >> 31) & 1;
  if (!(avx && avx2 && fma && f16c)) {
    (void)snprintf(why, len, "CPU lacks AVX2/FMA/F16C");
    return 0;
  }
  if (!os_ymm) {
    (void)snprintf(why, len, "OS does not save AVX state (XCR0=0x%llx)", xcr0);
    return 0;
  }
  if (!avx512) return 1;
  if (!(avx512f && avx512dq && avx512bw && avx512vl)) {
    (void)snprintf(why, len, "CPU lacks AVX-512 F/DQ/BW/VL");
    return 0;
  }
  if (!os_zmm) {
    (void)snprintf(why, len, "OS does not save AVX-512 state (XCR0=0x%llx)",
                   xcr0);
    return 0;
  }
  return 1;
}
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#endif

/* Bit `bit` of register reg (0 EAX, 1 EBX, 2 ECX, 3 EDX) of CPUID leaf 7,
   subleaf sub, where AVX-512 is usable; else 0. */
static int avx512_leaf7_bit(unsigned sub, int reg, int bit) {
#if defined(__x86_64__) || defined(__i386__)
  char why[128];
  if (!fa_cpu_isa_usable(FA_ISA_avx512, why, sizeof why)) return 0;
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(7, sub, &r[0], &r[1], &r[2], &r[3])) return 0;
  return (r[reg] >> bit) & 1;
#else
  (void)sub, (void)reg, (void)bit;
  return 0;
#endif
}

// CPUID.(EAX=7,ECX=1):EAX[5] = AVX512_BF16
int fa_cpu_has_avx512bf16(void) { return avx512_leaf7_bit(1, 0, 5); }
// CPUID.(EAX=7,ECX=0):ECX[1] = AVX512_VBMI
int fa_cpu_has_avx512vbmi(void) { return avx512_leaf7_bit(0, 2, 1); }

/* AMX: CPUID.(7,0):EDX bit 24 (AMX-TILE) and 22 (AMX-BF16); the OS must
   enable the tile state in XCR0 (bits 17, 18) and, on Linux, grant each
   process the right to use it (arch_prctl ARCH_REQ_XCOMP_PERM), or the
   first tile instruction faults. The request is made once per process;
   its answer is kept. */
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define FA_ARCH_REQ_XCOMP_PERM 0x1023
#define FA_XFEATURE_XTILEDATA 18
static int amx_permission(char *why, size_t len) {
  static _Atomic long answer = 1; // 1: not asked yet, else the syscall's
  long r = answer;
  if (r == 1) {
    r = syscall(SYS_arch_prctl, FA_ARCH_REQ_XCOMP_PERM, FA_XFEATURE_XTILEDATA);
    if (r != 0) r = -1; // (racing first calls both ask: the answer is the same)
    answer = r;
  }
  if (r != 0)
    (void)snprintf(why, len,
                   "the OS refused AMX tile state "
                   "(arch_prctl ARCH_REQ_XCOMP_PERM)");
  return r == 0;
}
#endif

int fa_cpu_amxbf16_usable(char *why, size_t len) {
#if defined(__x86_64__) && defined(__linux__)
  if (!fa_cpu_has_avx512bf16()) {
    (void)snprintf(why, len,
                   "CPU lacks AVX512-BF16 (the softmax between tiles)");
    return 0;
  }
#ifdef FA_AMX_EMULATE
  return 1; // a test build: the tile instructions are scalar C
#endif
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid_count(7, 0, &a, &b, &c, &d);
  if (!((d >> 24) & 1) || !((d >> 22) & 1)) {
    (void)snprintf(why, len, "CPU lacks AMX-TILE/AMX-BF16");
    return 0;
  }
  const unsigned long long xcr0 = xgetbv0();
  if ((xcr0 & 0x60000ull) != 0x60000ull) {
    (void)snprintf(why, len, "OS does not enable AMX tile state (XCR0=0x%llx)",
                   xcr0);
    return 0;
  }
  return amx_permission(why, len);
#else
  (void)snprintf(why, len, "AMX needs x86-64 Linux");
  return 0;
#endif
}

int fa_cpu_scalar_usable(char *why, size_t len) { return 1; }

int fa_cpu_avx2_usable(char *why, size_t len) {
#if defined(__x86_64__) || defined(__i386__)
  return x86_has(0, why, len);
#else
  (void)snprintf(why, len, "not an x86 CPU");
  return 0;
#endif
}

int fa_cpu_avx512_usable(char *why, size_t len) {
#if defined(__x86_64__) || defined(__i386__)
  return x86_has(1, why, len);
#else
  (void)snprintf(why, len, "not an x86 CPU");
  return 0;
#endif
}

int fa_cpu_avx512bf16_usable(char *why, size_t len) {
  if (fa_cpu_has_avx512bf16()) return 1;
  (void)snprintf(why, len, "CPU lacks AVX512-BF16");
  return 0;
}

int fa_cpu_neon_usable(char *why, size_t len) {
#if defined(__aarch64__) && defined(__linux__)
  if (getauxval(AT_HWCAP) & HWCAP_ASIMD) return 1;
  (void)snprintf(why, len, "HWCAP lacks ASIMD");
  return 0;
#elif defined(__aarch64__)
  return 1; // Advanced SIMD is mandatory in AArch64
#else
  (void)snprintf(why, len, "not an AArch64 CPU");
  return 0;
#endif
}

typedef struct isa_row {
  const char *name, *family;
  int level;
  int (*usable)(char *why, size_t len);
} isa_row;

static const isa_row isa_rows[] = {
#define FA_CPU_ISA(name, family, products, vec, level, usable, ...)            \
  {#name, #family, level, usable},
#include "cpu_isas.def"
#undef FA_CPU_ISA
};

const char *fa_cpu_isa_name(fa_cpu_isa isa) { return isa_rows[isa].name; }

/* The FA_CPU_MAX_ISA names: the rows that head a family. */
static int heads_family(const isa_row *r) {
  return strcmp(r->name, r->family) == 0;
}

/* FA_CPU_MAX_ISA=cap's level, or -1 with why (the names it may take). */
static int cap_level(const char *cap, char *why, size_t len) {
  for (int i = 0; i < FA_CPU_NUM_ISAS; i++)
    if (heads_family(&isa_rows[i]) && strcmp(cap, isa_rows[i].name) == 0)
      return isa_rows[i].level;
  int at = snprintf(why, len, "FA_CPU_MAX_ISA=%s is not one of", cap);
  const char *sep = " ";
  for (int i = 0; i < FA_CPU_NUM_ISAS && at >= 0 && (size_t)at < len; i++)
    if (heads_family(&isa_rows[i])) {
      at += snprintf(why + at, len - (size_t)at, "%s%s", sep, isa_rows[i].name);
      sep = ", ";
    }
  return -1;
}

int fa_cpu_isa_usable(fa_cpu_isa isa, char *why, size_t len) {
  const char *cap = fa_config_string("FA_CPU_MAX_ISA");
  if (cap && *cap) {
    const int level = cap_level(cap, why, len);
    if (level < 0) return 0;
    if (isa_rows[isa].level > level) {
      (void)snprintf(why, len, "capped by FA_CPU_MAX_ISA=%s", cap);
      return 0;
    }
  }
  return isa_rows[isa].usable(why, len);
}
